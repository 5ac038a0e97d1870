"""Conformance with the user-facing reference of pyddstore.torch (docs/api/torch.rst).

Each test exercises a documented promise the way a user reading only the
reference would: the documented signatures (positional arguments included),
and "each rank loads only its contiguous share" of the source. Every rank runs
every test and makes the same collective calls in the same order.
"""
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from pyddstore.torch import DistDataset, ThreadDataLoader

from conftest import MapSource

N = 23


def make(i):
    return {"x": torch.full((2, 3), float(i)), "y": i, "z": np.array([i, -i], dtype=np.int32)}


class LoggingSource(MapSource):
    """A source that records which indices this rank read (and encode calls)."""

    def __init__(self, n):
        super().__init__(n, make)
        self.read = []

    def __getitem__(self, i):
        self.read.append(int(i))
        return super().__getitem__(i)


@pytest.mark.parametrize("width", [None, 1, 2])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_each_rank_reads_its_contiguous_share_once(world, width, chunk_size):
    if width is not None and world.size % width:
        width = None  # same decision on every rank: the world size is the same
    src = LoggingSource(N)
    encoded = []

    def encode(s):
        encoded.append(s["y"])
        return s

    ds = DistDataset(src, "conf_share", ddstore_width=width, chunk_size=chunk_size, encode=encode)
    try:
        store = ds.ddstore
        g, gsize = store.group_rank, store.group_size
        start, stop = N * g // gsize, N * (g + 1) // gsize
        # Every sample of this rank's share read from the source, and encoded, exactly once.
        assert src.read == list(range(start, stop))
        assert encoded == list(range(start, stop))
        # Each group holds a full copy: its ranks read every sample once in all.
        group_reads = sorted(sum(store.group_comm.allgather(src.read), []))
        assert group_reads == list(range(N))
        for i in (0, N // 2, N - 1):
            s = ds[i]
            assert torch.equal(s["x"], make(i)["x"]) and s["y"] == i and s["z"].tolist() == [i, -i]
    finally:
        ds.free()


@pytest.fixture
def dds(world):
    ds = DistDataset(MapSource(N, make), "conf_loader")
    yield ds
    ds.free()


def _ys(loader):
    return [b["y"].tolist() for b in loader]


def test_thread_loader_positional_reuse_buffers(world, dds):
    # The reference's signature: ThreadDataLoader(dataset, reuse_buffers=False,
    # collate_copies=False, **DataLoader_kwargs).
    sampler = DistributedSampler(dds, num_replicas=world.size, rank=world.rank, shuffle=True, seed=2)
    ref = _ys(DataLoader(dds, batch_size=4, sampler=sampler))

    tdl = ThreadDataLoader(dds, True, batch_size=4, sampler=sampler, num_workers=2)
    assert tdl.reuse_buffers
    assert _ys(tdl) == ref
    tdl.close()

    copy_y = lambda samples: torch.tensor([s["y"] for s in samples])  # noqa: E731 - copies
    tdl = ThreadDataLoader(dds, True, True, batch_size=4, sampler=sampler, collate_fn=copy_y)
    assert tdl.reuse_buffers
    assert [b.tolist() for b in tdl] == ref
    tdl.close()

    tdl = ThreadDataLoader(dds, False, batch_size=4, sampler=sampler)
    assert not tdl.reuse_buffers
    assert _ys(tdl) == ref
    tdl.close()

    # Positional arguments other than those bools stay DataLoader's.
    tdl = ThreadDataLoader(dds, 4, False, sampler=sampler)
    assert tdl.batch_size == 4 and not tdl.reuse_buffers
    assert _ys(tdl) == ref
    tdl.close()


def test_thread_loader_positional_misuse(world, dds):
    with pytest.raises(TypeError, match="by keyword"):
        ThreadDataLoader(dds, True, 4)  # batch_size after positional reuse_buffers
    with pytest.raises(TypeError, match="one way"):
        ThreadDataLoader(dds, True, reuse_buffers=True, batch_size=4)
