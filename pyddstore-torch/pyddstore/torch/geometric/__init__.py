"""torch_geometric graphs in the store: ``Data`` in, ``Batch`` out.

Needs torch_geometric (``pip install 'pyddstore-torch[geometric]'``).

* :class:`DistDataset` stores any map-style source of
  ``torch_geometric.data.Data`` samples (a list, an ``InMemoryDataset``, a
  ``ParquetSource`` with ``encode=``). Every tensor attribute becomes a field
  concatenated along PyG's own ``Data.__cat_dim__`` axis: node-level and
  edge-level attributes are stored flat, all graphs' rows one after the
  other, however many attributes vary in size; attributes of one size in
  every graph (graph-level targets) are stored as fixed rows. Per-graph
  sizes, ``__inc__`` increments and node counts live in one small int64
  variable of the store, split over the ranks like the data (O(N/P) each).
* :class:`DataLoader` has torch_geometric's ``DataLoader`` signature over a
  :class:`~pyddstore.torch.ThreadDataLoader`. A batch is read with one store
  call per stored variable and built straight from the flat columns into a
  ``Batch`` (increments, ``batch``/``ptr``, ``follow_batch`` vectors,
  ``_slice_dict``/``_inc_dict``) equal, key by key and dtype by dtype, to
  ``Batch.from_data_list`` of the same samples, without making one ``Data``
  per graph.
* :class:`BudgetBatchSampler` makes batches of about equal total nodes or
  edges (not equal graph counts), the same number on every rank, from the
  stored sizes only; resumable, also on another number of ranks.
* :class:`DistDatasetReader` reads such a dataset from another job (method 2).

Example::

    from pyddstore.torch.geometric import DistDataset, DataLoader, BudgetBatchSampler

    ds = DistDataset(molecules, "qm9", dtypes={"pos": torch.float32})
    ds[3]                                    # Data equal to molecules[3] (pos as float32)
    sampler = torch.utils.data.DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=2)
    for batch in loader:                     # torch_geometric.data.Batch
        out = model(batch.x, batch.edge_index, batch.batch)

Stored layout of dataset ``name``: ``name/<attr>`` (or ``name/<attr>@<p>``
for the p-th slab of an attribute whose concatenation axis is not the first,
such as ``edge_index``: each slab is contiguous, so a batch is read straight
into its final layout), ``name/__graph_meta__`` (per graph: nodes, edges,
first row and length of each size group, increments, Index/EdgeIndex metadata) and
``name/__graph__`` (JSON description, for readers).
"""

# torch_geometric is needed by every module of this package: say so once, here.
try:
    import torch_geometric  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("pyddstore.torch.geometric needs torch_geometric: "
                      "pip install 'pyddstore-torch[geometric]'") from _exc

from .dataset import DistDataset, DistDatasetReader  # noqa: E402
from .loader import Collater, DataLoader  # noqa: E402
from .sampler import BudgetBatchSampler  # noqa: E402

__all__ = ["DistDataset", "DistDatasetReader", "DataLoader", "BudgetBatchSampler", "Collater"]
