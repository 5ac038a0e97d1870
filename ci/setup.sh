#!/usr/bin/env bash
# Set up everything pyddstore needs on a fresh Debian machine, idempotently:
# Debian's Open MPI, libfabric and pkg-config; a virtual environment in
# .venv with the Python dependencies (torch pinned to the CPU wheel); and
# pyddstore-core + pyddstore-torch installed into it from this checkout.
# Source it or run it; it exports nothing but prints what it does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

apt_pkgs=(libopenmpi-dev openmpi-bin libfabric-dev libfabric-bin pkg-config gcc gfortran openjdk-17-jre-headless clang-14 libclang-rt-14-dev valgrind iperf3 iproute2)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
py=.venv/bin/python
# torch first and pinned: an unpinned requirement would pull a multi-GB CUDA build.
req_stamp=.venv/.pyddstore-requirements
if ! cmp -s ci/requirements.txt "$req_stamp"; then
  echo "setup: installing Python requirements"
  $py -m pip install -q --upgrade pip
  $py -m pip install -q torch==2.13.0
  $py -m pip install -q -r ci/requirements.txt
  cp ci/requirements.txt "$req_stamp"
fi

echo "setup: building and installing pyddstore-core and pyddstore-torch"
$py -m pip install -q --no-deps --force-reinstall ./pyddstore-core ./pyddstore-torch
$py -c "import pyddstore, pyddstore.torch; print('setup: pyddstore', pyddstore.__version__, 'from', pyddstore.__file__)"
