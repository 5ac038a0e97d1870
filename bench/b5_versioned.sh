#!/usr/bin/env bash
# B5: versioned variables against plain ones, and the plain read path of this
# tree against main's (the hook that versioned variables add to every read).
# Builds the library at the merge base with main (git archive) and this
# tree's in build-b5/,
# then runs bench/b5_versioned.c with each, alternating, at 2 ranks: method 0
# node-local, method 0 over RMA, method 1 over shm; prints ns per row and
# ratios, and the load average.
#   bash bench/b5_versioned.sh [reps] [rounds]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source ci/env.sh
[ -x .venv/bin/meson ] && export PATH="$root/.venv/bin:$PATH"
export OMPI_MCA_rmaps_base_oversubscribe=1
reps=${1:-7}
rounds=${2:-2}
out=build-b5
mkdir -p "$out"
if [ ! -d "$out/main-src" ]; then
  mkdir -p "$out/main-src" && git archive "$(git merge-base main HEAD)" | tar -x -C "$out/main-src"
fi
for t in main:"$out/main-src" tree:"$root"; do
  name=${t%%:*} src=${t#*:}
  [ -f "$out/$name/build.ninja" ] || meson setup "$out/$name" "$src/libddstore" --buildtype=release >/dev/null
  ninja -C "$out/$name" >/dev/null
done
mpicc -O2 -std=c11 -D_GNU_SOURCE bench/b5_versioned.c -Ilibddstore/include -L"$out/tree" -lddstore -ldl \
  -lpthread -o "$out/b5"
echo "load average: $(cat /proc/loadavg)"
for round in $(seq "$rounds"); do
  for cfg in "0 1" "0 0" "1 0"; do
    set -- $cfg
    for lib in main tree; do
      echo -n "[$lib] "
      LD_LIBRARY_PATH="$root/$out/$lib" DDSTORE_METHOD=$1 DDSTORE_NODE_LOCAL=$2 DDSTORE_FABRIC=shm \
        timeout -k 5 300 mpiexec -n 2 "$out/b5" "$reps"
    done
  done
done
echo "load average: $(cat /proc/loadavg)"
