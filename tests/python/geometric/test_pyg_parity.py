"""geometric.DataLoader and DistDataset where torch_geometric's own tests (test_dataloader.py,
test_batch.py) set the rule: num_workers=0 reads in the calling thread (OnDiskDataset's
SQLite handles belong to one thread), and batches of Batch objects keep each inner batch
vector. Run under mpiexec (every rank)."""
import shutil
import tempfile
import threading

import pytest
import torch
pytest.importorskip("torch_geometric")
from graphs import Graphs, expected, same_batch, same_data  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from pyddstore.torch import ThreadDataLoader  # noqa: E402
from pyddstore.torch.geometric import Collater, DataLoader, DistDataset  # noqa: E402

N = 23


# ------------------------------------------------------------------ num_workers=0

def test_on_disk_dataset_with_no_workers(world):
    """torch_geometric's test_dataloader_on_disk_dataset: an OnDiskDataset (SQLite, whose
    connection may only be used by the thread that made it) through the loader."""
    from torch_geometric.data import Data, OnDiskDataset
    from torch_geometric.loader import DataLoader as PygLoader

    root = tempfile.mkdtemp(prefix=f"pyddstore-ondisk-{world.rank}-")
    try:
        dataset = OnDiskDataset(root)
        g = torch.Generator().manual_seed(world.rank)
        data = [Data(x=torch.randn(3 + i % 3, 8, generator=g)) for i in range(5)]
        dataset.extend(data)
        loader = DataLoader(dataset, batch_size=2)
        assert len(loader) == 3
        got = list(loader)
        want = list(PygLoader(dataset, batch_size=2))
        assert len(got) == len(want) == 3
        for b, w in zip(got, want):
            same_batch(b, w)
        assert got[0].batch.tolist() == [0] * 3 + [1] * 4
        # DataLoader's single-process path: the same shuffle draws from a generator.
        got = list(DataLoader(dataset, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(9)))
        want = list(PygLoader(dataset, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(9)))
        for b, w in zip(got, want):
            same_batch(b, w)
        dataset.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _Recording(DistDataset):
    """A geometric DistDataset that records the threads its batches are read in."""

    def _pyddstore_graph_columns(self, indices):
        self.threads.add(threading.get_ident())
        return super()._pyddstore_graph_columns(indices)


def test_no_workers_reads_in_the_calling_thread(world):
    src = Graphs(N)
    ds = _Recording(src, "geo_caller", comm=world)
    try:
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=True, seed=1)
        rows = list(sampler)
        for workers, in_caller in ((0, True), (2, False)):
            ds.threads = set()
            got = list(DataLoader(ds, batch_size=4, sampler=sampler, num_workers=workers))
            assert len(got) == -(-len(rows) // 4)
            for k, b in enumerate(got):
                same_batch(b, expected(src, rows[4 * k:4 * k + 4]))
            assert (ds.threads == {threading.get_ident()}) is in_caller, (workers, ds.threads)
        # A batch cut short, then another loader of the dataset: nothing left in flight.
        it = iter(DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2))
        next(it)
        del it
        got = list(DataLoader(ds, batch_size=5, sampler=sampler))
        same_batch(got[-1], expected(src, rows[5 * (len(got) - 1):]))
        # ThreadDataLoader keeps "0 means 1": one worker thread reads.
        ds.threads = set()
        with ThreadDataLoader(ds, batch_size=4, sampler=sampler, num_workers=0,
                              collate_fn=Collater(ds)) as tdl:
            n = sum(1 for _ in tdl)
        assert n == -(-len(rows) // 4)
        assert ds.threads and threading.get_ident() not in ds.threads
    finally:
        ds.free()


# ------------------------------------------------------------------ batches of batches

def _batches(n):
    """n Batch objects of 2 or 3 small graphs each (torch_geometric's test_batching_of_batches)."""
    from torch_geometric.data import Batch

    g = Graphs(3 * n)
    return [Batch.from_data_list([g[3 * i + j] for j in range(2 + i % 2)]) for i in range(n)]


def test_batches_of_batches_keep_inner_batch_vectors(world):
    from torch_geometric.data import Batch, Data

    src = _batches(N)
    ds = DistDataset(src, "geo_bob", comm=world)
    try:
        for i in (0, 1, N - 1):
            same_data(ds[i], src[i], f"ds[{i}]")
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=True, seed=2)
        rows = list(sampler)
        for workers in (0, 2):
            got = list(DataLoader(ds, batch_size=4, sampler=sampler, num_workers=workers))
            for k, b in enumerate(got):
                part = rows[4 * k:4 * k + 4]
                want = Batch.from_data_list([src[i] for i in part])
                same_batch(b, want, f"batch {k}")
                assert type(b).__name__ == type(want).__name__
                assert "ptr" not in b and b.num_graphs == len(part)
                # Each inner batch vector, incremented: graphs of the inner batches.
                inner = [src[i].num_graphs for i in part]
                assert b.batch.tolist() == torch.repeat_interleave(
                    torch.arange(sum(inner)),
                    torch.cat([torch.bincount(src[i].batch) for i in part])).tolist()
        # torch_geometric's own case: two batches of [data, data].
        d = Data(x=torch.randn(2, 16, generator=torch.Generator().manual_seed(5)))  # the same on every rank
        one = Batch.from_data_list([d, d])
        small = DistDataset([one, one], "geo_bob2", comm=world)
        try:
            b = small._read_batch([0, 1]).batch()
            assert b.batch.tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and b.num_graphs == len(b) == 2
            same_batch(b, Batch.from_data_list([one, one]))
        finally:
            small.free()
    finally:
        ds.free()
