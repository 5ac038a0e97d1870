"""Every dtype the store holds round-trips through DistDataset (fixed and ragged
fields, whole and chunked loads, ds[i] and batches), bfloat16 included; dtypes=
converts fields before they are stored."""
import numpy as np
import pytest
import torch

from pyddstore.torch import SUPPORTED_DTYPES, DistDataset

N = 23
TORCH = [torch.int8, torch.int16, torch.uint16, torch.uint32, torch.uint64, torch.float16,
         torch.bfloat16, torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32,
         torch.float64]
NUMPY = ["int8", "int16", "uint16", "uint32", "uint64", "float16", "bool", "uint8", "int32",
         "int64", "float32", "float64"]


def _t(i, dtype, shape):
    return (torch.arange(int(np.prod(shape))).reshape(shape) * 3 + i).remainder(100).to(dtype) / (
        7 if dtype.is_floating_point else 1)


class Source:
    def __len__(self):
        return N

    def __getitem__(self, i):
        s = {f"t_{str(d).split('.')[1]}": _t(i, d, (2, 3)) for d in TORCH}
        s.update({f"n_{d}": (np.arange(4) + i).astype(d) for d in NUMPY})
        s["scalar_i16"] = np.int16(i)
        s["pos"] = torch.randn(i % 4 + 1, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
        s["rag_bf16"] = _t(i, torch.bfloat16, (i % 3, 2))
        return s


def _check(ds, src, i, got):
    want = src[i]
    for k, w in want.items():
        g = got[k]
        if k == "pos":
            assert g.dtype == torch.bfloat16 and torch.equal(g, w.to(torch.bfloat16)), k
        elif isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and torch.equal(g, w), k
        else:
            assert np.asarray(g).dtype == np.asarray(w).dtype and np.array_equal(g, w), k


@pytest.mark.parametrize("chunk_size", [None, 5])
def test_all_dtypes_round_trip(world, chunk_size):
    assert set(SUPPORTED_DTYPES) >= {"int8", "int16", "uint16", "uint32", "uint64", "float16", "bfloat16"}
    src = Source()
    ds = DistDataset(src, f"dtypes_{chunk_size}", comm=world, chunk_size=chunk_size,
                     ragged={"pos": 0, "rag_bf16": 0}, dtypes={"pos": torch.bfloat16})
    try:
        assert ds.dtypes["t_bfloat16"] == "bfloat16" and ds.dtypes["pos"] == "bfloat16"
        assert ds.dtypes["n_uint64"] == "uint64" and ds.shapes["pos"] == (None, 3)
        rank = world.Get_rank()
        for i in (rank % N, N - 1 - rank % N):
            _check(ds, src, i, ds[i])
        idx = [(7 * j + rank) % N for j in range(6)]
        for i, s in zip(idx, ds.__getitems__(idx)):  # collective with method 0: same count on every rank
            _check(ds, src, i, s)
        if chunk_size is None:
            # bfloat16 rows carry the C ABI's BFLOAT16 tag.
            from pyddstore._dtypes import _TAG_BFLOAT16
            assert ds.ddstore._var(f"dtypes_{chunk_size}/t_bfloat16").tag == _TAG_BFLOAT16
    finally:
        ds.free()


def test_dtypes_argument_checked(world):
    with pytest.raises(ValueError, match="complex64"):
        DistDataset(Source(), "dtypes_bad", comm=world, dtypes={"pos": torch.complex64})
    with pytest.raises(KeyError, match="nope"):
        DistDataset(Source(), "dtypes_missing", comm=world, dtypes={"nope": torch.float32},
                    ragged={"pos": 0, "rag_bf16": 0})


def test_core_bfloat16_tag(world):
    from pyddstore import PyDDStore

    t = torch.arange(6, dtype=torch.bfloat16).reshape(3, 2) / 3
    store = PyDDStore(world)
    try:
        store.add("bf", t.view(torch.int16).numpy(), dtype="bfloat16")
        out = np.empty((1, 2), np.int16)
        store.get("bf", out, 1)
        assert torch.equal(torch.from_numpy(out).view(torch.bfloat16)[0], t[1])
        with pytest.raises(TypeError):
            store.get("bf", np.empty((1, 1), np.float32), 0)
    finally:
        store.free()
