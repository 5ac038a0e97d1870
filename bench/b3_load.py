"""B3: DistDataset construction time vs copying the same bytes; peak RSS per rank vs shard bytes.

Run under mpiexec (default setting: 2 ranks). Samples are (float32[D], int64 label).

Time (interleaved repeats, barrier before each, medians):
* store_range: DistDataset(source) from an in-memory source that has read_range() (the bulk
  path; its ranges are views of arrays already in memory);
* store_items: DistDataset(TensorDataset) (no read_range: one __getitem__ per sample);
* baseline copy_fresh: copying this rank's shard bytes into newly allocated arrays (what
  "copy the same bytes" costs, page faults included, as the store's memory is new too);
  copy_warm (copy into already-touched memory) is recorded beside it.
Ratio = copy_fresh time / construction time (>= 0.5 is the target).

Peak RSS (VmHWM, restarted with /proc/self/clear_refs before each build) of building a
DistDataset from a lazy source (samples computed on demand, holding no memory of its own),
without and with chunk_size, compared with shard bytes + chunk bytes + the process's RSS
before the build; target: peak <= 1.10 x that sum. RssAnon/RssShmem after the build are
recorded too (the store's shard lives in MPI shared memory when node-local).
"""

import gc
import os

os.environ["PYDDSTORE_BENCH_TORCH"] = "1"

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from pyddstore.torch import DistDataset  # noqa: E402


def extra(p):
    p.add_argument("--dim", type=int, default=1024)


class ArraySource:
    """In-memory map-style source over arrays X (n, D) and Y (n,), with a read_range()."""

    def __init__(self, X, Y):
        self.X, self.Y = X, Y

    def __len__(self):
        return self.X.shape[0]

    def __getitem__(self, i):
        return torch.from_numpy(self.X[i]), int(self.Y[i])

    def read_range(self, a, b):
        return self.X[a:b], self.Y[a:b]


class LazySource:
    """Samples computed from the index on demand: the source holds no data, so peak RSS
    shows what the DistDataset build itself holds. read_range() allocates only its result."""

    def __init__(self, n, d):
        self.n, self.d = n, d

    def __len__(self):
        return self.n

    def read_range(self, a, b):
        x = np.empty((b - a, self.d), np.float32)
        x.reshape(-1)[:] = np.float32(a)  # writes (touches) every page, as a real reader would
        return x, np.full(b - a, a, np.int64)

    def __getitem__(self, i):
        x, y = self.read_range(i, i + 1)
        return torch.from_numpy(x[0]), int(y[0])


def status_kib(*keys):
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k = line.split(":", 1)[0]
            if k in keys:
                out[k] = int(line.split()[1]) * 1024
    return out


def time_build(args, repeats):
    d = args.dim
    n = (1 << 16) if not args.quick else (1 << 14)     # 256 MiB (D=1024) in full mode
    X = (np.arange(n * d, dtype=np.int64) % 65521).astype(np.float32).reshape(n, d)
    Y = np.arange(n, dtype=np.int64) % 1000
    a, b = n * RANK // SIZE, n * (RANK + 1) // SIZE
    shard_bytes = (b - a) * (d * 4 + 8)
    src = ArraySource(X, Y)
    tds = TensorDataset(torch.from_numpy(X), torch.from_numpy(Y))
    warm_x, warm_y = np.empty_like(X[a:b]), np.empty_like(Y[a:b])

    def copy_fresh():
        return X[a:b].copy(), Y[a:b].copy()

    def copy_warm():
        np.copyto(warm_x, X[a:b])
        np.copyto(warm_y, Y[a:b])

    def build(source):
        ds = DistDataset(source, "b3", comm=COMM)
        ds.free()

    fns = {"copy_fresh": copy_fresh, "copy_warm": copy_warm,
           "store_range": lambda: build(src)}
    if not args.quick or n <= (1 << 14):
        fns["store_items"] = lambda: build(tds)
    times = {k: [] for k in fns}
    cpus = {k: [] for k in fns}
    for f in fns.values():
        f()
    for _ in range(repeats):
        for k, f in fns.items():
            COMM.Barrier()
            c0, t0 = C.cpu_now(), C.now()
            f()
            times[k].append(C.now() - t0)
            cpus[k].append(C.cpu_now() - c0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    medc = {k: float(np.median(v)) for k, v in cpus.items()}
    res = []
    for k in fns:
        ratio = C.gather_stat(COMM, med["copy_fresh"] / med[k])
        res.append({"bench": "B3", "kind": "time", "variant": k, "dim": d, "samples": n,
                    "ranks": SIZE, "shard_bytes": shard_bytes, "seconds": med[k],
                    "seconds_per_rank": COMM.allgather(med[k]),
                    "gb_per_s": shard_bytes / med[k] / 1e9, "ratio": ratio["median"],
                    "cpu_seconds": medc[k],
                    "ratio_cpu": C.gather_stat(COMM, medc["copy_fresh"] / medc[k])["median"],
                    "ratio_min": ratio["min"], "seconds_all": times[k], "repeats": repeats})
        C.log(f"B3 time {k:12s} {med[k] * 1e3:8.1f} ms  {shard_bytes / med[k] / 1e9:6.2f} GB/s  "
              f"ratio (copy_fresh / this) {ratio['median']:.3f}")
    return res


def rss_build(args, chunk):
    d = args.dim
    n = (1 << 17) if not args.quick else (1 << 15)     # 512 MiB (D=1024) in full mode
    a, b = n * RANK // SIZE, n * (RANK + 1) // SIZE
    shard_bytes = (b - a) * (d * 4 + 8)
    chunk_bytes = 0 if chunk is None else min(chunk, b - a) * (d * 4 + 8)
    src = LazySource(n, d)
    gc.collect()
    COMM.Barrier()
    base = C.rss_bytes()
    reset_ok = C.reset_peak_rss()
    ds = DistDataset(src, f"b3rss{chunk}", comm=COMM, chunk_size=chunk)
    peak = C.peak_rss_bytes()
    st = status_kib("RssAnon", "RssShmem", "RssFile", "VmRSS")
    ds.free()
    gc.collect()
    allowed = shard_bytes + chunk_bytes + base
    ratio = peak / allowed
    res = {"bench": "B3", "kind": "rss", "chunk_size": chunk, "dim": d, "samples": n, "ranks": SIZE,
           "shard_bytes": shard_bytes, "chunk_bytes": chunk_bytes, "baseline_rss": base,
           "peak_rss": peak, "peak_over_allowed": ratio,
           "peak_over_allowed_per_rank": COMM.allgather(ratio),
           "extra_over_shard": (peak - base) / shard_bytes,
           "after_build": st, "hwm_reset": reset_ok}
    worst = max(res["peak_over_allowed_per_rank"])
    res["peak_over_allowed_max"] = worst
    C.log(f"B3 rss chunk={chunk}: shard {shard_bytes / 2**20:.0f} MiB, chunk {chunk_bytes / 2**20:.0f} MiB, "
          f"base {base / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB -> {ratio:.3f}x allowed "
          f"(worst rank {worst:.3f}); peak-base = {(peak - base) / shard_bytes:.2f} x shard")
    return res


def main():
    args, machine = C.start(__doc__, extra, torch_threads=max(1, C.cores() // SIZE))
    repeats = 2 if args.quick else 5
    results, notes = [], []
    # RSS first, before the timing part's arrays raise the baseline.
    for chunk in (None, 4096):
        results.append(rss_build(args, chunk))
    results += time_build(args, repeats)
    C.write_result(args.out, "B3", machine, results, notes)


if __name__ == "__main__":
    main()
