#!/usr/bin/env bash
# The main job, from a fresh machine: set up (ci/setup.sh), then a 4-rank
# data-parallel training run (torch DDP over gloo) whose training set is
# served by the store: DistDataset + ThreadDataLoader + DistributedSampler on
# scikit-learn's bundled handwritten digits.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash ci/setup.sh
source ci/env.sh
exec timeout -k 10 900 mpiexec -n 4 .venv/bin/python examples/train_digits.py "$@"
