"""Benchmark: pyddstore (DistDataset + ThreadDataLoader) against Petastorm 0.13.1
(make_batch_reader + BatchedDataLoader, and + InMemBatchedDataLoader) on the same
synthetic Parquet dataset, the same number of processes, batch size and batches.

    python bench/petastorm_throughput.py [--ranks 2] [--rows 200000] [--features 128] [-- TOOL ARGS]

Runs ``mpiexec -n RANKS python -m pyddstore.torch.tools.throughput --synthetic ROWS --vs petastorm``
(Petastorm in its own environment from ci/petastorm-venv.sh, created on first use) and
prints the tool's tables and the ratios pyddstore / Petastorm measured in that run.
Needs the package importable (pip install ./pyddstore-core ./pyddstore-torch, or
`source ci/dev-env.sh`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--measure", type=int, default=300)
    p.add_argument("--timeout", type=int, default=1200, help="seconds for the whole mpiexec run")
    p.add_argument("extra", nargs="*", help="more pyddstore-throughput arguments (after --)")
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    with tempfile.TemporaryDirectory(prefix="pyddstore-bench-") as d:
        js = os.path.join(d, "result.json")
        cmd = ["timeout", str(a.timeout), "mpiexec", "-n", str(a.ranks), sys.executable, "-m",
               "pyddstore.torch.tools.throughput", "--synthetic", str(a.rows), "--features", str(a.features),
               "-b", str(a.batch_size), "-m", str(a.warmup), "-n", str(a.measure), "--vs", "petastorm",
               "--json", js] + a.extra
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, env=env, check=True)
        with open(js) as f:
            report = json.load(f)
    print(json.dumps({k: report[k]["ratio"] for k in ("batched", "inmem")}, indent=1))


if __name__ == "__main__":
    main()
