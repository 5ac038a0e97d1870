#!/usr/bin/env bash
# Run every example the documentation shows, as a user would, and fail if
# one fails. Uses the working tree (ci/dev-env.sh) unless PYDDSTORE_LIBRARY
# or an installed pyddstore is preferred: set EXAMPLES_INSTALLED=1 to run
# against the packages installed in .venv instead.
#   bash examples/run_all.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source ci/env.sh
if [ "${EXAMPLES_INSTALLED:-0}" = 1 ]; then
  export PATH="$root/.venv/bin:$PATH"
else
  source ci/dev-env.sh
fi
fails=0
run() { # run <label> <timeout> <command...>
  local label=$1 t=$2; shift 2
  echo "=== example: $label"
  timeout -k 5 "$t" "$@" || { echo "FAILED: example $label"; fails=$((fails + 1)); }
}
for n in 1 3 4; do run "first_store np=$n" 60 mpiexec -n $n python examples/first_store.py; done
run "original_api np=4" 60 mpiexec -n 4 python examples/original_api.py
run "original_api np=2 node_local=0" 60 env DDSTORE_NODE_LOCAL=0 mpiexec -n 2 python examples/original_api.py
run "torch_ddp np=2" 180 mpiexec -n 2 python examples/torch_ddp.py
if python -c "import torch_geometric" >/dev/null 2>&1; then
  run "graph_ddp np=2" 300 mpiexec -n 2 python examples/graph_ddp.py --graphs 600 --epochs 2
fi
if python -c "import pyddstore, sys; sys.exit(0 if pyddstore.has_fabric() else 1)"; then
  hs=$(mktemp -d)/hs
  export DDSTORE_FABRIC=tcp FI_TCP_IFACE=lo
  echo "=== example: method2 core (2 ranks) + 2 readers"
  timeout -k 5 120 mpiexec -n 2 python examples/method2_core.py --dir "$hs" --readers 2 --wait 90 &
  core=$!
  run "method2_reader 0" 100 python examples/method2_reader.py --dir "$hs" --n-core 2 --id 0
  run "method2_reader 1" 100 python examples/method2_reader.py --dir "$hs" --n-core 2 --id 1
  wait $core || { echo "FAILED: example method2_core"; fails=$((fails + 1)); }
  rm -rf "$(dirname "$hs")"
else
  echo "=== example: method 2 skipped (this libddstore has no libfabric)"
fi
if [ $fails -ne 0 ]; then echo "$fails example(s) failed"; exit 1; fi
echo "all examples ran"
