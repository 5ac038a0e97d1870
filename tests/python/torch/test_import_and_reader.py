"""Import order (torch before MPI) and DistDatasetReader joining from a separate process (method 2)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
from conftest import MapSource, idle_barrier, value

import pyddstore
from pyddstore.torch import DistDataset, DistDatasetReader

N = 29


def clean_env():
    """Environment for a child that is not an MPI process (no mpiexec variables)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "OPAL_", "HYDRA_", "PMI_"))}


def test_import_loads_torch_before_mpi(world):
    code = (
        "import sys\n"
        "from pyddstore.torch import DistDataset, ThreadDataLoader, WindowedDataset, row_of\n"
        "print('torch' in sys.modules, 'mpi4py.MPI' in sys.modules)\n")
    if world.rank == 0:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=clean_env(), timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["True", "False"]  # torch loaded, MPI not started by the import
    idle_barrier(world)


def make(i):
    return {"img": value(i, "tensor"), "label": i % 5, "v": np.arange(3, dtype=np.float64) * i}


READER = r"""
import json, os, sys, tempfile, time
import numpy as np, torch
from pyddstore.torch import DistDatasetReader, ThreadDataLoader
hs, n_core = sys.argv[1], int(sys.argv[2])
# Nothing published in an empty directory: the reader waits DDSTORE_HANDSHAKE_TIMEOUT_S, then fails.
os.environ["DDSTORE_HANDSHAKE_TIMEOUT_S"] = "1"
empty = tempfile.mkdtemp(prefix="ddsempty-")
t = time.monotonic()
try:
    DistDatasetReader("nobody", handshake_dir=empty, n_core=2)
    timeout = None
except TimeoutError as e:
    timeout = [time.monotonic() - t, empty in str(e)]
os.environ["DDSTORE_HANDSHAKE_TIMEOUT_S"] = "120"
ds = DistDatasetReader("pub", handshake_dir=hs, n_core=n_core,
                       decode=lambda s, i: {**s, "index": i})
out = {"timeout": timeout, "len": len(ds), "collective": ds.ordered_reads() is not None,
       "s7": {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in ds[7].items()}}
with ThreadDataLoader(ds, batch_size=4, num_workers=3) as dl:  # parallel reads
    labels = torch.cat([b["label"] for b in dl]).tolist()
out["labels"] = labels
bufs = ds.alloc(4)
out["rows"] = ds.read_rows([3, 1], fields=["label"], out=bufs)["label"].tolist()
ds.release(bufs)
ds.free()
print(json.dumps(out))
"""


def test_reader_from_separate_process(world, monkeypatch):
    has = world.allgather(pyddstore.has_fabric())
    if not all(has):
        pytest.skip("libddstore built without libfabric: method 2 unavailable")
    hs = world.bcast(tempfile.mkdtemp(prefix="ddsreader-") if world.rank == 0 else None)
    monkeypatch.setenv("DDSTORE_FABRIC", os.environ.get("DDSTORE_FABRIC", "shm"))
    ds = DistDataset(MapSource(N, make), "pub", method=2, handshake_dir=hs)
    try:
        ok = True
        if world.rank == 0:
            out = subprocess.run([sys.executable, "-c", READER, hs, str(world.size)],
                                 capture_output=True, text=True, env=clean_env(), timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert got["timeout"] is not None and got["timeout"][0] < 10 and got["timeout"][1]
            assert got["len"] == N and got["collective"] is False
            assert got["s7"]["label"] == 2 and got["s7"]["index"] == 7
            assert got["s7"]["img"] == value(7, "tensor").tolist()
            assert got["labels"] == [i % 5 for i in range(N)]
            assert got["rows"] == [3, 1]
        idle_barrier(world)
        assert ok
    finally:
        ds.free()



@pytest.mark.parametrize("method", [1, 2])
def test_fabric_methods_parallel_reads(world, method, monkeypatch):
    from torch.utils.data import DataLoader, DistributedSampler

    from pyddstore.torch import ThreadDataLoader
    has = world.allgather(pyddstore.has_fabric())
    if not all(has):
        pytest.skip("libddstore built without libfabric: methods 1 and 2 unavailable")
    monkeypatch.setenv("DDSTORE_FABRIC", os.environ.get("DDSTORE_FABRIC", "shm"))
    hs = world.bcast(tempfile.mkdtemp(prefix="ddsm-") if world.rank == 0 else None)
    ds = DistDataset(MapSource(N, make), f"m{method}", method=method, handshake_dir=hs)
    try:
        assert ds.ddstore.method == method and ds.ordered_reads() is None
        for i in (0, N - 1):
            assert ds[i]["label"] == i % 5
        sampler = DistributedSampler(ds, num_replicas=world.size, rank=world.rank, seed=4)
        with ThreadDataLoader(ds, batch_size=3, sampler=sampler, num_workers=3,
                              reuse_buffers=True) as tdl:
            got = [b for b in tdl]
        ref = [b for b in DataLoader(ds, batch_size=3, sampler=sampler)]
        assert len(got) == len(ref)
        for a, b in zip(got, ref):
            assert torch.equal(a["img"], b["img"]) and torch.equal(a["label"], b["label"])
    finally:
        ds.free()
