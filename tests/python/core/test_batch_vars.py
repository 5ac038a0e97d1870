"""PyDDStore.get_batch_vars (dds_get_batch_vars) with the suite's method
(DDSTORE_METHOD: 0 by default, where it is one read of all the variables
under get_batch's collective rule; 1 and 2 send one request per owner for
all the variables): rows bit-exact for variables of different row sizes and dtypes,
empty reads, and a bad argument on one rank failing on every rank where
reads are collective."""
import numpy as np
import pytest

from pyddstore import DDStoreError

from core_helpers import layout, local_values, values

FIELDS = (("a", (2,), "float64", 5), ("b", (), "int32", 6), ("c", (9,), "uint8", 7))


@pytest.fixture
def filled(store):
    for name, shape, dtype, salt in FIELDS:
        store.add(name, local_values(store, shape, dtype, salt))
    store.sync()
    return store


def test_rows_bit_exact(filled, comm):
    _, off = layout(comm.Get_size())
    rng = np.random.default_rng(comm.Get_rank() + 40)
    for k in (0, 1, 13):
        rows = rng.integers(0, int(off[-1]), size=k)
        outs = [np.zeros((k,) + shape, dtype) for _, shape, dtype, _ in FIELDS]
        filled.get_batch_vars([f[0] for f in FIELDS], outs, rows)
        for out, (_, shape, dtype, salt) in zip(outs, FIELDS):
            assert out.tobytes() == values(rows, shape, dtype, salt).tobytes()


def test_bad_variable_on_one_rank_fails_everywhere(filled, comm):
    rank = comm.Get_rank()
    names = ["a", "nope" if rank == 0 else "b"]
    outs = [np.zeros((1, 2)), np.zeros(1, np.int32)]
    if rank == 0 or filled.reads_collective:
        with pytest.raises(DDStoreError):
            filled.get_batch_vars(names, outs, [0])
    else:
        filled.get_batch_vars(names, outs, [0])
    # The group is still in step: a read after it works everywhere.
    out = np.zeros((1, 2))
    filled.get_batch_vars(["a"], [out], [0])
    assert out.tobytes() == values([0], (2,), "float64", 5).tobytes()


@pytest.mark.parametrize("bad", ["negative nvars", "NULL names"])
def test_bad_c_call_on_one_rank_fails_everywhere(filled, comm, bad):
    """A C caller's malformed dds_get_batch_vars (no binding passes one) is a
    bad argument too: where reads are collective it takes part in the read
    and fails it on every rank. Before, that rank returned at once and left
    the group out of step: the peers' read was matched with that rank's next
    read and returned without an error."""
    import ctypes

    from pyddstore._store import _c

    rank = comm.Get_rank()
    out = np.zeros((1, 2))
    if rank == 0:
        nvars, names = (-1, None) if bad == "negative nvars" else (1, None)
        outs = (ctypes.c_void_p * 1)(out.ctypes.data)
        rows = np.zeros(1, np.int64)
        rc = _c.dds_get_batch_vars(filled._h.ptr, nvars, names, outs, rows.ctypes.data, 1)
        assert rc != 0
        if filled.reads_collective:
            comm.bcast(None, root=0)  # every rank left the read: no hang
    elif filled.reads_collective:
        with pytest.raises(DDStoreError, match="rank 0"):
            filled.get_batch_vars(["a"], [out], [0])
        comm.bcast(None, root=0)
    filled.get_batch_vars(["a"], [out], [0])
    assert out.tobytes() == values([0], (2,), "float64", 5).tobytes()
