"""ThreadDataLoader reading several batches together (DistDataset.read_batches): the
default read-ahead, groups within it, bit-exact batches in order, errors per batch,
and method-0 collective reads cut short. Run under mpiexec (every rank)."""
import time

import pytest
import torch
from conftest import MapSource, assert_same, value
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from pyddstore import DDStoreError, DDStoreStateError
from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch import _loader_protocol as loader_protocol

N = 101


def make(i):
    return {"x": value(i, "tensor"), "y": value(i, "int")}


class Logged(DistDataset):
    """DistDataset recording every grouped and single batched read."""

    def read_batches(self, batches, collate_fn):
        out = super().read_batches(batches, collate_fn)
        if out is not None:
            self.log.append([list(map(int, b)) for b in batches])
        return out

    def batches_read(self):
        return sum(len(g) for g in self.log)

    def read_batch(self, indices, collate_fn, out=None):
        got = super().read_batch(indices, collate_fn, out=out)
        if got is not None:
            self.log.append([list(map(int, indices))])
        return got


@pytest.fixture
def logged():
    ds = Logged(MapSource(N, make), "groups")
    ds.log = []
    yield ds
    ds.free()


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert_same(x, y)


def test_read_ahead_rule():
    rt, cap = loader_protocol.READ_TOGETHER_BYTES, loader_protocol.MAX_READ_AHEAD
    assert loader_protocol.read_ahead(None, 64) == 2          # cannot read together: DataLoader's 2
    assert loader_protocol.read_ahead(520, None) == 2         # no batch_size (batch_sampler)
    assert loader_protocol.read_ahead(520, 256) == cap        # small batches: the most
    assert loader_protocol.read_ahead(rt // 64, 64) == 2      # one batch fills a read: 2
    assert loader_protocol.read_ahead(rt // 256, 64) == 8
    # collective reads (the group meets once per read): up to twice as many, same bytes a read
    assert loader_protocol.read_ahead(520, 256, collective=True) == 2 * (rt // (520 * 256))
    assert loader_protocol.read_ahead(rt // 256, 64, collective=True) == 8
    assert loader_protocol.read_ahead(8, 64, collective=True) == loader_protocol.MAX_READ_AHEAD_COLLECTIVE
    assert loader_protocol.batches_per_read(520, 256, cap) == cap // 2
    assert loader_protocol.batches_per_read(520, 256, 3) == 1
    assert loader_protocol.batches_per_read(rt // 64, 64, cap) == 1
    assert loader_protocol.batches_per_read(None, 256, cap) == 1


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_batches_read_together_in_order(world, logged, workers):
    sampler = DistributedSampler(logged, num_replicas=world.size, rank=world.rank, seed=4)
    # Collective reads (method 0 across nodes, or DDSTORE_NODE_LOCAL=0) read ahead more.
    cap = (loader_protocol.MAX_READ_AHEAD_COLLECTIVE if logged.ordered_reads() is not None
           else loader_protocol.MAX_READ_AHEAD)
    with ThreadDataLoader(logged, batch_size=2, sampler=sampler, num_workers=workers) as tdl:
        if workers:
            assert tdl.prefetch_factor == cap
        assert tdl._core.group == cap // 2
        for epoch in range(2):
            sampler.set_epoch(epoch)
            logged.log.clear()
            got = list(tdl)
            assert_batches_equal(got, list(DataLoader(logged, batch_size=2, sampler=sampler)))
            want = [list(b) for b in BatchSampler(sampler, 2, False)]
            # every batch read once, in groups of at most `group`, several of them grouped
            assert sorted(b for g in logged.log for b in g) == sorted(want)
            assert max(len(g) for g in logged.log) <= tdl._core.group
            if len(want) > tdl._core.group:
                assert max(len(g) for g in logged.log) > 1
            if workers <= 1:
                assert [b for g in logged.log for b in g] == want


@pytest.mark.parametrize("workers,pf", [(1, None), (2, 4), (1, 3)])
def test_in_flight_bound_with_groups(world, logged, workers, pf):
    """Never more than num_workers * prefetch_factor batches read ahead of the loop."""
    kw = {} if pf is None else {"prefetch_factor": pf}
    with ThreadDataLoader(logged, batch_size=1, num_workers=workers, **kw) as tdl:
        bound = workers * tdl.prefetch_factor
        ahead = []
        for k, _ in enumerate(tdl):
            time.sleep(0.002)   # let the threads read as far ahead as they may
            ahead.append(logged.batches_read() - (k + 1))
    assert max(ahead) <= bound and max(ahead) >= bound - tdl._core.group


def test_given_prefetch_factor_is_kept(world, logged):
    with ThreadDataLoader(logged, batch_size=3, num_workers=2, prefetch_factor=4) as tdl:
        assert tdl.prefetch_factor == 4 and tdl._core.depth == 8 and tdl._core.group == 2
        got = list(tdl)
    assert_batches_equal(got, list(DataLoader(logged, batch_size=3)))
    assert max(len(g) for g in logged.log) == 2
    with ThreadDataLoader(logged, batch_size=3, num_workers=1, prefetch_factor=1) as tdl:
        assert tdl._core.group == 1
        assert_batches_equal(list(tdl), list(DataLoader(logged, batch_size=3)))


def test_no_groups_with_reused_buffers_or_custom_collate(world, logged):
    with ThreadDataLoader(logged, batch_size=3, reuse_buffers=True) as tdl:
        assert tdl._core.group == 1 and tdl._core.depth == 2
        assert_batches_equal(list(tdl), list(DataLoader(logged, batch_size=3)))
    with ThreadDataLoader(logged, batch_size=3, collate_fn=lambda b: b) as tdl:
        assert tdl._core.group == 1 and tdl._core.depth == 2


def test_batches_of_a_group_are_views_of_one_read(world, logged):
    """A group's batches share the memory of one read, and stay valid after the loader
    moves on (each keeps it alive)."""
    with ThreadDataLoader(logged, batch_size=4) as tdl:
        kept = list(tdl)
    ref = list(DataLoader(logged, batch_size=4))
    del tdl
    assert_batches_equal(kept, ref)


class BadAt(torch.utils.data.Sampler):
    """Every index in order, with index `bad` (out of range) at position `at`."""

    def __init__(self, n, at, bad):
        self.n, self.at, self.bad = n, at, bad

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield self.bad if i == self.at else i


def test_out_of_range_index_fails_only_its_batch(world, logged):
    """The group holding a bad index is read again batch by batch: only that batch
    raises (the store's range error), the others arrive whole and in order."""
    sampler = BadAt(40, at=13, bad=N + 1000)
    with ThreadDataLoader(logged, batch_size=4, sampler=sampler) as tdl:
        assert tdl._core.group > 1
        it = iter(tdl)
        got, errors = [], []
        for k in range(10):
            try:
                got.append(next(it))
            except IndexError as e:
                errors.append((k, e))
        with pytest.raises(StopIteration):
            next(it)
    assert [k for k, _ in errors] == [3]
    assert isinstance(errors[0][1], DDStoreError) and str(N + 1000) in str(errors[0][1])
    ref = list(DataLoader(logged, batch_size=4, sampler=range(40)))
    assert_batches_equal(got, ref[:3] + ref[4:])


def test_failed_group_read_fails_every_batch_of_it(world):
    """A failure that is not about an index (here: the dataset freed under the loader)
    is given to each batch of the group, without reading them again one by one."""
    ds = Logged(MapSource(N, make), "freed")
    ds.log, calls = [], []
    read_batch = ds.read_batch
    ds.read_batch = lambda *a, **k: (calls.append(1), read_batch(*a, **k))[1]
    tdl = ThreadDataLoader(ds, batch_size=2)
    assert tdl._core.group > 1
    ds.free()
    it = iter(tdl)
    for _ in range(tdl._core.group):
        with pytest.raises(DDStoreStateError, match="was freed"):
            next(it)
    assert calls == [] and ds.log == []
    tdl.close()


@pytest.fixture
def collective_reads(monkeypatch):
    monkeypatch.setenv("DDSTORE_NODE_LOCAL", "0")


def test_method0_groups_cut_short(world, collective_reads):
    """Collective reads in groups: one thread reads them in order; an epoch broken off
    at a different time on each rank leaves every rank with the same number of
    collective reads, and the next epoch is whole."""
    ds = Logged(MapSource(N * 2, make), "cutgroups")
    ds.log = []
    try:
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=False)
        tdl = ThreadDataLoader(ds, batch_size=2, sampler=sampler, num_workers=2)
        assert tdl._core.group > 1
        for k, b in enumerate(tdl):
            time.sleep(0.005 * world.rank)
            if k == 11:
                break
        full = list(tdl)
        assert_batches_equal(full, list(DataLoader(ds, batch_size=2, sampler=sampler)))
        tdl.close()
        nreads = world.allgather(len(ds.log))
        assert len(set(nreads)) == 1, nreads
        if ds.ddstore.reads_collective:
            assert max(len(g) for g in ds.log) > 1
    finally:
        ds.free()
