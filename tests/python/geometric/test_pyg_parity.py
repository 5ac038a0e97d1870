"""geometric.DataLoader and DistDataset where torch_geometric's own tests (test_dataloader.py,
test_batch.py) set the rule: num_workers=0 reads in the calling thread (OnDiskDataset's
SQLite handles belong to one thread), and batches of Batch objects keep each inner batch
vector. Run under mpiexec (every rank)."""
import json
import shutil
import tempfile
import threading

import pytest
import torch
pytest.importorskip("torch_geometric")
from conftest import raised_everywhere  # noqa: E402
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

    def read_batch(self, indices, collate_fn, out=None):
        self.threads.add(threading.get_ident())
        return super().read_batch(indices, collate_fn, out=out)


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


# ------------------------------------------------------------------ Index and EdgeIndex

def _indexed_graph(i):
    """Graph i with torch_geometric's tensor subclasses, their metadata varying by graph:
    an EdgeIndex (sort order row/col/none, undirected or not, sizes known or not), an Index
    incremented by the node count ("node_index", sorted in some graphs, dim_size None in some)
    and an Index that is not incremented ("cluster")."""
    from torch_geometric import EdgeIndex, Index
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(500 + i)
    n = 2 + i % 4
    e = 0 if i % 7 == 3 else 1 + i % 5
    ei = torch.randint(0, n, (2, e), generator=g)
    order = (None, "row", "col")[i % 3]
    if order is not None:
        ei = ei[:, torch.argsort(ei[0 if order == "row" else 1], stable=True)]
    if i % 4 == 1:   # undirected: both directions, square size
        ei = torch.cat([ei, ei.flip(0)], 1)
        ei = ei[:, torch.argsort(ei[0], stable=True)]
        edge_index = EdgeIndex(ei.contiguous(), sparse_size=(n, n), sort_order="row", is_undirected=True)
    else:
        size = None if i % 5 == 2 else (n, n + i % 2)
        edge_index = EdgeIndex(ei.contiguous(), sparse_size=size, sort_order=order)
    node_index = torch.randint(0, n, (2 + i % 3,), generator=g)  # torch_geometric cannot add to 1 index
    if i % 2 == 0:
        node_index = node_index.sort().values
    cluster = torch.randint(0, 4, (3,), generator=g, dtype=torch.int32)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=edge_index,
                node_index=Index(node_index, dim_size=None if i % 6 == 5 else n, is_sorted=i % 2 == 0),
                cluster=Index(cluster, dim_size=4 + i % 2), y=torch.tensor([i]))


def test_index_and_edge_index_keep_class_and_metadata(world):
    """Graphs with torch_geometric's Index and EdgeIndex: ds[i] keeps each graph's class and
    metadata, and every batch equals Batch.from_data_list's (Index/EdgeIndex with merged
    dim_size/sparse_size/sort order/is_undirected and per-graph _cat_metadata), as do
    to_data_list() and batch[i] of it; also chunked loads and ranks holding no graph."""
    from torch_geometric import EdgeIndex, Index
    from torch_geometric.data import Batch, Data

    n = 13
    src = [_indexed_graph(i) for i in range(n)]
    for chunk in (None, 4):
        ds = DistDataset(src, f"geo_idx_{chunk}", comm=world, chunk_size=chunk)
        try:
            # The description a DistDatasetReader reads says which attributes keep a class.
            text = ds._layout.to_json()
            assert json.loads(text)["version"] == 2
            kept = {a.key: (a.sub, a.sub_col) for a in type(ds._layout).from_json(text, Data).attrs}
            assert kept == {a.key: (a.sub, a.sub_col) for a in ds._layout.attrs}
            assert kept["edge_index"][0] == "EdgeIndex" and kept["x"] == (None, None)
            for i in range(n):
                d = ds[i]
                same_data(d, src[i], f"ds[{i}]")
                assert isinstance(d.edge_index, EdgeIndex) and isinstance(d.node_index, Index)
            sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=True, seed=4)
            rows = list(sampler)
            for workers in (0, 2):
                got = list(DataLoader(ds, batch_size=4, sampler=sampler, num_workers=workers,
                                      follow_batch=["node_index"]))
                assert len(got) == -(-len(rows) // 4)
                for k, b in enumerate(got):
                    want = Batch.from_data_list([src[i] for i in rows[4 * k:4 * k + 4]],
                                                follow_batch=["node_index"])
                    same_batch(b, want, f"batch {k}")
                    assert isinstance(b.edge_index, EdgeIndex) and isinstance(b.cluster, Index)
                    for j, (x, w) in enumerate(zip(b.to_data_list(), want.to_data_list())):
                        same_data(x, w, f"batch {k}.to_data_list()[{j}]")
                        same_data(b[j], want[j], f"batch {k}[{j}]")
            # One graph alone, all graphs, repeats; undirected row-sorted graphs only (the batch
            # is undirected and sorted by row), row-sorted ones, column-sorted ones.
            for part in ([n - 1], list(range(n)), [2, 2, 0], [1, 5, 9], [4, 7, 10], [2, 8]):
                b = ds._read_batch(part).batch()
                same_batch(b, Batch.from_data_list([src[i] for i in part]))
                if part == [1, 5, 9]:
                    assert b.edge_index.is_undirected and b.edge_index.sort_order == "row"
                if part == [2, 8]:
                    assert b.edge_index.sort_order == "col" and b.node_index.is_sorted
        finally:
            ds.free()
    # torch_geometric's own cases (test_batch.py: test_index, test_edge_index).
    index1 = Index([0, 1, 1, 2], dim_size=3, is_sorted=True)
    index2 = Index([0, 1, 1, 2, 2, 3], dim_size=4, is_sorted=True)
    edge1 = EdgeIndex([[0, 1, 1, 2], [1, 0, 2, 1]], sparse_size=(3, 3), sort_order="row", is_undirected=True)
    edge2 = EdgeIndex([[1, 0, 2, 1, 3, 2], [0, 1, 1, 2, 2, 3]], sparse_size=(4, 4), sort_order="col")
    for pair in ([Data(index=index1, num_nodes=3), Data(index=index2, num_nodes=4)],
                 [Data(edge_index=edge1), Data(edge_index=edge2)]):
        small = DistDataset(pair, "geo_idx_pyg", comm=world)
        try:
            b = small._read_batch([0, 1]).batch()
            same_batch(b, Batch.from_data_list(pair))
            if "index" in b:
                assert b.index.dim_size == 7 and b.index.is_sorted
            else:
                assert b.edge_index.sparse_size() == (7, 7) and b.edge_index.sort_order is None
                assert not b.edge_index.is_undirected
        finally:
            small.free()


def test_other_tensor_subclasses_are_refused(world):
    """A tensor subclass the store would hand back as a plain tensor is refused at load, and an
    attribute that is an Index in one graph and a plain tensor in another too (every rank)."""
    from torch_geometric import Index
    from torch_geometric.data import Data

    src = [Data(x=torch.zeros(2, 1), w=torch.nn.Parameter(torch.ones(2, 1))) for _ in range(3)]
    with pytest.raises(TypeError) as e:
        DistDataset(src, "geo_param", comm=world)
    msg = raised_everywhere(world, e)
    assert "Parameter" in msg and "'w'" in msg and "Index and EdgeIndex" in msg
    # A mix within a rank's share, or between ranks.
    mixed = [Data(x=torch.zeros(2, 1), node_index=Index(torch.tensor([0, 1])) if i % 2 else torch.tensor([0, 1]))
             for i in range(8)]
    with pytest.raises(ValueError) as e:
        DistDataset(mixed, "geo_mixed", comm=world)
    assert "class=Index" in raised_everywhere(world, e)
