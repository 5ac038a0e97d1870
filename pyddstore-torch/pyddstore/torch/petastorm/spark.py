"""Spark DataFrames as DistDatasets, in the spirit of Petastorm's make_spark_converter.

    from pyddstore.torch.petastorm.spark import SparkDatasetConverter, make_spark_converter

    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "file:///scratch/cache")
    conv = make_spark_converter(df_train)            # on the Spark driver: writes the cache
    conv = comm.bcast(conv, root=0)                  # under MPI: every rank gets the (small) handle
    with conv.make_torch_dataloader(batch_size=64, comm=comm) as loader:
        for epoch in range(10):
            loader.sampler.set_epoch(epoch)
            for batch in loader: ...
    conv.delete()                                    # one process: removes the cache

make_spark_converter writes the DataFrame once as Parquet into a new directory under
the parent cache directory (the same Spark configuration key as Petastorm's, so an
existing setting keeps working), after Petastorm's conversions: float64 columns and
arrays become float32 (``dtype="float32"``, the default; ``dtype=None`` keeps them),
Spark ML vectors become arrays. Converting the same DataFrame again in the same
process reuses the cache.

The converter is a small picklable handle (cache URL and row count): pass it to the
other ranks, which need no Spark. make_torch_dataloader loads the cache into a
DistDataset over ``comm`` (every rank its contiguous share, read with
:class:`~pyddstore.torch.parquet.ParquetSource`) and yields a ThreadDataLoader whose
DistributedSampler shuffles the whole dataset and gives every rank the same number
of batches; leaving the ``with`` block frees the store.
"""

import contextlib
import hashlib
import os
import threading
import uuid

__all__ = ["SparkDatasetConverter", "make_spark_converter"]

_registry = []  # (JVM analysed plan, parameters, converter), in conversion order
_registry_lock = threading.Lock()


def _to_url(path):
    return path if "://" in path else "file://" + os.path.abspath(path)


class SparkDatasetConverter:
    """Handle on a DataFrame cached as Parquet (made by :func:`make_spark_converter`).

    Attributes: ``cache_dir_url`` (where the Parquet files are), ``dataset_size``
    (rows). Picklable; needs no Spark after it was made.
    """

    #: Spark configuration key naming the parent cache directory (Petastorm's key).
    PARENT_CACHE_DIR_URL_CONF = "petastorm.spark.converter.parentCacheDirUrl"

    def __init__(self, cache_dir_url, dataset_size=None):
        if not isinstance(cache_dir_url, str) or not cache_dir_url:
            raise TypeError("cache_dir_url must be a non-empty URL or path string")
        self.cache_dir_url = cache_dir_url
        self._size = dataset_size

    @property
    def dataset_size(self):
        """Rows in the cache (from the Parquet footers)."""
        if self._size is None:
            self._size = len(self.make_source())
        return self._size

    def __len__(self):
        return self.dataset_size

    def make_source(self, **source_kwargs):
        """A :class:`~pyddstore.torch.parquet.ParquetSource` over the cache (columns=,
        filter=, field_shapes=, dtypes=... as ParquetSource takes them)."""
        from ..parquet import ParquetSource

        return ParquetSource(self.cache_dir_url, petastorm=False, **source_kwargs)

    def make_dist_dataset(self, name=None, *, comm=None, columns=None, filter=None, source_kwargs=None,
                          **dataset_kwargs):
        """Load the cache into a DistDataset over ``comm`` (collective: every rank calls
        it). ``name`` defaults to one derived from the cache directory. Other keywords
        go to DistDataset (ddstore_width, method, chunk_size, decode, ...)."""
        from ..dataset import DistDataset

        src = self.make_source(columns=columns, filter=filter, **(source_kwargs or {}))
        if name is None:
            name = "spark_" + hashlib.sha1(self.cache_dir_url.encode()).hexdigest()[:12]
        return DistDataset(src, name, comm=comm, **dataset_kwargs)

    @contextlib.contextmanager
    def make_torch_dataloader(self, batch_size=32, *, comm=None, shuffle=True, seed=0, num_workers=2,
                              drop_last=False, columns=None, filter=None, name=None, dataset_kwargs=None,
                              **loader_kwargs):
        """Context manager yielding a ThreadDataLoader over the cache loaded into a
        DistDataset (collective: every rank of ``comm`` enters it together).

        The sampler (``loader.sampler``, a DistributedSampler over the ranks of comm)
        shuffles the whole dataset (``shuffle``, ``seed``; call
        ``loader.sampler.set_epoch(epoch)`` each epoch) and gives every rank the same
        number of samples, as collective store reads need. Other keywords go to
        ThreadDataLoader (e.g. ``reuse_buffers=True``, ``pin_memory``). On exit the
        loader is closed and the store freed.
        """
        from mpi4py import MPI
        from torch.utils.data.distributed import DistributedSampler

        from ..loader import ThreadDataLoader

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        comm = comm or MPI.COMM_WORLD
        ds = self.make_dist_dataset(name, comm=comm, columns=columns, filter=filter, **(dataset_kwargs or {}))
        loader = None
        try:
            sampler = DistributedSampler(ds, num_replicas=comm.Get_size(), rank=comm.Get_rank(),
                                         shuffle=shuffle, seed=seed, drop_last=True)
            loader = ThreadDataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                                      drop_last=drop_last, **loader_kwargs)
            yield loader
        finally:
            if loader is not None:
                loader.close()
            ds.free()

    def delete(self):
        """Remove the cached Parquet files. Call it on one process (e.g. the driver or
        rank 0) once no rank needs them; a second call does nothing."""
        import pyarrow.fs as pafs

        try:
            fs, path = pafs.FileSystem.from_uri(_to_url(self.cache_dir_url))
        except Exception:  # noqa: BLE001 - any URL pyarrow cannot map: try fsspec
            import fsspec

            fs_, path = fsspec.core.url_to_fs(self.cache_dir_url)
            if fs_.exists(path):
                fs_.rm(path, recursive=True)
        else:
            if fs.get_file_info(path).type != pafs.FileType.NotFound:
                fs.delete_dir(path)
        with _registry_lock:
            _registry[:] = [e for e in _registry if e[2].cache_dir_url != self.cache_dir_url]

    def __repr__(self):
        return f"SparkDatasetConverter({self.cache_dir_url!r}, dataset_size={self._size})"


def _convert_types(df, dtype):
    """Petastorm's preparation: vectors to arrays, float precision as asked."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    cols = []
    for field in df.schema.fields:
        c = F.col(f"`{field.name}`")
        t = field.dataType
        if type(t).__name__ == "VectorUDT":
            from pyspark.ml.functions import vector_to_array

            c = vector_to_array(c, dtype="float32" if dtype == "float32" else "float64")
        elif dtype == "float32" and isinstance(t, T.DoubleType):
            c = c.cast(T.FloatType())
        elif dtype == "float64" and isinstance(t, T.FloatType):
            c = c.cast(T.DoubleType())
        elif isinstance(t, T.ArrayType) and dtype is not None and isinstance(t.elementType, (T.DoubleType, T.FloatType)):
            c = c.cast(T.ArrayType(T.FloatType() if dtype == "float32" else T.DoubleType(), t.containsNull))
        cols.append(c.alias(field.name))
    return df.select(*cols)


def make_spark_converter(df, *, parent_cache_dir_url=None, parquet_row_group_size_bytes=32 * 1024 * 1024,
                         compression_codec=None, dtype="float32"):
    """Cache a Spark DataFrame as Parquet and return a :class:`SparkDatasetConverter`.

    parent_cache_dir_url: directory (URL or local path) under which a new cache
    directory is made; default the Spark configuration
    ``SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF``. parquet_row_group_size_bytes:
    row-group size hint (smaller groups let each rank read closer to its share).
    compression_codec: Spark's Parquet codec (default Spark's, snappy; 'uncompressed'
    loads fastest). dtype: 'float32' (default, as Petastorm), 'float64', or None to
    keep float columns as they are. Run it where the SparkSession is (the driver).
    """
    if dtype not in ("float32", "float64", None):
        raise ValueError(f"dtype must be 'float32', 'float64' or None, got {dtype!r}")
    if not isinstance(parquet_row_group_size_bytes, int) or parquet_row_group_size_bytes < 1:
        raise ValueError("parquet_row_group_size_bytes must be a positive int")
    spark = df.sparkSession
    parent = parent_cache_dir_url or spark.conf.get(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, None)
    if not parent:
        raise ValueError("no cache directory: pass parent_cache_dir_url= or set the Spark configuration "
                         f"{SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF!r} to a directory URL "
                         "that every rank can read (e.g. file:///shared/cache)")
    parent = _to_url(parent).rstrip("/")
    # Spark's analysed plan identifies the DataFrame's contents: a DataFrame whose plan gives
    # the same result as one converted before in this process reuses that cache, as Petastorm
    # does (plan.sameResult, which ignores expression ids).
    plan = df._jdf.queryExecution().analyzed()
    params = (parent, dtype, compression_codec, parquet_row_group_size_bytes)
    with _registry_lock:
        entries = list(_registry)
    for old_plan, old_params, conv in entries:
        if old_params != params:
            continue
        try:
            same = bool(plan.sameResult(old_plan))
        except Exception:  # noqa: BLE001 - a plan of a stopped session: not reusable
            same = False
        if same:
            try:
                conv.make_source()
                return conv
            except (FileNotFoundError, OSError):
                break
    prepared = _convert_types(df, dtype)
    url = f"{parent}/{uuid.uuid4().hex}"
    writer = prepared.write.mode("overwrite").option("parquet.block.size", parquet_row_group_size_bytes)
    if compression_codec is not None:
        writer = writer.option("compression", compression_codec)
    writer.parquet(url)
    conv = SparkDatasetConverter(url)
    conv.dataset_size  # footers only: checks the write and fixes the size in the handle
    with _registry_lock:
        _registry.append((plan, params, conv))
    return conv
