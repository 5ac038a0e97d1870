"""Fixtures of the Parquet/Petastorm suite.

Every rank writes its own identical copy of the synthetic datasets (same seed) into
its own temporary directory: no file system is shared between ranks, and no test
depends on another rank's writes.
"""
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

ROWS = 203  # not a multiple of the row-group size nor of any rank count


def _shared_data():
    env = os.environ.get("PYDDSTORE_SHARED_DATA")
    if env:
        return Path(env)
    # CI lays shared/ beside the clone; a session has it at /work/shared.
    here = Path(__file__).resolve()
    for cand in (here.parents[3].parent / "shared" / "data", Path("/work/shared/data")):
        if cand.is_dir():
            return cand
    return None


def make_table(n=ROWS, seed=0):
    """A table with one column of each kind the source must convert."""
    rng = np.random.default_rng(seed)
    fixed = rng.standard_normal((n, 3)).astype(np.float32)
    nested = rng.standard_normal((n, 2, 4))
    blobs = rng.integers(0, 256, size=(n, 6), dtype=np.uint8)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i32": pa.array(rng.integers(-2**31, 2**31, n, dtype=np.int32)),
        "i8": pa.array(rng.integers(-128, 128, n, dtype=np.int8)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": pa.array(np.where(np.arange(n) % 17 == 0, np.nan, rng.standard_normal(n))),
        "flag": pa.array(rng.integers(0, 2, n).astype(bool)),
        "label": pa.array(rng.integers(0, 10, n, dtype=np.int64)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(fixed.ravel()), 3),
        "lst": pa.array([list(range(i, i + 5)) for i in range(n)], type=pa.list_(pa.int64())),
        "nested": pa.array(nested.tolist(), type=pa.list_(pa.list_(pa.float64()))),
        "blob": pa.array([bytes(b) for b in blobs], type=pa.binary()),
        "fblob": pa.array([bytes(b) for b in blobs[:, :4]], type=pa.binary(4)),
    })


def write_dataset(root, table, files=3, row_group_size=13):
    """Split table over `files` part files (Spark-like names, _SUCCESS and a .crc beside)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n = table.num_rows
    for k in range(files):
        a, b = n * k // files, n * (k + 1) // files
        pq.write_table(table.slice(a, b - a), root / f"part-{k:05d}.parquet",
                       row_group_size=row_group_size, compression="snappy")
    (root / "_SUCCESS").write_bytes(b"")
    (root / ".part-00000.parquet.crc").write_bytes(b"not parquet")
    return root


def write_counted_dataset(root, n, width, seed, files, row_group_size):
    """A dataset of n rows (x: `width` random float32, y: the row index) for
    the tests that count bytes read, and a ParquetSource over it through a
    CountingFileSystem; returns (source, counting file system, x)."""
    import pyarrow.fs as pafs

    from pyddstore.torch.parquet import CountingFileSystem, ParquetSource

    x = np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), width), "y": pa.array(np.arange(n))})
    root = write_dataset(root, t, files=files, row_group_size=row_group_size)
    cfs = CountingFileSystem(pafs.LocalFileSystem())
    return ParquetSource(str(root), filesystem=cfs.filesystem), cfs, x


def expected_numpy(table):
    """The numpy value of every column, derived from pyarrow's own reading of the data."""
    out = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        t = col.type
        if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
            out[name] = np.array([np.frombuffer(v, dtype=np.uint8) for v in col.to_pylist()])
        elif pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
            leaf = t
            while pa.types.is_list(leaf) or pa.types.is_fixed_size_list(leaf):
                leaf = leaf.value_type
            out[name] = np.array(col.to_pylist(), dtype=leaf.to_pandas_dtype())
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


def assert_bit_exact(got, want, what=""):
    """Same dtype, same shape, same bytes (NaNs included)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), f"{what}: values differ"


@pytest.fixture(scope="session")
def mpi_comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def table():
    return make_table()


@pytest.fixture(scope="session")
def workdir():
    """A private directory per rank (pytest's tmp_path_factory numbers its directories per
    process and prunes old ones, which races between the ranks of one job)."""
    d = Path(tempfile.mkdtemp(prefix="pyddstore-parquet-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def dataset_dir(workdir, table):
    return write_dataset(workdir / "ds", table)


@pytest.fixture(scope="session")
def shared_data():
    return _shared_data()
