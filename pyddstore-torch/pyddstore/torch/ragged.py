"""Variable-size fields: stored once, flat, with per-sample ranges; read back in batches.

Graph and molecule datasets have samples whose arrays vary in size along one
axis: node features ``(n_i, F)``, edge lists ``(2, E_i)``, token sequences
``(L_i,)``. A fixed-shape store forces users to pad them or to pack them into
byte buffers with their own offset tables. :class:`RaggedFields` does the
packing: for a field ``k`` of dataset ``name`` it stores

* ``name/k@values``: the samples' arrays with the variable axis moved first,
  concatenated (rows of the remaining, fixed, shape), each rank's share in
  rank order as the store lays out shards;
* ``name/k@ranges``: one ``int64`` row ``[first_row, length]`` per sample,
  pointing into ``name/k@values``;
* ``name/__ragged__``: the fields' axis, dtype, fixed shape and kind (JSON), so
  a reader in another job rebuilds the same values.

A batch of ``m`` samples is read with two store calls per field, whatever
``m``: one ``get_batch`` of the ranges rows, one ``get_ranges`` of the values
(the library groups the ranges by owner and coalesces contiguous runs). With
method 0 both are collective, like every batched DistDataset read.

DistDataset uses this when built with ``ragged={key: axis, ...}``; batches of
such samples need :class:`RaggedCollate` (default_collate cannot stack
different sizes). Example, a graph dataset::

    class Graphs(torch.utils.data.Dataset):
        def __len__(self): return 10000
        def __getitem__(self, i):
            n, e = sizes[i]
            return {"x": torch.randn(n, 16), "edge_index": torch.randint(0, n, (2, e)),
                    "y": torch.tensor(float(i))}

    ds = DistDataset(Graphs(), "graphs", ragged={"x": 0, "edge_index": 1})
    ds[5]["x"].shape                  # (n_5, 16); ds[5]["y"] as stored
    loader = ThreadDataLoader(ds, batch_size=32, sampler=ElasticSampler(ds),
                              collate_fn=RaggedCollate(ds.ragged_axes))
    for batch in loader:
        batch["x"]                    # list of 32 tensors (n_i, 16)
        batch["y"]                    # tensor (32,)

``RaggedCollate(ds.ragged_axes, concat=True)`` gives instead, per ragged field, the
values concatenated along the variable axis and their lengths:
``batch["edge_index"] == (tensor (2, sum E_i), tensor (32,))``.

Samples must be dicts (the usual form of graph samples); ragged fields may be
torch tensors or numpy arrays with a dtype the store supports. The whole local
share of a ragged field is held in memory while loading (chunk_size applies
to the fixed fields only).
"""

import json

import numpy as np
import torch
from torch.utils.data import default_collate

from . import _dtypes
from ._storedataset import raise_agreed as _raise_agreed

__all__ = ["RaggedFields", "RaggedCollate", "RAGGED_SUFFIX"]

RAGGED_SUFFIX = "__ragged__"
_TENSOR, _NDARRAY = "tensor", "ndarray"


def _as_array(value, key, index):
    """(kind, dtype name or None when unsupported, host numpy array) of a ragged value."""
    if isinstance(value, torch.Tensor):
        return _TENSOR, _dtypes.of_torch(value.dtype), _dtypes.tensor_to_numpy(value)
    if isinstance(value, np.ndarray):
        return _NDARRAY, _dtypes.of_numpy(value.dtype), value
    raise TypeError(f"sample {index}, ragged field {key!r}: expected a torch tensor or numpy "
                    f"array, got {type(value).__name__}")


class _Spec:
    """Axis, dtype, fixed shape (variable axis removed) and kind of one ragged field."""

    __slots__ = ("key", "axis", "kind", "name", "dtype", "inner")

    def __init__(self, key, axis, kind, dtype, inner):
        # dtype: a dtype name (bfloat16 included); self.dtype is the numpy
        # dtype the values are held in (int16 bit patterns for bfloat16).
        self.key, self.axis, self.kind = key, int(axis), kind
        self.name = dtype if dtype == _dtypes.BFLOAT16 else np.dtype(dtype).name
        self.dtype, self.inner = _dtypes.storage(self.name), tuple(int(d) for d in inner)

    def to_obj(self):
        return {"key": self.key, "axis": self.axis, "kind": self.kind,
                "dtype": self.name, "inner": list(self.inner)}

    @classmethod
    def from_obj(cls, o):
        return cls(o["key"], o["axis"], o["kind"], o["dtype"], o["inner"])

    def describe(self):
        shape = list(self.inner)
        shape.insert(self.axis, "*")
        return f"{self.kind} dtype={self.name} shape=({', '.join(map(str, shape))})"

    def __eq__(self, other):
        return isinstance(other, _Spec) and self.to_obj() == other.to_obj()


class RaggedFields:
    """The variable-size fields of a dataset: loading, storage layout and batched reads.

    Parameters
    ----------
    axes : dict
        ``{key: axis}``: the dict key of each variable-size field and the axis
        along which its size varies (negative counts from the end). Every
        other axis, the dtype and the kind (tensor or ndarray) must be the
        same in all samples.

    Used by DistDataset (``ragged=``); on its own: :meth:`take` each local
    sample while loading, :meth:`store` (collective) once, then :meth:`read`.
    """

    def __init__(self, axes):
        if not isinstance(axes, dict) or not axes:
            raise TypeError("ragged must be a non-empty dict {field key: variable axis}, "
                            f"e.g. {{'x': 0, 'edge_index': 1}}; got {axes!r}")
        for key, axis in axes.items():
            if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
                raise TypeError(f"ragged[{key!r}] must be an int axis, got {axis!r}")
        self._axes = {k: int(a) for k, a in axes.items()}
        self._specs = {}          # key -> _Spec, from the first sample taken (or the store)
        self._local = {}          # sample index -> {key: array with the variable axis first}
        self._name = None
        self._store = None

    @property
    def keys(self):
        """The ragged field keys, in the order given."""
        return list(self._axes)

    def axis(self, key):
        """The variable axis of field ``key`` (non-negative once a sample was seen)."""
        spec = self._specs.get(key)
        return self._axes[key] if spec is None else spec.axis

    def shapes(self):
        """{key: shape} with None at the variable axis (once a sample was seen)."""
        out = {}
        for k, spec in self._specs.items():
            shape = list(spec.inner)
            shape.insert(spec.axis, None)
            out[k] = tuple(shape)
        return out

    def dtypes(self):
        """{key: numpy dtype, or the name 'bfloat16'} of the ragged fields."""
        return {k: (_dtypes.BFLOAT16 if s.name == _dtypes.BFLOAT16 else s.dtype)
                for k, s in self._specs.items()}

    def describe(self):
        """Human-readable specs of the ragged fields."""
        return ", ".join(f"{k!r}: {self._specs[k].describe()}" if k in self._specs else repr(k)
                         for k in self._axes)

    # ------------------------------------------------------------ loading
    def take(self, sample, index):
        """Remove the ragged fields from ``sample`` (a dict), keep them for :meth:`store`.

        Returns the sample without them (for the fixed-shape path). Raises if
        a field is missing or differs from the first sample in anything but
        the size of its variable axis.
        """
        if not isinstance(sample, dict):
            raise TypeError(f"sample {index}: ragged fields need dict samples, got "
                            f"{type(sample).__name__}; turn samples into dicts with encode=")
        rest = dict(sample)
        parts = {}
        for key, axis in self._axes.items():
            if key not in rest:
                raise KeyError(f"sample {index} has no ragged field {key!r} (its keys: {list(sample)})")
            kind, name, arr = _as_array(rest.pop(key), key, index)
            if arr.ndim == 0:
                raise ValueError(f"sample {index}, ragged field {key!r}: a 0-d value has no axis "
                                 "to vary; store it as a fixed field")
            if not -arr.ndim <= axis < arr.ndim:
                raise ValueError(f"sample {index}, ragged field {key!r}: axis {axis} is out of "
                                 f"range for shape {arr.shape}")
            ax = axis % arr.ndim
            if name is None:
                raise TypeError(f"sample {index}, ragged field {key!r}: dtype {arr.dtype} is not "
                                f"supported; use one of {_dtypes.TEXT}")
            inner = arr.shape[:ax] + arr.shape[ax + 1:]
            spec = _Spec(key, ax, kind, name, inner)
            ref = self._specs.setdefault(key, spec)
            if spec != ref:
                raise ValueError(f"sample {index}, ragged field {key!r}: {spec.describe()} differs "
                                 f"from {ref.describe()} of an earlier sample; only the size along "
                                 f"axis {ref.axis} may vary")
            if int(np.prod(inner, dtype=np.int64)) == 0:
                raise ValueError(f"sample {index}, ragged field {key!r}: shape {arr.shape} has no "
                                 f"elements besides axis {ax}")
            parts[key] = np.ascontiguousarray(np.moveaxis(arr, ax, 0))
        if not rest:
            raise ValueError(f"sample {index}: every field is ragged; keep at least one fixed-shape "
                             "field (e.g. the label, or the sizes as a small array)")
        self._local[index] = parts
        return rest

    def store(self, store, comm, name, start, stop):
        """Add the taken samples ``start..stop-1`` to ``store`` (collective over ``comm``).

        ``comm`` is the store's communicator, ``start..stop`` this rank's share
        (consecutive shares in rank order). An error on any rank is raised on
        every rank (the datasets' rule, ``_storedataset.raise_agreed``: the
        first failed rank's error, its class and message).
        """
        what = f"DistDataset {name!r}"
        err, mine = None, None
        try:
            missing = [i for i in range(start, stop) if i not in self._local]
            if missing:
                raise RuntimeError(f"ragged fields of samples {missing[:5]} were not taken")
            if stop > start:
                mine = json.dumps([self._specs[k].to_obj() for k in self._axes])
        except Exception as e:  # noqa: BLE001 - agreed below
            err = e
        _raise_agreed(comm, err, what)
        gathered = comm.allgather(mine)
        ref = next((x for x in gathered if x is not None), None)
        if ref is None:
            raise ValueError(f"{what}: no rank holds a sample")
        for rank, x in enumerate(gathered):
            if x is not None and x != ref:
                a = [_Spec.from_obj(o).describe() for o in json.loads(ref)]
                b = [_Spec.from_obj(o).describe() for o in json.loads(x)]
                raise ValueError(f"{what}: ragged fields {b} on rank {rank} differ from {a}; only "
                                 "the size along the variable axis may differ between samples")
        self._specs = {o["key"]: _Spec.from_obj(o) for o in json.loads(ref)}
        last = store.group_rank == store.group_size - 1
        for key in self._axes:
            spec = self._specs[key]
            blocks = [self._local[i][key] for i in range(start, stop)]
            counts = np.array([b.shape[0] for b in blocks], dtype=np.int64)
            # One spare row on the group's last rank: the store refuses a
            # variable without rows, and every sample may be empty.
            spare = [np.zeros((1,) + spec.inner, spec.dtype)] if last else []
            values = np.concatenate(blocks + spare) if blocks or spare else \
                np.zeros((0,) + spec.inner, spec.dtype)
            store.add(self._values_var(name, key), np.ascontiguousarray(values),
                      dtype="bfloat16" if spec.name == _dtypes.BFLOAT16 else None)
            first = int(store.query(self._values_var(name, key)).first_row)
            ranges = np.empty((stop - start, 2), dtype=np.int64)
            ranges[:, 1] = counts
            if counts.size:
                ranges[:, 0] = first + np.concatenate(([0], np.cumsum(counts)[:-1]))
            store.add(self._ranges_var(name, key), ranges)
        meta = json.dumps([self._specs[k].to_obj() for k in self._axes]).encode()
        store.add(f"{name}/{RAGGED_SUFFIX}",
                  np.frombuffer(meta if store.group_rank == 0 else b"", dtype=np.uint8).copy())
        self._local.clear()
        self._name, self._store = name, store

    # ------------------------------------------------------------ reading
    @staticmethod
    def _values_var(name, key):
        return f"{name}/{key}@values"

    @staticmethod
    def _ranges_var(name, key):
        return f"{name}/{key}@ranges"

    @classmethod
    def variables(cls, name, keys):
        """Store variable names of ragged fields ``keys`` of dataset ``name`` (for a reader's join)."""
        return [v for k in keys for v in (cls._values_var(name, k), cls._ranges_var(name, k))]

    @classmethod
    def from_store(cls, store, name):
        """The ragged fields of dataset ``name`` in ``store`` (e.g. a method-2 reader), or None."""
        meta = f"{name}/{RAGGED_SUFFIX}"
        try:
            info = store.query(meta)
        except KeyError:
            return None
        buf = np.empty(info.global_rows, dtype=np.uint8)
        store.get(meta, buf, 0)
        specs = [_Spec.from_obj(o) for o in json.loads(buf.tobytes().decode())]
        self = cls({s.key: s.axis for s in specs})
        self._specs = {s.key: s for s in specs}
        self._name, self._store = name, store
        return self

    def read(self, rows, keys=None, collective=True):
        """Read the ragged fields of samples ``rows``: ``{key: (values, lengths)}``.

        ``values`` is a numpy array ``(sum(lengths), *fixed shape)`` (variable
        axis first), ``lengths`` int64 per sample. With ``collective`` (batched
        reads, collective for method 0) two store calls per field; otherwise
        one ``get`` per sample and field for the ranges (ds[i]), never
        collective.
        """
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        out = {}
        for key in (self.keys if keys is None else keys):
            spec = self._specs[key]
            ranges = np.empty((rows.size, 2), dtype=np.int64)
            if collective:
                self._store.get_batch(self._ranges_var(self._name, key), ranges, rows)
            else:
                for j, r in enumerate(rows):
                    self._store.get(self._ranges_var(self._name, key), ranges[j:j + 1], int(r))
            starts, lengths = ranges[:, 0].copy(), ranges[:, 1].copy()
            values = np.empty((int(lengths.sum()),) + spec.inner, dtype=spec.dtype)
            if collective:
                self._store.get_ranges(self._values_var(self._name, key), values, starts, lengths)
            else:
                pos = 0
                for s, n in zip(starts.tolist(), lengths.tolist()):
                    if n:
                        self._store.get(self._values_var(self._name, key), values[pos:pos + n], s)
                    pos += n
            out[key] = (values, lengths)
        return out

    def per_sample(self, key, values, lengths, device=None):
        """Split ``values`` into one value per sample, in the field's own layout and kind."""
        spec = self._specs[key]
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        result = []
        for j in range(lengths.size):
            block = values[bounds[j]:bounds[j + 1]]
            if spec.axis:
                block = np.ascontiguousarray(np.moveaxis(block, 0, spec.axis))
            result.append(self._as_kind(spec, block, device))
        return result

    def concatenated(self, key, values, lengths, device=None):
        """``(values concatenated along the field's variable axis, lengths tensor)``."""
        spec = self._specs[key]
        if spec.axis:
            values = np.ascontiguousarray(np.moveaxis(values, 0, spec.axis))
        return self._as_kind(spec, values, device), torch.from_numpy(lengths)

    @staticmethod
    def _as_kind(spec, arr, device):
        if spec.kind == _NDARRAY:
            return arr
        t = _dtypes.as_tensor(arr, spec.name)
        return t.to(device) if device is not None and device.type != "cpu" else t

    def fill(self, samples, rows, collective=True, device=None):
        """Put the ragged fields of samples ``rows`` into the dict ``samples`` (in place)."""
        got = self.read(rows, collective=collective)
        for key, (values, lengths) in got.items():
            for sample, value in zip(samples, self.per_sample(key, values, lengths, device)):
                sample[key] = value
        return samples


class RaggedCollate:
    """collate_fn for batches of dict samples with ragged fields.

    ``ragged``: ``{key: axis}`` as given to DistDataset (``ds.ragged_axes``),
    or a list of keys whose variable axis is 0. Fixed fields are collated
    with ``default_collate``; each ragged field becomes a list of its
    per-sample values, or with ``concat=True`` a pair ``(values concatenated
    along the variable axis, lengths)``, the layout graph libraries batch with
    (node features ``(sum n_i, F)``; for edge lists add each graph's node
    offset yourself).
    """

    def __init__(self, ragged, *, concat=False):
        if isinstance(ragged, dict):
            axes = dict(ragged)
        else:
            axes = {k: 0 for k in ragged}
        if not axes:
            raise ValueError("RaggedCollate needs the ragged fields, e.g. RaggedCollate(ds.ragged_axes)")
        for key, axis in axes.items():
            if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
                raise TypeError(f"axis of ragged field {key!r} must be an int, got {axis!r}")
        self.axes = {k: int(a) for k, a in axes.items()}
        self.concat = bool(concat)

    def __call__(self, samples):
        """Collate a list of dict samples."""
        if not samples:
            return {}
        fixed = [{k: v for k, v in s.items() if k not in self.axes} for s in samples]
        batch = default_collate(fixed) if fixed[0] else {}
        for key, axis in self.axes.items():
            values = [s[key] for s in samples]
            if not self.concat:
                batch[key] = values
            elif isinstance(values[0], np.ndarray):
                lengths = np.array([v.shape[axis] for v in values], dtype=np.int64)
                batch[key] = (np.concatenate(values, axis=axis), lengths)
            else:
                lengths = torch.tensor([v.shape[axis] for v in values], dtype=torch.int64)
                batch[key] = (torch.cat(values, dim=axis), lengths)
        return batch
