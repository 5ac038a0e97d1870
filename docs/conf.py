"""Sphinx configuration of the pyddstore documentation.

Built by ci/docs.sh with ``sphinx-build -W -n``: every warning, and every
cross-reference that does not resolve, fails the build.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "_ext"))

# One version number: libddstore/VERSION, which meson.build reads too.
with open(os.path.join(ROOT, "libddstore", "VERSION"), encoding="ascii") as f:
    release = f.read().strip()
version = ".".join(release.split(".")[:2])

project = "pyddstore"
author = "the pyddstore developers"
copyright = "the pyddstore developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "capi",
    "docstrings",
    "benchresults",
]

exclude_patterns = ["_build", "requirements.txt", "**/README.md"]
templates_path = []
html_static_path = []
html_theme = "furo"
html_title = f"pyddstore {release}"
# No copies of the sources next to the pages: viewcode renders them instead.
html_copy_source = False
html_show_sourcelink = False

primary_domain = "py"
default_role = "code"
nitpicky = True
highlight_language = "none"

autodoc_member_order = "bysource"
autodoc_typehints = "none"       # the docstrings say what each argument is
# Only options that are switched on may appear here: autodoc reads a key
# that is present as "on", whatever its value.
autodoc_default_options = {"members": True}
autodoc_inherit_docstrings = False
# No napoleon: its NumPy sections swallow the prose written after them and
# its Google mode reads "text: more text" first lines as types. The docstrings
# extension (docs/_ext/docstrings.py) handles both styles' headers instead.

# Names outside this project (numpy, torch, mpi4py, pyarrow, the standard
# library) have no inventory here: the build runs without network, so no
# intersphinx. Only those are exempt from -n; our own names must resolve.
nitpick_ignore = [
    ("c:identifier", "int8_t"), ("c:identifier", "uint8_t"),
    ("c:identifier", "int32_t"), ("c:identifier", "uint32_t"),
    ("c:identifier", "int64_t"), ("c:identifier", "uint64_t"),
    ("c:identifier", "size_t"),
]
nitpick_ignore_regex = [
    (r"py:.*", r"(np|numpy|torch|mpi4py|MPI|pa|pc|pq|pyarrow|fsspec|PIL|typing|collections|pickle|"
                r"pickletools|importlib|ctypes|threading|os|io|json|re)(\..*)?"),
    (r"py:class", r"(int|float|str|bool|bytes|list|tuple|dict|object|type|None|Exception|"
                  r"ValueError|KeyError|TypeError|IndexError|RuntimeError|TimeoutError|"
                  r"NotImplementedError|BaseException|NamedTuple|Optional|Tuple|os\.PathLike)"),
]

# Bench results are written by bench/ and may not exist in a fresh clone.
_summary = os.path.join(ROOT, "bench", "results", "summary.md")
rst_prolog = ""
