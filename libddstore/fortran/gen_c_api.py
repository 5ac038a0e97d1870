"""Write the C-ABI part of the Fortran module `ddstore` from ddstore.h.

    python3 libddstore/fortran/gen_c_api.py <ddstore.h> <out.inc>

ddstore.f90 includes the output (meson generates it into the build directory):
a parameter for every enumerator and numeric DDS_ macro of the header (less
the release version macros: Fortran code asks dds_version()), a bind(C)
derived type per public struct (members in order, initialised to 0 or
c_null_ptr unless MEMBER_DEFAULTS says otherwise) and one bind(C)
interface per DDS_API function, in header order, read with the one
header parser (libddstore/abi/ddstore_header.py). So the binding cannot drift
from the header and is not written out 36 times by hand; the mapping below
is the one ddstore.f90's opening comment documents:
  T **out                  type(c_ptr)                 (by reference)
  T * (any other pointer)  type(c_ptr), value          (c_loc(x) or c_null_ptr)
  const char *             character(kind=c_char) :: x(*)  ("x"//c_null_char)
  scalars                  integer/real of the C kind, value (unsigned as signed)
  returns                  int: integer(c_int); const char *: type(c_ptr); void: subroutine
with the exceptions in EXCEPTIONS (arguments whose Fortran form predates the
generator and is part of the module's API).
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "abi"))
import ddstore_header  # noqa: E402

SCALAR = {"int": "integer(c_int)", "int32_t": "integer(c_int32_t)", "uint32_t": "integer(c_int32_t)",
          "int64_t": "integer(c_int64_t)", "uint64_t": "integer(c_int64_t)",
          "size_t": "integer(c_size_t)", "double": "real(c_double)"}
# (function, argument) -> Fortran declaration, where the rule above is not used.
EXCEPTIONS = {
    ("dds_join", "handshake_dir"): "type(c_ptr), value",     # may be NULL (the environment's)
    ("dds_verify_saved", "bad_blocks"): "integer(c_int64_t)",  # by reference
}
# Struct members' initial values other than 0 / c_null_ptr.
MEMBER_DEFAULTS = {("dds_options", "method"): "DDS_METHOD_DEFAULT"}
# Enums passed as int (return codes); the others cross the ABI as int32_t/uint32_t.
INT_ENUMS = {"dds_error"}


def kinds(decl):
    return re.findall(r"\b(c_\w+)\b", decl)


def fortran_arg(func, param):
    m = re.fullmatch(r"(.+?)\s*(\**)\s*(\w+)", param)
    ctype, stars, name = " ".join(m.group(1).replace("const", "").split()), m.group(2), m.group(3)
    if (func, name) in EXCEPTIONS:
        return name, EXCEPTIONS[(func, name)], ""
    if stars == "**":
        return name, "type(c_ptr)", ""
    if stars == "*" and ctype == "char" and "const" in m.group(1):
        return name, "character(kind=c_char)", "(*)"
    if stars:
        return name, "type(c_ptr), value", ""
    return name, SCALAR[ctype] + ", value", ""


def interface(d, params):
    ret = d.signature[:d.signature.index(d.name)].replace("const", "").split()
    ret = " ".join(ret)
    args = [fortran_arg(d.name, p) for p in params]
    result = {"int": "integer(c_int)", "char *": "type(c_ptr)", "void": None}[ret]
    kind = "subroutine" if result is None else "function"
    names = ", ".join(a[0] for a in args)
    head = f"    {kind} {d.name}({names}) bind(C, name=\"{d.name}\")"
    if len(head) > 110:
        head = f"    {kind} {d.name}({names}) &\n        bind(C, name=\"{d.name}\")"
    used = []
    for _, decl, _ in args:
        used += [k for k in kinds(decl) if k not in used]
    if result:
        used += [k for k in kinds(result) if k not in used]
    lines = [head, "      import :: " + ", ".join(used)]
    lines += [f"      {decl} :: {name}{dims}" for name, decl, dims in args]
    if result:
        lines.append(f"      {result} :: {d.name}")
    lines.append(f"    end {kind} {d.name}")
    return lines


def derived_type(name, members):
    """A bind(C) derived type with the struct's members in order, each
    initialised (0, c_null_ptr or MEMBER_DEFAULTS)."""
    lines = [f"  type, bind(C) :: {name}"]
    for member, ctype in members:
        if ctype.endswith("*"):
            decl, init = "type(c_ptr)", "c_null_ptr"
        else:
            decl, init = SCALAR[ctype], "0"
        lines.append(f"    {decl} :: {member} = {MEMBER_DEFAULTS.get((name, member), init)}")
    return lines + [f"  end type {name}"]


def generate(header):
    decls, _ = ddstore_header.load(header)
    consts = ddstore_header.constants(decls)
    funcs = ddstore_header.functions(decls)
    out = [f"! Generated from ddstore.h by libddstore/fortran/gen_c_api.py: do not edit.", "",
           "  ! ---- constants (ddstore.h) ----"]
    for d in decls:
        if d.kind == "macro" and d.name in consts and d.name not in ddstore_header.VERSION_MACROS:
            out.append(f"  integer(c_int), parameter :: {d.name} = {consts[d.name]}")
        elif d.kind == "enum":
            kind = "c_int" if d.name in INT_ENUMS else "c_int32_t"
            out += ["", f"  ! enum {d.name}"]
            for sig, _ in d.members:
                name = sig.split("=")[0].strip()
                out.append(f"  integer({kind}), parameter :: {name} = {consts[name]}")
    out += ["", "  ! ---- structs (ddstore.h) ----"]
    for name, members in ddstore_header.structs(decls).items():
        out += [""] + derived_type(name, members)
    out += ["", "  ! ---- functions (ddstore.h, in its order) ----", "  interface"]
    first = True
    for d in decls:
        if d.kind == "section":
            out += ["", f"    ! {d.name}"]
            first = True
        elif d.kind == "function":
            if not first:
                out.append("")
            out += interface(d, funcs[d.name])
            first = False
    out.append("  end interface")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    text = generate(sys.argv[1])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(text)
