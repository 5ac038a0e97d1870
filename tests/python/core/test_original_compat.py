"""Call forms of the original ORNL DDStore (pyddstore.PyDDStore, Cython) that
code written for it uses, and the behaviours it relies on: README
ddstore_width grouping (rank // width; a width that does not divide the
size is a clear error on every rank), the newest original's constructor (handshake_dir in
third place, n_core, nic_map), register_recv/unregister_recv semantics,
get_profile(), and the exception classes its tests catch.

Every rank runs every test; all collective calls are made by every rank in
the same order.
"""
import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreKeyError, DDStoreRangeError, PyDDStore

NROWS, NCOLS = 16, 5


def rows_of(idx, dtype=np.float32):
    """Row g holds g * 100 + column: any misplaced row is visible."""
    idx = np.asarray(idx)
    return (idx[:, None] * 100 + np.arange(NCOLS)).astype(dtype)


def shard(group_rank):
    return rows_of(np.arange(group_rank * NROWS, (group_rank + 1) * NROWS))


@pytest.mark.parametrize("width", [1, 2, 3, 5])
def test_ddstore_width_groups_like_rank_div_width(comm, width):
    """PyDDStore(comm, ddstore_width=W) groups rank r with r // W as in the
    original README; a W that does not divide the size (or exceeds it) is a
    DDStoreValueError on every rank, and the communicator stays usable."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if size % width:
        with pytest.raises(pyddstore.DDStoreValueError, match="divide"):
            PyDDStore(comm, ddstore_width=width)
        comm.Barrier()
        return
    s = PyDDStore(comm, ddstore_width=width)
    try:
        assert (s.rank, s.size) == (rank, size)
        assert s.group_index == rank // width and s.group_rank == rank % width
        assert s.group_size == width == s.group_comm.Get_size()
        assert s.n_groups == size // width and s.width == width
        s.add("x", shard(s.group_rank))
        total = width * NROWS
        assert s.query("x").global_rows == total
        s.epoch_begin()
        out = np.zeros((total, NCOLS), dtype=np.float32)
        s.get("x", out, 0)
        assert np.array_equal(out, rows_of(np.arange(total)))
        rows = np.arange(total)[::-1].copy()
        s.get_batch("x", out, rows)  # group-collective for method 0
        assert np.array_equal(out, rows_of(rows))
        s.epoch_end()
        with pytest.raises(DDStoreRangeError):
            s.get("x", out[:1], total)  # the group's rows only
        assert s.verify("x").ok
    finally:
        s.free()


def test_newest_original_constructor_forms(comm):
    size = comm.Get_size()
    # n_core=0 and handshake_dir="" are the original's defaults.
    for kw in ({"n_core": 0}, {"handshake_dir": ""}, {"nic_map": "hsn0=0-127"}):
        s = PyDDStore(comm, 0, **kw)
        assert s.method == 0 and s.group_size == size
        s.free()
    # A path in third place is the original's handshake_dir (unused by method 0).
    s = PyDDStore(comm, 0, "/nonexistent/handshake")
    assert s.group_size == size and s.width == size
    s.free()
    with pytest.raises(pyddstore.DDStoreValueError, match="n_core"):
        PyDDStore(comm, 0, n_core=size)
    with pytest.raises(pyddstore.DDStoreTypeError, match="nic_map"):
        PyDDStore(comm, nic_map=3)
    with pytest.raises(pyddstore.DDStoreValueError, match="handshake_dir given twice"):
        PyDDStore(comm, 0, "/a", handshake_dir="/b")


def test_error_classes_the_original_tests_catch(comm):
    """get_batch out of range -> IndexError; wrong row count -> ValueError;
    out-of-range get and unknown names were ValueError in the original, and
    unsupported dtypes NotImplementedError."""
    s = PyDDStore(comm)
    try:
        s.add("x", shard(s.group_rank))
        total = s.group_size * NROWS
        s.epoch_begin()
        out = np.zeros((2, NCOLS), dtype=np.float32)
        with pytest.raises(IndexError):
            s.get_batch("x", out, [0, total])
        with pytest.raises(ValueError):
            s.get_batch("x", out, [0, 1, 2])
        with pytest.raises(ValueError):
            s.get("x", out, total)
        with pytest.raises(ValueError):
            s.get("missing", out, 0)
        with pytest.raises(KeyError):  # still a KeyError for code written for this package
            s.get("missing", out, 0)
        # A dtype the store cannot hold: NotImplementedError, as the original raised.
        with pytest.raises(NotImplementedError):
            s.get("x", np.zeros((1, NCOLS), dtype=np.complex64), 0)
        with pytest.raises(TypeError):  # and still the TypeError of this package
            s.get("x", np.zeros((1, NCOLS), dtype=np.complex64), 0)
        last = comm.Get_size() - 1  # on one rank only: the class reaches every rank
        with pytest.raises(NotImplementedError):
            s.add("c", np.zeros((2, 2), dtype=np.complex64 if comm.Get_rank() == last else np.float32))
        with pytest.raises(NotImplementedError):
            s.add("o", np.array([None, 1], dtype=object))
        # The store is still usable, and the index list may be a Python list.
        s.get_batch("x", out, [total - 1, 0])
        assert np.array_equal(out, rows_of([total - 1, 0]))
        s.epoch_end()
    finally:
        s.free()


def test_register_recv_like_the_original(comm):
    """(name, arr) form; registering twice is a no-op; one unregister undoes
    it; a second one raises ValueError except with method 0."""
    s = PyDDStore(comm)
    try:
        s.add("x", shard(s.group_rank))
        total = s.group_size * NROWS
        pool = np.zeros((8, NCOLS), dtype=np.float32)
        s.register_recv("x", pool)
        s.register_recv("x", pool)
        s.register_recv("x", pool[:4])  # part of a registered buffer: no-op
        idx = np.arange(4) % total
        s.get_batch("x", pool[4:], idx)
        assert np.array_equal(pool[4:], rows_of(idx))
        s.unregister_recv("x", pool)
        if s.method == 0:
            s.unregister_recv("x", pool)  # the original ignores it for method 0
        else:
            with pytest.raises(ValueError):
                s.unregister_recv("x", pool)
        # More bytes at a registered address: unregister first (methods 1/2).
        big = np.zeros((16, NCOLS), dtype=np.float32)
        s.register_recv(big[:8])
        if s.method != 0:
            with pytest.raises(pyddstore.DDStoreValueError, match="already registered"):
                s.register_recv(big)
        s.unregister_recv(big)
        if s.method != 0:
            with pytest.raises(DDStoreKeyError):
                s.unregister_recv(big)
        comm.Barrier()
    finally:
        s.free()
    with pytest.raises(pyddstore.DDStoreStateError):
        s.unregister_recv(pool)


def test_get_profile_keys(comm):
    s = PyDDStore(comm)
    try:
        s.add("x", shard(s.group_rank))
        out = np.zeros((1, NCOLS), dtype=np.float32)
        s.get("x", out, 0)
        p = s.get_profile("x")
        assert set(p) == {"calls", "lock_wait", "mr", "mr_miss", "read", "cq", "rows",
                          "py_gets", "py_get", "py_sync"}
        assert p["calls"] >= 1 and p["rows"] >= 1 and p["mr_miss"] == 0
        with pytest.raises(KeyError):
            s.get_profile("missing")
    finally:
        s.free()
