"""Owner-side gather over libfabric (methods 1 and 2, issue 24): a batched
read sends each remote owner one request and gets one reply, served by the
owner's progress thread. Rows bit-exact in any order with repeats and across
shards, one request per remote owner per batch (counted by stats()), none
with DDSTORE_GATHER=never, concurrent readers, method-2 readers (not in the
owners' address vectors) get replies too."""

import ctypes
import os

import numpy as np
import pytest

import pyddstore

from fabric_helpers import (PROVIDER, add_rows, environ, gather_store, joined_reader, local_values, offsets,
                            read_in_threads, shared_tmpdir, values)
from suite_helpers import remote_owners

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")


def counted_batch(s, name, rows, shape, dtype, salt):
    """get_batch of `rows` of `name` (row shape, dtype and salt as added),
    checked bit-exact; returns how many gather requests it sent."""
    out = np.zeros((len(rows),) + shape, dtype=dtype)
    before = s.stats()["gather_requests"]
    s.get_batch(name, out, rows)
    assert out.tobytes() == values(rows, shape, dtype, salt).tobytes()
    return s.stats()["gather_requests"] - before


def test_read_protocol_is_gather_on_software_rma(comm):
    with gather_store(comm) as s:
        proto = s.info()["read_protocol"]
        if comm.Get_size() > 1 and PROVIDER in ("tcp", "shm"):
            assert proto.startswith("owner-side gather"), proto


def test_tcp_replies_go_eagerly(comm):
    """Over tcp;ofi_rxm libddstore sets FI_OFI_RXM_EAGER_LIMIT to its largest reply (8 MiB)
    where the user has not set it, and keeps the user's value (run.sh runs this suite
    both ways). libfabric reads the process environment, not Python's copy of it."""
    if PROVIDER != "tcp":
        pytest.skip("the limit is ofi_rxm over tcp's")
    with gather_store(comm) as s:
        assert "ofi_rxm" in s.info()["transport"] or comm.Get_size() == 1
        got = ctypes.CDLL(None).getenv
        got.restype = ctypes.c_char_p
        value = got(b"FI_OFI_RXM_EAGER_LIMIT")
        assert value == os.environ.get("FI_OFI_RXM_EAGER_LIMIT", str(8 << 20)).encode()


@pytest.mark.parametrize("shape,dtype", [((), "int64"), ((3,), "float32"), ((4097,), "uint8"),
                                         ((70000,), "uint8")])
def test_random_batches_bit_exact_one_request_per_owner(comm, rank, size, shape, dtype):
    # "always": under "auto", rows of 32 KiB and more would be read one-sided
    with gather_store(comm, gather="always") as s:
        want = add_rows(s, rank, size, "g", shape, dtype, 7)
        off = offsets(size)
        total = len(want)
        rng = np.random.default_rng(rank + 100)
        big = np.dtype(dtype).itemsize * int(np.prod(shape)) > 10000
        for k in ((1, 7, 40) if big else (1, 7, 64, 300)):
            rows = rng.integers(0, total, size=k)
            rows[:k // 2] = rows[k // 2:2 * (k // 2)]  # repeats
            n = counted_batch(s, "g", rows, shape, dtype, 7)
            assert n == remote_owners(off, rows, {rank}), (n, k)
        # Contiguous reads spanning every shard.
        outc = np.zeros((total,) + shape, dtype=dtype)
        s.get("g", outc, 0)
        assert outc.tobytes() == want.tobytes()
        if total > 2:
            outm = np.zeros((total - 2,) + shape, dtype=dtype)
            s.get("g", outm, 1)
            assert outm.tobytes() == want[1:total - 1].tobytes()
        comm.Barrier()


@pytest.mark.parametrize("run,scattered", [(150, 5), (50, 20), (0, 64)])
def test_runs_and_scattered_rows_in_one_request(comm, rank, size, run, scattered):
    """Requests name whole rows (4 bytes a row) or byte ranges (16 bytes a
    contiguous run), whichever is shorter: a long run beside a few scattered
    rows takes the second form, scattered rows the first; both bit-exact,
    one request per remote owner."""
    per = 200
    with gather_store(comm, gather="always") as s:
        def rows_of_global(g):
            return (np.asarray(g, dtype=np.int64)[:, None] * 7 + np.arange(5)).astype(np.int32)

        s.add("m", rows_of_global(np.arange(rank * per, (rank + 1) * per)))
        rng = np.random.default_rng(rank + 7)
        for owner in range(size):
            if owner == rank:
                continue
            start = owner * per + int(rng.integers(0, per - run + 1))
            # The run in order (so it stays one transfer), the scattered rows after it.
            rows = np.concatenate([np.arange(start, start + run),
                                   rng.integers(owner * per, (owner + 1) * per, size=scattered)])
            out = np.zeros((len(rows), 5), np.int32)
            before = s.stats()["gather_requests"]
            s.get_batch("m", out, rows)
            assert s.stats()["gather_requests"] - before == 1
            assert out.tobytes() == rows_of_global(rows).tobytes()
        comm.Barrier()


def test_large_batches_split_into_several_requests(comm, rank, size):
    """More rows than one request carries (3584), and a reply over 8 MiB."""
    with gather_store(comm, gather="always") as s:
        s.add("small", local_values(rank, size, (), "int32", 8))
        s.add("big", local_values(rank, size, (1 << 20,), "uint8", 9))
        total = int(offsets(size)[-1])
        rng = np.random.default_rng(rank)
        counted_batch(s, "small", rng.integers(0, total, size=10000), (), "int32", 8)
        counted_batch(s, "big", rng.integers(0, total, size=12), (1 << 20,), "uint8", 9)
        comm.Barrier()


def test_auto_reads_large_rows_one_sided(comm, rank, size):
    """On software RMA, auto gathers rows under 32 KiB and reads larger ones one-sided."""
    with gather_store(comm) as s:
        proto = s.info()["read_protocol"]
        if PROVIDER in ("tcp", "shm"):
            assert "rows under 32768 bytes" in proto, proto
        s.add("small", local_values(rank, size, (32767,), "uint8", 12))
        s.add("large", local_values(rank, size, (32768,), "uint8", 13))
        off = offsets(size)
        total = int(off[-1])
        rows = np.random.default_rng(rank + 7).integers(0, total, size=9)
        for name, width, salt, gathered in (("small", 32767, 12, True), ("large", 32768, 13, False)):
            n = counted_batch(s, name, rows, (width,), "uint8", salt)
            assert n == (remote_owners(off, rows, {rank}) if gathered else 0), (name, n)
        comm.Barrier()


def test_gather_never_sends_no_request(comm, rank, size):
    with gather_store(comm, gather="never") as s:
        assert s.info()["read_protocol"].startswith("one-sided reads"), s.info()["read_protocol"]
        s.add("n", local_values(rank, size, (5,), "int16", 10))
        total = int(offsets(size)[-1])
        rows = np.random.default_rng(rank).integers(0, total, size=200)
        assert counted_batch(s, "n", rows, (5,), "int16", 10) == 0
        assert s.stats()["gather_requests"] == 0
        comm.Barrier()


def test_four_threads_gather_concurrently(comm, rank, size):
    with gather_store(comm) as s:
        want = add_rows(s, rank, size, "t", (17,), "float64", 11)
        read_in_threads(s, "t", want, [rank * 10 + i for i in range(4)], batches=60, most_rows=199)
        comm.Barrier()


def test_method2_reader_gets_replies(comm, rank, size):
    """A reader in rank 0's process, outside the owners' address vectors."""
    hs = shared_tmpdir(comm, "ddstore-gather-") + "/hs"
    s = gather_store(comm, method=2, hs=hs)
    try:
        s.add("m", local_values(rank, size, (6,), "uint16", 12))
        comm.Barrier()
        if rank == 0:
            with joined_reader(hs, size) as r:
                off = offsets(size)
                total = int(off[-1])
                rows = np.random.default_rng(5).integers(0, total, size=500)
                out = np.zeros((500, 6), dtype=np.uint16)
                r.get_batch("m", out, rows)
                assert out.tobytes() == values(rows, (6,), "uint16", 12).tobytes()
                # shm: a reader in a core rank's process reads one-sided (fabric_join.c).
                if PROVIDER == "tcp":
                    assert r.info()["read_protocol"].startswith("owner-side gather")
                    # A reader owns no rows: every owner is remote.
                    assert r.stats()["gather_requests"] == remote_owners(off, rows, set())
        comm.Barrier()
    finally:
        s.free()


def test_stopped_owner_gives_a_clear_error(comm, rank, size):
    """An owner that serves nothing (its process stopped) ends a reader's
    gather with a timeout naming it, within DDSTORE_READ_TIMEOUT_S."""
    import os
    import signal
    import time

    if size < 2:
        pytest.skip("needs a second rank")
    hs = shared_tmpdir(comm, "ddstore-gather-") + "/hs"
    s = gather_store(comm, method=2, hs=hs)
    pids = comm.allgather(os.getpid())
    try:
        s.add("d", np.full((5, 4), rank, dtype=np.int32))
        comm.Barrier()
        err, took, gathered = None, 0.0, True
        if rank == 0:
            with environ(DDSTORE_READ_TIMEOUT_S="2"):
                r = pyddstore.join(handshake_dir=hs, n_core=size, timeout=30)
            # shm: a reader in a core rank's process reads one-sided
            # (fabric_join.c), which needs no owner's CPU: nothing to test.
            gathered = r.info()["read_protocol"].startswith("owner-side gather")
            victim = size - 1
            rows = np.arange(5 * victim, 5 * victim + 5)
            out = np.zeros((5, 4), dtype=np.int32)
            r.get_batch("d", out, rows)  # connected and served once
            assert (out == victim).all()
            if gathered:
                os.kill(pids[victim], signal.SIGSTOP)
                for _ in range(200):  # until every thread of it has stopped
                    with open(f"/proc/{pids[victim]}/status") as f:
                        if any(ln.startswith("State:") and "T" in ln.split()[1] for ln in f):
                            break
                    time.sleep(0.01)
                t0 = time.monotonic()
                try:
                    r.get_batch("d", out, rows)
                except pyddstore.DDStoreError as e:
                    err = str(e)
                finally:
                    took = time.monotonic() - t0
                    os.kill(pids[victim], signal.SIGCONT)
            r.free()
        err, took, gathered = comm.bcast((err, took, gathered), root=0)  # every rank asserts alike
        if gathered:
            assert err is not None, "the read of a stopped owner did not fail"
            assert f"group rank {size - 1}" in err, err
            assert took < 20, took
        comm.Barrier()
    finally:
        s.free()
