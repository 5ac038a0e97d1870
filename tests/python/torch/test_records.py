"""numpy records as DistDataset fields, as HydraGNN-style codes keep samples: a np.void
record, structured arrays, record arrays and np.record scalars come back with their
class and exact record dtype (nested, aligned, padded) bit for bit, from ds[i] and from
batches (whole and chunked loads, a method-2 reader's description); object fields,
records that change between samples and dtypes= conversions of records raise on every
rank. Run under mpiexec (every rank)."""
import numpy as np
import pytest
import torch
from conftest import MapSource

from pyddstore._dtypes import record_text
from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch import _structure as st

N = 11
ATOMS = np.dtype([("x_modules", "<f4", (4, 3)), ("id", "<i8"), ("flag", "?")])
ALIGNED = np.dtype(ATOMS.descr, align=True)
NESTED = np.dtype([("inner", ALIGNED, (2,)), ("name", "S5"), ("t", "<M8[ns]"),
                   ("pad", {"names": ["a"], "formats": [">i2"], "offsets": [2], "itemsize": 8})],
                  align=True)
REC = np.dtype((np.record, ATOMS))


def _records(i, dtype, n):
    """n records of `dtype` for sample i, every byte (padding included) from (i, byte)."""
    b = (np.arange(n * dtype.itemsize) * 13 + i * 7 + 3) % 253
    return b.astype(np.uint8).view(dtype)


def sample(i):
    return {"atoms": _records(i, ALIGNED, 3),             # a structured array (aligned, padded)
            "one": _records(i, NESTED, 1)[0],               # a np.void record (nested)
            "rec": _records(i, REC, 2).view(np.recarray),   # a record array
            "recscalar": _records(i, REC, 1)[0],            # a np.record scalar
            "y": torch.tensor([float(i)])}


def same(got, want, what):
    assert type(got) is type(want), (what, type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want), what
        return
    assert got.dtype == want.dtype and record_text(got.dtype) == record_text(want.dtype), what
    assert np.shape(got) == np.shape(want), what
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), what   # bit for bit


def same_sample(got, want, what):
    assert list(got) == list(want), what
    for k in want:
        same(got[k], want[k], f"{what}[{k!r}]")


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_record_fields_round_trip(world, chunk_size):
    ds = DistDataset(MapSource(N, sample), f"recs_{chunk_size}", comm=world, chunk_size=chunk_size)
    try:
        assert ds.dtypes["atoms"] == ALIGNED and ds.dtypes["one"] == NESTED and ds.dtypes["rec"] == REC
        assert ds.shapes["atoms"] == (3,) and ds.shapes["one"] == ()
        for i in range(N):
            same_sample(ds[i], sample(i), f"ds[{i}]")
        # Batches through the loader with HydraGNN's kind of collate (its own, over the samples).
        rows = [(3 * j + world.rank) % N for j in range(7)]
        with ThreadDataLoader(ds, batch_size=3, sampler=rows, num_workers=2, collate_fn=list) as tdl:
            got = [s for b in tdl for s in b]
        assert len(got) == len(rows)
        for i, s in zip(rows, got):
            same_sample(s, sample(i), f"batch sample {i}")
        for i, s in zip(rows, ds.__getitems__(rows)):
            same_sample(s, sample(i), f"__getitems__ {i}")
        # The description a method-2 reader rebuilds the samples from.
        text = ds.structure.to_json()
        back = st.Structure.from_json(text)
        assert back == ds.structure and '"version": 2' in text
        assert all(record_text(b.dtype) == record_text(f.dtype) for b, f in zip(back.fields, ds.structure.fields)
                   if f.record is not None)
        # With torch's default collate the batch is refused as DataLoader refuses it.
        with pytest.raises(TypeError) as theirs:
            next(iter(torch.utils.data.DataLoader(MapSource(N, sample), batch_size=2)))
        with ThreadDataLoader(ds, batch_size=2, sampler=rows[:4], num_workers=1) as tdl:
            with pytest.raises(TypeError) as ours:
                next(iter(tdl))
        assert str(ours.value) == str(theirs.value)
    finally:
        ds.free()


def test_single_record_samples(world):
    """A sample that is one record (np.void), as records-per-sample codes keep them."""
    ds = DistDataset(MapSource(N, lambda i: _records(i, NESTED, 1)[0]), "recs_single", comm=world)
    try:
        for i in range(N):
            same(ds[i], _records(i, NESTED, 1)[0], f"ds[{i}]")
    finally:
        ds.free()


def test_bad_record_fields_raise_everywhere(world):
    def messages(make, name, **kw):
        with pytest.raises((TypeError, ValueError)) as e:
            DistDataset(MapSource(N, make), name, comm=world, **kw)
        msg = str(e.value)
        assert len(set(world.allgather(msg))) == 1
        return msg

    objs = np.dtype([("a", "<f4"), ("o", object)])
    msg = messages(lambda i: {"r": np.zeros(2, objs)}, "recs_obj")
    assert "field 'r'" in msg and "Python objects" in msg
    msg = messages(lambda i: {"r": _records(i, ATOMS if i < 5 else ALIGNED, 1)}, "recs_change")
    assert "field 'r'" in msg and "differs" in msg
    msg = messages(sample, "recs_conv", dtypes={"atoms": "float32"})
    assert "records" in msg and "encode=" in msg
