"""AdaptDL's own tests (adaptdl/torch/data_test.py, accumulator_test.py) adapted to pyddstore.torch.adaptive.

Adapted only where they need AdaptDL's scheduler: its restarts (a new
process on another number of replicas) become replica counts set on the
sampler, the ranks of this MPI job, or the jobs of run.sh (1, 4, then 2
ranks) resuming each other's states.
"""
import collections
import math
import os

import pytest
import torch
from conftest import Regression
from mpi4py import MPI
from torch.utils.data import TensorDataset

import pyddstore.torch.adaptive as adl
from pyddstore.torch import DistDataset

comm = MPI.COMM_WORLD
K = comm.Get_size()


# ------------------------------------------------------- ElasticSampler
def sampler_epoch(num_replicas, dataset_size, epoch=0, index=0, shuffle=True):
    """AdaptDL's test_sampler_epoch: equal, complete, stable shares from ``index``."""
    dataset = TensorDataset(torch.rand(dataset_size))
    sampler = adl.ElasticSampler(dataset, shuffle)          # AdaptDL's positional signature
    sampler.num_replicas = num_replicas
    sampler.set_epoch(epoch, index)
    epoch_samples = []
    sample_counts = collections.Counter()
    for rank in range(num_replicas):
        sampler.rank = rank
        epoch_samples.append(list(sampler))
        assert len(sampler) == math.ceil((dataset_size - index % dataset_size) / num_replicas)
        assert len(sampler) == len(epoch_samples[rank])
        assert list(sampler) == epoch_samples[rank]
        sample_counts.update(epoch_samples[rank])
    assert len(sample_counts) >= dataset_size - index % dataset_size
    assert all(0 <= key < dataset_size for key in sample_counts)
    assert max(sample_counts.values()) - min(sample_counts.values()) <= 1
    return epoch_samples


@pytest.mark.parametrize("num_replicas", [1, 3, 5])
@pytest.mark.parametrize("dataset_size", [9, 15, 25])
def test_sampler_shuffle(num_replicas, dataset_size):
    epoch0 = sampler_epoch(num_replicas, dataset_size, epoch=0)
    epoch1 = sampler_epoch(num_replicas, dataset_size, epoch=1)
    assert epoch0 != epoch1
    epoch0 = sampler_epoch(num_replicas, dataset_size, epoch=0, shuffle=False)
    epoch1 = sampler_epoch(num_replicas, dataset_size, epoch=1, shuffle=False)
    assert epoch0 == epoch1


@pytest.mark.parametrize("num_replicas", [1, 3, 5])
@pytest.mark.parametrize("dataset_size", [9, 15, 25])
def test_sampler_index(num_replicas, dataset_size):
    index = dataset_size // 2
    samples = sum(sampler_epoch(num_replicas, dataset_size, index=index, shuffle=False), [])
    assert set(range(index, dataset_size)) <= set(samples)
    # An index past the end is a position in a later pass (AdaptDL's wrap-around).
    index = 2 * dataset_size
    samples = sum(sampler_epoch(num_replicas, dataset_size, index=index, shuffle=False), [])
    assert set(samples) == set(range(dataset_size))
    later = sampler_epoch(num_replicas, dataset_size, index=dataset_size + 2)
    assert sum(map(len, later)) >= dataset_size - 2


def test_sampler_is_the_adaptdl_mode():
    sampler = adl.ElasticSampler(range(10), False, num_replicas=2, rank=1)
    assert sampler.mode == "adaptdl" and not sampler.shuffle
    sampler.set_epoch(3, 14)                  # pass 1, position 4
    assert list(sampler) == [5, 7, 9] and len(sampler) == 3


# ---------------------------------------------------------- dataloader
def test_dataloader_break(pg):
    """AdaptDL's test_dataloader_break: after a break, a new loop is a whole pass.

    AdaptDL's runs 10 batches of 10 on 2 replicas in its second loop. A
    restart from a state taken after the break skips the loop left (it is
    over) and runs the next one whole.
    """
    n, batch = 100, 10
    ds = DistDataset(Regression(n, seed=21), "adaptive-break")
    per_pass = -(-(-(-n // K)) // -(-batch // K))          # batches of a pass on a replica

    def whole_pass(loader):
        ids = []
        for idx, (_x, _y, i) in enumerate(loader):
            assert adl.current_dataloader() is loader._elastic
            ids += i.tolist()
        assert idx + 1 == per_pass
        every = sum(comm.allgather(ids), [])
        assert set(every) == set(range(n)) and len(every) == -(-n // K) * K

    loader = adl.AdaptiveDataLoader(ds, batch_size=batch)
    try:
        for _ in adl.remaining_epochs_until(1):
            assert adl.current_dataloader() is None
            for idx, _batch in enumerate(loader):
                assert adl.current_dataloader() is loader._elastic
                if idx == 5:
                    break
            assert adl.current_dataloader() is None
            state = loader.state_dict()
            whole_pass(loader)
        loader.close()
        adl.reset()
        loader = adl.AdaptiveDataLoader(ds, batch_size=batch)
        loader.load_state_dict(state)
        for _ in adl.remaining_epochs_until(1):
            assert list(loader) == []             # the loop left before the restart
            whole_pass(loader)
    finally:
        loader.close()
        ds.free()


def test_dataloader_restarts(pg):
    """AdaptDL's test_dataloader_restarts: 2 batches on 1 replica, 5 on 4, the last 2 on 2.

    Its restarts are three jobs of run.sh (1, 4 and then 2 ranks, with
    PYDDSTORE_ADAPTIVE_RESTART_DIR); its checkpoint at the start of batch
    ``idx`` is a state taken in the body of batch ``idx - 1``. Every job
    splits ``batch_size=10`` anew (10, 3 and 5 per replica), and the three
    consume the epoch once (with AdaptDL's padding on 4 ranks).
    """
    where = os.environ.get("PYDDSTORE_ADAPTIVE_RESTART_DIR")
    if not where:
        pytest.skip("a chain of jobs: run by tests/python/adaptive/run.sh")
    n, batch = 100, 10
    path = os.path.join(where, "adaptdl-restarts-{}.pt")
    stage = comm.bcast(next((s for s in (2, 1) if os.path.exists(path.format(s - 1))), 0)
                       if comm.Get_rank() == 0 else None)
    ckpt = (torch.load(path.format(stage - 1), weights_only=False) if stage
            else {"ids": [], "state": None})
    ds = DistDataset(Regression(n, seed=22), "adaptive-restarts")
    loader = adl.AdaptiveDataLoader(ds, batch_size=batch)
    ids, state, local = [], None, -(-batch // K)
    try:
        if ckpt["state"] is not None:
            loader.load_state_dict(ckpt["state"])
        for _ in adl.remaining_epochs_until(1):
            assert adl.current_dataloader() is None
            for idx, (_x, _y, i) in enumerate(loader):
                assert adl.current_dataloader() is loader._elastic
                assert len(i) == loader.current_local_bsz == local
                assert loader.current_batch_size == K * local
                ids += i.tolist()
                if stage < 2 and idx == (1, 4)[stage]:
                    state = loader.state_dict()
                    break
    finally:
        loader.close()
        ds.free()
    every = ckpt["ids"] + sum(comm.allgather(ids), [])
    if stage < 2:
        if comm.Get_rank() == 0:
            torch.save({"ids": every, "state": state}, path.format(stage))
        comm.Barrier()
        return
    # The last job: what the first two left, split over this one's ranks
    # (AdaptDL's "assert idx == 1": 2 batches of 5 on 2 replicas).
    rest = n - ckpt["state"]["index"]
    assert idx + 1 == -(-(-(-rest // K)) // local), (idx, rest)
    assert set(every) == set(range(n)) and 0 <= len(every) - n < K, len(every)


# --------------------------------------------------------- Accumulator
def test_accumulator(pg):
    """AdaptDL's test_accumulator_restarts, its restarts replaced by this job's ranks."""
    rank = comm.Get_rank()
    spread = K * (K - 1) // 2                 # sum of the ranks
    accum = adl.Accumulator()
    if rank == 0:
        accum["a"] += 15
    assert "a" not in accum
    with accum.synchronized():
        assert "a" in accum
        assert accum["a"] == 15
    assert "a" not in accum
    if rank == 0:
        accum["a"] -= 5
    accum.update({"a": rank, "b": rank})
    assert len(accum) == 0
    with accum.synchronized():
        assert len(accum) == 2
        assert accum["a"] == 10 + spread
        assert accum["b"] == spread
    assert len(accum) == 0
    accum -= {"b": 5, "c": 5}
    with accum.synchronized():
        assert accum["a"] == 10 + spread
        assert accum["b"] == spread - 5 * K
        assert accum["c"] == -5 * K
        accum.clear()
    with accum.synchronized():
        assert not accum


def test_accumulator_reads_as_an_empty_dict_outside_synchronized(pg):
    accum = adl.Accumulator(base=1.0)         # initial values: the same on every replica
    accum += {"x": 2}
    accum.subtract(x=1, y=3)
    accum.update(z=1)
    assert len(accum) == 0 and list(accum) == [] and dict(accum) == {} and repr(accum) == "{}"
    assert "base" not in accum and accum.get("base") is None and accum == {}
    with pytest.raises(TypeError, match="synchronized"):
        accum["x"] = 5
    with pytest.raises(ValueError, match="acc\\[key\\] \\+= x"):
        accum["x"] = accum["y"] + 1           # AdaptDL's "incompatible key"
    with accum.synchronized():
        assert dict(accum) == {"base": 1.0, "x": K, "y": -3 * K, "z": K}
        with accum.synchronized():            # nested: nothing more to sum
            assert accum["x"] == K
        accum["x"] = 0
        accum.update(x=2)
        accum -= {"z": 1}
    with accum.synchronized():
        assert dict(accum) == {"base": 1.0, "x": 2, "y": -3 * K, "z": K - 1}
