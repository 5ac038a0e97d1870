"""Run pytest on every rank of an MPI job; only rank 0 prints its report.

Usage: mpiexec -n N python tests/python/run_pytest.py [pytest args...]
A failing test aborts the whole job (see conftest.py), so the exit status of
mpiexec is non-zero when any rank fails.
"""
import os
import sys

try:
    import torch  # noqa: F401  (before MPI starts, as pyddstore.torch requires)
except ImportError:
    pass
from mpi4py import MPI

import pytest

args = sys.argv[1:]
rank = MPI.COMM_WORLD.Get_rank()
if rank != 0:
    # Silence the other ranks' progress (their failures still reach stderr
    # through conftest.py's abort hook).
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    args = ["-p", "no:cacheprovider"] + args
code = pytest.main(args)
# Agree on the outcome so that mpiexec reports it whatever rank saw it.
code = MPI.COMM_WORLD.allreduce(int(code), op=MPI.MAX)
sys.exit(code)
