"""The one parser of libddstore's public header (include/ddstore/ddstore.h).

Everything that reads the header's declarations goes through this module, so
that a header change is understood the same way everywhere:

* docs/_ext/capi.py renders the C API reference from ``parse_header``;
* ci/abi-check.sh records ``abi_constants`` in libddstore/abi/ddstore-constants.txt
  (``python3 libddstore/abi/ddstore_header.py constants``);
* tests/fortran/check_module.py checks the Fortran module against
  ``constants``, ``functions`` and ``structs``;
* tests/python/core/test_abi_mirror.py checks pyddstore's ctypes mirror
  against the same.

Import it by path (``sys.path.insert(0, "<repo>/libddstore/abi")``): it is a
build and test tool, not part of any package, and needs only the standard
library.

What the header's style looks like, and so what the parser understands:

* a ``/* ... */`` comment directly above a declaration documents it; one
  comment may cover several consecutive declarations (``dds_epoch_begin`` and
  ``dds_epoch_end``);
* ``/* ---- Title ---- */`` starts a section;
* enumerators and struct members carry a trailing ``/* ... */`` comment;
* declarations are ``#define DDS_...``, ``enum name { ... };``,
  ``typedef struct name { ... } name;``, ``typedef struct name name;`` and
  ``DDS_API ...;`` functions. Anything else is an error, never silently
  skipped, so a reshuffled header cannot make a check vacuous.
"""

import os
import re
import sys

HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "include", "ddstore", "ddstore.h")

# Numeric macros that are not part of the ABI record: the ABI major is checked
# against the soname on its own, and the release version changes every release.
VERSION_MACROS = ("DDS_VERSION_MAJOR", "DDS_VERSION_MINOR", "DDS_VERSION_PATCH")
NOT_ABI_CONSTANTS = ("DDS_ABI_MAJOR",) + VERSION_MACROS

_TOKEN = re.compile(
    r"(?P<comment>/\*.*?\*/)"
    r"|(?P<pp>^[ \t]*#[^\n]*(?:\\\n[^\n]*)*)"
    r"|(?P<extern>extern\s+\"C\"\s*\{)"
    r"|(?P<ws>\s+)"
    r"|(?P<code>[^/#\s][^;{]*(?:\{[^}]*\}[^;]*)?;|[^/#\s][^\n]*\n)",
    re.S | re.M,
)
_SECTION = re.compile(r"^-{2,}\s*(.*?)\s*-{2,}$")
_MEMBER_TOKEN = re.compile(r"(?P<comment>/\*.*?\*/)|(?P<decl>[^;/]+;)|(?P<ws>\s+)", re.S)
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


def _struct_members(body, line):
    """[(declaration, doc)] of a struct body. A comment on a member's line
    (and its continuation lines) documents it; a comment on lines of its own
    ("Since ABI 1.2:") opens the doc of the member after it."""
    members, note, trailing, pos = [], "", False, 0
    for m in _MEMBER_TOKEN.finditer(body):
        if m.start() != pos:
            break
        pos = m.end()
        if m.lastgroup == "decl":
            members.append((_squash(m.group("decl")[:-1]), note))
            note, trailing = "", True
        elif m.lastgroup == "comment":
            text = _squash(m.group("comment")[2:-2])
            if trailing:
                members[-1] = (members[-1][0], _squash(members[-1][1] + " " + text))
            else:
                note = _squash(note + " " + text)
            trailing = False
        elif "\n" in m.group("ws"):
            trailing = False
    if pos != len(body):
        raise ValueError(f"cannot parse the struct members at line {line}")
    return members


def parse_header(text):
    """Parse ddstore.h-style C into a list of Decl, in header order.

    Returns (decls, undocumented): undocumented lists exported functions and
    DDS_ macros that have no comment of their own, as (name, line).
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
            raise ValueError(f"cannot parse header near line {text.count(chr(10), 0, pos) + 1}")
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
            if d and (pending is not None or d.group(1).startswith("DDS_")):
                name, value = d.group(1), (d.group(2) or "").strip()
                if pending is None:
                    undocumented.append((name, line))
                decls.append(Decl("macro", name, name, pending or [],
                                  members=[("value", value)] if value else [], line=line))
            # One comment may cover consecutive #defines (DDS_VERSION_*), as for functions.
            if pending is not None:
                pending_used = True
            continue
        code = tok.strip()
        if kind == "extern" or code == "}":
            continue
        if code.startswith("enum"):
            em = re.match(r"enum\s+(\w+)\s*\{(.*)\}\s*;", code, re.S)
            if not em:
                raise ValueError(f"cannot parse enum at line {line}")
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
                    raise ValueError(f"cannot parse enumerator {item!r} at line {line}")
                sig = im.group("name") + (f" = {im.group('value').strip()}" if im.group("value") else "")
                members.append((sig, _squash(im.group("doc") or "")))
            decls.append(Decl("enum", em.group(1), em.group(1), pending or [], members, line))
            pending, pending_used = None, False
            continue
        if code.startswith("typedef struct"):
            sm = re.match(r"typedef\s+struct\s+(\w+)\s*\{(.*)\}\s*(\w+)\s*;", code, re.S)
            if sm:
                members = _struct_members(sm.group(2), line)
                decls.append(Decl("struct", sm.group(3), sm.group(3), pending or [], members, line))
            else:
                om = re.match(r"typedef\s+struct\s+(\w+)\s+(\w+)\s*;", code)
                if not om:
                    raise ValueError(f"cannot parse typedef at line {line}")
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
        raise ValueError(f"unexpected declaration at line {line}: {code[:60]!r}")
    if pos != len(text):
        raise ValueError("trailing text not parsed")
    return decls, undocumented


def load(path=HEADER):
    """parse_header of the file at path (default: this checkout's header)."""
    with open(path, encoding="utf-8") as f:
        return parse_header(f.read())


def constants(decls):
    """{name: int} of every enumerator and numeric DDS_ macro, in header order."""
    out = {}
    for d in decls:
        if d.kind == "enum":
            value = -1
            for sig, _ in d.members:
                name, _, v = sig.partition("=")
                value = int(v.strip(), 0) if v.strip() else value + 1
                out[name.strip()] = value
        elif d.kind == "macro" and d.name.startswith("DDS_") and d.members:
            if re.fullmatch(r"-?\d+", d.members[0][1]):
                out[d.name] = int(d.members[0][1])
    return out


def abi_constants(decls):
    """constants() less NOT_ABI_CONSTANTS: what libddstore/abi/ddstore-constants.txt records."""
    return {k: v for k, v in constants(decls).items() if k not in NOT_ABI_CONSTANTS}


def functions(decls):
    """{name: [parameter declarations]} of every DDS_API function."""
    out = {}
    for d in decls:
        if d.kind == "function":
            m = re.search(r"\((.*)\)\s*$", d.signature)
            params = [p.strip() for p in (m.group(1) if m else "").split(",")]
            out[d.name] = [p for p in params if p not in ("", "void")]
    return out


def structs(decls):
    """{name: [(member, C type)]} of every public struct; the type of
    `const char *name` is "const char *"."""
    out = {}
    for d in decls:
        if d.kind == "struct":
            members = []
            for sig, _ in d.members:
                m = re.fullmatch(r"(.+?)\s*(\*?)\s*(\w+)", sig)
                if not m:
                    raise ValueError(f"cannot parse member {sig!r} of {d.name}")
                members.append((m.group(3), m.group(1) + (" *" if m.group(2) else "")))
            out[d.name] = members
    return out


def main(argv):
    if len(argv) not in (2, 3) or argv[1] != "constants":
        sys.exit("usage: ddstore_header.py constants [header]   (NAME=value lines of the ABI record)")
    decls, _ = load(argv[2] if len(argv) == 3 else HEADER)
    consts = abi_constants(decls)
    for name in sorted(consts):
        print(f"{name}={consts[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
