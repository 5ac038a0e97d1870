"""Fixtures of the pyddstore core suite (the `comm` fixture and the
abort-on-failure hook come from tests/python/conftest.py)."""
import pytest

from core_helpers import make_store


@pytest.fixture
def store(comm):
    """A store over the whole communicator, freed after the test."""
    s = make_store(comm)
    yield s
    s.free()
