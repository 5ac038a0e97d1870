"""DistDataset and DistDatasetReader: map-style datasets held in DDStore."""

import dataclasses
import logging
import os
import threading
import time

import numpy as np
import torch
from torch.utils.data import default_collate as _default_collate

from pyddstore.util import DDS_EMISMATCH

from . import _dtypes
from . import _progress
from . import _structure as st
from ._errors import DatasetStoreError
from ._loader_protocol import Columns, SampleBatch
from ._logging import logger
from ._storedataset import LoadPlan, StoreDataset, agreed_length, as_comm, check_chunk_size
from ._storedataset import raise_agreed as _raise_agreed
from .ragged import RaggedFields

_SUPPORTED_DEVICE_TYPES_TEXT = "'cpu', 'cuda' or 'cuda:<n>'"
# Bytes of samples per chunk when loading into files (storage_dir=) without chunk_size=.
_FILE_CHUNK_BYTES = 64 << 20


def _as_device(device, what):
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{what}={device!r} is not a device; pass {_SUPPORTED_DEVICE_TYPES_TEXT} "
                         "or a torch.device") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{what}={device!r}: CUDA is not available in this process; "
                         "pass device='cpu' or None")
    return dev


@dataclasses.dataclass(frozen=True)
class _LoadPlan(LoadPlan):
    """DistDataset's LoadPlan: also the fields to keep and how blocks are read."""

    fields: object = None      # list of keys/positions to keep (shorthand for an encode)
    use_range: bool = False    # read blocks with source.read_range(); decided by _load


class _FieldDataset(StoreDataset):
    """What DistDataset and DistDatasetReader add to StoreDataset: samples of
    fixed-shape fields (_structure), their buffers, and turning the columns
    StoreDataset reads into samples. Calls down to StoreDataset only.

    Subclasses set _name, _structure, _len, _device and _decode, then _store.
    """

    _ragged = None
    _conversions = None  # {field: dtype name} from dtypes=

    # ---- counters ------------------------------------------------------------
    def to_tensorboard(self, writer, step, prefix="ddstore/"):
        """Write stats() to a TensorBoard writer as scalars ``prefix + counter`` at `step`.

        writer: any object with ``add_scalar(tag, value, step)``, such as
        ``torch.utils.tensorboard.SummaryWriter``. Returns the dict written.
        Local: call it on the ranks whose counters you want (often rank 0).
        """
        self._check_open()
        return self._store.to_tensorboard(writer, step, prefix=prefix)

    @property
    def structure(self):
        """The stored sample structure (container, field keys, kinds, dtypes, shapes)."""
        return self._structure

    @property
    def shapes(self):
        """{key: shape} of each stored field of one sample (keys as in alloc():
        dict key, tuple/list position, or 0 for a single value), e.g.
        ``{"x": (2, 3), "y": ()}``."""
        shapes = {f.key: f.shape for f in self._structure.fields}
        if self._ragged is not None:
            shapes.update(self._ragged.shapes())
        return shapes

    @property
    def dtypes(self):
        """{key: numpy dtype} of each stored field (compares equal to its name,
        ``ds.dtypes["x"] == "float32"``); tensor fields give the numpy dtype
        of their torch dtype, bfloat16 tensor fields the name ``"bfloat16"``
        (numpy has no such dtype). Ragged fields are included."""
        dtypes = {f.key: f.user_dtype for f in self._structure.fields}
        if self._ragged is not None:
            dtypes.update(self._ragged.dtypes())
        return dtypes

    @property
    def ragged_axes(self):
        """{key: variable axis} of the variable-size fields ({} without ragged=)."""
        return {} if self._ragged is None else {k: self._ragged.axis(k) for k in self._ragged.keys}

    def _var_name(self, key):
        return f"{self._name}/{st.key_text(key)}"

    @property
    def _var(self):
        """Variable names of the stored fields, in field order (an attribute
        that code written for the original DDStore's torch layer reads)."""
        return [self._var_name(f.key) for f in self._structure.fields]

    def _key(self, j):
        """Key of the j-th stored field (as in the original DDStore)."""
        return self._structure.fields[j].key

    def _keys(self, fields):
        if fields is None:
            return self._structure.keys
        keys = list(fields)
        unknown = [k for k in keys if k not in self._structure.by_key]
        if unknown:
            raise KeyError(f"fields {unknown!r} are not fields of dataset {self._name!r}; "
                           f"its fields are {self._structure.keys!r}")
        return keys

    # ---- buffers -------------------------------------------------------------
    def _host_buffer(self, spec, n):
        # Pinned host memory when a CUDA device is the destination, so the copy
        # to the device is a DMA from pinned memory.
        if self._device is not None and self._device.type == "cuda" and spec.kind == st.TENSOR:
            return torch.empty((n,) + spec.shape, dtype=torch.from_numpy(
                np.empty(0, spec.dtype)).dtype, pin_memory=True).numpy()
        return np.empty((n,) + spec.shape, dtype=spec.dtype)

    def alloc(self, n, fields=None):
        """Buffers for reads of n rows.

        A dict keyed like the sample (dict key, or tuple/list position, or 0 for
        a single value) of one buffer per field, each registered once with
        register_recv() so reads into it skip memory registration. Pass to
        read_rows(out=) or __getitems__(out=); reads may use the first rows only.
        Samples read into these buffers are views into them: the caller decides
        when a buffer can be reused. release() unregisters them.
        """
        self._check_open()
        n = int(n)
        if n < 1:
            raise ValueError(f"alloc(n={n}): n must be at least 1 row")
        bufs = {}
        try:
            for k in self._keys(fields):
                buf = self._host_buffer(self._structure.by_key[k], n)
                self._store.register_recv(buf)
                bufs[k] = buf
        except BaseException:
            self.release(bufs)
            raise
        with self._alloc_lock:
            self._allocated[id(bufs)] = bufs
        return bufs

    def release(self, bufs):
        """Unregister buffers from alloc() (free() does it too).

        Releasing buffers that are not registered (released before, or not
        from alloc()) raises pyddstore.DDStoreKeyError (a KeyError and a
        ValueError) with methods 1/2, as the original DDStore did; method 0
        registers nothing and ignores it.
        """
        if bufs is None:
            return
        with self._alloc_lock:
            known = self._allocated.pop(id(bufs), None) is not None
        if self._store is None:
            return
        for buf in bufs.values():
            try:
                self._store.unregister_recv(buf)
            except KeyError:
                if not known:
                    raise
                # else: alloc() failed half-way and never registered this one

    def free(self):
        """Unregister alloc() buffers and free the store (collective for
        DistDataset). Idempotent."""
        if self._store is not None:
            self._release_all()
        super().free()

    def _release_all(self):
        with self._alloc_lock:
            allocated = list(self._allocated.values())
            self._allocated.clear()
        for bufs in allocated:
            for buf in bufs.values():
                try:
                    self._store.unregister_recv(buf)
                except Exception:  # noqa: BLE001 - freeing must go on
                    pass

    def _out_column(self, out, key, n):
        spec = self._structure.by_key[key]
        if key not in out:
            raise KeyError(f"out= has no buffer for field {key!r}; pass the dict from alloc() "
                           "with that field selected")
        buf = out[key]
        if isinstance(buf, torch.Tensor):
            if buf.device.type != "cpu":
                raise ValueError(f"out[{key!r}] is on {buf.device}; read buffers live in host memory "
                                 "(use alloc())")
            buf = buf.numpy()
        if (not isinstance(buf, np.ndarray) or buf.dtype != spec.dtype or buf.shape[1:] != spec.shape
                or buf.shape[0] < n or not buf.flags.c_contiguous):
            got = (f"{type(buf).__name__} dtype={getattr(buf, 'dtype', None)} "
                   f"shape={getattr(buf, 'shape', None)}")
            raise ValueError(f"out[{key!r}] ({got}) cannot hold {n} rows of field {key!r} "
                             f"({spec.describe()}); use alloc(n) with n >= {n}")
        return buf[:n]

    # ---- reads ---------------------------------------------------------------
    def _field_columns(self, rows, keys, out):
        """Host numpy columns (len(rows), *shape) of `keys`, read by StoreDataset
        (one get_batch per field) into `out`'s buffers or new ones."""
        n = len(rows)
        cols = {k: (self._out_column(out, k, n) if out is not None
                    else self._host_buffer(self._structure.by_key[k], n)) for k in keys}
        self._read_columns([(self._var_name(k), cols[k]) for k in keys], rows)
        return cols

    def _get_rows(self, rows, keys):
        """Non-collective read: one get() per run of consecutive rows."""
        cols = {}
        for k in keys:
            cols[k] = self._host_buffer(self._structure.by_key[k], len(rows))
            self._read_runs(self._var_name(k), cols[k], rows)
        return cols

    def _to_values(self, keys, cols):
        """Host columns -> values as given to users: tensors (on device) for tensor fields."""
        vals = {}
        for k in keys:
            col = cols[k]
            spec = self._structure.by_key[k]
            if spec.kind == st.TENSOR:
                t = _dtypes.as_tensor(col, spec.dtype_name)
                if self._device is not None and self._device.type != "cpu":
                    # Stage through host memory: libddstore reads into host memory
                    # (its providers are not asked for FI_HMEM). Synchronous, so the
                    # host buffer may be reused as soon as this returns.
                    t = t.to(self._device)
                vals[k] = t
            else:
                vals[k] = col
        return vals

    def read_rows(self, rows, fields=None, out=None):
        """Read stored rows (global sample indices; any order, repeats allowed).

        Reads the selected fields (default: all) with one get_batch() per field.
        Returns a dict keyed like alloc() of values shaped (len(rows),
        *field_shape): torch tensors (on device, if given) for tensor fields,
        numpy arrays otherwise; scalar fields give 1-D arrays. out: buffers from
        alloc() (at least len(rows) rows); the values are then views into them.

        Rows come back as stored: decode is not applied.

        With method=0 this is collective, like get_batch(): every rank calls it
        the same number of times, in the same order.
        """
        self._check_open()
        keys = self._keys(fields)
        return self._to_values(keys, self._field_columns(self._rows(rows), keys, out))

    def __getitem__(self, index):
        """Sample index, with the source's structure (not collective: one get() per field)."""
        self._check_open()
        i = self._index(index)
        keys = self._structure.keys
        cols = self._get_rows(np.array([i], dtype=np.int64), keys)
        vals = self._to_values(keys, cols)
        sample = st.build(self._structure,
                          [st.field_value(self._structure.by_key[k], vals[k], 0) for k in keys])
        if self._ragged is not None:
            self._ragged.fill([sample], [i], collective=False, device=self._device)
        if self._decode is not None:
            sample = self._decode(sample, i)
        return sample

    def __getitems__(self, indices, out=None):
        """A whole batch: one get_batch() per field (DDSTORE_BATCH_GET=0: one get() per sample).

        Called by DataLoader and ThreadDataLoader. out: buffers from alloc();
        the samples are then views into them. Returns a list of samples; without
        decode they are views into one column per field, which ThreadDataLoader
        hands to the model without stacking them again.
        """
        self._check_open()
        keys = self._structure.keys
        rows = self._rows(indices)
        vals = self._to_values(keys, self._field_columns(rows, keys, out))
        specs = self._structure.fields
        samples = [st.build(self._structure, [st.field_value(f, vals[f.key], j) for f in specs])
                   for j in range(len(rows))]
        if self._ragged is not None:
            # Two store calls per ragged field for the whole batch.
            self._ragged.fill(samples, rows, device=self._device)
        if self._decode is not None:
            samples = [self._decode(s, int(i)) for s, i in zip(samples, rows)]
        if self._decode is not None or self._ragged is not None or self._structure.has_records:
            # No columns to hand over (torch tensors hold no numpy records): the
            # loader's collate_fn gets the samples, as DataLoader's does.
            return SampleBatch(samples)
        cols = [v if isinstance(v, torch.Tensor) else torch.from_numpy(v) for v in
                (vals[f.key] for f in specs)]
        return SampleBatch(samples, Columns(self._structure, cols))

    # ---- the loader contract (_loader_protocol.LoaderDataset) -----------------
    def read_batch(self, indices, collate_fn, out=None):
        """The batch as Columns, for a loader that collates with torch's default
        collate: the same reads as __getitems__ without building a view per sample
        and field (a Python call and a tensor view each, which cost more than the
        read itself for small samples). None for any other collate_fn, and when
        samples need per-sample work (decode, ragged fields) or a subclass
        overrides __getitems__; decided before reading, so the caller's fallback
        to __getitems__ never reads twice."""
        if not self._reads_columns(collate_fn):
            return None
        self._check_open()
        return Columns(self._structure, self._read_tensors(self._rows(indices), out))

    def read_batches(self, batches, collate_fn):
        """Several batches (index lists) read together, as read_batch() gives each:
        one get_batch_vars() for all of them (one request per owner across hosts),
        each batch's columns a view into the columns read, which stay in memory
        while any of the batches is referenced. None when read_batch() would
        return None."""
        if not self._reads_columns(collate_fn):
            return None
        self._check_open()
        rows = [self._rows(b) for b in batches]
        cols = self._read_tensors(np.concatenate(rows), None)
        out, a = [], 0
        for r in rows:
            b = a + len(r)
            out.append(Columns(self._structure, [c[a:b] for c in cols]))
            a = b
        return out

    def reads_together(self, collate_fn):
        """Bytes per sample that read_batches() moves, or None when it would return None."""
        if not self._reads_columns(collate_fn):
            return None
        return sum(f.row_bytes for f in self._structure.fields)

    def _reads_columns(self, collate_fn):
        """Whether a batch read for `collate_fn` can be handed over as Columns."""
        return not (collate_fn is not _default_collate or self._decode is not None
                    or self._ragged is not None or self._structure.has_records
                    or type(self).__getitems__ is not _FieldDataset.__getitems__)

    def _read_tensors(self, rows, out):
        """Every field's column of `rows` as a tensor, in field order."""
        keys = self._structure.keys
        vals = self._to_values(keys, self._field_columns(rows, keys, out))
        return [v if isinstance(v, torch.Tensor) else torch.from_numpy(v)
                for v in (vals[f.key] for f in self._structure.fields)]

    # ---- for a dataset built on this one (WindowedDataset) ---------------------
    def _read_rows_apart(self, rows, keys):
        """Rows of `keys` as read_rows() gives them, read with non-collective
        get()s (WindowedDataset's ws[i]): any thread, any method."""
        self._check_open()
        return self._to_values(keys, self._get_rows(rows, keys))

    # ---- lifetime ------------------------------------------------------------
    def __reduce_ex__(self, protocol):
        # A DataLoader with spawn or forkserver workers pickles its dataset to send it to
        # them; without this, pickle fails deep inside with "cannot serialize
        # 'mpi4py.MPI.Intracomm'". A copy in another process could not use the store anyway:
        # the MPI communicators and the shards' memory belong to this process.
        raise TypeError(
            f"{type(self).__name__} {self._name!r} cannot be sent to another process (pickled): its "
            "store lives in this MPI process. A DataLoader with spawn or forkserver workers "
            "(multiprocessing_context=...) pickles its dataset; read in threads instead: "
            "pyddstore.torch.ThreadDataLoader(..., num_workers=N), or DataLoader(..., num_workers=0)")

    def __repr__(self):
        state = "freed" if self._store is None else f"{self._len} samples"
        return f"{type(self).__name__}({self._name!r}, {state}, {self._structure.describe()})"

    def _attach(self, store, name, structure, where):
        """Take dataset `name`, of sample `structure` (_read_structure), from
        `store`, which another job stored: a method-2 reader's joined store, or
        one reopened from its storage directory. Every field's variable must be
        there with the structure's row size and the dataset's row count. Local;
        the same outcome on every rank of a reopened store, which all see the
        same variables. `where` names the store in messages."""
        self._structure = structure
        self._len = int(store.query(self._var_name(self._structure.keys[0])).global_rows)
        for f in self._structure.fields:
            q = store.query(self._var_name(f.key))
            if q.global_rows != self._len or q.row_bytes != f.row_bytes:
                raise DatasetStoreError(
                    f"dataset {name!r}: variable {self._var_name(f.key)!r} has {q.global_rows} rows of "
                    f"{q.row_bytes} bytes, expected {self._len} rows of {f.row_bytes} bytes; {where} "
                    "holds another dataset of that name", DDS_EMISMATCH)

    def _init_reading(self):
        self._alloc_lock = threading.Lock()
        self._allocated = {}


class DistDataset(_FieldDataset):
    """A map-style dataset stored in DDStore across the ranks of comm.

    Each rank loads only its contiguous share of `source` into the store; every
    rank can then read any sample. Samples keep the source's structure (a
    tensor/array/number, a tuple or list of them, or a dict of them) and each
    field's shape and dtype: ds[i] gives tensors as tensors (on `device` if
    given), numpy arrays as arrays and numbers as numbers. Field k (dict key,
    tuple/list position, or 0 for a single value) is stored as variable
    ``name/k``; the structure itself as ``name/__structure__`` (JSON, read by
    DistDatasetReader). ``ds.ddstore`` is the underlying PyDDStore.

    Parameters:
      source: any map-style dataset (len(source), source[i]). A source with a
        bulk method ``read_range(start, stop)`` (one sample-shaped structure
        whose every field is stacked with leading dimension stop-start, numbers
        as 1-D arrays) is read with it instead of per-index __getitem__ (except
        with encode=, which needs real samples). Every sample must have the
        same structure, and each field the same shape and dtype (bool, uint8,
        int8, int16, uint16, int32, uint32, int64, uint64, float16, float32,
        float64, and bfloat16 for tensors; Python bool/int/float are stored as
        bool/int64/float64).
      name: dataset name.
      comm: MPI communicator (default MPI.COMM_WORLD); all its ranks construct
        the dataset together.
      ddstore_width: ranks per independent store (default: all of comm); each
        group holds a full copy of the dataset.
      device: put tensor fields of read samples on this device. Reads land in
        host memory (pinned for CUDA) and are copied to the device: libddstore
        does not read into GPU memory (FI_HMEM) yet. CUDA is untested here.
      add_device: keep this rank's share of tensor fields on this device; only
        host memory ('cpu') is possible with this libddstore (NotImplementedError
        for others).
      method: DDStore backend (default DDSTORE_METHOD or 0).
      handshake_dir: method=2 directory (default DDSTORE_HANDSHAKE_DIR or ./ddstore_hs).
      chunk_size: load this rank's share chunk_size samples at a time, writing
        each chunk into the store before reading the next, so only one chunk is
        held in memory besides the store (default: read the whole share, then
        add it). Host storage only.
      encode: encode(sample) -> sample applied to every source sample before it
        is stored; its result must meet the rules above.
      decode: decode(stored, index) -> sample applied to every sample read
        (ds[i], __getitems__), on the reading rank, in the loader thread.
        Not applied by read_rows() or WindowedDataset.
      fields: store only these keys (dict samples) or positions (tuple/list
        samples), in this order: shorthand for an encode that selects them.
        Not together with encode.
      ragged: {key: axis} for fields of dict samples whose size varies along
        one axis between samples, e.g. {"x": 0, "edge_index": 1} for node
        features (n_i, F) and edge lists (2, E_i); all else (other axes, dtype,
        kind) stays fixed. Stored flat with per-sample ranges (see
        pyddstore.torch.ragged): ds[i] and batches give every sample its own
        sizes, two store calls per ragged field per batch; batch them with
        collate_fn=RaggedCollate(ds.ragged_axes). At least one field must stay
        fixed-shape. Not readable by DistDatasetReader yet.
      dtypes: keyword-only. {key: dtype} (torch dtype, numpy dtype or name)
        converts these tensor/array fields before they are stored, e.g.
        {"pos": torch.float32} to halve float64 positions, or torch.bfloat16;
        samples come back in the converted dtype. Applied after encode/fields.
      progress: keyword-only. None (default: automatic), True or False: the
        rank-0 loading progress bar described below.
      storage_dir: keyword-only. Keep the dataset in files under this
        directory (node-local NVMe, a burst buffer or a parallel file system),
        mapped into memory, instead of in memory (default
        ``DDSTORE_STORAGE_DIR``; unset: memory): the page cache decides what
        stays in memory, so the dataset may be larger than memory. The share
        is then loaded in chunks of about 64 MiB (unless chunk_size= says
        otherwise), never whole, and saved when loaded, so that a later job
        reopens it with :meth:`DistDataset.open` without the source. The
        directory is locked while the dataset lives (docs/storage.rst).

    Errors while loading (a bad sample, a shape or dtype that differs between
    samples or ranks) are raised on every rank with the same message, naming
    the rank, the sample index, the field and both shapes/dtypes.

    With method=0, batched reads (__getitems__, read_rows) are collective
    where the store's group spans nodes (``ds.ddstore.reads_collective``):
    every rank must read the same number of batches (DistributedSampler does
    that) from one thread (ThreadDataLoader then does all reads of the
    dataset in one thread, in order); while a ThreadDataLoader iterates it,
    make no other batched read from another thread. ds[i] is never
    collective. Where the group shares one node's memory, method-0 batched
    reads are memory copies: not collective and thread-safe, as methods 1/2.

    Loading progress: with ``progress=True`` rank 0 of comm shows a tqdm bar on
    stderr over its own share (advanced per chunk with chunk_size=, else per
    block of samples); ``progress=False`` never shows one; ``progress=None``
    (default) follows DDSTORE_PROGRESS (1 on, 0 off) and, when that is unset,
    shows the bar only when stderr is an interactive terminal (Open MPI's
    mpiexec hands its ranks a pipe for stderr even from a terminal: use
    ``mpiexec -x DDSTORE_PROGRESS=1`` there). Ranks other than 0 never show a
    bar; without tqdm installed there is none. When done,
    every rank logs a load summary at DEBUG level on the ``pyddstore.torch``
    logger (see ``pyddstore.enable_logging``).

    Counters: ``ds.stats()`` gives the store's read counters (calls, rows and
    bytes read locally and remotely, seconds reading) and
    ``ds.to_tensorboard(writer, step)`` writes them to TensorBoard.
    """

    def __init__(self, source, name, comm=None, ddstore_width=None, device=None, add_device=None,
                 method=None, handshake_dir=None, chunk_size=None, encode=None, decode=None,
                 fields=None, ragged=None, *, dtypes=None, progress=None, storage_dir=None):
        from pyddstore import PyDDStore

        self._store = None
        self._name = name
        self._init_reading()
        comm = as_comm(comm)
        what = f"DistDataset {name!r}"

        def check_arguments():
            # Besides name and source (agreed_length checks those): the first
            # failure in this order is the one raised, on every rank.
            if encode is not None and fields is not None:
                raise ValueError("pass either fields= or encode=, not both (fields is a shorthand for "
                                 "an encode that selects them; select inside your encode instead)")
            if encode is not None and not callable(encode):
                raise TypeError("encode must be callable: encode(sample) -> sample")
            if decode is not None and not callable(decode):
                raise TypeError("decode must be callable: decode(stored, index) -> sample")
            if fields is not None:
                if isinstance(fields, (str, bytes, int)) or len(list(fields)) == 0:
                    raise ValueError("fields must be a non-empty list of dict keys or tuple/list "
                                     f"positions, got {fields!r}")
            self._conversions = _dtypes.check_conversions(dtypes, what)
            if ragged is not None:
                self._ragged = RaggedFields(ragged)
            _progress.check_argument(progress)
            check_chunk_size(chunk_size)
            self._device = _as_device(device, "device")
            add_dev = _as_device(add_device, "add_device")
            if add_dev is not None and add_dev.type != "cpu":
                if chunk_size is not None:
                    raise ValueError("chunk_size loads into host storage only; drop add_device= or "
                                     "chunk_size=")
                raise NotImplementedError(
                    f"add_device={add_device!r}: libddstore keeps variables in host memory only (no "
                    "device-memory variables / FI_HMEM registration yet); use add_device=None or 'cpu'")

        n_total, _ = agreed_length(comm, what, name, source, check_arguments,
                                   "; a DistDataset needs at least one sample")
        if fields is not None:
            fields = list(fields)

        self._decode = decode
        self._len = n_total
        store = PyDDStore(comm, method=method, ddstore_width=ddstore_width,
                          handshake_dir=handshake_dir, storage_dir=storage_dir)
        try:
            t0 = time.perf_counter()
            plan = _LoadPlan(source, encode=encode, fields=fields, chunk_size=chunk_size, what=what,
                             progress=progress)
            in_files = store.info()["storage"] == "files"
            self._load(store, comm, plan, in_files)
            if in_files:
                store.save()  # reopenable by a later job (DistDataset.open)
            self._log_loaded(store, time.perf_counter() - t0)
        except BaseException:
            try:
                store.free()
            finally:
                self._store = None
            raise
        self._store = store

    @classmethod
    def open(cls, storage_dir, name, comm=None, ddstore_width=None, *, device=None, method=None,
             handshake_dir=None, decode=None):
        """Reopen DistDataset `name` that an earlier job built with
        ``storage_dir=`` (and so saved), without its source: collective over
        `comm` (default MPI.COMM_WORLD), which may have any number of ranks.

        Nothing is loaded or copied: each rank maps a range of the saved files
        (pyddstore.PyDDStore.open), so the time does not grow with the dataset;
        rows are read as from the dataset that was built, bit for bit. The
        dataset is read-only. ddstore_width, device, method, handshake_dir,
        decode: as for the constructor (the encode, fields= and dtypes= of the
        job that built it were applied before it was stored).

        A missing, unsaved, truncated, corrupt, foreign or stale directory, or
        one another job is writing, raises on every rank naming the directory
        and what is wrong (see PyDDStore.open); a directory without dataset
        `name` raises KeyError naming the datasets it holds. The directory
        stays locked (shared: other jobs may reopen it too) until free().
        ``ds.ddstore.verify_saved()`` checks every row against the checksums
        saved with it.

        The two-job workflow::

            # job 1, once:  DistDataset(source, "train", storage_dir="/nvme/train").free()
            # job 2, many:  ds = DistDataset.open("/nvme/train", "train")
        """
        from pyddstore import PyDDStore

        comm = as_comm(comm)
        what = f"DistDataset {name!r}"
        self = cls.__new__(cls)
        self._store = None
        self._name = name
        self._init_reading()
        err = None
        try:
            if not isinstance(name, str) or not name or name.endswith("/"):
                raise ValueError(f"name must be a non-empty str not ending in '/', got {name!r}")
            if decode is not None and not callable(decode):
                raise TypeError("decode must be callable: decode(stored, index) -> sample")
            self._device = _as_device(device, "device")
        except Exception as e:  # noqa: BLE001 - agreed, then raised on every rank
            err = e
        _raise_agreed(comm, err, what)
        store = PyDDStore.open(storage_dir, comm, method, ddstore_width, handshake_dir=handshake_dir)
        err = None
        try:
            names = store.names()
            if f"{name}/{st.STRUCTURE_SUFFIX}" not in names:
                held = sorted(n[: -len(st.STRUCTURE_SUFFIX) - 1] for n in names
                              if n.endswith("/" + st.STRUCTURE_SUFFIX))
                raise KeyError(f"storage directory {os.fspath(storage_dir)} holds no dataset {name!r} "
                               f"(it holds {held})")
            self._attach(store, name, _read_structure(store, name),
                         f"storage directory {os.fspath(storage_dir)}")
            self._ragged = RaggedFields.from_store(store, name)
            self._decode = decode
        except Exception as e:  # noqa: BLE001 - agreed, then raised on every rank
            err = e
        try:
            _raise_agreed(comm, err, what)
        except BaseException:
            store.free()
            raise
        self._store = store
        return self

    # ---- loading ---------------------------------------------------------------
    def _prepare(self, sample, plan, index):
        if plan.encode is not None:
            sample = plan.encode(sample)
        elif plan.fields is not None:
            sample = st.select(sample, plan.fields, index)
        if self._conversions is not None:
            sample = self._convert(sample, index)
        if self._ragged is not None:
            # The variable-size fields go to self._ragged, the rest on the fixed-shape path.
            sample = self._ragged.take(sample, index)
        return sample

    def _convert(self, sample, index):
        """The sample with the dtypes= conversions applied (a new container)."""
        container, items, tt = st.container_of(sample, index)
        have = {k for k, _ in items}
        missing = [k for k in self._conversions if k not in have]
        if missing:
            raise KeyError(f"dtypes= names fields {missing!r} that sample {index} lacks (its fields: "
                           f"{[k for k, _ in items]!r})")
        values = [_dtypes.convert(v, self._conversions[k], f"sample {index}, field {k!r}")
                  if k in self._conversions else v for k, v in items]
        if container == st.SINGLE:
            return values[0]
        if container == st.DICT:
            return dict(zip((k for k, _ in items), values))
        if container == st.LIST:
            return values
        return tt(*values) if tt is not None else tuple(values)

    def _log_loaded(self, store, seconds):
        if not logger.isEnabledFor(logging.DEBUG):  # skip the query() when nobody listens
            return
        keys = self._structure.keys
        local = store.query(self._var_name(keys[0])).local_rows
        row_bytes = sum(f.row_bytes for f in self._structure.fields)
        info = store.info()
        logger.debug("%s %r: loaded %d of %d samples (%d fields, %d bytes/sample, %.1f MB here, in %s, "
                     "%.1f MB resident) in %.3f s; method %d, group %d rank %d of %d",
                     type(self).__name__, self._name, local, self._len, len(keys), row_bytes,
                     local * row_bytes / 1e6, _progress.where(store), info["resident_bytes"] / 1e6,
                     seconds, store.method, store.group_index, store.group_rank, store.group_size)

    def _load(self, store, comm, plan, in_files=False):
        source, chunk_size, what = plan.source, plan.chunk_size, plan.what
        n = self._len
        g, gsize = store.group_rank, store.group_size
        start, stop = n * g // gsize, n * (g + 1) // gsize

        # 1. Structure from each rank's first sample; all ranks must agree.
        # That sample is kept for step 2, so each sample of the share is read
        # from the source (and encoded) exactly once.
        err, structure = None, None
        first = {}
        try:
            if stop > start:
                first[start] = self._prepare(source[start], plan, start)
                structure = st.structure_of(first[start], start)
        except Exception as e:  # noqa: BLE001
            err = e
        _raise_agreed(comm, err, what)
        gathered = comm.allgather(None if structure is None else (start, structure.to_json()))
        ref = next(x for x in gathered if x is not None)
        for rank, x in enumerate(gathered):
            if x is not None and x[1] != ref[1]:
                a = st.Structure.from_json(ref[1])
                b = st.Structure.from_json(x[1])
                raise ValueError(f"{what}: {_difference(a, ref[0], b, x[0])} (seen on rank {rank}); "
                                 "every sample must have the same structure, shapes and dtypes")
        local_tt = None if structure is None else structure.tuple_type
        structure = st.Structure.from_json(ref[1])
        if local_tt is not None:
            # JSON keeps a namedtuple by name only; keep the source's own class
            # where this rank saw it, so samples come back as that class.
            structure.tuple_type = local_tt
        for f in structure.fields:
            if f.row_bytes == 0:
                raise ValueError(f"{what}: field {f.key!r} has shape {f.shape} (no elements); "
                                 "drop it with fields= or encode=")
        self._structure = structure
        if in_files and chunk_size is None:
            # Files may hold more than memory: never the whole share at once.
            chunk_size = max(1, _FILE_CHUNK_BYTES // max(1, sum(f.row_bytes for f in structure.fields)))

        # 2. This rank's share, whole or chunk by chunk.
        plan = dataclasses.replace(plan, use_range=(
            plan.encode is None and self._ragged is None
            and callable(getattr(source, "read_range", None))))
        nloc = stop - start
        bar = None
        if chunk_size is None:
            err, cols = None, None
            try:
                bar = _progress.bar(nloc, progress=plan.progress, rank=comm.Get_rank(),
                                    desc=f"{what} loading into {_progress.where(store)}")
                cols = self._read_block(plan, start, stop, None, bar, first=first)
            except Exception as e:  # noqa: BLE001
                err = e
            finally:
                if bar is not None:
                    bar.close()
            _raise_agreed(comm, err, what)
            for f in structure.fields:
                store.add(self._var_name(f.key), np.ascontiguousarray(cols[f.key]),
                          dtype="bfloat16" if f.dtype_name == _dtypes.BFLOAT16 else None)
            del cols
        else:
            for f in structure.fields:
                store.init(self._var_name(f.key), nloc, f.row_bytes, 1)
            err = None
            bufs = {f.key: np.empty((min(chunk_size, max(nloc, 1)),) + f.shape, f.dtype)
                    for f in structure.fields}
            try:
                bar = _progress.bar(nloc, progress=plan.progress, rank=comm.Get_rank(),
                                    desc=f"{what} loading into {_progress.where(store)}")
                resident = _progress.Residency(bar, store)
                for a in range(start, stop, chunk_size):
                    b = min(a + chunk_size, stop)
                    cols = self._read_block(plan, a, b, bufs, first=first)
                    for f in structure.fields:
                        store.update(self._var_name(f.key), cols[f.key], a - start)
                    del cols
                    bar.update(b - a)
                    resident.show()
                resident.show(final=True)
            except Exception as e:  # noqa: BLE001
                err = e
            finally:
                if bar is not None:
                    bar.close()
            del bufs
            _raise_agreed(comm, err, what)
            store.sync()

        if self._ragged is not None:
            self._ragged.store(store, comm, self._name, start, stop)

        # 3. The structure, for readers in other jobs (held by the group's rank 0).
        js = structure.to_json().encode() if g == 0 else b""
        store.add(f"{self._name}/{st.STRUCTURE_SUFFIX}", np.frombuffer(js, dtype=np.uint8).copy())

    def _read_block(self, plan, a, b, bufs, bar=None, *, first=None):
        """Samples a..b-1 as host arrays {key: (b-a, *shape)}, checked against self._structure.

        bar: a progress bar advanced as samples are read (None: none).
        first: {index: prepared sample} already read from the source (the
        structure probe); such a sample is taken from it (and dropped from it)
        instead of being read and encoded a second time.
        """
        source, fields, structure = plan.source, plan.fields, self._structure
        m = b - a
        out = {f.key: (bufs[f.key][:m] if bufs is not None else np.empty((m,) + f.shape, f.dtype))
               for f in structure.fields}
        if m == 0:
            return out
        if plan.use_range:
            block = source.read_range(a, b)
            if fields is not None:
                block = st.select(block, fields, f"{a}..{b - 1}")
            if self._conversions is not None:
                block = self._convert(block, f"{a}..{b - 1}")
            container, items, _ = st.container_of(block, f"{a}..{b - 1}")
            keys = [k for k, _ in items]
            if container != structure.container or keys != structure.keys:
                raise ValueError(f"samples {a}..{b - 1}: read_range() gave a {container} with fields "
                                 f"{keys} where the samples are a {structure.container} with fields "
                                 f"{structure.keys}")
            for (k, v), f in zip(items, structure.fields):
                arr = st.as_numpy(v)
                ok_dtype = arr.dtype == f.dtype or (
                    f.kind == st.NUMBER and np.can_cast(arr.dtype, f.dtype, "safe"))
                if arr.shape != (m,) + f.shape or not ok_dtype:
                    raise ValueError(
                        f"samples {a}..{b - 1}, field {k!r}: read_range() gave dtype={arr.dtype} "
                        f"shape={arr.shape}, expected dtype={f.dtype.name} shape={(m,) + f.shape}")
                if bufs is None and arr.dtype == f.dtype and arr.flags.c_contiguous:
                    out[k] = arr  # store.add() copies it: no intermediate copy of the share
                elif f.record is not None:
                    _dtypes.copy_records(out[k], arr)
                else:
                    out[k][...] = arr
            if bar is not None:
                bar.update(m)
            return out
        # Advance the bar per block of samples, not per sample: a bar update
        # costs far more than copying a small sample.
        step = max(1, min(4096, m // 100))
        done = 0
        for j, i in enumerate(range(a, b)):
            if first and i in first:
                sample = first.pop(i)
            else:
                sample = self._prepare(source[i], plan, i)
            for spec, value in st.items_of(sample, structure, i):
                dest = out[spec.key]
                if spec.kind == st.TENSOR:
                    dest[j] = _dtypes.tensor_to_numpy(value)
                elif spec.record is not None:
                    _dtypes.copy_records(dest[j:j + 1], value)
                else:
                    dest[j] = value
            if bar is not None and j + 1 - done >= step:
                bar.update(j + 1 - done)
                done = j + 1
        if bar is not None and m > done:
            bar.update(m - done)
        return out


def _read_structure(store, name):
    """The sample structure dataset `name` stored in `store` (its ``__structure__``
    variable; one get, never collective)."""
    meta = f"{name}/{st.STRUCTURE_SUFFIX}"
    info = store.query(meta)
    buf = np.empty(info.global_rows, dtype=np.uint8)
    store.get(meta, buf, 0)
    return st.Structure.from_json(buf.tobytes().decode())


def _difference(a, ia, b, ib):
    """Text naming the first difference between the structures of samples ia and ib."""
    if a.container != b.container:
        return f"sample {ib} is a {b.container} but sample {ia} is a {a.container}"
    if a.keys != b.keys:
        return f"sample {ib} has fields {b.keys} but sample {ia} has fields {a.keys}"
    for fa, fb in zip(a.fields, b.fields):
        if fa != fb:
            return (f"sample {ib}, field {fb.key!r}: {fb.describe()} differs from {fa.describe()} "
                    f"of sample {ia}")
    return f"samples {ia} and {ib} differ"


class DistDatasetReader(_FieldDataset):
    """A DistDataset published by a method=2 core group, joined from a separate job.

    No MPI communicator is needed: the reader joins the core group's store
    through the shared handshake directory and reads like a method-1 store
    (reads are never collective, so any number of loader threads may read in
    parallel). Samples have the structure the core group stored (after its
    encode), with tensors on `device` if given.

    Parameters:
      name: the core group's dataset name.
      handshake_dir: shared directory (default DDSTORE_HANDSHAKE_DIR or ./ddstore_hs).
      n_core: number of core ranks (default DDSTORE_N_CORE).
      device: put tensor fields of read samples on this device (staged
        through host memory, as for DistDataset).
      decode: as for DistDataset (the core group's encode already ran before storing).

    Waits up to DDSTORE_HANDSHAKE_TIMEOUT_S (default 300 s) for the core group
    to publish.
    """

    def __init__(self, name, handshake_dir=None, n_core=None, device=None, decode=None):
        from pyddstore import join

        self._store = None
        self._name = name
        self._init_reading()
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be the core group's dataset name (a non-empty str), got {name!r}")
        if decode is not None and not callable(decode):
            raise TypeError("decode must be callable: decode(stored, index) -> sample")
        self._device = _as_device(device, "device")
        self._decode = decode
        meta = f"{name}/{st.STRUCTURE_SUFFIX}"
        store = join(meta, handshake_dir=handshake_dir, n_core=n_core)
        try:
            structure = _read_structure(store, name)
            store.join([self._var_name(f.key) for f in structure.fields])
            self._attach(store, name, structure, "the handshake directory")
            self._store = store
        except BaseException:
            self._store = None
            store.free()
            raise


__all__ = ["DistDataset", "DistDatasetReader"]
