"""WindowedDataset (stride, dilation, starts, fields) and row_of over a ConcatDataset."""
import numpy as np
import pytest
import torch
from conftest import MapSource, assert_same
from torch.utils.data import ConcatDataset, DataLoader, DistributedSampler

from pyddstore.torch import DistDataset, ThreadDataLoader, WindowedDataset, row_of

T = 41


def step(t):
    return {"x": torch.tensor([t, t + 0.5], dtype=torch.float32), "t": t, "a": np.full(3, t, np.int32)}


def window(rows, fields=None):
    keys = fields or ["x", "t", "a"]
    out = {"x": torch.stack([step(r)["x"] for r in rows]),
           "t": np.array(rows, dtype=np.int64),
           "a": np.stack([step(r)["a"] for r in rows])}
    return {k: out[k] for k in keys}


@pytest.fixture(scope="module")
def series():
    ds = DistDataset(MapSource(T, step), "series")
    yield ds
    ds.free()


@pytest.mark.parametrize("w,stride,dil", [(1, 1, 1), (4, 1, 1), (4, 3, 2), (5, 7, 3)])
def test_stride_dilation(world, series, w, stride, dil):
    ws = WindowedDataset(series, w, stride=stride, dilation=dil)
    span = (w - 1) * dil + 1
    assert len(ws) == (T - span) // stride + 1
    for i in (0, len(ws) - 1, len(ws) // 2):
        rows = [i * stride + j * dil for j in range(w)]
        assert_same(ws[i], window(rows))
    idx = [len(ws) - 1, 0, 0]
    series.ddstore.reset_stats()
    batch = ws.__getitems__(idx)
    assert series.ddstore.stats()["read_calls"] == 3  # one read_rows: one get_batch per field
    for s, i in zip(batch, idx):
        assert_same(s, window([i * stride + j * dil for j in range(w)]))
    ref = torch.utils.data.default_collate(list(batch))
    assert_same(batch.collated(copy=False), ref)


def test_starts_and_fields(world, series):
    starts = [0, 10, 30, T - 9]  # T - 9: the last window that fits  # e.g. only windows inside one trajectory
    ws = WindowedDataset(series, 3, dilation=4, starts=starts, fields=["t", "x"])
    assert len(ws) == 4
    for i, s in enumerate(starts):
        assert_same(ws[i], window([s, s + 4, s + 8], fields=["t", "x"]))
    b = ws.__getitems__([3, 1])
    assert_same(b[0], window([T - 9, T - 5, T - 1], fields=["t", "x"]))
    assert list(b[1]) == ["t", "x"] and b[1]["t"].tolist() == [10, 14, 18]
    with pytest.raises(ValueError, match="starts"):
        WindowedDataset(series, 3, dilation=4, starts=[T - 8])
    with pytest.raises(ValueError, match="window"):
        WindowedDataset(series, 0)
    with pytest.raises(KeyError):
        WindowedDataset(series, 2, fields=["nope"])
    assert len(WindowedDataset(series, T + 1)) == 0


def test_rows_held_once_and_loader(world, series):
    ws = WindowedDataset(series, 8, stride=1)
    assert len(ws) == T - 7
    assert series.ddstore.query("series/x").global_rows == T  # windows share stored rows
    sampler = DistributedSampler(ws, num_replicas=world.size, rank=world.rank, seed=2)
    ref = [b for b in DataLoader(ws, batch_size=5, sampler=sampler)]
    with ThreadDataLoader(ws, batch_size=5, sampler=sampler, num_workers=2) as tdl:
        got = [b for b in tdl]
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert_same(a, b)
    assert got[0]["x"].shape == (5, 8, 2) and got[0]["t"].shape == (5, 8)


def test_row_of(world):
    srcs = [MapSource(5, lambda i: i), MapSource(7, lambda i: 100 + i), MapSource(4, lambda i: 200 + i)]
    concat = ConcatDataset(srcs)
    ds = DistDataset(concat, "concat")
    try:
        for p, s in enumerate(srcs):
            for i in range(len(s)):
                r = row_of(concat, s, i)
                assert r == row_of(concat, p, i) and ds[r] == s[i]
        assert row_of(concat, srcs[1], -1) == 11
        assert row_of(concat, -1, 0) == 12
        with pytest.raises(IndexError):
            row_of(concat, srcs[2], 4)
        with pytest.raises(ValueError, match="not one of"):
            row_of(concat, MapSource(2, lambda i: i), 0)
        with pytest.raises(TypeError):
            row_of(srcs, 0, 0)
        twice = ConcatDataset([srcs[0], srcs[0]])
        with pytest.raises(ValueError, match="position"):
            row_of(twice, srcs[0], 1)
        assert row_of(twice, 1, 1) == 6
    finally:
        ds.free()
