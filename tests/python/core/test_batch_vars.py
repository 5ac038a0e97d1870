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
