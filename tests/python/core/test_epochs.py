"""Epochs for code written for the original DDStore: get() inside and
outside them, empty epochs, the context manager."""
import numpy as np

from core_helpers import local_values, make_store, same_bytes, values


def test_get_inside_and_outside_epochs(comm, store):
    s = store
    s.add("e", local_values(s, (3,), "float32"))
    total = s.query("e").global_rows
    want = values(np.arange(total), (3,), "float32")
    rng = np.random.default_rng(comm.Get_rank())
    for it in range(4):
        s.epoch_begin()
        # A different number of gets per rank inside one epoch.
        for _ in range(1 + (comm.Get_rank() + it) % 3):
            g = int(rng.integers(total))
            one = np.zeros((1, 3), dtype=np.float32)
            s.get("e", one, np.int64(g))
            assert same_bytes(one, want[g:g + 1])
        s.epoch_end()
        out = np.zeros((total, 3), dtype=np.float32)
        s.get("e", out)  # outside any epoch
        assert same_bytes(out, want)


def test_empty_and_nested_in_context_manager(comm, store):
    s = store
    s.add("e", local_values(s, (), "int64"))
    total = s.query("e").global_rows
    for _ in range(3):
        s.epoch_begin()
        s.epoch_end()
    with s.epoch() as same:
        assert same is s
    with s.epoch():
        out = np.zeros(total, dtype=np.int64)
        s.get("e", out)
        rows = np.arange(total)[::-1]
        out2 = np.zeros(total, dtype=np.int64)
        s.get_batch("e", out2, rows)  # batched reads inside an epoch too
    assert same_bytes(out, values(np.arange(total), (), "int64"))
    assert same_bytes(out2, values(rows, (), "int64"))


def test_epochs_with_width(comm):
    if comm.Get_size() % 2:
        return
    s = make_store(comm, 2)
    try:
        s.add("w", local_values(s, (2,), "uint8"))
        total = s.query("w").global_rows
        with s.epoch():
            out = np.zeros((total, 2), dtype=np.uint8)
            s.get("w", out)
        assert same_bytes(out, values(np.arange(total), (2,), "uint8"))
    finally:
        s.free()
