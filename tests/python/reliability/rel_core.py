"""Child MPI program for the system-level fault tests (test_system.py).

    mpiexec -n N python -m mpi4py rel_core.py MODE DIR [ROWS]

MODE raise: rank 1 (or 0 alone) raises after creating a store; the job
must end, not hang. MODE serve: a method-2 core group publishes variable "x"
(int64 rows of 256 values, value = global row * 256 + column) in DIR/hs,
writes DIR/pid.<rank> and DIR/ready, then serves until DIR/stop exists and
frees the store (writes DIR/freed.<rank>). MODE huge: init of ROWS one-byte
rows must fail with DDStoreError on every rank, after which a valid read
still works (prints "clean <class>").
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import pyddstore
from pyddstore import PyDDStore

COLS = 256


def main():
    mode, d = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if mode == "raise":
        s = PyDDStore(comm)
        s.add("x", np.ones((2, 2), np.float32))
        comm.Barrier()
        if rank == min(1, size - 1):
            raise RuntimeError("rank fails on purpose")
        s.get_batch("x", np.zeros((1, 2), np.float32), [0])  # others wait in a collective
        comm.Barrier()
        return
    if mode == "huge":
        s = PyDDStore(comm)
        s.add("x", np.full((2, 2), rank, np.float32))
        try:
            s.init("huge", int(sys.argv[3]), 1)
            print(f"rank {rank}: init succeeded", flush=True)
        except pyddstore.DDStoreError as e:
            out = np.zeros((2 * size, 2), np.float32)
            s.get_batch("x", out, np.arange(2 * size))
            assert (out[:, 0] == np.repeat(np.arange(size), 2)).all()
            print(f"clean {type(e).__name__} rank {rank}: {e}", flush=True)
        s.free()
        return
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
    s = PyDDStore(comm, method=2, handshake_dir=os.path.join(d, "hs"))
    first = comm.exscan(rows) or 0
    g = np.arange(first, first + rows, dtype=np.int64)[:, None]
    s.add("x", g * COLS + np.arange(COLS, dtype=np.int64)[None, :])
    with open(os.path.join(d, f"pid.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    comm.Barrier()
    if rank == 0:
        with open(os.path.join(d, "ready"), "w") as f:
            f.write("ok")
    while not os.path.exists(os.path.join(d, "stop")):
        time.sleep(0.05)
    comm.Barrier()
    s.free()
    with open(os.path.join(d, f"freed.{rank}"), "w") as f:
        f.write("ok")


if __name__ == "__main__":
    main()
