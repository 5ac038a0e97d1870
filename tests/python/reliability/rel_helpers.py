"""Helpers shared by the reliability suite (see run.sh for how it runs)."""
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def expected_rows(rank_first, nrows, width, seed=0):
    """Deterministic float32 rows: value = global row * 16 + column + seed."""
    r = np.arange(rank_first, rank_first + nrows, dtype=np.float64)[:, None]
    return (r * 16 + np.arange(width)[None, :] + seed).astype(np.float32)


def child_env(**extra):
    """Environment for a child process: this process's variables (as Python
    sees them: an MPI singleton may have changed the C-level environment in
    ways that break a child mpiexec) plus `extra`."""
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "FI_TCP_IFACE": "lo",
                "PYTHONUNBUFFERED": "1"})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


PYTHON = sys.executable
