"""BudgetBatchSampler: batches within the node/edge budget, the same number of steps on every
rank, a plan that depends on (seed, epoch) only, exact resume (also on another number of
ranks), sizes from the store only; and batches through the DataLoader equal torch_geometric's."""
import pytest
import torch
pytest.importorskip("torch_geometric")
from graphs import Graphs, expected, same_batch

from pyddstore.torch.geometric import BudgetBatchSampler, DataLoader, DistDataset

N = 61


@pytest.fixture(scope="module")
def graphs():
    from mpi4py import MPI

    src = Graphs(N)
    ds = DistDataset(src, "geo_budget", comm=MPI.COMM_WORLD)
    yield src, ds
    ds.free()


def test_budget_equal_steps_and_coverage(world, graphs):
    src, ds = graphs
    nodes = [src[i].num_nodes for i in range(N)]
    s = BudgetBatchSampler(ds, max_num_nodes=40, seed=5)
    assert (s.num_replicas, s.rank) == (world.size, world.rank)
    plan = s.plan()
    assert sorted(i for b in plan for i in b) == list(range(N))
    for b in plan:
        assert sum(nodes[i] for i in b) <= 40 or len(b) == 1
    # greedy: the next graph of the order would not have fitted
    for b, nxt in zip(plan, plan[1:]):
        assert sum(nodes[i] for i in b) + nodes[nxt[0]] > 40
    mine = list(s)
    steps = world.allgather(len(mine))
    assert len(set(steps)) == 1 and steps[0] == len(s) == -(-len(plan) // world.size)
    seen = [i for b in world.allgather(mine) for bb in b for i in bb]
    assert set(seen) == set(range(N))
    # (seed, epoch) only: another sampler agrees; another epoch differs
    t = BudgetBatchSampler(ds, max_num_nodes=40, seed=5, num_replicas=3, rank=1)
    assert t.plan() == plan
    t.set_epoch(1)
    assert t.plan() != plan
    e = BudgetBatchSampler(ds, max_num_edges=100, shuffle=False)
    assert [i for b in e.plan() for i in b] == list(range(N))


@pytest.mark.parametrize("before,after", [(2, 3), (3, 1), (1, 4)])
def test_resume_on_other_replica_counts(graphs, before, after):
    _, ds = graphs
    first = [BudgetBatchSampler(ds, max_num_nodes=30, seed=9, num_replicas=before, rank=r)
             for r in range(before)]
    for s in first:
        s.set_epoch(4)
    plan = first[0].plan()
    steps = 2
    consumed = [b for s in first for b in list(s)[:steps]]
    state = first[0].state_dict()
    state["index"] = first[0].index_after(steps)
    assert all(s.index_after(steps) == state["index"] for s in first)
    rest = []
    for r in range(after):
        s = BudgetBatchSampler(ds, max_num_nodes=30, seed=0, num_replicas=after, rank=r)
        s.load_state_dict(state)
        assert s.epoch == 4 and s.seed == 9
        rest.append(list(s))
    assert len({len(x) for x in rest}) == 1
    remaining = [b for x in rest for b in x]
    # Nothing lost, nothing repeated, except the padding of each run's last round.
    nb = len(plan)
    want = plan[:state["index"]] + plan[state["index"]:]
    got = consumed + remaining
    pad = len(got) - nb
    assert 0 <= pad < before + after
    assert sorted(map(tuple, got[:len(consumed)])) == sorted(map(tuple, plan[:len(consumed)]))
    uniq = {tuple(b) for b in got}
    assert uniq == {tuple(b) for b in want}
    with pytest.raises(ValueError, match="max_num_nodes"):
        BudgetBatchSampler(ds, max_num_nodes=31).load_state_dict(state)


def test_loader_with_budget_sampler(world, graphs):
    src, ds = graphs
    s = BudgetBatchSampler(ds, max_num_nodes=50, max_num_edges=120, seed=2)
    s.set_epoch(3)
    loader = DataLoader(ds, batch_sampler=s, num_workers=2, follow_batch=["x"])
    got = list(loader)
    mine = list(s)
    assert len(got) == len(mine) and len(set(world.allgather(len(got)))) == 1
    for b, rows in zip(got, mine):
        same_batch(b, expected(src, rows, follow_batch=["x"]))
        assert b.num_nodes <= 50 or b.num_graphs == 1
    loader.close()


def test_budget_needs_store_sizes(graphs):
    _, ds = graphs
    with pytest.raises(ValueError, match="max_num_nodes"):
        BudgetBatchSampler(ds)
    with pytest.raises(TypeError, match="store"):
        BudgetBatchSampler(list(range(5)), max_num_nodes=3)
    sub = torch.utils.data.Subset(ds, list(range(10, 30)))
    s = BudgetBatchSampler(sub, max_num_nodes=25, num_replicas=1, rank=0)
    assert sorted(i for b in s.plan() for i in b) == list(range(20))
