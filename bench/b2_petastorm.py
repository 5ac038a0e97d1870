"""B2 peers: Petastorm 0.13.1 BatchedDataLoader and InMemBatchedDataLoader (samples/s).

Runs in Petastorm's own virtual environment (ci/petastorm-venv.sh), without MPI: run.sh
starts --nproc copies of it at once (one per rank of b2_loader.py, so that they share the
cores the same way), each reading shard --rank of the Parquet files b2_loader.py wrote, batch
256. Every process also measures, interleaved, the same in-memory ceiling as b2_loader.py
(torch.randperm + indexing of a local tensor of the whole dataset) so that its figures can
be compared through that ceiling too.

* petastorm_batched: make_batch_reader(shard) + BatchedDataLoader(shuffling_queue_capacity=
  2560): streaming, shuffle only within a 2,560-row buffer; a new reader per epoch.
* petastorm_inmem: make_batch_reader(whole dataset) + InMemBatchedDataLoader(rows_capacity=
  all rows, shuffle=True): a full private copy per process, globally shuffled; the load is
  timed separately (load_s) and the epochs after it are the figure (its steady state).
"""

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import torch

from _ceiling import ceiling_epoch

BATCH = 256


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--parquet", required=True, help="directory of one dataset (d128, d1024)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--start-at", type=float, default=0.0,
                   help="time.time() at which to start, so concurrent processes start together")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader, InMemBatchedDataLoader

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // args.nproc))
    url = "file://" + os.path.abspath(args.parquet)
    t = pq.read_table(glob.glob(os.path.join(args.parquet, "*.parquet")))
    n = t.num_rows
    d = len(t.column("x")[0])
    X = torch.from_numpy(np.asarray(t.column("x").combine_chunks().flatten()).reshape(n, d).copy())
    Y = torch.from_numpy(np.asarray(t.column("y")).copy())
    del t
    n_local = n // args.nproc  # the ceiling's share, as in b2_loader.py

    # Petastorm shards by row group (group i goes to shard i % shard_count). Its thread pool
    # sometimes ends an epoch early under load (seen here: a shard yielding 0 rows): every
    # epoch's row count is checked and a short epoch is run again (counted in "retries").
    meta = pq.ParquetFile(glob.glob(os.path.join(args.parquet, "*.parquet"))[0]).metadata
    shard_rows = sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)
                     if i % args.nproc == args.rank)
    retries = {"petastorm_batched": 0, "petastorm_inmem": 0}

    def batched_once():
        with make_batch_reader(url, num_epochs=1, cur_shard=args.rank, shard_count=args.nproc,
                               shuffle_row_groups=True) as reader:
            loader = BatchedDataLoader(reader, batch_size=BATCH, shuffling_queue_capacity=2560)
            m = 0
            for b in loader:
                m += b["y"].shape[0]
        return m

    def batched(epoch):
        for _ in range(4):
            t0, c0 = time.perf_counter(), time.process_time()
            m = batched_once()
            if m == shard_rows:  # the successful epoch only
                return m, time.perf_counter() - t0, time.process_time() - c0
            retries["petastorm_batched"] += 1
        raise SystemExit(f"Petastorm BatchedDataLoader: {m} rows instead of {shard_rows}, 4 times")

    while time.time() < args.start_at:
        time.sleep(0.01)
    times = {"ceiling": [], "petastorm_batched": []}
    cpus = {"ceiling": [], "petastorm_batched": [], "petastorm_inmem": []}
    counts = {}
    def ceiling(epoch):
        t0, c0 = time.perf_counter(), time.process_time()
        m = ceiling_epoch(X, Y, n_local, epoch, BATCH, args.rank, args.nproc)
        return m, time.perf_counter() - t0, time.process_time() - c0

    ceiling(0)
    batched(0)
    for r in range(args.repeats):
        for k, f in (("ceiling", ceiling), ("petastorm_batched", batched)):
            counts[k], dt, dc = f(r + 1)
            times[k].append(dt)
            cpus[k].append(dc)

    # InMem: one reader over the whole dataset, loaded once, then repeats+1 shuffled epochs.
    for _ in range(4):
        t0 = time.perf_counter()
        try:
            with make_batch_reader(url, num_epochs=1) as reader:
                inmem = InMemBatchedDataLoader(reader, batch_size=BATCH, num_epochs=args.repeats + 1,
                                               rows_capacity=n, shuffle=True, seed=0)
            if len(inmem._buffer[0]) == n:
                break
        except TypeError:  # _load_rows_into_mem got no rows at all
            pass
        retries["petastorm_inmem"] += 1
    else:
        raise SystemExit("Petastorm InMemBatchedDataLoader: short load, 4 times")
    load_s = time.perf_counter() - t0
    times["petastorm_inmem"] = []
    it = iter(inmem)
    for e in range(args.repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        m = 0
        for _ in range(-(-n // BATCH)):
            b = next(it)
            m += b["y"].shape[0]
        if e:  # the first epoch warms up
            times["petastorm_inmem"].append(time.perf_counter() - t0)
            cpus["petastorm_inmem"].append(time.process_time() - c0)
        counts["petastorm_inmem"] = m

    rate = {k: counts[k] / statistics.median(v) for k, v in times.items()}
    rate_cpu = {k: counts[k] / statistics.median(v) for k, v in cpus.items()}
    doc = {"rank": args.rank, "nproc": args.nproc, "dim": d, "samples": n, "batch": BATCH,
           "counts": counts, "epoch_s_all": times, "samples_per_s": rate,
           "ratio_to_ceiling": {k: rate[k] / rate["ceiling"] for k in rate},
           "samples_per_cpu_s": rate_cpu, "epoch_cpu_s_all": cpus,
           "ratio_cpu_to_ceiling": {k: rate_cpu[k] / rate_cpu["ceiling"] for k in rate_cpu},
           "inmem_load_s": load_s, "retries": retries, "shard_rows": shard_rows,
           "repeats": args.repeats, "torch_threads": torch.get_num_threads(),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "numpy": np.__version__, "petastorm": __import__("petastorm").__version__,
                        "pyarrow": pq.__name__ and __import__("pyarrow").__version__},
           "loadavg_end": list(os.getloadavg())}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"petastorm rank {args.rank} D={d}: " + "  ".join(
        f"{k} {v / 1e6:.3f} M/s" for k, v in rate.items()) + f"  (inmem load {load_s:.2f} s)",
        file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
