"""What the store-backed datasets share: pyddstore.torch.DistDataset
(dataset.py) and the graph DistDataset (geometric/dataset.py), and their readers.

* Their loading: the :class:`LoadPlan` every loading step reads from (each
  dataset extends it with what only it needs), :func:`agreed_length`, the
  constructor's argument checks agreed among the ranks, and
  :func:`raise_agreed`, the "agree, then raise" rule of loading, so an error
  on one rank fails every rank alike instead of leaving the others in the
  next collective call.
* Their reading side: :class:`StoreDataset`, the one class that reads
  their columns from the store (length, name, store, counters, the loader
  contract, the freed check, index handling, reads, lifetime).
"""

import dataclasses
import os

import numpy as np
import torch

from pyddstore import DDStoreError, DDStoreStateError
from pyddstore.util import agree
from pyddstore.util import DDS_ESTATE

from ._errors import DatasetStoreError, FieldNotFoundError


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    """What a dataset's loading steps all read from: its source and the loading arguments."""

    source: object
    encode: object = None      # encode(sample) -> sample, applied before storing
    chunk_size: object = None  # samples per chunk written to the store; None: the whole share
    what: str = ""             # the dataset as error messages name it
    progress: object = None    # the progress= argument (rank 0's loading bar)


# The classes another rank's error is raised as, by name (any other: RuntimeError).
_EXC_TYPES = {t.__name__: t for t in (ValueError, TypeError, KeyError, IndexError, RuntimeError,
                                      NotImplementedError, MemoryError, OSError, FieldNotFoundError)}


def raise_agreed(comm, err, what):
    """Raise the same exception on every rank of comm when any rank has err.

    Collective. err is the local exception or None. The message names the
    rank that failed first, so every rank reports the same cause. A store
    error (pyddstore.DDStoreError) there is a DatasetStoreError everywhere,
    with its code: a DDStoreError, and the RuntimeError it always was.
    """
    local = None if err is None else (
        type(err).__name__, str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err),
        err.code if isinstance(err, DDStoreError) else None)

    def raise_failed(failures):
        rank, (tname, text, code) = failures[0]
        exc_t = _EXC_TYPES.get(tname, RuntimeError)
        if exc_t is RuntimeError and tname != "RuntimeError":
            text = f"{tname}: {text}"
        message = f"{what}: on rank {rank}: {text}"
        if code is not None:
            # No DDStoreError class is in _EXC_TYPES: exc_t is RuntimeError here.
            raise DatasetStoreError(message, code) from err
        raise exc_t(message) from err

    agree(comm, err, local, raise_failed, raise_own=False)


def as_comm(comm):
    """`comm`, or MPI.COMM_WORLD for None; TypeError for anything but an mpi4py communicator."""
    from mpi4py import MPI

    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
    return comm


def check_chunk_size(chunk_size):
    """ValueError unless chunk_size (samples loaded at a time) is None or a positive int."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def agreed_length(comm, what, name, source, check_arguments, empty_text=""):
    """len(source), the same on every rank of comm, after the constructor's argument checks.

    Collective. Checks `name`, then calls ``check_arguments()`` (the dataset's
    own checks; what it returns is returned too), then that `source` is
    map-style; a failure on any rank is raised on every rank (raise_agreed),
    so a bad argument on one rank never leaves the others waiting in the
    store's collective constructor. Returns ``(len(source), checked)``.
    ValueError when the ranks' lengths differ or the source is empty
    (`empty_text` ends that message).
    """
    err, n_total, checked = None, None, None
    try:
        if not isinstance(name, str) or not name or name.endswith("/"):
            raise ValueError(f"name must be a non-empty str not ending in '/', got {name!r}")
        checked = check_arguments()
        if not hasattr(source, "__len__") or not hasattr(source, "__getitem__"):
            raise TypeError(f"source must be a map-style dataset (len(source), source[i]), got "
                            f"{type(source).__name__}")
        n_total = len(source)
    except Exception as e:  # noqa: BLE001 - agreed below, then raised on every rank
        err = e
        n_total = None
    raise_agreed(comm, err, what)
    lens = comm.allgather(n_total)
    if len(set(lens)) != 1:
        raise ValueError(f"{what}: len(source) differs between ranks ({lens}); every rank must "
                         "pass the same source")
    if n_total == 0:
        raise ValueError(f"{what}: the source is empty{empty_text}")
    return n_total, checked


def batch_get_enabled():
    """DDSTORE_BATCH_GET (default 1); 0: one get() per sample instead of get_batch.
    Read per call so a test or a user can switch it without rebuilding the dataset."""
    return os.environ.get("DDSTORE_BATCH_GET", "1").strip() != "0"


class StoreDataset(torch.utils.data.Dataset):
    """The reading side of the store-backed datasets and their readers: the one
    class that reads their columns from the store.

    pyddstore.torch.DistDataset / DistDatasetReader (dataset.py, through its
    _FieldDataset) and the graph ones (geometric/dataset.py) extend it; it
    calls only the store, never back into them. It implements the loader
    contract (_loader_protocol.LoaderDataset): ordered_reads() from the
    store's own rule (``store.reads_collective``), read_batch() None here
    (subclasses that read a batch as columns override it).

    Subclasses set _name and _len, and _store once the store holds the
    dataset (None before that and once freed).
    """

    _store = None
    _ordered_owner = None  # ThreadDataLoader's owner slot (_loader_protocol, section 2)

    def __len__(self):
        return self._len

    @property
    def ddstore(self):
        """The underlying PyDDStore."""
        return self._store

    @property
    def name(self):
        """The dataset name; its fields are stored as variables ``name/...``."""
        return self._name

    def stats(self):
        """This process's read counters of the underlying store (PyDDStore.stats()).

        A dict: read_calls, rows_local, rows_remote, bytes_local, bytes_remote,
        read_seconds, gather_requests, gather_bytes, counted since the store
        was created or last reset (``ds.ddstore.reset_stats()``). Local: not collective.
        """
        self._check_open()
        return self._store.stats()

    # ---- the loader contract (_loader_protocol.LoaderDataset) -----------------
    def ordered_reads(self):
        """Self when batched reads are group-collective (libddstore's rule,
        ``store.reads_collective``: method 0 across nodes), else None:
        ThreadDataLoader then makes them in one thread, in order."""
        store = self._store
        return self if store is not None and store.reads_collective else None

    def read_batch(self, indices, collate_fn, out=None):
        """The batch as columns `collate_fn` collates, or None: read with __getitems__."""
        return None

    # ---- checks ----------------------------------------------------------------
    def _check_open(self):
        if self._store is None:
            # The store's own class for a call on a freed store (a RuntimeError, as before).
            raise DDStoreStateError(f"dataset {self._name!r} was freed; create it again to read from it",
                                    DDS_ESTATE)

    def _index(self, i):
        """Sample index i of ds[i] as an int in range (IndexError otherwise): a
        single-sample read is never collective, so it is checked here."""
        try:
            i = int(i.__index__())
        except (AttributeError, TypeError):
            if isinstance(i, torch.Tensor) and i.numel() == 1 and not i.is_floating_point():
                i = int(i.item())
            else:
                raise TypeError(f"sample index must be an integer, not {type(i).__name__}") from None
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"sample index {i} out of range for dataset {self._name!r} of "
                             f"{self._len} samples")
        return i

    def _rows(self, indices):
        """Batch indices -> int64 rows, negatives from the end (as Python
        indexing): what only Python knows. The range is the store's check
        (libddstore's get_batch checks every row and, where the read is
        group-collective, fails it on every rank of the group); an index
        below -len stays as given, so its message names it."""
        if isinstance(indices, torch.Tensor):
            indices = indices.detach().cpu().numpy()
        rows = np.array(indices, dtype=np.int64, copy=True).reshape(-1)
        rows[(rows < 0) & (rows >= -self._len)] += self._len
        return rows

    # ---- reads ---------------------------------------------------------------
    def _read_columns(self, reads, rows):
        """Read `rows` of each (variable, buffer) of `reads` into the buffer (at
        least len(rows) rows): one get_batch_vars() for all of them (methods 1
        and 2: one request per owner for every field; method 0: one
        group-collective read for every field where the store's reads are);
        DDSTORE_BATCH_GET=0: one get() per row."""
        reads = list(reads)
        if batch_get_enabled():
            self._store.get_batch_vars([var for var, _ in reads], [buf for _, buf in reads], rows)
            return
        for var, buf in reads:
            for j, r in enumerate(rows.tolist()):
                self._store.get(var, buf[j:j + 1], r)

    def _read_runs(self, var, buf, rows):
        """Read `rows` of `var` into `buf` with one non-collective get() per run of
        consecutive rows (any thread, any method)."""
        n = len(rows)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1 if n > 1 else np.empty(0, np.int64)
        bounds = [0, *breaks.tolist(), n]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                self._store.get(var, buf[a:b], int(rows[a]))

    # ---- lifetime ------------------------------------------------------------
    def free(self):
        """Free the store (collective for a dataset over a communicator). Idempotent."""
        store = self._store
        if store is None:
            return
        self._store = None
        store.free()

    def close(self):
        """Same as free()."""
        self.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False
