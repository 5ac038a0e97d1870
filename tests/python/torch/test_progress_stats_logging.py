"""Loading progress bar, read counters (stats, to_tensorboard), logging with
the rank, and the single version number. Run under mpiexec (every rank)."""
import io
import logging
import os
import sys
import tempfile

import numpy as np
import pytest
import torch
from conftest import MapSource, RangeSource, value

import pyddstore
import pyddstore._logging as plog
import pyddstore.torch as pt
from pyddstore.torch import DistDataset, DistDatasetReader
from pyddstore.torch import _progress

N = 23  # uneven shares for 2, 3 and 4 ranks
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COUNTERS = ["read_calls", "rows_local", "rows_remote", "bytes_local", "bytes_remote", "read_seconds",
            "gather_requests", "gather_bytes"]


def make(i):
    """A small dict sample."""
    return {"x": value(i, "tensor"), "y": value(i, "int")}


class FakeWriter:
    """Records add_scalar() calls, as a SummaryWriter would receive them."""

    def __init__(self):
        self.calls = []

    def add_scalar(self, tag, value, step):
        self.calls.append((tag, value, step))


class Tty(io.StringIO):
    """A stream that says it is an interactive terminal."""

    def isatty(self):
        return True


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(_progress.ENV, raising=False)
    return monkeypatch


@pytest.fixture
def pyddstore_logger():
    """The 'pyddstore' logger, restored (handlers, level) after the test."""
    log = logging.getLogger("pyddstore")
    saved = (list(log.handlers), log.level)
    yield log
    log.handlers[:] = saved[0]
    log.setLevel(saved[1])


# ---- progress ------------------------------------------------------------------------------

def test_progress_rules(clean_env):
    tty, pipe = Tty(), io.StringIO()
    # Never on a rank other than 0, whatever is asked.
    for progress in (None, True, False):
        assert not _progress.wanted(progress, 1, tty)
        assert not _progress.wanted(progress, 3, tty)
    # Forced on rank 0.
    assert _progress.wanted(True, 0, pipe)
    assert not _progress.wanted(False, 0, tty)
    # Automatic: a terminal only.
    assert _progress.wanted(None, 0, tty)
    assert not _progress.wanted(None, 0, pipe)
    # The environment decides when the argument is None, not over an explicit argument.
    clean_env.setenv(_progress.ENV, "1")
    assert _progress.wanted(None, 0, pipe)
    assert not _progress.wanted(False, 0, pipe)
    assert not _progress.wanted(None, 1, pipe)
    clean_env.setenv(_progress.ENV, "0")
    assert not _progress.wanted(None, 0, tty)
    assert _progress.wanted(True, 0, tty)


def test_progress_argument_checks(world, clean_env):
    with pytest.raises(TypeError, match="progress must be None"):
        DistDataset(MapSource(N, make), "p-bad", progress="yes")
    clean_env.setenv(_progress.ENV, "on")
    with pytest.raises(ValueError, match="DDSTORE_PROGRESS"):
        DistDataset(MapSource(N, make), "p-bad-env")


@pytest.mark.parametrize("how", ["per-sample", "read_range", "chunks"])
def test_progress_bar_rank0_only(world, clean_env, capsys, how):
    pytest.importorskip("tqdm")  # the same on every rank: no bar (and no collective skew) without it
    src = (RangeSource if how == "read_range" else MapSource)(N, make)
    chunk = 4 if how == "chunks" else None
    capsys.readouterr()
    ds = DistDataset(src, f"p-{how}", chunk_size=chunk, progress=True)
    err = capsys.readouterr().err
    share = N * (world.rank + 1) // world.size - N * world.rank // world.size
    if world.rank == 0:
        assert "p-" + how in err and "loading" in err, err
        assert f"{share}/{share}" in err, err  # the bar reached the whole share
    else:
        assert err == "", err
    assert torch.equal(ds[N - 1]["x"], value(N - 1, "tensor"))  # loaded right
    ds.free()


def test_progress_auto_off_when_not_a_terminal(world, clean_env, capsys):
    capsys.readouterr()  # sys.stderr is pytest's capture: not a terminal
    ds = DistDataset(MapSource(N, make), "p-auto")
    assert capsys.readouterr().err == ""
    ds.free()
    clean_env.setenv(_progress.ENV, "1")
    ds = DistDataset(MapSource(N, make), "p-env")
    err = capsys.readouterr().err
    assert ("loading" in err) == (world.rank == 0), err
    ds.free()


def test_progress_without_tqdm(world, clean_env, capsys, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="pyddstore"):
        ds = DistDataset(MapSource(N, make), "p-notqdm", progress=True)
    assert "loading" not in capsys.readouterr().err
    warned = [r for r in caplog.records if "tqdm is not installed" in r.getMessage()]
    assert len(warned) == (1 if world.rank == 0 else 0)
    assert all(r.rank == 0 and r.name == "pyddstore.torch" for r in warned)
    ds.free()


# ---- counters ------------------------------------------------------------------------------

def test_stats_and_to_tensorboard(world):
    ds = DistDataset(MapSource(N, make), "c-stats")
    assert ds.stats() == ds.ddstore.stats()
    ds.ddstore.reset_stats()
    rows = [0, N // 2, N - 1]
    for i in rows:
        assert ds[i]["y"] == value(i, "int")
    st = ds.stats()
    assert list(st) == COUNTERS
    assert st["read_calls"] >= len(rows)
    assert st["rows_local"] + st["rows_remote"] == len(rows) * 2  # one row per field
    if world.size == 1:
        assert st["rows_remote"] == 0 and st["bytes_remote"] == 0
    else:
        assert st["rows_remote"] > 0 and st["bytes_remote"] > 0  # someone else's share
    assert st["read_seconds"] >= 0

    w = FakeWriter()
    written = ds.to_tensorboard(w, 7)
    assert written == st == ds.stats()  # writing does not read
    assert w.calls == [("ddstore/" + k, st[k], 7) for k in COUNTERS]
    w2 = FakeWriter()
    ds.ddstore.to_tensorboard(w2, np.int64(3), prefix="train/io/")
    assert w2.calls == [("train/io/" + k, st[k], 3) for k in COUNTERS]

    with pytest.raises(TypeError, match="add_scalar"):
        ds.to_tensorboard(object(), 1)
    with pytest.raises(TypeError, match="step"):
        ds.to_tensorboard(w, 1.5)
    with pytest.raises(TypeError, match="step"):
        ds.to_tensorboard(w, True)
    with pytest.raises(TypeError, match="prefix"):
        ds.to_tensorboard(w, 1, prefix=None)
    assert len(w.calls) == len(COUNTERS)  # nothing written by the failed calls
    ds.free()
    with pytest.raises(RuntimeError, match="freed"):
        ds.stats()
    with pytest.raises(RuntimeError, match="freed"):
        ds.to_tensorboard(w, 1)
    # The reader side has the same counters API (it shares the reading code).
    assert DistDatasetReader.stats is DistDataset.stats
    assert DistDatasetReader.to_tensorboard is DistDataset.to_tensorboard


def test_to_tensorboard_summary_writer(world):
    # Only where tensorboard is installed (the same on every rank, so no rank waits).
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    ds = DistDataset(MapSource(N, make), "c-tb")
    ds[0]
    with tempfile.TemporaryDirectory() as d:
        writer = SummaryWriter(log_dir=d)
        written = ds.to_tensorboard(writer, 1)
        writer.close()
        events = [f for f in os.listdir(d) if f.startswith("events.")]
        assert events and os.path.getsize(os.path.join(d, events[0])) > 0
    assert written["read_calls"] >= 1
    ds.free()


# ---- logging -------------------------------------------------------------------------------

def test_rank_in_records(world, pyddstore_logger, monkeypatch):
    assert plog.current_rank() == world.rank
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    pyddstore_logger.addHandler(Keep())
    logging.getLogger("pyddstore.torch").warning("from torch")
    pyddstore_logger.warning("from core")
    assert [(r.name, r.getMessage(), r.rank) for r in seen] == [
        ("pyddstore.torch", "from torch", world.rank), ("pyddstore", "from core", world.rank)]
    # Without MPI, the launcher's environment says the rank.
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    for var in plog._RANK_ENV:
        monkeypatch.delenv(var, raising=False)
    assert plog.current_rank() == 0
    monkeypatch.setenv("SLURM_PROCID", "6")
    assert plog.current_rank() == 6
    monkeypatch.setenv("PMI_RANK", "5")
    assert plog.current_rank() == 5


def test_default_nothing_on_other_ranks(world, capsys, pyddstore_logger):
    root = logging.getLogger()
    saved = list(root.handlers)  # pytest's own capture handlers: the application "configured" none
    root.handlers.clear()
    try:
        capsys.readouterr()
        logging.getLogger("pyddstore.torch").info("polish-info")
        logging.getLogger("pyddstore.torch").warning("polish-warning")
        err = capsys.readouterr().err
    finally:
        root.handlers[:] = saved
    if world.rank == 0:
        assert "polish-warning" in err and "polish-info" not in err, err
    else:
        assert err == "", err


def test_enable_logging_load_summary(world, pyddstore_logger, clean_env):
    assert pt.enable_logging is plog.enable_logging
    for bad, exc in (("LOUD", ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="enable_logging"):
            plog.enable_logging(bad)
    with pytest.raises(TypeError, match="all_ranks"):
        plog.enable_logging("DEBUG", all_ranks=1)

    out = io.StringIO()
    h = plog.enable_logging("DEBUG", stream=out)
    assert pyddstore_logger.level == logging.DEBUG and h in pyddstore_logger.handlers
    DistDataset(MapSource(N, make), "l-rank0", progress=False).free()
    text = out.getvalue()
    if world.rank == 0:
        assert "[rank 0] pyddstore.torch DEBUG: DistDataset 'l-rank0': loaded" in text, text
    else:
        assert text == "", text

    out = io.StringIO()
    h2 = plog.enable_logging(logging.DEBUG, all_ranks=True, stream=out)
    assert h not in pyddstore_logger.handlers and h2 in pyddstore_logger.handlers  # replaced
    DistDataset(MapSource(N, make), "l-all", progress=False).free()
    share = N * (world.rank + 1) // world.size - N * world.rank // world.size
    assert f"[rank {world.rank}] pyddstore.torch DEBUG: DistDataset 'l-all': loaded {share} of {N}" \
        in out.getvalue(), out.getvalue()


# ---- version -------------------------------------------------------------------------------

def test_one_version():
    with open(os.path.join(ROOT, "libddstore", "VERSION")) as f:
        release = f.read().strip()
    link = os.path.join(ROOT, "pyddstore-torch", "VERSION")
    assert os.path.islink(link) and os.readlink(link) == "../libddstore/VERSION"
    assert pt.__version__ == release == pyddstore.__version__
    with open(os.path.join(ROOT, "pyddstore-torch", "pyproject.toml")) as f:
        pyproject = f.read()
    assert 'dynamic = ["version"]' in pyproject and 'version = { file = "VERSION" }' in pyproject
    assert torch.__version__  # torch stays importable alongside (imported first)
