"""The graph DataLoader and its Collater."""

from ..loader import ThreadDataLoader
from .dataset import Collater

__all__ = ["Collater", "DataLoader"]


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
