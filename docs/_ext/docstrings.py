"""Sphinx extension: read pyddstore's plain-text docstrings as reST.

The team writes docstrings as plain text meant for ``help()``: ``(window,
*field_shape)``, ``**DataLoader_kwargs``, ``DDS_E*``. reST would read each
lone ``*`` as the start of an emphasis that never ends and warn, and the
build runs with ``-W``. This hook escapes every ``*`` that does not open a
well-formed ``*emphasis*`` or ``**strong**`` span, outside inline literals
and roles. Two more things, both so that the docstrings' own conventions read well:

* NumPy-style section headers (a line underlined with ``---``) would be reST
  section titles inside a docstring, which docutils refuses; they become
  rubrics. The ``name : type`` entries under them are then reST definition
  lists with a classifier, which is what they look like anyway.
* An indented, code-like block (``from x import y``, ``name = ...``,
  ``f(...)``) after a paragraph that does not end with ``::`` is an example
  written for ``help()``; it becomes a literal block instead of a block
  quote whose code lines docutils would reject.
* Unqualified cross-references between our own modules (``:class:`ElasticSampler```
  written in ``pyddstore.torch.adaptive.resume``) resolve to the one documented object
  of that name in ``pyddstore``, if exactly one exists; anything else stays
  unresolved and fails the ``-n`` build.

Structure (lists, paragraphs, indentation) is otherwise the docstring's own,
and its warnings are real.
"""

import re

# Inline literals (which may span lines), roles (:class:`X`), interpreted
# text (`x`), well-formed emphasis/strong and bullet markers are kept as they
# are; a lone * is escaped.
_KEEP = re.compile(
    r"``.+?``"
    r"|:[\w:.+-]+:`[^`]+`"
    r"|`[^`]+`_{0,2}"
    r"|(?<![\w*\\])\*\*[^\s*](?:[^*\n]*?[^\s*])?\*\*(?![\w*])"
    r"|(?<![\w*\\])\*[^\s*](?:[^*\n]*?[^\s*])?\*(?![\w*])"
    r"|^[ \t]*\*(?=[ \t])"
    r"|\\."
    r"|(?P<star>\*)",
    re.S | re.M,
)


def escape_text(text):
    """Docstring text (no literal blocks) with its lone ``*`` escaped."""
    return _KEEP.sub(lambda m: "\\*" if m.group("star") else m.group(0), text)


def escape_line(line):
    """One line; see escape_text."""
    return escape_text(line)


def _escape_stars(lines):
    """Escape lone * in place, leaving literal blocks (after ::) and doctest
    lines alone."""
    out = []
    chunk = []

    def flush():
        if chunk:
            out.extend(escape_text("\n".join(chunk)).split("\n"))
            chunk.clear()

    in_literal = False
    literal_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if in_literal and stripped and indent <= literal_indent:
            in_literal = False
        if in_literal or stripped.startswith((">>>", "... ")):
            flush()
            out.append(line)
            continue
        chunk.append(line)
        if stripped.endswith("::") or stripped.startswith(".. code"):
            flush()
            in_literal, literal_indent = True, indent
    flush()
    lines[:] = out


def _rubrics(lines):
    """Turn underlined NumPy-style section headers into rubrics, in place."""
    i = 0
    while i + 1 < len(lines):
        title, under = lines[i], lines[i + 1]
        t = title.strip()
        u = under.strip()
        if (t and u and set(u) == {"-"} and len(u) >= 3 and len(u) >= len(t) - 2
                and (len(title) - len(title.lstrip())) == (len(under) - len(under.lstrip()))):
            indent = title[: len(title) - len(title.lstrip())]
            lines[i:i + 2] = [f"{indent}.. rubric:: {t}", ""]
            if i + 2 < len(lines) and lines[i + 2].strip():
                lines.insert(i + 2, "")
        i += 1


_GOOGLE_HEADERS = ("Parameters:", "Args:", "Arguments:", "Keyword arguments:")
_GOOGLE_ENTRY = re.compile(r"^(\*{0,2}\w+)(?:\s*\(([^)]*)\))?:\s*(.*)$")


def _google_params(lines):
    """Turn Google-style ``Parameters:`` blocks into ``:param name:`` fields, in place."""
    i = 0
    while i < len(lines):
        head = lines[i]
        if head.strip() not in _GOOGLE_HEADERS:
            i += 1
            continue
        base = len(head) - len(head.lstrip())
        j = i + 1
        entries = []
        entry_indent = None
        while j < len(lines):
            ln = lines[j]
            if not ln.strip():
                # A blank line ends the block unless an entry continues after it.
                k = j + 1
                if k < len(lines) and entry_indent is not None and lines[k].strip() and \
                        len(lines[k]) - len(lines[k].lstrip()) >= entry_indent:
                    j += 1
                    continue
                break
            ind = len(ln) - len(ln.lstrip())
            if ind <= base:
                break
            m = _GOOGLE_ENTRY.match(ln.strip())
            if entry_indent is None:
                entry_indent = ind
            if ind == entry_indent and m:
                entries.append([m.group(1), m.group(2), m.group(3)])
            elif entries:
                entries[-1][2] += " " + ln.strip()
            else:
                break
            j += 1
        if not entries:
            i += 1
            continue
        pad = " " * base
        new = [""]
        for name, typ, text in entries:
            new.append(f"{pad}:param {name}: {text}")
            if typ:
                new.append(f"{pad}:type {name}: {typ}")
        new.append("")
        lines[i:j] = new
        i += len(new)


_CODE_START = re.compile(r"^\s+(from \w|import \w|[\w.\[\]\"']+\s*=[^=]|[\w.]+\(.*\)\s*(#.*)?$|"
                         r"for .*:|with .*:|if .*:|def |class |>>> |# )")


def _literal_code(lines):
    """An indented, code-like block after a blank line whose paragraph does
    not end with "::" is an example written for help(): make it literal."""
    i = 1
    while i < len(lines):
        prev_blank = not lines[i - 1].strip()
        ln = lines[i]
        if prev_blank and _CODE_START.match(ln):
            indent = len(ln) - len(ln.lstrip())
            # The paragraph before the blank line.
            j = i - 2
            while j >= 0 and not lines[j].strip():
                j -= 1
            if j >= 0:
                pind = len(lines[j]) - len(lines[j].lstrip())
                if pind < indent and not lines[j].rstrip().endswith("::") \
                        and not lines[j].strip().startswith(".."):
                    lines.insert(i - 1, " " * pind + "::")
                    lines.insert(i - 1, "")
                    i += 2
            # Skip the block.
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) >= indent):
                i += 1
            continue
        i += 1


def _process(app, what, name, obj, options, lines):
    _rubrics(lines)
    _google_params(lines)
    _literal_code(lines)
    _escape_stars(lines)


def _resolve_short(app, env, node, contnode):
    """missing-reference: an unqualified name of ours, if it is unique."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target or target.startswith(("pyddstore.", "~")):
        return None
    domain = env.get_domain("py")
    tail = "." + target
    found = [name for name in domain.objects
             if name.startswith("pyddstore") and name.endswith(tail)]
    if len(found) != 1:
        return None
    from sphinx.util.nodes import make_refnode
    obj = domain.objects[found[0]]
    return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, found[0])


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    app.connect("missing-reference", _resolve_short)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
