"""GlobalBatchSize: AdaptDL's ceil split, bounds, accumulation schedule, changes between epochs."""
import math

import pytest

from pyddstore.torch.adaptive.batchsize import GlobalBatchSize, plan_local_batch


@pytest.mark.parametrize("batch_size", (1, 7, 32, 100, 1000))
@pytest.mark.parametrize("replicas", (1, 3, 4, 5, 64))
def test_plain_split_is_adaptdl_ceil(batch_size, replicas):
    g = GlobalBatchSize(batch_size, replicas)
    # AdaptDL without autoscaling: local = ceil(batch / replicas), no accumulation.
    assert g.current_local_bsz == math.ceil(batch_size / replicas)
    assert g.accumulation_steps == 0
    assert g.current_batch_size == g.current_local_bsz * replicas
    assert batch_size <= g.current_batch_size < batch_size + replicas


@pytest.mark.parametrize("batch_size", (33, 256, 1000, 1023))
@pytest.mark.parametrize("replicas", (1, 2, 3, 7))
@pytest.mark.parametrize("max_local", (1, 8, 31))
def test_accumulation_respects_max_local(batch_size, replicas, max_local):
    g = GlobalBatchSize(batch_size, replicas, max_local=max_local, gradient_accumulation=True)
    local, accum = g.current_local_bsz, g.accumulation_steps
    assert 1 <= local <= max_local
    steps = accum + 1
    assert g.current_batch_size == local * steps * replicas >= batch_size
    # The fewest micro-batches that fit, and within them the smallest local size.
    assert steps == max(1, math.ceil(math.ceil(batch_size / replicas) / max_local))
    assert (local - 1) * steps * replicas < batch_size


def test_bounds_and_errors():
    with pytest.raises(ValueError, match="gradient_accumulation=True"):
        GlobalBatchSize(100, 2, max_local=10)
    g = GlobalBatchSize(8, 4, min_local=4)
    assert (g.current_local_bsz, g.current_batch_size) == (4, 16)
    with pytest.raises(ValueError, match="max_local"):
        plan_local_batch(8, 1, min_local=5, max_local=4)
    with pytest.raises(ValueError, match="batch_size"):
        GlobalBatchSize(0, 1)
    with pytest.raises(TypeError, match="batch_size"):
        GlobalBatchSize(2.5, 1)
    with pytest.raises(ValueError, match="num_replicas"):
        GlobalBatchSize(8, 0)


def test_accumulation_schedule_and_epoch_end():
    g = GlobalBatchSize(24, 2, max_local=4, gradient_accumulation=True)
    assert (g.current_local_bsz, g.accumulation_steps) == (4, 2)
    g.begin_epoch(7)
    flags = []
    for i in range(7):
        if i:
            g.advance()
        assert g.micro_step == i
        flags.append(g.is_optim_step())
        assert g.is_accum_step() is not g.is_optim_step()
    # Every third micro-batch steps, and the last one always does.
    assert flags == [False, False, True, False, False, True, True]


def test_set_batch_size_applies_at_next_epoch():
    g = GlobalBatchSize(16, 4)
    assert g.begin_epoch() == 4
    g.set_batch_size(64)
    assert g.current_local_bsz == 4 and g.batch_size == 16   # not mid-epoch
    assert g.state_dict()["batch_size"] == 64               # but a checkpoint keeps it
    assert g.begin_epoch() == 16 and g.batch_size == 64
    with pytest.raises(ValueError):
        GlobalBatchSize(16, 4, max_local=8).set_batch_size(64)


def test_state_moves_to_other_replica_count():
    g = GlobalBatchSize(96, 4, max_local=16, gradient_accumulation=True)
    h = GlobalBatchSize(1, 3)
    h.load_state_dict(g.state_dict())
    assert h.batch_size == 96 and h.num_replicas == 3
    assert (h.current_local_bsz, h.accumulation_steps) == (16, 1)
    h.set_num_replicas(12)
    assert (h.current_local_bsz, h.accumulation_steps) == (8, 0)
