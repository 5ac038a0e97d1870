"""Reading Petastorm datasets without Petastorm and without unpickling anything.

Petastorm stores its schema (a ``Unischema``) as a *pickle* in the dataset's
``_common_metadata`` footer, and encodes array and image fields as opaque binary
columns (``NdarrayCodec``, ``CompressedNdarrayCodec``, ``CompressedImageCodec``).
Loading that pickle would run code chosen by whoever wrote the dataset, so this
module never does: :func:`read_unischema` walks the pickle's opcodes with
:func:`pickletools.genops` and rebuilds the object graph *symbolically* (classes
are recorded as ``module.name`` strings, never imported, never called), then picks
the ``UnischemaField`` records out of it.

:func:`decode_column` turns one Arrow column into the numpy values Petastorm's
``make_reader`` returns for that field, stacked along a leading row dimension:

* ``ScalarCodec``: the column cast to the field's numpy dtype.
* ``NdarrayCodec``: ``np.save`` bytes. A vectorised path parses the ``.npy`` header
  once when every row has the same header (the common fixed-shape case); otherwise
  ``np.load(..., allow_pickle=False)`` per row.
* ``CompressedNdarrayCodec``: ``np.savez_compressed`` bytes, read with
  ``np.load(..., allow_pickle=False)``.
* ``CompressedImageCodec('png' | 'jpeg')``: decoded with **Pillow**. Petastorm decodes
  with OpenCV; PNG is lossless, so values are identical; JPEG decoders may differ
  by a few levels (IDCT and chroma upsampling details). As Petastorm (which hands
  3-channel images through ``cv2.cvtColor(BGR2RGB)`` but 4-channel ones unchanged),
  4-channel images come back in OpenCV's B, G, R, A order.
"""

import io
import pickletools
import re

import numpy as np

__all__ = [
    "PetastormField",
    "UNISCHEMA_METADATA_KEY",
    "read_unischema",
    "decode_column",
    "decode_value",
    "make_codec",
    "CODECS",
]

#: Footer key under which Petastorm writes the pickled Unischema.
UNISCHEMA_METADATA_KEY = b"dataset-toolkit.unischema.v1"

#: Codec names accepted by :func:`make_codec` (and ``ParquetSource(codecs=...)``).
CODECS = ("scalar", "ndarray", "compressed_ndarray", "png", "jpeg", "raw")

# numpy type names a Unischema may name; only these are turned into dtypes, so a hostile
# pickle cannot make us build anything else.
_NUMPY_TYPES = {
    "bool_": np.bool_, "bool": np.bool_,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "str_": np.str_, "unicode_": np.str_, "string_": np.bytes_, "bytes_": np.bytes_,
}


class PetastormField:
    """One field of a Petastorm Unischema, recovered without unpickling.

    Attributes: ``name`` (str); ``dtype`` (numpy dtype, or None where the schema names a
    type we do not map, e.g. ``Decimal``); ``shape`` (tuple; ``None`` entries are free
    dimensions); ``codec`` (one of :data:`CODECS`, or None for a plain Parquet column);
    ``image_format`` ('png'/'jpeg' for image codecs); ``nullable`` (bool);
    ``spark_type`` (the ScalarCodec's Spark type name, e.g. 'IntegerType').
    """

    __slots__ = ("name", "dtype", "shape", "codec", "image_format", "nullable", "spark_type")

    def __init__(self, name, dtype, shape, codec, *, image_format=None, nullable=False, spark_type=None):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.codec = codec
        self.image_format = image_format
        self.nullable = bool(nullable)
        self.spark_type = spark_type

    def __repr__(self):
        return (f"PetastormField({self.name!r}, dtype={self.dtype}, shape={self.shape}, "
                f"codec={self.codec!r}, nullable={self.nullable})")

    def __eq__(self, other):
        return isinstance(other, PetastormField) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)


# ---------------------------------------------------------------- symbolic unpickler

class _Global:
    """A class or function named by a pickle (module, qualname), never imported."""

    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __repr__(self):
        return f"{self.module}.{self.name}"


class _Call:
    """The result of calling a _Global in the pickle (REDUCE/NEWOBJ/OBJ/INST), plus any
    state BUILD gave it and items SETITEM(S)/APPEND(S) added to it."""

    __slots__ = ("func", "args", "kwargs", "state", "items", "list")

    def __init__(self, func, args, kwargs=None):
        self.func, self.args, self.kwargs = func, tuple(args), dict(kwargs or {})
        self.state = None
        self.items = []
        self.list = []

    def __repr__(self):
        return f"{self.func!r}{self.args!r}"


class _Mark:
    pass


_MARK = _Mark()


def _symbolic_load(data):
    """Evaluate a pickle's opcodes on a symbolic stack; returns the symbolic root object.

    Only data-building opcodes are interpreted; calls are recorded as _Call nodes.
    Opcodes that would need outside context (persistent ids, extension registry) raise
    ValueError.
    """
    stack, memo = [], {}

    def pop_mark():
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] is _MARK:
                items = stack[k + 1:]
                del stack[k:]
                return items
        raise ValueError("corrupt pickle: MARK missing")

    def setitems(target, pairs):
        if isinstance(target, dict):
            for k, v in pairs:
                try:
                    target[k] = v
                except TypeError:  # unhashable symbolic key: keep order, lose lookup
                    target[("__unhashable__", id(k))] = v
        elif isinstance(target, _Call):
            target.items.extend(pairs)
        else:
            raise ValueError(f"corrupt pickle: SETITEM on {type(target).__name__}")

    def append(target, values):
        if isinstance(target, list):
            target.extend(values)
        elif isinstance(target, _Call):
            target.list.extend(values)
        else:
            raise ValueError(f"corrupt pickle: APPEND on {type(target).__name__}")

    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(stack) != 1:
                raise ValueError("corrupt pickle: stack not single at STOP")
            return stack[0]
        if name == "MARK":
            stack.append(_MARK)
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            pop_mark()
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "NONE":
            stack.append(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif name in ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                      "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING",
                      "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
                      "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"):
            stack.append(arg)
        elif name == "BYTEARRAY8":
            stack.append(bytes(arg))
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "TUPLE":
            stack.append(tuple(pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "LIST":
            stack.append(list(pop_mark()))
        elif name == "APPEND":
            v = stack.pop()
            append(stack[-1], [v])
        elif name == "APPENDS":
            vals = pop_mark()
            append(stack[-1], vals)
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "DICT":
            items = pop_mark()
            d = {}
            setitems(d, zip(items[0::2], items[1::2]))
            stack.append(d)
        elif name == "SETITEM":
            v = stack.pop()
            k = stack.pop()
            setitems(stack[-1], [(k, v)])
        elif name == "SETITEMS":
            items = pop_mark()
            setitems(stack[-1], list(zip(items[0::2], items[1::2])))
        elif name in ("EMPTY_SET",):
            stack.append([])
        elif name == "ADDITEMS":
            vals = pop_mark()
            append(stack[-1], vals)
        elif name == "FROZENSET":
            stack.append(tuple(pop_mark()))
        elif name == "GLOBAL":
            module, _, qual = arg.partition(" ")
            stack.append(_Global(module, qual))
        elif name == "STACK_GLOBAL":
            qual = stack.pop()
            module = stack.pop()
            if not isinstance(module, str) or not isinstance(qual, str):
                raise ValueError("corrupt pickle: STACK_GLOBAL needs two strings")
            stack.append(_Global(module, qual))
        elif name == "REDUCE":
            args = stack.pop()
            func = stack.pop()
            stack.append(_Call(func, args if isinstance(args, tuple) else (args,)))
        elif name == "NEWOBJ":
            args = stack.pop()
            cls = stack.pop()
            stack.append(_Call(cls, args if isinstance(args, tuple) else (args,)))
        elif name == "NEWOBJ_EX":
            kwargs = stack.pop()
            args = stack.pop()
            cls = stack.pop()
            stack.append(_Call(cls, args, kwargs if isinstance(kwargs, dict) else None))
        elif name == "OBJ":
            items = pop_mark()
            stack.append(_Call(items[0], items[1:]))
        elif name == "INST":
            module, _, qual = arg.partition(" ")
            stack.append(_Call(_Global(module, qual), pop_mark()))
        elif name == "BUILD":
            state = stack.pop()
            target = stack[-1]
            if isinstance(target, _Call):
                target.state = state
            # BUILD on a plain value would be a corrupt pickle; ignoring it is harmless here.
        else:
            raise ValueError(f"unsupported pickle opcode {name} in the Unischema; "
                             "pass field_shapes=/codecs= instead")
    raise ValueError("corrupt pickle: no STOP opcode")


def _state_dict(obj):
    """The attribute dict BUILD gave a symbolic object (also the (dict, slots) form)."""
    st = obj.state
    if isinstance(st, tuple) and len(st) == 2:
        merged = {}
        for part in st:
            if isinstance(part, dict):
                merged.update(part)
        return merged
    return st if isinstance(st, dict) else {}


def _real_class(call):
    """The class a _Call instantiates, seeing through copyreg._reconstructor (protocol 0/1)."""
    func = call.func
    if isinstance(func, _Global) and func.name == "_reconstructor" and call.args \
            and isinstance(call.args[0], _Global):
        return call.args[0]
    if isinstance(func, _Global) and func.name == "__newobj__" and call.args \
            and isinstance(call.args[0], _Global):
        return call.args[0]
    return func if isinstance(func, _Global) else None


def _walk(obj, seen=None):
    """Yield every _Call reachable from obj, depth first, in pickle order."""
    if seen is None:
        seen = set()
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, _Call):
        yield obj
        children = list(obj.args) + list(obj.kwargs.values()) + [obj.state] \
            + [x for kv in obj.items for x in kv] + list(obj.list)
    elif isinstance(obj, dict):
        children = [x for kv in obj.items() for x in kv]
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        return
    for c in children:
        yield from _walk(c, seen)


def _dtype_of(node):
    if isinstance(node, _Global):
        if node.module in ("numpy", "numpy.core.numerictypes", "numpy._core.numerictypes") \
                and node.name in _NUMPY_TYPES:
            return np.dtype(_NUMPY_TYPES[node.name])
        return None  # e.g. decimal.Decimal: no numpy equivalent
    if isinstance(node, _Call):  # numpy.dtype('f8', False, True) form
        cls = _real_class(node)
        if cls is not None and cls.name == "dtype" and node.args and isinstance(node.args[0], str):
            code = node.args[0]
            if re.fullmatch(r"[biuf][1248]|b1|\?", code):
                dt = np.dtype(code)
                st = node.state
                if isinstance(st, tuple) and len(st) > 1 and st[1] in (">",):
                    dt = dt.newbyteorder(">")
                return dt
    return None


def _codec_of(node):
    """(codec name, image format, spark type name) of a symbolic codec object."""
    if node is None:
        return None, None, None
    if not isinstance(node, _Call):
        raise ValueError(f"unrecognised codec {node!r} in the Unischema")
    cls = _real_class(node)
    cname = cls.name if cls is not None else None
    state = _state_dict(node)
    if cname == "ScalarCodec":
        st = state.get("_spark_type")
        spark = None
        if isinstance(st, _Call) and _real_class(st) is not None:
            spark = _real_class(st).name
        elif len(node.args) == 1 and isinstance(node.args[0], _Call):
            spark = _real_class(node.args[0]).name
        return "scalar", None, spark
    if cname == "NdarrayCodec":
        return "ndarray", None, None
    if cname == "CompressedNdarrayCodec":
        return "compressed_ndarray", None, None
    if cname == "CompressedImageCodec":
        fmt = state.get("_image_codec")
        if fmt is None and node.args and isinstance(node.args[0], str):
            fmt = node.args[0]
        fmt = str(fmt or "png").lstrip(".").lower()
        fmt = {"jpg": "jpeg"}.get(fmt, fmt)
        if fmt not in ("png", "jpeg"):
            raise ValueError(f"unsupported image codec format {fmt!r}")
        return fmt, fmt, None
    raise ValueError(f"unsupported Petastorm codec {cls!r}; pass codecs= to decode it yourself")


def read_unischema(data):
    """Recover the fields of a pickled Petastorm Unischema without executing the pickle.

    data: the bytes stored under :data:`UNISCHEMA_METADATA_KEY` in ``_common_metadata``.
    Returns a list of :class:`PetastormField` in the schema's order. Raises ValueError
    if the bytes are not a Unischema pickle this function understands (then pass
    ``field_shapes=``/``codecs=`` to ParquetSource instead).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"read_unischema needs bytes, got {type(data).__name__}")
    root = _symbolic_load(bytes(data))
    fields = []
    for call in _walk(root):
        cls = _real_class(call)
        if cls is None or cls.name != "UnischemaField":
            continue
        args = list(call.args)
        if call.func is not cls:  # copyreg forms carry (cls, base, state) instead of the fields
            args = list(call.state) if isinstance(call.state, tuple) else []
        kw = call.kwargs
        names = ("name", "numpy_dtype", "shape", "codec", "nullable")
        vals = dict(zip(names, args))
        vals.update({k: v for k, v in kw.items() if k in names})
        if not isinstance(vals.get("name"), str):
            raise ValueError("UnischemaField without a name in the Unischema")
        shape = vals.get("shape", ())
        if not isinstance(shape, (tuple, list)) or not all(
                s is None or (isinstance(s, int) and s >= 0) for s in shape):
            raise ValueError(f"field {vals['name']!r}: bad shape {shape!r} in the Unischema")
        codec, fmt, spark = _codec_of(vals.get("codec"))
        fields.append(PetastormField(vals["name"], _dtype_of(vals.get("numpy_dtype")), tuple(shape),
                                     codec, image_format=fmt, nullable=bool(vals.get("nullable", False)),
                                     spark_type=spark))
    if not fields:
        raise ValueError("no UnischemaField found in the Unischema metadata")
    # A field object can be referenced twice (memo): keep first occurrences only.
    unique, seen = [], set()
    for f in fields:
        if f.name not in seen:
            seen.add(f.name)
            unique.append(f)
    return unique


# ---------------------------------------------------------------- codecs

def _decode_npy(value):
    return np.load(io.BytesIO(value), allow_pickle=False)


def _decode_npz(value):
    with np.load(io.BytesIO(value), allow_pickle=False) as z:
        return z["arr"]


def _decode_image(value):
    # Imported lazily so that sources without image columns don't need Pillow.
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("decoding CompressedImageCodec columns needs Pillow: "
                          "pip install 'pyddstore-torch[parquet]' (or pillow)") from exc
    with Image.open(io.BytesIO(value)) as im:
        mode = im.mode
        if mode == "P":
            im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        elif mode in ("LA", "PA"):
            im = im.convert("RGBA")
        elif mode == "CMYK":
            im = im.convert("RGB")
        elif mode in ("RGB;16", "RGBA;16"):
            raise ValueError("16-bit colour images are not supported by the Pillow decoder")
        arr = np.asarray(im)
    if arr.dtype == np.int32:  # Pillow's 'I' mode from 16-bit grey PNG
        arr = arr.astype(np.uint16)
    if arr.ndim == 3 and arr.shape[2] == 4:
        # OpenCV (and hence Petastorm) returns 4-channel images as B, G, R, A.
        arr = arr[..., [2, 1, 0, 3]]
    return np.ascontiguousarray(arr)


def make_codec(spec):
    """A per-value decoder ``bytes -> np.ndarray`` for a codec name from :data:`CODECS`
    (or a callable, returned as is). 'raw' gives the bytes as a uint8 array."""
    if callable(spec):
        return spec
    if spec == "ndarray":
        return _decode_npy
    if spec == "compressed_ndarray":
        return _decode_npz
    if spec in ("png", "jpeg"):
        return _decode_image
    if spec == "raw":
        return lambda v: np.frombuffer(v, dtype=np.uint8)
    raise ValueError(f"unknown codec {spec!r}: use one of {CODECS} or a callable bytes -> array")


def decode_value(codec, value, dtype=None):
    """Decode one stored value as Petastorm's make_reader would."""
    if codec == "scalar" or codec is None:
        return dtype.type(value) if dtype is not None else value
    return make_codec(codec)(value)


def _binary_matrix(arr):
    """(n, L) uint8 view of a binary Arrow array whose values all have length L, else None."""
    import pyarrow as pa

    if arr.null_count:
        return None
    n = len(arr)
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        buf = arr.buffers()[1]
        data = np.frombuffer(buf, dtype=np.uint8)[arr.offset * width:(arr.offset + n) * width]
        return data.reshape(n, width)
    offs_dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offs = np.frombuffer(arr.buffers()[1], dtype=offs_dtype)[arr.offset:arr.offset + n + 1]
    if n == 0:
        return np.empty((0, 0), dtype=np.uint8)
    lens = np.diff(offs)
    if not np.all(lens == lens[0]):
        return None
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offs[0]:offs[-1]]
    return data.reshape(n, int(lens[0]))


def _npy_bulk(mat):
    """Vectorised NdarrayCodec decode of rows that share one .npy header, else None."""
    if mat.shape[0] == 0 or mat.shape[1] < 10:
        return None
    first = bytes(mat[0, :10])
    if first[:6] != b"\x93NUMPY":
        raise ValueError("NdarrayCodec value does not start with the .npy magic")
    major = first[6]
    if major == 1:
        hlen = 10 + int.from_bytes(first[8:10], "little")
    elif major in (2, 3):
        hlen = 12 + int.from_bytes(bytes(mat[0, 8:12]), "little")
    else:
        return None
    if hlen > mat.shape[1] or not np.all(mat[:, :hlen] == mat[0, :hlen]):
        return None
    # np.lib.format parses the header dict with a literal evaluator (no code execution).
    bio = io.BytesIO(bytes(mat[0, :hlen]))
    version = np.lib.format.read_magic(bio)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(bio)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(bio)
    if dtype.hasobject or fortran:
        return None
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != mat.shape[1] - hlen:
        return None
    body = np.ascontiguousarray(mat[:, hlen:])
    out = body.view(dtype).reshape((mat.shape[0],) + tuple(shape))
    if not dtype.isnative:
        out = out.astype(dtype.newbyteorder("="))
    return out


def _stack(values, what):
    if not values:
        return None
    first = values[0]
    for v in values[1:]:
        if v.shape != first.shape or v.dtype != first.dtype:
            raise ValueError(f"{what}: values differ in shape/dtype ({first.shape} {first.dtype} vs "
                             f"{v.shape} {v.dtype}); the store needs one shape per field: pass "
                             "field_shapes= only where sizes really agree, or filter such rows out")
    return np.stack(values)


def decode_column(arr, codec, *, name="?", dtype=None, shape=None):
    """Decode a binary Arrow array (pyarrow Array or ChunkedArray) with a codec into one
    stacked numpy array of shape (len(arr), *value_shape).

    codec: a name from :data:`CODECS` or a callable ``bytes -> np.ndarray``. dtype: the
    numpy dtype the value must have (cast for 'scalar', checked for arrays where given).
    shape: the per-row shape expected (may contain None); used to shape empty results.
    """
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    if arr.null_count:
        raise ValueError(f"column {name!r} has null values in the rows read; the store needs a value "
                         "in every row: filter them out (filter=pc.field(name).is_valid())")
    if codec in ("scalar", None):
        out = arr.to_numpy(zero_copy_only=False)
        return out.astype(dtype, copy=False) if dtype is not None and out.dtype != dtype else out
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
            or pa.types.is_fixed_size_binary(arr.type)):
        raise TypeError(f"column {name!r} has Arrow type {arr.type}, but codec {codec!r} needs binary")
    out = None
    if codec == "raw":
        out = _binary_matrix(arr)
        if out is None:
            raise ValueError(f"binary column {name!r} has values of different lengths; give it a codec "
                             "(codecs={name: ...}) that decodes them to one shape")
        out = out.copy()
    elif codec == "ndarray":
        mat = _binary_matrix(arr)
        if mat is not None:
            out = _npy_bulk(mat)
    if out is None:
        dec = make_codec(codec)
        values = [dec(v) for v in arr.to_pylist()] if n else []
        out = _stack(values, f"column {name!r}")
        if out is None:  # zero rows: shape from the schema where it is fully known
            if shape is not None and all(s is not None for s in shape) and dtype is not None:
                out = np.empty((0,) + tuple(shape), dtype=dtype)
            else:
                out = np.empty((0,), dtype=dtype or np.uint8)
    if dtype is not None and out.dtype != dtype and codec != "raw":
        raise ValueError(f"column {name!r}: decoded dtype {out.dtype} differs from the schema's {dtype}")
    if shape is not None and n and len(shape) == out.ndim - 1:
        for want, got in zip(shape, out.shape[1:]):
            if want is not None and want != got:
                raise ValueError(f"column {name!r}: decoded shape {out.shape[1:]} differs from "
                                 f"the schema's {tuple(shape)}")
    return out
