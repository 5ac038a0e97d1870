"""One run of a data-parallel loop that checkpoints its loader position (used by test_resume.py).

Run under mpiexec. Every step: log the batch seen on this rank, compare the
loader state across ranks, then rank 0 writes the checkpoint atomically.
``--stop-after K`` ends the run after K steps of this run, by exiting
normally or, with ``--kill``, by SIGKILL of rank 0 right after the K-th
checkpoint (so the other ranks die mid-loop, as in a real failure).
"""
import argparse
import json
import os
import signal
import time

import torch  # before MPI starts
from torch.utils.data import DataLoader

from mpi4py import MPI

from pyddstore.torch.adaptive.batchsize import GlobalBatchSize
from pyddstore.torch.adaptive.resume import ResumableLoader
from pyddstore.torch.sampler import ElasticSampler


class IndexDataset:
    """Sample i is the tensor i: a batch tells which samples it holds."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i, dtype=torch.int64)


def build_loader(args, comm):
    """A DistDataset + ThreadDataLoader when available, else a DataLoader over IndexDataset."""
    ds = IndexDataset(args.n)
    loader_cls = DataLoader
    if args.store:
        from pyddstore.torch import DistDataset, ThreadDataLoader
        ds = DistDataset(ds, "resume_worker", comm=comm)
        loader_cls = ThreadDataLoader
    sampler = ElasticSampler(ds, seed=args.seed)
    assert (sampler.num_replicas, sampler.rank) == (comm.size, comm.rank)
    gbs = GlobalBatchSize(args.global_batch, dataset=ds)
    loader = loader_cls(ds, batch_size=gbs.current_local_bsz, sampler=sampler)
    return ds, ResumableLoader(loader, global_batch_size=gbs)


def checkpoint(args, comm, loader, steps):
    """Check that every rank has the same loader state, then rank 0 saves it atomically.

    steps: steps of this run covered by the checkpoint.
    """
    state = loader.state_dict()
    text = json.dumps(state, sort_keys=True)
    assert len(set(comm.allgather(text))) == 1, "loader states differ across ranks"
    if comm.rank == 0:
        tmp = args.state_out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"loader": state, "steps": steps, "replicas": comm.size,
                       "local_batch": loader.global_batch_size.current_local_bsz}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, args.state_out)
    # Nobody goes on (or gets killed) before the checkpoint is on disk.
    comm.Barrier()


def train(args, comm, loader, log):
    """The training loop; returns (stopped early by --stop-after, steps done)."""
    steps = 0
    for epoch in range(loader.epoch, args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            steps += 1
            log.write(json.dumps({"epoch": epoch, "step": steps,
                                  "indices": batch.tolist()}) + "\n")
            log.flush()
            checkpoint(args, comm, loader, steps)
            if steps == args.stop_after:
                if args.kill:
                    if comm.rank == 0:
                        os.kill(os.getpid(), signal.SIGKILL)
                    time.sleep(60)  # the launcher kills this rank when rank 0 dies
                return True, steps
    return False, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--state-in")
    parser.add_argument("--state-out", required=True)
    parser.add_argument("--log", required=True, help="log file prefix; .rank<r>.jsonl is appended")
    parser.add_argument("--stop-after", type=int)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--store", action="store_true", help="use DistDataset + ThreadDataLoader")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    ds, loader = build_loader(args, comm)
    if args.state_in:
        with open(args.state_in) as f:
            loader.load_state_dict(json.load(f)["loader"])
    with open(f"{args.log}.rank{comm.rank}.jsonl", "w") as log:
        stopped, steps = train(args, comm, loader, log)
    if not stopped:
        checkpoint(args, comm, loader, steps)
    if args.store:
        # After an epoch left early the loader first completes, on every
        # rank, the collective reads some rank already started.
        loader.close()
        ds.free()


if __name__ == "__main__":
    main()
