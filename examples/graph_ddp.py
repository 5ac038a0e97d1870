"""torch_geometric graphs in the store, a GIN model trained with DDP: a complete script.

Each rank loads its share of a list of ``Data`` molecules into the store; a
cost-aware sampler cuts every epoch into batches of about equal node counts,
the same number on every rank; the loader reads whole batches from the store
and yields ``torch_geometric.data.Batch`` objects; DDP averages the gradients.
Run (any number of ranks):

    mpiexec -n 2 python examples/graph_ddp.py [--graphs 2000] [--epochs 4]

The target is a graph property the model can learn: the number of edges
between atoms of type 0, which a sum-aggregating GNN computes exactly.
"""

import argparse
import gc
import os
import socket

import torch  # before mpi4py, as pyddstore.torch requires

from mpi4py import MPI
from torch_geometric.data import Data
from torch_geometric.nn import GINConv, global_add_pool

from pyddstore.torch.geometric import BudgetBatchSampler, DataLoader, DistDataset


def molecule(i):
    """A random molecule: 10-60 atoms of 4 types (one-hot x), float64 positions, bonds to near atoms."""
    g = torch.Generator().manual_seed(i)
    n = int(torch.randint(10, 61, (1,), generator=g))
    kind = torch.randint(0, 4, (n,), generator=g)
    pos = torch.randn(n, 3, generator=g, dtype=torch.float64) * 2
    src = torch.randint(0, n, (3 * n,), generator=g)
    dst = torch.randint(0, n, (3 * n,), generator=g)
    keep = src != dst
    edge_index = torch.stack([src[keep], dst[keep]])
    both = (kind[edge_index[0]] == 0) & (kind[edge_index[1]] == 0)
    return Data(x=torch.nn.functional.one_hot(kind, 4).float(), pos=pos, edge_index=edge_index,
                y=both.sum().float().view(1) / 10)


class GIN(torch.nn.Module):
    """Two GIN layers, sum pooling, a linear read-out."""

    def __init__(self, hidden=32):
        super().__init__()
        mlp = lambda i, o: torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))  # noqa: E731
        self.conv1, self.conv2 = GINConv(mlp(4, hidden)), GINConv(mlp(hidden, hidden))
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, batch):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.out(global_add_pool(h, batch))


def main(comm=MPI.COMM_WORLD, graphs=2000, epochs=4, batch_graphs=64, verbose=True):
    """Train; returns the mean loss of each epoch (the same on every rank).

    batch_graphs: graphs per batch on average (the node budget is that many mean-sized molecules).
    """
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

    # Any map-style source of Data works (a list, an InMemoryDataset, a ParquetSource
    # with encode=). Collective: each rank reads and stores only its share of it.
    source = _Molecules(graphs)
    ds = DistDataset(source, "molecules", comm=comm, dtypes={"pos": torch.float32})
    sampler = BudgetBatchSampler(ds, max_num_nodes=batch_graphs * 35, seed=1)   # ~35 atoms a molecule
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=2)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GIN())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    means = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for batch in loader:                  # the same number of batches on every rank
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(batch.x, batch.edge_index, batch.batch).squeeze(1),
                                                batch.y)
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item(), 1.0])
        torch.distributed.all_reduce(total)
        means.append(float(total[0] / total[1]))
        if verbose and rank == 0:
            print(f"epoch {epoch}: mean loss {means[-1]:.4f} ({len(sampler)} batches per rank)")
    st = ds.stats()
    if verbose and rank == 0:
        print(f"rank 0 read {st['rows_local']} rows from its own shard and {st['rows_remote']} from others")
    loader.close()
    # The DDP model goes before the process group: a group destroyed by the
    # model's garbage collection joins gloo's threads while holding the GIL,
    # and a gloo thread still releasing a finished allreduce's tensors waits
    # for the GIL (a deadlock seen once in CI, torch 2.13 on CPU).
    del model, opt
    gc.collect()
    ds.free()                                 # collective
    torch.distributed.destroy_process_group()
    return means


class _Molecules(torch.utils.data.Dataset):
    """The molecules, made on demand (each rank makes only the ones it stores)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return molecule(i)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=4)
    a = p.parse_args()
    main(graphs=a.graphs, epochs=a.epochs)
