"""make_spark_converter under local Spark: rank 0 (the driver) caches a small DataFrame
as Parquet, every rank gets the handle, loads it into the store, reads it through the
loader, and rank 0 deletes the cache. Skipped (on every rank alike) without pyspark or
Java, or with PYDDSTORE_TEST_SPARK=0. Only rank 0 starts a JVM; the other ranks wait without spinning on MPI, so the
JVM gets the machine's cores."""
import os
import shutil
import time

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyddstore.torch.dataset")

N = 103


def _spark_ready():
    if os.environ.get("PYDDSTORE_TEST_SPARK") == "0":  # a JVM start costs ~30 s: allow opting out
        return False
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def _expected(ids):
    ids = np.asarray(ids, dtype=np.int64)
    return {"id": ids, "x": (ids * 0.5).astype(np.float32),
            "v": np.stack([ids, ids + 1, ids + 2], axis=1).astype(np.float32),
            "vec": np.stack([ids * 2, -ids], axis=1).astype(np.float32),
            "label": (ids % 3).astype(np.int32)}


def _wait_for(comm, tag):
    # A polling wait with sleeps: a blocking MPI receive would spin and starve rank 0's JVM.
    while not comm.Iprobe(source=0, tag=tag):
        time.sleep(0.05)
    return comm.recv(source=0, tag=tag)


@pytest.mark.skipif(not _spark_ready(), reason="needs pyspark and Java")
def test_spark_converter_round_trip(mpi_comm, workdir):
    from pyddstore.torch.petastorm.spark import SparkDatasetConverter, make_spark_converter

    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    tag = 4711
    if rank == 0:
        result = None
        try:
            from pyspark.ml.linalg import Vectors, VectorUDT
            from pyspark.sql import SparkSession
            from pyspark.sql import types as T

            spark = (SparkSession.builder.master("local[1]").appName("pyddstore-test")
                     .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
                     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
            try:
                rows = [(i, i * 0.5, [float(i), i + 1.0, i + 2.0], Vectors.dense([2.0 * i, -float(i)]), i % 3)
                        for i in range(N)]
                schema = T.StructType([T.StructField("id", T.LongType(), False),
                                       T.StructField("x", T.DoubleType(), False),
                                       T.StructField("v", T.ArrayType(T.DoubleType(), False), False),
                                       T.StructField("vec", VectorUDT(), False),
                                       T.StructField("label", T.IntegerType(), False)])
                df = spark.createDataFrame(rows, schema) \
                    .repartition(3)
                spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "file://" + str(workdir / "cache"))
                conv = make_spark_converter(df, parquet_row_group_size_bytes=1024)
                again = make_spark_converter(df, parquet_row_group_size_bytes=1024)
                result = (conv, again.cache_dir_url == conv.cache_dir_url)
            finally:
                spark.stop()
        except Exception as e:  # noqa: BLE001 - every rank must learn of it, not hang
            import traceback

            # Spark's exceptions hold JVM handles that do not pickle: send the text.
            result = RuntimeError("Spark on rank 0 failed:\n" + "".join(traceback.format_exception(e))[-4000:])
        for r in range(1, size):
            mpi_comm.send(result, dest=r, tag=tag)
    else:
        result = _wait_for(mpi_comm, tag)
    if isinstance(result, Exception):
        raise result
    conv, reused = result
    assert reused, "converting the same DataFrame twice must reuse its cache"
    assert len(conv) == N

    seen = []
    with conv.make_torch_dataloader(batch_size=8, comm=mpi_comm, seed=3, num_workers=2) as loader:
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            got = []
            for batch in loader:
                want = _expected(batch["id"].numpy())
                for k, v in want.items():
                    arr = batch[k].numpy()
                    assert arr.dtype == v.dtype and np.array_equal(arr, v), (k, arr, v)
                got.append(batch["id"].numpy())
            seen.append(np.concatenate(got))
    per_rank = N // size
    assert all(len(s) == per_rank for s in seen)
    everyone = np.concatenate(mpi_comm.allgather(seen[0]))
    assert len(np.unique(everyone)) == per_rank * size  # the ranks' shares do not overlap
    assert not np.array_equal(seen[0], seen[1])  # reshuffled each epoch

    ds = conv.make_dist_dataset("spark_all", comm=mpi_comm, columns=["id", "v"])
    try:
        rows = ds.read_rows(np.arange(N))
        order = np.argsort(rows["id"])
        assert np.array_equal(rows["id"][order], np.arange(N))
        assert np.array_equal(rows["v"][order], _expected(np.arange(N))["v"])
    finally:
        ds.free()
    mpi_comm.Barrier()
    if rank == 0:
        conv.delete()
        conv.delete()  # idempotent
        assert not os.path.exists(conv.cache_dir_url[len("file://"):])
