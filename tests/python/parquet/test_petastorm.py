"""The shared dataset written by the real Petastorm 0.13.1 reads back as Petastorm's
make_reader returned it (petastorm_codecs_expected.npz), element by element, through
the source alone and through DistDataset, at any number of ranks.

JPEG: our decoder is Pillow, Petastorm's is OpenCV; we allow a difference of
JPEG_TOLERANCE levels (measured here: 0)."""
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from pyddstore.torch.parquet import ParquetSource, PetastormSource  # noqa: E402

JPEG_TOLERANCE = 2
FIELDS = {  # name: (dtype, shape, codec) as the data README documents the Unischema
    "id": (np.int32, (), "scalar"),
    "value_f64": (np.float64, (), "scalar"),
    "nd_f32": (np.float32, (4, 5), "ndarray"),
    "cnd_i16": (np.int16, (3, 7), "compressed_ndarray"),
    "img_png": (np.uint8, (16, 16, 3), "png"),
    "img_jpeg": (np.uint8, (8, 8, 3), "jpeg"),
}


@pytest.fixture(scope="module")
def petastorm_data(shared_data):
    if shared_data is None or not (shared_data / "petastorm_codecs").is_dir():
        pytest.skip("shared/data/petastorm_codecs not found (set PYDDSTORE_SHARED_DATA)")
    exp = np.load(shared_data / "petastorm_codecs_expected.npz", allow_pickle=False)
    return shared_data / "petastorm_codecs", {k: exp[k] for k in exp.files}


def _compare(got, expected, what):
    order = np.argsort(got["id"], kind="stable")
    assert np.array_equal(got["id"][order], expected["id"]), f"{what}: ids"
    for name in FIELDS:
        g, e = got[name][order], expected[name]
        assert g.shape == e.shape, f"{what} {name}: shape {g.shape} != {e.shape}"
        if name == "img_jpeg":
            diff = np.abs(g.astype(np.int16) - e.astype(np.int16))
            assert diff.max() <= JPEG_TOLERANCE, f"{what} {name}: JPEG differs by {diff.max()} levels"
            src = np.abs(g.astype(np.int16) - expected["img_jpeg_source"].astype(np.int16))
            assert src.max() <= 35 + JPEG_TOLERANCE
        else:
            assert g.dtype == e.dtype or what.startswith("DistDataset"), f"{what} {name}: dtype {g.dtype}"
            for i in range(len(e)):  # element by element, exact (floats by their bits)
                assert np.array_equal(g[i].astype(e.dtype), e[i]), f"{what} {name}: row id {i} differs"
                assert g[i].astype(e.dtype).tobytes() == e[i].tobytes(), f"{what} {name}: row id {i} bits"


def test_unischema_recovered_without_unpickling(petastorm_data, dataset_dir):
    path, _ = petastorm_data
    src = PetastormSource(path)
    got = {f.name: (f.dtype, f.shape, f.codec) for f in src.petastorm_fields}
    assert got == {k: (np.dtype(d), s, c) for k, (d, s, c) in FIELDS.items()}
    assert len(src) == 48 and src.num_row_groups == 2
    assert ParquetSource(path, petastorm=False).read_range(0, 1)["nd_f32"].dtype == np.uint8  # raw bytes
    with pytest.raises(ValueError, match="Unischema"):
        PetastormSource(dataset_dir)  # plain Parquet: no Unischema


def test_source_shares_match_make_reader(petastorm_data, mpi_comm):
    path, expected = petastorm_data
    src = PetastormSource(path)
    n, r, size = len(src), mpi_comm.Get_rank(), mpi_comm.Get_size()
    a, b = n * r // size, n * (r + 1) // size
    mine = src.read_range(a, b)
    shares = mpi_comm.allgather(mine)  # collective, same order on every rank
    got = {k: np.concatenate([s[k] for s in shares]) for k in FIELDS}
    _compare(got, expected, f"source at {size} ranks")
    one = src[n - 1]
    assert isinstance(one["id"], np.int32) and one["img_png"].shape == (16, 16, 3)


def test_schema_fields_regex(petastorm_data):
    path, expected = petastorm_data
    src = PetastormSource(path, schema_fields=["id", "img_.*"])
    assert src.columns == ["id", "img_png", "img_jpeg"]
    row = src.read_range(0, len(src))
    assert np.array_equal(np.sort(row["id"]), expected["id"])


def test_distdataset_matches_make_reader(petastorm_data, mpi_comm):
    dataset = pytest.importorskip("pyddstore.torch.dataset")
    path, expected = petastorm_data
    # As docs/migration/petastorm.rst shows: no casts needed, the int16 field is stored as int16.
    src = PetastormSource(path)
    ds = dataset.DistDataset(src, "petastorm_codecs", comm=mpi_comm)
    try:
        n = len(ds)
        assert n == 48
        rows = ds.read_rows(np.arange(n))  # collective with method 0: every rank, same order
        got = {k: np.asarray(rows[k]) for k in FIELDS}
        _compare(got, expected, f"DistDataset at {mpi_comm.Get_size()} ranks")
        assert got["cnd_i16"].dtype == np.int16
        s = ds[mpi_comm.Get_rank() % n]  # one sample, not collective
        assert s["img_jpeg"].shape == (8, 8, 3)
    finally:
        ds.free()
