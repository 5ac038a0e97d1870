"""Shared helpers of the pyddstore core suite.

Data is a pure function of (variable salt, global row, element), so every
rank can compute what any row must hold and compare bit-exact.
"""
import os

import numpy as np

from pyddstore import PyDDStore
from suite_helpers import shared_tmpdir  # noqa: F401  (the suite imports it from here)

# The suite runs with the method the environment selects (DDSTORE_METHOD,
# default 0) so the same tests cover methods 1 and 2 when run with it set.
METHOD = int(os.environ.get("DDSTORE_METHOD", "0") or 0)

ALL_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "float16", "float32", "float64"]

# Rows held by group rank r (cycled): includes zero-row ranks (from 2 ranks on).
ROWS_PATTERN = (5, 0, 3, 2)


def rows_of(group_rank, group_size):
    """Local row count of `group_rank`; a one-rank group always holds rows."""
    if group_size == 1:
        return 4
    return ROWS_PATTERN[group_rank % len(ROWS_PATTERN)]


def layout(group_size):
    """(counts, offsets) of the shards of a group."""
    counts = [rows_of(r, group_size) for r in range(group_size)]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return counts, offsets


def values(rows, row_shape, dtype, salt=0):
    """Expected content of global `rows` for a variable: shape (len(rows),) + row_shape."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    k = int(np.prod(row_shape)) if row_shape else 1
    base = rows[:, None] * 131 + np.arange(k, dtype=np.int64)[None, :] * 7 + salt * 1009
    dt = np.dtype(dtype)
    if dt.kind == "b":
        v = base % 3 == 0
    elif dt.kind == "f":
        v = ((base % 4093) - 2000).astype(dt) / dt.type(4)
    else:
        v = base.astype(dt)
    return np.ascontiguousarray(v.reshape((len(rows),) + tuple(row_shape)))


def local_values(store, row_shape, dtype, salt=0):
    """This rank's shard of a variable laid out by `layout`."""
    counts, offsets = layout(store.group_size)
    lo = offsets[store.group_rank]
    return values(np.arange(lo, lo + counts[store.group_rank]), row_shape, dtype, salt)


def same_bytes(a, b):
    """Bit-exact equality (NaN-safe, -0.0 != 0.0)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def make_store(comm, width=None, **kw):
    """A store with the suite's method (method 2 gets its own handshake dir)."""
    if METHOD == 2:
        kw.setdefault("handshake_dir", shared_tmpdir(comm))
    return PyDDStore(comm, METHOD, width, **kw)


def width_value(spec, size):
    """ddstore_width for a test parameter: '1', '2' or 'full' (None)."""
    if spec == "full":
        return None
    return int(spec)


def subprocess_env(extra=None):
    """Environment for launching a fresh mpiexec or python from a test:
    without the variables that tie a process to the current MPI job."""
    env = {}
    for k, v in os.environ.items():
        if k.startswith(("PMIX_", "OMPI_COMM_", "OMPI_UNIVERSE", "OMPI_FIRST", "OMPI_NUM_APP",
                         "OMPI_APP_", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_FILE_", "OMPI_MCA_orte_",
                         "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
                         "OMPI_MCA_mpi_", "OMPI_MCA_shmem_", "OMPI_MCA_btl_vader_",
                         "OMPI_MCA_opal_", "OMPI_MCA_ompi_", "OMPI_HOME", "ORTE_", "OPAL_",
                         "OMPI_LOCAL", "OMPI_WORLD_")):
            continue
        env[k] = v
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if extra:
        env.update(extra)
    return env
