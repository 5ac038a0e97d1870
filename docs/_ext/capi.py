"""Sphinx extension: the C API reference, rendered from ddstore.h's comments.

``.. c-header:: ../libddstore/include/ddstore/ddstore.h`` reads the header and
emits Sphinx C-domain directives (``c:function``, ``c:struct``, ``c:enum``,
``c:macro``) whose text is the comment written above each declaration. The
header is the contract, so its comments are the only copy of the C API text:
nothing here is written twice and the reference cannot drift from the code.

Why not doxygen + breathe: two more tools for one header whose comment style
is plain and regular. The header is parsed by libddstore/abi/ddstore_header.py,
the one parser of it that the ABI check and the binding tests use too (its
docstring says what it understands); this extension renders its declarations.
In a comment, ``- item`` lines are a bullet list and ``  name   text`` lines
(a name, two or more spaces, text) are a parameter list.

An exported declaration (``DDS_API``) or ``DDS_`` macro without a comment is a
build warning, so ``sphinx-build -W`` fails on an undocumented one.
"""

import os
import re
import sys

from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "libddstore", "abi"))
from ddstore_header import parse_header  # noqa: E402  (the one header parser)
from rstnodes import parse_lines  # noqa: E402

logger = logging.getLogger(__name__)
_PARAM = re.compile(r"^(\w+)\s{2,}(\S.*)$")


class Linker:
    """Turns plain comment text into reST: escapes markup characters and
    links names the header declares."""

    def __init__(self, decls):
        self.roles = {}
        for d in decls:
            if d.kind == "function":
                self.roles[d.name] = "c:func"
            elif d.kind in ("struct", "type"):
                self.roles[d.name] = "c:type"
            elif d.kind == "macro":
                self.roles[d.name] = "c:macro"
            elif d.kind == "enum":
                self.roles[d.name] = "c:enum"
                for sig, _ in d.members:
                    self.roles[sig.split("=")[0].strip()] = "c:enumerator"
        self._word = re.compile(r"`([^`]+)`|(\*\w+\(\))|\b(\w+(?:\.\w+)*)(\(\))?|([*\\|_])")

    def __call__(self, text):
        out = []
        pos = 0
        for m in self._word.finditer(text):
            out.append(text[pos:m.start()])
            pos = m.end()
            if m.group(1) is not None:       # `code` in a comment
                out.append(f"``{m.group(1)}``")
            elif m.group(2) is not None:     # a pattern such as *_init()
                out.append(f"``{m.group(2)}``")
            elif m.group(3) is not None:
                word, call = m.group(3), m.group(4) or ""
                role = self.roles.get(word)
                if role is None and re.fullmatch(r"P?DDSTORE_[A-Z0-9_]*[A-Z0-9]", word):
                    role = "envvar"  # defined in the environment-variable table
                if role:
                    # :c:func: renders its own parentheses.
                    # A role's end-string cannot be followed by "(": escape the gap.
                    out.append(f":{role}:`{word}`" + ("" if role == "c:func" or not call else "\\ " + call))
                    # Nor by a character such as "=" (DDSTORE_NODE_LOCAL=0): the same escape.
                    if not call and pos < len(text) and re.match(r"[^\s.,;:!?)\]'\"/-]", text[pos]):
                        out.append("\\ ")
                elif call:
                    out.append(f"``{word}()``")
                elif word.endswith("_"):
                    out.append(word[:-1] + "\\_")
                else:
                    out.append(word)
            else:
                out.append("\\" + m.group(5))
        out.append(text[pos:])
        return "".join(out)


def doc_to_rst(lines, link, params_as_fields=False):
    """Comment lines -> reST lines: paragraphs, bullet lists, parameter lists."""
    blocks = []   # (kind, [text pieces]); kind: para, item, param
    for raw in lines + [""]:
        s = raw.rstrip()
        if not s.strip():
            blocks.append(("blank", []))
            continue
        indent = len(s) - len(s.lstrip())
        t = s.strip()
        pm = _PARAM.match(t)
        if t.startswith("- "):
            blocks.append(("item", [t[2:]], indent))
        elif pm and indent >= 1 and (not blocks or blocks[-1][0] in ("param", "para", "blank")):
            blocks.append(("param", [pm.group(1), pm.group(2)], indent))
        elif blocks and blocks[-1][0] in ("item", "param") and indent > blocks[-1][2]:
            blocks[-1][1].append(t)
        elif blocks and blocks[-1][0] == "para":
            blocks[-1][1].append(t)
        else:
            blocks.append(("para", [t], indent))
    out = []
    prev = None
    for b in blocks:
        kind = b[0]
        if kind == "blank":
            prev = None
            continue
        if kind != prev or kind == "para":
            out.append("")
        if kind == "para":
            out.append(link(" ".join(b[1])))
        elif kind == "item":
            out.append("* " + link(" ".join(b[1])))
        elif kind == "param":
            name, text = b[1][0], " ".join(b[1][1:])
            if params_as_fields:
                out.append(f":param {name}: {link(text)}")
            else:
                out.append(f"``{name}``")
                out.append(f"   {link(text)}")
        prev = kind
    out.append("")
    return out


# Declarations rendered as a directive with one nested directive per member
# (an opaque "type" has no members).
_AGGREGATE = {"enum": ("c:enum", "c:enumerator"), "struct": ("c:struct", "c:member"),
              "type": ("c:struct", "c:member")}


def render(decls, link):
    """reST lines for the whole header."""
    out = []

    def add(lines, indent=""):
        out.extend(indent + ln if ln else "" for ln in lines)

    in_section = False
    for d in decls:
        if d.kind == "intro":
            out.extend(["", "Conventions", "-----------", ""])
            add(doc_to_rst(d.doc, link))
            continue
        if d.kind != "section" and not in_section:
            out.extend(["", "Constants and types", "-------------------", ""])
            in_section = True
        if d.kind == "section":
            in_section = True
            title = d.name
            out.extend(["", title, "-" * len(title), ""])
        elif d.kind == "macro":
            out.extend(["", f".. c:macro:: {d.name}", ""])
            body = doc_to_rst(d.doc, link)
            if d.members:
                body += ["", f"Value: ``{d.members[0][1]}``", ""]
            add(body, "   ")
        elif d.kind in _AGGREGATE:
            directive, member = _AGGREGATE[d.kind]
            out.extend(["", f".. {directive}:: {d.name}", ""])
            add(doc_to_rst(d.doc, link), "   ")
            for sig, doc in d.members:
                out.extend(["", f"   .. {member}:: {sig}", ""])
                if doc:
                    add(["", link(doc), ""], "      ")
        elif d.kind == "function":
            out.extend(["", f".. c:function:: {d.signature}", ""])
            add(doc_to_rst(d.doc, link, params_as_fields=True), "   ")
    return out


class CHeaderDirective(SphinxDirective):
    """``.. c-header:: path`` (relative to the document): the header's API."""

    required_arguments = 1
    has_content = False
    option_spec = {"debug-dump": directives.unchanged}

    def run(self):
        rel, path = self.env.relfn2path(self.arguments[0])
        self.env.note_dependency(rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            decls, undocumented = parse_header(text)
        except ValueError as e:
            raise self.error(f"{path}: {e}")
        for name, line in undocumented:
            logger.warning("%s has no comment in %s (line %d): document it in the header",
                           name, os.path.basename(path), line, location=(self.env.docname, self.lineno))
        lines = render(decls, Linker(decls))
        dump = self.options.get("debug-dump")
        if dump:
            with open(dump, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
        return parse_lines(self, lines, path)


def setup(app):
    app.add_directive("c-header", CHeaderDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
