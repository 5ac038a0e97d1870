"""Parquet -> DistDataset round trip: every rank loads its share through
ParquetSource.read_range, then every rank reads every row back from the store and
gets pyarrow's values bit for bit. Collective calls (constructor, read_rows, free)
are made by every rank in the same order."""
import numpy as np
import pytest

from conftest import ROWS, assert_bit_exact, expected_numpy

pa = pytest.importorskip("pyarrow")
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

dataset = pytest.importorskip("pyddstore.torch.dataset")
from pyddstore.torch.parquet import ParquetSource  # noqa: E402

# ParquetSource's dtypes= widens a column while reading (values unchanged).
CASTS = {"i8": np.int32}


@pytest.mark.parametrize("chunk_size", [None, 17])
def test_round_trip_bit_exact(dataset_dir, mpi_comm, chunk_size):
    src = ParquetSource(dataset_dir, dtypes=CASTS)
    ref = expected_numpy(pq.read_table(src.files))
    ref["i8"] = ref["i8"].astype(np.int32)
    ds = dataset.DistDataset(src, f"pq_rt_{chunk_size}", comm=mpi_comm, chunk_size=chunk_size)
    try:
        assert len(ds) == ROWS
        rows = ds.read_rows(np.arange(ROWS))
        for name, want in ref.items():
            assert_bit_exact(np.asarray(rows[name]), want, name)
        # a scattered batch, repeats included, through the DataLoader path
        idx = [ROWS - 1, 0, 100, 100, 57]
        batch = ds.__getitems__(idx)
        for j, i in enumerate(idx):
            assert np.asarray(batch[j]["nested"]).tobytes() == ref["nested"][i].tobytes()
            assert np.asarray(batch[j]["blob"]).tobytes() == ref["blob"][i].tobytes()
    finally:
        ds.free()


def test_filtered_source_into_store(dataset_dir, mpi_comm):
    src = ParquetSource(dataset_dir, columns=["id", "vec", "lst"], filter=pc.field("label") >= 5)
    full = expected_numpy(pq.read_table(src.files))
    keep = full["label"] >= 5
    ds = dataset.DistDataset(src, "pq_filtered", comm=mpi_comm)
    try:
        n = len(ds)
        assert n == int(keep.sum())
        rows = ds.read_rows(np.arange(n))
        for name in ("id", "vec", "lst"):
            assert_bit_exact(np.asarray(rows[name]), full[name][keep], name)
    finally:
        ds.free()


def test_each_rank_reads_about_its_share(workdir, mpi_comm):
    """Through DistDataset: the bytes a rank reads from storage while loading stay close to
    its share of the data (row groups covering the share, plus at most one at each end)."""
    from conftest import write_counted_dataset

    n = 6000
    src, cfs, x = write_counted_dataset(workdir / "dd_share", n, 24, seed=5, files=2, row_group_size=200)
    cfs.reset()  # footers read at construction are not part of the share
    ds = dataset.DistDataset(src, "pq_share", comm=mpi_comm, chunk_size=700)
    try:
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        share_rows = n * (rank + 1) // size - n * rank // size
        total = src.total_bytes()
        share = total * share_rows / n
        slack = 2 * total / src.num_row_groups + 64 * 1024
        assert 0.9 * share <= cfs.bytes_read <= share + slack, (cfs.bytes_read, share, slack)
        # every row group is read once per rank at most, even with chunks that cut row groups
        assert src.stats()["row_groups_read"] <= share_rows / 200 + 2
        rows = ds.read_rows(np.array([0, n - 1, n // 2]))
        assert_bit_exact(np.asarray(rows["x"]), x[[0, n - 1, n // 2]], "x")
    finally:
        ds.free()
