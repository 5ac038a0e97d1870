"""init (collective allocation of raw-bytes rows) + update (local writes) + sync."""
import numpy as np
import pytest

from core_helpers import layout, same_bytes, values

import pyddstore


def test_init_update_sync_read_back(comm, store):
    s = store
    counts, offsets = layout(s.group_size)
    n = counts[s.group_rank]
    s.init("raw", n, 3, 8)  # rows of 3 float64 (24 bytes), original signature
    q = s.query("raw")
    assert q.dtype is None and q.row_bytes == 24 and q.local_rows == n and q.row_shape is None
    assert s.info("raw") == (int(offsets[-1]), 3, 8)
    total = q.global_rows
    zeros = np.ones((total, 3))
    s.get("raw", zeros)  # zero-filled before any update
    assert not zeros.any()
    comm.Barrier()  # nobody writes before everybody has read the zeros
    lo = offsets[s.group_rank]
    mine = values(np.arange(lo, lo + n), (3,), "float64")
    # Two partial writes at local offsets.
    s.update("raw", mine[:1], 0)
    s.update("raw", mine[1:], offset=min(n, 1))
    s.sync()
    out = np.zeros((total, 3))
    s.get("raw", out, 0)
    assert same_bytes(out, values(np.arange(total), (3,), "float64"))
    # A raw variable reads into any dtype whose rows have its row size.
    as_bytes = np.zeros((total, 24), dtype=np.uint8)
    s.get("raw", as_bytes)
    assert as_bytes.tobytes() == out.tobytes()
    as_i32 = np.zeros((total, 6), dtype=np.int32)
    s.get_batch("raw", as_i32, np.arange(total))
    assert as_i32.tobytes() == out.tobytes()


def test_update_typed_variable_and_epoch_visibility(comm, store):
    s = store
    counts, offsets = layout(s.group_size)
    lo, n = offsets[s.group_rank], counts[s.group_rank]
    s.add("t", np.zeros((n, 2), dtype=np.int32))
    mine = values(np.arange(lo, lo + n), (2,), "int32", salt=9)
    s.update("t", mine)
    s.epoch_begin()  # epoch_begin publishes updates as sync does
    out = np.zeros((int(offsets[-1]), 2), dtype=np.int32)
    s.get("t", out)
    s.epoch_end()
    assert same_bytes(out, values(np.arange(offsets[-1]), (2,), "int32", salt=9))
    with pytest.raises(pyddstore.DDStoreTypeError, match="int32"):
        s.update("t", mine.astype(np.int64))
    with pytest.raises(pyddstore.DDStoreValueError):
        s.update("t", np.zeros((1, 3), dtype=np.int32))
    with pytest.raises(pyddstore.DDStoreRangeError):
        s.update("t", np.zeros((1, 2), dtype=np.int32), n)
    with pytest.raises(pyddstore.DDStoreRangeError):
        s.update("t", np.zeros((1, 2), dtype=np.int32), -1)
    s.update("t", np.zeros((0, 2), dtype=np.int32), n)  # zero rows at the end is fine


def test_init_bad_arguments_raise_everywhere(comm, store):
    with pytest.raises(pyddstore.DDStoreValueError):
        store.init("z", 3, 0)
    with pytest.raises(pyddstore.DDStoreValueError):  # DDS_EINVAL, as C's dds_init
        store.init("z", -1, 4)
    with pytest.raises(pyddstore.DDStoreTypeError):
        store.init("z", 2.5, 4)
    if comm.Get_size() > 1:
        # row size differs on one rank
        with pytest.raises(pyddstore.DDStoreValueError, match="disagree"):
            store.init("z", 1, 4 if comm.Get_rank() else 8)
    store.init("z", np.int64(1), np.int32(4), itemsize=np.uint8(2))  # still usable
    assert store.query("z").row_bytes == 8
