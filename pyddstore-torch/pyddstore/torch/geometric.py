"""torch_geometric graphs in the store: ``Data`` in, ``Batch`` out.

Needs torch_geometric (``pip install 'pyddstore-torch[geometric]'``).

* :class:`DistDataset` stores any map-style source of
  ``torch_geometric.data.Data`` samples (a list, an ``InMemoryDataset``, a
  ``ParquetSource`` with ``encode=``). Every tensor attribute becomes a field
  concatenated along PyG's own ``Data.__cat_dim__`` axis: node-level and
  edge-level attributes are stored flat, all graphs' rows one after the
  other, however many attributes vary in size; attributes of one size in
  every graph (graph-level targets) are stored as fixed rows. Per-graph
  sizes, ``__inc__`` increments and node counts live in one small int64
  variable of the store, split over the ranks like the data (O(N/P) each).
* :class:`DataLoader` has torch_geometric's ``DataLoader`` signature over a
  :class:`~pyddstore.torch.ThreadDataLoader`. A batch is read with one store
  call per stored variable and built straight from the flat columns into a
  ``Batch`` (increments, ``batch``/``ptr``, ``follow_batch`` vectors,
  ``_slice_dict``/``_inc_dict``) equal, key by key and dtype by dtype, to
  ``Batch.from_data_list`` of the same samples, without making one ``Data``
  per graph.
* :class:`BudgetBatchSampler` makes batches of about equal total nodes or
  edges (not equal graph counts), the same number on every rank, from the
  stored sizes only; resumable, also on another number of ranks.
* :class:`DistDatasetReader` reads such a dataset from another job (method 2).

Example::

    from pyddstore.torch.geometric import DistDataset, DataLoader, BudgetBatchSampler

    ds = DistDataset(molecules, "qm9", dtypes={"pos": torch.float32})
    ds[3]                                    # Data equal to molecules[3] (pos as float32)
    sampler = torch.utils.data.DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=2)
    for batch in loader:                     # torch_geometric.data.Batch
        out = model(batch.x, batch.edge_index, batch.batch)

Stored layout of dataset ``name``: ``name/<attr>`` (or ``name/<attr>@<p>``
for the p-th slab of an attribute whose concatenation axis is not the first,
such as ``edge_index``: each slab is contiguous, so a batch is read straight
into its final layout), ``name/__graph_meta__`` (per graph: nodes, edges,
first row and length of each size group, increments, Index/EdgeIndex metadata) and
``name/__graph__`` (JSON description, for readers).
"""

import copy
import dataclasses
import json
import logging
import time
import warnings

import numpy as np
import torch

from . import _dtypes, _progress
from . import _loader_protocol as loader_protocol
from ._logging import logger
from ._storedataset import LoadPlan, StoreDataset, agreed_length, as_comm, check_chunk_size, raise_agreed
from .loader import ThreadDataLoader

try:
    import torch_geometric  # noqa: F401
    from torch_geometric.data import Batch, Data
    from torch_geometric.data.data import BaseData
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("pyddstore.torch.geometric needs torch_geometric: "
                      "pip install 'pyddstore-torch[geometric]'") from _exc

__all__ = ["DistDataset", "DistDatasetReader", "DataLoader", "BudgetBatchSampler", "Collater"]

META_SUFFIX = "__graph_meta__"
GRAPH_SUFFIX = "__graph__"
# Version of the stored description: 2 when an attribute keeps an Index/EdgeIndex class
# (readers that predate it refuse it rather than hand out plain tensors), else 1.
_VERSION, _VERSIONS = 2, (1, 2)
# Kinds of stored attributes.
_TENSOR, _INT, _FLOAT, _BOOL, _NUM_NODES = "tensor", "int", "float", "bool", "num_nodes"
_NUMBER_DTYPES = {_INT: "int64", _FLOAT: "float64", _BOOL: "bool"}
# Meta columns before the groups' (first row, length) pairs.
_COL_NODES, _COL_EDGES, _COL_GROUPS = 0, 1, 2
_INT64_SCALAR = torch.zeros((), dtype=torch.int64)


def _class_path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_ref(cls):
    """How a rank that holds no graph finds the graphs' class: [module, qualname], or
    ["batch", ref of the Data class] for a Batch class made by torch_geometric's dynamic
    inheritance (DataBatch: Batch samples), which cannot be imported by name."""
    bases = cls.__bases__
    if issubclass(cls, Batch) and len(bases) == 2 and bases[0] is Batch:
        return ["batch", _class_ref(bases[1])]
    return [cls.__module__, cls.__qualname__]


def _import_class(ref):
    """The class of a _class_ref(); TypeError naming it when it cannot be imported."""
    import importlib

    if ref[0] == "batch":
        return type(Batch(_base_cls=_import_class(ref[1])))
    module, qualname = ref
    obj = None
    if "<locals>" not in qualname:
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            obj = None
    if not (isinstance(obj, type) and issubclass(obj, Data)):
        raise TypeError(f"this rank holds no graph (fewer graphs than ranks) and cannot import the graphs' "
                        f"class {module}.{qualname}: define it at the top level of a module, or load "
                        "at least as many graphs as ranks")
    return obj


# ------------------------------------------------------------------ tensor subclasses
# torch_geometric's Index (torch_geometric >= 2.6) and EdgeIndex keep their class and their
# per-graph metadata, stored in meta columns: Index (dim_size, is_sorted), EdgeIndex (rows,
# columns, sort order, is_undirected); -1 stands for a size of None.
_SUB_INDEX, _SUB_EDGE_INDEX = "Index", "EdgeIndex"
_SUB_CLASSES = {n: getattr(torch_geometric, n, None) for n in (_SUB_INDEX, _SUB_EDGE_INDEX)}
_SUB_WIDTH = {_SUB_INDEX: 2, _SUB_EDGE_INDEX: 4}
_SORT_ORDERS = (None, "row", "col")     # EdgeIndex.sort_order by its meta code


def _subclass_of(value, where):
    """None for a plain tensor, "Index" or "EdgeIndex" for those classes of torch_geometric;
    TypeError for any other torch.Tensor subclass, which would come back as a plain tensor."""
    t = type(value)
    if t is torch.Tensor:
        return None
    for name, cls in _SUB_CLASSES.items():
        if cls is not None and t is cls:
            return name
    raise TypeError(f"{where}: a {t.__module__}.{t.__qualname__} is a torch.Tensor subclass, which would "
                    "come back as a plain tensor; only torch_geometric's Index and EdgeIndex keep their "
                    "class in the store. Make it a plain tensor with encode= or leave it out with "
                    "exclude_keys=")


def _sub_meta(sub, value, where):
    """The meta columns of one graph's Index/EdgeIndex `value`."""
    if sub == _SUB_INDEX:
        sizes, flags = [value.dim_size], [bool(value.is_sorted)]
    else:
        sizes = list(value.sparse_size())
        flags = [_SORT_ORDERS.index(value.sort_order), bool(value.is_undirected)]
    for s in sizes:
        if s is not None and int(s) < 0:
            raise ValueError(f"{where}: the {sub}'s size {s} is negative")
    return [-1 if s is None else int(s) for s in sizes] + [int(f) for f in flags]


def _size(code):
    return None if code < 0 else int(code)


def _sub_tensor(sub, t, cols):
    """Plain tensor `t` of one graph as its Index/EdgeIndex with meta columns `cols`."""
    t = t.contiguous()
    if sub == _SUB_INDEX:
        return _SUB_CLASSES[sub](t, dim_size=_size(cols[0]), is_sorted=bool(cols[1]))
    return _SUB_CLASSES[sub](t, sparse_size=(_size(cols[0]), _size(cols[1])),
                             sort_order=_SORT_ORDERS[cols[2]], is_undirected=bool(cols[3]))


def _sub_batch(attr, value, cols, cum, nnz):
    """Batch attribute `value` (plain, incremented) as torch.cat of the graphs' incremented
    Index/EdgeIndex values makes it in Batch.from_data_list: class, merged metadata and the
    per-graph _cat_metadata (torch_geometric/data/collate.py, index.py, edge_index.py).

    cols: the graphs' meta columns of the attribute (graphs, _SUB_WIDTH); cum: each graph's
    increment as added (zeros when the batch is not incremented); nnz: each graph's size along
    the concatenation axis.
    """
    import torch_geometric.edge_index as pyg_edge_index
    import torch_geometric.index as pyg_index

    value = value.contiguous()
    nnz = [int(x) for x in nnz]
    flags = cols
    cum = [int(c) for c in cum]
    if attr.sub == _SUB_INDEX:
        if attr.cat is None:
            return value                         # stacked (unsqueezed): a plain tensor
        dims = [None if d < 0 else d + c for d, c in zip(flags[:, 0].tolist(), cum)]
        sorted_ = [bool(f) for f in flags[:, 1].tolist()]
        out = _SUB_CLASSES[_SUB_INDEX](value)
        out._dim_size = None if None in dims else max(dims)
        out._cat_metadata = pyg_index.CatMetadata(nnz=nnz, dim_size=dims, is_sorted=sorted_)
        if sorted_[0] and bool((value.diff() >= 0).all()):
            out._is_sorted = True
        return out
    if attr.cat != 1:
        return value                             # not concatenated along the edges: plain
    sizes = [tuple(None if s < 0 else s + c for s in row) for row, c in zip(flags[:, :2].tolist(), cum)]
    orders = [None if o == 0 else pyg_edge_index.SortOrder(_SORT_ORDERS[o]) for o in flags[:, 2].tolist()]
    undirected = [bool(u) for u in flags[:, 3].tolist()]
    out = _SUB_CLASSES[_SUB_EDGE_INDEX](value)
    rows, cols_ = [r for r, _ in sizes], [c for _, c in sizes]
    out._sparse_size = (None if None in rows else max(rows), None if None in cols_ else max(cols_))
    out._is_undirected = all(undirected)
    out._cat_metadata = pyg_edge_index.CatMetadata(nnz=nnz, sparse_size=sizes, sort_order=orders,
                                                   is_undirected=undirected)
    if orders[0] == pyg_edge_index.SortOrder.ROW and bool((value[0].diff() >= 0).all()):
        out._sort_order = pyg_edge_index.SortOrder.ROW
    elif orders[0] == pyg_edge_index.SortOrder.COL and bool((value[1].diff() >= 0).all()):
        out._sort_order = pyg_edge_index.SortOrder.COL
    return out


# ------------------------------------------------------------------ attributes

class _Attr:
    """How one attribute is stored: kind, dtype name, shape, concatenation axis, layout."""

    __slots__ = ("key", "kind", "dtype", "shape", "cat", "var", "group", "inc", "parts", "inner",
                 "infer", "sub", "sub_col")

    def __init__(self, key, kind, dtype, shape, cat, var=False, group=None, inc=None, sub=None,
                 sub_col=None):
        self.key, self.kind, self.dtype = key, kind, dtype
        self.sub = sub                # tensor class kept: None (torch.Tensor), "Index" or "EdgeIndex"
        self.sub_col = sub_col        # first meta column of its per-graph metadata (_SUB_WIDTH columns)
        self.shape = tuple(int(d) for d in shape)    # with the size along `cat` of the first graph seen
        self.cat = cat                # axis (>= 0) or None: stacked (0-d tensors, cat_dim None)
        self.var = var                # size along `cat` differs between graphs
        self.group = group            # size group (index) of a variable attribute
        self.inc = inc                # meta column of the per-graph __inc__, or None (always 0)
        d = 0 if cat is None else cat
        self.parts = int(np.prod(self.shape[:d], dtype=np.int64)) if cat is not None else 1
        self.inner = int(np.prod(self.shape[d + 1:], dtype=np.int64)) if cat is not None else \
            int(np.prod(self.shape, dtype=np.int64))

    def to_obj(self):
        o = {"key": self.key, "kind": self.kind, "dtype": self.dtype, "shape": list(self.shape),
             "cat": self.cat, "var": self.var, "group": self.group, "inc": self.inc}
        if self.sub is not None:
            o.update(sub=self.sub, sub_col=self.sub_col)
        return o

    @classmethod
    def from_obj(cls, o):
        return cls(o["key"], o["kind"], o["dtype"], o["shape"], o["cat"], o["var"], o["group"], o["inc"],
                   o.get("sub"), o.get("sub_col"))

    def signature(self):
        """What must agree between graphs: everything but the size along the axis."""
        shape = list(self.shape)
        if self.cat is not None and shape:
            shape[self.cat] = None
        return (self.key, self.kind, self.dtype, tuple(shape), self.cat, self.sub)

    def describe(self):
        shape = list(self.shape)
        if self.cat is not None and shape and self.var:
            shape[self.cat] = "*"
        cls = f" class={self.sub}" if self.sub is not None else ""
        return (f"{self.kind}{cls} dtype={self.dtype} shape=({', '.join(map(str, shape))}) "
                f"cat_dim={self.cat}")

    def size(self):
        """Size along the concatenation axis (1 for stacked attributes)."""
        return 1 if self.cat is None else self.shape[self.cat]

    def fixed_shape(self):
        """Per-graph row shape of a fixed attribute ((), for numbers)."""
        return self.shape

    def variables(self, name):
        """Store variable names of this attribute (one per slab for variable attributes)."""
        if self.var and self.parts > 1:
            return [f"{name}/{self.key}@{p}" for p in range(self.parts)]
        return [f"{name}/{self.key}"]


def _attr_of(data, key, value, index, conversions):
    """(_Attr, host numpy value, inc, meta columns of an Index/EdgeIndex or None) of one
    attribute of one graph."""
    where = f"graph {index}, attribute {key!r}"
    if key == "num_nodes":
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{where}: num_nodes must be an int, got {type(value).__name__}")
        return _Attr(key, _NUM_NODES, "int64", (), None), None, 0, None
    if conversions is not None and key in conversions:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{where}: dtypes= converts tensor attributes, not a {type(value).__name__}")
        value = value.to(_dtypes.torch_dtype(conversions[key]))
    sub = sub_meta = None
    if isinstance(value, torch.Tensor):
        sub = _subclass_of(value, where)
        if value.is_sparse or value.layout != torch.strided or getattr(value, "is_nested", False):
            raise TypeError(f"{where}: sparse and nested tensors are not stored; make it dense or "
                            "leave it out with exclude_keys=")
        name = _dtypes.of_torch(value.dtype)
        if name is None:
            raise TypeError(f"{where}: dtype {value.dtype} is not supported; use one of {_dtypes.TEXT} "
                            "(convert it with dtypes= or encode=)")
        cat = data.__cat_dim__(key, value)
        if cat is not None and not isinstance(cat, (int, np.integer)):
            raise TypeError(f"{where}: __cat_dim__ returned {cat!r}; only one int axis or None is supported")
        if value.dim() == 0:
            cat = None
        elif cat is not None:
            if not -value.dim() <= cat < value.dim():
                raise ValueError(f"{where}: __cat_dim__ {cat} is out of range for shape {tuple(value.shape)}")
            cat = int(cat) % value.dim()
        attr = _Attr(key, _TENSOR, name, tuple(value.shape), cat, sub=sub)
        if sub is not None:
            sub_meta = _sub_meta(sub, value, where)
        arr = _dtypes.tensor_to_numpy(value if sub is None else value.as_tensor())
    elif isinstance(value, bool):
        attr, arr = _Attr(key, _BOOL, "bool", (), None), np.bool_(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        attr, arr = _Attr(key, _INT, "int64", (), None), np.int64(value)
    elif isinstance(value, (float, np.floating)):
        attr, arr = _Attr(key, _FLOAT, "float64", (), None), np.float64(value)
    else:
        raise TypeError(f"{where}: a {type(value).__name__} cannot be stored (tensors and int/float/bool "
                        "attributes can); leave it out with exclude_keys= or convert it with encode=")
    inc = data.__inc__(key, value)
    if isinstance(inc, torch.Tensor):
        if inc.numel() != 1 or inc.is_floating_point():
            raise TypeError(f"{where}: __inc__ returned a tensor of shape {tuple(inc.shape)}; only "
                            "integer increments are supported")
        inc = int(inc)
    if isinstance(inc, bool) or not isinstance(inc, (int, np.integer)):
        raise TypeError(f"{where}: __inc__ returned {inc!r}; only integer increments are supported")
    return attr, arr, int(inc), sub_meta


class _Graphs:
    """Graphs of one rank's share, decomposed: attributes, per-graph numbers, values."""

    def __init__(self, keep_values):
        self.keep = keep_values
        self.attrs = None           # [_Attr] of the first graph
        self.cls = None
        self.infer = None
        self.nodes, self.edges, self.incs, self.sizes = [], [], [], []
        self.subs = []              # per graph: [meta columns of each Index/EdgeIndex attribute, or None]
        self.values = None          # per attribute: list of arrays

    def add(self, data, index, exclude, conversions):
        if not isinstance(data, BaseData) or not isinstance(data, Data):
            raise TypeError(f"graph {index}: a {type(data).__name__}, not a torch_geometric Data "
                            "(HeteroData is not supported); turn samples into Data with encode=")
        # The storage's insertion order: what Batch.from_data_list iterates
        # (Data.keys() is a set's order).
        all_keys = list(data._store.keys())
        keys = [k for k in all_keys if k not in exclude]
        if not keys:
            raise ValueError(f"graph {index}: no attribute to store")
        if len(keys) != len(all_keys):
            # Sizes as the stored graph (without the excluded attributes) infers them.
            data = copy.copy(data)
            for k in exclude:
                if k in data:
                    del data[k]
        got = [_attr_of(data, k, data[k], index, conversions) for k in keys]
        if self.attrs is None:
            self.attrs = [a for a, _, _, _ in got]
            self.cls = type(data)
            # torch_geometric adds batch/ptr when the first graph's attributes tell the
            # number of nodes (NodeStorage.can_infer_num_nodes); the same rule on the stored keys.
            self.infer = bool(set(keys) & {"num_nodes", "x", "pos", "batch", "adj", "adj_t",
                                          "edge_index", "face"}) or any("node" in k for k in keys)
            self.values = [[] for _ in got]
        else:
            if type(data) is not self.cls:
                raise TypeError(f"graph {index} is a {type(data).__name__}, an earlier graph a "
                                f"{self.cls.__name__}; every graph must be of one class")
            if sorted(keys) != sorted(a.key for a in self.attrs):
                raise ValueError(f"graph {index} has attributes {sorted(keys)}, an earlier graph "
                                 f"{sorted(a.key for a in self.attrs)}; every graph needs the same ones "
                                 "(leave the others out with exclude_keys=)")
            by_key = {g[0].key: g for g in got}
            got = [by_key[a.key] for a in self.attrs]
            for ref, (a, _, _, _) in zip(self.attrs, got):
                if a.signature() != ref.signature():
                    raise ValueError(f"graph {index}, attribute {a.key!r}: {a.describe()} differs from "
                                     f"{ref.describe()} of an earlier graph; only the size along "
                                     "__cat_dim__ may vary")
        with warnings.catch_warnings():
            # PyG warns when it guesses num_nodes from edge_index; the guess is what
            # Batch.from_data_list uses too, so it is what is stored.
            warnings.simplefilter("ignore")
            n = data.num_nodes
        self.nodes.append(0 if n is None else int(n))
        self.edges.append(int(data.num_edges))
        self.incs.append([i for _, _, i, _ in got])
        self.sizes.append([a.size() for a, _, _, _ in got])
        self.subs.append([m for _, _, _, m in got])
        if self.keep:
            for lst, (a, v, _, _) in zip(self.values, got):
                lst.append(v)


def _pack_values(attr, arrays, spare):
    """One attribute of a share as stored: (parts, rows, inner) for variable attributes,
    (graphs, *shape) for fixed ones."""
    dt = _dtypes.storage(attr.dtype)
    if attr.var:
        blocks = [np.ascontiguousarray(a).reshape(attr.parts, -1, attr.inner) for a in arrays]
        if spare:
            blocks.append(np.zeros((attr.parts, 1, attr.inner), dt))
        if not blocks:
            return np.zeros((attr.parts, 0, attr.inner), dt)
        return np.concatenate(blocks, axis=1)
    if not arrays:
        return np.zeros((0,) + attr.fixed_shape(), dt)
    return np.stack([np.asarray(a, dtype=dt) for a in arrays])


# ------------------------------------------------------------------ reading

class _Columns:
    """One batch as read from the store: per-graph meta rows and one array per attribute."""

    __slots__ = ("layout", "rows", "meta", "values")

    def __init__(self, layout, rows, meta, values):
        self.layout, self.rows, self.meta, self.values = layout, rows, meta, values

    # -- one Data per graph (ds[i], __getitems__) --------------------------------
    def data_list(self):
        lay = self.layout
        out = []
        bounds = {}
        for g, (c0, c1) in enumerate(lay.group_cols):
            lens = self.meta[:, c1]
            bounds[g] = np.concatenate(([0], np.cumsum(lens)))
        for j in range(len(self.rows)):
            d = lay.new_data()
            for a in lay.attrs:
                if a.kind == _NUM_NODES:
                    d.num_nodes = int(self.meta[j, _COL_NODES])
                    continue
                v = self.values[a.key]
                if a.kind != _TENSOR:
                    d[a.key] = v[j].item()
                    continue
                if a.var:
                    b = bounds[a.group]
                    block = v[:, b[j]:b[j + 1]]
                    shape = list(a.shape)
                    shape[a.cat] = block.shape[1]
                    t = _dtypes.as_tensor(block, a.dtype).reshape(shape)
                else:
                    t = _dtypes.as_tensor(v[j, ...], a.dtype)
                if a.sub is not None:
                    t = _sub_tensor(a.sub, t, self.meta[j, a.sub_col:a.sub_col + _SUB_WIDTH[a.sub]].tolist())
                d[a.key] = t
            out.append(d)
        return out

    # -- one Batch (the loader) ---------------------------------------------------
    def batch(self, follow_batch=(), exclude_keys=()):
        """``Batch.from_data_list`` of these graphs, built from the columns.

        The per-graph arithmetic (offsets, increments, batch vectors) runs on the
        meta rows with numpy; the value buffers were filled by this batch's reads,
        so increments are added in place.
        """
        lay = self.layout
        m = len(self.rows)
        meta = self.meta
        out = lay.new_batch()
        store = out._store
        mapping = store._mapping    # a fresh storage: no cached attributes to invalidate
        slice_dict, inc_dict = {}, {}
        arange = np.arange(m, dtype=np.int64)
        for a in lay.attrs:
            key = a.key
            if key in exclude_keys:
                continue
            if a.kind == _NUM_NODES:
                store._num_nodes = meta[:, _COL_NODES].tolist()
                store.num_nodes = sum(store._num_nodes)
                continue
            if key == "ptr":
                continue
            if a.kind == _TENSOR:
                buf = self.values[key]
                if a.var:
                    sizes = meta[:, lay.group_cols[a.group][1]]
                    shape = list(a.shape)
                    shape[a.cat] = buf.shape[1]
                    arr = buf.reshape(shape)
                elif a.cat is None:
                    sizes = None
                    arr = buf
                else:
                    sizes = None
                    shape = list(a.shape)
                    shape[a.cat] *= m
                    arr = np.moveaxis(buf, 0, a.cat).reshape(shape) if a.cat else buf.reshape(shape)
                value = _dtypes.as_tensor(np.ascontiguousarray(arr), a.dtype)
                size = a.size()
                slices = _np_cumsum(sizes) if sizes is not None else arange_slices(m, size)
                added = None          # each graph's increment, when the batch is incremented
                if a.inc is not None:
                    incs = _np_cumsum(meta[:-1, a.inc])
                    if int(incs[-1]) != 0:
                        added = incs
                        per = torch.from_numpy(np.repeat(incs, sizes if sizes is not None else size))
                        view = [1] * value.dim()
                        view[0 if a.cat is None else a.cat] = -1
                        # torch's promotion of value + a 0-d int64 increment, as PyG adds them
                        dtype = torch.result_type(value, _INT64_SCALAR)
                        if dtype == value.dtype:
                            value.add_(per.to(dtype).view(view))
                        else:
                            value = value.to(dtype) + per.to(dtype).view(view)
                    incs = torch.from_numpy(incs)
                else:
                    incs = torch.zeros(m, dtype=torch.int64)
                if a.sub is not None:
                    value = _sub_batch(a, value, meta[:, a.sub_col:a.sub_col + _SUB_WIDTH[a.sub]],
                                       added if added is not None else np.zeros(m, np.int64),
                                       np.diff(slices))
            else:
                col = self.values[key]
                if a.kind == _FLOAT:
                    value = torch.from_numpy(col).to(torch.get_default_dtype())
                else:
                    value = torch.from_numpy(col)
                slices = arange_slices(m, 1)
                if a.inc is not None:
                    incs = torch.from_numpy(_np_cumsum(meta[:-1, a.inc]))
                    if int(incs[-1]) != 0:
                        value.add_(incs)
                else:
                    incs = torch.zeros(m, dtype=torch.int64)
            mapping[key] = value
            slice_dict[key] = torch.from_numpy(slices)
            inc_dict[key] = incs
            if key in follow_batch:
                repeats = np.diff(slices)
                mapping[f"{key}_batch"] = torch.from_numpy(np.repeat(arange, repeats))
                mapping[f"{key}_ptr"] = torch.from_numpy(_np_cumsum(repeats))
        if lay.infer and not issubclass(lay.cls, Batch):
            # Batch.from_data_list adds batch/ptr for Data samples only: a batch of
            # Batch objects keeps each inner batch vector (incremented, as collated above).
            nodes = meta[:, _COL_NODES]
            store.batch = torch.from_numpy(np.repeat(arange, nodes))
            store.ptr = torch.from_numpy(_np_cumsum(nodes))
        out._num_graphs = m
        out._slice_dict = slice_dict
        out._inc_dict = inc_dict
        return out


def arange_slices(m, size):
    """Slices of m graphs of `size` rows each: 0, size, 2*size, ..."""
    return np.arange(m + 1, dtype=np.int64) * size


def _np_cumsum(x):
    """int64 cumulative sums with a leading 0 (torch_geometric.utils.cumsum's layout)."""
    out = np.zeros(len(x) + 1, np.int64)
    np.cumsum(x, out=out[1:])
    return out


class _Layout:
    """The stored description of a graph dataset (JSON in name/__graph__)."""

    def __init__(self, cls, attrs, n_groups, width, infer):
        self.cls, self.attrs, self.infer, self.width = cls, attrs, infer, width
        self.group_cols = [(_COL_GROUPS + 2 * g, _COL_GROUPS + 2 * g + 1) for g in range(n_groups)]
        self.by_key = {a.key: a for a in attrs}
        self._batch_cls = None

    def new_batch(self):
        """An empty Batch of this dataset's Data class, as Batch.from_data_list makes it.

        torch_geometric builds the Batch subclass (and inspects the Data class's
        __init__) on every call; it is the same class every time, so it is made
        once and then instantiated directly when its __init__ needs no argument.
        """
        if self._batch_cls is None:
            first = Batch(_base_cls=self.cls)   # self.cls itself when it is a Batch class
            import inspect

            params = list(inspect.signature(self.cls.__init__).parameters.values())[1:]
            plain = all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                        for p in params)
            self._batch_cls = type(first) if plain else False
            return first
        if self._batch_cls is False:
            return Batch(_base_cls=self.cls)
        return type.__call__(self._batch_cls)

    def new_data(self):
        """An empty graph of this dataset's Data class. A Batch class (samples that are
        Batch objects) is made without its metaclass, which would derive another class
        from it (DataBatch() makes a DataDataBatch)."""
        if issubclass(self.cls, Batch):
            return type.__call__(self.cls)
        return self.cls()

    def to_json(self):
        version = _VERSION if any(a.sub is not None for a in self.attrs) else 1
        return json.dumps({"version": version, "class": _class_path(self.cls),
                           "attrs": [a.to_obj() for a in self.attrs],
                           "groups": len(self.group_cols), "width": self.width, "infer": self.infer},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text, data_cls):
        d = json.loads(text)
        if d.get("version") not in _VERSIONS:
            raise ValueError(f"unknown graph dataset version {d.get('version')!r}; upgrade "
                             "pyddstore-torch to the core group's version")
        if data_cls is None:
            data_cls = Data
            if d["class"] != _class_path(Data):
                raise ValueError(f"the graphs were stored as {d['class']}; pass data_cls= (that class) "
                                 "so its __cat_dim__/__inc__ apply")
        return cls(data_cls, [_Attr.from_obj(o) for o in d["attrs"]], d["groups"], d["width"], d["infer"])


@dataclasses.dataclass(frozen=True)
class _GraphLoadPlan(LoadPlan):
    """The graph DistDataset's LoadPlan: also the attributes left out and the dtype conversions."""

    exclude: frozenset = frozenset()  # attribute names not stored (exclude_keys=)
    conversions: object = None        # {attribute: dtype name} from dtypes=, or None


class _GraphDataset(StoreDataset):
    """Reading side shared by DistDataset and DistDatasetReader."""

    _layout = None
    _collective = False
    _sizes = None

    @property
    def keys(self):
        """Stored attribute names, in the order of the first graph."""
        return [a.key for a in self._layout.attrs]

    @property
    def shapes(self):
        """{attribute: shape}, None at the concatenation axis of variable-size
        attributes, e.g. ``{"x": (None, 16), "edge_index": (2, None), "y": (1,)}``;
        ``()`` for numbers."""
        out = {}
        for a in self._layout.attrs:
            shape = list(a.shape)
            if a.var:
                shape[a.cat] = None
            out[a.key] = tuple(shape)
        return out

    @property
    def dtypes(self):
        """{attribute: torch dtype} of tensor attributes, Python type names for numbers."""
        return {a.key: (_dtypes.torch_dtype(a.dtype) if a.kind == _TENSOR else
                        {"int": int, "float": float, "bool": bool, "num_nodes": int}[a.kind])
                for a in self._layout.attrs}

    @property
    def cat_dims(self):
        """{attribute: concatenation axis (``Data.__cat_dim__``), None for stacked ones}."""
        return {a.key: a.cat for a in self._layout.attrs if a.kind == _TENSOR}

    # -- reads ------------------------------------------------------------------
    def _read(self, rows, collective):
        """_Columns of `rows`; batched (collective with method 0) or per graph."""
        lay, name, store = self._layout, self._name, self._store
        m = len(rows)
        meta = np.empty((m, lay.width), np.int64)
        mvar = f"{name}/{META_SUFFIX}"
        if collective:
            store.get_batch(mvar, meta, rows)
        else:
            for j, r in enumerate(rows.tolist()):
                store.get(mvar, meta[j:j + 1], r)
        values = {}
        for a in lay.attrs:
            if a.kind == _NUM_NODES:
                continue
            dt = _dtypes.storage(a.dtype)
            if a.var:
                c0, c1 = lay.group_cols[a.group]
                starts, lens = meta[:, c0], meta[:, c1]
                buf = np.empty((a.parts, int(lens.sum()), a.inner), dt)
                for p, var in enumerate(a.variables(name)):
                    if collective:
                        store.get_ranges(var, buf[p], starts, lens)
                    else:
                        pos = 0
                        for s, n in zip(starts.tolist(), lens.tolist()):
                            if n:
                                store.get(var, buf[p, pos:pos + n], s)
                            pos += n
            else:
                buf = np.empty((m,) + a.fixed_shape(), dt)
                var = a.variables(name)[0]
                if collective:
                    store.get_batch(var, buf, rows)
                else:
                    for j, r in enumerate(rows.tolist()):
                        store.get(var, buf[j:j + 1], r)
            values[a.key] = buf
        return _Columns(lay, rows, meta, values)

    def _read_batch(self, indices):
        """The graphs `indices` as _Columns (batched reads: collective with method 0)."""
        self._check_open()
        rows, bad = self._rows(indices)
        if bad is not None:
            if self._collective:
                # The other ranks are in this read too: take part with no rows, then fail here.
                self._read(np.empty(0, np.int64), True)
            raise IndexError(f"graph index {bad} out of range for dataset {self._name!r} of "
                             f"{self._len} graphs")
        return self._read(rows, True)

    def __getitem__(self, index):
        """Graph `index` as a Data equal to the source's (not collective)."""
        self._check_open()
        i = self._index(index)
        return self._read(np.array([i], np.int64), False).data_list()[0]

    def __getitems__(self, indices):
        """A list of Data (batched reads: collective with method 0). The loader of
        this module skips it and builds the Batch from the columns."""
        return self._read_batch(indices).data_list()

    def graph_sizes(self):
        """(num_nodes, num_edges) of every graph: an int64 tensor (len(ds), 2), read from
        the stored meta once (in slices, not collective) and kept."""
        self._check_open()
        if self._sizes is None:
            n, var = self._len, f"{self._name}/{META_SUFFIX}"
            sizes = np.empty((n, 2), np.int64)
            step = max(1, (1 << 20) // (8 * self._layout.width))
            buf = np.empty((min(step, n), self._layout.width), np.int64)
            for a in range(0, n, step):
                b = min(a + step, n)
                self._store.get(var, buf[:b - a], a)
                sizes[a:b] = buf[:b - a, :2]
            self._sizes = torch.from_numpy(sizes)
        return self._sizes

    def _pyddstore_ordered_reads(self):
        """ThreadDataLoader hook (_loader_protocol): self when reads are collective (method 0)."""
        return self if self._collective else None

    def _pyddstore_graph_columns(self, indices):
        """Collater's hook (_loader_protocol): the batch's store columns (_read_batch)."""
        return self._read_batch(indices)

    # -- lifetime ---------------------------------------------------------------

    def __repr__(self):
        state = "freed" if self._store is None else f"{self._len} graphs"
        attrs = ", ".join(f"{a.key}: {a.describe()}" for a in self._layout.attrs) if self._layout else ""
        return f"{type(self).__name__}({self._name!r}, {state}; {attrs})"


class DistDataset(_GraphDataset):
    """A dataset of torch_geometric ``Data`` graphs held in DDStore across the ranks of comm.

    Each rank loads only its contiguous share of `source`; every rank then reads
    any graph. ``ds[i]`` is a Data (of the source's class) equal to ``source[i]``
    (after ``encode``, ``exclude_keys`` and ``dtypes``).

    Parameters:
      source: a map-style dataset of Data (a list, an InMemoryDataset, ...).
      name: dataset name (store variables ``name/...``).
      comm: MPI communicator (default MPI.COMM_WORLD); all its ranks construct it together.
      ddstore_width: ranks per independent store (default all); each group
        holds a full copy.
      method, handshake_dir: the store's backend, as for
        :class:`pyddstore.torch.DistDataset` (method=2 publishes the dataset
        for :class:`DistDatasetReader`).
      chunk_size: load the share this many graphs at a time into the store.
        The sizes must be known first, so the source is read twice: once for
        the sizes, once chunk by chunk for the values; only one chunk of values
        is held in memory besides the store.
      encode: ``encode(sample) -> Data`` applied to every source sample (e.g. a
        dict row of a ParquetSource to a Data).
      exclude_keys: attributes not to store.
      dtypes: ``{attribute: dtype}`` conversions before storing, e.g.
        ``{"pos": torch.float32}`` or ``torch.bfloat16``.
      progress: the rank-0 loading bar, as for pyddstore.torch.DistDataset.

    Every graph must have the same attributes, of the same dtypes and shapes
    except the size along ``__cat_dim__``; tensor attributes of any dtype of
    :data:`pyddstore.torch.SUPPORTED_DTYPES`, and int/float/bool attributes,
    are stored. torch_geometric's ``Index`` and ``EdgeIndex`` keep their class
    and each graph's metadata (``dim_size``/``is_sorted``; ``sparse_size``,
    ``sort_order``, ``is_undirected``), in ``ds[i]`` and in batches as
    ``Batch.from_data_list`` merges them; other tensor subclasses are refused.
    Errors are raised on every rank, naming the graph and attribute.
    With method 0, batched reads (the loader, ``__getitems__``) are collective
    as for pyddstore.torch.DistDataset; ``ds[i]`` is not.
    """

    def __init__(self, source, name, comm=None, *, ddstore_width=None, method=None, handshake_dir=None,
                 chunk_size=None, encode=None, exclude_keys=None, dtypes=None, progress=None):
        from pyddstore import PyDDStore

        self._store = None
        self._name = name
        comm = as_comm(comm)
        what = f"geometric.DistDataset {name!r}"

        def check_arguments():
            # Besides name and source (agreed_length checks those), in this order.
            if encode is not None and not callable(encode):
                raise TypeError("encode must be callable: encode(sample) -> Data")
            check_chunk_size(chunk_size)
            if isinstance(exclude_keys, str):
                raise TypeError("exclude_keys must be a list of attribute names, not a str")
            exclude = frozenset(exclude_keys or ())
            conversions = _dtypes.check_conversions(dtypes, what)
            _progress.check_argument(progress)
            return exclude, conversions

        n_total, (exclude, conversions) = agreed_length(comm, what, name, source, check_arguments)
        self._len = n_total
        store = PyDDStore(comm, method=method, ddstore_width=ddstore_width, handshake_dir=handshake_dir)
        try:
            t0 = time.perf_counter()
            plan = _GraphLoadPlan(source, encode=encode, chunk_size=chunk_size, what=what,
                                  progress=progress, exclude=exclude, conversions=conversions)
            self._load(store, comm, plan)
            self._collective = loader_protocol.reads_in_order(store)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s: loaded %d graphs in %.3f s", what, n_total, time.perf_counter() - t0)
        except BaseException:
            store.free()
            raise
        self._store = store
        # ThreadDataLoader's handshake: the iterator whose collective reads are in flight.
        loader_protocol.init_ordered_owner(self)

    @staticmethod
    def _scan(plan, a, b, graphs, bar):
        """Decompose graphs a..b-1 of the source (encoded) into `graphs`."""
        for i in range(a, b):
            d = plan.source[i]
            if plan.encode is not None:
                d = plan.encode(d)
            graphs.add(d, i, plan.exclude, plan.conversions)
            if bar is not None:
                bar.update(1)

    def _load(self, store, comm, plan):
        chunk_size, what = plan.chunk_size, plan.what
        n = self._len
        g, gsize = store.group_rank, store.group_size
        start, stop = n * g // gsize, n * (g + 1) // gsize
        last = g == gsize - 1

        # 1. Decompose this rank's graphs (keeping the values unless chunked).
        graphs = _Graphs(keep_values=chunk_size is None)
        err, mine, bar = None, None, None
        try:
            bar = _progress.bar(stop - start, progress=plan.progress, rank=comm.Get_rank(),
                                desc=f"{what} loading")
            self._scan(plan, start, stop, graphs, bar if chunk_size is None else None)
            if graphs.attrs is not None:
                mine = json.dumps({"class": _class_path(graphs.cls), "class_ref": _class_ref(graphs.cls),
                                   "infer": graphs.infer,
                                   "attrs": [list(a.signature()) for a in graphs.attrs]})
        except Exception as e:  # noqa: BLE001
            err = e
        raise_agreed(comm, err, what)
        gathered = comm.allgather(mine)
        ref = next(x for x in gathered if x is not None)
        for rank, x in enumerate(gathered):
            if x is not None and x != ref:
                a, b = json.loads(ref), json.loads(x)
                raise ValueError(f"{what}: graphs on rank {rank} ({b}) differ from those of another "
                                 f"rank ({a}); every graph needs the same attributes, dtypes and shapes "
                                 "except the size along __cat_dim__")
        refd = json.loads(ref)
        cls = graphs.cls
        if any(x is None for x in gathered):
            # A rank holding no graph (fewer graphs than ranks) takes the class from the others.
            err = None
            if cls is None:
                try:
                    cls = _import_class(refd["class_ref"])
                except Exception as e:  # noqa: BLE001
                    err = e
            raise_agreed(comm, err, what)
        order = [s[0] for s in refd["attrs"]]
        if graphs.attrs is not None:
            perm = [[a.key for a in graphs.attrs].index(k) for k in order]
            attrs = [graphs.attrs[p] for p in perm]
        else:
            attrs = None
        k = len(order)
        sizes = np.array(graphs.sizes, np.int64).reshape(-1, k)[:, perm] if attrs else np.zeros((0, k), np.int64)
        incs = np.array(graphs.incs, np.int64).reshape(-1, k)[:, perm] if attrs else np.zeros((0, k), np.int64)
        if attrs is not None:
            graphs.values = [graphs.values[p] for p in perm] if graphs.keep else None

        # 2. Agree on what varies: sizes along the axis, non-zero increments, size groups.
        big = np.iinfo(np.int64).max
        lo = _allreduce(comm, sizes.min(axis=0) if len(sizes) else np.full(k, big), "min")
        hi = _allreduce(comm, sizes.max(axis=0) if len(sizes) else np.full(k, -1), "max")
        has_inc = _allreduce(comm, (incs != 0).any(axis=0) if len(incs) else np.zeros(k), "max") > 0
        eq = np.array([[np.array_equal(sizes[:, x], sizes[:, y]) for y in range(k)]
                       for x in range(k)], dtype=np.int64).reshape(k, k)
        eq = _allreduce(comm, eq, "min") > 0
        refs = [_Attr(s[0], s[1], s[2], [1 if d is None else d for d in s[3]], s[4], sub=s[5])
                for s in refd["attrs"]]
        if attrs is None:
            attrs = refs
        layout_attrs, groups, reps = [], [], []
        inc_cols = []
        for x, a in enumerate(attrs):
            # Sizes that vary, and attributes empty along the axis in every graph
            # (edge lists of graphs without edges), are stored flat.
            var = bool(a.kind == _TENSOR and a.cat is not None and (lo[x] != hi[x] or hi[x] == 0))
            shape = list(refs[x].shape)
            if a.kind == _TENSOR and a.cat is not None and not var:
                shape[a.cat] = int(lo[x])
            grp = None
            if var:
                grp = next((gi for gi, r in enumerate(reps) if eq[x, r]), None)
                if grp is None:
                    grp = len(reps)
                    reps.append(x)
            inc_cols.append(x if has_inc[x] else None)
            layout_attrs.append((a, var, grp, shape))
        width = _COL_GROUPS + 2 * len(reps)
        final = []
        for x, (a, var, grp, shape) in enumerate(layout_attrs):
            inc = None
            if inc_cols[x] is not None:
                inc = width
                width += 1
            fa = _Attr(a.key, a.kind, a.dtype, shape, a.cat, var, grp, inc, a.sub)
            if fa.sub is not None:
                fa.sub_col = width
                width += _SUB_WIDTH[fa.sub]
            elems = fa.parts * fa.inner if var else int(np.prod(fa.fixed_shape(), dtype=np.int64))
            if fa.kind == _TENSOR and elems == 0:
                raise ValueError(f"{what}: attribute {a.key!r} has no elements besides its concatenation "
                                 f"axis ({fa.describe()}); leave it out with exclude_keys=")
            final.append(fa)
        if graphs.keep and graphs.values is None:
            graphs.values = [[] for _ in final]     # no graph on this rank
        layout = _Layout(cls, final, len(reps), width, bool(refd["infer"]))
        self._layout = layout

        # 3. Per-graph meta of the share; the groups' first rows come from the store.
        nloc = stop - start
        meta = np.zeros((nloc, width), np.int64)
        if nloc:
            meta[:, _COL_NODES] = graphs.nodes
            meta[:, _COL_EDGES] = graphs.edges
        for gi, x in enumerate(reps):
            meta[:, _COL_GROUPS + 2 * gi + 1] = sizes[:, x]
        for x, fa in enumerate(final):
            if fa.inc is not None:
                meta[:, fa.inc] = incs[:, x]
            if fa.sub is not None and nloc:
                meta[:, fa.sub_col:fa.sub_col + _SUB_WIDTH[fa.sub]] = [row[perm[x]] for row in graphs.subs]

        # 4. Values: all at once, or chunk by chunk after sizing the variables.
        name = self._name
        if chunk_size is None:
            for x, fa in enumerate(final):
                if fa.kind == _NUM_NODES:
                    continue
                packed = _pack_values(fa, graphs.values[x], last)
                graphs.values[x] = None
                bf = "bfloat16" if fa.dtype == _dtypes.BFLOAT16 else None
                if fa.var:
                    for p, var in enumerate(fa.variables(name)):
                        store.add(var, packed[p], dtype=bf)
                else:
                    store.add(fa.variables(name)[0], packed, dtype=bf)
                del packed
        else:
            rows_of = {}
            for x, fa in enumerate(final):
                if fa.kind == _NUM_NODES:
                    continue
                isz = _dtypes.storage(fa.dtype).itemsize
                if fa.var:
                    rows = int(sizes[:, x].sum()) + (1 if last else 0)
                    for var in fa.variables(name):
                        store.init(var, rows, fa.inner * isz, 1)
                else:
                    rows = nloc
                    store.init(fa.variables(name)[0], rows,
                               int(np.prod(fa.fixed_shape(), dtype=np.int64)) * isz, 1)
                rows_of[fa.key] = rows
            err = None
            done = {fa.key: 0 for fa in final}
            try:
                for a in range(start, stop, chunk_size):
                    b = min(a + chunk_size, stop)
                    part = _Graphs(keep_values=True)
                    self._scan(plan, a, b, part, bar)
                    pperm = [[t.key for t in part.attrs].index(fa.key) for fa in final]
                    for x, fa in enumerate(final):
                        if fa.kind == _NUM_NODES:
                            continue
                        packed = _pack_values(fa, part.values[pperm[x]], False)
                        if fa.var:
                            for p, var in enumerate(fa.variables(name)):
                                if packed.shape[1]:
                                    store.update(var, packed[p], done[fa.key])
                            done[fa.key] += packed.shape[1]
                        else:
                            store.update(fa.variables(name)[0], packed, done[fa.key])
                            done[fa.key] += packed.shape[0]
                    # The source must give the same graphs on the second read.
                    chk = np.array(part.sizes, np.int64).reshape(-1, k)[:, pperm]
                    if not np.array_equal(chk, sizes[a - start:b - start]):
                        raise ValueError(f"graphs {a}..{b - 1} changed size between the two reads of "
                                         "chunk_size= loading; the source must be deterministic")
            except Exception as e:  # noqa: BLE001
                err = e
            raise_agreed(comm, err, what)
            store.sync()
        if bar is not None:
            bar.close()
        for gi, x in enumerate(reps):
            first = int(store.query(final[x].variables(name)[0]).first_row)
            lens = sizes[:, x]
            if nloc:
                meta[:, _COL_GROUPS + 2 * gi] = first + np.concatenate(([0], np.cumsum(lens)[:-1]))
        store.add(f"{name}/{META_SUFFIX}", meta)
        js = layout.to_json().encode() if g == 0 else b""
        store.add(f"{name}/{GRAPH_SUFFIX}", np.frombuffer(js, dtype=np.uint8).copy())


def _allreduce(comm, arr, op):
    """Element-wise min or max of an int64 array over comm (buffer-based)."""
    from mpi4py import MPI

    a = np.ascontiguousarray(arr, dtype=np.int64)
    out = np.empty_like(a)
    comm.Allreduce(a, out, op=MPI.MIN if op == "min" else MPI.MAX)
    return out


class DistDatasetReader(_GraphDataset):
    """A geometric DistDataset published by a method=2 core group, read from another job.

    Parameters: name (the core group's dataset name), handshake_dir, n_core
    (as for :class:`pyddstore.torch.DistDatasetReader`), data_cls: the Data
    subclass the graphs were stored as (default Data; needed when it was a
    subclass, so that its ``__cat_dim__``/``__inc__`` apply). Reads are never
    collective.
    """

    def __init__(self, name, handshake_dir=None, n_core=None, *, data_cls=None):
        from pyddstore import join

        self._store = None
        self._name = name
        loader_protocol.init_ordered_owner(self)
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be the core group's dataset name, got {name!r}")
        if data_cls is not None and not (isinstance(data_cls, type) and issubclass(data_cls, Data)):
            raise TypeError(f"data_cls must be a torch_geometric Data subclass, got {data_cls!r}")
        var = f"{name}/{GRAPH_SUFFIX}"
        store = join(var, handshake_dir=handshake_dir, n_core=n_core)
        try:
            info = store.query(var)
            buf = np.empty(info.global_rows, np.uint8)
            store.get(var, buf, 0)
            self._layout = _Layout.from_json(buf.tobytes().decode(), data_cls)
            names = [f"{name}/{META_SUFFIX}"]
            for a in self._layout.attrs:
                if a.kind != _NUM_NODES:
                    names += a.variables(name)
            store.join(names)
            self._len = int(store.query(names[0]).global_rows)
        except BaseException:
            store.free()
            raise
        self._store = store


# ------------------------------------------------------------------ loading

def _target(dataset, indices):
    """(graph dataset, rows) under `dataset` (through Subsets), or (None, None)."""
    for _ in range(16):
        if isinstance(dataset, _GraphDataset):
            return dataset, indices
        if isinstance(dataset, torch.utils.data.Subset):
            indices = [dataset.indices[i] for i in indices]
            dataset = dataset.dataset
            continue
        break
    return None, None


class Collater:
    """collate_fn of :class:`DataLoader`: Batch from store columns, or from a list of Data.

    ThreadDataLoader asks it to read a batch of a geometric DistDataset itself
    (``_pyddstore_read``); other datasets' samples go to torch_geometric's own
    collate (``Batch.from_data_list`` for Data).
    """

    def __init__(self, dataset, follow_batch=None, exclude_keys=None):
        from torch_geometric.loader.dataloader import Collater as PygCollater

        self.follow_batch = tuple(follow_batch or ())
        self.exclude_keys = tuple(exclude_keys or ())
        self._pyg = PygCollater(dataset, follow_batch, exclude_keys)

    def _pyddstore_read(self, dataset, indices):
        """ThreadDataLoader hook (_loader_protocol): the batch's store columns when
        `dataset` is (a Subset of) a geometric DistDataset, else None."""
        target, rows = _target(dataset, indices)
        if target is None:
            return None
        return loader_protocol.read_graph_columns(target, rows)

    def __call__(self, batch):
        """The Batch of `batch` (store columns, or a list of samples)."""
        if isinstance(batch, _Columns):
            return batch.batch(self.follow_batch, self.exclude_keys)
        return self._pyg(batch)


class DataLoader(ThreadDataLoader):
    """torch_geometric.loader.DataLoader's interface over a ThreadDataLoader.

    ``DataLoader(dataset, batch_size=1, shuffle=False, follow_batch=None,
    exclude_keys=None, **kwargs)``; kwargs are ThreadDataLoader's (sampler,
    batch_sampler, num_workers, drop_last, prefetch_factor, ...). Yields
    ``Batch`` objects. ``num_workers=N`` reads in N threads; with
    ``num_workers=0`` (the default) batches are read and collated in the
    calling thread, as torch_geometric's and torch's loaders do, so datasets
    whose handles belong to one thread (torch_geometric's SQLite-backed
    ``OnDiskDataset``) work; ThreadDataLoader itself reads in one worker
    thread then. Over a geometric DistDataset or DistDatasetReader (or
    a Subset of one) each batch is read with one store call per stored
    variable and built from the columns, equal to ``Batch.from_data_list``
    of the same graphs (with ``follow_batch``/``exclude_keys``); any other
    dataset of Data is collated by torch_geometric. With method 0 the
    collective rules of ThreadDataLoader apply (same number of batches on
    every rank: DistributedSampler, ElasticSampler or BudgetBatchSampler).
    """

    _reads_in_caller_without_workers = True  # num_workers=0: the calling thread reads

    def __init__(self, dataset, batch_size=1, shuffle=False, follow_batch=None, exclude_keys=None,
                 **kwargs):
        kwargs.pop("collate_fn", None)  # as torch_geometric's DataLoader
        if kwargs.get("reuse_buffers"):
            raise ValueError("reuse_buffers=True is not available for graph batches (their sizes vary); "
                             "drop it")
        self.follow_batch = follow_batch
        self.exclude_keys = exclude_keys
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle,
                         collate_fn=Collater(dataset, follow_batch, exclude_keys), **kwargs)


# ------------------------------------------------------------------ cost-aware batches

_SAMPLER_VERSION = 1


class BudgetBatchSampler(torch.utils.data.Sampler):
    """Batches of about equal total nodes or edges, the same number on every rank.

    ``BudgetBatchSampler(dataset, max_num_nodes=None, max_num_edges=None, *,
    shuffle=True, seed=0, num_replicas=None, rank=None)``; pass it as
    ``batch_sampler=`` to :class:`DataLoader`.

    Every epoch has one global plan, a function of (seed, epoch) and the
    stored sizes only (``dataset.graph_sizes()``, read once from the store's
    per-graph meta): the graphs in a shuffled order (ElasticSampler's) are
    cut into consecutive batches, each as many graphs as fit the budget (a
    graph over the budget on its own is a batch by itself). Replicas take the
    batches round-robin; the last round is completed with batches from the
    start of the plan, so every replica has ``len(sampler)`` batches (DDP and
    method-0 reads need equal step counts).

    Position: ``set_epoch(epoch, index=0)`` where ``index`` counts batches of
    the plan consumed by all replicas together; ``index_after(local_steps)``
    gives it after each replica took ``local_steps`` batches; ``state_dict()``
    / ``load_state_dict()`` save and restore (epoch, index, seed), also on
    another number of replicas (the remaining batches are split among the
    current ones)::

        state = sampler.state_dict()
        state["index"] = sampler.index_after(steps_done_this_epoch)
        torch.save({"sampler": state, ...}, "ckpt.pt")

    dataset: a geometric DistDataset/DistDatasetReader or a Subset of one.
    """

    def __init__(self, dataset, max_num_nodes=None, max_num_edges=None, *, shuffle=True, seed=0,
                 num_replicas=None, rank=None):
        from .sampler import as_int, default_replicas

        if max_num_nodes is None and max_num_edges is None:
            raise ValueError("BudgetBatchSampler needs max_num_nodes= and/or max_num_edges=")
        for what, v in (("max_num_nodes", max_num_nodes), ("max_num_edges", max_num_edges)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{what} must be a positive int, got {v!r}")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        target, rows = _target(dataset, list(range(len(dataset))))
        if target is None:
            raise TypeError("BudgetBatchSampler reads the graph sizes from the store: pass a "
                            f"pyddstore.torch.geometric dataset (or a Subset of one), not "
                            f"{type(dataset).__name__}")
        sizes = target.graph_sizes()[torch.as_tensor(rows, dtype=torch.int64)]
        if num_replicas is None or rank is None:
            dn, dr = default_replicas(target)
            num_replicas = dn if num_replicas is None else num_replicas
            rank = dr if rank is None else rank
        num_replicas, rank = as_int(num_replicas, "num_replicas"), as_int(rank, "rank")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, "
                             f"got {rank}")
        self.dataset = dataset
        self.max_num_nodes, self.max_num_edges = max_num_nodes, max_num_edges
        self.shuffle, self.seed = shuffle, as_int(seed, "seed")
        self.num_replicas, self.rank = num_replicas, rank
        self._nodes = sizes[:, 0].tolist()
        self._edges = sizes[:, 1].tolist()
        self._len = len(self._nodes)
        self.epoch, self.index = 0, 0
        self._plan_key, self._plan = None, None

    def _order(self):
        from .sampler import elastic_seed

        if not self.shuffle:
            return list(range(self._len))
        g = torch.Generator()
        g.manual_seed(elastic_seed(self.seed, self.epoch))
        return torch.randperm(self._len, generator=g).tolist()

    def plan(self):
        """The epoch's global batches: a list of lists of dataset indices (cached per epoch)."""
        if self._plan_key != (self.seed, self.epoch):
            mn = self.max_num_nodes if self.max_num_nodes is not None else float("inf")
            me = self.max_num_edges if self.max_num_edges is not None else float("inf")
            nodes, edges = self._nodes, self._edges
            batches, cur, cn, ce = [], [], 0, 0
            for i in self._order():
                n, e = nodes[i], edges[i]
                if cur and (cn + n > mn or ce + e > me):
                    batches.append(cur)
                    cur, cn, ce = [], 0, 0
                cur.append(i)
                cn += n
                ce += e
            if cur:
                batches.append(cur)
            self._plan, self._plan_key = batches, (self.seed, self.epoch)
        return self._plan

    def _steps(self):
        remaining = len(self.plan()) - min(self.index, len(self.plan()))
        return -(-remaining // self.num_replicas) if remaining > 0 else 0

    def __len__(self):
        """Batches this replica yields from the set position (equal on every replica)."""
        return self._steps()

    def __iter__(self):
        plan = self.plan()
        nb = len(plan)
        for k in range(self._steps()):
            yield list(plan[(self.index + self.rank + k * self.num_replicas) % nb])

    def set_epoch(self, epoch, index=0):
        """Select the epoch's plan and the number of its batches already consumed by all replicas."""
        from .sampler import as_int

        epoch, index = as_int(epoch, "epoch"), as_int(index, "index")
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        self.epoch, self.index = epoch, index

    def index_after(self, local_steps):
        """Global position after every replica took `local_steps` more batches of this iteration."""
        from .sampler import as_int

        local_steps = as_int(local_steps, "local_steps")
        if not 0 <= local_steps <= self._steps():
            raise ValueError(f"local_steps must be in [0, {self._steps()}] (len of this sampler), "
                             f"got {local_steps}")
        return self.index + local_steps * self.num_replicas

    def _fingerprint(self):
        import hashlib

        plan = self.plan()
        head = [len(b) for b in plan[:64]] + [i for b in plan[:4] for i in b]
        return hashlib.blake2b(repr((len(plan), head)).encode(), digest_size=8).hexdigest()

    def state_dict(self):
        """epoch, index (batches of the plan consumed by all replicas), seed, and for
        checking on load: budgets, shuffle, dataset length, plan fingerprint."""
        return {"version": _SAMPLER_VERSION, "epoch": self.epoch, "index": self.index,
                "seed": self.seed, "shuffle": self.shuffle, "max_num_nodes": self.max_num_nodes,
                "max_num_edges": self.max_num_edges, "dataset_len": self._len,
                "num_replicas": self.num_replicas, "plan_fingerprint": self._fingerprint()}

    def load_state_dict(self, state):
        """Restore a state_dict(); the replicas stay this sampler's own. ValueError when the
        state was saved with other budgets, shuffle or dataset, or gives another plan."""
        if not isinstance(state, dict) or any(k not in state for k in ("epoch", "index", "seed")):
            raise ValueError("state must be a dict from BudgetBatchSampler.state_dict()")
        for key, mine in (("shuffle", self.shuffle), ("max_num_nodes", self.max_num_nodes),
                          ("max_num_edges", self.max_num_edges), ("dataset_len", self._len)):
            if key in state and state[key] != mine:
                raise ValueError(f"state was saved with {key}={state[key]!r} but this sampler has "
                                 f"{key}={mine!r}: build the sampler with the saved settings")
        old = (self.seed, self.epoch, self.index)
        self.seed = int(state["seed"])
        try:
            self.set_epoch(state["epoch"], state["index"])
            if "plan_fingerprint" in state and state["plan_fingerprint"] != self._fingerprint():
                raise ValueError("the saved epoch's batch plan differs from the one this process "
                                 "computes (other sizes or torch version?): resuming would lose and "
                                 "repeat graphs")
        except Exception:
            self.seed, self.epoch, self.index = old
            raise

    def __repr__(self):
        return (f"BudgetBatchSampler(len={self._len}, max_num_nodes={self.max_num_nodes}, "
                f"max_num_edges={self.max_num_edges}, num_replicas={self.num_replicas}, rank={self.rank}, "
                f"epoch={self.epoch}, index={self.index})")
