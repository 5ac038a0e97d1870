"""Method 1 (libfabric, addresses exchanged over MPI): reads that need no
help from the owning rank, concurrent readers, receive buffers, and a clear
error for an absent provider."""
import time

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, PyDDStore

from fabric_helpers import PROVIDER, add_rows, local_values, offsets, read_in_threads, rows_of, through_fabric, values

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")


@pytest.fixture
def store(comm):
    """A method-1 store on the suite's provider, freed after the test."""
    with through_fabric():
        s = PyDDStore(comm, 1, fabric=PROVIDER)
    yield s
    s.free()


def test_read_while_the_owner_computes(store, comm, rank, size):
    """The owner runs pure numpy/Python work without calling the library;
    the others' reads (more than a provider's command queue holds) finish
    long before it does."""
    if size < 2:
        pytest.skip("needs a second rank")
    s = store
    s.add("v", local_values(rank, size, (512,), "float64", 5))
    owner = 0 if size == 2 else size - 1  # rank 1 holds no rows
    off = offsets(size)
    lo, n = int(off[owner]), rows_of(owner, size)
    busy = 5.0
    comm.Barrier()
    t0 = time.monotonic()
    if rank == owner:
        a = np.random.default_rng(0).random((200, 200))
        while time.monotonic() - t0 < busy:
            a = np.tanh(a @ a.T / 200.0)
    else:
        want = values(np.arange(lo, lo + n), (512,), "float64", 5)
        one = np.zeros((1, 512))
        for i in range(1200):
            s.get("v", one, lo + i % n)
            assert one.tobytes() == want[i % n:i % n + 1].tobytes()
        t = time.monotonic() - t0
        assert t < 0.8 * busy, f"reads took {t:.2f} s while the owner computed for {busy} s"
    comm.Barrier()


def test_four_threads_read_concurrently(store, comm, rank, size):
    s = store
    want = add_rows(s, rank, size, "t", (33,), "int16", 6)
    read_in_threads(s, "t", want, [rank * 10 + i for i in range(4)], batches=40, most_rows=64)
    comm.Barrier()


def test_registered_receive_buffer(store, comm, rank, size):
    s = store
    want = add_rows(s, rank, size, "r", (100,), "uint8", 7)
    total = len(want)
    buf = np.zeros((total, 100), dtype=np.uint8)
    s.register_recv(buf)
    for start in range(total):
        s.get("r", buf[start:], start)
        assert buf[start:].tobytes() == want[start:].tobytes()
    rows = np.arange(total)[::-1].copy()
    s.get_batch("r", buf, rows)
    assert buf.tobytes() == want[rows].tobytes()
    s.unregister_recv(buf)
    with pytest.raises(DDStoreError):
        s.unregister_recv(buf)
    comm.Barrier()


def test_absent_provider_is_a_clear_error(comm):
    with pytest.raises(DDStoreError) as e, through_fabric():
        PyDDStore(comm, 1, fabric="no_such_provider")
    assert "no_such_provider" in str(e.value)
    comm.Barrier()


@pytest.mark.parametrize("iov,inflight", [(1, 1), (2, 3), (4, 256)])
def test_batched_reads_in_every_read_shape(comm, rank, size, iov, inflight, monkeypatch):
    """get_batch/get_ranges stay bit-exact whatever the number of rows one
    libfabric read carries (fi_read or multi-transfer fi_readmsg) and the
    number of reads in flight: any order, repeats, rows spanning shards,
    runs of consecutive rows, rows far apart in one owner's shard."""
    monkeypatch.setenv("DDSTORE_FABRIC_IOV", str(iov))
    monkeypatch.setenv("DDSTORE_FABRIC_INFLIGHT", str(inflight))
    with through_fabric():
        s = PyDDStore(comm, 1, fabric=PROVIDER)
    try:
        s.add("b", local_values(rank, size, (3, 5), "float32", 9))
        total = int(offsets(size)[-1])
        rng = np.random.default_rng(100 + rank)
        for k in (1, 2, 7, 97):
            rows = rng.integers(0, total, size=k)
            rows[k // 2:] = rows[:k - k // 2][::-1]  # repeats, reversed order
            out = np.zeros((k, 3, 5), np.float32)
            s.get_batch("b", out, rows)
            assert out.tobytes() == values(rows, (3, 5), "float32", 9).tobytes()
        starts = np.array([0, total - 2, 1, 0], dtype=np.int64)
        counts = np.array([total, 2, total - 1, 1], dtype=np.int64)
        out = np.zeros((int(counts.sum()), 3, 5), np.float32)
        s.get_ranges("b", out, starts, counts)
        want = np.concatenate([values(np.arange(a, a + c), (3, 5), "float32", 9) for a, c in zip(starts, counts)])
        assert out.tobytes() == want.tobytes()
    finally:
        s.free()
