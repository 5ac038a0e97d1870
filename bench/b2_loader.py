"""B2: DistDataset + ThreadDataLoader throughput (samples/s per rank) vs in-memory baselines.

Run under mpiexec (the issue's setting is 2 ranks). Samples are (float32[D], int64 label),
D = 128 (512-byte samples) and 1024. Every rank iterates one epoch of its share of a global
shuffle (torch DistributedSampler, batch 256) through:

* store:   DistDataset (this rank holds 1/ranks of the data) + ThreadDataLoader;
* ceiling: torch.randperm + indexing of one local tensor holding the whole dataset, no loader;
* torch_dl: torch DataLoader(TensorDataset) over the whole dataset (num_workers=0), same sampler.

The three run interleaved, repeat by repeat, with a barrier before each epoch so that ranks
sharing cores contend alike. Petastorm runs in its own virtual environment
(bench/b2_petastorm.py, launched by run.sh) over the Parquet files this script writes
(--parquet-dir), in as many concurrent processes as ranks here, each with its own ceiling.
"""

import os

os.environ["PYDDSTORE_BENCH_TORCH"] = "1"  # _common imports torch before mpi4py

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

from _ceiling import ceiling_epoch  # noqa: E402

BATCH = 256


def extra(p):
    p.add_argument("--dims", type=int, nargs="+", default=[128, 1024])
    p.add_argument("--parquet-dir", default=None,
                   help="also write the datasets as Parquet here (rank 0), for b2_petastorm.py")
    p.add_argument("--workers", type=int, default=1, help="ThreadDataLoader num_workers")


class GenSource:
    """Map-style source of (float32[D] tensor, int64 label) samples computed from the index,
    so building a DistDataset needs no copy of the whole dataset; read_range() is the bulk
    path DistDataset uses."""

    def __init__(self, n, d):
        self.n, self.d = n, d

    def __len__(self):
        return self.n

    def read_range(self, a, b):
        x = (np.arange(a * self.d, b * self.d, dtype=np.int64) % 65521).astype(np.float32)
        return (x.reshape(b - a, self.d), np.arange(a, b, dtype=np.int64) % 1000)

    def __getitem__(self, i):
        x, y = self.read_range(i, i + 1)
        return torch.from_numpy(x[0]), int(y[0])


def write_parquet(src, path, row_group):
    """The same samples as a Parquet file: x list<float32>[D], y int64 (Petastorm's
    make_batch_reader turns equal-length lists into a matrix)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    fname = os.path.join(path, "part-00000.parquet")
    if os.path.exists(fname):
        os.remove(fname)
    writer = None
    for a in range(0, src.n, row_group):
        b = min(src.n, a + row_group)
        x, y = src.read_range(a, b)
        xs = pa.ListArray.from_arrays(pa.array(np.arange(0, (b - a + 1) * src.d, src.d, dtype=np.int32)),
                                      pa.array(x.reshape(-1)))
        t = pa.table({"x": xs, "y": pa.array(y)})
        if writer is None:
            writer = pq.ParquetWriter(fname, t.schema, compression="NONE")
        writer.write_table(t, row_group_size=row_group)
    writer.close()


def epoch_loader(loader, sampler, epoch):
    sampler.set_epoch(epoch)
    n = 0
    for x, y in loader:
        n += y.shape[0]
    return n


def check_loader(ds_loader, sampler, X, Y):
    """Every sample the store loader gives equals the source's (first batches of one epoch)."""
    sampler.set_epoch(99)
    idx_iter = iter(list(sampler))
    ok = True
    for b, (x, y) in enumerate(ds_loader):
        want = [next(idx_iter) for _ in range(y.shape[0])]
        ok &= bool(torch.equal(x, X[want]) and torch.equal(y, Y[want]))
    return COMM.allreduce(ok, op=C.MPI.LAND)


def run_dim(d, n, repeats, workers):
    src = GenSource(n, d)
    xa, ya = src.read_range(0, n)
    X, Y = torch.from_numpy(xa), torch.from_numpy(ya)
    ds = DistDataset(src, f"b2_{d}", comm=COMM)
    sampler = DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
    n_local = len(sampler)
    loader = ThreadDataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers)
    tds = TensorDataset(X, Y)
    tsampler = DistributedSampler(tds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
    tloader = DataLoader(tds, batch_size=BATCH, sampler=tsampler, num_workers=0)
    if not check_loader(loader, sampler, X, Y):
        raise SystemExit(f"B2 D={d}: the store loader returned wrong samples")

    fns = {
        "ceiling": lambda e: ceiling_epoch(X, Y, n_local, e, BATCH, RANK, SIZE),
        "store": lambda e: epoch_loader(loader, sampler, e),
        "torch_dl": lambda e: epoch_loader(tloader, tsampler, e),
    }
    times, cpus = C.timed_epochs(fns, repeats, dict.fromkeys(fns, n_local))
    res = []
    med = {k: float(np.median(v)) for k, v in times.items()}
    rate = {k: n_local / med[k] for k in fns}
    rate_cpu = {k: n_local / float(np.median(cpus[k])) for k in fns}
    for k in fns:
        stat = C.gather_stat(COMM, rate[k])
        res.append({"bench": "B2", "dim": d, "sample_bytes": d * 4 + 8, "variant": k, "ranks": SIZE,
                    "samples": n, "samples_per_rank_epoch": n_local, "batch": BATCH,
                    "samples_per_s": stat["median"], "samples_per_s_per_rank": stat["per_rank"],
                    "ratio_to_ceiling": C.gather_stat(COMM, rate[k] / rate["ceiling"])["median"],
                    "ratio_to_torch_dl": C.gather_stat(COMM, rate[k] / rate["torch_dl"])["median"],
                    "samples_per_cpu_s": C.gather_stat(COMM, rate_cpu[k])["median"],
                    "ratio_cpu_to_ceiling": C.gather_stat(COMM, rate_cpu[k] / rate_cpu["ceiling"])["median"],
                    "epoch_s_all": times[k], "epoch_cpu_s_all": cpus[k], "repeats": repeats,
                    "torch_threads": torch.get_num_threads(), "loader_workers": workers})
        C.log(f"B2 D={d:5d} {k:9s} {stat['median'] / 1e6:7.3f} M samples/s/rank "
              f"({res[-1]['ratio_to_ceiling']:.3f}x ceiling)")
    loader.close()
    ds.free()
    return res


def main():
    args, machine = C.start(__doc__, extra, torch_threads=max(1, C.cores() // SIZE))
    repeats = 2 if args.quick else 5
    results, notes = [], []
    for d in args.dims:
        # 64 MiB (D=128) / 128 MiB (D=1024) of features in full mode: larger than the caches.
        n = (1 << 17) if d <= 128 else (1 << 15)
        if args.quick:
            n //= 4
        if args.parquet_dir and RANK == 0:
            write_parquet(GenSource(n, d), os.path.join(args.parquet_dir, f"d{d}"),
                          row_group=max(512, n // 32))  # 32 row groups: even shards
        results += run_dim(d, n, repeats, args.workers)
    notes.append(f"B2: torch.set_num_threads({torch.get_num_threads()}) per rank; ThreadDataLoader "
                 f"num_workers={args.workers}; torch DataLoader num_workers=0")
    C.write_result(args.out, "B2", machine, results, notes)


if __name__ == "__main__":
    main()
