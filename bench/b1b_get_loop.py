"""B1b: the original DDStore's read loop, one sample per get() between epoch_begin()/epoch_end().

Code written for the original ORNL DDStore (HydraGNN's DistDataset) reads a batch as 256 calls
of ``PyDDStore.get(name, arr, row)`` of one row each, inside ``epoch_begin()``/``epoch_end()``.
Run under mpiexec (the issue's setting is 4 ranks). Each rank draws seeded uniformly random
global rows (1 - 1/ranks of them on other ranks); per batch of K=256 rows the script times,
interleaved repeat by repeat:

* ``get_loop``: epoch_begin(), K x get() of one row, epoch_end() (the original's loop);
* ``get_loop_noepoch``: the same K get() calls without the epoch pair (the per-call cost);
* ``py_loop``: K x ``one[:] = full[row]`` from a private array of the whole dataset (what a
  Python loop of K single-row copies costs with no store at all: the floor of this loop shape);
* ``np.take``: one ``np.take(full, rows, axis=0, out=buf)`` of the same K rows (the local gather);
* ``get_batch``: one ``PyDDStore.get_batch`` of the same K rows (the store's batch path).

Reported: samples/s aggregated over ranks (sum of K / median time per batch) and ratios to
the baselines above. The original DDStore cannot be installed here; its rate on this loop
(issue 15: 389k samples/s at 64 B and 305k at 4 KiB, 4 ranks, same machine type) is recorded
as a constant for comparison, with the target 2x that rate. Rows are checked bit-exact first.
"""

import _common as C
from _common import COMM, RANK, SIZE, np

from pyddstore import PyDDStore

# Issue 15's figures for the original DDStore on this loop (4 ranks, samples/s aggregate).
ORIGINAL = {64: 389e3, 4096: 305e3}


def extra(p):
    p.add_argument("--k", type=int, default=256, help="get() calls per batch (default 256)")
    p.add_argument("--row-bytes", type=int, nargs="+", default=[64, 4096])


def make_shard(rank, rows, row_bytes):
    """Rank `rank`'s rows: deterministic, so every rank can rebuild the whole dataset."""
    return np.random.default_rng(2000 + rank).integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)


def bench_one(store, rb, rows_per_rank, k, repeats, target_s):
    full = np.concatenate([make_shard(r, rows_per_rank, rb) for r in range(SIZE)])
    name = f"b1b/{rb}"
    store.add(name, make_shard(RANK, rows_per_rank, rb))
    store.sync()
    rng = np.random.default_rng(11 + RANK)
    n_sets = 64
    # Python ints, as a sampler hands them out one by one.
    idx_sets = [rng.integers(0, full.shape[0], size=k, dtype=np.int64) for _ in range(n_sets)]
    lists = [[int(i) for i in a] for a in idx_sets]
    one = np.empty((1, rb), np.uint8)
    buf = np.empty((k, rb), np.uint8)
    got = np.empty((k, rb), np.uint8)

    ok = True
    for rows in lists[:4]:
        for j, i in enumerate(rows):
            store.get(name, one, i)
            got[j] = one[0]
        ok &= bool(np.array_equal(got, full[rows]))
    C.require_everywhere(ok, f"B1b {rb} B: get() returned wrong rows")
    nxt = C.cycler(n_sets)

    get = store.get

    def get_loop():
        rows = lists[nxt()]
        store.epoch_begin()
        for i in rows:
            get(name, one, i)
        store.epoch_end()

    def get_loop_noepoch():
        for i in lists[nxt()]:
            get(name, one, i)

    def py_loop():
        for i in lists[nxt()]:
            one[0] = full[i]

    def take():
        np.take(full, idx_sets[nxt()], axis=0, out=buf)

    def batch():
        store.get_batch(name, buf, idx_sets[nxt()])

    fns = {"get_loop": get_loop, "get_loop_noepoch": get_loop_noepoch, "py_loop": py_loop,
           "np.take": take, "get_batch": batch}
    t = C.interleaved(fns, repeats, target_s, COMM)
    rate = {v: sum(COMM.allgather(k / t[v]["s"])) for v in fns}
    rate_cpu = {v: sum(COMM.allgather(k / t[v]["cpu_s"])) for v in fns}
    res = []
    for v in fns:
        r = {"bench": "B1b", "variant": v, "row_bytes": rb, "k": k, "ranks": SIZE,
             "rows_per_rank": rows_per_rank, "samples_per_s": rate[v], "samples_per_s_cpu": rate_cpu[v],
             "us_per_batch": C.gather_stat(COMM, t[v]["s"] * 1e6)["median"],
             "ratio_get_loop": rate["get_loop"] / rate[v],
             "ratio_get_loop_cpu": rate_cpu["get_loop"] / rate_cpu[v],
             "repeats": repeats, "iters": t[v]["n"]}
        if v == "get_loop" and rb in ORIGINAL and SIZE == 4:
            r["original_samples_per_s"] = ORIGINAL[rb]
            r["vs_original"] = rate[v] / ORIGINAL[rb]
            r["vs_original_cpu"] = rate_cpu[v] / ORIGINAL[rb]
        res.append(r)
        C.log(f"B1b {rb:5d} B {v:17s}: {rate[v] / 1e3:9.1f}k samples/s aggregate "
              f"({r['us_per_batch']:8.1f} us per {k}); get_loop / this {r['ratio_get_loop']:.3f}"
              + (f"; vs original {r['vs_original']:.2f}x" if "vs_original" in r else ""))
    return res


def main():
    args, machine = C.start(__doc__, extra)
    repeats, target_s = (3, 0.05) if args.quick else (7, 0.2)
    store = PyDDStore(COMM)
    results, notes = [], []
    try:
        for rb in args.row_bytes:
            rows_per_rank = max(256, (4 << 20) // rb) if rb < 4096 else max(256, (16 << 20) // rb)
            if args.quick:
                rows_per_rank = max(256, rows_per_rank // 4)
            results += bench_one(store, rb, rows_per_rank, args.k, repeats, target_s)
    finally:
        store.free()
    C.write_result(args.out, "B1b", machine, results, notes)


if __name__ == "__main__":
    main()
