"""Sphinx extension: the C API reference, rendered from ddstore.h's comments.

``.. c-header:: ../libddstore/include/ddstore/ddstore.h`` reads the header and
emits Sphinx C-domain directives (``c:function``, ``c:struct``, ``c:enum``,
``c:macro``) whose text is the comment written above each declaration. The
header is the contract, so its comments are the only copy of the C API text:
nothing here is written twice and the reference cannot drift from the code.

Why not doxygen + breathe: two more tools for one header whose comment style
is plain and regular. What the header's style looks like, and so what this
parser understands:

* a ``/* ... */`` comment directly above a declaration documents it; one
  comment may cover several consecutive declarations (``dds_epoch_begin`` and
  ``dds_epoch_end``);
* ``/* ---- Title ---- */`` starts a section;
* enumerators and struct members carry a trailing ``/* ... */`` comment;
* in a comment, ``- item`` lines are a bullet list and ``  name   text`` lines
  (a name, two or more spaces, text) are a parameter list.

An exported declaration (``DDS_API``) without a comment is a build warning, so
``sphinx-build -W`` fails on an undocumented function.
"""

import os
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

_TOKEN = re.compile(
    r"(?P<comment>/\*.*?\*/)"
    r"|(?P<pp>^[ \t]*#[^\n]*(?:\\\n[^\n]*)*)"
    r"|(?P<extern>extern\s+\"C\"\s*\{)"
    r"|(?P<ws>\s+)"
    r"|(?P<code>[^/#\s][^;{]*(?:\{[^}]*\}[^;]*)?;|[^/#\s][^\n]*\n)",
    re.S | re.M,
)
_SECTION = re.compile(r"^-{2,}\s*(.*?)\s*-{2,}$")
_PARAM = re.compile(r"^(\w+)\s{2,}(\S.*)$")
_FIELD = re.compile(r"^\s*(?P<decl>[^;/]+?);\s*(?:/\*(?P<doc>.*?)\*/)?\s*$", re.S)
_ENUMERATOR = re.compile(r"^\s*(?P<name>\w+)\s*(?:=\s*(?P<value>[^,/]+?))?\s*,?\s*(?:/\*(?P<doc>.*?)\*/)?\s*$", re.S)


class Decl:
    """One documented item of the header."""

    def __init__(self, kind, name, signature, doc, members=(), line=0):
        self.kind = kind            # function, struct, enum, macro, type, section, intro
        self.name = name
        self.signature = signature
        self.doc = doc              # list of comment lines (stripped of /* * */)
        self.members = list(members)  # (signature, doc text) of enumerators / fields
        self.line = line


def _comment_lines(text):
    """The lines of a /* */ comment, without delimiters and leading ' * '."""
    body = text[2:-2]
    lines = body.split("\n")
    out = []
    for ln in lines:
        s = ln.rstrip()
        m = re.match(r"^\s*\* ?", s)
        if m and not s.strip().startswith("*/"):
            s = s[m.end():]
        elif out or s.strip():
            s = s.strip() if not out else s
        out.append(s)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    # Drop the common indentation.
    ind = min((len(ln) - len(ln.lstrip()) for ln in out if ln.strip()), default=0)
    return [ln[ind:] for ln in out]


def _squash(s):
    return re.sub(r"\s+", " ", s).strip()


def parse_header(text):
    """Parse ddstore.h-style C into a list of Decl, in header order.

    Returns (decls, undocumented): undocumented lists exported functions that
    have no comment of their own.
    """
    decls = []
    undocumented = []
    pending = None          # comment lines waiting for their declaration
    pending_used = False    # the pending comment documented the previous declaration
    first = True
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            # Unparsed text between tokens would be silently dropped; make it loud.
            raise ValueError(f"capi: cannot parse header near line {text.count(chr(10), 0, pos) + 1}")
        pos = m.end()
        line = text.count("\n", 0, m.start()) + 1
        kind = m.lastgroup
        tok = m.group(kind)
        if kind == "ws":
            if tok.count("\n") >= 2 and pending_used:
                pending, pending_used = None, False
            continue
        if kind == "comment":
            lines = _comment_lines(tok)
            if first:
                decls.append(Decl("intro", "", "", lines, line=line))
                first = False
                continue
            sec = _SECTION.match(" ".join(lines).strip())
            if sec and len(lines) == 1:
                decls.append(Decl("section", sec.group(1), "", [], line=line))
                pending, pending_used = None, False
                continue
            pending, pending_used = lines, False
            continue
        first = False
        if kind == "pp":
            d = re.match(r"^\s*#\s*define\s+(\w+)(?:\s+(.*))?$", tok.strip())
            if d and pending is not None:
                name, value = d.group(1), (d.group(2) or "").strip()
                decls.append(Decl("macro", name, name, pending,
                                  members=[("value", value)] if value else [], line=line))
            pending, pending_used = None, False
            continue
        code = tok.strip()
        if kind == "extern" or code == "}":
            continue
        if code.startswith("enum"):
            em = re.match(r"enum\s+(\w+)\s*\{(.*)\}\s*;", code, re.S)
            if not em:
                raise ValueError(f"capi: cannot parse enum at line {line}")
            members = []
            # Split enumerators at commas that end a line (comments may hold commas).
            for item in re.split(r",\s*(?=(?:/\*.*?\*/\s*)?\n)|\n", em.group(2)):
                item = item.strip().rstrip(",")
                if not item:
                    continue
                if item.startswith("/*"):
                    if members:  # a comment on the line after an enumerator's comma
                        sig, doc = members[-1]
                        members[-1] = (sig, _squash(doc + " " + item[2:-2]))
                    continue
                im = _ENUMERATOR.match(item)
                if not im:
                    raise ValueError(f"capi: cannot parse enumerator {item!r} at line {line}")
                sig = im.group("name") + (f" = {im.group('value').strip()}" if im.group("value") else "")
                members.append((sig, _squash(im.group("doc") or "")))
            decls.append(Decl("enum", em.group(1), em.group(1), pending or [], members, line))
            pending, pending_used = None, False
            continue
        if code.startswith("typedef struct"):
            sm = re.match(r"typedef\s+struct\s+(\w+)\s*\{(.*)\}\s*(\w+)\s*;", code, re.S)
            if sm:
                members = []
                for item in re.findall(r"[^;{}]+;[ \t]*(?:/\*.*?\*/)?", sm.group(2), re.S):
                    fm = _FIELD.match(item)
                    if fm:
                        members.append((_squash(fm.group("decl")), _squash(fm.group("doc") or "")))
                decls.append(Decl("struct", sm.group(3), sm.group(3), pending or [], members, line))
            else:
                om = re.match(r"typedef\s+struct\s+(\w+)\s+(\w+)\s*;", code)
                if not om:
                    raise ValueError(f"capi: cannot parse typedef at line {line}")
                decls.append(Decl("type", om.group(2), om.group(2), pending or [], line=line))
            pending, pending_used = None, False
            continue
        if code.startswith("DDS_API"):
            sig = _squash(code[len("DDS_API"):].rstrip(";"))
            fm = re.search(r"(\w+)\s*\(", sig)
            name = fm.group(1) if fm else sig
            if pending is None:
                undocumented.append((name, line))
            decls.append(Decl("function", name, sig, pending or [], line=line))
            if pending is not None:
                pending_used = True
            continue
        raise ValueError(f"capi: unexpected declaration at line {line}: {code[:60]!r}")
    if pos != len(text):
        raise ValueError("capi: trailing text not parsed")
    return decls, undocumented


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
        elif d.kind == "enum":
            out.extend(["", f".. c:enum:: {d.name}", ""])
            add(doc_to_rst(d.doc, link), "   ")
            for sig, doc in d.members:
                out.extend(["", f"   .. c:enumerator:: {sig}", ""])
                if doc:
                    add(["", link(doc), ""], "      ")
        elif d.kind == "type":
            out.extend(["", f".. c:struct:: {d.name}", ""])
            add(doc_to_rst(d.doc, link), "   ")
        elif d.kind == "struct":
            out.extend(["", f".. c:struct:: {d.name}", ""])
            add(doc_to_rst(d.doc, link), "   ")
            for sig, doc in d.members:
                out.extend(["", f"   .. c:member:: {sig}", ""])
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
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=path), node)
        return node.children


def setup(app):
    app.add_directive("c-header", CHeaderDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
