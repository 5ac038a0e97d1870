"""Fixtures of the torch_geometric suite (its modules skip where torch_geometric is not installed)."""
import pytest


@pytest.fixture
def world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def raised_everywhere(world, excinfo):
    """The message of an error every rank raised (they must agree)."""
    msg = str(excinfo.value)
    assert len(set(world.allgather(msg))) == 1
    return msg
