"""ThreadDataLoader: a DataLoader whose workers are threads."""

import os
import queue
import threading
import typing
import warnings

import torch
from torch.utils.data import DataLoader
from torch.utils.data import _utils as _dl_utils
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind, _SingleProcessDataLoaderIter

from . import _loader_protocol as loader_protocol

_default_collate = _dl_utils.collate.default_collate
# The type of the loader's items, as torch's DataLoader is Generic[T_co].
T_co = typing.TypeVar("T_co", covariant=True)


def _affinity_sets(n_threads):
    """CPU sets for worker threads from DDSTORE_AFFINITY_WIDTH/_OFFSET, or None."""
    width = os.environ.get("DDSTORE_AFFINITY_WIDTH", "").strip()
    if not width:
        return None
    offset = os.environ.get("DDSTORE_AFFINITY_OFFSET", "0").strip() or "0"
    try:
        width, offset = int(width), int(offset)
    except ValueError:
        raise ValueError(f"DDSTORE_AFFINITY_WIDTH={width!r} / DDSTORE_AFFINITY_OFFSET={offset!r} must be "
                         "integers (CPUs per worker thread, first CPU index)") from None
    if width < 1 or offset < 0:
        raise ValueError(f"DDSTORE_AFFINITY_WIDTH must be >= 1 and DDSTORE_AFFINITY_OFFSET >= 0, got "
                         f"{width} and {offset}")
    if not hasattr(os, "sched_setaffinity"):
        raise NotImplementedError("DDSTORE_AFFINITY_WIDTH needs os.sched_setaffinity (Linux); unset it")
    cpus = sorted(os.sched_getaffinity(0))
    need = offset + n_threads * width
    if need > len(cpus):
        raise ValueError(
            f"DDSTORE_AFFINITY_WIDTH={width}, DDSTORE_AFFINITY_OFFSET={offset} with {n_threads} worker "
            f"thread(s) need {need} CPUs but this process may run on {len(cpus)} ({cpus}); lower the "
            "width, the offset or num_workers")
    return [cpus[offset + i * width: offset + (i + 1) * width] for i in range(n_threads)]


class _Run:
    """State of one iteration (epoch) over the loader: its results and counters."""

    def __init__(self, core, ordered_ds, sampler_iter, fetcher):
        self.core = core
        self.ordered_ds = ordered_ds
        self.sampler_iter = sampler_iter
        self.fetcher = fetcher
        self.cond = threading.Condition()
        self.results = {}
        self.submitted = 0
        self.processed = 0
        self.cancelled = False
        self.finished = False      # the user saw StopIteration, or the run was drained
        self.sampler_done = False

    def put(self, seq, results):
        """Hand over the results of batches seq, seq+1, ... (one wake-up for all)."""
        with self.cond:
            if not self.cancelled:
                for i, result in enumerate(results):
                    self.results[seq + i] = result
            self.processed += len(results)
            self.cond.notify_all()

    def wait_processed(self):
        with self.cond:
            self.cond.wait_for(lambda: self.processed >= self.submitted)

    def drain(self):
        """Settle a run cut short (method 0): stop submitting and wait for the
        reads this rank has in flight.

        Not collective, so it never waits for a rank that is elsewhere (in
        ds.free(), or still iterating): libddstore matches collective reads
        one by one across ranks, whatever epoch they belong to, so the reads
        in flight here complete as the other ranks read, and a rank in
        ds.free() takes part in the reads the others still make. An agreement
        here (an allreduce of the reads started) hung when a rank that had
        finished its epoch was in ds.free() instead.
        """
        if self.finished:
            return
        with self.cond:
            self.cancelled = True
            self.sampler_done = True
            self.results.clear()
            self.cond.notify_all()
        self.wait_processed()
        self.finished = True
        loader_protocol.release_ordered_reads(self.ordered_ds, self)


class _Core:
    """Threads, queues and buffers of a ThreadDataLoader.

    Kept apart from the loader so worker threads hold no reference to it and
    deleting the loader can close them.
    """

    def __init__(self, loader, reuse_buffers, collate_copies):
        self.dataset = loader.dataset
        self.kind = loader._dataset_kind
        self.auto_collation = loader._auto_collation
        self.collate_fn = loader.collate_fn
        self.drop_last = loader.drop_last
        self.worker_init_fn = loader.worker_init_fn
        self.n_threads = max(1, loader.num_workers)
        pf = loader._read_ahead
        self.depth = max(1, self.n_threads * pf)
        self.fast_collate = self.collate_fn is _default_collate
        self.reuse = reuse_buffers
        self.affinity = _affinity_sets(self.n_threads)
        self.reader = loader._loader_dataset
        self.ordered_ds = loader._ordered_ds
        self.seed_drawn = False
        # Reads in one thread in order: collective reads (store.reads_collective), and iterable
        # datasets (one shared iterator).
        self.ordered = self.ordered_ds is not None or self.kind == _DatasetKind.Iterable
        # Batches a thread reads together (one request per owner, or one collective read, for
        # all of them): half of its read-ahead (ThreadDataLoader._sample_nbytes_together says
        # when). The same on every rank that has the same batch_size, so collective reads
        # still pair.
        self.group = loader_protocol.batches_per_read(loader._sample_nbytes_together, loader.batch_size, pf)
        self.lock = threading.Lock()
        self.threads = []
        self.tasks = queue.Queue()
        self.collate_q = queue.Queue()
        self.pool = None
        self.pool_sets = []
        self.runs = []
        self.closed = False
        if reuse_buffers:
            self.pool = queue.Queue()
            for _ in range(self.n_threads):
                bufs = self.dataset.alloc(loader.batch_size)
                self.pool_sets.append(bufs)
                self.pool.put(bufs)

    # ---- threads -------------------------------------------------------------
    def start(self):
        with self.lock:
            if self.closed:
                raise RuntimeError("this ThreadDataLoader was closed; create a new one to iterate again")
            if self.threads:
                return
            ready = threading.Barrier(self.n_threads + (1 if self.ordered else 0) + 1)
            errors = []
            for i in range(self.n_threads):
                t = threading.Thread(target=self._worker, args=(i, ready, errors), daemon=True,
                                     name=f"ThreadDataLoader-{i}")
                t.start()
                self.threads.append(t)
            if self.ordered:
                t = threading.Thread(target=self._reader, args=(ready, errors), daemon=True,
                                     name="ThreadDataLoader-reader")
                t.start()
                self.threads.append(t)
            ready.wait()
            if errors:
                raise errors[0]

    def _setup_thread(self, i, ready, errors, init=True):
        try:
            if self.affinity is not None:
                os.sched_setaffinity(threading.get_native_id(), self.affinity[i])
            if self.worker_init_fn is not None and init:
                self.worker_init_fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by start()
            errors.append(e)
        finally:
            ready.wait()

    def _worker(self, i, ready, errors):
        self._setup_thread(i, ready, errors)
        source = self.collate_q if self.ordered else self.tasks
        while True:
            item = source.get()
            if item is None:
                return
            if self.ordered:
                run, seq, fetched, bufs = item
            else:
                run, seq, indices = item
                if run.cancelled:
                    run.put(seq, [None] * len(indices))
                    continue
                bufs = self.pool.get() if self.pool is not None else None
                fetched = self.fetch_group(run.fetcher, indices, bufs)
            results = []
            try:
                for ok, data in fetched:
                    try:
                        if ok and not run.cancelled:
                            data = self.finish_batch(data)
                        results.append((ok, data))
                    except BaseException as e:  # noqa: BLE001
                        results.append((False, e))
            finally:
                if bufs is not None:
                    self.pool.put(bufs)
            run.put(seq, results)

    def _reader(self, ready, errors):
        # The one thread that reads for an ordered dataset; shares worker 0's CPUs.
        self._setup_thread(0, ready, errors, init=False)
        while True:
            item = self.tasks.get()
            if item is None:
                return
            run, seq, indices = item
            bufs = self.pool.get() if self.pool is not None else None
            fetched = self.fetch_group(run.fetcher, indices, bufs)
            if run.cancelled:
                if bufs is not None:
                    self.pool.put(bufs)
                run.put(seq, [None] * len(indices))
            else:
                self.collate_q.put((run, seq, fetched, bufs))

    # ---- per batch -----------------------------------------------------------
    def fetch_group(self, fetcher, indices, bufs):
        """Read the batches `indices` (a list of batch indices), uncollated, as a
        list of (ok, data or exception). Several batches are read together when the
        dataset can (read_batches). If that read refuses an index (out of range, not
        an integer) the batches are read one by one, so that each gets its own result
        or error as without grouping; collective reads refuse on every rank, so every
        rank reads them one by one alike. Any other failure (a timeout, a lost owner,
        a freed store) is every batch's: reading them again would wait once per batch."""
        if len(indices) > 1:
            try:
                datas = self.reader.read_batches([self.rows(index) for index in indices], self.collate_fn)
            except (IndexError, TypeError, ValueError):
                datas = None
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
                return [(False, e)] * len(indices)
            if datas is not None:
                return [(True, data) for data in datas]
        fetched = []
        for index in indices:
            try:
                fetched.append((True, self.fetch(fetcher, index, bufs)))
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
                fetched.append((False, e))
        return fetched

    def rows(self, index):
        """Batch `index` of the dataset as rows of its reader (through Subsets)."""
        return index if self.reader is self.dataset else loader_protocol.rows_of(self.dataset, self.reader, index)

    def fetch(self, fetcher, index, bufs):
        """Read one batch (or sample when batch_size=None), uncollated. fetcher: the
        iteration's fetcher of an iterable dataset, None for a map-style one."""
        if fetcher is not None:
            return fetcher.fetch(index)  # iterable dataset; raises StopIteration at its end
        ds = self.dataset
        if self.auto_collation:
            if self.reader is not None:
                # The batch as columns this collate_fn takes (DistDataset's for the default
                # collate, the graph dataset's for its Collater); None: the usual path.
                data = self.reader.read_batch(self.rows(index), self.collate_fn, out=bufs)
                if data is not None:
                    return data
            if bufs is not None:
                return ds.__getitems__(index, out=bufs)
            getitems = getattr(ds, "__getitems__", None)
            if getitems:
                return getitems(index)
            return [ds[i] for i in index]
        return ds[index]

    def collate(self, data):
        """Collate a fetched batch (cheaply, for DistDataset batches)."""
        out = None
        if self.fast_collate:
            # The samples are views into one column per field: return the columns
            # instead of stacking the samples again (copied when the buffers are reused).
            out = loader_protocol.collated_columns(data, copy=self.reuse)
        if out is None:
            out = self.collate_fn(data)
        return out

    def finish_batch(self, data):
        """Collate and pin a fetched batch."""
        out = self.collate(data)
        if self.pin:
            out = _dl_utils.pin_memory.pin_memory(out, self.pin_device)
        return out

    def read_here(self, index):
        """Fetch and collate one batch of a map-style dataset in the calling thread."""
        bufs = self.pool.get() if self.pool is not None else None
        try:
            return self.collate(self.fetch(None, index, bufs))
        finally:
            if bufs is not None:
                self.pool.put(bufs)

    pin = False
    pin_device = None

    # ---- lifetime ------------------------------------------------------------
    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        runs, self.runs = self.runs, []
        for run in runs:
            if self.ordered_ds is not None:
                run.drain()
            else:
                with run.cond:
                    run.cancelled = True
                    run.results.clear()
                    run.cond.notify_all()
        # Wait for the fetches that are running, then stop the threads.
        for run in runs:
            run.wait_processed()
        for _ in range(self.n_threads):
            (self.collate_q if self.ordered else self.tasks).put(None)
        if self.ordered:
            self.tasks.put(None)
        for t in self.threads:
            if t is not threading.current_thread():
                t.join()
        self.threads = []
        for bufs in self.pool_sets:
            self.dataset.release(bufs)
        self.pool_sets = []


class _ThreadIter(_BaseDataLoaderIter):
    """Iterator of a ThreadDataLoader: keeps up to num_workers*prefetch_factor batches in flight."""

    def __init__(self, loader):
        # Keep the loader alive while iterating: in `for b in ThreadDataLoader(...)`
        # nothing else references it, and its __del__ would close the workers.
        self._loader_ref = loader
        core = loader._core
        # DataLoader with persistent workers draws the base seed once, for its
        # first iterator only; do the same so the generator advances alike.
        keep = loader.persistent_workers and core.seed_drawn
        if keep:
            gen = loader.generator
            saved = gen.get_state() if gen is not None else torch.get_rng_state()
        super().__init__(loader)   # same sampler iterator and base-seed draw as DataLoader
        if keep:
            if gen is not None:
                gen.set_state(saved)
            else:
                torch.set_rng_state(saved)
        core.seed_drawn = True
        core.start()
        core.pin, core.pin_device = self._pin_memory, self._pin_memory_device
        self._core = core
        self._in_order = getattr(loader, "in_order", True)  # torch < 2.6 has no in_order
        fetcher = None
        if self._dataset_kind == _DatasetKind.Iterable:
            fetcher = _DatasetKind.create_fetcher(self._dataset_kind, self._dataset,
                                                  self._auto_collation, lambda x: x, self._drop_last)
        ods = core.ordered_ds
        if ods is not None:
            prev = loader_protocol.ordered_reads_owner(ods)
            if prev is not None and not prev.finished:
                prev.drain()
        self._run = _Run(core, ods, self._sampler_iter, fetcher)
        if ods is not None:
            loader_protocol.claim_ordered_reads(ods, self._run)
        # Keep runs whose fetches may still be running (close() waits for them).
        core.runs = [r for r in core.runs
                     if not r.finished and not (r.cancelled and r.processed >= r.submitted)] + [self._run]
        self._received = 0
        self._submit()

    def _submit(self):
        """Keep up to depth batches in flight, handed to the workers in groups of
        core.group batches (read together): a group is sent once that many are free."""
        run, core = self._run, self._core
        while not run.sampler_done and run.submitted - self._received + core.group <= core.depth:
            indices = []
            try:
                while len(indices) < core.group:
                    indices.append(self._next_index())
            except StopIteration:
                run.sampler_done = True
            if not indices:
                return
            with run.cond:
                seq = run.submitted
                run.submitted += len(indices)
            core.tasks.put((run, seq, indices))

    def _reset(self, loader, first_iter=False):
        raise RuntimeError("ThreadDataLoader iterators are not reset; call iter(loader) again")

    def _next_data(self):
        run = self._run
        if getattr(self, "_closed", False):
            raise StopIteration
        if run.finished or run.cancelled:
            if run.cancelled and not run.finished:
                raise RuntimeError("this ThreadDataLoader iterator was stopped by close()")
            raise StopIteration
        if self._received >= run.submitted and run.sampler_done:
            self._end()
            raise StopIteration
        timeout = self._timeout if self._timeout > 0 else None
        with run.cond:
            if self._in_order:
                key = self._received
                ok = run.cond.wait_for(lambda: key in run.results or run.cancelled, timeout)
            else:
                ok = run.cond.wait_for(lambda: bool(run.results) or run.cancelled, timeout)
                key = min(run.results) if run.results else None
            if not ok:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
            if run.cancelled:
                raise RuntimeError("this ThreadDataLoader iterator was stopped by close()")
            success, data = run.results.pop(key)
        self._received += 1
        if not success and isinstance(data, StopIteration):
            # An iterable dataset ran out: no more batches, whatever is in flight.
            self._end()
            raise StopIteration
        self._submit()
        if not success:
            raise data
        return data

    def _end(self):
        run = self._run
        run.finished = True
        run.cancelled = True   # batches in flight past the end (iterable datasets) are dropped
        if run.ordered_ds is not None:
            loader_protocol.release_ordered_reads(run.ordered_ds, run)

    def close(self):
        """Stop this iterator: no more batches are fetched, those in flight are
        dropped, and next() raises StopIteration. Not collective; as after a
        break, reads of a method-0 DistDataset that some rank already started
        are waited for by the next iter() or close() of the loader."""
        run = getattr(self, "_run", None)
        if run is None or run.finished:
            return
        with run.cond:
            run.sampler_done = True
            if run.ordered_ds is None:
                run.cancelled = True
                run.results.clear()
        run.finished = run.ordered_ds is None
        self._closed = True

    def __del__(self):
        # Stop collating this run's batches; a cut-short method-0 run stays
        # registered on its dataset and is settled by the next iter() or close().
        run = getattr(self, "_run", None)
        if run is not None and not run.finished and run.ordered_ds is None:
            with run.cond:
                run.cancelled = True
                run.results.clear()


class _CallerFetcher:
    """The fetcher of a _CallerIter: the loader's own reads and collation, in the calling thread."""

    def __init__(self, core):
        self.core = core

    def fetch(self, index):
        return self.core.read_here(index)


class _CallerIter(_SingleProcessDataLoaderIter):
    """Iterator of a loader that reads in the calling thread: DataLoader's
    single-process iterator (same sampler, seed draw and pinning) whose
    map-style batches are read and collated as the loader's threads would.

    Used where a loader with num_workers=0 reads in the calling thread
    (pyddstore.torch.geometric.DataLoader). Its reads are complete when next()
    returns, so a cut-short epoch leaves nothing in flight; reads of a method-0
    dataset still in flight from another iterator are waited for first.
    """

    def __init__(self, loader):
        super().__init__(loader)
        self._loader_ref = loader
        core = loader._core
        if self._dataset_kind == _DatasetKind.Map:
            self._dataset_fetcher = _CallerFetcher(core)
        ods = core.ordered_ds
        if ods is not None:
            prev = loader_protocol.ordered_reads_owner(ods)
            if prev is not None and not prev.finished:
                prev.drain()


class ThreadDataLoader(DataLoader[T_co]):
    """A DataLoader that fetches batches in a thread pool instead of forked worker processes.

    Threads share the process's MPI state, CUDA context and Python objects, so
    it is safe with DDStore and GPU-resident buffers, where forked workers are
    not. Takes the same arguments as DataLoader; num_workers is the number of
    threads, and 0 means 1: unlike DataLoader, which reads in the calling
    thread with num_workers=0, ThreadDataLoader always reads in a worker
    thread, so that the next batch is read while the caller trains
    (pyddstore.torch.geometric.DataLoader keeps torch's rule instead: with
    num_workers=0 it reads in the calling thread). The sampler, generator and
    base-seed draws are those of DataLoader, so a seeded run yields the same
    batches (per-worker seeding of torch/random does not apply: threads share
    one RNG state, and get_worker_info() is None in them). Like DataLoader it
    is generic in the type of its batches: ``ThreadDataLoader[T]``.

    Each batch is fetched (via dataset.__getitems__ when present), collated and
    optionally pinned (only when an accelerator is available, as DataLoader
    does) in a worker thread; at most num_workers * prefetch_factor batches are
    in flight (num_workers=0: one thread's prefetch_factor).

    Batches read together: a DistDataset read with the default collate_fn (no
    reuse_buffers) gives each thread half of its prefetch_factor batches to read
    in one get_batch_vars (one request per owner across hosts, or one collective
    read for method 0, for all of them; a read costs per request more than per
    byte there), up to 2 MiB a read. Without a prefetch_factor given (or None)
    such a loader reads ahead as many batches as make two such reads, from 2 up
    to 16, or 32 where reads are collective (the group meets once per read;
    DataLoader's default is 2); loader.prefetch_factor says which. The
    batches of one read are views into its columns, which stay in memory while
    any of them is referenced. A read that refuses an index is made again batch
    by batch, so only the batch holding it raises; any other failed read (a
    timeout, a lost owner) is raised for each of its batches.

    A batch from DistDataset.__getitems__ is collated by handing over its
    per-field columns instead of stacking the samples again, when
    collate_fn is the default; a pyddstore dataset may read a batch as
    columns its own collate_fn builds from (the graph DistDataset for
    pyddstore.torch.geometric.DataLoader's Collater): the loader contract of
    _loader_protocol.
    DDSTORE_AFFINITY_WIDTH / DDSTORE_AFFINITY_OFFSET
    pin worker thread i to CPUs [offset + i*width, offset + (i+1)*width) of the
    process's affinity.

    With a dataset whose batched reads are collective (method 0 across nodes:
    its store's ``reads_collective``) every read happens in one reader
    thread, in batch order, and collation runs in the worker threads;
    otherwise (methods 1/2, method 0 within one node) the workers read in
    parallel. Iterate one loader of such a dataset at a time. An epoch cut
    short (break) on some ranks only needs nothing from the others: the next
    iter() or close() waits for this rank's reads in flight (they complete as
    the other ranks read), and ds.free() takes part in the reads other ranks
    still make. Between a break and the store's next other collective call
    (epoch_begin/end, sync, add) ranks must have read the same number of
    batches, else every rank raises a DDStoreError naming the ranks and their
    counts.

    reuse_buffers=True (dataset with alloc(), e.g. DistDataset): read every
    batch into one of a fixed pool of num_workers buffer sets from
    dataset.alloc(batch_size), registered once, instead of fresh buffers that
    are registered on every read. A worker takes a set, reads and collates the
    batch, and returns the set, so the collate must copy: needs batch_size and
    the default collate_fn, or collate_copies=True to declare that a custom
    collate_fn copies. close() (or deleting the loader) waits for running
    fetches and unregisters the pool.

    reuse_buffers and collate_copies may also be passed by position, as bools
    right after the dataset (ThreadDataLoader(ds, True, batch_size=64)); other
    positional arguments after the dataset are DataLoader's (batch_size,
    shuffle, ...), as in ThreadDataLoader(ds, 64, True).
    """

    def __init__(self, dataset, *args, reuse_buffers=False, collate_copies=False, **DataLoader_kwargs):
        self._core = None
        if args and isinstance(args[0], bool):
            # The documented signature is ThreadDataLoader(dataset, reuse_buffers=False,
            # collate_copies=False, **DataLoader_kwargs): a bool right after the
            # dataset is reuse_buffers (a bool is never a batch_size), and a bool
            # after it collate_copies. Other positional arguments are DataLoader's
            # (batch_size, shuffle, ...), as in DataLoader(ds, 64, True).
            flags, args = (args[:2], args[2:]) if len(args) > 1 and isinstance(args[1], bool) \
                else (args[:1], args[1:])
            if args:
                raise TypeError("ThreadDataLoader(dataset, reuse_buffers, collate_copies, **kwargs): "
                                "after positional reuse_buffers/collate_copies, pass DataLoader's "
                                "arguments (batch_size=, shuffle=, ...) by keyword")
            if reuse_buffers or collate_copies:
                raise TypeError("ThreadDataLoader: reuse_buffers/collate_copies given both by position "
                                "and by keyword; pass them one way")
            reuse_buffers = flags[0]
            collate_copies = flags[1] if len(flags) > 1 else False
        with warnings.catch_warnings():
            # DataLoader's warning about too many worker *processes* does not apply to threads.
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            super().__init__(dataset, *args, **DataLoader_kwargs)
        if reuse_buffers:
            if not callable(getattr(dataset, "alloc", None)) or not callable(
                    getattr(dataset, "release", None)):
                raise TypeError("reuse_buffers=True needs a dataset with alloc() and release() "
                                f"(e.g. DistDataset); {type(dataset).__name__} has none")
            if self.batch_size is None:
                raise ValueError("reuse_buffers=True needs batch_size (the buffers hold batch_size rows); "
                                 "a batch_sampler or batch_size=None cannot be used with it")
            if self.collate_fn is not _default_collate and not collate_copies:
                raise ValueError("reuse_buffers=True with a custom collate_fn: the buffers are reused "
                                 "after collate, so collate_fn must copy; pass collate_copies=True if it "
                                 "does, or use the default collate_fn")
        # The dataset's loader contract (_loader_protocol.LoaderDataset), through Subsets; None
        # for any other dataset, which is read with __getitems__ / [i] as DataLoader does. And
        # the dataset whose reads are collective, or None. Looked up once; _Core takes both.
        self._loader_dataset = loader_protocol.find(dataset)
        self._ordered_ds = self._loader_dataset.ordered_reads() if self._loader_dataset is not None else None
        # Bytes per sample when batches are read together (reads_together), else None: a
        # map-style dataset that can with this collate_fn, read into fresh buffers (a reused
        # set holds one batch). Sets the default read-ahead here and the group size in _Core.
        self._sample_nbytes_together = None
        if not reuse_buffers and self._auto_collation and self._dataset_kind == _DatasetKind.Map:
            self._sample_nbytes_together = loader_protocol.reads_together(self._loader_dataset, self.collate_fn)
        self._read_ahead = self.prefetch_factor
        if DataLoader_kwargs.get("prefetch_factor") is None:
            self._read_ahead = loader_protocol.read_ahead(self._sample_nbytes_together, self.batch_size,
                                                          self._ordered_ds is not None)
            if self.num_workers > 0:
                self.prefetch_factor = self._read_ahead
        self._core = _Core(self, bool(reuse_buffers), bool(collate_copies))

    @property
    def reuse_buffers(self):
        """Whether batches are read into the fixed, pre-registered buffer pool."""
        return self._core.reuse

    # With num_workers=0: False, read in one worker thread (ThreadDataLoader's "0 means 1");
    # True, read in the calling thread as torch's DataLoader does (a subclass's choice:
    # pyddstore.torch.geometric.DataLoader).
    _reads_in_caller_without_workers = False

    def _get_iterator(self):
        return self.__iter__()

    def __iter__(self):
        if self.num_workers == 0 and self._reads_in_caller_without_workers:
            return _CallerIter(self)
        return _ThreadIter(self)

    @property
    def _pool_sets(self):
        """The reuse_buffers pool: one buffer set per worker thread ([] without
        reuse_buffers or after close()); the original DDStore's attribute."""
        return list(self._core.pool_sets) if self._core is not None else []

    def close(self):
        """Stop the worker threads.

        With reuse_buffers, waits for running fetches first, then unregisters
        the buffer pool. Called on deletion. Not collective: for a method-0
        dataset whose epoch was cut short it waits for this rank's reads in
        flight, which complete as the other ranks read (or free the dataset).
        """
        core = self._core
        if core is not None:
            core.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to at deletion
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["ThreadDataLoader"]
