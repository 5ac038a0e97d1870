"""DistDataset + ElasticSampler + ThreadDataLoader + DDP: a complete training script.

Each rank loads its share of a map-style dataset into the store; the sampler
gives every rank a different part of each epoch; the loader reads whole
batches from the store in threads; DDP averages the gradients. Run:

    mpiexec -n 4 python examples/torch_ddp.py

MPI starts the processes and the store's transport; torch.distributed (gloo)
averages the gradients. Any number of ranks works.
"""

import gc
import os
import socket

import torch  # before mpi4py, as pyddstore.torch requires

from mpi4py import MPI

from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch.sampler import ElasticSampler

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# torch.distributed over gloo, rendezvous on this machine (rank 0 picks a free port).
port = None
if rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ["MASTER_PORT"] = str(comm.bcast(port, root=0))
torch.distributed.init_process_group("gloo", rank=rank, world_size=size)


class Regression(torch.utils.data.Dataset):
    """A synthetic source: y = x . w + noise. Any map-style dataset works here
    (an ImageFolder, a ParquetSource, a list of tuples...)."""

    def __init__(self, n, dim=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        self.y = self.x @ torch.linspace(-1, 1, dim) + 0.01 * torch.randn(n, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]            # a tuple of two tensors


# Collective: every rank builds the dataset; each loads only its share of the source.
ds = DistDataset(Regression(4096), "regression", comm=comm)
x0, y0 = ds[0]                                  # any sample, from any rank
assert x0.shape == (16,) and y0.shape == ()

sampler = ElasticSampler(ds, shuffle=True, seed=1)   # replicas = the store's group
loader = ThreadDataLoader(ds, batch_size=64, sampler=sampler, num_workers=2)

model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    sampler.set_epoch(epoch)
    total, batches = 0.0, 0
    for x, y in loader:                         # same number of batches on every rank
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        opt.step()
        total, batches = total + loss.item(), batches + 1
    mean = comm.allreduce(total / batches) / size
    if rank == 0:
        print(f"epoch {epoch}: mean loss {mean:.4f} ({batches} batches of 64 per rank)")

st = ds.ddstore.stats()
if rank == 0:
    print(f"rank 0 read {st['rows_local']} rows from its own shard and {st['rows_remote']} from others")
loader.close()
# The DDP model goes before the process group (see examples/graph_ddp.py).
del model, opt
gc.collect()
ds.free()                                       # collective
torch.distributed.destroy_process_group()
