"""geometric.DistDataset and DataLoader against torch_geometric itself: ds[i] equals the
source's Data, every batch equals Batch.from_data_list of the same graphs key by key and
dtype by dtype (slice/inc dicts, batch, ptr, follow_batch), at any rank count, with zero-edge
and single-node graphs, a Data subclass with its own __inc__, chunked loads, ddstore_width,
Subsets, and conversions."""
import numpy as np
import pytest
import torch
pytest.importorskip("torch_geometric")
from conftest import raised_everywhere  # noqa: E402
from graphs import Graphs, expected, same_batch, same_data
from torch.utils.data import DistributedSampler, Subset

from pyddstore.torch.geometric import DataLoader, DistDataset

N = 37


@pytest.mark.parametrize("chunk_size,width", [(None, None), (6, 1)])
def test_graphs_equal_source(world, chunk_size, width):
    src = Graphs(N)
    ds = DistDataset(src, f"geo_eq_{chunk_size}_{width}", comm=world, chunk_size=chunk_size,
                     ddstore_width=width)
    try:
        assert len(ds) == N
        assert ds.shapes["x"] == (None, 5) and ds.shapes["edge_index"] == (2, None)
        assert ds.shapes["y"] == (1,) and ds.shapes["face"] == (3, 2) and ds.shapes["label"] == ()
        assert ds.dtypes["edge_attr"] == torch.float16 and ds.cat_dims["edge_index"] == 1
        for i in range(N):
            same_data(ds[i], src[i], f"ds[{i}]")
        # Per-graph sizes are in the store, split over the ranks like the graphs.
        meta = ds.ddstore.query(f"geo_eq_{chunk_size}_{width}/__graph_meta__")
        g, gs = ds.ddstore.group_rank, ds.ddstore.group_size
        assert meta.local_rows == N * (g + 1) // gs - N * g // gs and meta.global_rows == N
        sizes = ds.graph_sizes()
        assert sizes.tolist() == [[src[i].num_nodes, src[i].num_edges] for i in range(N)]
    finally:
        ds.free()


@pytest.mark.parametrize("pair", [False, True])
def test_loader_batches_equal_from_data_list(world, pair):
    src = Graphs(N, pair=pair)
    ds = DistDataset(src, f"geo_ld_{pair}", comm=world)
    try:
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, shuffle=True, seed=3)
        cases = [dict(follow_batch=["x_t", "edge_attr"], exclude_keys=["x"])] if pair else [
            dict(), dict(follow_batch=["x", "edge_index", "label", "energy"]),
            dict(exclude_keys=["pos", "weight"])]
        for kw in cases:
            rows = list(sampler)
            loader = DataLoader(ds, batch_size=5, sampler=sampler, num_workers=2, **kw)
            got = list(loader)
            assert len(got) == -(-len(rows) // 5)
            for k, b in enumerate(got):
                part = rows[5 * k:5 * k + 5]
                want = expected(src, part, **kw)
                same_batch(b, want, f"batch {k} {kw}")
                assert type(b).__name__ == type(want).__name__
                for j, (d, w) in enumerate(zip(b.to_data_list(), want.to_data_list())):
                    same_data(d, w, f"to_data_list()[{j}]")
            loader.close()
        # Every graph alone, and a batch of single-node graphs without edges.
        for rows in ([0], [N - 1], [0, 20, 5, 0]):
            same_batch(ds._read_batch(rows).batch(), expected(src, rows))
    finally:
        ds.free()


def test_subset_plain_loader_and_dtypes(world):
    from torch_geometric.loader import DataLoader as PygLoader

    src = Graphs(N)
    ds = DistDataset(src, "geo_sub", comm=world, dtypes={"pos": torch.bfloat16, "x": torch.float64},
                     exclude_keys=["face"])
    try:
        assert ds.dtypes["pos"] == torch.bfloat16 and "face" not in ds.keys

        def conv(i):
            d = src[i]
            d.pos, d.x = d.pos.to(torch.bfloat16), d.x.double()
            del d.face
            return d

        for i in (0, 7):
            same_data(ds[i], conv(i))
        sub = Subset(ds, [3, 9, 4, 30, 30, 1])
        got = list(DataLoader(sub, batch_size=4))   # the same batches on every rank
        same_batch(got[0], expected(conv, [3, 9, 4, 30]))
        same_batch(got[1], expected(conv, [30, 1]))
        # torch_geometric's own loader over the dataset: __getitems__ gives Data objects.
        for b, rows in zip(PygLoader(ds, batch_size=8), [range(0, 8), range(8, 16)]):
            same_batch(b, expected(conv, rows))
    finally:
        ds.free()


def test_bad_sources_raise_everywhere(world):
    from torch_geometric.data import Data

    with pytest.raises(TypeError) as e:
        DistDataset([{"x": torch.zeros(2, 1)}] * 4, "geo_bad1", comm=world)
    assert "graph 0" in raised_everywhere(world, e) or "graph" in str(e.value)

    def mixed(i):
        return Data(x=torch.zeros(2, 1)) if i != 3 else Data(x=torch.zeros(2, 1), y=torch.ones(1))
    with pytest.raises(ValueError) as e:
        DistDataset([mixed(i) for i in range(6)], "geo_bad2", comm=world)
    assert "same" in raised_everywhere(world, e)

    with pytest.raises(ValueError) as e:
        DistDataset([Data(x=torch.zeros(2, i % 2 + 1)) for i in range(6)], "geo_bad3", comm=world)
    assert "__cat_dim__" in raised_everywhere(world, e)

    with pytest.raises(TypeError) as e:
        DistDataset([Data(x=torch.zeros(2, 1), s="text") for _ in range(4)], "geo_bad4", comm=world)
    assert "exclude_keys" in raised_everywhere(world, e)


def test_all_graphs_without_edges(world):
    from torch_geometric.data import Data

    src = [Data(x=torch.full((i % 3 + 1, 2), float(i)), edge_index=torch.zeros(2, 0, dtype=torch.long))
           for i in range(9)]
    ds = DistDataset(src, "geo_noedge", comm=world)
    try:
        for i in range(9):
            same_data(ds[i], src[i])
        idx = [(world.rank + 2 * j) % 9 for j in range(3)]
        same_batch(ds._read_batch(idx).batch(), expected(src.__getitem__, idx))
    finally:
        ds.free()


def test_explicit_num_nodes(world):
    from torch_geometric.data import Data

    src = [Data(edge_index=torch.tensor([[0], [min(1, i)]]), num_nodes=i + 2, y=torch.tensor([i]))
           for i in range(7)]
    ds = DistDataset(src, "geo_nn", comm=world)
    try:
        for i in range(7):
            same_data(ds[i], src[i])
        b = ds._read_batch([1, 5, 2]).batch()
        want = expected(src.__getitem__, [1, 5, 2])
        same_batch(b, want)
        assert b._num_nodes == want._num_nodes and b.num_nodes == want.num_nodes
        assert np.array_equal(b.ptr, want.ptr)
    finally:
        ds.free()


def test_fewer_graphs_than_ranks(world):
    """Ranks that hold no graph (2 graphs, up to 4 ranks) store nothing and still read every
    graph as its own class (a Data subclass, imported by name), and join batched reads."""
    src = Graphs(2, pair=True)
    ds = DistDataset(src, "geo_few", comm=world)
    try:
        assert ds._layout.cls is type(src[0])
        for i in range(2):
            same_data(ds[i], src[i], f"ds[{i}]")
        rows = [world.rank % 2, 1, 0]
        same_batch(ds._read_batch(rows).batch(), expected(src, rows))
        for chunk in (1, None):
            more = DistDataset(src, f"geo_few_{chunk}", comm=world, chunk_size=chunk)
            try:
                same_data(more[1], src[1])
            finally:
                more.free()
    finally:
        ds.free()

    if world.size > 1:
        from torch_geometric.data import Data

        class LocalData(Data):
            pass

        # A rank without graphs cannot import a class defined in a function: said on every rank.
        with pytest.raises(TypeError) as e:
            DistDataset([LocalData(x=torch.zeros(2, 1))], "geo_few_local", comm=world)
        msg = raised_everywhere(world, e)
        assert "LocalData" in msg and "holds no graph" in msg
