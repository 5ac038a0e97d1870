"""Argument checks and conversions shared by the store's methods: names,
integers, arrays (zero-copy views), row layouts and index arrays.

Every argument is checked here before libddstore is called, so no Python
input can make the C library touch memory it must not.
"""

import operator

import numpy as np

from . import _lib
from ._dtypes import _TAG_BFLOAT16, SUPPORTED_DTYPES, dtype_tag, record_problem
from ._errors import (
    DDS_EINVAL,
    DDS_ENOTSUP,
    DDS_ERANGE,
    DDStoreDTypeError,
    DDStoreNotSupportedError,
    DDStoreRangeError,
    DDStoreTypeError,
    DDStoreValueError,
)

_INT64_MAX = (1 << 63) - 1


def _encode_name(name):
    """Validate a variable name; return it as NUL-terminated-safe UTF-8 bytes."""
    if not isinstance(name, str):
        raise DDStoreTypeError(f"variable name must be a str, got {type(name).__name__}", DDS_EINVAL)
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DDStoreValueError(f"variable name {name!r} is not valid UTF-8: {e}", DDS_EINVAL) from None
    if not b or len(b) > _lib.NAME_MAX or b"\0" in b:
        raise DDStoreValueError(
            f"variable name {name!r} must be 1 to {_lib.NAME_MAX} UTF-8 bytes without NUL characters",
            DDS_EINVAL)
    return b


def _index(x, what):
    """x as a Python int (numpy integers accepted, floats and bools refused)."""
    if isinstance(x, (bool, np.bool_)):
        raise DDStoreTypeError(f"{what} must be an integer, got a bool", DDS_EINVAL)
    try:
        return operator.index(x)
    except TypeError:
        raise DDStoreTypeError(f"{what} must be an integer, got {type(x).__name__}", DDS_EINVAL) from None


def _to_array(obj, what, name, output):
    """View `obj` as a numpy array without copying.

    Outputs must already be writable C-contiguous memory: a copy would
    silently swallow the data read into it.
    """
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        dev = getattr(obj, "device", None)
        dev_type = getattr(dev, "type", None)
        if hasattr(obj, "__cuda_array_interface__") or (dev_type is not None and dev_type != "cpu"):
            raise DDStoreNotSupportedError(
                f"{what} for variable {name!r} is device memory ({dev}); this pyddstore reads and "
                "writes host memory only: pass a CPU array", DDS_ENOTSUP)
        try:
            arr = np.asarray(obj)
        except Exception as e:  # noqa: BLE001 - any conversion failure is a type error here
            raise DDStoreTypeError(
                f"{what} for variable {name!r} must be a numpy array or expose the buffer/array "
                f"interface; {type(obj).__name__} does not convert: {e}", DDS_EINVAL) from None
        if output and arr.flags.owndata:
            raise DDStoreTypeError(
                f"{what} for variable {name!r} must be writable memory (numpy array, CPU tensor, "
                f"bytearray); a {type(obj).__name__} would be copied and the data lost", DDS_EINVAL)
    if arr.dtype.hasobject:
        if arr.dtype.fields is not None:
            raise DDStoreDTypeError(f"{what} for variable {name!r}: {record_problem(arr.dtype)}", DDS_EINVAL)
        raise DDStoreDTypeError(
            f"{what} for variable {name!r} has dtype {arr.dtype}, which holds Python objects; "
            f"use one of {', '.join(SUPPORTED_DTYPES)}", DDS_EINVAL)
    if arr.ndim == 0:
        raise DDStoreValueError(
            f"{what} for variable {name!r} is 0-dimensional; rows run along the first axis, "
            "so pass at least a 1-D array (e.g. arr.reshape(1))", DDS_EINVAL)
    if output:
        if not arr.flags.c_contiguous:
            raise DDStoreValueError(
                f"{what} for variable {name!r} is not C-contiguous (strides {arr.strides}); "
                "read into np.ascontiguousarray-allocated memory and copy from there", DDS_EINVAL)
        if not arr.flags.writeable:
            raise DDStoreValueError(f"{what} for variable {name!r} is read-only", DDS_EINVAL)
    elif not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # inputs are copied by the store anyway
    return arr


def _row_bytes(arr):
    n = arr.itemsize
    for d in arr.shape[1:]:
        n *= d
    return n


def _bfloat16_view(dt):
    """Whether numpy dtype `dt` can stand for bfloat16 rows: numpy has no
    bfloat16 (without ml_dtypes), so 2-byte integer views of them do."""
    return dt.kind in "iu" and dt.itemsize == 2 and dt.isnative


def _byte_view(dt):
    """Whether numpy dtype `dt` reads records as their bytes: 1-byte integers or plain void."""
    return (dt.kind in "iu" and dt.itemsize == 1) or (dt.kind == "V" and dt.fields is None)


def _check_rows_match(v, arr, what):
    """Check dtype and row size of `arr` against variable `v`."""
    if v.record is not None:
        # Records: the same record dtype, or their bytes.
        if arr.dtype != v.record and not _byte_view(arr.dtype):
            raise DDStoreDTypeError(
                f"variable {v.name!r} holds records of dtype {v.record}; {what} has dtype {arr.dtype}: "
                "use an array of the record dtype (np.empty(n, dtype)) or of bytes (uint8)", DDS_EINVAL)
    elif v.dtype is not None or v.tag != 0:
        if v.tag == _TAG_BFLOAT16 and _bfloat16_view(arr.dtype):
            pass
        elif arr.dtype.kind == "V" and v.dtype is not None and _byte_view(v.dtype):
            pass  # records kept as bytes by the user, read into their record dtype
        elif dtype_tag(arr.dtype) != v.tag:
            expect = v.dtype.name if v.dtype is not None else f"dtype tag {v.tag}"
            cls = DDStoreDTypeError if dtype_tag(arr.dtype) is None else DDStoreTypeError
            raise cls(
                f"variable {v.name!r} holds {expect} rows; {what} has dtype {arr.dtype}", DDS_EINVAL)
    rb = _row_bytes(arr)
    if rb != v.row_bytes:
        raise DDStoreValueError(
            f"variable {v.name!r} has {v.describe()}; {what} of shape {arr.shape} and dtype "
            f"{arr.dtype} has rows of {rb} bytes (the first axis counts rows)", DDS_EINVAL)


def _int64_array(x, what, name):
    """x as a 1-D C-contiguous int64 array; only integer input accepted."""
    a = np.asarray(x)
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.ndim != 1:
        raise DDStoreValueError(f"{what} for variable {name!r} must be 1-D, got shape {a.shape}",
                                DDS_EINVAL)
    if a.dtype.kind not in "iu":
        raise DDStoreTypeError(f"{what} for variable {name!r} must hold integers, got {a.dtype}",
                               DDS_EINVAL)
    if a.dtype.kind == "u" and a.dtype.itemsize >= 8 and int(a.max()) > _INT64_MAX:
        raise DDStoreRangeError(f"{what} for variable {name!r} holds a value beyond 2**63-1",
                                DDS_ERANGE)
    return np.ascontiguousarray(a, dtype=np.int64)


def _address(arr):
    return arr.__array_interface__["data"][0]
