"""A steady remote-read loop for profiling B5 (bench/b5_profile.sh runs it under perf).

Every rank reads K random rows held only by ranks on other hosts with ``get_batch``, for
SECS seconds (methods 1/2) or N calls (method 0, whose batched reads are collective: every
rank must make the same number of calls). Prints per rank: calls, microseconds per call,
the process's CPU use in cores and the bytes read per second.

Environment: M (method, default 1), RB (row bytes, default 64), K (rows per call, default
256), SECS (default 8), N (calls; default 400 for method 0, else 0 = timed).
"""

import os
import socket
import time

import numpy as np
from mpi4py import MPI

from pyddstore import PyDDStore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
method = int(os.environ.get("M", "1"))
rb = int(os.environ.get("RB", "64"))
k = int(os.environ.get("K", "256"))
secs = float(os.environ.get("SECS", "8"))
ncalls = int(os.environ.get("N", "400" if method == 0 else "0"))
hosts = comm.allgather(socket.gethostname())
remote = [r for r in range(size) if hosts[r] != hosts[rank]] or [r for r in range(size) if r != rank]
store = PyDDStore(comm, method=method, **({"fabric": "tcp"} if method else {}))
rows = max(1024, min(1 << 16, (16 << 20) // rb))  # as b5_remote.py
store.add("x", np.full((rows, rb), rank, np.uint8))
rng = np.random.default_rng(rank)
sets = [(rng.choice(remote, size=k) * rows + rng.integers(0, rows, size=k)).astype(np.int64) for _ in range(32)]
out = np.empty((k, rb), np.uint8)
comm.Barrier()
n = 0
t0, c0 = time.perf_counter(), time.process_time()
while (n < ncalls) if ncalls else (time.perf_counter() - t0 < secs):
    store.get_batch("x", out, sets[n % len(sets)])
    n += 1
t, c = time.perf_counter() - t0, time.process_time() - c0
print(f"rank {rank}: {n} calls, {t / n * 1e6:.0f} us/call, process cpu {c / t:.2f} cores, "
      f"{k * rb * n / t / 1e6:.1f} MB/s", flush=True)
comm.Barrier()
store.free()
