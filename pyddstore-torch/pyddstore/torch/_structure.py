"""Sample structure: flatten a sample into fixed-shape fields and rebuild it.

A sample is one value (tensor, ndarray or number), a tuple or list of values,
or a dict of values. Each value is a *field*, keyed by its dict key, its
position, or 0 for a single value. A :class:`Structure` remembers the container
and, per field, the kind of value (so tensors come back as tensors, arrays as
arrays, numbers as numbers), its dtype and its shape. It is serialised as JSON
so that a method-2 reader in another job can rebuild the same samples.

numpy records (a np.void/np.record scalar, a structured array or a record
array) are fields too: stored as their bytes, given back bit for bit with
their record dtype (nested, aligned and padded layouts included); the record
dtype travels in the JSON (pyddstore.util.record_to_obj).
"""

import collections
import json
import numbers

import numpy as np
import torch

from ._errors import FieldNotFoundError

from . import _dtypes

#: dtypes a field may have (numpy names, and bfloat16 for torch tensors); everything else is rejected.
SUPPORTED_DTYPES = _dtypes.NAMES
_INT64_MIN, _INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
_SUPPORTED_TEXT = _dtypes.TEXT

# Field kinds. "number" is a Python bool/int/float (stored as bool/int64/float64
# and given back as the same Python type); "npscalar" a numpy scalar (np.void for a
# record); "recarray" a numpy record array (np.recarray), given back as one.
TENSOR, NDARRAY, NUMBER, NPSCALAR, RECARRAY = "tensor", "ndarray", "number", "npscalar", "recarray"
RECORD = "record"  # the dtype name of record fields (their dtype is in FieldSpec.record)
# Containers.
SINGLE, TUPLE, LIST, DICT = "single", "tuple", "list", "dict"

STRUCTURE_SUFFIX = "__structure__"


class FieldSpec:
    """Kind, dtype and shape of one field (the same in every sample)."""

    __slots__ = ("key", "kind", "dtype", "dtype_name", "shape", "record")

    def __init__(self, key, kind, dtype, shape):
        self.key = key
        self.kind = kind
        # dtype: the numpy dtype rows are held in (int16 bit patterns for
        # bfloat16); dtype_name: what the values are ("record" for numpy records,
        # whose dtype is `record`).
        if _dtypes.is_record(dtype):
            self.record = self.dtype = dtype
            self.dtype_name = RECORD
        else:
            self.record = None
            self.dtype_name = _dtypes.BFLOAT16 if dtype == _dtypes.BFLOAT16 else np.dtype(dtype).name
            self.dtype = _dtypes.storage(self.dtype_name)
        self.shape = tuple(int(d) for d in shape)

    @property
    def user_dtype(self):
        """The dtype as ``ds.dtypes`` reports it: a numpy dtype (the record dtype for
        records), or the name 'bfloat16'."""
        return _dtypes.BFLOAT16 if self.dtype_name == _dtypes.BFLOAT16 else self.dtype

    def type_key(self):
        """What must be equal between samples besides kind and shape: the dtype, exactly
        (a record's whole layout: fields, offsets, padding, alignment, scalar type)."""
        return (self.dtype_name, None if self.record is None else _dtypes.record_text(self.record))

    @property
    def row_bytes(self):
        """Bytes one sample of this field takes in the store."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def describe(self):
        """Human-readable kind, dtype and shape, for error messages."""
        dtype = self.dtype_name if self.record is None else f"{self.record}"
        return f"{self.kind} dtype={dtype} shape={self.shape}"

    def __eq__(self, other):
        return (isinstance(other, FieldSpec) and self.key == other.key and self.kind == other.kind
                and self.type_key() == other.type_key() and self.shape == other.shape)

    def __repr__(self):
        return f"FieldSpec({self.key!r}, {self.describe()})"


def key_text(key):
    """The suffix of a field's variable name: name/<key_text>."""
    return str(key)


class Structure:
    """The container of a sample and the specs of its fields, in order."""

    def __init__(self, container, fields, tuple_type=None):
        self.container = container
        self.fields = list(fields)
        # A namedtuple type, to rebuild namedtuple samples; None for plain tuples.
        self.tuple_type = tuple_type
        self.by_key = {f.key: f for f in self.fields}

    @property
    def keys(self):
        """Field keys in sample order."""
        return [f.key for f in self.fields]

    @property
    def has_records(self):
        """Whether a field holds numpy records (which torch tensors cannot hold)."""
        return any(f.record is not None for f in self.fields)

    def __eq__(self, other):
        return (isinstance(other, Structure) and self.container == other.container
                and self.fields == other.fields
                and _tuple_type_name(self.tuple_type) == _tuple_type_name(other.tuple_type))

    def describe(self):
        """One line naming the container and every field, for messages."""
        inner = "; ".join(f"{f.key!r}: {f.describe()}" for f in self.fields)
        return f"{self.container} {{{inner}}}"

    # -- serialisation (for method-2 readers and for comparing ranks) --------
    def to_json(self):
        """JSON text describing this structure (namedtuples by name and fields)."""
        nt = None
        if self.tuple_type is not None:
            nt = [self.tuple_type.__name__, list(self.tuple_type._fields)]
        return json.dumps({
            # 2 when a field holds records (a reader that predates them refuses the dataset).
            "version": 2 if self.has_records else 1,
            "container": self.container,
            "namedtuple": nt,
            "fields": [[["int", f.key] if isinstance(f.key, int) else ["str", f.key],
                        f.kind, f.dtype_name, list(f.shape)]
                       + ([] if f.record is None else [_dtypes.record_to_obj(f.record)])
                       for f in self.fields],
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        """Inverse of to_json(); a namedtuple type is recreated by name."""
        d = json.loads(text)
        if d.get("version") not in (1, 2):
            raise ValueError(f"unknown sample structure version {d.get('version')!r}; "
                             "upgrade pyddstore-torch to the core group's version")
        fields = []
        for k, kind, dtype, shape, *record in d["fields"]:
            if dtype == RECORD:
                dtype = _dtypes.record_from_obj(record[0])
            fields.append(FieldSpec(int(k[1]) if k[0] == "int" else k[1], kind, dtype, shape))
        nt = None
        if d.get("namedtuple"):
            nt = collections.namedtuple(d["namedtuple"][0], d["namedtuple"][1])
        return cls(d["container"], fields, nt)


def _tuple_type_name(t):
    return None if t is None else (t.__name__, tuple(t._fields))


def _where(index, key):
    return f"sample {index}" + ("" if key is None else f", field {key!r}")


def _cast_hint(dtype):
    """A supported dtype to cast an unsupported one to, or None (e.g. object, complex)."""
    if isinstance(dtype, torch.dtype):
        if dtype.is_complex:
            return None
        if dtype.is_floating_point:
            return "float32"
        kind, size = ("i" if dtype.is_signed else "u"), torch.empty((), dtype=dtype).element_size()
    else:
        dt = np.dtype(dtype)
        kind, size = dt.kind, dt.itemsize
        if kind == "f":
            return "float32"
    if kind in "iu":
        return "int32" if size < 4 or (size == 4 and kind == "i") else "int64"
    return None


def _dtype_error(index, key, dtype):
    # The simple fix first: a per-column cast at load (ParquetSource/PetastormSource dtypes=,
    # the throughput tool's --dtypes); encode= is the general one.
    name = key if isinstance(key, str) else "COLUMN"
    to = _cast_hint(dtype)
    cast = (f"dtypes={{{name!r}: {to!r}}} (pyddstore-throughput: --dtypes {name}={to})" if to else
            f"dtypes={{{name!r}: DTYPE}} (pyddstore-throughput: --dtypes {name}=DTYPE)")
    return TypeError(
        f"{_where(index, key)}: dtype {dtype} is not supported; supported dtypes: {_SUPPORTED_TEXT}. "
        f"Convert the field before storing it: a ParquetSource/PetastormSource casts at load with "
        f"{cast}; any source: encode=.")


def _refuse_graph(value, where):
    """TypeError naming pyddstore.torch.geometric.DistDataset when `value` is a
    torch_geometric graph (Data, HeteroData, Batch); told by its class's bases,
    so that torch_geometric is never imported here."""
    if any(c.__name__ == "BaseData" and c.__module__.startswith("torch_geometric.")
           for c in type(value).__mro__):
        raise TypeError(
            f"{where}: a torch_geometric {type(value).__name__} is a graph; store graphs with "
            "pyddstore.torch.geometric.DistDataset (the same arguments; its DataLoader batches them "
            "as torch_geometric does). This DistDataset stores fixed-shape tensors, arrays and "
            "numbers; to keep a graph here, turn it into such fields with encode=.")


def _record_spec(value, kind, shape, index, key):
    """FieldSpec of a field holding numpy records (TypeError for object fields)."""
    problem = _dtypes.record_problem(value.dtype)
    if problem is not None:
        raise TypeError(f"{_where(index, key)}: {problem}; or convert the field with encode=")
    return FieldSpec(key, kind, value.dtype, shape)


def leaf_spec(value, index, key):
    """FieldSpec of one field value; raises TypeError for unsupported values."""
    if isinstance(value, (np.ndarray, np.generic)) and _dtypes.is_record(value.dtype):
        if isinstance(value, np.generic):
            return _record_spec(value, NPSCALAR, (), index, key)
        return _record_spec(value, RECARRAY if isinstance(value, np.recarray) else NDARRAY,
                            value.shape, index, key)
    if isinstance(value, torch.Tensor):
        dt = _dtypes.of_torch(value.dtype)
        if dt is None:
            raise _dtype_error(index, key, value.dtype)
        return FieldSpec(key, TENSOR, dt, value.shape)
    if isinstance(value, np.ndarray):
        if _dtypes.of_numpy(value.dtype) is None:
            raise _dtype_error(index, key, value.dtype)
        return FieldSpec(key, NDARRAY, value.dtype, value.shape)
    if isinstance(value, np.generic):
        if _dtypes.of_numpy(value.dtype) is None:
            raise _dtype_error(index, key, value.dtype)
        return FieldSpec(key, NPSCALAR, value.dtype, ())
    if isinstance(value, bool):
        return FieldSpec(key, NUMBER, np.bool_, ())
    if isinstance(value, numbers.Integral):
        if not _INT64_MIN <= int(value) <= _INT64_MAX:
            raise ValueError(f"{_where(index, key)}: integer {value} does not fit in int64")
        return FieldSpec(key, NUMBER, np.int64, ())
    if isinstance(value, numbers.Real):
        return FieldSpec(key, NUMBER, np.float64, ())
    _refuse_graph(value, _where(index, key))
    raise TypeError(
        f"{_where(index, key)}: a value of type {type(value).__name__} cannot be stored; a field must be "
        "a torch.Tensor, a numpy.ndarray or a number (bool, int, float) of fixed shape and one of the "
        f"dtypes {_SUPPORTED_TEXT}. Leave it out (ParquetSource/PetastormSource: columns=; "
        "pyddstore-throughput: --columns) or convert it with encode=.")


def container_of(sample, index):
    """(container kind, [(key, value)], namedtuple class or None) of one sample,
    or of a block of samples stacked per field; errors name `index`."""
    if isinstance(sample, (torch.Tensor, np.ndarray, np.generic, numbers.Number)):
        return SINGLE, [(0, sample)], None
    if isinstance(sample, collections.abc.Mapping):
        items = list(sample.items())
        texts = set()
        for k, _ in items:
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError(f"sample {index}: dict key {k!r} is not a str or int; "
                                "rename it with encode=")
            if k == STRUCTURE_SUFFIX:
                raise ValueError(f"sample {index}: dict key {k!r} is reserved by pyddstore.torch; "
                                 "rename it with encode=")
            if key_text(k) in texts:
                raise ValueError(f"sample {index}: dict keys {k!r} and {key_text(k)!r} would share "
                                 "one variable name; rename one with encode=")
            texts.add(key_text(k))
        return DICT, items, None
    if isinstance(sample, tuple):
        tt = type(sample) if hasattr(sample, "_fields") else None
        return TUPLE, list(enumerate(sample)), tt
    if isinstance(sample, list):
        return LIST, list(enumerate(sample)), None
    _refuse_graph(sample, f"sample {index}")
    raise TypeError(
        f"sample {index}: a sample of type {type(sample).__name__} cannot be stored; a sample must be a "
        "tensor, array or number, a tuple or list of them, or a dict of them. Convert it with encode=.")


def structure_of(sample, index):
    """Structure of one sample (raises TypeError/ValueError naming index and field)."""
    container, items, tt = container_of(sample, index)
    if not items:
        raise ValueError(f"sample {index}: an empty {container} has no field to store")
    fields = []
    for key, value in items:
        if container != SINGLE and isinstance(value, (dict, list, tuple, collections.abc.Mapping)):
            raise TypeError(
                f"{_where(index, key)}: nested containers are not supported (a sample is a tensor/array/"
                "number, a tuple or list of them, or a dict of them); flatten it with encode=")
        fields.append(leaf_spec(value, index, key))
    return Structure(container, fields, tt)


def items_of(sample, structure, index):
    """(spec, value) pairs of a sample, checked against structure.

    Raises ValueError/TypeError naming the sample index, the field and both
    shapes/dtypes on any difference from the structure.
    """
    container, items, tt = container_of(sample, index)
    if container != structure.container:
        raise TypeError(f"sample {index}: a {container} where sample 0 of the dataset is a "
                        f"{structure.container}; every sample must have the same structure")
    if len(items) != len(structure.fields) or any(
            k != f.key for (k, _), f in zip(items, structure.fields)):
        raise ValueError(f"sample {index}: fields {[k for k, _ in items]} differ from "
                         f"{structure.keys} of the dataset's first sample; every sample must have "
                         "the same fields")
    out = []
    for (key, value), spec in zip(items, structure.fields):
        got = leaf_spec(value, index, key)
        if got.kind != spec.kind or got.type_key() != spec.type_key() or got.shape != spec.shape:
            raise ValueError(
                f"{_where(index, key)}: {got.describe()} differs from {spec.describe()} of the "
                "dataset's first sample; fields must have the same shape and dtype in every sample")
        out.append((spec, value))
    return out


def as_numpy(value):
    """Host numpy view/copy of a field value (tensors detached and moved to CPU)."""
    if isinstance(value, torch.Tensor):
        return _dtypes.tensor_to_numpy(value)
    return np.asarray(value)


def select(sample, fields, index):
    """The sample reduced to `fields` (keys of a dict, positions of a tuple/list)."""
    if isinstance(sample, collections.abc.Mapping):
        missing = [k for k in fields if k not in sample]
        if missing:
            raise FieldNotFoundError(f"sample {index}: fields={list(fields)!r} names keys {missing!r} that the "
                           f"sample lacks (it has {list(sample.keys())!r})")
        return {k: sample[k] for k in fields}
    if isinstance(sample, (tuple, list)):
        bad = [p for p in fields if not isinstance(p, int) or isinstance(p, bool)
               or not -len(sample) <= p < len(sample)]
        if bad:
            raise FieldNotFoundError(f"sample {index}: fields={list(fields)!r} names positions {bad!r} outside "
                             f"the sample's {len(sample)} positions")
        return type(sample)([sample[p] for p in fields]) if type(sample) in (tuple, list) \
            else tuple(sample[p] for p in fields)
    raise TypeError(f"sample {index}: fields= selects keys of dict samples or positions of tuple/list "
                    f"samples, but the sample is a {type(sample).__name__}; use encode= instead")


def field_value(spec, column, j):
    """Value of field `spec` for row j of its batch column (a view where possible).

    column is a numpy array (n, *shape), or a torch tensor for tensor fields.
    """
    if spec.kind == TENSOR:
        return column[j]
    if spec.kind == NDARRAY:
        return column[j, ...]
    if spec.kind == RECARRAY:
        return column[j, ...].view(np.recarray)
    if spec.kind == NPSCALAR:
        return column[j]
    return column[j].item()


def build(structure, values):
    """A sample of `structure` from its field values, in field order."""
    c = structure.container
    if c == SINGLE:
        return values[0]
    if c == DICT:
        return {f.key: v for f, v in zip(structure.fields, values)}
    if c == LIST:
        return list(values)
    if structure.tuple_type is not None:
        return structure.tuple_type(*values)
    return tuple(values)


def collated(structure, tensors):
    """What torch's default_collate gives for a batch whose field columns are `tensors`.

    default_collate stacks tensors and arrays, turns numbers into 1-D tensors
    (bool, int64, float64 for Python numbers; the scalar's dtype for numpy
    scalars), keeps dicts and namedtuples, and turns tuples and lists into
    lists. The columns already have those dtypes, so no copy is needed.
    """
    c = structure.container
    if c == SINGLE:
        return tensors[0]
    if c == DICT:
        return {f.key: t for f, t in zip(structure.fields, tensors)}
    if c == TUPLE and structure.tuple_type is not None:
        return structure.tuple_type(*tensors)
    return list(tensors)
