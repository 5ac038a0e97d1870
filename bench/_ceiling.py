"""The loader benchmarks' ceiling (b2_loader, b4_scaling, b2_petastorm): one
epoch over tensors already in memory, with nothing but indexing. No MPI here:
b2_petastorm.py runs in the Petastorm environment, which has no mpi4py.
"""
import torch


def ceiling_epoch(X, Y, n_local, epoch, batch, rank, size):
    """One epoch of `rank`'s share (every `size`-th sample, n_local of them) of
    a permutation seeded by `epoch`, batch by batch; returns the samples seen."""
    g = torch.Generator()
    g.manual_seed(epoch)
    perm = torch.randperm(X.shape[0], generator=g)[rank::size][:n_local]
    n = 0
    for i in range(0, n_local, batch):
        idx = perm[i:i + batch]
        x, y = X[idx], Y[idx]
        n += y.shape[0]
    return n
