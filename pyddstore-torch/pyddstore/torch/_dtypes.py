"""The element types a stored field may have, and the bfloat16 special case.

The store holds bool, 8/16/32/64-bit signed and unsigned integers, float16,
float32, float64 and bfloat16 rows. numpy has no bfloat16 (without the
ml_dtypes package), so bfloat16 tensors travel through numpy as their int16
bit patterns: stored rows, read buffers and loading arrays are int16, and a
tensor field is viewed back as ``torch.bfloat16`` when it is handed out.
"""

import numpy as np
import torch
from pyddstore import SUPPORTED_DTYPES
from pyddstore.util import BFLOAT16, record_from_obj, record_problem, record_text, record_to_obj  # noqa: F401

#: names of the element types a field may have, in the C ABI's order: pyddstore's table.
NAMES = SUPPORTED_DTYPES

_NUMPY = {n: np.dtype(n) for n in NAMES if n != BFLOAT16}
_TORCH = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.uint16: "uint16", torch.int32: "int32", torch.uint32: "uint32", torch.int64: "int64",
    torch.uint64: "uint64", torch.float16: "float16", torch.float32: "float32",
    torch.float64: "float64", torch.bfloat16: BFLOAT16,
}
_TORCH_OF = {v: k for k, v in _TORCH.items()}
TEXT = ", ".join(NAMES)


def of_torch(dtype):
    """Name of torch dtype `dtype`, or None when the store cannot hold it."""
    return _TORCH.get(dtype)


def of_numpy(dtype):
    """Name of numpy dtype `dtype` (native byte order), or None when the store cannot hold it."""
    dt = np.dtype(dtype)
    if dt.fields is not None or dt.subdtype is not None or not dt.isnative:
        return None
    return dt.name if _NUMPY.get(dt.name) == dt else None


def storage(name):
    """numpy dtype that holds values of type `name` (int16 bit patterns for bfloat16)."""
    return np.dtype(np.int16) if name == BFLOAT16 else _NUMPY[name]


def torch_dtype(name):
    """torch dtype of type `name`."""
    return _TORCH_OF[name]


def parse(dtype, what):
    """Name of a dtype given as a torch dtype, numpy dtype/type or name; ValueError if unsupported."""
    if isinstance(dtype, torch.dtype):
        name = of_torch(dtype)
    elif isinstance(dtype, str) and dtype == BFLOAT16:
        name = BFLOAT16
    else:
        try:
            name = of_numpy(dtype)
        except TypeError:
            name = None
    if name is None:
        raise ValueError(f"{what}: dtype {dtype!r} is not one the store holds; use one of {TEXT} "
                         "(a torch dtype, a numpy dtype or its name)")
    return name


def tensor_to_numpy(t):
    """Host numpy array of tensor `t` (bfloat16 as its int16 bit patterns; no copy on CPU)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


def as_tensor(arr, name):
    """Tensor view of host array `arr` holding values of type `name`."""
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if name == BFLOAT16 else t


def is_record(dtype):
    """Whether numpy `dtype` is a record (structured or void) dtype: stored as its bytes."""
    return isinstance(dtype, np.dtype) and dtype.kind == "V"


def copy_records(dest, src):
    """``dest[...] = src`` for records, bit for bit: numpy's own copies of records
    (assignment, fancy indexing, copy()) skip their padding bytes. dest: a C-contiguous
    array; src: records of the same dtype and size (an array or a np.void)."""
    s = np.ascontiguousarray(np.asarray(src))
    dest.reshape(-1).view(np.uint8)[...] = s.reshape(-1).view(np.uint8)


def convert(value, name, where):
    """`value` (tensor, ndarray or numpy scalar) converted to type `name`, kind kept."""
    if isinstance(value, (np.ndarray, np.generic)) and is_record(value.dtype):
        raise TypeError(f"{where}: dtypes= converts numbers, not numpy records; records are stored "
                        "as they are (convert their fields with encode=)")
    if isinstance(value, torch.Tensor):
        return value.to(torch_dtype(name))
    if name == BFLOAT16:
        raise TypeError(f"{where}: bfloat16 is a torch dtype; numpy has none: give the field as a "
                        "torch tensor (e.g. with encode=) to store it as bfloat16")
    if isinstance(value, (np.ndarray, np.generic)):
        return value.astype(storage(name))
    raise TypeError(f"{where}: dtypes= converts tensor and numpy fields, not a "
                    f"{type(value).__name__}; convert it with encode=")


def check_conversions(dtypes, what):
    """{key: name} from a dtypes= argument ({key: torch/numpy dtype or name}), checked up front."""
    if dtypes is None:
        return None
    if not isinstance(dtypes, dict) or not dtypes:
        raise TypeError(f"{what}: dtypes must be a non-empty dict {{field: dtype}}, e.g. "
                        f"{{'pos': torch.float32}}; got {dtypes!r}")
    return {k: parse(v, f"{what}: dtypes[{k!r}]") for k, v in dtypes.items()}
