"""Fabric: get_batch of 256 random 4 KiB rows through libfabric (method 1, shm and tcp) next to MPI RMA (method 0).

Run under mpiexec (the issue's setting is 4 ranks) with FI_TCP_IFACE=lo. Every store is made
with DDSTORE_NODE_LOCAL=0, so rows of other ranks travel through the transport under test
(with node-local shortcuts every method would be a memcpy on one machine). Each rank reads K
uniformly random global rows per call; the loops of all configurations are interleaved repeat
by repeat and the median time per call is reported, with its ratio to method 0 (RMA) measured
in the same run (ratio > 1: faster than method 0).

Second part (--threads N, default 4): the batch rate of N threads of each rank reading at
once, with the library's two designs for concurrent reads (DDSTORE_FABRIC_SERIALIZE=1: one
read call at a time; =0: threads share the endpoint and post concurrently), per provider,
as a ratio to one thread.
"""

import os
import tempfile
import threading

import _common as C
from _common import COMM, RANK, SIZE, np


CONFIGS = {
    # label: (method, fabric)
    "m0_rma": (0, None),
    "m1_shm": (1, "shm"),
    "m1_tcp": (1, "tcp"),
    "m2_shm": (2, "shm"),
    "m2_tcp": (2, "tcp"),
}


def extra(p):
    p.add_argument("--k", type=int, default=256, help="rows per get_batch (default 256)")
    p.add_argument("--row-bytes", type=int, default=4096)
    p.add_argument("--rows-per-rank", type=int, default=4096)
    p.add_argument("--configs", nargs="+", default=["m0_rma", "m1_shm", "m1_tcp"])
    p.add_argument("--threads", type=int, default=4, help="threads per rank in part 2 (0: skip)")


def open_store(method, fabric, hs_root, label, serialize=None):
    """A store with DDSTORE_NODE_LOCAL=0 (and DDSTORE_FABRIC_SERIALIZE when given)."""
    env = {"DDSTORE_NODE_LOCAL": "0"}
    if serialize is not None:
        env["DDSTORE_FABRIC_SERIALIZE"] = "1" if serialize else "0"
    return C.open_store(method, env, fabric, os.path.join(hs_root, label))


def shard(rank, rows, rb):
    return np.random.default_rng(500 + rank).integers(0, 256, size=(rows, rb), dtype=np.uint8)


def part1(args, hs_root, repeats, target_s, notes):
    rows, rb, k = args.rows_per_rank, args.row_bytes, args.k
    full = np.concatenate([shard(r, rows, rb) for r in range(SIZE)])
    rng = np.random.default_rng(11 + RANK)
    idx_sets = [rng.integers(0, full.shape[0], size=k, dtype=np.int64) for _ in range(32)]
    stores, fns = {}, {}
    for label in args.configs:
        method, fabric = CONFIGS[label]
        s, why = open_store(method, fabric, hs_root, label)
        if s is None:
            notes.append(f"{label}: skipped ({why.splitlines()[0][:300]})")
            C.log(notes[-1])
            continue
        s.add("x", shard(RANK, rows, rb))
        out = np.empty((k, rb), np.uint8)
        for idx in idx_sets[:4]:  # bit-exact before timing
            s.get_batch("x", out, idx)
            if not np.array_equal(out, full[idx]):
                raise SystemExit(f"{label}: get_batch returned wrong rows")
        stores[label] = s
        state = {"i": 0}

        def fn(s=s, out=out, state=state):
            i = state["i"]
            state["i"] = (i + 1) % len(idx_sets)
            s.get_batch("x", out, idx_sets[i])

        fns[label] = fn
    t = C.interleaved(fns, repeats, target_s, COMM)
    res = []
    base = t.get("m0_rma")
    for label, v in t.items():
        us = C.gather_stat(COMM, v["s"] * 1e6)
        ratio = C.gather_stat(COMM, base["s"] / v["s"]) if base else None
        res.append({"part": "get_batch", "config": label, "k": k, "row_bytes": rb, "ranks": SIZE,
                    "median_us": us["median"], "per_rank_us": us["per_rank"],
                    "ratio_vs_m0_rma": ratio["median"] if ratio else None, "repeats": repeats,
                    "calls_per_loop": v["n"]})
        C.log(f"fabric {label:7s}: get_batch {k} x {rb} B: median {us['median']:9.1f} us"
              + (f"  ratio vs m0_rma {ratio['median']:.3f}" if ratio else ""))
    for s in stores.values():
        s.free()
    return res


def part2(args, hs_root, notes):
    nth, rows, rb, k = args.threads, args.rows_per_rank, args.row_bytes, args.k
    res = []
    for fabric in ("shm", "tcp"):
        rates = {}
        for serialize in (True, False):
            s, why = open_store(1, fabric, hs_root, f"t_{fabric}", serialize)
            if s is None:
                notes.append(f"threads {fabric}: skipped ({why.splitlines()[0][:300]})")
                break
            s.add("x", shard(RANK, rows, rb))
            total = rows * SIZE
            calls = 40 if fabric == "tcp" else 200

            def worker(seed, n):
                g = np.random.default_rng(seed)
                out = np.empty((k, rb), np.uint8)
                for _ in range(n):
                    s.get_batch("x", out, g.integers(0, total, size=k))

            for threads in (1, nth):
                per = max(1, calls // threads)
                COMM.Barrier()
                t0 = C.now()
                ts = [threading.Thread(target=worker, args=(RANK * 100 + i, per)) for i in range(threads)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                dt = COMM.allreduce(C.now() - t0, op=C.MPI.MAX)
                rates[(serialize, threads)] = per * threads / dt
            s.free()
        if len(rates) == 4:
            for serialize in (True, False):
                one, many = rates[(serialize, 1)], rates[(serialize, nth)]
                res.append({"part": "threads", "fabric": fabric, "serialized": serialize, "threads": nth,
                            "batches_per_s_1": one, "batches_per_s_n": many, "ratio_n_vs_1": many / one})
                C.log(f"fabric threads {fabric}: {'serialized' if serialize else 'shared ep '}: "
                      f"1 thread {one:7.1f}/s, {nth} threads {many:7.1f}/s (x{many / one:.2f})")
    return res


def main():
    args, machine = C.start(__doc__, extra)
    repeats, target_s = (3, 0.05) if args.quick else (7, 0.2)
    if args.quick:
        args.rows_per_rank = min(args.rows_per_rank, 1024)
    hs_root = COMM.bcast(tempfile.mkdtemp(prefix="ddstore-bf-") if RANK == 0 else None)
    notes = []
    results = part1(args, hs_root, repeats, target_s, notes)
    if args.threads > 1:
        results += part2(args, hs_root, notes)
    C.write_result(args.out, "fabric", machine, results, notes)


if __name__ == "__main__":
    main()
