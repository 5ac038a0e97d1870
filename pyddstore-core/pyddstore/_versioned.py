"""Versioned variables: rows a producer rewrites while others read them.

A versioned variable (``init_versioned``) keeps one generation counter per
block of local rows; every ``update()`` of it marks the blocks it writes as
in progress around its copy, and every read (``get``, ``get_batch``,
``DistDatasetReader``...) checks the counters and reads again rows that
changed meanwhile, so no row read is ever a mix of two updates (see
"Data that changes while it is read" in the concepts guide). Updates are
visible to readers as soon as ``update()`` returns.
"""
import ctypes

from . import _lib
from ._errors import DDS_EINVAL, DDStoreValueError
from ._args import _INT64_MAX, _index

_c = _lib.lib


def init_versioned(store, name, nrows, disp, itemsize=1, *, block_rows=1):
    """Allocate versioned variable `name` on a core store: `nrows`
    zero-filled local rows of `disp * itemsize` bytes, one generation counter
    per `block_rows` local rows (collective over the store's communicator,
    like :meth:`PyDDStore.init`; write it with :meth:`PyDDStore.update`).

    Choose `block_rows` as the rows one update writes together (e.g. one
    timestep of one rank): rows of one block are consistent with each other.
    Raises on every rank when any rank's arguments are bad or ranks disagree.
    """
    store._require_core("init_versioned")
    err = None
    agreed = None
    try:
        bname = store._new_name(name)
        n = _index(nrows, "nrows")
        d = _index(disp, "disp")
        isz = _index(itemsize, "itemsize")
        b = _index(block_rows, "block_rows")
        if n < 0:
            raise DDStoreValueError(f"variable {name!r}: nrows must be >= 0, got {n}", DDS_EINVAL)
        if d < 1 or isz < 1:
            raise DDStoreValueError(
                f"variable {name!r}: disp ({d}) and itemsize ({isz}) must be >= 1", DDS_EINVAL)
        if b < 1:
            raise DDStoreValueError(
                f"variable {name!r}: block_rows must be >= 1 (rows per generation counter), got {b}",
                DDS_EINVAL)
        if d > _INT64_MAX // isz or n > _INT64_MAX // (d * isz):
            raise DDStoreValueError(f"variable {name!r}: {n} rows of {d}x{isz} bytes overflow", DDS_EINVAL)
        agreed = (name, d * isz, b)
    except DDStoreValueError as e:
        err = e
    store._agree(store._ctl, err, agreed)
    with store._h as ptr:
        rc = _c.dds_init_versioned(ptr, bname, n, d * isz, 0, b)
    if rc:
        store._raise(rc)
    store._load_var(name, None, (d, isz))


def block_rows(store, name):
    """Rows per generation counter of variable `name`; 0 when it is not
    versioned. Local (a method-2 reader looks the counters up once)."""
    v = store._var(name)
    out = ctypes.c_int64()
    with store._h as ptr:
        rc = _c.dds_var_block_rows(ptr, v.bname, ctypes.byref(out))
    if rc:
        store._raise(rc)
    return out.value


def generation(store, name, row):
    """Generation counter of the block holding global row `row` of versioned
    variable `name`: even when no update of it is in progress (``gen // 2``
    updates have completed), odd during one. Not collective; poll it to see
    whether new rows were published."""
    v = store._var(name)
    r = _index(row, "row")
    out = ctypes.c_uint64()
    with store._h as ptr:
        rc = _c.dds_generation(ptr, v.bname, r, ctypes.byref(out))
    if rc:
        store._raise(rc)
    return out.value
