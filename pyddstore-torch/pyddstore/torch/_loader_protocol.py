"""What a pyddstore dataset offers ThreadDataLoader: one small Protocol.

torch's DataLoader asks a dataset one narrow thing through its fetcher
(``__getitems__``). ThreadDataLoader (loader.py) asks the store-backed
datasets two more, and only these, through :class:`LoaderDataset`:

``ordered_reads()``
    The dataset whose batched reads are group-collective (its store's
    ``reads_collective``: libddstore's rule, method 0 across nodes), or None.
    Every rank must make those reads in the same order, so the loader makes
    them in one reader thread, in batch order, and hands the dataset's owner
    slot from one epoch to the next (section 2 below). A dataset built on
    another one (WindowedDataset) answers for the one it reads.

``read_batch(indices, collate_fn, out=None)``
    The batch ``indices`` read as columns that ``collate_fn`` collates, or
    None: "read the usual way" (``__getitems__``), decided before reading so
    the fallback never reads twice. DistDataset returns :class:`Columns`
    for torch's default collate (the loader collates them by handing over
    the columns: :func:`collated_columns`); the graph DistDataset returns
    its column batch for its own Collater. ``out``: buffers from the
    dataset's ``alloc()`` (reuse_buffers).

``read_batches(batches, collate_fn)`` and ``reads_together(collate_fn)`` (optional)
    Several batches (a list of index lists) read together, as a list of
    what ``read_batch`` gives for each, or None (read them one by one).
    Across hosts a read costs per request more than per byte, so batches
    read together cost the loader one request per owner for all of them
    (:func:`batches_per_read`). ``reads_together`` gives the bytes per
    sample such a read moves, or None when ``read_batches`` would return
    None for this collate_fn (decided before reading, as for read_batch).
    DistDataset implements both.

The datasets of dataset.py, windowed.py and geometric/dataset.py implement
it (their common base is _storedataset.StoreDataset); the loader finds it
through ``torch.utils.data.Subset`` with :func:`find` and :func:`rows_of`. What ``__getitems__``
returns to every other consumer is a plain list of samples: a
:class:`SampleBatch`, which also carries the columns the samples view.
"""

from typing import Protocol, runtime_checkable

import torch

from . import _structure as st


@runtime_checkable
class LoaderDataset(Protocol):
    """The loader contract of pyddstore's datasets (see the module docs)."""

    def ordered_reads(self):
        """The dataset whose batched reads must be made in order by one thread, or None."""

    def read_batch(self, indices, collate_fn, out=None):
        """Batch `indices` as columns `collate_fn` collates, or None (read with __getitems__)."""


# Batches read together move at most this many bytes (upstream DDStore's collective reads
# go in rounds of 2 MiB): past it a read costs per byte, not per request. Measured with
# B2 (one host, 2 ranks, batches of 256 samples of 4104 B): reading 8 such batches
# together (8 MiB) was no faster than one by one (0.65-0.77 vs 0.70-0.72 of the
# ceiling) and held 16 batches in flight instead of 2.
READ_TOGETHER_BYTES = 2 << 20


def reads_together(reader, collate_fn):
    """Bytes per sample of `reader`'s read_batches() with `collate_fn`, or None
    when it has no read_batches() or would not use it for this collate_fn."""
    if reader is None or not callable(getattr(reader, "read_batches", None)):
        return None
    return reader.reads_together(collate_fn)


MAX_READ_AHEAD = 16
# Collective reads (ordered_reads(): method 0 across nodes) make the whole group meet once
# per read, so their loaders keep up to twice as many batches in flight and read twice as
# many together (still within READ_TOGETHER_BYTES a read). Measured with B5's loader (2
# simulated hosts x 2 ranks, 520 B samples, batches of 256, method 0, three alternated
# pairs): 15 batches a read 770k / 633k / 717k samples/s per rank, 8 a read 471k / 657k /
# 588k.
MAX_READ_AHEAD_COLLECTIVE = 32


def _batches_that_fit(sample_nbytes, batch_size):
    """Batches of `batch_size` samples of `sample_nbytes` bytes within READ_TOGETHER_BYTES;
    0 when they cannot be read together (no sample size or no batch_size)."""
    if not sample_nbytes or not batch_size:
        return 0
    return READ_TOGETHER_BYTES // (sample_nbytes * batch_size)


def batches_per_read(sample_nbytes, batch_size, read_ahead):
    """How many batches of `batch_size` samples of `sample_nbytes` bytes a loader
    thread reads together: half of the `read_ahead` batches it keeps in flight
    (the other half is being consumed meanwhile), within READ_TOGETHER_BYTES;
    1 when they cannot be read together."""
    return max(1, min(read_ahead // 2, _batches_that_fit(sample_nbytes, batch_size)))


def read_ahead(sample_nbytes, batch_size, collective=False):
    """ThreadDataLoader's prefetch_factor when none is given: DataLoader's 2, or for
    batches read together (`sample_nbytes` from reads_together) as many as make two
    reads of at most READ_TOGETHER_BYTES each, up to MAX_READ_AHEAD (collective
    reads: MAX_READ_AHEAD_COLLECTIVE)."""
    cap = MAX_READ_AHEAD_COLLECTIVE if collective else MAX_READ_AHEAD
    return max(2, min(cap, 2 * _batches_that_fit(sample_nbytes, batch_size)))


def find(dataset):
    """The LoaderDataset under `dataset` (itself, or looking through
    torch.utils.data.Subset), or None. The loader asks once, not per batch."""
    for _ in range(16):  # Subset of Subset of ...: bounded, never a cycle
        if isinstance(dataset, LoaderDataset):
            return dataset
        if not isinstance(dataset, torch.utils.data.Subset):
            break
        dataset = dataset.dataset
    return None


def rows_of(dataset, target, indices):
    """`indices` of `dataset` as indices of `target`, the dataset find() gave for it."""
    while dataset is not target:
        indices = [dataset.indices[i] for i in indices]
        dataset = dataset.dataset
    return indices


# ---- 1. batches the loader collates by handing over their columns -------------

class Columns:
    """A batch as one column per field: ``structure`` (a _structure.Structure)
    and the columns as torch tensors in field order, or structure None and a
    dict {key: column} (WindowedDataset's fields= selection). Their default
    collate is the columns themselves, in the structure of the samples."""

    __slots__ = ("_structure", "_columns")

    def __init__(self, structure, columns):
        self._structure = structure
        self._columns = columns

    def collated(self, copy):
        """default_collate of the batch (tensors owning their memory when copy=True,
        needed when the columns live in buffers that will be reused)."""
        if self._structure is None:
            return {k: (v.clone() if copy else v) for k, v in self._columns.items()}
        return st.collated(self._structure, [c.clone() if copy else c for c in self._columns])


class SampleBatch(list):
    """The samples of one batch (what ``__getitems__`` returns: a plain list
    for every consumer), plus the :class:`Columns` they view, or None when
    they view none (decode applied, ragged or record fields)."""

    __slots__ = ("columns",)

    def __init__(self, samples, columns=None):
        super().__init__(samples)
        self.columns = columns

    def collated(self, copy):
        """default_collate(self) built from the columns, or None when it has none."""
        return self.columns.collated(copy) if self.columns is not None else None


def collated_columns(data, copy):
    """default_collate of `data` built from its columns (a Columns, or a
    SampleBatch that has them); None otherwise."""
    if isinstance(data, (SampleBatch, Columns)):
        return data.collated(copy=copy)
    return None


# ---- 2. who owns the ordered reads of a dataset -----------------------------
# A dataset with collective reads holds one owner slot (StoreDataset's
# _ordered_owner). The loader's epoch that makes the reads claims it; one cut
# short stays the owner until the next epoch (or the loader's close()) looks
# it up, settles it, and claims the reads itself. An epoch that ends, or is
# settled, hands the reads back. The slot holds whatever the loader puts there
# (its per-epoch run); datasets never look at it.

def ordered_reads_owner(dataset):
    """Whoever made the dataset's collective reads last and has not released them, or None."""
    return dataset._ordered_owner


def claim_ordered_reads(dataset, owner):
    """Make `owner` the one whose collective reads of `dataset` are in flight."""
    dataset._ordered_owner = owner


def release_ordered_reads(dataset, owner):
    """Empty the owner slot of `dataset` if `owner` holds it (a later owner keeps it)."""
    if dataset._ordered_owner is owner:
        dataset._ordered_owner = None
