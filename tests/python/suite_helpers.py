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
