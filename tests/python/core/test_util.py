"""pyddstore.util, the helpers other packages may import: every public name
resolves and is documented, the agreement rule raises on every rank, and
pyddstore.torch imports no private name of pyddstore."""
import ast
import pathlib

import pytest

import pyddstore
from pyddstore import util

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_public_names_resolve_and_are_documented():
    for name in util.__all__:
        obj = getattr(util, name)
        if callable(obj):
            assert obj.__doc__, name
    assert util.DDStoreError is pyddstore.DDStoreError
    assert util.SUPPORTED_DTYPES is pyddstore.SUPPORTED_DTYPES
    assert util.enable_logging is pyddstore.enable_logging


def test_raise_agreed_fails_every_rank_alike(comm):
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    util.raise_agreed(comm, None)
    util.raise_agreed(comm, None, ("same", 1))
    mine = util.DDStoreRangeError("row 9 is outside [0, 3)", util.DDS_ERANGE)
    with pytest.raises(util.DDStoreRangeError) as ei:
        util.raise_agreed(comm, mine if rank == last else None, "ignored when one failed")
    assert ei.value.code == util.DDS_ERANGE
    if rank == last:
        assert ei.value is mine
    else:
        assert str(ei.value) == f"rank {last}: row 9 is outside [0, 3)"
    # Not a DDStoreError: the failing rank raises its own, the others a DDStoreError naming its class.
    with pytest.raises(Exception) as ei:
        util.raise_agreed(comm, KeyError("k") if rank == last else None)
    assert isinstance(ei.value, KeyError if rank == last else util.DDStoreError)
    if comm.Get_size() > 1:
        with pytest.raises(util.DDStoreValueError) as ei:
            util.raise_agreed(comm, None, rank)
        assert ei.value.code == util.DDS_EMISMATCH


def test_agree_returns_the_payloads(comm):
    assert util.agree(comm, None, None, pytest.fail) == [None] * comm.Get_size()
    got = util.agree(comm, None, comm.Get_rank(), pytest.fail, failed=lambda p: False)
    assert got == list(range(comm.Get_size()))


def test_torch_imports_no_private_pyddstore_name():
    """pyddstore.torch uses pyddstore's public names only (pyddstore.util)."""
    bad = []
    for path in sorted((ROOT / "pyddstore-torch" / "pyddstore" / "torch").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                parts = n.split(".")
                if parts[0] == "pyddstore" and len(parts) > 1 and parts[1] != "torch" \
                        and parts[1].startswith("_"):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {n}")
    assert not bad, "\n".join(bad)
