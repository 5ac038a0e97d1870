"""B7: when ThreadDataLoader's threads help: samples/s with num_workers 1, 2, 4 vs 0, by sample kind.

    mpiexec -n 1 python bench/b7_threads.py --out bench/results/b7.json [--quick]

One rank, one DistDataset of N samples, one epoch per measurement (shuffled, batch 64), the
variants interleaved repeat by repeat (median of the repeats) so that load from other
processes hits them alike. Every figure is a ratio to num_workers=0 in the same run. What a
batch costs to make, by kind:

* tensor:       (float32[64], int64) samples, the default collate: ThreadDataLoader returns
                the store's batch columns; the work is the store read (C, GIL released).
* pyobjects:    the same samples, a collate that builds one small Python object per sample
                and a PyG-style batch from them (per-sample offsets, a batch vector, lists
                concatenated): Python code, which holds the GIL.
* gil_free:     the default collate, then a per-batch transform in torch that releases the
                GIL (a 64x256 @ 256x256 matmul, one torch thread), like decoding or augmenting
                in C.

and, for each, what the consumer does per batch: nothing (``none``: the loader alone), or a
training step of torch work in the main thread (``step``: two 256x256 matmuls per sample row
block, which release the GIL), so that loader threads can overlap with it.
"""

import os

os.environ["PYDDSTORE_BENCH_TORCH"] = "1"  # _common imports torch before mpi4py

import statistics  # noqa: E402

import _common as C  # noqa: E402
from _common import COMM, RANK  # noqa: E402

import torch  # noqa: E402

from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

BATCH = 64
D = 64
WORKERS = (0, 1, 2, 4)


def extra(p):
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)


class Source:
    """(float32[D], int64) sample i computed from i; read_range() is DistDataset's bulk path."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def read_range(self, a, b):
        idx = torch.arange(a, b)
        return (idx[:, None].float() + torch.arange(D, dtype=torch.float32)[None, :] / D, idx)

    def __getitem__(self, i):
        x, y = self.read_range(i, i + 1)
        return x[0], y[0]


class Atom:
    """One small Python object per sample, as a graph library's Data object."""

    __slots__ = ("x", "y", "n")

    def __init__(self, x, y):
        self.x, self.y, self.n = x, y, 1 + int(y) % 7


def pyobjects_collate(samples):
    """A PyG-style collate: per-sample objects, node offsets, a batch vector, concatenation."""
    atoms = [Atom(x, y) for x, y in samples]
    offsets, batch, total = [], [], 0
    for j, a in enumerate(atoms):
        offsets.append(total)
        batch.extend([j] * a.n)
        total += a.n
    return (torch.stack([a.x for a in atoms]), torch.tensor([int(a.y) for a in atoms]),
            torch.tensor(offsets), torch.tensor(batch))


_W = torch.randn(D * 4, D * 4)


def gil_free_collate(samples):
    x = torch.stack([s[0] for s in samples])
    y = torch.stack([s[1] for s in samples])
    return torch.tanh(x.repeat(1, 4) @ _W), y


_STEP_W = torch.randn(256, 256)


def step(batch):
    x = batch[0]
    h = x.new_zeros(x.shape[0], 256)
    h[:, : x.shape[1]] = x[:, :256]
    for _ in range(2):
        h = torch.tanh(h @ _STEP_W)
    return float(h[0, 0])


KINDS = {"tensor": None, "pyobjects": pyobjects_collate, "gil_free": gil_free_collate}


def epoch(ds, kind, workers, consumer, seed):
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    kw = {} if KINDS[kind] is None else {"collate_fn": KINDS[kind]}
    loader = ThreadDataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers, drop_last=True, **kw)
    n = 0
    t0 = C.now()
    for b in loader:
        if consumer == "step":
            step(b)
        n += len(b[1])
    dt = C.now() - t0
    loader.close()
    return n / dt


def main():
    args = C.parse_args(__doc__, extra)
    if COMM.Get_size() != 1:
        raise SystemExit("B7 measures one process: run it with mpiexec -n 1")
    torch.set_num_threads(1)  # loader threads, not torch's intra-op pool, are what is measured
    n = 4000 if args.quick else args.samples
    repeats = 2 if args.quick else args.repeats
    machine = C.machine_info()
    ds = DistDataset(Source(n), "b7", comm=COMM)
    results = {}
    for consumer in ("none", "step"):
        for kind in KINDS:
            rates = {w: [] for w in WORKERS}
            epoch(ds, kind, 0, consumer, 0)  # warm up
            for r in range(repeats):
                for w in WORKERS:
                    rates[w].append(epoch(ds, kind, w, consumer, r))
            med = {w: statistics.median(v) for w, v in rates.items()}
            key = f"{kind}/{consumer}"
            results[key] = {"samples_per_s": med, "ratio_to_workers0": {w: med[w] / med[0] for w in WORKERS},
                            "repeats": rates}
            C.log(f"B7 {key:20s} workers=0 {med[0]:9.0f} samples/s; ratio to 0: " +
                  "  ".join(f"{w}: x{med[w] / med[0]:.2f}" for w in WORKERS[1:]))
    ds.free()
    notes = [f"B7: {n} samples, batch {BATCH}, {repeats} repeats, torch threads 1, "
             f"{C.cores()} cores, load average at start {machine['loadavg_start']}"]
    C.write_result(args.out, "B7", machine, results, notes)
    if RANK == 0:
        print(f"B7 written to {args.out}")


if __name__ == "__main__":
    main()
