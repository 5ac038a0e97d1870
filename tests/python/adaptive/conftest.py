"""Fixtures of the pyddstore.torch.adaptive tests (run under mpiexec, every rank)."""
import numpy as np
import pytest
import torch
import torch.distributed as dist

import pyddstore.torch.adaptive as adl


class Regression(torch.utils.data.Dataset):
    """y = x . w + sigma * noise with x ~ N(0, I_d); sample i is (x_i, y_i, i)."""

    def __init__(self, n, d=4, sigma=1.0, seed=0):
        rng = np.random.default_rng(seed)
        self.w = rng.normal(size=d).astype(np.float32)
        self.x = rng.normal(size=(n, d)).astype(np.float32)
        self.y = (self.x @ self.w + sigma * rng.normal(size=n)).astype(np.float32)
        self.sigma = sigma

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), torch.tensor(self.y[i]), i


@pytest.fixture(scope="session")
def pg():
    """torch.distributed over the MPI job, once per process (adl.init_process_group)."""
    if not dist.is_initialized():
        adl.init_process_group("gloo")
    return dist.group.WORLD


@pytest.fixture(autouse=True)
def job():
    """A fresh AdaptDL job state for every test."""
    adl.reset()
    yield
    adl.reset()
