#!/usr/bin/env bash
# Create (once) the separate virtual environment that runs the real Petastorm 0.13.1.
#
# Why a separate environment: Petastorm 0.13.1 imports only with pyarrow<13 (it uses
# pyarrow.filesystem and the legacy ParquetDataset API), hence numpy<2, pandas 2.2 and
# setuptools<70; this project runs on numpy 2 and a current pyarrow, so the two cannot share
# one environment. Only comparisons with Petastorm (pyddstore-throughput --vs petastorm,
# bench/petastorm_*.py) need it; nothing in the package imports Petastorm.
#
# Shipped in pyddstore-torch as package data, so an installed package can run it:
#   python -m pyddstore.torch.petastorm.env [VENV_DIR]   (what pyddstore-throughput runs)
#   ci/petastorm-venv.sh [VENV_DIR]                       (the same, from a checkout)
#   VENV_DIR defaults to $PYDDSTORE_PETASTORM_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/pyddstore/petastorm-venv.
#   Prints the environment's python path on its last line (progress goes to stderr). Idempotent:
#   an environment that already imports petastorm with these pins is reused as it is.
set -euo pipefail

venv="${1:-${PYDDSTORE_PETASTORM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pyddstore/petastorm-venv}}"
base_python="${PYTHON:-python3}"
py="$venv/bin/python"

# The stamp records the pins: changing them here rebuilds the environment.
pins="torch==2.13.0 petastorm==0.13.1 pyspark==4.3.0 pyarrow==12.0.1 numpy==1.26.4 pandas==2.2.3 opencv-python-headless==4.11.0.86 setuptools<70"
stamp="$venv/.pyddstore-pins"

if [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$pins" ]] \
   && "$py" -c "import petastorm, petastorm.pytorch" >/dev/null 2>&1; then
  echo "$py"
  exit 0
fi

# Rebuild only what this script made (its stamp is there) or an empty folder: a folder that a
# user made is not ours to delete.
if [[ -e "$venv" && ! -f "$stamp" && -n "$(ls -A "$venv" 2>/dev/null)" ]]; then
  echo "petastorm_venv.sh: $venv exists but was not made by this script (no .pyddstore-pins) and does" \
       "not import petastorm 0.13.1's pins; remove it or choose another folder" >&2
  exit 1
fi

{
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$base_python" -m venv "$venv"
  # torch first (the CPU wheel the machine's pip configuration provides), pinned, so that
  # petastorm's dependencies cannot pull in another torch.
  "$py" -m pip install --quiet "torch==2.13.0"
  "$py" -m pip install --quiet "numpy==1.26.4" "pyarrow==12.0.1" "pandas==2.2.3" \
    "opencv-python-headless==4.11.0.86" "pyspark==4.3.0" "torch==2.13.0" \
    "dill>=0.2.1" "diskcache>=3.0.0" "future>=0.10.2" "packaging>=15.0" "psutil>=4.0.0" \
    "pyzmq>=14.0.0" "six>=1.5.0" fsspec
  # petastorm 0.13.1 declares setuptools<70 while torch 2.13 declares setuptools>=77 (only for
  # torch.utils.cpp_extension, which nothing here uses), so no resolver accepts both: install
  # petastorm without its dependencies (all installed just above) and the older setuptools last,
  # each on its own. pip's warning about torch's declared setuptools requirement is expected.
  "$py" -m pip install --quiet --no-deps "petastorm==0.13.1"
  "$py" -m pip install --quiet "setuptools<70" || exit 1
  "$py" -c "import petastorm, petastorm.pytorch, pyarrow; assert pyarrow.__version__ == '12.0.1', pyarrow.__version__"
} 1>&2
echo "$pins" > "$stamp"
echo "$py"
