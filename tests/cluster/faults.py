"""Processes of the cross-host fault tests (driven by tests/cluster/faults.sh).

    python faults.py core DIR        a method-2 core rank (under mpiexec): holds
                                     rows, publishes in DIR/hs, serves until
                                     DIR/stop exists, then frees
    python faults.py reader DIR N    a method-2 reader of the N core ranks (no
                                     MPI): reads every row bit-exact, writes
                                     DIR/read-ok, waits for DIR/fault, then
                                     reads the rows of the core rank on the
                                     faulty host again and must get a clean
                                     error within the read timeout
    python faults.py job DIR         method 1 core rank reading in a loop (the
                                     host-kill test): writes DIR/running.<rank>

Files beside the handshake directory coordinate the processes; each wait is
bounded, so a process never outlives its test by much even if the driver
dies. The reader prints one line "FAULT-RESULT <json>" that the driver checks.
"""
import json
import os
import sys
import time

import numpy as np

WAIT_S = 120          # longest any process waits for a coordination file
ROW_SHAPE = (64,)     # 512 bytes per row


def rows_of(rank):
    return 100 + 17 * rank


def values(rows):
    rows = np.asarray(rows, dtype=np.int64)
    return (rows[:, None] * 1000003 + np.arange(ROW_SHAPE[0])[None, :]).astype(np.float64)


def wait_for(path, limit=WAIT_S):
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > limit:
            raise SystemExit(f"faults.py: {path} did not appear within {limit} s")
        time.sleep(0.05)


def touch(path):
    with open(path, "w"):
        pass


def core(d):
    from mpi4py import MPI
    from pyddstore import PyDDStore
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    offsets = np.cumsum([0] + [rows_of(r) for r in range(comm.Get_size())])
    s = PyDDStore(comm, 2, handshake_dir=os.path.join(d, "hs"), fabric=os.environ.get("DDSTORE_FABRIC"))
    s.add("f/x", values(np.arange(offsets[rank], offsets[rank + 1])))
    touch(os.path.join(d, f"published.{rank}"))
    wait_for(os.path.join(d, "stop"), limit=WAIT_S + 60)
    s.free()


def reader(d, n_core):
    import pyddstore
    offsets = np.cumsum([0] + [rows_of(r) for r in range(n_core)])
    s = pyddstore.join("f/x", handshake_dir=os.path.join(d, "hs"), n_core=n_core, timeout=60)
    total = int(offsets[-1])
    out = np.empty((total,) + ROW_SHAPE)
    s.get("f/x", out, 0)
    assert out.tobytes() == values(np.arange(total)).tobytes(), "rows differ before the fault"
    touch(os.path.join(d, "read-ok"))
    wait_for(os.path.join(d, "fault"))
    # The rows of the last core rank, which lives on the faulty host.
    lo, hi = int(offsets[-2]), int(offsets[-1])
    part = np.empty((hi - lo,) + ROW_SHAPE)
    t0 = time.monotonic()
    result = {"outcome": "read", "seconds": None, "error": None, "type": None}
    try:
        for _ in range(1000):  # a read may still complete from buffers; keep reading
            s.get("f/x", part, lo)
            time.sleep(0.01)
            if time.monotonic() - t0 > WAIT_S:
                break
    except pyddstore.DDStoreError as e:
        result.update(outcome="error", error=str(e), type=type(e).__name__)
    result["seconds"] = round(time.monotonic() - t0, 2)
    print("FAULT-RESULT " + json.dumps(result), flush=True)
    try:
        s.free()
    except pyddstore.DDStoreError:
        pass


def job(d):
    from mpi4py import MPI
    from pyddstore import PyDDStore
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    offsets = np.cumsum([0] + [rows_of(r) for r in range(size)])
    s = PyDDStore(comm, int(os.environ.get("DDSTORE_METHOD", "1")))
    s.add("f/x", values(np.arange(offsets[rank], offsets[rank + 1])))
    touch(os.path.join(d, f"running.{rank}"))
    rng = np.random.default_rng(rank)
    out = np.empty((32,) + ROW_SHAPE)
    t0 = time.monotonic()
    # Reads (collective with method 0) until killed; bounded all the same.
    while time.monotonic() - t0 < WAIT_S:
        rows = rng.integers(0, int(offsets[-1]), size=32)
        s.get_batch("f/x", out, rows)
        comm.Barrier()
    raise SystemExit("faults.py job: never killed")


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "core":
        core(sys.argv[2])
    elif role == "reader":
        reader(sys.argv[2], int(sys.argv[3]))
    elif role == "job":
        job(sys.argv[2])
    else:
        raise SystemExit(f"faults.py: unknown role {role!r}")
