"""Test harness shared by every Python suite.

The suites run under ``mpiexec -n N python -m pytest``: every rank runs the
same tests in the same order. A test that fails on one rank would leave the
others waiting in their next collective call, so a failure prints its report
and aborts the whole MPI job at once.
"""
import os
import sys

import pytest

# torch (when present) must be imported before MPI starts, as pyddstore.torch
# documents; importing it here keeps test modules free to import in any order.
try:  # pragma: no cover - depends on the environment
    import torch  # noqa: F401
except ImportError:
    pass

from mpi4py import MPI  # noqa: E402


def pytest_runtest_logreport(report):
    if report.failed and MPI.COMM_WORLD.Get_size() > 1 and not os.environ.get("DDSTORE_TEST_NO_ABORT"):
        rank = MPI.COMM_WORLD.Get_rank()
        sys.stderr.write(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        sys.stderr.write(f"[rank {rank}] aborting the MPI job so that no rank hangs\n")
        sys.stderr.flush()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)


def pytest_report_header(config):
    comm = MPI.COMM_WORLD
    return f"MPI: rank {comm.Get_rank()} of {comm.Get_size()} ({MPI.Get_library_version().splitlines()[0]})"


@pytest.fixture
def comm():
    """MPI.COMM_WORLD (every rank runs the test)."""
    return MPI.COMM_WORLD


@pytest.fixture
def rank(comm):
    return comm.Get_rank()


@pytest.fixture
def size(comm):
    return comm.Get_size()
