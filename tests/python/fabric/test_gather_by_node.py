"""Owner-side gather by node (methods 1 and 2, issue 24): where every rank
maps its node peers' shards (node shared memory, DDSTORE_NODE_LOCAL on), a
batched read sends one request per node it touches, to one rank of that
node, which serves its peers' rows from shared memory; a node asked for more
than 128 KiB, DDSTORE_GATHER_BY_NODE=0, and stores without node shared memory
send one request per owner. One host plays two nodes (DDSTORE_TEST_NODES=2:
ranks [0, n/2) and [n/2, n)), so rows of the other half travel through the
provider. Rows bit-exact in any order with repeats, rows of a rank that holds
none, several variables in one request, concurrent readers, versioned rows
never torn."""

import numpy as np
import pytest

import pyddstore

from fabric_helpers import PROVIDER, add_rows, environ, offsets, read_in_threads, values
from suite_helpers import owners_of, read_while_rewritten

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")

NODE_MAX_BYTES = 128 << 10  # DDS_GATHER_NODE_MAX_BYTES (fabric_internal.h)


def node_of(rank, size):
    """The test node of `rank` under DDSTORE_TEST_NODES=2 (store.c's split)."""
    return rank * 2 // size


def two_node_store(comm, method=1, by_node=None, node_local="1", **kw):
    """A core store over the suite's provider on two test nodes (`kw`: the
    store's other options)."""
    with environ(DDSTORE_TEST_NODES="2", DDSTORE_NODE_LOCAL=node_local, DDSTORE_GATHER=None,
                 DDSTORE_GATHER_BY_NODE=by_node):
        return pyddstore.PyDDStore(comm, method, fabric=PROVIDER, **kw)


def expected_requests(rank, size, rows, row_bytes, by_node=True):
    """Gather requests one read of `rows` sends from `rank`: per node of the
    other half, one, or one per owner where the node's rows exceed
    NODE_MAX_BYTES (or without by-node requests)."""
    owners = owners_of(offsets(size), rows)
    remote = owners[[node_of(int(o), size) != node_of(rank, size) for o in owners]]
    if not len(remote):
        return 0
    per_owner = len(set(remote.tolist()))
    if not by_node or len(remote) * row_bytes > NODE_MAX_BYTES:
        return per_owner
    return 1


def remote_heavy_rows(rng, rank, size, n):
    """`n` random rows (repeats, any order) mixing this rank's node and the
    other one, most of them on the other."""
    off = offsets(size)
    mine = node_of(rank, size)
    far = np.concatenate([np.arange(off[r], off[r + 1]) for r in range(size) if node_of(r, size) != mine])
    near = np.concatenate([np.arange(off[r], off[r + 1]) for r in range(size) if node_of(r, size) == mine])
    pools = [p for p in (far, near) if len(p)]  # at 2 ranks, rank 1 holds no rows
    rows = np.concatenate([rng.choice(p, size=k) for p, k in zip(pools, (n - n // 4, n // 4)) if k]) \
        if len(pools) == 2 else rng.choice(pools[0], size=n)
    rng.shuffle(rows)
    return rows.astype(np.int64)


def requests_of(s, name, rows, shape, dtype, salt):
    """get_batch of `rows`, checked bit-exact; the gather requests it sent."""
    out = np.zeros((len(rows),) + shape, dtype=dtype)
    before = s.stats()["gather_requests"]
    s.get_batch(name, out, rows)
    assert out.tobytes() == values(rows, shape, dtype, salt).tobytes()
    return s.stats()["gather_requests"] - before


@pytest.mark.parametrize("method", [1, 2])
@pytest.mark.parametrize("shape,dtype", [((), "int64"), ((3,), "float32"), ((97,), "uint8"),
                                         ((4097,), "uint8")])
def test_one_request_per_node(comm, rank, size, tmp_path_factory, method, shape, dtype):
    if size < 2:
        pytest.skip("needs ranks on two test nodes")
    row_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    kw = {}
    if method == 2:
        hs = comm.bcast(str(tmp_path_factory.mktemp("hs")) if rank == 0 else None)
        kw = {"handshake_dir": hs}
    s = two_node_store(comm, method, **kw)
    try:
        if size > 2:
            assert "by node" in s.info()["read_protocol"], s.info()["read_protocol"]
        add_rows(s, rank, size, "n", shape, dtype, 5)
        rng = np.random.default_rng(100 + rank)
        # 1 to 300 rows: 4097 B rows pass 128 KiB of a node from 32 rows on.
        for n in (1, 5, 40, 300):
            rows = remote_heavy_rows(rng, rank, size, n)
            got = requests_of(s, "n", rows, shape, dtype, 5)
            assert got == expected_requests(rank, size, rows, row_bytes), (n, rows.tolist())
    finally:
        s.free()


def test_by_node_off_and_without_node_memory(comm, rank, size):
    """DDSTORE_GATHER_BY_NODE=0, or DDSTORE_NODE_LOCAL=0 (no node shared
    memory: no rank can serve its peers' rows): one request per owner."""
    if size < 2:
        pytest.skip("needs ranks on two test nodes")
    for env in ({"by_node": "0"}, {"node_local": "0"}):
        s = two_node_store(comm, **env)
        try:
            assert "by node" not in s.info()["read_protocol"]
            add_rows(s, rank, size, "o", (3,), "float32", 6)
            rows = remote_heavy_rows(np.random.default_rng(rank), rank, size, 64)
            if "node_local" in env:
                # Node peers' rows travel through the provider too.
                want = len(set(owners_of(offsets(size), rows).tolist()) - {rank})
            else:
                want = expected_requests(rank, size, rows, 12, by_node=False)
            assert requests_of(s, "o", rows, (3,), "float32", 6) == want
        finally:
            s.free()


@pytest.fixture
def two_nodes(comm, size):
    """A method-1 store on two test nodes (skipped below 2 ranks)."""
    if size < 2:
        pytest.skip("needs ranks on two test nodes")
    s = two_node_store(comm)
    yield s
    s.free()


def test_batch_vars_one_request_per_node(two_nodes, rank, size):
    """Several variables' rows of one node ride in one request."""
    s = two_nodes
    specs = [("bv/a", (), "int64", 7), ("bv/b", (5,), "float64", 8), ("bv/c", (33,), "uint8", 9)]
    for name, shape, dtype, salt in specs:
        add_rows(s, rank, size, name, shape, dtype, salt)
    rows = remote_heavy_rows(np.random.default_rng(7 + rank), rank, size, 50)
    outs = [np.zeros((len(rows),) + shape, dtype=dtype) for _, shape, dtype, _ in specs]
    before = s.stats()["gather_requests"]
    s.get_batch_vars([sp[0] for sp in specs], outs, rows)
    for out, (_, shape, dtype, salt) in zip(outs, specs):
        assert out.tobytes() == values(rows, shape, dtype, salt).tobytes()
    assert s.stats()["gather_requests"] - before == expected_requests(rank, size, rows, 8 + 40 + 33)


def test_concurrent_readers_by_node(two_nodes, rank, size):
    want = add_rows(two_nodes, rank, size, "t", (7,), "int32", 10)
    read_in_threads(two_nodes, "t", want, seeds=[rank * 10 + i for i in range(4)], batches=40, most_rows=200)


def test_versioned_rows_never_torn_by_node(two_nodes, comm, rank, size):
    """A writer thread on every rank rewrites its versioned rows while every
    rank reads rows of the other node: the node's serving rank copies a
    peer's rows, and the reader's seqlock check still sees whole rows."""
    nloc = 4
    two_nodes.init_versioned("vr", nloc, 64, 8, block_rows=1)
    far = [r for r in range(size) if node_of(r, size) != node_of(rank, size)]
    rng = np.random.default_rng(rank)
    batches = ((rng.choice(far, size=16) * nloc + rng.integers(0, nloc, size=16)).astype(np.int64)
               for _ in range(60))
    read_while_rewritten(two_nodes, comm, "vr", batches)
