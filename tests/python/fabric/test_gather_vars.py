"""Several variables in one read (PyDDStore.get_batch_vars, dds_get_batch_vars):
one gather request per remote owner carries the rows of every variable (the
issue-24 request format with variable switches), rows bit-exact for variables
of different row sizes and dtypes, a variable read one-sided under auto (rows
over the switch size) beside gathered ones, a method-2 reader, and argument
errors."""

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError

from fabric_helpers import PROVIDER, environ, gather_store, joined_reader, local_values, offsets, shared_tmpdir, values
from suite_helpers import remote_owners

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")

FIELDS = (("x", (3,), "float32", 1), ("y", (), "int64", 2), ("z", (40,), "uint8", 3))


def add_fields(s, rank, size, fields=FIELDS):
    for name, shape, dtype, salt in fields:
        s.add(name, local_values(rank, size, shape, dtype, salt))


def read_all(store, rows, fields=FIELDS):
    outs = [np.zeros((len(rows),) + shape, dtype=dtype) for _, shape, dtype, _ in fields]
    store.get_batch_vars([f[0] for f in fields], outs, rows)
    for out, (_, shape, dtype, salt) in zip(outs, fields):
        assert out.tobytes() == values(rows, shape, dtype, salt).tobytes()


@pytest.mark.parametrize("method", [1, 2])
def test_one_request_per_owner_for_all_variables(comm, rank, size, method):
    hs = shared_tmpdir(comm, "ddstore-gvars-") + "/hs" if method == 2 else None
    s = gather_store(comm, method=method, hs=hs, gather="always")
    try:
        add_fields(s, rank, size)
        off = offsets(size)
        total = int(off[-1])
        rng = np.random.default_rng(rank + 300)
        for k in (1, 9, 257):
            rows = rng.integers(0, total, size=k)
            rows[:k // 2] = rows[k // 2:2 * (k // 2)]  # repeats
            before = s.stats()
            read_all(s, rows)
            after = s.stats()
            assert after["gather_requests"] - before["gather_requests"] == remote_owners(off, rows, {rank})
            assert after["read_calls"] - before["read_calls"] == len(FIELDS)
        comm.Barrier()
    finally:
        s.free()


def test_one_sided_variable_beside_gathered_ones(comm, rank, size):
    """Under auto, rows over the switch size are read one-sided; the others
    still share one request per owner."""
    fields = FIELDS + (("big", (40000,), "uint8", 4),)
    s = gather_store(comm)
    try:
        add_fields(s, rank, size, fields)
        off = offsets(size)
        rows = np.random.default_rng(rank + 7).integers(0, int(off[-1]), size=20)
        before = s.stats()["gather_requests"]
        read_all(s, rows, fields)
        if PROVIDER in ("tcp", "shm") and size > 1:
            assert s.stats()["gather_requests"] - before == remote_owners(off, rows, {rank})
        comm.Barrier()
    finally:
        s.free()


def test_method2_reader_reads_several_variables(comm, rank, size):
    hs = shared_tmpdir(comm, "ddstore-gvars-") + "/hs"
    s = gather_store(comm, method=2, hs=hs)
    try:
        add_fields(s, rank, size)
        comm.Barrier()
        if rank == 0:
            with joined_reader(hs, size) as r:
                off = offsets(size)
                rows = np.random.default_rng(11).integers(0, int(off[-1]), size=300)
                read_all(r, rows)
                if PROVIDER == "tcp":
                    assert r.stats()["gather_requests"] == remote_owners(off, rows, set())
        comm.Barrier()
    finally:
        s.free()


def test_argument_errors(comm, rank, size):
    s = gather_store(comm)
    try:
        add_fields(s, rank, size)
        total = int(offsets(size)[-1])
        x = np.zeros((4, 3), np.float32)
        y = np.zeros(4, np.int64)
        with pytest.raises(DDStoreError, match="no variable 'nope'"):
            s.get_batch_vars(["x", "nope"], [x, y], [0, 1, 2, 3])
        with pytest.raises(DDStoreError, match="2 variable names but 1 outputs"):
            s.get_batch_vars(["x", "y"], [x], [0])
        with pytest.raises(DDStoreError, match="outside"):
            s.get_batch_vars(["x", "y"], [x, y], [0, total])
        with pytest.raises(DDStoreError, match="output has 4 rows, 5 requested"):
            s.get_batch_vars(["x", "y"], [x, y], [0, 1, 2, 3, 4])
        s.get_batch_vars([], [], [0])  # nothing to read
        comm.Barrier()
    finally:
        s.free()


@pytest.mark.parametrize("spin", ["0", "1000", "not-a-number"])
def test_readers_spin_or_block(comm, rank, size, spin):
    """DDSTORE_FABRIC_SPIN_US: readers that block at once (0), poll longer,
    or fall back to the default on a bad value all read bit-exact."""
    with environ(DDSTORE_FABRIC_SPIN_US=spin):
        s = gather_store(comm)
    try:
        add_fields(s, rank, size)
        rows = np.random.default_rng(rank + 3).integers(0, int(offsets(size)[-1]), size=100)
        read_all(s, rows)
        comm.Barrier()
    finally:
        s.free()
