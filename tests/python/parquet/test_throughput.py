"""pyddstore-throughput on a small dataset prints every figure. main() is called in
process by every rank (it is collective); rank 0 prints. The comparison with the real
Petastorm needs its own environment (ci/petastorm-venv.sh, minutes to create): it runs
only with PYDDSTORE_TEST_PETASTORM=1 (then the environment is created if missing)."""
import io
import os
import re

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyddstore.torch.dataset")
from pyddstore.torch.tools import throughput  # noqa: E402

HEADER = ["samples/s", "MB/s", "1st batch s", "load s", "peak RSS MB", "CPU s", "CPU %"]


def _check_table(text, title, size):
    assert title in text, text
    block = text.split(title, 1)[1]
    head = block.splitlines()[1]
    for h in HEADER:
        assert h in head, head
    lines = block.splitlines()[2:2 + size + 1]
    for r, line in enumerate(lines):
        cells = line.split()
        assert cells[0] == (str(r) if r < size else "all"), line
        nums = [float(c) for c in cells[1:] if c != "-"]
        assert len(nums) >= 6 and all(x >= 0 for x in nums), line
        assert nums[0] > 0 and nums[1] > 0, line  # samples/s and MB/s


def test_tool_prints_all_figures(mpi_comm, workdir):
    out = io.StringIO()
    size = mpi_comm.Get_size()
    path = os.path.join(str(workdir), "tp")  # each rank its own dir; rank 0's is broadcast
    report = throughput.main(["--synthetic", str(600 * size), "--features", "16", "--row-group-rows", "250",
                              "--synthetic-dir", path, "-m", "2", "-n", "5", "-b", "32", "-w", "2"],
                             comm=mpi_comm, out=out)
    if mpi_comm.Get_rank() == 0:
        text = out.getvalue()
        assert re.search(rf"rows={600 * size} bytes/sample=72 ranks={size}", text), text
        _check_table(text, "pyddstore (DistDataset + ThreadDataLoader)", size)
        tot = report["pyddstore"]["total"]
        assert tot["samples_s"] > 0 and tot["first_batch_s"] >= tot["load_s"] > 0
    else:
        assert report is None and out.getvalue() == ""


def test_tool_argument_errors():
    with pytest.raises(SystemExit):
        throughput._parse([])  # neither a path nor --synthetic
    with pytest.raises(SystemExit):
        throughput._parse(["x.parquet", "--synthetic", "10"])
    with pytest.raises(SystemExit):
        throughput._parse(["x.parquet", "-b", "0"])


@pytest.mark.skipif(os.environ.get("PYDDSTORE_TEST_PETASTORM") != "1",
                    reason="needs Petastorm's own environment: set PYDDSTORE_TEST_PETASTORM=1")
def test_tool_vs_petastorm(mpi_comm, workdir):
    out = io.StringIO()
    size = mpi_comm.Get_size()
    report = throughput.main(["--synthetic", str(2000 * size), "--features", "32", "--row-group-rows", "500",
                              "--synthetic-dir", os.path.join(str(workdir), "tpvs"),
                              "-m", "2", "-n", "10", "-b", "64", "--vs", "petastorm"], comm=mpi_comm, out=out)
    if mpi_comm.Get_rank() == 0:
        text = out.getvalue()
        _check_table(text, "petastorm make_batch_reader + BatchedDataLoader", size)
        _check_table(text, "petastorm make_batch_reader + InMemBatchedDataLoader", size)
        assert re.search(r"ratio pyddstore / petastorm BatchedDataLoader: samples/s x[0-9.]+", text), text
        assert re.search(r"ratio pyddstore / petastorm InMemBatchedDataLoader: samples/s x[0-9.]+", text), text
        assert report["batched"]["ratio"]["samples_s"] > 0


# ---- the Petastorm dataset in shared/data, --dtypes, errors agreed on every rank -------------

def _petastorm_codecs(shared_data):
    if shared_data is None or not (shared_data / "petastorm_codecs").is_dir():
        pytest.skip("shared/data/petastorm_codecs not found (set PYDDSTORE_SHARED_DATA)")
    return str(shared_data / "petastorm_codecs")


def _small(size):  # 48 rows: 12 per rank at 4 ranks, 3 batches of 4
    return ["-m", "1", "-n", "3", "-b", "4", "-w", "2"]


def test_dtypes_casts_at_load(mpi_comm, shared_data):
    """--dtypes as ParquetSource's dtypes=: int16 (a dtype the store may not hold) to float32;
    every codec of the dataset written by the real Petastorm decoded (PNG, JPEG, ndarrays)."""
    path = _petastorm_codecs(shared_data)
    out = io.StringIO()
    report = throughput.main([path, "--dtypes", "cnd_i16=float32"] + _small(mpi_comm.Get_size()),
                             comm=mpi_comm, out=out)
    if mpi_comm.Get_rank() == 0:
        # id 4 + value_f64 8 + nd_f32 80 + cnd_i16 as float32 84 + img_png 768 + img_jpeg 192
        assert "rows=48 bytes/sample=1136" in out.getvalue(), out.getvalue()
        assert report["pyddstore"]["total"]["samples_s"] > 0


def _error_of(mpi_comm, argv):
    with pytest.raises(throughput.ThroughputError) as ei:
        throughput.main(argv, comm=mpi_comm, out=io.StringIO())
    text = str(ei.value)
    assert "\n" not in text and "Traceback" not in text, text
    # Every rank raised the same error (none is left waiting in a collective).
    assert len(set(mpi_comm.allgather(text))) == 1
    return text


def test_unsupported_dtype_says_dtypes_first_then_encode(mpi_comm, shared_data):
    path = _petastorm_codecs(shared_data)
    text = _error_of(mpi_comm, [path, "--dtypes", "value_f64=complex64"] + _small(mpi_comm.Get_size()))
    assert re.search(r"field 'value_f64': dtype complex64 is not supported", text), text
    i, j = text.index("dtypes={'value_f64': DTYPE}"), text.index("encode=")
    assert i < j and "--dtypes value_f64=DTYPE" in text, text


def test_errors_are_one_line_on_every_rank(mpi_comm, workdir):
    missing = os.path.join(str(workdir), "no-such-dataset.parquet")
    text = _error_of(mpi_comm, [missing] + _small(mpi_comm.Get_size()))
    assert "no-such-dataset.parquet" in text, text
    size = mpi_comm.Get_size()
    text = _error_of(mpi_comm, ["--synthetic", str(8 * size), "--features", "2", "--synthetic-dir",
                                os.path.join(str(workdir), "tiny"), "-b", "64"])
    assert f"{8 * size} rows over {size} ranks is less than one batch of 64 per rank" in text, text
    text = _error_of(mpi_comm, ["--synthetic", str(200 * size), "--features", "2", "--synthetic-dir",
                                os.path.join(str(workdir), "tp-vs"), "-m", "1", "-n", "2", "-b", "16",
                                "--vs", "petastorm", "--petastorm-python", "/nonexistent/bin/python"])
    assert "--petastorm-python /nonexistent/bin/python: no such executable" in text, text


def test_vs_petastorm_refuses_columns_it_cannot_read(mpi_comm, workdir):
    """Plain Parquet with binary/string columns: Petastorm's make_batch_reader cannot make
    tensors of them, so --vs petastorm refuses up front, naming them (before any Petastorm run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(str(workdir), "strings.parquet")
    pq.write_table(pa.table({"x": pa.array([float(i) for i in range(64)]),
                             "name": pa.array([f"s{i}" for i in range(64)]),
                             "blob": pa.array([bytes([i]) for i in range(64)])}), path)
    text = _error_of(mpi_comm, [path, "--vs", "petastorm", "-m", "1", "-n", "1", "-b", "4"])
    assert "--vs petastorm" in text and "name (string)" in text and "blob (binary)" in text, text
    assert "--columns" in text, text


def test_dtypes_argument_errors():
    with pytest.raises(SystemExit):
        throughput._parse(["x.parquet", "--dtypes", "cnd_i16"])  # no =DTYPE
    with pytest.raises(SystemExit):
        throughput._parse(["x.parquet", "--dtypes", "a=notadtype"])
    assert throughput._parse(["x.parquet", "--dtypes", "a=float32", "b=int64"]).dtypes == \
        {"a": "float32", "b": "int64"}


def test_petastorm_environment_lookup_order(monkeypatch, workdir):
    """--petastorm-python, then PYDDSTORE_PETASTORM_VENV, then ${XDG_CACHE_HOME}/pyddstore/
    petastorm-venv; a folder there that does not import petastorm is an error, never deleted."""
    import sys

    from pyddstore.torch.petastorm import env as pe

    assert os.path.isfile(pe.script_path()), "petastorm_venv.sh is not installed with the package"
    monkeypatch.delenv("PYDDSTORE_PETASTORM_VENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(str(workdir), "cache"))
    assert pe.default_venv() == os.path.join(str(workdir), "cache", "pyddstore", "petastorm-venv")
    with pytest.raises(pe.PetastormEnvError, match="no Petastorm environment in .*cache/pyddstore/petastorm-venv"):
        pe.find_python(create_missing=False)
    mine = os.path.join(str(workdir), "mine")
    os.makedirs(os.path.join(mine, "keep"), exist_ok=True)
    monkeypatch.setenv("PYDDSTORE_PETASTORM_VENV", mine)
    assert pe.default_venv() == mine
    with pytest.raises(pe.PetastormEnvError, match=r"mine \(PYDDSTORE_PETASTORM_VENV\) does not import "
                                                   r"petastorm \(it has no bin/python\)"):
        pe.find_python()
    assert os.path.isdir(os.path.join(mine, "keep"))
    # The explicit interpreter comes first, and is checked: this one has no petastorm.
    with pytest.raises(pe.PetastormEnvError, match="does not import petastorm .*ModuleNotFoundError"):
        pe.find_python(sys.executable)


@pytest.mark.skipif(os.environ.get("PYDDSTORE_TEST_PETASTORM") != "1",
                    reason="needs Petastorm's own environment: set PYDDSTORE_TEST_PETASTORM=1")
def test_tool_vs_petastorm_decodes_images_and_arrays(mpi_comm, shared_data):
    """On the dataset written by Petastorm, Petastorm's side reads through make_reader, which
    decodes the PNG/JPEG/ndarray columns: both sides time the same decoded samples."""
    path = _petastorm_codecs(shared_data)
    out = io.StringIO()
    report = throughput.main([path, "--dtypes", "cnd_i16=float32", "--vs", "petastorm"] +
                             _small(mpi_comm.Get_size()), comm=mpi_comm, out=out)
    if mpi_comm.Get_rank() == 0:
        text = out.getvalue()
        _check_table(text, "petastorm make_reader + DataLoader (bytes/sample=1136)", mpi_comm.Get_size())
        assert re.search(r"ratio pyddstore / petastorm make_reader \+ DataLoader: samples/s x[0-9.]+", text), text
        assert report["rows"]["ratio"]["samples_s"] > 0


def test_petastorm_environment_made_by_the_script_is_used_as_it_is(monkeypatch, workdir):
    """An environment with the script's stamp (its pins) is found without starting its python."""
    import sys

    from pyddstore.torch.petastorm import env as pe

    venv = os.path.join(str(workdir), "stamped")
    os.makedirs(os.path.join(venv, "bin"), exist_ok=True)
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        os.symlink(sys.executable, os.path.join(venv, "bin", "python"))  # imports no petastorm
    with open(os.path.join(venv, ".pyddstore-pins"), "w") as f:
        f.write(pe._script_pins() + "\n")
    assert "petastorm==0.13.1" in pe._script_pins()
    monkeypatch.setenv("PYDDSTORE_PETASTORM_VENV", venv)
    assert pe.find_python() == os.path.join(venv, "bin", "python")
