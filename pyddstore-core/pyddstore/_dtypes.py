"""dtype tags: how numpy dtypes map to libddstore's enum dds_dtype and back.

The tags mirror ddstore.h by hand (tests/python/core/test_abi_mirror.py
checks them against the header).
"""

import numpy as np

# enum dds_dtype tag -> numpy dtype (ddstore.h order).
_DTYPE_OF_TAG = {
    1: np.dtype(np.bool_),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.int16),
    5: np.dtype(np.uint16),
    6: np.dtype(np.int32),
    7: np.dtype(np.uint32),
    8: np.dtype(np.int64),
    9: np.dtype(np.uint64),
    10: np.dtype(np.float16),
    11: np.dtype(np.float32),
    12: np.dtype(np.float64),
}
# (kind, itemsize) of native numpy dtypes -> tag: the inverse of the table above,
# so that the two cannot disagree.
_TAG_OF_KIND = {(dt.kind, dt.itemsize): tag for tag, dt in _DTYPE_OF_TAG.items()}
_TAG_BFLOAT16 = 13
#: Names of the element types a variable can hold, in the C ABI's order (enum
#: dds_dtype): the one table of them (pyddstore.torch takes its list from it).
#: numpy has no bfloat16: it is ml_dtypes.bfloat16, or an int16/uint16 view
#: given to add(dtype="bfloat16").
BFLOAT16 = "bfloat16"
SUPPORTED_DTYPES = tuple(d.name for d in _DTYPE_OF_TAG.values()) + (BFLOAT16,)


def dtype_tag(dtype):
    """Return the dds_dtype tag of numpy `dtype`, or None when it has none."""
    dt = np.dtype(dtype)
    if dt.name == "bfloat16" and dt.itemsize == 2:  # ml_dtypes.bfloat16
        return _TAG_BFLOAT16
    if dt.fields is not None or dt.subdtype is not None or not dt.isnative:
        return None
    return _TAG_OF_KIND.get((dt.kind, dt.itemsize))


def dtype_of_tag(tag):
    """Return the numpy dtype of dds_dtype `tag`; None for raw bytes (0) or
    a dtype numpy cannot represent here (bfloat16 without ml_dtypes)."""
    if tag == _TAG_BFLOAT16:
        try:
            import ml_dtypes
        except ImportError:
            return None
        return np.dtype(ml_dtypes.bfloat16)
    return _DTYPE_OF_TAG.get(tag)


# ---- numpy records (structured dtypes) -----------------------------------------
# A record variable holds its rows as raw bytes (tag 0, DDS_DTYPE_BYTES), as the
# original DDStore's users store records; the record dtype travels beside them
# (in this process, and as JSON for readers), so a read rebuilds the records
# bit for bit: fields, nested records, sub-arrays, alignment and padding.

def is_record(dtype):
    """Whether numpy `dtype` is a record (structured) or plain void dtype: stored as bytes."""
    return np.dtype(dtype).kind == "V"


def record_problem(dtype):
    """Why records of `dtype` cannot be stored as bytes (text), or None when they can."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        return (f"record dtype {dt} holds Python objects (a field of dtype object); their bytes are "
                "references, not data: give such fields a fixed-size dtype (e.g. 'S16', 'U8') or "
                "leave them out")
    if dt.itemsize == 0:
        return f"record dtype {dt} has no bytes"
    return None


def record_to_obj(dtype):
    """A JSON-able description of record dtype `dtype` from which record_from_obj()
    rebuilds an equal dtype: every field's name, dtype (nested records and
    sub-arrays included), offset and title, the itemsize (padding), whether it
    is an aligned struct, and np.record or np.void as its scalar type."""
    dt = np.dtype(dtype)
    if dt.fields is None:
        if dt.subdtype is not None:
            base, shape = dt.subdtype
            return {"base": record_to_obj(base), "shape": [int(d) for d in shape]}
        return dt.str
    fields = []
    for name in dt.names:
        f = dt.fields[name]
        fields.append([name, record_to_obj(f[0]), int(f[1]), f[2] if len(f) > 2 else None])
    return {"fields": fields, "itemsize": int(dt.itemsize), "aligned": bool(dt.isalignedstruct),
            "record": dt.type is np.record}


def record_from_obj(obj):
    """The numpy dtype that record_to_obj() described (ValueError for a malformed description)."""
    try:
        if isinstance(obj, str):
            return np.dtype(obj)
        if "base" in obj:
            return np.dtype((record_from_obj(obj["base"]), tuple(int(d) for d in obj["shape"])))
        fields = obj["fields"]
        spec = {"names": [f[0] for f in fields], "formats": [record_from_obj(f[1]) for f in fields],
                "offsets": [int(f[2]) for f in fields], "itemsize": int(obj["itemsize"])}
        if any(f[3] is not None for f in fields):
            spec["titles"] = [f[3] for f in fields]
        dt = np.dtype(spec, align=bool(obj["aligned"]))
        return np.dtype((np.record, dt)) if obj.get("record") else dt
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"not a record dtype description: {obj!r} ({e})") from None


def record_text(dtype):
    """record_to_obj(dtype) as canonical JSON text (for comparing ranks' dtypes)."""
    import json

    return json.dumps(record_to_obj(dtype), sort_keys=True)
