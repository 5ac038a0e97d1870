"""PyTorch integration for DDStore.

* :class:`DistDataset`: a map-style ``torch.utils.data.Dataset`` backed by
  DDStore. Each rank loads its share of any map-style source dataset into the
  store; every rank can then read any sample. Samples keep the source's
  structure (a tensor/array/number, a tuple or list of them, or a dict of
  them) and each field's shape and dtype. ``__getitems__`` reads a whole batch
  with one ``PyDDStore.get_batch()`` per field, which PyTorch's DataLoader
  uses automatically.
* :class:`DistDatasetReader`: the same, as a method=2 extra member that joins a
  dataset published by a DistDataset core group through a shared handshake
  directory.
* :class:`ThreadDataLoader`: a DataLoader whose workers are threads instead of
  forked processes (safe with MPI and GPU-resident buffers).
* :class:`WindowedDataset`: samples made of several stored rows (time windows,
  clips), read with ``read_rows()``; :func:`row_of` maps a sample of one source
  in a ConcatDataset to its row.

Fields must have the same shape and dtype in every sample (fixed-shape).
Supported dtypes: bool, uint8, int8, int16, uint16, int32, uint32, int64, uint64,
float16, float32, float64, and bfloat16 for tensors.

Logging goes to the ``pyddstore.torch`` logger with the rank in every
record; :func:`pyddstore.enable_logging` (also importable from here)
prints it. ``__version__`` is the release shared with libddstore.

Import torch before mpi4py/MPI starts; ``from pyddstore.torch import ...`` does
that by itself (pyddstore imports mpi4py.MPI only when a store is created).
"""

# torch first: it must be loaded before MPI initialises (mpi4py.MPI is only
# imported when a store is created, never by importing pyddstore).
import torch  # noqa: F401  isort: skip

from ._lazy import lazy_names as _lazy_names  # noqa: E402
from ._logging import enable_logging  # noqa: E402
from ._structure import SUPPORTED_DTYPES  # noqa: E402
from .dataset import DistDataset, DistDatasetReader  # noqa: E402
from .loader import ThreadDataLoader  # noqa: E402
from .windowed import WindowedDataset, row_of  # noqa: E402


def _version():
    """The release number: one source, libddstore/VERSION (pyproject reads it too).

    A source checkout's VERSION file comes first, because the metadata found
    on sys.path may belong to another (installed or stale egg-info) copy;
    an installed wheel has no such file and answers from its metadata.
    """
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "VERSION")
    if os.path.isfile(path) and os.path.isfile(os.path.join(root, "pyproject.toml")):
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyddstore-torch")
    except PackageNotFoundError:
        return "0+unknown"  # neither installed nor a checkout: a copied tree


__version__ = _version()

# Helpers beyond the core four, imported on first use (PEP 562) so that
# `from pyddstore.torch import DistDataset` does not pay for, or depend on,
# optional modules (pyarrow for the Parquet sources).
_LAZY = {
    "ElasticSampler": "sampler",
    "default_replicas": "sampler",
    "GlobalBatchSize": "adaptive.batchsize",
    "ResumableLoader": "adaptive.resume",
    "RaggedFields": "ragged",
    "RaggedCollate": "ragged",
    "ParquetSource": "parquet",
    "PetastormSource": "parquet",
    "CountingFileSystem": "parquet",
    "SparkDatasetConverter": "petastorm.spark",
    "make_spark_converter": "petastorm.spark",
}


__getattr__, __dir__ = _lazy_names(globals(), _LAZY)


__all__ = [
    "DistDataset",
    "DistDatasetReader",
    "ThreadDataLoader",
    "WindowedDataset",
    "row_of",
    "SUPPORTED_DTYPES",
    "enable_logging",
    *_LAZY,
]
