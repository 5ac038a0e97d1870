"""Reads from several threads, and free() while another thread reads."""
import os
import threading
import time

import numpy as np
import pytest

from pyddstore import DDStoreStateError

from core_helpers import METHOD, local_values, make_store, same_bytes, values


def test_concurrent_gets(store):
    if METHOD == 0:
        pytest.skip("dds_get is thread-safe for methods 1 and 2 only")
    s = store
    s.add("t", local_values(s, (4,), "int64"))
    total = s.query("t").global_rows
    want = values(np.arange(total), (4,), "int64")
    errors = []

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                g = int(rng.integers(total))
                one = np.zeros((1, 4), dtype=np.int64)
                s.get("t", one, g)
                assert same_bytes(one, want[g:g + 1])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("call", ["get", "get_batch"])
def test_free_waits_for_a_read_in_flight(comm, call):
    """A thread reading while the main thread frees either completes its read
    or gets DDStoreStateError; it never touches freed memory. get_batch takes
    the handle's lighter guard (its fast path), get the lock."""
    s = make_store(comm)
    if call == "get_batch" and s.reads_collective:
        s.free()
        pytest.skip("get_batch is collective here: a thread cannot read while another frees")
    s.add("t", local_values(s, (16,), "float64"))
    total = s.query("t").global_rows
    want = values(np.arange(total), (16,), "float64")
    rows = np.arange(total, dtype=np.int64)[::-1].copy()
    outcome = {}
    started = threading.Event()

    def reader():
        n = 0
        out = np.zeros((total, 16))
        try:
            while True:
                if call == "get":
                    s.get("t", out)
                    assert same_bytes(out, want)
                else:
                    s.get_batch("t", out, rows)
                    assert same_bytes(out, want[::-1])
                n += 1
                started.set()
        except DDStoreStateError:
            outcome["reads"] = n
        except Exception as e:  # noqa: BLE001
            outcome["error"] = e
        finally:
            started.set()

    t = threading.Thread(target=reader)
    t.start()
    started.wait(30)
    time.sleep(0.05)
    comm.Barrier()
    s.free()
    t.join(30)
    assert not t.is_alive()
    assert "error" not in outcome, outcome
    assert outcome.get("reads", 0) >= 1


def test_fork_child_cannot_read(comm):
    """A store made before fork() refuses reads in the child, on get_batch's
    fast path too, with the fork message; the parent reads on."""
    s = make_store(comm)
    try:
        s.add("t", local_values(s, (4,), "int64"))
        total = s.query("t").global_rows
        out = np.zeros((total, 4), dtype=np.int64)
        rows = np.arange(total, dtype=np.int64)
        s.get_batch("t", out, rows)  # the layout is known: the child takes the fast path
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no MPI, report through the pipe and leave at once
            os.close(r)
            try:
                s.get_batch("t", out, rows)
                msg = b"read"
            except DDStoreStateError as e:
                msg = b"refused: " + str(e).encode()
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                msg = b"other: " + repr(e).encode()
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        got = b""
        while chunk := os.read(r, 4096):
            got += chunk
        os.close(r)
        os.waitpid(pid, 0)
        assert got.startswith(b"refused: ") and b"fork" in got, got
        s.get_batch("t", out, rows)
        assert same_bytes(out, values(rows, (4,), "int64"))
        comm.Barrier()
    finally:
        s.free()
