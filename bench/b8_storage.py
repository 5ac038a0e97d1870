"""B8: file-backed stores (storage_dir=, issue 28) beside the in-memory store and a pread loop.

Each part is one MPI job; bench/run.sh runs them in order, into one directory on a disk
(--storage-dir; not tmpfs, whose pages would count as memory):

* cache (2 ranks): the working set in the page cache. get_batch of 256 random 4 KiB rows
  (B1's setting) and a ThreadDataLoader epoch over 520-byte samples (B2's D=128), each from
  an in-memory store and from a file-backed one holding the same rows, interleaved repeat by
  repeat. Ratio = in-memory time / file-backed time (target >= 0.9).
* big (2 ranks, under ci/memcap.py's cgroup memory cap, --cap): a store of 4 KiB rows >= 4x
  the cap is loaded (init + update in chunks) and saved, its files dropped from the page cache,
  reopened, and read in one epoch in random order (every row checked bit-exact); then random
  get_batch of 4 KiB rows against a pread loop over the same file at the same queue depth (one
  read in flight per rank: a fault of the mapping, or one pread), on fresh random rows for
  each (never read since the cache was dropped), interleaved (target >= 0.7); peak RSS per rank.
* build (2 ranks): a DistDataset of 4 KiB samples (4 GiB; --quick 256 MiB) built with
  storage_dir= from its source, a raw file read in chunks through read_range (left in the page
  cache: the build's best case); the time to build and save.
* reopen (1 rank: another rank count): DistDataset.open of that directory, timed; then every
  sample compared with the source, not timed. Ratio = build time / reopen time (target >= 20).
"""

import os
import shutil
import sys
import tempfile

if "big" not in sys.argv:  # torch (imported before mpi4py: _common's rule) except under the cap
    os.environ["PYDDSTORE_BENCH_TORCH"] = "1"

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

from pyddstore import PyDDStore  # noqa: E402

ROW = 4096
K = 256  # rows per get_batch (B1)


def extra(p):
    p.add_argument("--part", required=True, choices=["cache", "big", "build", "reopen"])
    p.add_argument("--storage-dir", required=True, help="directory on a disk for the stores")
    p.add_argument("--cap", type=int, default=0, help="big: the job's memory cap in bytes (ci/memcap.py)")


def row_values(rows):
    """4 KiB rows `rows` (uint8, (len, 4096)): a function of the global row index."""
    rows = np.asarray(rows, dtype=np.uint32)
    w = rows[:, None] * np.uint32(2654435761) + np.arange(ROW // 4, dtype=np.uint32)[None, :]
    return w.view(np.uint8)


def fresh_dir(base, name):
    d = COMM.bcast(tempfile.mkdtemp(prefix=f"b8-{name}-", dir=base) if RANK == 0 else None)
    return os.path.join(d, "store")


def drop_from_cache(d):
    """Write d's files to disk and drop them from the page cache (pages mapped by a live
    process stay: call with no store open on them)."""
    COMM.Barrier()
    if RANK == 0:
        for name in os.listdir(d):
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    COMM.Barrier()


# ---- cache ---------------------------------------------------------------------------------

def part_cache(args, repeats, target_s):
    res = []
    rows_per_rank = (16 << 20) // ROW // (4 if args.quick else 1)
    first = rows_per_rank * RANK
    mine = row_values(np.arange(first, first + rows_per_rank))
    mem = PyDDStore(COMM)
    files = PyDDStore(COMM, storage_dir=fresh_dir(args.storage_dir, "cache"))
    try:
        for s in (mem, files):
            s.add("x", mine)
            s.sync()
        g = rows_per_rank * SIZE
        out = {"memory": np.empty((K, ROW), np.uint8), "files": np.empty((K, ROW), np.uint8)}
        everything = np.empty((g, ROW), np.uint8)
        files.get("x", everything, 0)  # the working set into the page cache, and mapped
        ok = np.array_equal(everything, row_values(np.arange(g)))
        del everything
        rng = np.random.default_rng(8 + RANK)
        sets = [rng.integers(0, g, K, dtype=np.int64) for _ in range(64)]
        for idx in sets[:8]:
            mem.get_batch("x", out["memory"], idx)
            files.get_batch("x", out["files"], idx)
            ok &= np.array_equal(out["memory"], out["files"])
        if not COMM.allreduce(bool(ok), op=C.MPI.LAND):
            raise SystemExit("B8 cache: the file-backed store returned wrong rows")
        it = {"memory": 0, "files": 0}

        def reader(label, store):
            def f():
                i = it[label]
                it[label] = (i + 1) % len(sets)
                store.get_batch("x", out[label], sets[i])
            return f

        # Two close figures on a shared machine: at least 5 repeats of 50 ms even when quick.
        t = C.interleaved({"memory": reader("memory", mem), "files": reader("files", files)},
                          max(repeats, 5), max(target_s, 0.05), COMM)
        ratio = C.gather_stat(COMM, t["memory"]["s"] / t["files"]["s"])
        cpu = C.gather_stat(COMM, t["memory"]["cpu_s"] / t["files"]["cpu_s"])
        res.append({"bench": "B8", "part": "cache", "what": "get_batch", "row_bytes": ROW, "k": K,
                    "ranks": SIZE, "rows_per_rank": rows_per_rank,
                    "memory_us": C.gather_stat(COMM, t["memory"]["s"] * 1e6)["median"],
                    "files_us": C.gather_stat(COMM, t["files"]["s"] * 1e6)["median"],
                    "ratio": ratio["median"], "ratio_min": ratio["min"], "ratio_max": ratio["max"],
                    "ratio_cpu": cpu["median"], "repeats": repeats,
                    "resident_bytes": files.info()["resident_bytes"],
                    "shard_bytes": files.info()["shard_bytes"]})
        C.log(f"B8 cache get_batch {K} x 4 KiB: memory {res[-1]['memory_us']:.1f} us, files "
              f"{res[-1]['files_us']:.1f} us: ratio {ratio['median']:.3f} (CPU {cpu['median']:.3f})")
    finally:
        mem.free()
        files.free()
    res.append(_cache_loader(args, repeats))
    return res


def _cache_loader(args, repeats):
    import torch
    from torch.utils.data import DistributedSampler

    from b2_loader import BATCH, GenSource, epoch_loader
    from pyddstore.torch import DistDataset, ThreadDataLoader

    torch.set_num_threads(max(1, C.cores() // SIZE))
    d = 128  # 520-byte samples (B2)
    n = (1 << 17) // (4 if args.quick else 1)
    sets = {}
    for label, kw in (("memory", {}), ("files", {"storage_dir": fresh_dir(args.storage_dir, "loader")})):
        ds = DistDataset(GenSource(n, d), f"b8_{label}", comm=COMM, **kw)
        sampler = DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
        sets[label] = (ds, sampler, ThreadDataLoader(ds, batch_size=BATCH, sampler=sampler))
    try:
        n_local = len(sets["memory"][1])
        ok = True
        xs = {}
        for label, (ds, sampler, loader) in sets.items():  # the same samples from both
            sampler.set_epoch(99)
            xs[label] = [(x.clone(), y.clone()) for x, y in loader]
        ok = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(xs["memory"], xs["files"]))
        if not COMM.allreduce(bool(ok), op=C.MPI.LAND):
            raise SystemExit("B8 cache: the file-backed DistDataset gave other samples")
        del xs
        times = {k: [] for k in sets}
        cpus = {k: [] for k in sets}
        for r in range(repeats):
            for label, (ds, sampler, loader) in sets.items():
                COMM.Barrier()
                c0, t0 = C.cpu_now(), C.now()
                got = epoch_loader(loader, sampler, r + 1)
                times[label].append(C.now() - t0)
                cpus[label].append(C.cpu_now() - c0)
                assert got == n_local
        med = {k: float(np.median(v)) for k, v in times.items()}
        medc = {k: float(np.median(v)) for k, v in cpus.items()}
        ratio = C.gather_stat(COMM, med["memory"] / med["files"])
        cpu = C.gather_stat(COMM, medc["memory"] / medc["files"])
        r = {"bench": "B8", "part": "cache", "what": "loader", "sample_bytes": d * 4 + 8, "ranks": SIZE,
             "samples": n, "batch": BATCH,
             "memory_samples_per_s": C.gather_stat(COMM, n_local / med["memory"])["median"],
             "files_samples_per_s": C.gather_stat(COMM, n_local / med["files"])["median"],
             "ratio": ratio["median"], "ratio_min": ratio["min"], "ratio_max": ratio["max"],
             "ratio_cpu": cpu["median"], "repeats": repeats, "epoch_s_all": times}
        C.log(f"B8 cache loader 520 B: memory {r['memory_samples_per_s'] / 1e6:.3f} M/s, files "
              f"{r['files_samples_per_s'] / 1e6:.3f} M/s per rank: ratio {ratio['median']:.3f} "
              f"(CPU {cpu['median']:.3f})")
        return r
    finally:
        for ds, _, loader in sets.values():
            loader.close()
            ds.free()


# ---- big -----------------------------------------------------------------------------------

def part_big(args, repeats):
    cap = args.cap
    total = (512 << 20) if args.quick else (2 << 30)
    if cap and total < 4 * cap:
        total = 4 * cap
    g = total // ROW
    d = fresh_dir(args.storage_dir, "big")
    start_rss = C.rss_bytes()
    # Load: init + update a chunk at a time, then save (the rows on disk, checksummed).
    t0 = C.now()
    s = PyDDStore(COMM, storage_dir=d)
    lo, hi = g * RANK // SIZE, g * (RANK + 1) // SIZE
    s.init("x", hi - lo, ROW)
    chunk = (8 << 20) // ROW
    for a in range(lo, hi, chunk):
        b = min(a + chunk, hi)
        s.update("x", row_values(np.arange(a, b)), a - lo)
    s.sync()
    s.save()
    s.free()
    load_s = COMM.allreduce(C.now() - t0, op=C.MPI.MAX)
    drop_from_cache(d)

    # One epoch in random order over every row, checked.
    s = PyDDStore.open(d, COMM)
    t0 = C.now()
    order = np.random.default_rng(5).permutation(g)  # the same on every rank: each reads its part
    mine = np.array_split(order, SIZE)[RANK]
    out = np.empty((K, ROW), np.uint8)
    nb = COMM.allreduce(-(-len(mine) // K), op=C.MPI.MAX)
    ok = True
    for j in range(nb):
        idx = np.ascontiguousarray(mine[j * K:(j + 1) * K], dtype=np.int64)
        s.get_batch("x", out, idx)
        ok &= np.array_equal(out[:len(idx)], row_values(idx))
    epoch_s = COMM.allreduce(C.now() - t0, op=C.MPI.MAX)
    if not COMM.allreduce(bool(ok), op=C.MPI.LAND):
        raise SystemExit("B8 big: wrong rows in the epoch")
    s.free()
    drop_from_cache(d)

    # Random 4 KiB reads on cold rows: get_batch vs pread, interleaved, fresh rows each time.
    s = PyDDStore.open(d, COMM)
    path = os.path.join(d, "v0.dds")
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # as the store's mapping (MADV_RANDOM)
    data_off = 4096  # v<i>.dds: a header page, then the rows in global order
    buf = np.empty(ROW, np.uint8)
    os.preadv(fd, [buf], data_off + 7 * ROW)
    if not np.array_equal(buf, row_values([7])[0]):
        raise SystemExit(f"B8 big: {path} does not hold row 7 at byte {data_off + 7 * ROW}")
    per = (2048 if args.quick else 8192)  # rows per rank per measurement
    fresh = np.random.default_rng(6).permutation(g)  # disjoint slices: every row read once at most
    need = 2 * repeats * per * SIZE
    if need > g:
        raise SystemExit(f"B8 big: {need} fresh rows needed, the store has {g}")
    times = {"get_batch": [], "pread": []}
    m = 0
    for _ in range(repeats):
        for label in times:  # measurement m: its own slice of fresh rows on each rank
            rows = np.ascontiguousarray(fresh[(m * SIZE + RANK) * per:(m * SIZE + RANK + 1) * per],
                                        dtype=np.int64)
            m += 1
            COMM.Barrier()
            t0 = C.now()
            if label == "get_batch":
                for j in range(0, per, K):
                    s.get_batch("x", out, rows[j:j + K])
            else:
                for r in rows.tolist():
                    os.preadv(fd, [buf], data_off + r * ROW)
            times[label].append(C.now() - t0)
    os.close(fd)
    s.free()
    COMM.Barrier()
    if RANK == 0:
        shutil.rmtree(os.path.dirname(d))  # its disk space, before the next parts
    rate = {k: per / float(np.median(v)) for k, v in times.items()}
    ratio = C.gather_stat(COMM, rate["get_batch"] / rate["pread"])
    peak = C.gather_stat(COMM, C.peak_rss_bytes())
    r = {"bench": "B8", "part": "big", "ranks": SIZE, "row_bytes": ROW, "dataset_bytes": g * ROW,
         "cap_bytes": cap, "dataset_over_cap": (g * ROW / cap) if cap else None,
         "load_s": load_s, "epoch_s": epoch_s, "epoch_rows_per_s": g / epoch_s, "epoch_bit_exact": True,
         "get_batch_rows_per_s": C.gather_stat(COMM, rate["get_batch"])["median"],
         "pread_rows_per_s": C.gather_stat(COMM, rate["pread"])["median"],
         "ratio": ratio["median"], "ratio_min": ratio["min"], "ratio_max": ratio["max"],
         "queue_depth_per_rank": 1, "rows_per_measurement": per, "repeats": repeats,
         "times": times, "peak_rss_per_rank": peak["per_rank"], "peak_rss_max": peak["max"],
         "rss_at_start_per_rank": C.gather_stat(COMM, start_rss)["per_rank"]}
    C.log(f"B8 big: {g * ROW >> 20} MiB under a {cap >> 20} MiB cap: load {load_s:.1f} s, epoch {epoch_s:.1f} s "
          f"({g / epoch_s:.0f} rows/s); random 4 KiB: get_batch {r['get_batch_rows_per_s']:.0f}/s, pread "
          f"{r['pread_rows_per_s']:.0f}/s per rank: ratio {ratio['median']:.3f}; peak RSS "
          f"{peak['max'] >> 20} MiB")
    return [r]


# ---- build / reopen --------------------------------------------------------------------------

class RawSource:
    """Samples of a raw file of 4 KiB rows (uint8 arrays), read_range() for the bulk path."""

    def __init__(self, path):
        self.m = np.memmap(path, dtype=np.uint8, mode="r").reshape(-1, ROW)

    def __len__(self):
        return self.m.shape[0]

    def read_range(self, a, b):
        return np.array(self.m[a:b])

    def __getitem__(self, i):
        return np.array(self.m[i])


def _paths(args):
    base = os.path.join(args.storage_dir, "b8-reopen")
    return os.path.join(base, "source.raw"), os.path.join(base, "store")


def part_build(args):
    from pyddstore.torch import DistDataset
    total = (256 << 20) if args.quick else (4 << 30)
    src_path, d = _paths(args)
    if RANK == 0:
        os.makedirs(os.path.dirname(src_path), exist_ok=True)
        with open(src_path, "wb") as f:
            step = (16 << 20) // ROW
            for a in range(0, total // ROW, step):
                f.write(row_values(np.arange(a, a + step)).tobytes())
    COMM.Barrier()
    src = RawSource(src_path)
    COMM.Barrier()
    t0 = C.now()
    ds = DistDataset(src, "b8", comm=COMM, storage_dir=d)
    COMM.Barrier()
    build_s = C.now() - t0
    ds.free()
    C.log(f"B8 build: {total >> 20} MiB DistDataset with storage_dir= on {SIZE} ranks in {build_s:.2f} s")
    return [{"bench": "B8", "part": "build", "ranks": SIZE, "dataset_bytes": total, "build_s": build_s,
             "gb_per_s": total / build_s / 1e9}]


def part_reopen(args):
    from pyddstore.torch import DistDataset
    src_path, d = _paths(args)
    COMM.Barrier()
    t0 = C.now()
    ds = DistDataset.open(d, "b8", comm=COMM)
    COMM.Barrier()
    reopen_s = C.now() - t0
    try:
        src = RawSource(src_path)
        store = ds.ddstore
        var = next(n for n in store.names() if not n.endswith("__structure__"))
        g = len(ds)
        lo, hi = g * RANK // SIZE, g * (RANK + 1) // SIZE
        step = (16 << 20) // ROW
        buf = np.empty((step, ROW), np.uint8)
        ok = g == len(src)
        for a in range(lo, hi, step):
            b = min(a + step, hi)
            store.get(var, buf[:b - a], a)
            ok &= np.array_equal(buf[:b - a], src.m[a:b])
        ok &= all(np.array_equal(np.asarray(ds[i]), src[i]) for i in (0, g // 2, g - 1))
        exact = COMM.allreduce(bool(ok), op=C.MPI.LAND)
    finally:
        ds.free()
    if not exact:
        raise SystemExit("B8 reopen: the reopened DistDataset differs from its source")
    C.log(f"B8 reopen: DistDataset.open on {SIZE} rank(s) in {reopen_s * 1e3:.1f} ms, bit-exact")
    return [{"bench": "B8", "part": "reopen", "ranks": SIZE, "reopen_s": reopen_s, "bit_exact": exact,
             "samples": g}]


def main():
    args, machine = C.start(__doc__, extra)
    repeats, target_s = (3, 0.02) if args.quick else (7, 0.05)
    if args.part == "cache":
        results = part_cache(args, repeats, target_s)
    elif args.part == "big":
        results = part_big(args, repeats)
    elif args.part == "build":
        results = part_build(args)
    else:
        results = part_reopen(args)
    C.write_result(args.out, f"B8 {args.part}", machine, results)


if __name__ == "__main__":
    main()
