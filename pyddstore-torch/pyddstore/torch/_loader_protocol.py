"""What a pyddstore dataset offers ThreadDataLoader and the objects built on it, and how they ask.

ThreadDataLoader (loader.py), the store-backed datasets (dataset.py,
geometric/dataset.py) and what wraps or collates them (windowed.py, geometric's
Collater) meet only here, the way torch's DataLoader asks a dataset for one
narrow thing through its fetcher. A dataset offers any of the following by
defining the hook; the others reach each one through the function named here
and never through getattr or another object's private attribute:

1. Reading a batch as columns -- hook ``_pyddstore_column_batch(indices,
   out=None)``, asked through :func:`read_column_batch`. Returns a
   :class:`ColumnBatch` (one column per field, no per-sample views) or None
   when the batch needs per-sample work; decided before reading, so the
   loader's fallback to ``__getitems__`` never reads twice. Only asked when
   the loader collates with torch's default collate.

   Batches the loader can collate by handing over their columns are the
   batch types of this module: :class:`ColumnBatch`, and :class:`SampleBatch`
   / :class:`WindowBatch` (what ``__getitems__`` returns: a plain list of
   samples for every other consumer). :func:`collated_columns` gives their
   default collate.

2. Collective (ordered) reads -- hook ``_pyddstore_ordered_reads()``, asked
   through :func:`ordered_reads_dataset` (which looks through
   ``torch.utils.data.Subset``) or :func:`own_ordered_reads` (the object
   itself only). Returns the dataset whose batched reads are collective
   (method 0), or None. Every rank must make those reads in the same order,
   so the loader makes them in one reader thread, in batch order. A dataset
   decides with :func:`reads_in_order` from its store.

3. The ownership handshake of the ordered reads -- the dataset holds one
   owner slot, set up by :func:`init_ordered_owner` when the dataset is made.
   The loader's epoch that makes the reads :func:`claim_ordered_reads`; one
   cut short stays the owner until the next epoch (or the loader's close())
   looks up :func:`ordered_reads_owner`, settles it, and claims the reads
   itself. An epoch that ends, or is settled, hands the reads back with
   :func:`release_ordered_reads`. The slot holds whatever the loader puts
   there (its per-epoch run); datasets never look at it.

4. A collate function that reads its batches itself -- hook
   ``_pyddstore_read(dataset, indices)`` on the collate_fn, asked through
   :func:`collate_fn_read`. pyddstore.torch.geometric.Collater builds graph
   batches from store columns so; None from it means "read the usual way".
   It reads them through the graph dataset's hook
   ``_pyddstore_graph_columns(indices)``, asked through
   :func:`read_graph_columns`: the batch's per-graph meta and one array per
   attribute (batched reads: collective with method 0).

5. Stored rows for a dataset built on another -- WindowedDataset makes each
   sample of several stored rows of a DistDataset or DistDatasetReader and
   asks it, through :func:`stored_keys` (hook ``_pyddstore_stored_keys(fields)``),
   which stored fields a fields= selection names (KeyError for unknown
   ones), and through :func:`read_rows_apart` (hook
   ``_pyddstore_read_rows_apart(rows, keys)``) for rows read with
   non-collective get()s, as read_rows() returns them. Its batched reads use
   the public read_rows().
"""

import torch

from . import _structure as st


# ---- 1. batches the loader collates by handing over their columns -------------

class SampleBatch(list):
    """The samples of one batch, plus the per-field batch columns they view.

    A plain list for every consumer; ThreadDataLoader recognises it and, with
    the default collate_fn, returns the columns instead of stacking the samples
    again (see collated()).
    """

    __slots__ = ("_structure", "_columns")

    def __init__(self, samples, structure, columns):
        super().__init__(samples)
        self._structure = structure
        # Field columns as torch tensors in field order, or None when the
        # samples are not plain views of them (decode was applied).
        self._columns = columns

    def collated(self, copy):
        """default_collate(self) built from the columns, or None when not possible.

        copy=True returns tensors that own their memory (needed when the
        columns live in buffers that will be reused).
        """
        if self._columns is None:
            return None
        cols = [c.clone() if copy else c for c in self._columns]
        return st.collated(self._structure, cols)


class ColumnBatch:
    """A batch read as one column per field, with no per-sample views: what
    ThreadDataLoader's default collate returns for it is the columns themselves."""

    __slots__ = ("_structure", "_columns")

    def __init__(self, structure, columns):
        self._structure = structure
        self._columns = columns

    def collated(self, copy):
        """default_collate of the batch (tensors owning their memory when copy=True)."""
        cols = [c.clone() if copy else c for c in self._columns]
        return st.collated(self._structure, cols)


class WindowBatch(SampleBatch):
    """Batch of dict-of-selected-fields windows: default_collate is the dict of columns."""

    __slots__ = ("_dict",)

    def __init__(self, samples, columns):
        super().__init__(samples, None, None)
        self._dict = columns

    def collated(self, copy):
        """The dict of columns (tensors owning their memory when copy=True)."""
        return {k: (v.clone() if copy else v) for k, v in self._dict.items()}


def read_column_batch(dataset, indices, out=None):
    """The batch `indices` of `dataset` as a ColumnBatch, or None when the dataset
    offers no column read or this batch needs per-sample work (nothing read then)."""
    read = getattr(dataset, "_pyddstore_column_batch", None)
    return read(indices, out=out) if read is not None else None


def collated_columns(data, copy):
    """default_collate of `data` built from its columns when it is one of this
    module's batch types and that is possible; None otherwise."""
    if isinstance(data, (SampleBatch, ColumnBatch)):
        return data.collated(copy=copy)
    return None


# ---- 2. collective reads, made in order by one thread ------------------------

def reads_in_order(store):
    """Whether ThreadDataLoader makes the batched reads of `store` (a PyDDStore)
    in one reader thread, in batch order: every method-0 store over a
    communicator.

    That is where libddstore makes the reads group-collective
    (``store.reads_collective``: every rank must read in the same order) and
    also where it does not (a group wholly in node shared memory, or of one
    rank), on purpose: the loader documents that it does all reads of a
    method-0 dataset in one thread (docs/pytorch.rst), libddstore documents
    method-0 batched reads as thread-safe nowhere (methods 1 and 2 only), and
    a bad sample index raises pyddstore.DDStoreRangeError there as where the
    reads are collective. So this rule stays broader than the store's.
    """
    return store.reads_collective or (store.method == 0 and not store.is_reader)


def _ordered_reads_hook(dataset):
    getter = getattr(dataset, "_pyddstore_ordered_reads", None)
    return getter if callable(getter) else None


def own_ordered_reads(dataset):
    """The dataset whose reads are collective that `dataset` itself declares
    (its ``_pyddstore_ordered_reads()``), or None."""
    hook = _ordered_reads_hook(dataset)
    return hook() if hook is not None else None


def ordered_reads_dataset(dataset):
    """The dataset under `dataset` (through Subsets) whose batched reads are collective, or None."""
    for _ in range(16):  # Subset of Subset of ...: bounded, never a cycle
        hook = _ordered_reads_hook(dataset)
        if hook is not None:
            return hook()
        if not isinstance(dataset, torch.utils.data.Subset):
            return None
        dataset = dataset.dataset
    return None


# ---- 3. who owns the ordered reads of a dataset -----------------------------

def init_ordered_owner(dataset):
    """Give a dataset with collective reads its owner slot, empty."""
    dataset._ordered_owner = None


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


# ---- 4. a collate_fn that reads its batches itself --------------------------

def collate_fn_read(collate_fn, dataset, indices):
    """The batch `indices` of `dataset` as `collate_fn` reads it itself (its
    ``_pyddstore_read``), or None when it does not (the loader reads as usual)."""
    read = getattr(collate_fn, "_pyddstore_read", None)
    return read(dataset, indices) if read is not None else None


def read_graph_columns(dataset, indices):
    """The graphs `indices` of a graph dataset (pyddstore.torch.geometric) as read
    from the store, for its Collater to build the Batch from (batched reads:
    collective with method 0)."""
    return dataset._pyddstore_graph_columns(indices)


# ---- 5. stored rows for a dataset built on another ---------------------------

def stored_keys(dataset, fields):
    """The stored field keys of `dataset` that `fields` selects (all of them for
    None), in that order; KeyError naming any that it does not store."""
    return dataset._pyddstore_stored_keys(fields)


def read_rows_apart(dataset, rows, keys):
    """Stored `rows` (int64 array) of fields `keys`, as read_rows() returns them,
    read with non-collective get()s (one per run of consecutive rows per field):
    any thread may call it, with any method."""
    return dataset._pyddstore_read_rows_apart(rows, keys)
