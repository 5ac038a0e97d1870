"""B1: PyDDStore.get_batch of K random rows vs np.take from one local array of the whole dataset.

Run under mpiexec (the issue's setting is 4 ranks). For each method that this build and
machine offer (0 with node-local shared memory, 0 with DDSTORE_NODE_LOCAL=0 i.e. MPI RMA,
1 and 2 with the libfabric providers shm and tcp) and each row size, every rank reads K
uniformly random global rows (so 1 - 1/ranks of them live on other ranks) and compares with
``np.take(full, idx, axis=0, out=buf)`` of the same rows from a private array holding the
whole dataset (the ceiling), interleaved repeat by repeat. Besides the public method, the
same rows are read by calling the C function dds_get_batch directly through ctypes with
precomputed arguments ("c_direct"), which separates the binding's per-call Python cost from
the library's. Methods that raise DDStoreNotSupportedError are skipped and recorded so.
Ratio = np.take time / store time (1.0 = as fast as the local gather).
"""

import os
import tempfile

import _common as C
from _common import COMM, RANK, SIZE, np

import pyddstore


def extra(p):
    p.add_argument("--k", type=int, default=256, help="rows per get_batch (default 256)")
    p.add_argument("--row-bytes", type=int, nargs="+", default=[64, 4096])
    p.add_argument("--methods", nargs="+",
                   default=["m0_shm", "m0_rma", "m1_shm", "m1_tcp", "m2_shm", "m2_tcp"])


METHODS = {
    # name: (method, fabric, DDSTORE_NODE_LOCAL)
    "m0_shm": (0, None, "1"),
    "m0_rma": (0, None, "0"),
    "m1_shm": (1, "shm", "1"),
    "m1_tcp": (1, "tcp", "1"),
    "m2_shm": (2, "shm", "1"),
    "m2_tcp": (2, "tcp", "1"),
}


def make_shard(rank, rows, row_bytes):
    """Rank `rank`'s rows: deterministic, so every rank can rebuild the whole dataset."""
    return np.random.default_rng(1000 + rank).integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)


def bench_one(store, label, rb, rows_per_rank, k, repeats, target_s):
    full = np.concatenate([make_shard(r, rows_per_rank, rb) for r in range(SIZE)])
    name = f"b1/{label}/{rb}"
    store.add(name, make_shard(RANK, rows_per_rank, rb))
    store.sync()
    rng = np.random.default_rng(7 + RANK)
    n_sets = 64
    idx_sets = [rng.integers(0, full.shape[0], size=k, dtype=np.int64) for _ in range(n_sets)]
    out_np = np.empty((k, rb), np.uint8)
    out_st = np.empty((k, rb), np.uint8)

    # Bit-exact check before timing: every rank, every index set.
    ok = True
    for idx in idx_sets[:8]:
        np.take(full, idx, axis=0, out=out_np)
        store.get_batch(name, out_st, idx)
        ok &= bool(np.array_equal(out_np, out_st))
    C.require_everywhere(ok, f"B1 {label} {rb} B: get_batch returned wrong rows")
    nxt = C.cycler(n_sets)

    def base():
        np.take(full, idx_sets[nxt()], axis=0, out=out_np)

    def via_py():
        store.get_batch(name, out_st, idx_sets[nxt()])

    # The same call with every argument converted beforehand: the library's own cost
    # plus one ctypes call. (Private attributes of the binding: a measuring probe only.)
    lib = pyddstore._store._c
    ptr = store._h.ptr
    bname = store._vars[name].bname
    out_addr = out_st.ctypes.data
    addrs = [i.ctypes.data for i in idx_sets]

    def via_c():
        rc = lib.dds_get_batch(ptr, bname, out_addr, addrs[nxt()], k)
        if rc:
            raise RuntimeError(pyddstore._lib.last_error(rc))

    def base_clip():
        np.take(full, idx_sets[nxt()], axis=0, out=out_np, mode="clip")

    # Collective variants (method 0) need the same call count on every rank: all loops run
    # over COMM with a barrier before each, which also makes oversubscribed ranks contend
    # alike in baseline and store loops.
    t = C.interleaved({"np.take": base, "np.take_clip": base_clip, "py": via_py,
                       "c_direct": via_c}, repeats, target_s, COMM)
    med = {k: C.gather_stat(COMM, v["s"] * 1e6) for k, v in t.items()}
    res = []
    for variant in ("py", "c_direct"):
        for bname_ in ("np.take", "np.take_clip"):
            ratios = [b / s_ for b, s_ in zip(t[bname_]["all"], t[variant]["all"])]
            stat = C.gather_stat(COMM, t[bname_]["s"] / t[variant]["s"])
            cpu = C.gather_stat(COMM, t[bname_]["cpu_s"] / t[variant]["cpu_s"])
            res.append({
                "bench": "B1", "method": label, "variant": variant, "baseline": bname_,
                "row_bytes": rb, "k": k, "ranks": SIZE, "rows_per_rank": rows_per_rank,
                "node_local": store.node_local,
                "ratio": stat["median"], "ratio_min": stat["min"], "ratio_max": stat["max"],
                "ratio_per_rank": stat["per_rank"], "ratio_per_repeat_rank0": ratios,
                "ratio_cpu": cpu["median"], "ratio_cpu_min": cpu["min"], "ratio_cpu_max": cpu["max"],
                "store_cpu_us": C.gather_stat(COMM, t[variant]["cpu_s"] * 1e6)["median"],
                "baseline_cpu_us": C.gather_stat(COMM, t[bname_]["cpu_s"] * 1e6)["median"],
                "baseline_us": med[bname_]["median"], "store_us": med[variant]["median"],
                "repeats": repeats, "iters_baseline": t[bname_]["n"], "iters_store": t[variant]["n"],
            })
            C.log(f"B1 {label:7s} {variant:8s} {rb:5d} B: store {res[-1]['store_us']:8.2f} us  "
                  f"{bname_:12s} {res[-1]['baseline_us']:7.2f} us  ratio {res[-1]['ratio']:.3f} "
                  f"(ranks {stat['min']:.3f}..{stat['max']:.3f}); CPU-time ratio {cpu['median']:.3f}")
    return res


def main():
    args, machine = C.start(__doc__, extra)
    repeats, target_s = (3, 0.02) if args.quick else (7, 0.05)
    scale = 4 if args.quick else 1
    hs_root = COMM.bcast(tempfile.mkdtemp(prefix="ddstore-b1-") if RANK == 0 else None)
    results, notes = [], []
    for label in args.methods:
        method, fabric, node_local = METHODS[label]
        store, why = C.open_store(method, {"DDSTORE_NODE_LOCAL": node_local}, fabric, os.path.join(hs_root, label))
        if store is None:
            notes.append(f"B1 {label}: skipped ({why.splitlines()[0][:300]})")
            C.log(notes[-1])
            continue
        try:
            for rb in args.row_bytes:
                rows_per_rank = max(256, (4 << 20) // rb // scale) if rb < 4096 else max(256, (16 << 20) // rb // scale)
                results += bench_one(store, label, rb, rows_per_rank, args.k, repeats, target_s)
        finally:
            store.free()
    C.write_result(args.out, "B1", machine, results, notes)


if __name__ == "__main__":
    main()
