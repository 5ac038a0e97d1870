"""ElasticSampler: equal shares, determinism, resumption, and the torch/AdaptDL modes.

Pure Python: every replica is simulated in this process, so every MPI rank
runs the same checks and gets the same results.
"""
import collections
import math

import pytest
import torch
from torch.utils.data import DistributedSampler

from mpi4py import MPI

from pyddstore.torch.sampler import ElasticSampler, default_replicas

SIZES = (9, 15, 25, 1000)
REPLICAS = (1, 3, 5)
MODES = ("elastic", "torch", "adaptdl")


def shares(n, replicas, *, epoch=0, index=0, mode="elastic", **kw):
    """Indices of every replica for one (epoch, index)."""
    out = []
    for rank in range(replicas):
        s = ElasticSampler(range(n), replicas, rank, mode=mode, **kw)
        s.set_epoch(epoch, index)
        idx = list(s)
        assert len(idx) == len(s)
        out.append(idx)
    return out


# mode='adaptdl' has no drop_last (AdaptDL always pads).
@pytest.mark.parametrize("mode,drop_last", [(m, d) for m in MODES for d in (False, True)
                                            if not (m == "adaptdl" and d)])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("replicas", REPLICAS)
def test_equal_lengths_and_balanced_counts(n, replicas, drop_last, mode):
    per = shares(n, replicas, epoch=2, mode=mode, drop_last=drop_last)
    lengths = {len(p) for p in per}
    assert len(lengths) == 1
    length = lengths.pop()
    assert length == (n // replicas if drop_last else math.ceil(n / replicas))
    counts = collections.Counter(i for p in per for i in p)
    assert all(0 <= i < n for i in counts)
    if drop_last:
        assert max(counts.values()) == 1
        assert len(counts) == length * replicas
    else:
        assert set(counts) == set(range(n))
        assert max(counts.values()) - min(counts.values()) <= 1


@pytest.mark.parametrize("mode", MODES)
def test_order_depends_on_seed_and_epoch_only(mode):
    n, replicas = 1000, 3
    a = shares(n, replicas, epoch=0, mode=mode, seed=11)
    b = shares(n, replicas, epoch=1, mode=mode, seed=11)
    again = shares(n, replicas, epoch=0, mode=mode, seed=11)
    other_seed = shares(n, replicas, epoch=0, mode=mode, seed=12)
    assert a == again
    assert a != b
    assert a != other_seed
    # The global order is the same whatever the number of replicas: the
    # round-robin interleaving of 3 replicas equals 1 replica's order.
    single = shares(n, 1, epoch=0, mode=mode, seed=11)[0]
    interleaved = [a[j % replicas][j // replicas] for j in range(n)]
    assert interleaved == single


def test_elastic_seeding_is_not_seed_plus_epoch():
    # torch's seed + epoch makes (seed 1, epoch 0) replay (seed 0, epoch 1).
    assert shares(50, 1, epoch=1, seed=0, mode="torch") == shares(50, 1, epoch=0, seed=1, mode="torch")
    assert shares(50, 1, epoch=1, seed=0) != shares(50, 1, epoch=0, seed=1)


def test_no_shuffle_is_range():
    per = shares(10, 3, shuffle=False)
    assert per == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("replicas", REPLICAS)
def test_set_epoch_index_resumes_exactly(n, replicas, mode):
    full = shares(n, replicas, epoch=4, mode=mode, seed=3)
    for k in sorted({0, 1, len(full[0]) // 2, len(full[0]) - 1, len(full[0])}):
        # After every replica consumed k samples, index = k * replicas.
        rest = shares(n, replicas, epoch=4, index=k * replicas, mode=mode, seed=3)
        if k * replicas >= n and mode == "adaptdl":
            continue  # AdaptDL starts another pass there
        for r in range(replicas):
            assert rest[r] == full[r][k:]


def test_index_past_end_is_empty():
    s = ElasticSampler(range(9), 2, 0)
    s.set_epoch(0, 9)
    assert list(s) == [] and len(s) == 0
    s.set_epoch(0, 40)
    assert list(s) == []


@pytest.mark.parametrize("drop_last", (False, True))
@pytest.mark.parametrize("n", SIZES)
def test_restart_on_other_replica_counts_covers_epoch_once(n, drop_last):
    """Consume part of an epoch on 1 replica, resume on 4, then finish on 2."""
    seed, epoch = 99, 5
    seen = collections.Counter()
    index = 0
    for replicas, fraction in ((1, 0.3), (4, 0.5), (2, None)):
        samplers = [ElasticSampler(range(n), replicas, r, seed=seed, drop_last=drop_last)
                    for r in range(replicas)]
        for s in samplers:
            s.set_epoch(epoch, index)
        lengths = {len(s) for s in samplers}
        assert len(lengths) == 1
        length = lengths.pop()
        take = length if fraction is None else int(length * fraction)
        for s in samplers:
            seen.update(list(s)[:take])
        index = samplers[0].index_after(take)
        # The state a checkpoint would hold moves to the next run.
        state = samplers[0].state_dict()
        state["index"] = index
        restored = ElasticSampler(range(n), 7, 6, seed=0, drop_last=drop_last)
        restored.load_state_dict(state)
        assert (restored.epoch, restored.index, restored.seed) == (epoch, index, seed)
    if drop_last:
        assert max(seen.values()) == 1
        assert n - len(seen) < 2  # only the last run's tail (< 2 replicas) is dropped
    else:
        assert set(seen) == set(range(n))
        padding = sum(seen.values()) - n
        assert 0 <= padding < 2  # only the last run pads, by fewer than its 2 replicas
        assert max(seen.values()) <= 2


@pytest.mark.parametrize("n", (0, 1, 3, 9, 15, 25, 1000))
@pytest.mark.parametrize("replicas", (1, 2, 3, 5, 7))
@pytest.mark.parametrize("drop_last", (False, True))
@pytest.mark.parametrize("shuffle", (False, True))
def test_torch_mode_equals_distributed_sampler(n, replicas, drop_last, shuffle):
    for epoch in (0, 1, 6):
        for rank in range(replicas):
            ours = ElasticSampler(range(n), replicas, rank, shuffle, 42, drop_last, mode="torch")
            ref = DistributedSampler(range(n), replicas, rank, shuffle, 42, drop_last)
            ours.set_epoch(epoch)
            ref.set_epoch(epoch)
            assert list(ours) == list(ref)
            assert len(ours) == len(ref) == ours.num_samples == ref.num_samples
            assert ours.total_size == ref.total_size


def adaptdl_formula(n, replicas, rank, epoch, index, shuffle):
    """AdaptDL's ElasticSampler.__iter__ partitioning, transcribed from its description.

    The epoch's permutation comes from a torch.Generator seeded with Python's
    hash of (epoch, index // n); the start is index % n; the replica takes
    every replicas-th element from start + rank; a replica one short of
    ceil((n - start) / replicas) gets perm[rank] appended.
    """
    if shuffle:
        gen = torch.Generator()
        gen.manual_seed(hash((epoch, index // n)))
        perm = torch.randperm(n, generator=gen).tolist()
    else:
        perm = list(range(n))
    start = index % n
    mine = [perm[p] for p in range(start + rank, n, replicas)]
    target = -(-(n - start) // replicas)
    while len(mine) < target:
        mine.append(perm[rank])
    return mine


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("replicas", REPLICAS)
@pytest.mark.parametrize("shuffle", (False, True))
def test_adaptdl_mode_equals_formula(n, replicas, shuffle):
    for epoch in (0, 1, 3):
        for index in sorted({0, 1, 7, n - 1, n, n + 5, 3 * n + 2}):
            for rank in range(replicas):
                s = ElasticSampler(range(n), replicas, rank, shuffle, mode="adaptdl")
                s.set_epoch(epoch, index)
                want = adaptdl_formula(n, replicas, rank, epoch, index, shuffle)
                assert list(s) == want
                assert len(s) == len(want)


def test_state_dict_round_trip_and_checks():
    s = ElasticSampler(range(100), 4, 1, seed=8)
    s.set_epoch(3, 40)
    state = s.state_dict()
    assert {k: state[k] for k in ("epoch", "index", "seed", "mode", "shuffle", "drop_last")} == {
        "epoch": 3, "index": 40, "seed": 8, "mode": "elastic", "shuffle": True, "drop_last": False}
    t = ElasticSampler(range(100), 3, 2, seed=0)
    t.load_state_dict(state)
    assert (t.epoch, t.index, t.seed) == (3, 40, 8)
    assert (t.num_replicas, t.rank) == (3, 2)
    with pytest.raises(ValueError, match="mode"):
        ElasticSampler(range(100), 1, 0, mode="torch").load_state_dict(state)
    with pytest.raises(ValueError, match="drop_last"):
        ElasticSampler(range(100), 1, 0, drop_last=True).load_state_dict(state)
    with pytest.raises(ValueError, match="dataset_len"):
        ElasticSampler(range(99), 1, 0).load_state_dict(state)
    bad = dict(state, order_fingerprint="0" * 16)
    u = ElasticSampler(range(100), 1, 0)
    with pytest.raises(ValueError, match="order"):
        u.load_state_dict(bad)
    assert (u.epoch, u.index, u.seed) == (0, 0, 0)  # unchanged after a refused load


def test_argument_checks():
    with pytest.raises(ValueError, match="mode"):
        ElasticSampler(range(5), 1, 0, mode="fast")
    with pytest.raises(ValueError, match="rank"):
        ElasticSampler(range(5), 2, 2)
    with pytest.raises(ValueError, match="num_replicas"):
        ElasticSampler(range(5), 0, 0)
    with pytest.raises(ValueError, match="drop_last"):
        ElasticSampler(range(5), 1, 0, drop_last=True, mode="adaptdl")
    with pytest.raises(TypeError, match="len"):
        ElasticSampler(iter(range(5)), 1, 0)
    s = ElasticSampler(range(5), 1, 0)
    with pytest.raises(ValueError, match="index"):
        s.set_epoch(0, -1)
    with pytest.raises(TypeError, match="epoch"):
        s.set_epoch(1.5)
    with pytest.raises(ValueError, match="local_samples"):
        s.index_after(6)


def test_numpy_integers_accepted():
    np = pytest.importorskip("numpy")
    s = ElasticSampler(range(20), np.int64(2), np.int32(1), seed=np.int64(4))
    s.set_epoch(np.int64(1), np.int64(6))
    t = ElasticSampler(range(20), 2, 1, seed=4)
    t.set_epoch(1, 6)
    assert list(s) == list(t)


class _Group:
    """What DistDataset exposes of its store: its communicator's size and
    rank, and a group (of width 2 here) that must not be taken for the
    replicas."""

    def __init__(self, size, rank):
        self.size, self.rank, self.comm = size, rank, object()
        self.group_size, self.group_rank = 2, rank % 2


class _StoredDataset(list):
    def __init__(self, n, size, rank):
        super().__init__(range(n))
        self.ddstore = _Group(size, rank)


def test_defaults_from_store_comm_then_mpi():
    ds = _StoredDataset(30, 6, 4)
    s = ElasticSampler(ds)
    assert (s.num_replicas, s.rank) == (6, 4)
    assert ElasticSampler(ds, rank=1).rank == 1
    comm = MPI.COMM_WORLD
    # Without a store (and without torch.distributed) the default is COMM_WORLD.
    assert default_replicas(list(range(3))) == (comm.Get_size(), comm.Get_rank())
    s = ElasticSampler(list(range(30)))
    assert (s.num_replicas, s.rank) == (comm.Get_size(), comm.Get_rank())
