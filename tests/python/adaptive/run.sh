#!/usr/bin/env bash
# pyddstore.torch.adaptive, run by ci/test.sh instead of the default pytest
# loop because its jobs depend on each other:
#  - the suite at 1, 4 and then 2 ranks: its restart tests save loader
#    states in $PYDDSTORE_ADAPTIVE_RESTART_DIR that the later jobs resume
#    from (restarts on another number of ranks): the 1-rank job saves a state
#    that the 4- and 2-rank jobs resume, and one chain of jobs restarts
#    1 -> 4 -> 2 ranks, checkpointing in an epoch's last batch;
#  - examples/adaptdl_port.py (an AdaptDL script with only its imports
#    changed) at 1, 2 and 4 ranks; it must finish and learn.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
source ci/suite.sh
suite_begin "adaptive suite"
work="$(mktemp -d "${TMPDIR:-/tmp}/pyddstore-adaptive-XXXXXX")"
trap 'rm -rf "$work"' EXIT

for n in 1 4 2; do
  suite_step "pytest tests/python/adaptive np=$n" 300 env PYDDSTORE_ADAPTIVE_RESTART_DIR="$work" \
    mpiexec -n "$n" "$py" tests/python/run_pytest.py -q --color=no tests/python/adaptive
done

example() { # example <ranks>: the port runs, learns, and writes its TensorBoard events
  local n=$1 out="$work/example-$1.log"
  timeout -k 10 300 mpiexec -n "$n" "$py" examples/adaptdl_port.py --epochs 1 --logdir "$work/tb-$n" >"$out" 2>&1 \
    || { tail -30 "$out"; return 1; }
  local acc
  acc=$(sed -n 's/^final validation accuracy \([0-9.]*\).*/\1/p' "$out" | head -1)  # other ranks' output may share the line
  [ "$(ls "$work/tb-$n"/rank*/events.* 2>/dev/null | wc -l)" -eq "$n" ] \
    || { echo "expected $n TensorBoard event files in $work/tb-$n"; return 1; }
  "$py" -c "import sys; a = float(sys.argv[1]); print('accuracy', a); sys.exit(0 if a > 0.6 else 1)" "${acc:-0}"
}
for n in 1 2 4; do
  suite_check "examples/adaptdl_port.py np=$n" example "$n"
done
suite_end
