"""Shared sources and helpers for the pyddstore.torch tests (run under mpiexec, every rank)."""
import collections

import numpy as np
import pytest
import torch

Point = collections.namedtuple("Point", ["pos", "label"])


def value(i, kind):
    """Deterministic field values for sample i, one per kind of field."""
    if kind == "tensor":
        return torch.arange(6, dtype=torch.float32).reshape(2, 3) + i
    if kind == "tensor0d":
        return torch.tensor(i * 2, dtype=torch.int64)
    if kind == "ndarray":
        return (np.arange(4, dtype=np.int32) * i).reshape(2, 2)
    if kind == "ndarray0d":
        return np.array(i * 0.5, dtype=np.float64)
    if kind == "uint8":
        return np.full(5, i % 256, dtype=np.uint8)
    if kind == "bool":
        return torch.tensor([i % 2 == 0, i % 3 == 0])
    if kind == "int":
        return i * 3
    if kind == "float":
        return i / 4
    if kind == "pybool":
        return i % 2 == 1
    if kind == "npscalar":
        return np.float32(i) + np.float32(0.25)
    raise ValueError(kind)


class MapSource(torch.utils.data.Dataset):
    """A map-style source whose sample i is make(i); counts __getitem__ calls."""

    def __init__(self, n, make):
        self.n = n
        self.make = make
        self.calls = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        self.calls += 1
        return self.make(i)


class RangeSource(MapSource):
    """A source with the bulk read_range(start, stop) protocol (numbers as 1-D arrays)."""

    def __init__(self, n, make):
        super().__init__(n, make)
        self.range_calls = []

    def read_range(self, start, stop):
        self.range_calls.append((start, stop))
        idx = np.arange(start, stop)
        return {"x": torch.stack([self.make(i)["x"] for i in idx]) if stop > start
                else torch.empty((0, 3)),
                "y": idx.astype(np.int64)}


def assert_same(a, b):
    """a and b are equal samples: same structure, types, dtypes, shapes and values."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (a, b)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), (a, b)
    else:
        assert a == b, (a, b)


@pytest.fixture
def world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def idle_barrier(comm):
    """A barrier that sleeps instead of spinning (ranks share 2 cores with a busy child process)."""
    import time
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.01)
