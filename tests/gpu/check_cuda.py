"""The CUDA paths of pyddstore.torch end to end, bit-exact, on every rank (run by
tests/gpu/run.sh under mpiexec; see that script). Exits non-zero on the first mismatch.

Checked: DistDataset(device=...) samples and batches land on the GPU equal bit for bit
to the source (float32, bfloat16, float16, int64, bool tensors; numpy fields stay on
the host); alloc() buffers are pinned host memory and read_rows(out=) reads into them;
ThreadDataLoader with device= batches, with pin_memory=True (pinned host batches moved
with non_blocking copies) and with reuse_buffers=True (a pinned pool); add_device='cuda'
is refused on every rank (the store holds host memory only) and add_device='cpu' works;
the core refuses a CUDA tensor as a read buffer.

PYDDSTORE_GPU_CHECK_DEVICE=cpu runs the same checks on the CPU (pinned-memory checks
left out), to check this script itself where there is no GPU.
"""
import os
import sys

import numpy as np
import torch
from mpi4py import MPI

import pyddstore
from pyddstore.torch import DistDataset, ThreadDataLoader

comm = MPI.COMM_WORLD
RANK, SIZE = comm.Get_rank(), comm.Get_size()
KIND = os.environ.get("PYDDSTORE_GPU_CHECK_DEVICE", "cuda")
if KIND == "cuda":
    DEVICE = torch.device("cuda", RANK % torch.cuda.device_count())
    torch.cuda.set_device(DEVICE)
else:
    DEVICE = torch.device("cpu")
CUDA = DEVICE.type == "cuda"
N = 37


def sample(i):
    g = torch.Generator().manual_seed(i)
    return {"x": torch.randn(3, 5, generator=g),
            "h": torch.randn(4, generator=g).to(torch.bfloat16),
            "f16": torch.randn(2, 2, generator=g).to(torch.float16),
            "idx": torch.randint(-2**40, 2**40, (6,), generator=g),
            "mask": torch.rand(7, generator=g) > 0.5,
            "np": np.arange(4, dtype=np.float64) * i,
            "label": i % 10}


def as_bytes(t):
    """The bytes of a tensor on the host (bit-exact comparisons, NaN and -0.0 included)."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def check(cond, what):
    if not cond:
        sys.stderr.write(f"[rank {RANK}] FAILED: {what}\n")
        sys.stderr.flush()
        comm.Abort(1)


def same_sample(got, want, what, device):
    check(list(got) == list(want), f"{what}: keys {list(got)}")
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            check(isinstance(g, torch.Tensor) and g.device == device, f"{what}[{k}] on {getattr(g, 'device', None)}")
            check(g.dtype == w.dtype and g.shape == w.shape and as_bytes(g) == as_bytes(w), f"{what}[{k}] values")
        elif isinstance(w, np.ndarray):
            check(isinstance(g, np.ndarray) and g.tobytes() == w.tobytes(), f"{what}[{k}] (host array)")
        else:
            check(type(g) is type(w) and g == w, f"{what}[{k}] = {g!r}")


def same_batch(batch, rows, what, device):
    """A default-collated batch of `rows`: every field stacked, bit-exact."""
    for k in ("x", "h", "f16", "idx", "mask"):
        t = batch[k]
        check(t.device == device, f"{what}[{k}] on {t.device}")
        want = torch.stack([sample(int(i))[k] for i in rows])
        check(t.dtype == want.dtype and as_bytes(t) == as_bytes(want), f"{what}[{k}] values")
    want = np.stack([sample(int(i))["np"] for i in rows])
    got = batch["np"]
    got = got.cpu().numpy() if isinstance(got, torch.Tensor) else got   # loaders give tensors
    check(got.tobytes() == want.tobytes(), f"{what}[np] values")


def is_pinned(a):
    return torch.from_numpy(a).is_pinned() if isinstance(a, np.ndarray) else a.is_pinned()


def main():
    src = [sample(i) for i in range(N)]
    ds = DistDataset(src, "gpu_check", comm=comm, device=DEVICE)
    try:
        for i in range(N):
            same_sample(ds[i], src[i], f"ds[{i}]", DEVICE)
        rows = np.array([(5 * j + RANK) % N for j in range(9)] + [0], np.int64)
        vals = ds.read_rows(rows)
        same_batch(vals, rows, "read_rows", DEVICE)
        bufs = ds.alloc(len(rows))
        if CUDA:
            check(all(is_pinned(bufs[k]) for k in ("x", "h", "f16", "idx", "mask")),
                  "alloc(): tensor fields' buffers are pinned host memory")
        same_batch(ds.read_rows(rows, out=bufs), rows, "read_rows(out=alloc())", DEVICE)
        ds.release(bufs)

        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=3)
        order = list(sampler)
        for kw in (dict(num_workers=2), dict(num_workers=2, reuse_buffers=True), dict(num_workers=0)):
            with ThreadDataLoader(ds, batch_size=4, sampler=sampler, **kw) as tdl:
                n = 0
                for k, b in enumerate(tdl):
                    same_batch(b, order[4 * k:4 * k + 4], f"ThreadDataLoader({kw}) batch {k}", DEVICE)
                    n += 1
                check(n == len(tdl), f"ThreadDataLoader({kw}): {n} batches")
    finally:
        ds.free()

    # Host samples, pinned batches, non-blocking copies to the GPU.
    host = DistDataset(src, "gpu_check_host", comm=comm)
    try:
        sampler = torch.utils.data.DistributedSampler(host, num_replicas=SIZE, rank=RANK, shuffle=False)
        order = list(sampler)
        with ThreadDataLoader(host, batch_size=5, sampler=sampler, num_workers=2, pin_memory=CUDA) as tdl:
            for k, b in enumerate(tdl):
                if CUDA:
                    check(all(b[f].is_pinned() for f in ("x", "h", "idx")), f"pin_memory batch {k} pinned")
                moved = {f: v.to(DEVICE, non_blocking=True) for f, v in b.items()}
                if CUDA:
                    torch.cuda.synchronize()
                same_batch(moved, order[5 * k:5 * k + 5], f"pinned batch {k}", DEVICE)
    finally:
        host.free()

    # The store holds host memory: a device for add_device is refused on every rank.
    if CUDA:
        try:
            DistDataset(src, "gpu_check_add", comm=comm, add_device=DEVICE)
            check(False, "add_device='cuda' was accepted")
        except NotImplementedError as e:
            check("host memory" in str(e), f"add_device message: {e}")
    on_cpu = DistDataset(src, "gpu_check_add_cpu", comm=comm, add_device="cpu", device=DEVICE)
    try:
        same_sample(on_cpu[N - 1], src[N - 1], "add_device='cpu' ds[-1]", DEVICE)
    finally:
        on_cpu.free()

    # The core reads into host memory only: a CUDA tensor as the output is refused.
    if CUDA:
        store = pyddstore.PyDDStore(comm)
        try:
            store.add("v", np.arange(4 * (RANK + 1), dtype=np.float32).reshape(-1, 2))
            try:
                store.get("v", torch.empty(1, 2, device=DEVICE), 0)
                check(False, "a CUDA output was accepted by get()")
            except pyddstore.DDStoreNotSupportedError:
                pass
            out = torch.empty(1, 2).pin_memory()
            store.get("v", out, 1)
            check(out.tolist() == [[2.0, 3.0]], f"get() into pinned memory: {out.tolist()}")
        finally:
            store.free()

    comm.Barrier()
    if RANK == 0:
        print(f"tests/gpu/check_cuda.py: all checks passed on {SIZE} rank(s), device {KIND} "
              f"({torch.cuda.get_device_name(DEVICE) if CUDA else 'no GPU'})", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)   # never leave the other ranks waiting
