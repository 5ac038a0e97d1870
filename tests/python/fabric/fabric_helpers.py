"""Shared helpers of the libfabric (methods 1 and 2) suite.

Row content is a pure function of (salt, global row, element), so a core
rank and a reader process in another job can both compute what any row must
hold and compare bit-exact.
"""
import contextlib
import os
import threading

import numpy as np

import pyddstore

from suite_helpers import environ, shared_tmpdir  # noqa: F401  (the suite imports them from here)

# Provider the suite runs on: DDSTORE_FABRIC (shm or tcp with FI_TCP_IFACE=lo
# on a single machine), shm by default.
PROVIDER = os.environ.get("DDSTORE_FABRIC") or "shm"

# Rows held by rank r (cycled): rank 1 holds none.
ROWS_PATTERN = (6, 0, 4, 3)

# (name, dtype, row shape, salt) of the variables the reader tests publish.
VARIABLES = (
    ("fab/f32", "float32", (3,), 1),
    ("fab/i64", "int64", (), 2),
    ("fab/u8", "uint8", (4097,), 3),
    ("label/record_array", "float64", (2, 2), 4),
)


def rows_of(rank, size):
    """Local row count of `rank` in a group of `size` ranks."""
    if size == 1:
        return 5
    return ROWS_PATTERN[rank % len(ROWS_PATTERN)]


def offsets(size):
    """Global index of each rank's first row, and the total, as an int64 array."""
    return np.concatenate([[0], np.cumsum([rows_of(r, size) for r in range(size)])]).astype(np.int64)


def values(rows, row_shape, dtype, salt):
    """Expected content of global `rows`: shape (len(rows),) + row_shape."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    k = int(np.prod(row_shape)) if row_shape else 1
    base = rows[:, None] * 257 + np.arange(k, dtype=np.int64)[None, :] * 13 + salt * 100003
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = ((base % 8191) - 4000).astype(dt) / dt.type(8)
    else:
        v = base.astype(dt)
    return np.ascontiguousarray(v.reshape((len(rows),) + tuple(row_shape)))


def local_values(rank, size, row_shape, dtype, salt):
    """Rank `rank`'s shard."""
    off = offsets(size)
    return values(np.arange(off[rank], off[rank + 1]), row_shape, dtype, salt)


def add_rows(store, rank, size, name, row_shape, dtype, salt):
    """Add rank `rank`'s shard of `name` to `store`; returns every row of
    `name`, as reads must give it back."""
    store.add(name, local_values(rank, size, row_shape, dtype, salt))
    return values(np.arange(offsets(size)[-1]), row_shape, dtype, salt)


def reader_env():
    """The environment of a process of "another job": no MPI launcher variables."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPI_LOCALRANK"))}


def through_fabric():
    """Stores created inside read other ranks' rows through libfabric even on
    one node (DDSTORE_NODE_LOCAL=0 disables the shared-memory shortcut)."""
    return environ(DDSTORE_NODE_LOCAL="0")


def read_in_threads(store, name, want, seeds, batches, most_rows):
    """get_batch of random rows of `name` from one thread per seed at once, each
    batch (1 to most_rows rows) checked bit-exact against `want` (every row);
    raises the first thread's error."""
    errors = []

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(batches):
                rows = rng.integers(0, len(want), size=int(rng.integers(1, most_rows + 1)))
                out = np.zeros((len(rows),) + want.shape[1:], dtype=want.dtype)
                store.get_batch(name, out, rows)
                assert out.tobytes() == want[rows].tobytes()
        except Exception as e:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def gather_store(comm, method=1, gather=None, hs=None):
    """A core store of `method` on the suite's provider with node shared
    memory off (every other rank's row through the provider) and
    DDSTORE_GATHER=`gather` (None: the default rule); `hs`: method 2's
    handshake directory."""
    kw = {"handshake_dir": hs} if hs else {}
    with environ(DDSTORE_NODE_LOCAL="0", DDSTORE_GATHER=gather):
        return pyddstore.PyDDStore(comm, method, fabric=PROVIDER, **kw)


@contextlib.contextmanager
def joined_reader(hs, n_core):
    """A method-2 reader (node shared memory off: every row through the
    provider) of the store published in `hs`, freed on exit."""
    with environ(DDSTORE_NODE_LOCAL="0"):
        r = pyddstore.join(handshake_dir=hs, n_core=n_core, timeout=30)
    try:
        yield r
    finally:
        r.free()
