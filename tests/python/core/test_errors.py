"""Bad inputs raise the right DDStoreError subclass on every rank, name the
variable, and leave the store usable (no rank is left behind in a collective)."""
import numpy as np
import pytest

import pyddstore
from pyddstore import (DDStoreError, DDStoreKeyError, DDStoreRangeError, DDStoreStateError,
                       DDStoreTypeError, DDStoreValueError)

from core_helpers import local_values, make_store, same_bytes, values


@pytest.fixture
def filled(store):
    store.add("f", local_values(store, (2,), "float64"))
    store.add("u8", local_values(store, (), "uint8"))
    return store


def _check_still_usable(s):
    total = s.query("f").global_rows
    out = np.zeros((total, 2))
    s.get("f", out)
    assert same_bytes(out, values(np.arange(total), (2,), "float64"))
    s.get_batch("f", out, np.arange(total))
    assert same_bytes(out, values(np.arange(total), (2,), "float64"))


def test_hierarchy():
    assert issubclass(DDStoreKeyError, KeyError) and issubclass(DDStoreValueError, ValueError)
    assert issubclass(DDStoreTypeError, TypeError) and issubclass(DDStoreRangeError, IndexError)
    assert issubclass(DDStoreStateError, RuntimeError)
    assert issubclass(pyddstore.DDStoreNotSupportedError, NotImplementedError)
    assert issubclass(pyddstore.DDStoreTimeoutError, TimeoutError)
    for cls in (DDStoreKeyError, DDStoreValueError, DDStoreTypeError, DDStoreRangeError):
        assert issubclass(cls, DDStoreError)


def test_unknown_name(filled):
    s = filled
    out = np.zeros((1, 2))
    with pytest.raises(DDStoreKeyError, match="'nope'") as ei:
        s.get("nope", out, 0)
    assert ei.value.code == pyddstore._errors.DDS_ENOENT
    assert "nope" in str(ei.value) and not str(ei.value).startswith("\"")
    with pytest.raises(KeyError):
        s.query("nope")
    with pytest.raises(KeyError):
        s.get_batch("nope", out, [0])  # every rank raises before the collective
    with pytest.raises(KeyError):
        s.update("nope", out)
    with pytest.raises(DDStoreTypeError):
        s.get(3, out, 0)
    _check_still_usable(s)


def test_bad_names_in_add(filled):
    s = filled
    arr = np.zeros((1, 2))
    with pytest.raises(DDStoreValueError, match="already exists"):
        s.add("f", local_values(s, (2,), "float64"))
    with pytest.raises(DDStoreValueError):
        s.add("", arr)
    with pytest.raises(DDStoreValueError):
        s.add("a\0b", arr)
    with pytest.raises(DDStoreValueError):
        s.add("x" * 256, arr)
    with pytest.raises(DDStoreTypeError):
        s.add(b"bytes", arr)
    s.add("label/record_array", local_values(s, (), "uint8"))  # slashes are fine
    assert "label/record_array" in s.names()
    _check_still_usable(s)


def test_mismatch_across_ranks(comm, filled):
    s = filled
    if comm.Get_size() == 1:
        return
    r = comm.Get_rank()
    # row size differs on one rank
    with pytest.raises(DDStoreValueError, match="disagree"):
        s.add("m1", np.zeros((2, 4 if r == 0 else 3)))
    # dtype differs on one rank
    with pytest.raises(DDStoreValueError, match="disagree"):
        s.add("m2", np.zeros((2, 2), dtype=np.float64 if r == 0 else np.int64))
    # name differs on one rank
    with pytest.raises(DDStoreValueError, match="disagree"):
        s.add("m3" if r == 0 else "m4", np.zeros((2, 2)))
    # an unsupported dtype on the last rank only: the class reaches every rank
    last = comm.Get_size() - 1
    with pytest.raises(DDStoreTypeError) as ei:
        s.add("m5", np.zeros(2, dtype=np.complex64 if r == last else np.float32))
    if r != last:
        assert str(ei.value).startswith(f"rank {last}:")
    assert s.names() == ["f", "u8"]
    _check_still_usable(s)


def test_out_of_range_and_negative(filled):
    s = filled
    total = s.query("f").global_rows
    with pytest.raises(DDStoreRangeError, match="'f'"):
        s.get("f", np.zeros((1, 2)), total)
    with pytest.raises(DDStoreRangeError):
        s.get("f", np.zeros((2, 2)), total - 1)
    with pytest.raises(DDStoreRangeError):
        s.get("f", np.zeros((1, 2)), -1)
    with pytest.raises(DDStoreRangeError):
        s.get("f", np.zeros((1, 2)), np.int64(-5))
    with pytest.raises(DDStoreRangeError):
        s.get("f", np.zeros((1, 2)), 2 ** 70)
    with pytest.raises(DDStoreRangeError):
        s.get_batch("f", np.zeros((2, 2)), [0, total])
    with pytest.raises(DDStoreRangeError):
        s.get_batch("f", np.zeros((2, 2)), [-1, 0])
    with pytest.raises(DDStoreRangeError):
        s.get_batch("f", np.zeros((1, 2)), np.array([2 ** 64 - 1], dtype=np.uint64))
    with pytest.raises(DDStoreRangeError):
        s.get_ranges("f", np.zeros((4, 2)), [total - 1], [2])
    with pytest.raises(DDStoreRangeError):
        s.get_ranges("f", np.zeros((4, 2)), [0], [-1])
    with pytest.raises(DDStoreTypeError):
        s.get("f", np.zeros((1, 2)), 1.0)
    with pytest.raises(DDStoreTypeError):
        s.get_batch("f", np.zeros((1, 2)), [0.0])
    _check_still_usable(s)


def test_wrong_dtype_shape_and_memory(filled):
    s = filled
    with pytest.raises(DDStoreTypeError, match="float64"):
        s.get("f", np.zeros((1, 2), dtype=np.float32), 0)
    with pytest.raises(DDStoreTypeError):
        s.get("f", np.zeros((1, 2), dtype=">f8"), 0)  # non-native byte order
    with pytest.raises(DDStoreTypeError):
        s.get("f", np.zeros((1, 2), dtype=object), 0)
    with pytest.raises(DDStoreValueError, match="16 bytes"):
        s.get("f", np.zeros((1, 3)), 0)  # row size mismatch
    with pytest.raises(DDStoreValueError):
        s.get("f", np.zeros(2), 0)  # 1-D: one value per row, 8 != 16 bytes
    with pytest.raises(DDStoreValueError, match="C-contiguous"):
        s.get("f", np.zeros((2, 4))[:, ::2], 0)
    with pytest.raises(DDStoreValueError, match="C-contiguous"):
        s.get("u8", np.zeros(4, dtype=np.uint8)[::2], 0)
    ro = np.zeros((1, 2))
    ro.flags.writeable = False
    with pytest.raises(DDStoreValueError, match="read-only"):
        s.get("f", ro, 0)
    with pytest.raises(DDStoreTypeError):
        s.get("f", [[0.0, 0.0]], 0)  # a list would be copied: data lost
    with pytest.raises(DDStoreTypeError):
        s.get("f", np.float64(1.0), 0)  # a numpy scalar would be copied
    with pytest.raises(DDStoreValueError, match="0-dimensional"):
        s.get("f", np.zeros(()), 0)
    with pytest.raises(DDStoreValueError, match="output has 1 rows"):
        s.get_batch("f", np.zeros((1, 2)), [0, 0])  # too small output
    with pytest.raises(DDStoreValueError):
        s.get_ranges("f", np.zeros((1, 2)), [0], [2])
    with pytest.raises(DDStoreValueError):
        s.get_ranges("f", np.zeros((2, 2)), [0, 1], [1])
    with pytest.raises(DDStoreValueError):
        s.get_batch("f", np.zeros((4, 2)), np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(DDStoreTypeError):
        s.add("c", np.zeros((2, 2), dtype=np.complex128))
    with pytest.raises(DDStoreTypeError):
        s.add("o", np.array([None, 1], dtype=object))
    with pytest.raises(DDStoreValueError):
        s.add("z", np.zeros((2, 0)))
    _check_still_usable(s)


def test_bad_batch_on_one_rank_keeps_ranks_together(comm, filled):
    """A bad get_batch on one rank must neither hang the others nor
    desynchronise later batched reads."""
    s = filled
    total = s.query("f").global_rows
    r = comm.Get_rank()
    rows = [total] if r == 0 else [0]
    try:
        s.get_batch("f", np.zeros((1, 2)), rows)
        raised = False
    except DDStoreError:
        raised = True
    if r == 0:
        assert raised
    _check_still_usable(s)


def test_bad_constructor_arguments(comm):
    with pytest.raises(DDStoreValueError):
        pyddstore.PyDDStore(comm, 0, comm.Get_size() + 1)
    with pytest.raises(DDStoreValueError):
        pyddstore.PyDDStore(comm, 7)
    with pytest.raises(DDStoreTypeError):
        pyddstore.PyDDStore("not a communicator")
    if comm.Get_size() > 1:
        with pytest.raises(DDStoreValueError):  # width differs on one rank
            pyddstore.PyDDStore(comm, 0, 1 if comm.Get_rank() == 0 else comm.Get_size())
    if comm.Get_size() == 3:
        with pytest.raises(DDStoreValueError, match="divide"):
            pyddstore.PyDDStore(comm, 0, 2)
    s = make_store(comm)  # nothing leaked a pending collective
    s.free()


def test_calls_after_free(comm):
    s = make_store(comm)
    s.add("a", local_values(s, (), "int32"))
    s.free()
    s.free()  # idempotent
    s.close()
    assert s.freed and bool(s)
    out = np.zeros(1, dtype=np.int32)
    for call in (lambda: s.get("a", out, 0), lambda: s.get_batch("a", out, [0]),
                 lambda: s.add("b", out), lambda: s.init("c", 1, 1), lambda: s.sync(),
                 lambda: s.epoch_begin(), lambda: s.epoch_end(), lambda: s.names(),
                 lambda: s.update("a", out), lambda: s.stats(),
                 lambda: s.get_ranges("a", out, [0], [1])):
        with pytest.raises(DDStoreStateError):
            call()
    assert s.rank == comm.Get_rank()  # attributes stay readable


BAD_OUTPUTS = [None, "text", 3, object(), {"a": 1}, np.zeros((1, 2), dtype="U4"),
               np.zeros((1, 2), dtype=[("a", "f8")])]
BAD_INDICES = [None, "0", 1.5, [0], np.float32(0), True]
BAD_ROWS = [None, "a", [[1]], {1: 2}, [1.5], np.zeros((1, 1), dtype=np.int64), [2 ** 70]]


def test_garbage_never_crashes(filled):
    s = filled
    out = np.zeros((1, 2))
    for bad in BAD_OUTPUTS:
        with pytest.raises(DDStoreError):
            s.get("f", bad, 0)
        with pytest.raises(DDStoreError):
            s.get_batch("f", bad, [0])
        with pytest.raises(DDStoreError):
            s.update("f", bad)
    for bad in BAD_INDICES:
        with pytest.raises(DDStoreError):
            s.get("f", out, bad)
        with pytest.raises(DDStoreError):
            s.update("f", np.zeros((0, 2)), bad)
    for bad in BAD_ROWS:
        with pytest.raises(DDStoreError):
            s.get_batch("f", out, bad)
        with pytest.raises(DDStoreError):
            s.get_ranges("f", out, bad, [1])
    for bad in (None, 1.5, "x", -3):
        with pytest.raises(DDStoreError):
            s.init("g", 1, bad)
    _check_still_usable(s)


def test_verdict_round_trip():
    # How a collective call's failure on one rank is raised on the others
    # (PyDDStore's argument agreement and the checksum verify share it).
    import pickle

    from pyddstore import DDStoreTimeoutError
    from pyddstore._errors import DDS_EINVAL, DDS_ERANGE, DDS_ETIMEDOUT, raise_verdict, verdict

    assert verdict(None) is None
    cases = [(DDStoreRangeError("rows 9..12 outside", DDS_ERANGE), DDStoreRangeError, DDS_ERANGE,
              "rows 9..12 outside"),
             (DDStoreTimeoutError("peer silent", DDS_ETIMEDOUT), DDStoreTimeoutError, DDS_ETIMEDOUT,
              "peer silent"),
             (OSError("disk gone"), DDStoreError, DDS_EINVAL, "OSError: disk gone")]
    for err, cls, code, text in cases:
        v = pickle.loads(pickle.dumps(verdict(err)))  # it travels by allgather
        with pytest.raises(DDStoreError) as ei:
            raise_verdict(3, v)
        assert type(ei.value) is cls and ei.value.code == code and str(ei.value) == f"rank 3: {text}"
    with pytest.raises(DDStoreError) as ei:
        raise_verdict(0, ("SomeOtherError", DDS_EINVAL, "x"))
    assert type(ei.value) is DDStoreError and str(ei.value) == "rank 0: x"
