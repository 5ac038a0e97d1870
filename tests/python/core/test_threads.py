"""Reads from several threads, and free() while another thread reads."""
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


def test_free_waits_for_a_read_in_flight(comm):
    """A thread reading while the main thread frees either completes its read
    or gets DDStoreStateError; it never touches freed memory."""
    s = make_store(comm)
    s.add("t", local_values(s, (16,), "float64"))
    total = s.query("t").global_rows
    want = values(np.arange(total), (16,), "float64")
    outcome = {}
    started = threading.Event()

    def reader():
        n = 0
        out = np.zeros((total, 16))
        try:
            while True:
                s.get("t", out)
                assert same_bytes(out, want)
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
