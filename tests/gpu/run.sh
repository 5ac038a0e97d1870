#!/usr/bin/env bash
# Manual check of the CUDA paths of pyddstore.torch (issue 25 item 14): device=,
# add_device=, pinned buffers and ThreadDataLoader with CUDA tensors, end to end,
# bit-exact rows (tests/gpu/check_cuda.py), at 1 and 2 ranks.
#
# Not a CI step (CI has no GPU); run it on a machine with a GPU and a CUDA build
# of torch:   bash tests/gpu/run.sh
# Without a usable CUDA device it prints SKIPPED and why, and exits 0.
# PYTHON=... picks the interpreter (default: .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
why="$("$PY" - <<'PYEOF' 2>&1 || true
try:
    import torch
except Exception as e:  # noqa: BLE001
    print(f"torch does not import ({e})")
else:
    if not torch.cuda.is_available():
        print(f"no CUDA device: torch {torch.__version__} (CUDA build: {torch.version.cuda}) "
              "sees none (torch.cuda.is_available() is False)")
PYEOF
)"
if [ -n "$why" ]; then
  echo "tests/gpu/run.sh: SKIPPED: $why; nothing was run"
  exit 0
fi
[ -f ci/env.sh ] && source ci/env.sh
for n in 1 2; do
  echo "tests/gpu/run.sh: mpiexec -n $n $PY tests/gpu/check_cuda.py"
  timeout 300 mpiexec -n "$n" "$PY" tests/gpu/check_cuda.py
done
echo "tests/gpu/run.sh: passed"
