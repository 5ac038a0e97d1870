"""Check the Fortran module against ddstore.h, so that neither can drift.

    python3 tests/fortran/check_module.py libddstore/include/ddstore/ddstore.h libddstore/fortran/ddstore.f90 \
        <builddir>/ddstore_c_api.inc

The module includes its constants and interfaces from ddstore_c_api.inc,
which the build generates from the header (libddstore/fortran/gen_c_api.py):
name it, as built, so that the generator is checked too.

Compares: every DDS_* enumerator and numeric #define of the header with the
module's parameter of the same name (same value, none missing, none extra);
every DDS_API function with a bind(C, name=...) interface of the same name
and the same number of arguments; every public struct's members (names and
order) with the bind(C) derived type of the same name. Exits 1 with a list
of differences.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "libddstore", "abi"))
import ddstore_header  # noqa: E402  (the one parser of ddstore.h)


def module_items(text):
    code = "\n".join(line.split("!", 1)[0] for line in text.splitlines())
    code = re.sub(r"&\s*\n\s*", " ", code)
    params = {n: int(v) for n, v in re.findall(
        r"parameter\s*::\s*(DDS_\w+)\s*=\s*(-?\d+)", code, re.I)}
    funcs = {}
    for kind, name, args, cname in re.findall(
            r"(function|subroutine)\s+(\w+)\s*\(([^)]*)\)\s*bind\s*\(\s*C\s*,\s*name\s*=\s*\"(\w+)\"",
            code, re.I):
        if not cname.startswith("dds_"):
            continue  # a C library helper (strlen), not the ABI
        if name != cname:
            funcs[cname] = ("renamed to", name)
        else:
            funcs[cname] = len([a for a in args.split(",") if a.strip()])
    types = {}
    for name, body in re.findall(r"type\s*,\s*bind\s*\(\s*C\s*\)\s*::\s*(\w+)(.*?)end\s+type", code,
                                 re.I | re.S):
        types[name] = re.findall(r"::\s*(\w+)", body)
    return params, funcs, types


def module_text(module, include):
    """The module's source with its `include "ddstore_c_api.inc"` line
    replaced by the generated file."""
    text = open(module).read()
    line = re.search(r'^\s*include\s+"ddstore_c_api\.inc"\s*$', text, re.M)
    if not line:
        sys.exit(f"check_module: {module} has no include of ddstore_c_api.inc")
    return text[:line.start()] + open(include).read() + text[line.end():]


def compare(kind, header_items, module_items, bad):
    """Appends to bad each item of the header missing from the module or
    different there, and each module item the header does not have."""
    for k, v in sorted(header_items.items()):
        if k not in module_items:
            bad.append(f"{kind} {k} of ddstore.h ({v}) is not in the module")
        elif module_items[k] != v:
            bad.append(f"{kind} {k}: {module_items[k]} in the module, {v} in ddstore.h")
    for k in sorted(set(module_items) - set(header_items)):
        bad.append(f"{kind} {k} of the module is not in ddstore.h")


def main(header, module, include):
    decls, _ = ddstore_header.load(header)
    params, funcs, types = module_items(module_text(module, include))
    # The release version macros change every release; Fortran callers ask
    # dds_version() instead of compiling a number in.
    consts = {k: v for k, v in ddstore_header.constants(decls).items()
              if k not in ddstore_header.VERSION_MACROS}
    hfuncs = {k: len(p) for k, p in ddstore_header.functions(decls).items()}
    structs = {k: [m for m, _ in members] for k, members in ddstore_header.structs(decls).items()}
    bad = []
    compare("constant", consts, params, bad)
    compare("function (arguments)", hfuncs, funcs, bad)
    compare("struct (members)", structs, types, bad)
    if bad:
        print("Fortran module and ddstore.h differ:\n  " + "\n  ".join(bad))
        return 1
    print(f"Fortran module matches ddstore.h: {len(consts)} constants, {len(hfuncs)} functions, "
          f"{len(types)} structs")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:4]))
