"""Random graphs for the geometric tests, and exact comparisons with torch_geometric's own batches."""
import numpy as np
import torch
from torch_geometric.data import Batch, Data


class PairData(Data):
    """Two node sets, each with its own edge list (a Data subclass with its own __inc__)."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index_t":
            return self.x_t.size(0)
        return super().__inc__(key, value, *args, **kwargs)


def graph(i, *, pair=False):
    """Graph i: 1..12 nodes (every 5th has one node), 0..30 edges (every 4th has none)."""
    g = torch.Generator().manual_seed(1000 + i)
    n = 1 if i % 5 == 0 else int(torch.randint(2, 13, (1,), generator=g))
    e = 0 if i % 4 == 0 else int(torch.randint(1, 31, (1,), generator=g))
    kw = dict(
        x=torch.randn(n, 5, generator=g),
        pos=torch.randn(n, 3, generator=g, dtype=torch.float64),
        z=torch.randint(0, 100, (n,), generator=g, dtype=torch.int64),
        edge_index=torch.randint(0, n, (2, e), generator=g),
        edge_attr=torch.randn(e, 2, generator=g).to(torch.float16),
        y=torch.tensor([float(i)]),
        energy=torch.tensor(float(i) / 3),
        label=i % 3,
        weight=0.5 * i,
        face=torch.randint(0, n, (3, 2), generator=g, dtype=torch.int32),
    )
    if pair:
        m = 1 + i % 4
        return PairData(x_t=torch.randn(m, 2, generator=g),
                        edge_index_t=torch.randint(0, m, (2, i % 3), generator=g), **kw)
    return Data(**kw)


class Graphs(torch.utils.data.Dataset):
    """A map-style source of `n` random graphs."""

    def __init__(self, n, pair=False):
        self.n, self.pair = n, pair

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return graph(i, pair=self.pair)


def tensor_meta(t):
    """The metadata a torch_geometric Index/EdgeIndex carries besides its values (caches aside)."""
    from torch_geometric import EdgeIndex, Index

    if isinstance(t, Index):
        return t.dim_size, t.is_sorted, t._cat_metadata
    if isinstance(t, EdgeIndex):
        return t.sparse_size(), t.sort_order, t.is_undirected, t._cat_metadata
    return None


def same_value(a, b, what):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), (what, type(b))
        assert type(a) is type(b), (what, type(a), type(b))
        assert a.dtype == b.dtype and a.shape == b.shape, (what, a, b)
        assert torch.equal(a, b), (what, a, b)
        assert tensor_meta(a) == tensor_meta(b), (what, tensor_meta(a), tensor_meta(b))
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (what, a, b)
        for k in a:
            same_value(a[k], b[k], f"{what}[{k!r}]")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (what, a, b)
        for j, (x, y) in enumerate(zip(a, b)):
            same_value(x, y, f"{what}[{j}]")
    else:
        assert type(a) is type(b) and a == b, (what, a, b)


def same_data(a, b, what="data"):
    """a and b have the same class, attribute set, values, dtypes."""
    assert type(a) is type(b), (what, type(a), type(b))
    assert sorted(a.keys()) == sorted(b.keys()), (what, a.keys(), b.keys())
    for k in a.keys():
        same_value(a[k], b[k], f"{what}.{k}")


def same_batch(got, want, what="batch"):
    """Equal to Batch.from_data_list's result: attributes, slice/inc dicts, graph count."""
    same_data(got, want, what)
    assert got.num_graphs == want.num_graphs
    same_value(got._slice_dict, want._slice_dict, f"{what}._slice_dict")
    same_value(got._inc_dict, want._inc_dict, f"{what}._inc_dict")
    assert got._num_nodes == want._num_nodes if hasattr(want._store, "_num_nodes") else True


def expected(source, rows, **kw):
    """Batch.from_data_list of graphs `rows` of `source` (a dataset, or a function of the index)."""
    get = getattr(source, "__getitem__", source)
    return Batch.from_data_list([get(int(i)) for i in rows], **kw)
