#!/usr/bin/env python3
"""Layering check of libddstore: no call cycle between its source files.

    python3 tests/c/check-layering.py <objects dir | libddstore.so.X.Y.Z>

Reads the object files meson built for the library (the `<library>.p`
directory, e.g. build-dev/subprojects/libddstore/libddstore.so.0.1.0.p) with
`nm`: a file A depends on file B when A's object leaves undefined a symbol
that B's object defines (a function, or a table of them, such as a
transport). Prints the bottom-up dependency order (each level uses only the
levels before it) and exits 1, printing the cycle, when the file-level graph
has one: files that call each other cannot be understood, tested or replaced
one at a time. It also exits 1 when a file calls up across the layers of
libddstore/src (libfabric's prov/ + util habit): core/ uses core/ only; mpi/
and fabric/ (the two transports) use core/ and their own folder, never each
other; api/ may use everything. Calls through function pointers are not seen, but taking the
address of a table or function defined elsewhere is, so choosing a transport
counts as depending on it.
"""
import os
import re
import subprocess
import sys


# The layers of libddstore/src (folder names) and the folders each may use.
LAYERS = {
    "core": {"core"},
    "mpi": {"core", "mpi"},
    "fabric": {"core", "fabric"},
    "api": {"core", "mpi", "fabric", "api"},
}


def file_name(obj):
    """src_core_store.c.o -> core/store.c (meson's object naming)."""
    base = os.path.basename(obj)
    base = re.sub(r"\.o(bj)?$", "", base)
    base = base[4:] if base.startswith("src_") else base
    layer, _, rest = base.partition("_")
    return f"{layer}/{rest}" if layer in LAYERS and rest else base


def layer_violations(graph):
    """(file, dependency, symbols) for each call up or across the layers."""
    bad = []
    for name, deps in graph.items():
        layer = name.split("/")[0]
        if layer not in LAYERS:
            continue
        for dep, syms in deps.items():
            if dep.split("/")[0] not in LAYERS[layer]:
                bad.append((name, dep, syms))
    return sorted(bad)


def read_objects(path):
    objdir = path if os.path.isdir(path) else path + ".p"
    if not os.path.isdir(objdir):
        sys.exit(f"check-layering: no object directory at {objdir}")
    objs = sorted(os.path.join(objdir, f) for f in os.listdir(objdir) if f.endswith((".o", ".obj")))
    if not objs:
        sys.exit(f"check-layering: no object files in {objdir}")
    defined, undefined = {}, {}
    for obj in objs:
        name = file_name(obj)
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        undefined[name] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in ("U", "w", "v"):
                undefined[name].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRGSVWC":
                defined.setdefault(parts[2], name)
    return defined, undefined


def build_graph(defined, undefined):
    graph = {n: {} for n in undefined}
    for name, syms in undefined.items():
        for sym in syms:
            owner = defined.get(sym)
            if owner and owner != name:
                graph[name].setdefault(owner, []).append(sym)
    return graph


def find_cycle(graph):
    """One cycle as a list of files (first == last), or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(n):
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def levels(graph):
    """Level of each file: 0 when it uses no other file, else 1 + its
    highest dependency's level (the graph is acyclic here)."""
    level = {}

    def lv(n):
        if n not in level:
            level[n] = 1 + max((lv(m) for m in graph[n]), default=-1)
        return level[n]

    for n in graph:
        lv(n)
    return level


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    graph = build_graph(*read_objects(sys.argv[1]))
    cycle = find_cycle(graph)
    if cycle:
        print("check-layering: FAILED: call cycle between source files:")
        for a, b in zip(cycle, cycle[1:]):
            print(f"  {a} -> {b}  ({', '.join(sorted(graph[a][b])[:4])}"
                  f"{', ...' if len(graph[a][b]) > 4 else ''})")
        return 1
    bad = layer_violations(graph)
    if bad:
        print("check-layering: FAILED: calls up or across the layers of libddstore/src "
              "(core < mpi, fabric < api):")
        for a, b, syms in bad:
            print(f"  {a} -> {b}  ({', '.join(sorted(syms)[:4])})")
        return 1
    unlayered = sorted(n for n in graph if n.split("/")[0] not in LAYERS)
    if unlayered:
        print(f"check-layering: FAILED: files outside the layer folders: {' '.join(unlayered)}")
        return 1
    level = levels(graph)
    print("check-layering: no call cycle, no call up the layers; bottom-up order (each level uses only the levels before it):")
    for k in range(max(level.values()) + 1):
        files = sorted(n for n in level if level[n] == k)
        print(f"  {k}: {' '.join(files)}")
    print("dependencies:")
    for n in sorted(graph, key=lambda n: (level[n], n)):
        if graph[n]:
            print(f"  {n} -> {' '.join(sorted(graph[n], key=lambda m: (level[m], m)))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
