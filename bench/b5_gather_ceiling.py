"""B5 gather ceiling (issue 24): owner-side gather of random rows with plain mpi4py collectives.

    mpiexec -n 4 python bench/b5_gather_ceiling.py [--k 256] [--sizes 64 512 ...] [--seconds 1]

Per batch every rank asks for K random rows held by ranks on OTHER hosts (on one host: by
other ranks) and gets them in request order:

  1. Alltoall of the per-owner row counts (4 bytes per pair),
  2. Alltoallv of the row indices to their owners,
  3. np.take on the owner (the gather, one memcpy per row into one buffer),
  4. Alltoallv of the gathered rows back,
  5. the rows put into request order (one scatter on the reader).

This is what issue 24 asks the store to do, written as plainly as possible: the store must
reach at least this rate. Run it with OMPI_MCA_mpi_yield_when_idle=1 under Open MPI (b5.sh
sets it): ranks that spin in MPI starve each other when the cores are fewer than the busy
threads. bench/b5_remote.py imports Gather and times it in the same interleaved loops as the
store; run standalone, this file prints its own rates.
"""

import argparse
import socket
import time

import numpy as np
from mpi4py import MPI


class Gather:
    """Callable: gather(idx, out) reads global rows idx (int64, any order) into out[len(idx), rb].
    Collective over comm: every rank calls it once per batch. Rows of rank r are
    global rows [r * rows, (r + 1) * rows)."""

    def __init__(self, comm, shard, rows):
        self.comm, self.shard, self.rows = comm, shard, rows
        self.size = comm.Get_size()
        self.rb = shard.shape[1]

    def __call__(self, idx, out):
        comm, size, rb = self.comm, self.size, self.rb
        owner = idx // self.rows
        order = np.argsort(owner, kind="stable")
        want = idx[order] - owner[order] * self.rows  # local row numbers, grouped by owner
        scount = np.bincount(owner, minlength=size).astype(np.int32)
        rcount = np.empty(size, np.int32)
        comm.Alltoall(scount, rcount)
        sdispl = np.zeros(size, np.int32)
        rdispl = np.zeros(size, np.int32)
        np.cumsum(scount[:-1], out=sdispl[1:])
        np.cumsum(rcount[:-1], out=rdispl[1:])
        req = np.empty(int(rcount.sum()), np.int64)
        comm.Alltoallv([want, (scount, sdispl), MPI.INT64_T], [req, (rcount, rdispl), MPI.INT64_T])
        rows = np.take(self.shard, req, axis=0)  # the owner's gather
        back = np.empty((len(idx), rb), self.shard.dtype)
        comm.Alltoallv([rows, (rcount * rb, rdispl * rb), MPI.BYTE],
                       [back, (scount * rb, sdispl * rb), MPI.BYTE])
        out[order] = back


def remote_ranks(comm):
    """Ranks on other hosts than this one (on a single host: every other rank)."""
    hosts = comm.allgather(socket.gethostname())
    me = comm.Get_rank()
    remote = [r for r in range(comm.Get_size()) if hosts[r] != hosts[me]]
    return remote or [r for r in range(comm.Get_size()) if r != me]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 4096, 65536])
    p.add_argument("--seconds", type=float, default=1.0, help="timed per size (default 1)")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    remote = remote_ranks(comm)
    for rb in a.sizes:
        rows = max(1024, min(1 << 16, (16 << 20) // rb))
        shard = np.random.default_rng(rank).integers(0, 256, (rows, rb), dtype=np.uint8)
        g = Gather(comm, shard, rows)
        rng = np.random.default_rng(17 + rank)
        out = np.empty((a.k, rb), np.uint8)
        idx = rng.choice(remote, a.k) * rows + rng.integers(0, rows, a.k)
        g(idx, out)  # warm up, and check against the owners' shards
        for r in remote:
            sel = idx // rows == r
            want = np.random.default_rng(r).integers(0, 256, (rows, rb), dtype=np.uint8)[idx[sel] % rows]
            assert np.array_equal(out[sel], want), "wrong rows"
        n = 0
        comm.Barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        while True:  # same number of batches on every rank (collective)
            for _ in range(8):
                g(rng.choice(remote, a.k) * rows + rng.integers(0, rows, a.k), out)
            n += 8
            if comm.allreduce(time.perf_counter() - t0 >= a.seconds, op=MPI.LOR):
                break
        wall = time.perf_counter() - t0
        cpu = comm.allreduce(time.process_time() - c0)
        if rank == 0:
            print(f"gather ceiling {rb:6d} B: {size * n * a.k * rb / wall / 1e6:9.1f} MB/s (all ranks), "
                  f"{wall / n * 1e6:8.0f} us/batch, {cpu / (n * size) * 1e3:.3f} CPU ms/batch", flush=True)


if __name__ == "__main__":
    main()
