"""Behaviours that code written for the original DDStore's torch layer relies
on, beyond the reference: ``ds.shapes``/``ds.dtypes``, ``close()`` on a
ThreadDataLoader iterator, errors that are both the builtin this package
documents and the ValueError the original raised, and release() of buffers
released before. Every rank runs every test and makes the same collective
calls in the same order.
"""
import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import pyddstore
from pyddstore.torch import DistDataset, ThreadDataLoader, WindowedDataset

N = 37  # not a multiple of the rank count


class DictSource(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"x": torch.full((2, 3), float(i)), "y": torch.tensor(i, dtype=torch.int64),
                "z": np.full(4, i, dtype=np.uint8)}


class TupleSource(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return (np.full(2, i / 3, dtype=np.float64), i)


def test_shapes_and_dtypes(comm):
    ds = DistDataset(DictSource(), "sd", comm, method=0)
    try:
        assert ds.shapes == {"x": (2, 3), "y": (), "z": (4,)}
        assert ds.dtypes == {"x": "float32", "y": "int64", "z": "uint8"}
        assert ds.dtypes["x"] == np.float32
        tp = DistDataset(TupleSource(), "sdt", comm, method=0, fields=[1])
        assert tp.shapes == {0: ()} and tp.dtypes == {0: "int64"}  # positions of the selection
        tp.ddstore.free()
    finally:
        comm.Barrier()
        ds.ddstore.free()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterator_close_plain_source(comm, num_workers):
    src = TupleSource()
    ref = list(DataLoader(src, batch_size=4))
    loader = ThreadDataLoader(src, batch_size=4, num_workers=num_workers)
    it = iter(loader)
    first = next(it)
    assert torch.equal(first[0], ref[0][0])
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    it.close()  # idempotent
    got = list(loader)  # a new iterator is unaffected
    assert len(got) == len(ref) and all(torch.equal(g[0], r[0]) for g, r in zip(got, ref))
    loader.close()


def test_iterator_close_method0_dataset(comm):
    """Closing a method-0 iterator mid-epoch on every rank: the next epoch
    finishes the reads already started (collective) and is complete."""
    src = TupleSource()
    ds = DistDataset(src, "cl0", comm, method=0)
    try:
        loader = ThreadDataLoader(ds, batch_size=5, num_workers=2)
        it = iter(loader)
        list(itertools.islice(it, 2))
        it.close()
        with pytest.raises(StopIteration):
            next(it)
        got = list(loader)
        ref = list(DataLoader(src, batch_size=5))
        assert len(got) == len(ref)
        assert all(torch.equal(g[0], r[0]) and torch.equal(g[1], r[1]) for g, r in zip(got, ref))
        loader.close()
    finally:
        comm.Barrier()
        ds.ddstore.free()


def test_errors_are_also_value_errors(comm):
    ds = DistDataset(TupleSource(), "ev", comm, method=0)
    try:
        with pytest.raises(IndexError):
            WindowedDataset(ds, window=2, starts=[N - 1])
        with pytest.raises(ValueError, match="starts"):
            WindowedDataset(ds, window=2, starts=[N - 1])
        for exc in (KeyError, ValueError):  # a missing key, raised on every rank
            with pytest.raises(exc, match="nope"):
                DistDataset(DictSource(), "ev2", comm, method=0, fields=["nope"])
        for exc in (IndexError, ValueError):  # a position the tuple samples lack
            with pytest.raises(exc, match="positions"):
                DistDataset(TupleSource(), "ev3", comm, method=0, fields=[5])
    finally:
        comm.Barrier()
        ds.ddstore.free()


METHODS = [0, pytest.param(1, marks=pytest.mark.skipif(not pyddstore.has_fabric(),
                                                      reason="libddstore built without libfabric"))]


@pytest.mark.parametrize("method", METHODS)
def test_release_twice(comm, monkeypatch, method):
    monkeypatch.setenv("DDSTORE_FABRIC", "shm")
    ds = DistDataset(TupleSource(), "rel", comm, method=method)
    try:
        bufs = ds.alloc(8)
        ds.read_rows([0, 5, N - 1], out=bufs)
        ds.release(bufs)
        if ds.ddstore.method != 0:  # registered memory: releasing again is an error
            with pytest.raises(ValueError):
                ds.release(bufs)
            with pytest.raises(pyddstore.DDStoreKeyError):
                ds.release(bufs)
        else:
            ds.release(bufs)  # method 0 registers nothing
    finally:
        comm.Barrier()
        ds.ddstore.free()


@pytest.mark.parametrize("method", METHODS)
def test_original_attributes(comm, monkeypatch, method):
    """ds._var (variable names), ds._key(j) and loader._pool_sets, which the
    original's tests read; after close() the pool is released (releasing it
    again raises with methods 1/2)."""
    monkeypatch.setenv("DDSTORE_FABRIC", "shm")
    ds = DistDataset(DictSource(), "attr", comm, method=method)
    try:
        assert ds._var == ["attr/x", "attr/y", "attr/z"]
        assert [ds._key(j) for j in range(len(ds._var))] == ["x", "y", "z"]
        assert all(ds.ddstore.query(v).global_rows == N for v in ds._var)
        loader = ThreadDataLoader(ds, batch_size=8, num_workers=2, reuse_buffers=True)
        sets = loader._pool_sets
        assert len(sets) == 2 and all(sorted(b) == ["x", "y", "z"] for b in sets)
        assert sum(len(b["x"]) for b in itertools.chain.from_iterable(
            [batch] for batch in loader)) == N
        loader.close()
        assert loader._pool_sets == []
        if ds.ddstore.method != 0:
            for bufs in sets:
                with pytest.raises(ValueError):
                    ds.release(bufs)
    finally:
        comm.Barrier()
        ds.ddstore.free()
