"""ResumableLoader: mid-epoch checkpoints that resume on the same or another number of replicas.

The in-process tests simulate all replicas in one process (identical on every
MPI rank). test_kill_and_resume_under_mpiexec runs real jobs: rank 0 of the
test launches them, the other ranks wait and check the same result.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader

from mpi4py import MPI

import pyddstore
from pyddstore.torch.adaptive.batchsize import GlobalBatchSize
from pyddstore.torch.adaptive.resume import ResumableLoader
from pyddstore.torch.sampler import ElasticSampler

HERE = os.path.dirname(os.path.abspath(__file__))


def make_loaders(n, replicas, global_batch, *, seed=5, drop_last=False, max_local=None):
    loaders = []
    for rank in range(replicas):
        ds = list(range(n))
        sampler = ElasticSampler(ds, replicas, rank, seed=seed)
        gbs = GlobalBatchSize(global_batch, replicas, max_local=max_local,
                              gradient_accumulation=max_local is not None)
        dl = DataLoader(ds, batch_size=gbs.current_local_bsz, sampler=sampler, drop_last=drop_last)
        loaders.append(ResumableLoader(dl, global_batch_size=gbs))
    return loaders


def run(loaders, *, state=None, epoch=0, stop_after=None):
    """Step all replicas together; return (state, samples seen, steps)."""
    for loader in loaders:
        if state is not None:
            loader.load_state_dict(state)
        loader.set_epoch(epoch)
    lengths = {len(loader) for loader in loaders}
    assert len(lengths) == 1
    seen = collections.Counter()
    steps = 0
    state = loaders[0].state_dict()
    iters = [iter(loader) for loader in loaders]
    for batches in zip(*iters):
        steps += 1
        sizes = {len(b) for b in batches}
        assert len(sizes) == 1, "replicas got batches of different sizes"
        for b in batches:
            seen.update(b.tolist())
        states = [loader.state_dict() for loader in loaders]
        assert all(s == states[0] for s in states)
        state = states[0]
        if steps == stop_after:
            break
    else:
        # zip stops at the first exhausted replica; every replica's own loop
        # would run to its end, and must end at the same step.
        assert all(next(it, None) is None for it in iters)
        # The epoch ended (possibly with no batch at all): save its final state.
        states = [loader.state_dict() for loader in loaders]
        assert all(s == states[0] for s in states)
        state = states[0]
    assert stop_after is not None or steps == lengths.pop()
    return state, seen, steps


@pytest.mark.parametrize("n", (9, 25, 101))
@pytest.mark.parametrize("drop_last", (False, True))
def test_resume_on_1_then_4_then_2_replicas(n, drop_last):
    seen = collections.Counter()
    state, part, steps = run(make_loaders(n, 1, 4, drop_last=drop_last), stop_after=1)
    seen += part
    assert state["sampler"]["index"] == 4 and not state["epoch_complete"]
    state, part, steps = run(make_loaders(n, 4, 4, drop_last=drop_last), state=state, stop_after=1)
    seen += part
    assert state["sampler"]["index"] == 8
    state, part, steps = run(make_loaders(n, 2, 4, drop_last=drop_last), state=state)
    seen += part
    assert state["epoch_complete"]
    if drop_last:
        # The loader drops the last short batch of 2 replicas: < 4 samples.
        assert max(seen.values()) == 1 and n - len(seen) < 4
    else:
        assert set(seen) == set(range(n))
        assert sum(seen.values()) - n < 2  # padding of the last run (2 replicas) only
    # Nothing left of this epoch: resuming from the final state yields nothing.
    again = make_loaders(n, 3, 4, drop_last=drop_last)
    _, part, steps = run(again, state=state)
    assert steps == 0
    # The next epoch starts from its beginning, in another order.
    nxt, part, steps = run(again, epoch=1)
    assert steps > 0 and nxt["sampler"]["epoch"] == 1


def test_uninterrupted_equals_resumed_order():
    """Same replicas: the resumed run yields exactly the batches the uninterrupted run would."""
    full = make_loaders(50, 2, 6)
    batches_full = []
    for loader in full:
        loader.set_epoch(3)
    for pair in zip(*full):
        batches_full.append([b.tolist() for b in pair])
    first = make_loaders(50, 2, 6)
    for loader in first:
        loader.set_epoch(3)
    its = [iter(loader) for loader in first]
    head = [[next(it).tolist() for it in its] for _ in range(4)]
    state = first[0].state_dict()
    second = make_loaders(50, 2, 6)
    for loader in second:
        loader.load_state_dict(state)
        loader.set_epoch(3)
    tail = [[b.tolist() for b in pair] for pair in zip(*second)]
    assert head + tail == batches_full


def test_set_epoch_keeps_only_the_restored_epoch():
    loaders = make_loaders(40, 1, 4)
    state, _, _ = run(loaders, epoch=2, stop_after=3)
    (fresh,) = make_loaders(40, 1, 4)
    fresh.load_state_dict(state)
    assert (fresh.epoch, fresh.index) == (2, 12)
    fresh.set_epoch(2)
    assert fresh.index == 12
    assert len(fresh) == 7
    fresh.set_epoch(3)
    assert (fresh.epoch, fresh.index) == (3, 0) and len(fresh) == 10


def test_global_batch_size_drives_local_size_and_accumulation():
    loaders = make_loaders(48, 2, 16, max_local=4)
    gbs = loaders[0].global_batch_size
    assert (gbs.current_local_bsz, gbs.accumulation_steps) == (4, 1)
    loader = loaders[0]
    loader.set_epoch(0)
    flags = []
    for batch in loader:
        assert len(batch) == 4
        flags.append(gbs.is_optim_step())
    assert flags == [False, True] * 3
    # An external controller changes the global size between epochs.
    gbs.set_batch_size(8)
    loader.set_epoch(1)
    sizes = [len(b) for b in loader]
    assert sizes == [4] * 6 and gbs.accumulation_steps == 0
    assert loader.state_dict()["global_batch_size"]["batch_size"] == 8


def test_rejects_loader_without_elastic_sampler():
    with pytest.raises(TypeError, match="ElasticSampler"):
        ResumableLoader(DataLoader(list(range(5)), batch_size=2))
    ds = list(range(5))
    with pytest.raises(ValueError, match="replicas"):
        ResumableLoader(DataLoader(ds, batch_size=2, sampler=ElasticSampler(ds, 2, 0)),
                        global_batch_size=GlobalBatchSize(4, 3))


# ---------------------------------------------------------------- real jobs

def _child_env():
    """Environment for a nested mpiexec: no trace of the launcher that started this test."""
    drop_mca = ("ess", "orte_", "pmix", "initial_wdir", "shmem_RUNTIME_QUERY_hint",
                "mpi_oversubscribe")
    env = {}
    for key, value in os.environ.items():
        if key.startswith(("PMIX_", "PMI_", "HYDRA_")):
            continue
        if key.startswith("OMPI_"):
            if key.startswith("OMPI_ALLOW_RUN_AS_ROOT"):
                pass
            elif not key.startswith("OMPI_MCA_") or key[len("OMPI_MCA_"):].startswith(drop_mca):
                continue
        env[key] = value
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    roots = [os.path.dirname(p) for p in pyddstore.__path__]
    env["PYTHONPATH"] = os.pathsep.join(roots + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _launch(tmp, name, replicas, extra, env):
    cmd = ["timeout", "120", shutil.which("mpiexec"), "-n", str(replicas),
           sys.executable, os.path.join(HERE, "resume_worker.py"),
           "--n", "51", "--global-batch", "6", "--seed", "17",
           "--state-out", os.path.join(tmp, f"{name}.json"),
           "--log", os.path.join(tmp, name)] + extra
    proc = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=150)
    with open(os.path.join(tmp, f"{name}.json")) as f:
        saved = json.load(f)
    seen = collections.Counter()
    batch_sizes = set()
    for rank in range(replicas):
        with open(os.path.join(tmp, f"{name}.rank{rank}.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                # Batches after the last checkpoint were lost with the job.
                if rec["step"] <= saved["steps"]:
                    seen.update(rec["indices"])
                    batch_sizes.add(len(rec["indices"]))
    return {"rc": proc.returncode, "out": proc.stdout[-3000:], "saved": saved,
            "seen": dict(seen), "batch_sizes": sorted(batch_sizes)}


def _kill_and_resume(tmp):
    env = _child_env()
    store = ["--store"]
    first = _launch(tmp, "run1", 2, ["--stop-after", "3", "--kill"] + store, env)
    second = _launch(tmp, "run2", 1, ["--state-in", os.path.join(tmp, "run1.json"),
                                      "--stop-after", "2"] + store, env)
    third = _launch(tmp, "run3", 4, ["--state-in", os.path.join(tmp, "run2.json")] + store, env)
    return [first, second, third]


def _wait(request, what, seconds=400):
    """Wait for an MPI request without spinning (the jobs need the CPUs); fail instead of hanging."""
    deadline = time.monotonic() + seconds
    while not request.Test():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {seconds} s")
        time.sleep(0.05)


def test_kill_and_resume_under_mpiexec(tmp_path_factory):
    """Kill a 2-rank job after 3 checkpointed steps, resume on 1 rank for 2 steps, finish on 4.

    The jobs read a DistDataset through a ThreadDataLoader.
    """
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        if shutil.which("mpiexec") is None:
            result = "no mpiexec on PATH"
        else:
            result = _kill_and_resume(str(tmp_path_factory.mktemp("resume")))
        _wait(comm.Ibarrier(), "rank 0 finished the jobs but other ranks did not reach this test")
    else:
        _wait(comm.Ibarrier(), "rank 0 did not finish the jobs")
        result = None
    result = comm.bcast(result, root=0)
    if isinstance(result, str):
        pytest.skip(result)
    first, second, third = result
    assert first["rc"] != 0, "the first job should have been killed"
    assert second["rc"] == 0, second["out"]
    assert third["rc"] == 0, third["out"]
    # 2 ranks x local 3, then 1 rank x local 6, then 4 ranks x local 2 (ceil(6/4)).
    assert first["saved"]["steps"] == 3 and first["saved"]["loader"]["sampler"]["index"] == 18
    assert second["saved"]["steps"] == 2 and second["saved"]["loader"]["sampler"]["index"] == 30
    assert first["batch_sizes"] == [3] and second["batch_sizes"] == [6]
    assert third["saved"]["loader"]["epoch_complete"]
    seen = collections.Counter()
    for run_result in result:
        seen.update({int(k): v for k, v in run_result["seen"].items()})
    assert set(seen) == set(range(51)), "samples lost across the restarts"
    # 21 samples left for 4 ranks: 6 each, 3 of them padding; nothing else repeats.
    assert sum(seen.values()) == 51 + 3
    assert max(seen.values()) == 2


def test_reused_buffers_must_hold_the_local_batch():
    from pyddstore.torch import DistDataset, ThreadDataLoader
    # One store per rank (COMM_SELF): the same check on every rank, no collective between them.
    ds = DistDataset([torch.tensor(float(i)) for i in range(12)], "reuse_check", comm=MPI.COMM_SELF)
    try:
        gbs = GlobalBatchSize(4, 1)
        dl = ThreadDataLoader(ds, batch_size=4, sampler=ElasticSampler(ds, 1, 0), reuse_buffers=True)
        loader = ResumableLoader(dl, global_batch_size=gbs)
        loader.set_epoch(0)
        assert [b.tolist() for b in loader] == [[float(i) for i in c] for c in
                                                 [list(ElasticSampler(ds, 1, 0))[k:k + 4]
                                                  for k in (0, 4, 8)]]
        gbs.set_batch_size(8)
        loader.set_epoch(1)
        with pytest.raises(ValueError, match="reuse"):
            next(iter(loader))
        dl.close()
    finally:
        ds.free()
