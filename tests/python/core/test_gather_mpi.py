"""Method-0 owner-side gather (issue 24): collective reads exchange one
request and one reply per owner, in bounded rounds, instead of one MPI_Get
per row.

Runs where method-0 batched reads are collective (DDSTORE_NODE_LOCAL=0, or
a group across nodes) with at least 2 ranks; skipped elsewhere. The read
protocol settings are read at store creation, so each test sets them in
os.environ (alike on every rank) around its store.
"""
import os
from unittest import mock

import numpy as np
import pytest
from mpi4py import MPI

import pyddstore
from pyddstore import DDStoreError

from core_helpers import METHOD, make_store
from suite_helpers import owners_of

pytestmark = pytest.mark.skipif(METHOD != 0, reason="method 0 only")

ROW_SIZES = (1, 24, 4096)


def gather_store(comm, **settings):
    settings.setdefault("DDSTORE_GATHER", "auto")
    with mock.patch.dict(os.environ, {k: str(v) for k, v in settings.items()}):
        s = make_store(comm)
    if comm.Get_size() < 2 or not s.info()["reads_collective"]:
        s.free()
        pytest.skip("method-0 reads are not collective here (set DDSTORE_NODE_LOCAL=0)")
    return s


def add_rows(s, comm, name, row_bytes, salt=0):
    """Shards of unequal sizes (one rank of four holds none); returns every
    row and the offsets (each rank's first row, then the total)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = [(37 * (r + 1) + salt) % 61 + (0 if r == 2 else 5) for r in range(size)]
    if size > 2:
        counts[2] = 0
    rng = np.random.default_rng(1000 * salt + 7)
    every = rng.integers(0, 256, size=(sum(counts), row_bytes), dtype=np.uint8)
    lo = sum(counts[:rank])
    s.add(name, np.ascontiguousarray(every[lo:lo + counts[rank]]))
    return every, np.concatenate([[0], np.cumsum(counts)])


def near_ranks(s):
    """Group ranks this rank reads by memcpy, never by gather: itself, and its node
    peers where shards are in node shared memory (across hosts). Group-collective."""
    names = s.group_comm.allgather(MPI.Get_processor_name())
    if not s.info()["node_shm"]:
        return {s.group_rank}
    return {r for r, name in enumerate(names) if name == names[s.group_rank]}


NODE_MAX_BYTES = 128 << 10  # DDS_GATHER_NODE_MAX_BYTES (internal.h)


def expected_requests(s, off, rows, near, row_bytes, round_bytes=16 << 20):
    """Gather requests one read of `rows` (row_bytes per row, all variables
    together) sends: one per other owner, or where requests go by node
    (read_protocol says so) one per other host, except hosts asked for
    more than NODE_MAX_BYTES in a round, one per owner there. Reads of one
    round (or rounds no larger than NODE_MAX_BYTES). Group-collective."""
    hosts = s.group_comm.allgather(MPI.Get_processor_name())
    owners = owners_of(off, np.asarray(rows, dtype=np.int64))
    far = [int(o) for o in owners if int(o) not in near]
    if "by node" not in s.info()["read_protocol"]:
        return len(set(far))
    per_host = {}
    for o in far:
        per_host.setdefault(hosts[o], []).append(o)
    return sum(1 if round_bytes <= NODE_MAX_BYTES or len(os_) * row_bytes <= NODE_MAX_BYTES else len(set(os_))
               for os_ in per_host.values())


@pytest.mark.parametrize("row_bytes", ROW_SIZES)
def test_batches_bit_exact_and_counted(comm, row_bytes):
    s = gather_store(comm)
    try:
        assert s.info()["read_protocol"].startswith("owner-side gather")
        every, off = add_rows(s, comm, "g", row_bytes)
        near = near_ranks(s)
        rng = np.random.default_rng(comm.Get_rank() + 11)
        for k in range(6):
            n = int(rng.integers(0, 300)) if k else 0
            rows = rng.integers(0, len(every), size=n)
            if n > 4:
                rows[1] = rows[0]  # a repeat
                rows[3] = rows[2] + 1 if rows[2] + 1 < len(every) else rows[2]
            out = np.full((n, row_bytes), 0xEE, dtype=np.uint8)
            s.reset_stats()
            s.get_batch("g", out, rows)
            assert out.tobytes() == every[rows].tobytes()
            st = s.stats()
            assert st["gather_requests"] == expected_requests(s, off, rows, near, row_bytes)
            far = ~np.isin(owners_of(off, rows), list(near))
            assert st["gather_bytes"] == int(far.sum()) * row_bytes
    finally:
        s.free()


def test_get_ranges_spanning_shards(comm):
    s = gather_store(comm)
    try:
        every, off = add_rows(s, comm, "r", 12)
        near = near_ranks(s)
        total = len(every)
        rng = np.random.default_rng(comm.Get_rank() + 3)
        starts = rng.integers(0, total, size=20)
        lens = np.minimum(rng.integers(0, total // 2 + 1, size=20), total - starts)
        starts[0], lens[0] = 0, total  # the whole variable, every shard
        out = np.zeros((int(lens.sum()), 12), dtype=np.uint8)
        s.reset_stats()
        s.get_ranges("r", out, starts, lens)
        want = np.concatenate([every[a:a + b] for a, b in zip(starts, lens)])
        assert out.tobytes() == want.tobytes()
        held = [r for r in range(s.group_size) if off[r + 1] > off[r]]
        assert s.stats()["gather_requests"] == expected_requests(s, off, off[held], near, 12)
    finally:
        s.free()


@pytest.mark.parametrize("row_bytes", (3, 4096))
def test_batches_larger_than_a_round(comm, row_bytes):
    """A tiny round cap: many rounds, ranks needing different numbers of
    them, transfers longer than a round split."""
    s = gather_store(comm, DDSTORE_GATHER_ROUND_BYTES=5000)
    try:
        every, off = add_rows(s, comm, "big", row_bytes, salt=1)
        near = near_ranks(s)
        rng = np.random.default_rng(comm.Get_rank())
        n = 50 + 400 * comm.Get_rank()
        rows = rng.integers(0, len(every), size=n)
        out = np.zeros((n, row_bytes), dtype=np.uint8)
        s.reset_stats()
        s.get_batch("big", out, rows)
        assert out.tobytes() == every[rows].tobytes()
        assert s.stats()["gather_requests"] == expected_requests(s, off, rows, near, row_bytes, 5000)
        out = np.zeros((len(every), row_bytes), dtype=np.uint8)
        s.get_ranges("big", out, [0], [len(every)])
        assert out.tobytes() == every.tobytes()
    finally:
        s.free()


def test_never_keeps_one_sided_reads(comm):
    s = gather_store(comm, DDSTORE_GATHER="never")
    try:
        assert s.info()["read_protocol"].startswith("one-sided")
        every, _ = add_rows(s, comm, "n", 16)
        rows = np.random.default_rng(comm.Get_rank()).integers(0, len(every), size=200)
        out = np.zeros((200, 16), dtype=np.uint8)
        s.reset_stats()
        s.get_batch("n", out, rows)
        assert out.tobytes() == every[rows].tobytes()
        assert s.stats()["gather_requests"] == 0
        assert s.stats()["rows_remote"] > 0
    finally:
        s.free()


@pytest.mark.parametrize("round_bytes", [None, 500])
def test_unequal_reads_then_free(comm, round_bytes):
    """Ranks that read more batches than the others are served by free():
    the freeing rank's step takes the first round's requests and it serves
    the later rounds too (500-byte rounds: several per read)."""
    s = gather_store(comm, **({"DDSTORE_GATHER_ROUND_BYTES": round_bytes} if round_bytes else {}))
    every, _ = add_rows(s, comm, "u", 40)
    rank = comm.Get_rank()
    rng = np.random.default_rng(rank)
    for _ in range(1 + 2 * rank):
        rows = rng.integers(0, len(every), size=64)
        out = np.zeros((64, 40), dtype=np.uint8)
        s.get_batch("u", out, rows)
        assert out.tobytes() == every[rows].tobytes()
    s.free()
    comm.Barrier()


def test_bad_row_on_one_rank_fails_everywhere(comm):
    s = gather_store(comm)
    try:
        every, _ = add_rows(s, comm, "b", 8)
        rows = np.arange(len(every), dtype=np.int64)
        if comm.Get_rank() == 1:
            rows[5] = len(every)
        out = np.zeros((len(rows), 8), dtype=np.uint8)
        with pytest.raises(DDStoreError) as e:
            s.get_batch("b", out, rows)
        assert "outside" in str(e.value)
        if comm.Get_rank() != 1:
            assert "rank 1" in str(e.value)
        # The store still works, and reads gather.
        rows[5] = 0
        s.get_batch("b", out, rows)
        assert out.tobytes() == every[rows].tobytes()
    finally:
        s.free()


def test_versioned_and_plain_reads_in_one_collective_read(comm):
    """One rank reads a versioned variable (one-sided, checked counters)
    while the others gather from a plain one in the same collective read."""
    s = gather_store(comm)
    try:
        every, _ = add_rows(s, comm, "p", 16)
        rank, size = comm.Get_rank(), comm.Get_size()
        pyddstore.init_versioned(s, "v", 3, 16, 1, block_rows=2)
        s.update("v", np.full((3, 16), rank + 1, dtype=np.uint8), 0)
        comm.Barrier()
        rows = np.arange(3 * size)[::-1].copy()
        if rank == 0:
            out = np.zeros((3 * size, 16), dtype=np.uint8)
            s.get_batch("v", out, rows)
            assert (out[:, 0] == rows // 3 + 1).all()
        else:
            prow = np.resize(np.arange(len(every)), 3 * size)
            out = np.zeros((3 * size, 16), dtype=np.uint8)
            s.get_batch("p", out, prow)
            assert out.tobytes() == every[prow].tobytes()
    finally:
        s.free()


def vars_read(s, comm, layouts, rows):
    """get_batch_vars of the variables `layouts` ({name: (every, offsets)})
    at `rows`: checks every row and returns the gather requests it sent."""
    names = list(layouts)
    outs = [np.full((len(rows), layouts[n][0].shape[1]), 0xEE, dtype=np.uint8) for n in names]
    s.reset_stats()
    s.get_batch_vars(names, outs, rows)
    for name, out in zip(names, outs):
        assert out.tobytes() == layouts[name][0][rows].tobytes(), name
    return s.stats()["gather_requests"]


@pytest.mark.parametrize("round_bytes", (None, 700))
def test_batch_vars_make_one_exchange(comm, round_bytes):
    """Several variables (row sizes 1, 24, 300; each its own shard layout)
    are one collective read: one request per owner for all of them, in
    rounds that run across the variables."""
    settings = {"DDSTORE_GATHER_ROUND_BYTES": round_bytes} if round_bytes else {}
    s = gather_store(comm, **settings)
    try:
        layouts = {name: add_rows(s, comm, name, row_bytes, salt=salt)
                   for name, row_bytes, salt in (("va", 1, 2), ("vb", 24, 3), ("vc", 300, 4))}
        near = near_ranks(s)
        total = min(len(every) for every, _ in layouts.values())
        rng = np.random.default_rng(comm.Get_rank() + 17)
        for n in (0, 1, 40, 90 * (comm.Get_rank() + 1)):
            rows = rng.integers(0, total, size=n)
            # Each variable has its own layout: a request per destination for all of them.
            got = vars_read(s, comm, layouts, rows)
            if "by node" in s.info()["read_protocol"]:
                hosts = s.group_comm.allgather(MPI.Get_processor_name())
                want = len({hosts[int(o)] for _, off in layouts.values()
                            for o in owners_of(off, rows) if int(o) not in near})
            else:
                want = len({int(o) for _, off in layouts.values() for o in owners_of(off, rows)} - near)
            assert got == want
    finally:
        s.free()


def test_batch_vars_with_a_versioned_variable(comm):
    """A versioned variable (one-sided, checked counters) read in the same
    get_batch_vars as a gathered one."""
    s = gather_store(comm)
    try:
        rank, size = comm.Get_rank(), comm.Get_size()
        every, _ = add_rows(s, comm, "p", 16, salt=5)
        pyddstore.init_versioned(s, "v", 3, 16, 1, block_rows=2)
        s.update("v", np.full((3, 16), rank + 1, dtype=np.uint8), 0)
        comm.Barrier()
        rows = np.resize(np.arange(3 * size)[::-1], min(3 * size, len(every)))
        outs = [np.zeros((len(rows), 16), dtype=np.uint8) for _ in range(2)]
        s.get_batch_vars(["v", "p"], outs, rows)
        assert (outs[0][:, 0] == rows // 3 + 1).all()
        assert outs[1].tobytes() == every[rows].tobytes()
    finally:
        s.free()


def test_unequal_batch_vars_reads_then_free(comm):
    """Ranks that make more get_batch_vars reads than the others are served
    by free(): each such read is one collective read."""
    s = gather_store(comm)
    layouts = {name: add_rows(s, comm, name, row_bytes, salt=salt)
               for name, row_bytes, salt in (("ua", 8, 6), ("ub", 40, 7))}
    total = min(len(every) for every, _ in layouts.values())
    rng = np.random.default_rng(comm.Get_rank())
    for _ in range(1 + 2 * comm.Get_rank()):
        vars_read(s, comm, layouts, rng.integers(0, total, size=64))
    s.free()
    comm.Barrier()


def test_batch_vars_one_sided_with_never(comm):
    """DDSTORE_GATHER=never: get_batch_vars reads every variable one-sided,
    still one collective read: a bad variable on one rank fails it on every
    rank, and a read after it works on every rank."""
    s = gather_store(comm, DDSTORE_GATHER="never")
    try:
        layouts = {name: add_rows(s, comm, name, row_bytes, salt=salt)
                   for name, row_bytes, salt in (("na", 4, 8), ("nb", 33, 9))}
        total = min(len(every) for every, _ in layouts.values())
        rng = np.random.default_rng(comm.Get_rank() + 5)
        for n in (0, 70):
            assert vars_read(s, comm, layouts, rng.integers(0, total, size=n)) == 0
        names = ["na", "nope" if comm.Get_rank() == 1 else "nb"]
        with pytest.raises(DDStoreError):
            s.get_batch_vars(names, [np.zeros((1, 4), np.uint8), np.zeros((1, 33), np.uint8)], [0])
        out = np.zeros((3, 4), dtype=np.uint8)
        s.get_batch("na", out, [0, 1, 2])
        assert out.tobytes() == layouts["na"][0][:3].tobytes()
    finally:
        s.free()


def test_large_batch(comm):
    """150,000 random rows of 1 byte in one read: tens of thousands of
    transfers asked of each owner in one round."""
    s = gather_store(comm)
    try:
        every, off = add_rows(s, comm, "w", 1, salt=10)
        near = near_ranks(s)
        rows = np.random.default_rng(comm.Get_rank() + 23).integers(0, len(every), size=150_000)
        out = np.zeros((len(rows), 1), dtype=np.uint8)
        s.reset_stats()
        s.get_batch("w", out, rows)
        assert out.tobytes() == every[rows].tobytes()
        assert s.stats()["gather_requests"] == expected_requests(s, off, rows, near, 1)
    finally:
        s.free()


@pytest.mark.parametrize("by_node", ["1", "0"])
def test_exchange_by_node_on_test_nodes(comm, by_node):
    """One host as two nodes (DDSTORE_TEST_NODES=2: ranks [0, n/2) and
    [n/2, n)), shards in node shared memory: a collective read exchanges the
    other node's rows with one rank of it (one request), or with each owner
    under DDSTORE_GATHER_BY_NODE=0; rows bit-exact, repeats, an empty shard,
    several variables and many rounds alike."""
    size, rank = comm.Get_size(), comm.Get_rank()
    if size < 2:
        pytest.skip("needs ranks on two test nodes")
    s = gather_store(comm, DDSTORE_TEST_NODES=2, DDSTORE_NODE_LOCAL=1, DDSTORE_GATHER_BY_NODE=by_node)
    try:
        assert ("by node" in s.info()["read_protocol"]) == (by_node == "1"), s.info()["read_protocol"]
        node = [r * 2 // size for r in range(size)]
        layouts = {name: add_rows(s, comm, name, row_bytes, salt=salt)
                   for name, row_bytes, salt in (("tn/a", 8, 6), ("tn/b", 40, 7))}
        total = min(len(every) for every, _ in layouts.values())
        rng = np.random.default_rng(rank + 31)
        for n in (0, 3, 50, 200):
            rows = rng.integers(0, total, size=n)
            far = {int(o) for _, off in layouts.values() for o in owners_of(off, rows) if node[int(o)] != node[rank]}
            want = min(len(far), 1) if by_node == "1" else len(far)
            assert vars_read(s, comm, layouts, rows) == want, (n, sorted(far))
    finally:
        s.free()
    s = gather_store(comm, DDSTORE_TEST_NODES=2, DDSTORE_NODE_LOCAL=1, DDSTORE_GATHER_BY_NODE=by_node,
                     DDSTORE_GATHER_ROUND_BYTES=300)
    try:
        every, off = add_rows(s, comm, "tn/r", 24, salt=8)
        rows = np.random.default_rng(rank).integers(0, len(every), size=100 + 50 * rank)
        out = np.zeros((len(rows), 24), dtype=np.uint8)
        s.get_batch("tn/r", out, rows)
        assert out.tobytes() == every[rows].tobytes()
    finally:
        s.free()
