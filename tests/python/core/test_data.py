"""Every rank writes rows derived from their global index and reads all of
them back, bit-exact, through get, get_batch and get_ranges."""
import contextlib

import numpy as np
import pytest

from core_helpers import (ALL_DTYPES, layout, local_values, make_store, same_bytes, values,
                          width_value)

WIDTHS = ["1", "2", "full"]


def _store(comm, spec):
    if spec == "2" and comm.Get_size() % 2:
        pytest.skip("width 2 needs an even number of ranks")  # same decision on every rank
    return make_store(comm, width_value(spec, comm.Get_size()))


@contextlib.contextmanager
def _filled(comm, spec, name, row_shape, dtype, salt=0):
    """A store of width `spec` holding `name`, each rank's rows derived from
    their global index; yields the store and every row as it must read back.
    Freed at the end."""
    with _store(comm, spec) as s:
        s.add(name, local_values(s, row_shape, dtype, salt=salt))
        yield s, values(np.arange(s.query(name).global_rows), row_shape, dtype, salt=salt)


@pytest.mark.parametrize("spec", WIDTHS)
def test_groups(comm, spec):
    with _store(comm, spec) as s:
        w = comm.Get_size() if spec == "full" else int(spec)
        assert s.width == w and s.group_size == w
        assert s.group_index == comm.Get_rank() // w
        assert s.group_rank == comm.Get_rank() % w
        assert s.rank == comm.Get_rank() and s.size == comm.Get_size()
        assert s.group_comm.Get_size() == w and s.group_comm.Get_rank() == s.group_rank
        assert s.comm is comm


@pytest.mark.parametrize("spec", WIDTHS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_all_rows(comm, spec, dtype):
    shape = (3,)
    with _filled(comm, spec, "v", shape, dtype) as (s, want):
        _, offsets = layout(s.group_size)
        total = int(offsets[-1])
        q = s.query("v")
        assert q.global_rows == total and q.dtype == np.dtype(dtype) and q.row_shape == shape
        assert q.row_bytes == 3 * np.dtype(dtype).itemsize
        assert list(q.offsets) == list(offsets)
        assert q.first_row == offsets[s.group_rank]
        assert q.local_rows == offsets[s.group_rank + 1] - offsets[s.group_rank]
        out = np.zeros((total,) + shape, dtype=dtype)
        s.get("v", out, 0)  # spans every shard
        assert same_bytes(out, want)
        for g in range(total):  # single rows, start as numpy integer
            one = np.zeros((1,) + shape, dtype=dtype)
            s.get("v", one, np.int64(g))
            assert same_bytes(one, want[g:g + 1])


@pytest.mark.parametrize("spec", WIDTHS)
def test_spanning_and_zero_row_reads(comm, spec):
    with _filled(comm, spec, "a", (2,), "int64") as (s, want):
        total = len(want)
        for start in range(total + 1):
            for n in range(total - start + 1):
                out = np.full((n, 2), -1, dtype=np.int64)
                s.get("a", out, start)
                assert same_bytes(out, want[start:start + n])
        empty = np.zeros((0, 2), dtype=np.int64)
        s.get("a", empty, total)  # zero rows at the very end
        s.get("a", empty, np.uint32(total))


@pytest.mark.parametrize("spec", WIDTHS)
def test_row_shapes_1d_2d_3d(comm, spec):
    with _store(comm, spec) as s:
        shapes = {"one": (), "two": (4,), "three": (2, 3), "four": (2, 1, 3)}
        for i, (name, shape) in enumerate(shapes.items()):
            s.add(name, local_values(s, shape, "float32", salt=i))
        assert s.names() == list(shapes)
        for i, (name, shape) in enumerate(shapes.items()):
            q = s.query(name)
            assert q.row_shape == shape
            want = values(np.arange(q.global_rows), shape, "float32", salt=i)
            out = np.zeros((q.global_rows,) + shape, dtype=np.float32)
            s.get(name, out)
            assert same_bytes(out, want)
            total, disp, itemsize = s.info(name)
            assert (total, disp, itemsize) == (q.global_rows, max(1, int(np.prod(shape))), 4)


@pytest.mark.parametrize("spec", WIDTHS)
def test_get_batch_random_order_with_repeats(comm, spec):
    with _filled(comm, spec, "x", (3,), "float64") as (s, wx):
        s.add("y", local_values(s, (), "int32", salt=5))
        total = len(wx)
        wy = values(np.arange(total), (), "int32", salt=5)
        rng = np.random.default_rng(1234 + comm.Get_rank())
        for it in range(5):
            # Rank 1 reads nothing in some rounds: it still takes part.
            n = 0 if (comm.Get_rank() == 1 and it % 2) else 23
            rows = rng.integers(0, total, size=n)
            if n:
                rows[:3] = rows[0]  # repeats
            out = np.zeros((n + 2, 3), dtype=np.float64)  # larger than needed is fine
            s.get_batch("x", out, rows)
            assert same_bytes(out[:n], wx[rows])
            outy = np.zeros(n, dtype=np.int32)
            s.get_batch("y", outy, list(rows))
            assert same_bytes(outy, wy[rows])
        # rows as another integer dtype
        rows = np.arange(total, dtype=np.int32)[::-1]
        out = np.zeros((total, 3))
        s.get_batch("x", out, rows)
        assert same_bytes(out, wx[::-1])


@pytest.mark.parametrize("spec", WIDTHS)
def test_get_ranges(comm, spec):
    with _filled(comm, spec, "r", (2,), "uint16") as (s, want):
        total = len(want)
        starts = [0, total - 1, 1, 0, total, 2]
        counts = [total, 1, 0, 2, 0, total - 2]
        n = sum(counts)
        out = np.zeros((n, 2), dtype=np.uint16)
        s.get_ranges("r", out, starts, counts)
        expect = np.concatenate([want[a:a + c] for a, c in zip(starts, counts)])
        assert same_bytes(out, expect)
        s.get_ranges("r", np.zeros((0, 2), dtype=np.uint16), [], [])


def test_several_variables_and_stores_side_by_side(comm):
    """Stores over communicators split from one communicator coexist (and
    with a store over the whole communicator)."""
    rank = comm.Get_rank()
    half = comm.Split(rank % 2, rank)
    whole = make_store(comm)
    part = make_store(half)
    try:
        whole.add("w", local_values(whole, (2,), "int64", salt=1))
        part.add("p", local_values(part, (5,), "uint8", salt=2))
        whole.add("w2", local_values(whole, (), "float64", salt=3))
        tw = whole.query("w").global_rows
        tp = part.query("p").global_rows
        out = np.zeros((tw, 2), dtype=np.int64)
        whole.get("w", out)
        assert same_bytes(out, values(np.arange(tw), (2,), "int64", salt=1))
        outp = np.zeros((tp, 5), dtype=np.uint8)
        part.get("p", outp)
        assert same_bytes(outp, values(np.arange(tp), (5,), "uint8", salt=2))
        out2 = np.zeros(tw, dtype=np.float64)
        whole.get("w2", out2)
        assert same_bytes(out2, values(np.arange(tw), (), "float64", salt=3))
        assert whole.names() == ["w", "w2"] and part.names() == ["p"]
        with pytest.raises(KeyError):
            part.query("w")
    finally:
        part.free()
        whole.free()
        half.Free()


def test_torch_cpu_tensor_and_buffers(comm):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "from_numpy"):  # tests/python/torch seen as a namespace package
        pytest.skip("torch is not installed")
    with make_store(comm) as s:
        s.add("t", torch.from_numpy(local_values(s, (4,), "float32")))
        total = s.query("t").global_rows
        want = values(np.arange(total), (4,), "float32")
        out = torch.zeros((total, 4), dtype=torch.float32)
        s.get("t", out, 0)  # written in place, no copy
        assert same_bytes(out.numpy(), want)
        rows = torch.tensor([total - 1, 0])
        out2 = torch.zeros((2, 4), dtype=torch.float32)
        s.get_batch("t", out2, rows)
        assert same_bytes(out2.numpy(), want[[total - 1, 0]])
        s.add("b", local_values(s, (), "uint8"))
        nb = s.query("b").global_rows
        ba = bytearray(nb)
        s.get("b", ba)
        assert bytes(ba) == values(np.arange(nb), (), "uint8").tobytes()


def test_stats(comm):
    with make_store(comm) as s:
        s.add("s", local_values(s, (2,), "int64"))
        s.reset_stats()
        total = s.query("s").global_rows
        out = np.zeros((total, 2), dtype=np.int64)
        s.get("s", out)
        st = s.stats()
        assert st["read_calls"] == 1
        assert st["rows_local"] + st["rows_remote"] == total
        assert st["bytes_local"] + st["bytes_remote"] == out.nbytes
        assert st["read_seconds"] >= 0
        s.reset_stats()
        assert s.stats()["read_calls"] == 0
