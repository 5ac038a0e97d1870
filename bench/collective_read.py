"""Cost of the bounded collective read (issue 13), method 0 through RMA.

    DDSTORE_NODE_LOCAL=0 mpiexec -n 2 python bench/collective_read.py [--iters N]

Times get_batch of 64 random 1 KiB rows (every batch crosses ranks) after a
warm-up, and prints one line on rank 0: the median seconds per batch over 5
rounds. Run it, in the same session, with DDSTORE_COLLECTIVE_TIMEOUT_S=0
(MPI_Get + flush, no deadline on the targets) and with the default (request-
based gets polled with a deadline), and with an older pyddstore as the
baseline; compare the ratios, not the times.
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from pyddstore import PyDDStore

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=1000)
ap.add_argument("--rows", type=int, default=64)
args = ap.parse_args()
comm = MPI.COMM_WORLD
s = PyDDStore(comm)
s.add("x", np.zeros((4096, 128), np.float64))  # 1 KiB rows
total = s.query("x").global_rows
rng = np.random.default_rng(comm.rank)
out = np.empty((args.rows, 128), np.float64)
batches = [np.sort(rng.integers(0, total, args.rows)).astype(np.int64) for _ in range(64)]
for b in batches:
    s.get_batch("x", out, b)
rounds = []
for _ in range(5):
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(args.iters):
        s.get_batch("x", out, batches[i % 64])
    rounds.append((time.perf_counter() - t0) / args.iters)
s.free()
if comm.rank == 0:
    print(f"collective_read: {statistics.median(rounds) * 1e6:.1f} us per batch "
          f"(median of 5 rounds of {args.iters}; {args.rows} rows of 1 KiB)")
