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
from pyddstore.torch import throughput  # noqa: E402

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
