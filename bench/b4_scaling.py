"""B4: scaling in ranks and batch size (run.sh runs it at 1, 2 and 4 ranks).

At the rank count it is started with, for batch sizes 64..4096:
* get_batch: method-0 PyDDStore.get_batch of B random 512-byte rows (the B2 sample size)
  vs np.take(..., mode='clip') of the same rows from a local array of the whole dataset
  (unbuffered: the default mode='raise' copies through a temporary when out= is given, which
  flatters the store at large batches), ratio, rows/s per rank and in total;
* loader: DistDataset + ThreadDataLoader over (float32[128], int64) samples with a global
  shuffle (DistributedSampler) vs the in-memory ceiling (torch.randperm + indexing a local
  tensor of the whole dataset), samples/s per rank and in total.
Loops are interleaved and start after a barrier. With more ranks than cores the ranks
time-share the cores (oversubscription, recorded): per-rank rates then fall by design; the
ratios to the same-run baselines, which suffer alike, are the figures to read.
"""

import os

os.environ["PYDDSTORE_BENCH_TORCH"] = "1"

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from pyddstore import PyDDStore  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

import b2_loader  # noqa: E402
from _ceiling import ceiling_epoch  # noqa: E402


def extra(p):
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024, 4096])


def bench_get_batch(batches, repeats, target_s, rows_per_rank):
    rb = 512
    full = np.concatenate([np.random.default_rng(r).integers(0, 256, (rows_per_rank, rb), np.uint8)
                           for r in range(SIZE)])
    s = PyDDStore(COMM)
    res = []
    try:
        s.add("b4", full[RANK * rows_per_rank:(RANK + 1) * rows_per_rank])
        s.sync()
        rng = np.random.default_rng(11 + RANK)
        for bsz in batches:
            sets = [rng.integers(0, full.shape[0], bsz, dtype=np.int64) for _ in range(16)]
            o1, o2 = np.empty((bsz, rb), np.uint8), np.empty((bsz, rb), np.uint8)
            s.get_batch("b4", o2, sets[0])
            np.take(full, sets[0], axis=0, out=o1)
            assert COMM.allreduce(bool(np.array_equal(o1, o2)), op=C.MPI.LAND)
            it = [0]

            def nxt():
                it[0] = (it[0] + 1) % len(sets)
                return sets[it[0]]

            t = C.interleaved({"np.take": lambda: np.take(full, nxt(), axis=0, out=o1, mode="clip"),
                               "store": lambda: s.get_batch("b4", o2, nxt())},
                              repeats, target_s, COMM)
            ratio = C.gather_stat(COMM, t["np.take"]["s"] / t["store"]["s"])
            ratio_cpu = C.gather_stat(COMM, t["np.take"]["cpu_s"] / t["store"]["cpu_s"])
            rate = C.gather_stat(COMM, bsz / t["store"]["s"])
            res.append({"bench": "B4", "part": "get_batch", "ranks": SIZE, "batch": bsz,
                        "row_bytes": rb, "ratio": ratio["median"], "ratio_min": ratio["min"],
                        "ratio_cpu": ratio_cpu["median"],
                        "rows_per_s_per_rank": rate["median"], "rows_per_s_total": sum(rate["per_rank"]),
                        "store_us": t["store"]["s"] * 1e6, "np_take_us": t["np.take"]["s"] * 1e6,
                        "repeats": repeats, "node_local": s.node_local})
            C.log(f"B4 get_batch ranks={SIZE} B={bsz:5d}: ratio {ratio['median']:.3f}  "
                  f"{rate['median'] / 1e6:.2f} M rows/s/rank  total {sum(rate['per_rank']) / 1e6:.2f}")
    finally:
        s.free()
    return res


def bench_loader(batches, repeats, n):
    d = 128
    src = b2_loader.GenSource(n, d)
    xa, ya = src.read_range(0, n)
    X, Y = torch.from_numpy(xa), torch.from_numpy(ya)
    ds = DistDataset(src, "b4ds", comm=COMM)
    res = []
    try:
        for bsz in batches:
            sampler = DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
            n_local = len(sampler)
            loader = ThreadDataLoader(ds, batch_size=bsz, sampler=sampler, num_workers=1)

            def store_epoch(e):
                sampler.set_epoch(e)
                m = 0
                for x, y in loader:
                    m += y.shape[0]
                return m

            def ceil_epoch(e):
                return ceiling_epoch(X, Y, n_local, e, bsz, RANK, SIZE)

            times, cpus = C.timed_epochs({"ceiling": ceil_epoch, "store": store_epoch}, repeats,
                                         {"ceiling": n_local, "store": n_local})
            loader.close()
            med = {k: float(np.median(v)) for k, v in times.items()}
            rate = C.gather_stat(COMM, n_local / med["store"])
            ratio = C.gather_stat(COMM, med["ceiling"] / med["store"])
            ratio_cpu = C.gather_stat(COMM, float(np.median(cpus["ceiling"])) / float(np.median(cpus["store"])))
            res.append({"bench": "B4", "part": "loader", "ranks": SIZE, "batch": bsz, "dim": d,
                        "samples": n, "ratio": ratio["median"], "ratio_min": ratio["min"],
                        "ratio_cpu": ratio_cpu["median"],
                        "samples_per_s_per_rank": rate["median"],
                        "samples_per_s_total": sum(rate["per_rank"]),
                        "ceiling_per_s_per_rank": C.gather_stat(COMM, n_local / med["ceiling"])["median"],
                        "repeats": repeats})
            C.log(f"B4 loader    ranks={SIZE} B={bsz:5d}: ratio {ratio['median']:.3f}  "
                  f"{rate['median'] / 1e6:.2f} M samples/s/rank  total {sum(rate['per_rank']) / 1e6:.2f}")
    finally:
        ds.free()
    return res


def main():
    args, machine = C.start(__doc__, extra, torch_threads=max(1, C.cores() // SIZE))
    repeats, target_s = (2, 0.02) if args.quick else (5, 0.04)
    rows_per_rank = (1 << 15) // SIZE if args.quick else (1 << 17) // SIZE   # 64 MiB in total (full)
    n = (1 << 15) if args.quick else (1 << 17)
    results = bench_get_batch(args.batches, repeats, target_s, rows_per_rank)
    results += bench_loader(args.batches, repeats, n)
    C.write_result(args.out, f"B4_n{SIZE}", machine, results)


if __name__ == "__main__":
    main()
