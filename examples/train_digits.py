"""Data-parallel training of a small CNN on scikit-learn's bundled handwritten digits.

The training set is served from DDStore: every rank loads only its share of
the images into a DistDataset, and a ThreadDataLoader with a
DistributedSampler reads each rank's batches (from any rank's share) with
one get_batch() per field. The model is trained with DistributedDataParallel
over gloo. Rank 0 prints, per epoch, the mean training loss, the accuracy on
held-out digits and the training throughput.

    mpiexec -n 4 python examples/train_digits.py          # add --oversubscribe on small machines

The data (1797 8x8 images, 10 classes) ships with scikit-learn
(sklearn.datasets.load_digits), so nothing is downloaded.
"""

import argparse
import gc
import os
import socket
import time

# pyddstore.torch imports torch before MPI starts.
from pyddstore.torch import DistDataset, ThreadDataLoader  # isort: skip

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI
from sklearn.datasets import load_digits
from torch.utils.data import DistributedSampler


class Digits(torch.utils.data.Dataset):
    """Map-style source: (image tensor (1, 8, 8) float32 in [0, 1], label int)."""

    def __init__(self, images, labels):
        self.images = torch.from_numpy((images / 16.0).astype(np.float32)).unsqueeze(1)
        self.labels = labels.astype(np.int64)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])


class Net(nn.Module):
    """Two conv layers and two linear layers (about 40k parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=1, help="ThreadDataLoader threads per rank")
    p.add_argument("--method", type=int, default=None, help="DDStore method (default DDSTORE_METHOD or 0)")
    p.add_argument("--test-fraction", type=float, default=0.2)
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)  # several ranks share few cores
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    # torch.distributed over gloo, rendezvous address from rank 0: loopback
    # on one host; rank 0's host name when the job spans several (loopback
    # would not reach it from the others).
    multi_host = len(set(comm.allgather(MPI.Get_processor_name()))) > 1
    port = host = None
    if rank == 0:
        host = socket.gethostname() if multi_host else "127.0.0.1"
        with socket.socket() as s:
            s.bind(("" if multi_host else "127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", comm.bcast(host))
    os.environ["MASTER_PORT"] = str(comm.bcast(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    n_test = int(len(order) * args.test_fraction)
    test_idx, train_idx = order[:n_test], order[n_test:]
    train_src = Digits(digits.images[train_idx], digits.target[train_idx])
    test_src = Digits(digits.images[test_idx], digits.target[test_idx])

    t0 = time.perf_counter()
    train = DistDataset(train_src, "digits-train", method=args.method)
    load_s = time.perf_counter() - t0
    share = train.ddstore.query("digits-train/0").local_rows

    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = DistributedSampler(train, num_replicas=size, rank=rank, shuffle=True, seed=0)
    loader = ThreadDataLoader(train, batch_size=args.batch_size, sampler=sampler,
                              num_workers=args.workers, drop_last=False)
    # Held-out digits: each rank scores a slice, counts are summed.
    mine = slice(rank * n_test // size, (rank + 1) * n_test // size)
    test_x, test_y = test_src.images[mine], torch.from_numpy(test_src.labels[mine])

    if rank == 0:
        print(f"digits: {len(train)} training images in DDStore (method {train.ddstore.method}, "
              f"{size} ranks, {share} on rank 0, loaded in {load_s:.2f} s), {n_test} held out; "
              f"batch {args.batch_size}/rank, {args.workers} loader thread(s)/rank", flush=True)

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        stats = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
        comm.Barrier()
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            stats += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64)
        dist.all_reduce(stats)
        elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        model.eval()
        with torch.no_grad():
            correct = (model.module(test_x).argmax(1) == test_y).sum()
        score = torch.tensor([float(correct), float(len(test_y))], dtype=torch.float64)
        dist.all_reduce(score)
        if rank == 0:
            print(f"epoch {epoch:2d}  train loss {stats[0] / stats[1]:.4f}  "
                  f"held-out accuracy {score[0] / score[1]:.4f}  "
                  f"{stats[1] / elapsed:8.0f} samples/s", flush=True)

    reads = comm.gather(train.ddstore.stats(), root=0)
    if rank == 0:
        local = sum(r["rows_local"] for r in reads)
        remote = sum(r["rows_remote"] for r in reads)
        print(f"store reads: {local} rows from the reader's own share, {remote} from other ranks'",
              flush=True)
    loader.close()
    train.free()
    # The DDP model goes before the process group: a DDP reducer left for
    # interpreter exit, after the group is gone, can abort the process (gloo).
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
