"""One misuse case, run on every rank of an MPI job (see test_misuse.py).

``python cases.py CASE METHOD`` builds a small store (method 0 or 1) and makes
one rank misbehave as CASE says, then prints one line per rank:
``RESULT <rank> ok`` when the calls simply worked, or
``RESULT <rank> error <ExceptionClass> <message>`` for the error the rank got.
The driver checks that every rank printed a line (no hang) and that the
messages are the expected ones.
"""

import sys

import numpy as np
from mpi4py import MPI

from pyddstore import DDStoreError, PyDDStore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
BAD = 1  # the misbehaving rank
ROWS = 6


def report(err=None):
    if err is None:
        print(f"RESULT {rank} ok", flush=True)
    else:
        text = " ".join(str(err).split())
        print(f"RESULT {rank} error {type(err).__name__} {text}", flush=True)


def store(method):
    s = PyDDStore(comm, method=method)
    s.add("x", np.arange(rank * ROWS, (rank + 1) * ROWS, dtype=np.int64).reshape(ROWS, 1) * 10)
    return s


def rows():
    """One row of every rank's shard: every read crosses ranks."""
    return np.array([(r * ROWS + 1) % (size * ROWS) for r in range(size)], dtype=np.int64)


def check(out):
    expect = rows() * 10
    if not np.array_equal(out[:, 0], expect):
        raise AssertionError(f"read {out[:, 0]} instead of {expect}")


def unequal(s, then):
    """Rank BAD reads one batch more than the others, then every rank calls `then`."""
    out = np.empty((size, 1), np.int64)
    for _ in range(3 + (rank == BAD)):
        s.get_batch("x", out, rows())
        check(out)
    if then == "free":
        s.free()
    elif then == "epoch_end":
        s.epoch_end()


def one_rank_bad(s, what):
    out = np.empty((size, 1), np.int64)
    name, r, o = "x", rows(), out
    if rank == BAD:
        if what == "name":
            name = "y"
        elif what == "rows":
            r = np.array([size * ROWS + 5], dtype=np.int64)
        elif what == "dtype":
            o = np.empty((size, 1), np.float32)
        elif what == "output":
            o = np.empty((1, 1), np.int64)
    s.get_batch(name, o, r)
    check(o)


def raise_between(s):
    """Rank BAD raises (its own exception) between two reads and frees the store."""
    out = np.empty((size, 1), np.int64)
    s.get_batch("x", out, rows())
    try:
        if rank == BAD:
            raise RuntimeError("user code failed between reads")
        s.get_batch("x", out, rows())
        s.get_batch("x", out, rows())
    finally:
        s.free()


def loader_break(method):
    import torch

    from pyddstore.torch import DistDataset, ThreadDataLoader

    src = [torch.full((3,), float(i)) for i in range(rank * 32, (rank + 1) * 32)]
    ds = DistDataset(src, "brk", comm=comm, method=method)
    loader = ThreadDataLoader(ds, batch_size=4, num_workers=2)
    for epoch in range(2):
        for n, batch in enumerate(loader):
            if rank == BAD and n == 2 and epoch == 0:
                break
    del loader
    ds.free()


def main():
    case, method = sys.argv[1], int(sys.argv[2])
    s = None
    try:
        if case == "loader_break":
            loader_break(method)
        else:
            s = store(method)
            if case.startswith("unequal_"):
                if case == "unequal_epoch_end":
                    s.epoch_begin()
                unequal(s, case[len("unequal_"):])
            elif case.startswith("bad_"):
                one_rank_bad(s, case[len("bad_"):])
            elif case == "raise_between":
                raise_between(s)
            elif case == "read":
                out = np.empty((size, 1), np.int64)
                s.get_batch("x", out, rows())
                check(out)
            else:
                raise SystemExit(f"unknown case {case}")
        report()
    except (DDStoreError, RuntimeError, IndexError, KeyError, ValueError, TypeError) as e:
        report(e)
    if s is not None:
        try:
            s.free()
        except DDStoreError as e:
            print(f"FREE-FAILED {rank} {e}", flush=True)


if __name__ == "__main__":
    main()
