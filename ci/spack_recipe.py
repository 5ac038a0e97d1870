"""Run the spack recipe of libddstore (packaging/spack/packages/libddstore/package.py)
the way spack runs it, where spack itself is not available (CI), and check what it
installs.

    python3 ci/spack_recipe.py --mpi openmpi|mpich --prefix PREFIX [--variants +fabric+fortran]
                               [--mpiexec LAUNCHER]

What spack does for `spack install libddstore ^<mpi> --test=root`, in its order:
the recipe's setup_build_environment(env) is applied to the build environment, then
install(spec, prefix) runs (packaging/scripts/build-libddstore.sh: meson setup,
compile, install), then the run_after("install") tests (check_consumer: the C consumer
compiled with the MPI's compiler wrapper and `pkg-config --cflags --libs libddstore`).
The recipe is loaded with a stand-in for `spack.package` that provides the few names
it uses; `spec["mpi"]` is Debian's package of that MPI (mpicc.openmpi / mpicc.mpich,
the spack `mpicc` attribute). The build directory is the recipe's own,
<checkout>/build-spack, as in a `spack dev-build`.

Then checks, against the MPI asked for: the meson option `mpi` the build was
configured with, Requires.private of the installed libddstore.pc (the MPI's
pkg-config name, and libfabric with +fabric), the MPI library libddstore.so.1 links
(and not the other MPI's), and the consumer run under LAUNCHER -n 2 (default: the
MPI's mpiexec). Exits non-zero, saying why, on any difference.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "packaging", "spack", "packages", "libddstore", "package.py")

# What each MPI must give, written here independently of the recipe's own choice:
# its pkg-config name (meson -Dmpi, Requires.private), Debian's compiler wrapper and
# launcher, and the soname of its library.
MPIS = {
    "openmpi": {"pc": "ompi-c", "mpicc": "mpicc.openmpi", "mpiexec": "mpiexec.openmpi",
                "lib": "libmpi.so.40"},
    "mpich": {"pc": "mpich", "mpicc": "mpicc.mpich", "mpiexec": "mpiexec.mpich",
              "lib": "libmpich.so.12"},
}
# MPIs that cannot be installed here: the recipe's choice for them only.
OTHER_MPIS = {"cray-mpich": "mpich", "intel-oneapi-mpi": "mpi", "mvapich2": "mpi"}


def fail(msg):
    sys.exit(f"spack_recipe: FAILED: {msg}")


def run(cmd, output=None, env=None):
    print("spack_recipe: $ " + " ".join(cmd), flush=True)
    res = subprocess.run(cmd, env=env, check=False, text=True,
                         stdout=subprocess.PIPE if output is str else None)
    if res.returncode != 0:
        fail(f"{cmd[0]} exited with {res.returncode}")
    return res.stdout if output is str else None


class Executable:
    """spack.util.executable.Executable: call with arguments; output=str returns stdout."""

    def __init__(self, path):
        self.path = path

    def __call__(self, *args, output=None):
        return run([self.path, *map(str, args)], output=output)


class Prefix(str):
    """spack.util.prefix.Prefix: attributes are subdirectories."""

    def __getattr__(self, name):
        return Prefix(os.path.join(self, name))


class EnvironmentModifications:
    """The part of spack's EnvironmentModifications the recipe uses (set)."""

    def __init__(self):
        self.values = {}

    def set(self, name, value):
        self.values[name] = str(value)


class Spec:
    def __init__(self, mpi, variants):
        self.variants = variants
        self.mpi = types.SimpleNamespace(name=mpi, mpicc=shutil.which(MPIS[mpi]["mpicc"]))

    def satisfies(self, constraint):
        m = re.fullmatch(r"([+~])(\w+)", constraint)
        if m is None:
            raise NotImplementedError(f"stand-in spec: constraint {constraint!r}")
        return self.variants[m.group(2)] == (m.group(1) == "+")

    def __getitem__(self, name):
        if name != "mpi":
            raise NotImplementedError(f"stand-in spec: dependency {name!r}")
        return self.mpi


def spack_package_module():
    """The names of `from spack.package import *` that the recipe uses."""
    mod = types.ModuleType("spack.package")
    directive = lambda *args, **kwargs: None  # noqa: E731  (version, variant, depends_on...)
    for name in ("license", "version", "variant", "depends_on"):
        setattr(mod, name, directive)

    def run_after(phase):
        return lambda f: f

    def on_package_attributes(**attrs):
        return lambda f: f

    class Package:
        pass

    mod.Package = Package
    mod.run_after = run_after
    mod.on_package_attributes = on_package_attributes
    mod.which = lambda name: Executable(shutil.which(name) or fail(f"{name} not found"))
    mod.Executable = Executable
    mod.join_path = os.path.join
    mod.__all__ = [n for n in vars(mod) if not n.startswith("_")]
    return mod


def load_recipe():
    spack = types.ModuleType("spack")
    spack.package = spack_package_module()
    sys.modules["spack"], sys.modules["spack.package"] = spack, spack.package
    spec = importlib.util.spec_from_file_location("libddstore_recipe", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    return recipe


def pc_field(path, field):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return {r.split()[0] for r in line.split(":", 1)[1].replace(",", " ").split()
                        if re.match(r"^[A-Za-z]", r)}
    return set()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", choices=sorted(MPIS), required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--variants", default="+fabric+fortran")
    ap.add_argument("--mpiexec")
    args = ap.parse_args()
    variants = {"fabric": True, "fortran": True}
    for sign, name in re.findall(r"([+~])(\w+)", args.variants):
        if name not in variants:
            fail(f"no variant {name!r} (the recipe has {sorted(variants)})")
        variants[name] = sign == "+"
    want = MPIS[args.mpi]

    recipe = load_recipe()
    for name, pc in {**{k: v["pc"] for k, v in MPIS.items()}, **OTHER_MPIS}.items():
        got = recipe.mpi_pkgconfig_name(name)
        if got != pc:
            fail(f"the recipe builds ^{name} against pkg-config {got!r}, expected {pc!r}")

    pkg = recipe.Libddstore()
    pkg.spec = Spec(args.mpi, variants)
    pkg.prefix = Prefix(os.path.abspath(args.prefix))
    pkg.stage = types.SimpleNamespace(source_path=ROOT)
    if not pkg.spec["mpi"].mpicc:
        fail(f"{want['mpicc']} not found: install Debian's {args.mpi}")

    mods = EnvironmentModifications()
    pkg.setup_build_environment(mods)
    print(f"spack_recipe: ^{args.mpi} {args.variants}: build environment {mods.values}")
    if mods.values.get("DDS_MPI") != want["pc"]:
        fail(f"^{args.mpi}: DDS_MPI={mods.values.get('DDS_MPI')!r}, expected {want['pc']!r}")
    os.environ.update(mods.values)
    pkg.install(pkg.spec, pkg.prefix)

    builddir = os.path.join(ROOT, "build-spack")
    opts = json.loads(run(["meson", "introspect", "--buildoptions", builddir], output=str))
    mpi_opt = next(o["value"] for o in opts if o["name"] == "mpi")
    if mpi_opt != want["pc"]:
        fail(f"^{args.mpi}: meson was configured with -Dmpi={mpi_opt}, expected {want['pc']}")

    pc = os.path.join(pkg.prefix, "lib", "pkgconfig", "libddstore.pc")
    req = pc_field(pc, "Requires.private") | pc_field(pc, "Requires")
    expected = {want["pc"]} | ({"libfabric"} if variants["fabric"] else set())
    if req != expected:
        fail(f"^{args.mpi}: {pc} requires {sorted(req)}, expected {sorted(expected)}")
    lib = os.path.join(pkg.prefix, "lib", "libddstore.so.1")
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]",
                            run(["readelf", "-d", lib], output=str)))
    others = {m["lib"] for k, m in MPIS.items() if k != args.mpi}
    if want["lib"] not in needed or needed & others:
        fail(f"^{args.mpi}: {lib} links {sorted(needed)}, expected {want['lib']} and none of {sorted(others)}")
    print(f"spack_recipe: ^{args.mpi}: -Dmpi={mpi_opt}, Requires.private: {', '.join(sorted(req))}, "
          f"links {want['lib']}")

    # spack install --test=root: the recipe's run_after("install") check.
    pkg.check_consumer()
    consumer = os.path.join(ROOT, "build-spack", "consumer")
    launcher = args.mpiexec or want["mpiexec"]
    run(["timeout", "-k", "5", "120", launcher, "-n", "2", consumer])
    print(f"spack_recipe: ^{args.mpi}: C consumer built by the recipe's check and run under {launcher} -n 2")


if __name__ == "__main__":
    main()
