"""Integrity: checksums recorded per shard (pyddstore._verify.record) and a
verify that reads every row back through the store's read path; a shard
corrupted on purpose is detected, on every rank alike, down to its block.

The test-only corruption path is ``update()`` + ``sync()`` behind the
recorded checksum's back: to verify, that is indistinguishable from memory
corruption. Also a short soak (bench/soak.py's loop, 4 MiB per rank) so that
the soak script itself is exercised at every rank count.
"""
import os
import sys

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, DDStoreStateError, PyDDStore
from pyddstore import _verify

METHODS = [0] + ([1, 2] if pyddstore.has_fabric() else [])


@pytest.fixture
def small_blocks(monkeypatch):
    # Small blocks, and read pieces that are not a multiple of them, so that
    # block chaining across pieces is exercised with little data.
    monkeypatch.setattr(_verify, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(_verify, "READ_BYTES", 3 * 4096 + 512)


def make(comm, method, tmp_path_factory, width=None):
    hs = None
    if method == 2:
        hs = comm.bcast(str(tmp_path_factory.mktemp("hs") / "d") if comm.Get_rank() == 0 else None)
    s = PyDDStore(comm, method=method, ddstore_width=width, handshake_dir=hs)
    s_hs[id(s)] = hs
    return s


s_hs = {}


def rows_for(rank, size):
    return 0 if (size > 2 and rank == 1) else 300 + 41 * rank  # one rank without rows


@pytest.mark.parametrize("method", METHODS)
def test_verify_detects_corrupt_shard(comm, small_blocks, tmp_path_factory, method):
    rank, size = comm.Get_rank(), comm.Get_size()
    s = make(comm, method, tmp_path_factory)
    n = rows_for(rank, size)
    first = comm.exscan(n) or 0
    data = (np.arange(first, first + n, dtype=np.float64)[:, None] * 10 + np.arange(10)).astype(np.float32)
    s.add("v", data)
    t = _verify.record(s, "v", local=data)
    assert t == _verify.record(s, "v")  # from the array == read back through the store
    rep = _verify.verify(s, "v")
    assert rep.ok, rep.describe()
    assert rep.rows == s.query("v").global_rows
    # Corrupt one row of the last rank's shard (rows 300 + 41 * (size-1)).
    victim = size - 1
    bad_local = 123
    if rank == victim:
        s.update("v", np.full((1, 10), -7, np.float32), bad_local)
    s.sync()
    rep = _verify.verify(s, "v")
    assert not rep.ok
    assert len(rep.mismatches) == 1, rep.mismatches
    m = rep.mismatches[0]
    bad_global = int(s.query("v").offsets[victim]) + bad_local
    assert m.shard == victim and m.first_row <= bad_global < m.first_row + m.rows, (m, bad_global)
    assert comm.allgather(rep) == [rep] * size  # the same report everywhere
    with pytest.raises(DDStoreError, match=r"1 corrupt block\(s\): group 0 shard"):
        _verify.verify(s, "v", strict=True)
    _verify.record(s, "v")  # accept the new contents
    assert _verify.verify(s, "v").ok
    s.free()


def test_verify_groups_and_init(comm, small_blocks, tmp_path_factory):
    rank, size = comm.Get_rank(), comm.Get_size()
    width = size // 2 if size % 2 == 0 and size > 1 else size
    s = make(comm, 0, tmp_path_factory, width=width)
    s.init("raw", 50 + rank, 24)
    s.update("raw", np.full((50 + rank, 24), rank + 1, np.uint8))
    s.sync()
    with pytest.raises(DDStoreStateError, match=r"no checksum recorded for variable 'raw'"):
        _verify.table(s, "raw")
    _verify.record(s, "raw")
    assert _verify.verify(s, "raw").ok
    if s.group_index == 0 and s.group_rank == 0:
        s.update("raw", np.zeros((1, 24), np.uint8), 49)
    s.sync()
    rep = _verify.verify(s, "raw")
    assert not rep.ok and {m.group for m in rep.mismatches} == {0}, rep.mismatches
    s.free()


@pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")
def test_reader_verifies_against_core_table(comm, tmp_path_factory):
    rank, size = comm.Get_rank(), comm.Get_size()
    s = make(comm, 2, tmp_path_factory)
    n = rows_for(rank, size)
    first = comm.exscan(n) or 0
    s.add("v", np.arange(first, first + n, dtype=np.int64))
    t = _verify.record(s, "v")
    r = pyddstore.join("v", handshake_dir=s_hs[id(s)], n_core=size, timeout=30)
    try:
        assert _verify.verify(r, "v", expected=t).ok
        with pytest.raises(pyddstore.DDStoreNotSupportedError, match=r"needs expected="):
            _verify.verify(r, "v")
    finally:
        r.free()
    comm.Barrier()
    s.free()


def test_short_soak(comm, tmp_path_factory):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
    import soak

    methods = ["m0_shm", "m0_rma"] + (["m1_shm", "m2_shm"] if pyddstore.has_fabric() else [])
    for i, m in enumerate(methods):
        method, env = soak.METHODS[m]
        r = soak.run_method(m, method, env, local_rows=1024, salt=7 + i,
                            hsroot=comm.bcast(str(tmp_path_factory.mktemp("soak")) if comm.Get_rank() == 0 else None))
        assert "skipped" in r or (r["bad_rows"] == 0 and r["verify_ok"]), r
