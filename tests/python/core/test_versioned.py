"""Versioned variables from Python: init_versioned, generation, block_rows,
and rows rewritten by a writer thread while every rank reads them."""

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreValueError

from core_helpers import METHOD
from suite_helpers import read_while_rewritten


def test_versioned_basics(store, comm):
    s = store
    rank, size = comm.Get_rank(), comm.Get_size()
    nloc = 3 + rank
    pyddstore.init_versioned(s, "v/x", nloc, 4, 8, block_rows=2)
    assert pyddstore.block_rows(s, "v/x") == 2
    assert "v/x" in s.names() and all("\x1f" not in n for n in s.names())
    q = s.query("v/x")
    assert pyddstore.generation(s, "v/x", 0) == 0
    comm.Barrier()  # every rank saw the fresh counter before any rank updates
    rows = np.full((nloc, 4), rank + 1, dtype=np.int64)
    s.update("v/x", rows, 0)
    comm.Barrier()  # no sync needed for a versioned variable: the update is visible on return
    out = np.zeros((q.global_rows, 4), dtype=np.int64)
    s.get_batch("v/x", out, np.arange(q.global_rows))
    owner = np.searchsorted(q.offsets, np.arange(q.global_rows), side="right") - 1
    assert (out == (owner + 1)[:, None]).all()
    # One update per block: counters at 2 on every block of every rank.
    firsts = [int(q.offsets[r]) for r in range(size)]
    assert all(pyddstore.generation(s, "v/x", f) == 2 for f in firsts)
    s.add("v/plain", np.zeros((2, 1), dtype=np.int32))
    assert pyddstore.block_rows(s, "v/plain") == 0
    with pytest.raises(DDStoreValueError, match="not versioned"):
        pyddstore.generation(s, "v/plain", 0)


def test_bad_block_rows_fails_on_every_rank(store):
    with pytest.raises(DDStoreValueError, match="block_rows"):
        pyddstore.init_versioned(store, "v/bad", 2, 8, block_rows=0)
    assert "v/bad" not in store.names()


def test_rows_never_torn_while_rewritten(store, comm):
    """A writer thread on every rank rewrites its rows with a stamp in every
    word; every rank reads rows of all ranks meanwhile and checks them."""
    s = store
    pyddstore.init_versioned(s, "v/ring", 4, 1024, 8, block_rows=1)
    rng = np.random.default_rng(comm.Get_rank())
    total = s.query("v/ring").global_rows
    read_while_rewritten(s, comm, "v/ring", (rng.integers(total, size=8) for _ in range(100)))
    if METHOD == 0:
        s.sync()


@pytest.mark.parametrize("call", ["init", "init_versioned"])
def test_init_checks_are_one_with_one_code(store, comm, call):
    """init and init_versioned make the same argument checks, with the codes
    C gives (dds_init, dds_init_versioned), on every rank when one rank is bad."""
    from pyddstore.util import DDS_EINVAL, DDS_EMISMATCH, DDS_EOVERFLOW

    init = getattr(store, call)
    rank = comm.Get_rank()
    for i, (args, code) in enumerate([((-1, 4), DDS_EINVAL), ((2, 0), DDS_EINVAL), ((2, 4, 0), DDS_EINVAL),
                                      ((1 << 62, 4), DDS_EOVERFLOW)]):
        name = f"chk/{call}/{i}"
        # Every rank bad, then only the last rank bad (the others learn of it).
        for bad in (True, rank == comm.Get_size() - 1):
            with pytest.raises(DDStoreValueError) as ei:
                init(name, *(args if bad else (2, 4)))
            assert ei.value.code == code, (args, ei.value)
        assert name not in store.names()
    if comm.Get_size() > 1:
        with pytest.raises(DDStoreValueError) as ei:
            init(f"chk/{call}/rows", 2, 4 + rank)
        assert ei.value.code == DDS_EMISMATCH


def test_versioned_calls_are_methods(store):
    """The module functions are aliases of the PyDDStore methods."""
    store.init_versioned("m/x", 2, 4, block_rows=2)
    pyddstore.init_versioned(store, "m/y", 2, 4)
    assert store.block_rows("m/x") == pyddstore.block_rows(store, "m/x") == 2
    assert store.block_rows("m/y") == 1
    assert store.generation("m/x", 0) == pyddstore.generation(store, "m/x", 0) == 0
