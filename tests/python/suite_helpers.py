"""Helpers shared by the Python test suites (tests/python/*/) and the
benchmarks (bench/_common.py): the suites' own helper modules
(core/core_helpers.py, fabric/fabric_helpers.py) and the benchmarks import
these instead of keeping copies. Importable as `suite_helpers` from any test
(pytest puts tests/python, the top conftest.py's folder, on sys.path); a
script started on its own puts tests/python on sys.path first.
"""
import contextlib
import os
import tempfile
import threading
import time

import numpy as np


@contextlib.contextmanager
def environ(**kv):
    """Set (or, with None, unset) environment variables for the block, and
    restore them after; libddstore reads them when a store is created."""
    old = {k: os.environ.get(k) for k in kv}
    for k, v in kv.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def shared_tmpdir(comm, prefix="ddstore-test-"):
    """A fresh directory name agreed by all ranks (rank 0 creates it)."""
    d = tempfile.mkdtemp(prefix=prefix) if comm.Get_rank() == 0 else None
    return comm.bcast(d, root=0)


def owners_of(offsets, rows):
    """The group rank holding each of `rows`; `offsets`: each rank's first
    global row, then the total."""
    return np.searchsorted(offsets, rows, side="right") - 1


def remote_owners(offsets, rows, near):
    """How many distinct ranks outside `near` (a set of group ranks) hold
    `rows`: the gather requests one batched read of `rows` sends."""
    return len(set(owners_of(offsets, rows).tolist()) - set(near))


def read_while_rewritten(store, comm, name, batches):
    """Read `batches` (row arrays, the same count on every rank: method 0's
    reads may be collective) of the versioned int64 variable `name` (its
    rows init_versioned by every rank) while a writer thread on this rank
    rewrites its own rows, every word of a row stamped with the update count
    and the row; checks every row read whole and its own. Raises the
    writer's error."""
    q = store.query(name)
    nloc, width = q.local_rows, q.row_bytes // 8
    stop, errors = threading.Event(), []

    def writer():
        u = 0
        buf = np.empty((1, width), dtype=np.int64)
        try:
            while not stop.is_set():
                u += 1
                slot = u % nloc
                buf.fill((u << 20) | (q.first_row + slot))
                store.update(name, buf, slot)
                # A simulation computes between steps. A writer that rewrites a row more often
                # than one read of it takes starves the readers of that block (DDS_EAGAIN, as
                # documented): MPICH's method-0 reads over RMA at 4 ranks on 2 loaded cores took
                # longer than the 0.8 ms a 0.2 ms pause gave each of the 4 rows, and failed.
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=writer)
    th.start()
    try:
        for rows in batches:
            out = np.empty((len(rows), width), dtype=np.int64)
            store.get_batch(name, out, rows)
            for r, row in zip(rows, out):
                assert (row == row[0]).all(), f"row {r} is torn"
                assert row[0] == 0 or row[0] & 0xFFFFF == r, f"row {r} holds another row"
    finally:
        comm.Barrier()
        stop.set()
        th.join()
    assert not errors, errors
