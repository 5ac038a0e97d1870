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
SUPPORTED_DTYPES = tuple(d.name for d in _DTYPE_OF_TAG.values())


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
