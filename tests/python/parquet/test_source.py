"""ParquetSource on its own (no store): conversion, bulk ranges, selection, filters,
URLs, and what is read from storage. Every test does the same work on every rank and
makes no collective call except where it says so."""
import io
import os
import pickle
import re

import numpy as np
import pytest

from conftest import ROWS, assert_bit_exact, expected_numpy, write_counted_dataset, write_dataset

pa = pytest.importorskip("pyarrow")
import pyarrow.compute as pc  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pyddstore.torch.parquet import CountingFileSystem, ParquetSource  # noqa: E402
from pyddstore.torch.petastorm import read_unischema  # noqa: E402


def test_len_and_full_range_bit_exact(dataset_dir, table):
    src = ParquetSource(dataset_dir)
    assert len(src) == ROWS
    assert len(src.files) == 3 and all(f.endswith(".parquet") for f in src.files)
    got = src.read_range(0, ROWS)
    # pyarrow reading the same files is the reference, not the in-memory table we wrote.
    ref = expected_numpy(pq.read_table(src.files))
    assert list(got) == table.column_names
    for name in table.column_names:
        assert_bit_exact(got[name], ref[name], name)
    assert got["vec"].shape == (ROWS, 3) and got["nested"].shape == (ROWS, 2, 4)
    assert got["blob"].dtype == np.uint8 and got["blob"].shape == (ROWS, 6)
    assert got["fblob"].shape == (ROWS, 4) and got["i8"].dtype == np.int8


def test_ranges_and_items_agree(dataset_dir):
    src = ParquetSource(dataset_dir)
    whole = src.read_range(0, ROWS)
    # Ranges that start/stop inside row groups and files, chunked as DistDataset(chunk_size=) does.
    for chunk in (1, 5, 13, 64):
        parts = [src.read_range(a, min(a + chunk, ROWS)) for a in range(0, ROWS, chunk)]
        for name, ref in whole.items():
            assert_bit_exact(np.concatenate([p[name] for p in parts]), ref, f"{name} chunk={chunk}")
    for i in (0, 12, 13, 66, 67, ROWS - 1, -1):
        row = src[i]
        j = i % ROWS
        for name, ref in whole.items():
            v = row[name]
            if ref.ndim == 1:
                assert np.isscalar(v) or v.shape == ()
                assert np.asarray(v).dtype == ref.dtype
            assert np.asarray(v).tobytes() == ref[j].tobytes(), (name, i)
    empty = src.read_range(7, 7)
    assert empty["vec"].shape == (0, 3) and empty["id"].shape == (0,)
    with pytest.raises(IndexError):
        src[ROWS]
    with pytest.raises(IndexError):
        src.read_range(5, ROWS + 1)
    with pytest.raises(TypeError):
        src.read_range(0.0, 3)


def test_len_reads_no_data(workdir):
    n = 20000
    src, cfs, x = write_counted_dataset(workdir / "lenonly", n, 16, seed=3, files=2, row_group_size=1000)
    assert len(src) == n
    total = sum(os.path.getsize(f) for f in src.files)
    # Arrow reads the last 64 KiB of each file to find the footer; nothing else.
    assert cfs.bytes_read <= 2 * 64 * 1024 + 8192 < total / 4, (cfs.bytes_read, total)
    cfs.reset()
    got = src.read_range(0, n)
    assert_bit_exact(got["x"], x, "x")
    assert cfs.bytes_read >= src.total_bytes()  # the data pages really come through the wrapper


def _share(n, rank, size):
    return n * rank // size, n * (rank + 1) // size


@pytest.mark.parametrize("parts", [2, 4])
def test_each_share_reads_close_to_its_bytes(workdir, parts):
    """A rank's read of its contiguous share reads about share/total of the data bytes:
    only the row groups covering the share (at most one extra row group at each end)."""
    n = 4000
    rng = np.random.default_rng(1)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 32).astype(np.float32)), 32),
                  "y": pa.array(np.arange(n))})
    root = write_dataset(workdir / f"share{parts}", t, files=2, row_group_size=100)
    cfs = CountingFileSystem(pafs.LocalFileSystem())
    data_bytes = None
    for r in range(parts):
        src = ParquetSource(str(root), filesystem=cfs.filesystem)
        data_bytes = src.total_bytes()
        rg_bytes = data_bytes / src.num_row_groups
        cfs.reset()
        src.reset_stats()
        a, b = _share(n, r, parts)
        got = src.read_range(a, b)
        assert_bit_exact(got["y"], np.arange(a, b), "y")
        share = data_bytes * (b - a) / n
        assert src.stats()["row_groups_read"] <= (b - a) / 100 + 2
        assert cfs.bytes_read <= share + 2 * rg_bytes + 64 * 1024, (r, cfs.bytes_read, share)
        assert cfs.bytes_read >= 0.9 * share, (r, cfs.bytes_read, share)


def test_this_ranks_share_bytes(workdir, mpi_comm):
    """The same check for this job's real rank layout (no collective call)."""
    n = 3000
    t = pa.table({"x": pa.array(np.arange(n, dtype=np.float64)), "z": pa.array(np.arange(n) * 3)})
    root = write_dataset(workdir / "share_mpi", t, files=3, row_group_size=50)
    cfs = CountingFileSystem(pafs.LocalFileSystem())
    src = ParquetSource(str(root), filesystem=cfs.filesystem)
    a, b = _share(n, mpi_comm.Get_rank(), mpi_comm.Get_size())
    cfs.reset()
    got = src.read_range(a, b)
    assert_bit_exact(got["z"], np.arange(a, b) * 3, "z")
    share = src.total_bytes() * (b - a) / n
    assert cfs.bytes_read <= share + 2 * src.total_bytes() / src.num_row_groups + 64 * 1024


def test_column_selection(dataset_dir):
    src = ParquetSource(dataset_dir, columns=["label", "f.*", re.compile("v.c")])
    assert src.columns == ["label", "f32", "f64", "flag", "fblob", "vec"]
    assert list(src[3]) == src.columns
    with pytest.raises(ValueError, match="matches no column"):
        ParquetSource(dataset_dir, columns=["nope"])
    with pytest.raises(TypeError):
        ParquetSource(dataset_dir, columns="label")


def test_filters(dataset_dir, table):
    full = expected_numpy(pq.read_table(ParquetSource(dataset_dir).files))
    keep_expr = full["label"] < 4
    keep_pred = full["id"] % 3 == 0
    cases = [
        (pc.field("label") < 4, keep_expr),
        ([("label", "<", 4)], keep_expr),
        (lambda row: row["id"] % 3 == 0, keep_pred),
        ([pc.field("label") < 4, lambda row: row["id"] % 3 == 0], keep_expr & keep_pred),
    ]
    for filt, keep in cases:
        src = ParquetSource(dataset_dir, columns=["id", "vec", "blob"], filter=filt)
        assert len(src) == int(keep.sum())
        got = src.read_range(0, len(src))
        for name in ("id", "vec", "blob"):
            assert_bit_exact(got[name], full[name][keep], name)
        # chunked reads that cut row groups give the same rows
        parts = [src.read_range(a, min(a + 7, len(src))) for a in range(0, len(src), 7)]
        assert_bit_exact(np.concatenate([p["id"] for p in parts]), full["id"][keep], "chunked id")
    # A predicate may look at a column that is not loaded.
    src = ParquetSource(dataset_dir, columns=["vec"], filter=lambda r: r["flag"], filter_columns=["flag"])
    assert_bit_exact(src.read_range(0, len(src))["vec"], full["vec"][full["flag"]], "vec by flag")


def test_urls(dataset_dir, table):
    ref = ParquetSource(dataset_dir).read_range(0, ROWS)
    src = ParquetSource("file://" + str(dataset_dir))
    assert_bit_exact(src.read_range(0, ROWS)["nested"], ref["nested"], "file:// nested")
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    base = f"/pyddstore-test-{os.getpid()}"
    for f in ParquetSource(dataset_dir).files:
        with open(f, "rb") as fin, mem.open(f"{base}/{os.path.basename(f)}", "wb") as fout:
            fout.write(fin.read())
    try:
        src = ParquetSource(f"memory://{base}")
        assert len(src) == ROWS
        got = src.read_range(10, 90)
        for name in ("blob", "lst", "f64"):
            assert_bit_exact(got[name], ref[name][10:90], f"memory:// {name}")
    finally:
        mem.rm(base, recursive=True)


def test_shapes_codecs_dtypes(workdir):
    n = 20
    rng = np.random.default_rng(2)
    arrs = rng.standard_normal((n, 2, 3)).astype(np.float32)

    def npy(a):
        b = io.BytesIO()
        np.save(b, a)
        return b.getvalue()

    t = pa.table({"flat": pa.array(arrs.reshape(n, 6).tolist(), type=pa.list_(pa.float32())),
                  "npy": pa.array([npy(a) for a in arrs]),
                  "raw": pa.array([a.tobytes() for a in arrs]),
                  "small": pa.array(np.arange(n, dtype=np.int16))})
    root = write_dataset(workdir / "codecs", t, files=1, row_group_size=6)
    src = ParquetSource(root, field_shapes={"flat": (2, 3), "raw": (24,)}, codecs={"npy": "ndarray"},
                        dtypes={"small": np.int32})
    got = src.read_range(0, n)
    assert_bit_exact(got["flat"], arrs, "flat")
    assert_bit_exact(got["npy"], arrs, "npy")
    assert_bit_exact(got["raw"].view(np.float32).reshape(n, 2, 3), arrs, "raw")
    assert_bit_exact(got["small"], np.arange(n, dtype=np.int32), "small")
    dec = ParquetSource(root, columns=["raw"], codecs={"raw": lambda b: np.frombuffer(b, np.float32).reshape(2, 3)})
    assert_bit_exact(dec.read_range(0, n)["raw"], arrs, "callable codec")
    with pytest.raises(ValueError, match="not a selected column"):
        ParquetSource(root, columns=["flat"], codecs={"npy": "ndarray"})
    with pytest.raises(ValueError, match="codecs"):
        ParquetSource(root, codecs={"npy": "pickle"})


def test_conversion_errors(workdir):
    t = pa.table({"ragged": pa.array([[1], [1, 2]]), "nulls": pa.array([1, None]),
                  "blobs": pa.array([b"a", b"bc"])})
    root = write_dataset(workdir / "bad", t, files=1)
    src = ParquetSource(root)
    assert len(src) == 2
    with pytest.raises(ValueError, match="different lengths"):
        ParquetSource(root, columns=["ragged"]).read_range(0, 2)
    with pytest.raises(ValueError, match="null"):
        ParquetSource(root, columns=["nulls"]).read_range(0, 2)
    assert ParquetSource(root, columns=["nulls"], filter=pc.field("nulls").is_valid()).read_range(0, 1)["nulls"][0] == 1
    with pytest.raises(ValueError, match="different lengths"):
        ParquetSource(root, columns=["blobs"]).read_range(0, 2)
    with pytest.raises(FileNotFoundError):
        ParquetSource(workdir / "does-not-exist")


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/pyddstore-pwned-by-pickle",))


def test_unischema_reader_never_executes(tmp_path):
    marker = "/tmp/pyddstore-pwned-by-pickle"
    if os.path.exists(marker):
        os.remove(marker)
    blob = pickle.dumps({"fields": [_Evil()]}, protocol=2)
    with pytest.raises(ValueError, match="UnischemaField"):
        read_unischema(blob)
    for proto in (0, 4, 5):
        with pytest.raises(ValueError):
            read_unischema(pickle.dumps([_Evil()], protocol=proto))
    assert not os.path.exists(marker)
