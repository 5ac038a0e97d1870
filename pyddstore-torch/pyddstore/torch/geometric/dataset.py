"""The graph datasets: DistDataset (stores and reads) and DistDatasetReader (reads another job's)."""

import dataclasses
import json
import logging
import time

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from .. import _dtypes, _progress
from .._logging import logger
from .._storedataset import LoadPlan, StoreDataset, agreed_length, as_comm, check_chunk_size, raise_agreed
from .layout import (GRAPH_SUFFIX, META_SUFFIX, _COL_EDGES, _COL_GROUPS, _COL_NODES, _FLOAT, _INT64_SCALAR,
                     _NUM_NODES, _SUB_WIDTH, _TENSOR, _Attr, _Graphs, _Layout, _class_path, _class_ref,
                     _import_class, _np_cumsum, _pack_values, _sub_batch, _sub_tensor, arange_slices)


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


class Collater:
    """collate_fn of :class:`~pyddstore.torch.geometric.DataLoader`: Batch from store
    columns, or from a list of Data.

    A graph dataset of this module (or a Subset of one) hands ThreadDataLoader
    its batches as store columns for it (their read_batch()); other datasets'
    samples go to torch_geometric's own collate (``Batch.from_data_list`` for Data).
    """

    def __init__(self, dataset, follow_batch=None, exclude_keys=None):
        from torch_geometric.loader.dataloader import Collater as PygCollater

        self.follow_batch = tuple(follow_batch or ())
        self.exclude_keys = tuple(exclude_keys or ())
        self._pyg = PygCollater(dataset, follow_batch, exclude_keys)

    def __call__(self, batch):
        """The Batch of `batch` (store columns, or a list of samples)."""
        if isinstance(batch, _Columns):
            return batch.batch(self.follow_batch, self.exclude_keys)
        return self._pyg(batch)


@dataclasses.dataclass(frozen=True)
class _GraphLoadPlan(LoadPlan):
    """The graph DistDataset's LoadPlan: also the attributes left out and the dtype conversions."""

    exclude: frozenset = frozenset()  # attribute names not stored (exclude_keys=)
    conversions: object = None        # {attribute: dtype name} from dtypes=, or None


class _GraphDataset(StoreDataset):
    """What the graph DistDataset and DistDatasetReader add to StoreDataset:
    graphs as stored columns (meta rows and one array per attribute)."""

    _layout = None
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
        # A bad index is the store's error (pyddstore.DDStoreRangeError, an IndexError), on
        # every rank of the group where the read is group-collective.
        return self._read(self._rows(indices), True)

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

    def read_batch(self, indices, collate_fn, out=None):
        """The loader contract (_loader_protocol.LoaderDataset): for this module's
        Collater, the batch as store columns it builds the Batch from (batched
        reads: collective where the store's reads are); None for any other collate_fn."""
        if not isinstance(collate_fn, Collater):
            return None
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
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s: loaded %d graphs in %.3f s", what, n_total, time.perf_counter() - t0)
        except BaseException:
            store.free()
            raise
        self._store = store

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
