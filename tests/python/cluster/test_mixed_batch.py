"""get_batch calls whose rows lie on the reader itself, on a node peer and on
another host at once, read back bit-exact.

Run under mpiexec with any method (DDSTORE_METHOD, DDSTORE_FABRIC) and
DDSTORE_NODE_LOCAL on or off. Across simulated hosts (tests/cluster/)
DDSTORE_TEST_HOSTS=<n> states the expected number of hosts: the test then
checks that the job really spans them and that every batch mixes all three
kinds of rows; without it the same batches run on whatever topology the job
has (one host: own rows and node peers' rows only).
"""
import os
import socket
import tempfile

import numpy as np
import pytest
from mpi4py import MPI

from pyddstore import PyDDStore

METHOD = int(os.environ.get("DDSTORE_METHOD", "0") or 0)
WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
HOSTS = WORLD.allgather(socket.gethostname())

# (name, dtype, row shape): odd row sizes so that rows are not word-aligned.
VARIABLES = [("mix/f64", "float64", (5,)), ("mix/u8", "uint8", (17,)),
             ("mix/i32", "int32", (3, 4)), ("mix/f16", "float16", (1,))]


def rows_of(r):
    """Rows held by rank r: uneven; from 5 ranks on rank 1 holds none."""
    return 0 if (r == 1 and SIZE > 4) else 3 + 2 * r


COUNTS = [rows_of(r) for r in range(SIZE)]
OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)]).astype(np.int64)


def values(rows, dtype, shape, salt):
    """Content of global rows: a function of (row, element, variable)."""
    rows = np.asarray(rows, dtype=np.int64)
    k = int(np.prod(shape))
    x = (rows[:, None] * 7919 + np.arange(k)[None, :] * 104729 + salt * 15485863) & 0xFFFFFFFF
    x = (x * 2654435761) & 0xFFFFFFFF
    dt = np.dtype(dtype)
    if dt.kind == "f":
        # Every bit pattern of a finite float, including -0.0 and subnormals.
        v = (x.astype(np.uint64) << 11).view(np.float64).astype(dt) if dt.itemsize == 8 \
            else x.astype(np.uint16).view(np.float16)
        v = np.where(np.isfinite(v), v, dt.type(-0.0))
    else:
        v = x.astype(dt)
    return np.ascontiguousarray(v.reshape((len(rows),) + shape))


def owner_rows(r):
    return np.arange(OFFSETS[r], OFFSETS[r + 1], dtype=np.int64)


def classes():
    """Ranks holding rows, by where they are: (self, node peers, other hosts)."""
    peers = [r for r in range(SIZE) if r != RANK and HOSTS[r] == HOSTS[RANK] and COUNTS[r]]
    remote = [r for r in range(SIZE) if HOSTS[r] != HOSTS[RANK] and COUNTS[r]]
    return ([RANK] if COUNTS[RANK] else []), peers, remote


def mixed_batches(seed):
    """Batches of rows interleaving the three classes, with repeats, in a
    rank-specific order; the same number of batches on every rank."""
    mine, peers, remote = classes()
    pools = [np.concatenate([owner_rows(r) for r in c]) for c in (mine, peers, remote) if c]
    rng = np.random.default_rng(1000 * seed + RANK)
    out = []
    for n in (3, 7, 16, 40):
        parts = [rng.choice(p, size=max(1, n // len(pools)), replace=True) for p in pools]
        b = np.concatenate(parts)
        rng.shuffle(b)
        out.append(np.ascontiguousarray(b, dtype=np.int64))
    # One batch that is every global row once, backwards.
    out.append(np.arange(OFFSETS[-1] - 1, -1, -1, dtype=np.int64))
    return out


@pytest.fixture(scope="module")
def store():
    kw = {}
    if METHOD == 2:
        base = os.environ.get("DDSTORE_TEST_SHARED_DIR")
        d = tempfile.mkdtemp(prefix="ddstore-mix-", dir=base) if RANK == 0 else None
        kw["handshake_dir"] = WORLD.bcast(d, root=0)
    s = PyDDStore(WORLD, METHOD, **kw)
    for salt, (name, dtype, shape) in enumerate(VARIABLES):
        s.add(name, values(owner_rows(RANK), dtype, shape, salt))
    yield s
    s.free()


def test_topology_when_across_hosts():
    want = os.environ.get("DDSTORE_TEST_HOSTS")
    if not want:
        pytest.skip("DDSTORE_TEST_HOSTS not set: not a cross-host run")
    assert len(set(HOSTS)) == int(want), f"job spans {sorted(set(HOSTS))}, expected {want} hosts"
    mine, peers, remote = classes()
    assert mine and remote, f"rank {RANK} on {HOSTS[RANK]}: own rows {mine}, other hosts {remote}"
    if HOSTS.count(HOSTS[RANK]) > 1:
        assert peers, f"rank {RANK} on {HOSTS[RANK]}: no node peer holds rows"


@pytest.mark.parametrize("name,dtype,shape", VARIABLES)
def test_mixed_get_batch_bit_exact(store, name, dtype, shape):
    salt = [v[0] for v in VARIABLES].index(name)
    for batch in mixed_batches(salt):
        out = np.empty((len(batch),) + shape, dtype=dtype)
        store.get_batch(name, out, batch)
        want = values(batch, dtype, shape, salt)
        assert out.tobytes() == want.tobytes(), f"rank {RANK}: {name} batch {batch.tolist()}"


def test_gather_requests_by_node(store):
    """With node shared memory, a batch of other hosts' rows sends one
    gather request per host it touches (a rank of that host serves its node
    peers' rows), whatever the ranks' placement; method 0 where its reads
    are collective (one exchange partner per host)."""
    info = store.info()
    _, _, remote = classes()
    # The same decision on every rank: method 0's get_batch is collective.
    if "by node" not in info["read_protocol"] or not WORLD.allreduce(bool(remote), op=MPI.LAND):
        pytest.skip(f"no requests by node here: {info['read_protocol']}")
    name, dtype, shape = VARIABLES[1]
    batch = np.concatenate([owner_rows(r) for r in remote])[::-1].copy()
    out = np.empty((len(batch),) + shape, dtype=dtype)
    before = store.stats()["gather_requests"]
    store.get_batch(name, out, batch)
    assert out.tobytes() == values(batch, dtype, shape, 1).tobytes()
    hosts = {HOSTS[r] for r in remote}
    assert store.stats()["gather_requests"] - before == len(hosts), (remote, sorted(hosts))


def test_mixed_get_ranges_and_get(store):
    """The other read calls over the same mix: one range per owner plus a
    range that straddles several owners (and so several hosts)."""
    name, dtype, shape = VARIABLES[0]
    total = int(OFFSETS[-1])
    starts = np.array([0, total // 3, max(0, total - 4)], dtype=np.int64)
    counts = np.array([min(4, total), min(total - total // 3, total // 2 + 1), min(4, total)], dtype=np.int64)
    out = np.empty((int(counts.sum()),) + shape, dtype=dtype)
    store.get_ranges(name, out, starts, counts)
    want = np.concatenate([values(np.arange(s, s + c), dtype, shape, 0) for s, c in zip(starts, counts)])
    assert out.tobytes() == want.tobytes()
    whole = np.empty((total,) + shape, dtype=dtype)
    store.get(name, whole, 0)
    assert whole.tobytes() == values(np.arange(total), dtype, shape, 0).tobytes()
