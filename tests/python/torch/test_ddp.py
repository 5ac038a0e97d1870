"""A short DistributedDataParallel run (gloo) fed by DistDataset + ThreadDataLoader: the loss drops."""
import datetime
import os
import socket

import numpy as np
import torch
import torch.distributed as dist
from conftest import MapSource
from torch.utils.data import DistributedSampler

from pyddstore.torch import DistDataset, ThreadDataLoader

W = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)


def sample(i):
    x = np.random.default_rng(1000 + i).normal(size=8).astype(np.float32)
    return torch.from_numpy(x), int(np.argmax(x @ W))


def test_ddp_loss_decreases(world):
    # Rendezvous on loopback on one host, on rank 0's host name when the job
    # spans several (tests/cluster/): loopback would not reach it from there.
    multi_host = len(set(world.allgather(socket.gethostname()))) > 1
    port = host = None
    if world.rank == 0:
        host = socket.gethostname() if multi_host else "127.0.0.1"
        with socket.socket() as s:
            s.bind(("" if multi_host else "127.0.0.1", 0))
            port = s.getsockname()[1]
    host, port = world.bcast((host, port))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(port)
    dist.init_process_group("gloo", rank=world.rank, world_size=world.size,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    ds = DistDataset(MapSource(256, sample), "ddp")
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, seed=0)
        losses = []
        with ThreadDataLoader(ds, batch_size=16, sampler=sampler, num_workers=1) as loader:
            for epoch in range(3):
                sampler.set_epoch(epoch)
                total = torch.zeros(2)
                for x, y in loader:
                    opt.zero_grad()
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    opt.step()
                    total += torch.tensor([loss.item() * len(y), len(y)])
                dist.all_reduce(total)
                losses.append((total[0] / total[1]).item())
        assert losses[-1] < 0.6 * losses[0], losses
        assert world.allgather(losses) == [losses] * world.size  # all ranks saw the same mean loss
        # The DDP model goes before the process group: a DDP reducer destroyed at
        # interpreter exit, after it, can abort the process (seen with gloo).
        del model, opt
    finally:
        ds.free()
        dist.destroy_process_group()
