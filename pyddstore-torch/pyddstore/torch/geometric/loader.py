"""The graph DataLoader and its Collater."""

import torch

from .. import _loader_protocol as loader_protocol
from ..loader import ThreadDataLoader
from .dataset import _Columns, _GraphDataset


# ------------------------------------------------------------------ loading

def _target(dataset, indices):
    """(graph dataset, rows) under `dataset` (through Subsets), or (None, None)."""
    for _ in range(16):
        if isinstance(dataset, _GraphDataset):
            return dataset, indices
        if isinstance(dataset, torch.utils.data.Subset):
            indices = [dataset.indices[i] for i in indices]
            dataset = dataset.dataset
            continue
        break
    return None, None


class Collater:
    """collate_fn of :class:`DataLoader`: Batch from store columns, or from a list of Data.

    ThreadDataLoader asks it to read a batch of a geometric DistDataset itself
    (``_pyddstore_read``); other datasets' samples go to torch_geometric's own
    collate (``Batch.from_data_list`` for Data).
    """

    def __init__(self, dataset, follow_batch=None, exclude_keys=None):
        from torch_geometric.loader.dataloader import Collater as PygCollater

        self.follow_batch = tuple(follow_batch or ())
        self.exclude_keys = tuple(exclude_keys or ())
        self._pyg = PygCollater(dataset, follow_batch, exclude_keys)

    def _pyddstore_read(self, dataset, indices):
        """ThreadDataLoader hook (_loader_protocol): the batch's store columns when
        `dataset` is (a Subset of) a geometric DistDataset, else None."""
        target, rows = _target(dataset, indices)
        if target is None:
            return None
        return loader_protocol.read_graph_columns(target, rows)

    def __call__(self, batch):
        """The Batch of `batch` (store columns, or a list of samples)."""
        if isinstance(batch, _Columns):
            return batch.batch(self.follow_batch, self.exclude_keys)
        return self._pyg(batch)


class DataLoader(ThreadDataLoader):
    """torch_geometric.loader.DataLoader's interface over a ThreadDataLoader.

    ``DataLoader(dataset, batch_size=1, shuffle=False, follow_batch=None,
    exclude_keys=None, **kwargs)``; kwargs are ThreadDataLoader's (sampler,
    batch_sampler, num_workers, drop_last, prefetch_factor, ...). Yields
    ``Batch`` objects. ``num_workers=N`` reads in N threads; with
    ``num_workers=0`` (the default) batches are read and collated in the
    calling thread, as torch_geometric's and torch's loaders do, so datasets
    whose handles belong to one thread (torch_geometric's SQLite-backed
    ``OnDiskDataset``) work; ThreadDataLoader itself reads in one worker
    thread then. Over a geometric DistDataset or DistDatasetReader (or
    a Subset of one) each batch is read with one store call per stored
    variable and built from the columns, equal to ``Batch.from_data_list``
    of the same graphs (with ``follow_batch``/``exclude_keys``); any other
    dataset of Data is collated by torch_geometric. With method 0 the
    collective rules of ThreadDataLoader apply (same number of batches on
    every rank: DistributedSampler, ElasticSampler or BudgetBatchSampler).
    """

    _reads_in_caller_without_workers = True  # num_workers=0: the calling thread reads

    def __init__(self, dataset, batch_size=1, shuffle=False, follow_batch=None, exclude_keys=None,
                 **kwargs):
        kwargs.pop("collate_fn", None)  # as torch_geometric's DataLoader
        if kwargs.get("reuse_buffers"):
            raise ValueError("reuse_buffers=True is not available for graph batches (their sizes vary); "
                             "drop it")
        self.follow_batch = follow_batch
        self.exclude_keys = exclude_keys
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle,
                         collate_fn=Collater(dataset, follow_batch, exclude_keys), **kwargs)
