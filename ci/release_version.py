"""Check that every place naming the release version agrees with libddstore/VERSION,
the one source of it (meson, both Python packages and the docs read the file itself).

    python3 ci/release_version.py

Places that must spell it out: the public header's DDS_VERSION_* macros, pyddstore-torch's pin of pyddstore-core, the spack
recipes' versions and dependencies and the spack commands of the docs, the changelog's
newest section, and libddstore/ddstore.map, whose version nodes each name the release
that first ships them ("First shipped in release R"): R must not be later than
VERSION, and the nodes come in release order. Exits non-zero listing every
disagreement.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def release(text):
    return tuple(int(x) for x in text.split("."))


def main():
    version = read("libddstore/VERSION").strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        sys.exit(f"release_version: libddstore/VERSION is {version!r}, expected X.Y.Z")
    problems = []

    # ddstore.map: each node's comment names the release that first ships it.
    mapfile = read("libddstore/ddstore.map")
    nodes = re.findall(r"(/\*(?:(?!\*/).)*\*/)\s*(DDSTORE_[0-9.]+)\s*\{", mapfile, re.S)
    all_nodes = re.findall(r"^(DDSTORE_[0-9.]+)\s*\{", mapfile, re.M)
    labelled = {}
    for comment, node in nodes:
        m = re.search(r"First shipped in release (\d+\.\d+\.\d+)", comment)
        if m:
            labelled[node] = m.group(1)
    previous = None
    for node in all_nodes:
        label = labelled.get(node)
        if label is None:
            problems.append(f"ddstore.map: {node} has no comment 'First shipped in release X.Y.Z' above it")
            continue
        if release(label) > release(version):
            problems.append(f"ddstore.map: {node} is labelled release {label}, after libddstore/VERSION {version}")
        if previous and release(label) < release(previous):
            problems.append(f"ddstore.map: {node} (release {label}) comes after a node of release {previous}")
        previous = label
    stale = re.findall(r"New in [^:\n]*", mapfile)
    if stale:
        problems.append(f"ddstore.map: labels not naming a release: {stale}")

    # The public header's DDS_VERSION_MAJOR/MINOR/PATCH (read by the one header
    # parser, libddstore/abi/ddstore_header.py; meson also refuses to configure).
    sys.path.insert(0, os.path.join(ROOT, "libddstore", "abi"))
    import ddstore_header
    consts = ddstore_header.constants(ddstore_header.load()[0])
    header = ".".join(str(consts.get(m, "?")) for m in ddstore_header.VERSION_MACROS)
    if header != version:
        problems.append(f"libddstore/include/ddstore/ddstore.h: DDS_VERSION_* say {header}, expected {version}")

    # pyddstore-torch requires pyddstore-core of the same release.
    pins = re.findall(r'"pyddstore-core==([^"]+)"', read("pyddstore-torch/pyproject.toml"))
    if pins != [version]:
        problems.append(f"pyddstore-torch/pyproject.toml pins pyddstore-core=={pins}, expected {version}")

    # spack recipes and every spack spec of the docs and recipes.
    for recipe in sorted(glob.glob(os.path.join(ROOT, "packaging/spack/packages/*/package.py"))):
        rel = os.path.relpath(recipe, ROOT)
        text = read(rel)
        versions = re.findall(r'^\s*version\("([^"]+)"', text, re.M)
        if version not in versions:
            problems.append(f"{rel}: version({version!r}) missing (has {versions})")
    spec_files = (glob.glob(os.path.join(ROOT, "docs", "**", "*.rst"), recursive=True)
                  + glob.glob(os.path.join(ROOT, "packaging", "**", "*.py"), recursive=True)
                  + [os.path.join(ROOT, "README.md")])
    for path in sorted(spec_files):
        rel = os.path.relpath(path, ROOT)
        for m in re.finditer(r"\b(libddstore|py-pyddstore-core|py-pyddstore-torch)@(\d+\.\d+\.\d+)",
                             read(rel)):
            if m.group(2) != version:
                problems.append(f"{rel}: {m.group(0)}, expected @{version}")

    # The changelog's newest section is this release.
    m = re.search(r"^(\S+) \(.*\)\n-+$", read("docs/changelog.rst"), re.M)
    if m is None or m.group(1) != version:
        problems.append(f"docs/changelog.rst: newest section is {m.group(1) if m else None!r}, expected {version}")

    if problems:
        print("\n".join(f"release_version: {p}" for p in problems), file=sys.stderr)
        sys.exit(1)
    print(f"release_version: {version} everywhere; ddstore.map: "
          + ", ".join(f"{n} in {labelled[n]}" for n in all_nodes))


if __name__ == "__main__":
    main()
