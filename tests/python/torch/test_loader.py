"""ThreadDataLoader: same draws as DataLoader, threads, in-flight bound, reuse_buffers, close(),
affinity, method-0 ordering and cut-short epochs. Run under mpiexec (every rank)."""
import gc
import os
import threading
import time

import numpy as np
import pytest
import torch
from conftest import MapSource, assert_same, value
from torch.utils.data import DataLoader, DistributedSampler

from pyddstore.torch import DistDataset, ThreadDataLoader

N = 37


def make(i):
    return {"x": value(i, "tensor"), "y": value(i, "int"), "a": value(i, "ndarray")}


def batches(loader):
    return [b for b in loader]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert_same(x, y)


@pytest.fixture(scope="module")
def dds():
    ds = DistDataset(MapSource(N, make), "loader")
    yield ds
    ds.free()


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("opts", [
    dict(batch_size=4, shuffle=True),
    dict(batch_size=5, shuffle=True, drop_last=True),
    dict(batch_size=None, shuffle=True),
    dict(batch_size=3, shuffle=False),
    dict(batch_size=4, shuffle=True, persistent_workers=True),
])
def test_same_draws_as_dataloader(world, workers, opts):
    if opts.get("persistent_workers") and workers == 0:
        pytest.skip("persistent_workers needs num_workers > 0 (DataLoader's rule)")
    src = MapSource(N, make)
    ref_gen, gen = torch.Generator().manual_seed(1234), torch.Generator().manual_seed(1234)
    ref = DataLoader(src, generator=ref_gen, num_workers=workers if opts.get("persistent_workers") else 0,
                     **opts)
    tdl = ThreadDataLoader(src, generator=gen, num_workers=workers, **opts)
    for _ in range(3):  # several epochs: the generators advance alike
        assert_batches_equal(batches(tdl), batches(ref))
    assert len(tdl) == len(ref)
    tdl.close()


def test_same_draws_global_rng_and_distributed_sampler(world, dds):
    torch.manual_seed(7)
    ref = batches(DataLoader(MapSource(N, make), batch_size=4, shuffle=True))
    torch.manual_seed(7)
    with ThreadDataLoader(MapSource(N, make), batch_size=4, shuffle=True, num_workers=2) as tdl:
        assert_batches_equal(batches(tdl), ref)
    for seed in (0, 5):
        s1 = DistributedSampler(dds, num_replicas=world.size, rank=world.rank, seed=seed)
        s2 = DistributedSampler(dds, num_replicas=world.size, rank=world.rank, seed=seed)
        s1.set_epoch(3)
        s2.set_epoch(3)
        ref = batches(DataLoader(dds, batch_size=4, sampler=s1))
        with ThreadDataLoader(dds, batch_size=4, sampler=s2, num_workers=2) as tdl:
            got = batches(tdl)
        assert_batches_equal(got, ref)


def test_distdataset_batches_collate_like_dataloader(world, dds):
    """ThreadDataLoader hands over DistDataset's columns: same result as default_collate."""
    ref = batches(DataLoader(dds, batch_size=6, shuffle=False))
    with ThreadDataLoader(dds, batch_size=6, num_workers=2) as tdl:
        got = batches(tdl)
    assert_batches_equal(got, ref)
    assert got[0]["x"].shape == (6, 2, 3) and got[0]["y"].dtype == torch.int64


class Recorder(torch.utils.data.Dataset):
    """Records which thread fetched which batch, and how many fetches are in flight."""

    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay
        self.lock = threading.Lock()
        self.started = 0
        self.threads = set()
        self.order = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i

    def __getitems__(self, idx):
        with self.lock:
            self.started += 1
            self.threads.add(threading.get_ident())
            self.order.append(list(idx))
        time.sleep(self.delay)
        return list(idx)


@pytest.mark.parametrize("workers,pf", [(0, None), (2, 3), (3, 1)])
def test_threads_and_in_flight_bound(world, workers, pf):
    ds = Recorder(200)
    kw = {} if pf is None else {"prefetch_factor": pf}
    tdl = ThreadDataLoader(ds, batch_size=2, num_workers=workers, **kw)
    bound = max(1, workers) * (pf or 2)
    seen = []
    for k, b in enumerate(tdl):
        time.sleep(0.002)
        with ds.lock:
            seen.append(ds.started - (k + 1))  # fetched or fetching beyond what we consumed
    assert max(seen) <= bound and max(seen) >= 1
    assert threading.get_ident() not in ds.threads
    assert 1 <= len(ds.threads) <= max(1, workers)
    assert len(tdl._core.threads) == max(1, workers)
    tdl.close()


def test_in_order_false_and_errors(world):
    ds = Recorder(40, delay=0.001)
    with ThreadDataLoader(ds, batch_size=4, num_workers=3, in_order=False) as tdl:
        got = batches(tdl)
    assert sorted(x for b in got for x in b.tolist()) == list(range(40))

    class Bad(Recorder):
        def __getitems__(self, idx):
            if 12 in idx:
                raise KeyError("bad sample 12")
            return super().__getitems__(idx)
    with ThreadDataLoader(Bad(40), batch_size=4, num_workers=2) as tdl:
        it = iter(tdl)
        for _ in range(3):
            next(it)
        with pytest.raises(KeyError, match="bad sample 12"):
            next(it)

    class Slow(Recorder):
        def __getitems__(self, idx):
            time.sleep(1.0)
            return idx
    with ThreadDataLoader(Slow(4), batch_size=2, timeout=0.1) as tdl:
        with pytest.raises(RuntimeError, match="timed out"):
            next(iter(tdl))


def test_iterable_dataset(world):
    class It(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(23))
    ref = batches(DataLoader(It(), batch_size=4))
    with ThreadDataLoader(It(), batch_size=4, num_workers=2) as tdl:
        assert_batches_equal(batches(tdl), ref)
        assert_batches_equal(batches(tdl), ref)


def test_worker_init_fn_and_pin_memory(world):
    ids = []
    with pytest.warns(UserWarning, match="pin_memory"), ThreadDataLoader(
            MapSource(N, make), batch_size=4, num_workers=3, worker_init_fn=ids.append,
            pin_memory=True) as tdl:
        got = batches(tdl)
    assert sorted(ids) == [0, 1, 2]
    assert_batches_equal(got, batches(DataLoader(MapSource(N, make), batch_size=4)))


def test_reuse_buffers_no_batch_sees_another(world, dds):
    allocated_before = len(dds._allocated)
    for collate in (None, "copies"):
        kw = {} if collate is None else dict(collate_fn=lambda b: torch.utils.data.default_collate(b),
                                              collate_copies=True)
        tdl = ThreadDataLoader(dds, batch_size=4, num_workers=2, reuse_buffers=True, shuffle=True,
                               generator=torch.Generator().manual_seed(3), **kw)
        assert len(dds._allocated) == allocated_before + 2  # one set per worker, registered once
        ref = batches(DataLoader(dds, batch_size=4, shuffle=True,
                                 generator=torch.Generator().manual_seed(3)))
        got = batches(tdl)  # all kept: a reused buffer would have overwritten earlier batches
        assert_batches_equal(got, ref)
        tdl.close()
        assert len(dds._allocated) == allocated_before  # close() unregistered the pool


def test_reuse_buffers_arguments(world, dds):
    with pytest.raises(ValueError, match="collate_copies"):
        ThreadDataLoader(dds, batch_size=4, reuse_buffers=True, collate_fn=lambda b: b)
    with pytest.raises(ValueError, match="batch_size"):
        ThreadDataLoader(dds, batch_size=None, reuse_buffers=True)
    with pytest.raises(TypeError, match="alloc"):
        ThreadDataLoader(MapSource(3, make), batch_size=1, reuse_buffers=True)
    # A positional bool is reuse_buffers, as in the documented signature, never a batch_size.
    tdl = ThreadDataLoader(dds, True, batch_size=4)
    assert tdl.reuse_buffers and tdl.batch_size == 4
    tdl.close()
    with pytest.raises(TypeError, match="by keyword"):
        ThreadDataLoader(dds, True, 4)  # DataLoader's arguments after it go by keyword
    # Positional arguments after the dataset are DataLoader's, as in DataLoader(ds, 4, False).
    tdl = ThreadDataLoader(dds, 4, False)
    assert tdl.batch_size == 4 and not tdl.reuse_buffers
    tdl.close()


def test_close_and_deletion(world, dds):
    tdl = ThreadDataLoader(dds, batch_size=4, num_workers=2, reuse_buffers=True)
    it = iter(tdl)
    next(it)
    threads = list(tdl._core.threads)
    assert all(t.is_alive() for t in threads)
    tdl.close()
    assert not any(t.is_alive() for t in threads)
    tdl.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        iter(tdl)
    # deleting the loader closes it
    tdl = ThreadDataLoader(Recorder(10), batch_size=2, num_workers=2)
    next(iter(tdl))
    threads = list(tdl._core.threads)
    del tdl, it
    gc.collect()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


def test_affinity_variables(world, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    workers = min(2, len(cpus))
    seen = {}
    monkeypatch.setenv("DDSTORE_AFFINITY_WIDTH", "1")
    monkeypatch.setenv("DDSTORE_AFFINITY_OFFSET", str(len(cpus) - workers))
    with ThreadDataLoader(Recorder(8), batch_size=2, num_workers=workers,
                          worker_init_fn=lambda i: seen.__setitem__(i, os.sched_getaffinity(0))) as tdl:
        batches(tdl)
    off = len(cpus) - workers
    assert seen == {i: {cpus[off + i]} for i in range(workers)}
    assert os.sched_getaffinity(0) == set(cpus)  # the main thread keeps its CPUs
    monkeypatch.setenv("DDSTORE_AFFINITY_WIDTH", str(len(cpus)))
    monkeypatch.setenv("DDSTORE_AFFINITY_OFFSET", "1")
    with pytest.raises(ValueError, match="DDSTORE_AFFINITY"):
        ThreadDataLoader(Recorder(8), batch_size=2)
    monkeypatch.setenv("DDSTORE_AFFINITY_WIDTH", "x")
    with pytest.raises(ValueError, match="DDSTORE_AFFINITY"):
        ThreadDataLoader(Recorder(8), batch_size=2)


class RecordingDist(DistDataset):
    """DistDataset that records the thread and order of its batched reads."""

    def __getitems__(self, indices, out=None):
        self.log.append((threading.get_ident(), list(indices)))
        return super().__getitems__(indices, out=out)


@pytest.fixture
def collective_reads(monkeypatch):
    """Method-0 stores made in the test read group-collectively also on one host
    (DDSTORE_NODE_LOCAL=0: node peers are read through RMA), as across hosts."""
    monkeypatch.setenv("DDSTORE_NODE_LOCAL", "0")


def test_method0_reads_in_one_thread_in_order(world, collective_reads):
    ds = RecordingDist(MapSource(N, make), "ordered")
    ds.log = []
    try:
        assert ds.ddstore.method == 0
        # the loader's rule is the store's (libddstore's dds_reads_collective): no other
        assert (ds.ordered_reads() is ds) == ds.ddstore.reads_collective == (world.size > 1)
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, seed=1)
        with ThreadDataLoader(ds, batch_size=3, sampler=sampler, num_workers=3) as tdl:
            got = batches(tdl)
        if ds.ddstore.reads_collective:
            assert len({t for t, _ in ds.log}) == 1
            assert [i for _, i in ds.log] == [list(b) for b in torch.utils.data.BatchSampler(sampler, 3, False)]
        assert_batches_equal(got, batches(DataLoader(ds, batch_size=3, sampler=sampler)))
    finally:
        ds.free()


def test_method0_node_local_reads_in_threads(world, monkeypatch):
    """Where the group shares node memory (or has one rank) method-0 batched reads are
    memory copies, not collective and thread-safe: the loader reads them in its threads."""
    monkeypatch.setenv("DDSTORE_NODE_LOCAL", "1")
    ds = RecordingDist(MapSource(N, make), "nodelocal")
    ds.log = []
    try:
        assert ds.ddstore.method == 0
        if ds.ddstore.reads_collective:
            pytest.skip("the group spans hosts (or has no node shared memory): reads are collective")
        assert ds.ordered_reads() is None
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, seed=2)
        with ThreadDataLoader(ds, batch_size=2, sampler=sampler, num_workers=3) as tdl:
            got = batches(tdl)
        assert_batches_equal(got, batches(DataLoader(ds, batch_size=2, sampler=sampler)))
    finally:
        ds.free()


def test_method0_epoch_cut_short(world, collective_reads):
    """break out of an epoch with reads in flight (prefetch depth differs per rank), then go on."""
    ds = RecordingDist(MapSource(N * 3, make), "cut")
    ds.log = []
    try:
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=False)
        tdl = ThreadDataLoader(ds, batch_size=2, sampler=sampler, num_workers=2, prefetch_factor=4)
        for k, b in enumerate(tdl):
            time.sleep(0.01 * world.rank)
            if k == 2:
                break
        full = batches(tdl)  # drains the cut epoch first, collectively, then a full epoch
        assert_batches_equal(full, batches(DataLoader(ds, batch_size=2, sampler=sampler)))
        for k, b in enumerate(tdl):
            if k == 1:
                break
        tdl.close()  # drains again
        nreads = world.allgather(len(ds.log))
        assert len(set(nreads)) == 1, nreads  # every rank made the same number of collective reads
        assert ds[5]["y"] == 15
    finally:
        ds.free()


def test_method0_subset_reads_in_one_thread(world, collective_reads):
    ds = RecordingDist(MapSource(N, make), "subset")
    ds.log = []
    try:
        sub = torch.utils.data.Subset(ds, list(range(3, N)))
        with ThreadDataLoader(sub, batch_size=4, num_workers=3) as tdl:
            got = batches(tdl)
        assert len({t for t, _ in ds.log}) == 1 or not ds.ddstore.reads_collective
        assert_batches_equal(got, batches(DataLoader(sub, batch_size=4)))
    finally:
        ds.free()


def test_inline_loader_yields_every_batch(world, dds):
    # Nothing but the for statement holds the loader: it must stay alive.
    n = sum(1 for _ in ThreadDataLoader(dds, batch_size=4, num_workers=2))
    assert n == len(ThreadDataLoader(dds, batch_size=4))


def test_subscriptable_like_dataloader(world):
    """ThreadDataLoader[T] as DataLoader[T] (torch's DataLoader is Generic[T_co]): annotations such
    as ``loader: ThreadDataLoader[dict]`` work, and the subscripted class still makes a loader."""
    assert ThreadDataLoader[dict] is not None and DataLoader[dict] is not None
    assert len(ThreadDataLoader.__parameters__) == len(DataLoader.__parameters__) == 1
    with ThreadDataLoader[dict](MapSource(N, make), batch_size=4, num_workers=2) as tdl:
        assert isinstance(tdl, ThreadDataLoader)
        assert_batches_equal(batches(tdl), batches(DataLoader(MapSource(N, make), batch_size=4)))


def test_one_loader_contract(world):
    """The loader asks pyddstore's datasets only through _loader_protocol.LoaderDataset
    (ordered_reads, read_batch), found through Subsets; no _pyddstore_* hooks remain."""
    from pyddstore.torch import WindowedDataset
    from pyddstore.torch import _loader_protocol as lp

    ds = DistDataset(MapSource(N, make), "contract")
    try:
        ws = WindowedDataset(ds, window=2)
        sub = torch.utils.data.Subset(ds, [3, 1, 2])
        for d in (ds, ws):
            assert isinstance(d, lp.LoaderDataset)
            assert not [a for a in dir(d) if a.startswith("_pyddstore")]
        assert lp.find(sub) is ds and lp.rows_of(sub, ds, [0, 2]) == [3, 2]
        assert lp.find(MapSource(N, make)) is None
        assert ws.ordered_reads() is ds.ordered_reads()
        assert (ds.ordered_reads() is ds) == ds.ddstore.reads_collective
        # read_batch: Columns for torch's default collate only; None for any other collate_fn
        cols = ds.read_batch(np.array([4, 0]), torch.utils.data.default_collate)
        assert isinstance(cols, lp.Columns)
        assert_same(lp.collated_columns(cols, copy=True),
                    torch.utils.data.default_collate([make(4), make(0)]))
        assert ds.read_batch([4, 0], lambda b: b) is None and ws.read_batch([0], None) is None
        batch = ds.__getitems__([4, 0])
        assert isinstance(batch, lp.SampleBatch) and isinstance(batch.columns, lp.Columns)
    finally:
        ds.free()
