"""B5: remote-only reads across (simulated) hosts, beside the link's own limits measured in the same run.

Run under mpiexec over several hosts (bench/b5.sh starts it on the cluster simulator of
tests/cluster, 2 hosts x 2 ranks, after measuring the link with iperf3 between the same
network namespaces; --link FILE passes those figures in). Parts:

* get_batch: every rank reads K=256 uniformly random rows held only by ranks on OTHER hosts
  (on a single host: by other ranks, with DDSTORE_NODE_LOCAL=0 so that they travel through
  the transport), for each row size and each configuration (method 0 = MPI RMA, methods 1
  and 2 over libfabric tcp), interleaved repeat by repeat. Reported as the aggregate of all
  ranks (bytes read per second, summed over ranks) and as a ratio to iperf3's one-stream rate.
* transport ceilings, timed in the same interleaved loops: one contiguous 4 MiB read of a
  remote shard per call through MPI_Get (mpi4py, passive target), through method 1's
  fi_read (PyDDStore.get of 64 contiguous 64 KiB rows: one transfer) and through method 0.
* --loader: DistDataset + ThreadDataLoader over a global shuffle (DistributedSampler, batch
  256) of 520-byte samples (float32[128] + int64 label), samples/s per rank over one epoch of
  the rank's share, per method. bench/b5.sh runs it across the hosts and on one host (same
  rank count) to give the across-hosts / single-host ratio, and with --per-rank over 1..4
  hosts x 2 ranks (weak scaling: samples per CPU-second per rank as the owners multiply).
* the mpi4py gather ceiling (b5_gather_ceiling.py: per batch one Alltoallv of row indices to
  the owners, np.take there, one Alltoallv of the rows back) on the same batches, timed in the
  same interleaved loops as the store ("gather_mpi4py"; --no-gather-ceiling leaves it out).
* --floor-lib PATH: the request/reply floor of methods 1/2 (bench/b5c/floor.c built as a shared
  library: one request and one reply per owner per batch over libfabric tcp;ofi_rxm, from C) on
  the same batches in the same interleaved loops ("c_floor_inproc"): one ctypes call per batch,
  as the store's get_batch is one, so that the machine's drift hits the floor and the store alike.
"""

import ctypes
import json
import os
import shutil
import socket
import sys
import time

if "--loader" in sys.argv:
    os.environ["PYDDSTORE_BENCH_TORCH"] = "1"  # _common imports torch before mpi4py

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

from b5_gather_ceiling import Gather  # noqa: E402
from pyddstore import DDStoreError  # noqa: E402

CONFIGS = {
    # label: (method, fabric)
    "m0": (0, None),
    "m1_tcp": (1, "tcp"),
    "m2_tcp": (2, "tcp"),
    # Method 1's one-sided reads (the path before the owner-side gather), the in-run
    # baseline of "no worse than before the gather" (get_batch part only).
    "m1_tcp_1s": (1, "tcp"),
    # Method 1 with readers that block at once instead of polling 50 us first: the in-run
    # measurement behind DDSTORE_FABRIC_SPIN_US's default.
    "m1_tcp_spin0": (1, "tcp"),
}
CONFIG_ENV = {"m1_tcp_1s": {"DDSTORE_GATHER": "never"}, "m1_tcp_spin0": {"DDSTORE_FABRIC_SPIN_US": "0"}}
LOADER_CONFIGS = ("m0", "m1_tcp", "m2_tcp")
CEIL_BYTES = 4 << 20


def extra(p):
    p.add_argument("--k", type=int, default=256, help="rows per get_batch (default 256)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 4096, 65536])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS))
    p.add_argument("--link", default=None, help="JSON of the link figures measured by b5.sh")
    p.add_argument("--loader", action="store_true", help="run the loader part instead")
    p.add_argument("--label", default="", help="recorded with every result (e.g. 2x2, 1x4)")
    p.add_argument("--hs-dir", default=None, help="method-2 handshake directory root (shared)")
    p.add_argument("--no-gather-ceiling", dest="gather_ceiling", action="store_false",
                   help="leave out the mpi4py gather ceiling (b5_gather_ceiling.py)")
    p.add_argument("--per-rank", type=int, default=0,
                   help="--loader: samples per rank (weak scaling; default: a fixed total)")
    p.add_argument("--floor-lib", default=None,
                   help="libb5cfloor.so (bench/b5c/floor.c): time the request/reply floor in the same loops")


def topology():
    """(hosts, my remote ranks): ranks on other hosts, or every other rank on one host."""
    hosts = COMM.allgather(socket.gethostname())
    remote = [r for r in range(SIZE) if hosts[r] != hosts[RANK]]
    if not remote:
        remote = [r for r in range(SIZE) if r != RANK]
    return hosts, remote


def make_shard(rank, rows, rb):
    return np.random.default_rng(5000 + rank).integers(0, 256, size=(rows, rb), dtype=np.uint8)


def rows_per_rank(rb, quick=False):
    """Rows each rank holds at `rb`-byte rows: about 16 MiB, 1 Ki..64 Ki rows (a quarter, at
    least 512, with --quick), as bench/b5c/common.h's rows_for."""
    rows = max(1024, min(1 << 16, (16 << 20) // rb))
    return max(512, rows // 4) if quick else rows


def remote_batches(seed, remote, rows, k, n=32):
    """n batches of k random global rows, each held by one of the ranks `remote` (`rows` rows
    each), as int64 arrays: the prepared index sets the timed loops cycle through."""
    rng = np.random.default_rng(seed)
    return [(rng.choice(remote, size=k) * rows + rng.integers(0, rows, size=k)).astype(np.int64)
            for _ in range(n)]


def mpi_get_ceiling():
    """A callable doing one passive-target MPI_Get of CEIL_BYTES contiguous bytes from a
    remote rank's window, and its cleanup."""
    _, remote = topology()
    peer = remote[RANK % len(remote)]
    mem = np.full(CEIL_BYTES, RANK % 251, np.uint8)
    win = C.MPI.Win.Create(mem, 1, comm=COMM)
    win.Lock_all()
    buf = np.empty(CEIL_BYTES, np.uint8)

    def fn():
        win.Get(buf, peer)
        win.Flush(peer)

    fn()
    ok = COMM.allreduce(bool((buf == peer % 251).all()), op=C.MPI.LAND)
    if not ok:
        raise SystemExit("B5: the MPI_Get ceiling loop read wrong bytes")

    def close():
        win.Unlock_all()
        win.Free()

    return fn, close


class Floor:
    """bench/b5c/floor.c loaded in-process (floor.h: every call but b5f_batch is collective)."""

    def __init__(self, path, k, maxrb):
        lib = ctypes.CDLL(path)
        lib.b5f_open.argtypes = (ctypes.c_int, ctypes.c_int)
        lib.b5f_shard.argtypes = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int)
        lib.b5f_batch.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
        for f in (lib.b5f_open, lib.b5f_shard, lib.b5f_batch, lib.b5f_close):
            f.restype = None
        self.lib, self.shard = lib, None
        lib.b5f_open(k, maxrb)

    def serve(self, shard):
        """Serve `shard` (rows x row bytes, C order; kept alive here until the next one)."""
        self.lib.b5f_shard(shard.ctypes.data, shard.shape[0], shard.shape[1])
        self.shard = shard

    def batch_fn(self, sets, out):
        """A callable reading the next of `sets` into `out` per call (it holds both: the C
        side keeps their addresses only)."""
        ptrs, step, op, k, fn = [s.ctypes.data for s in sets], C.cycler(len(sets)), out.ctypes.data, len(sets[0]), \
            self.lib.b5f_batch
        return lambda keep=(sets, out): fn(ptrs[step()], k, op)

    def close(self):
        self.lib.b5f_close()
        self.shard = None


def run_get(args, link, hs_root):
    hosts, remote = topology()
    single = len(set(hosts)) == 1
    node_local = "0" if single else "1"
    stores, notes = {}, []
    for label in args.configs:
        method, fabric = CONFIGS[label]
        st, why = C.open_store(method, {"DDSTORE_NODE_LOCAL": node_local, **CONFIG_ENV.get(label, {})}, fabric,
                               os.path.join(hs_root, label))
        if st is None:
            notes.append(f"B5 {label}: skipped ({why.splitlines()[0][:300]})")
            C.log(notes[-1])
        else:
            stores[label] = st
    repeats, target_s = (2, 0.05) if args.quick else (5, 0.15)
    results = []
    k = args.k
    floor = Floor(args.floor_lib, k, max(args.sizes)) if args.floor_lib else None
    try:
        # Ceilings: contiguous 4 MiB reads, all in one interleaved set.
        cfns = {}
        ceil_name = "b5/ceil"
        crows = CEIL_BYTES // 65536
        cout = np.empty((crows, 65536), np.uint8)
        peer = remote[RANK % len(remote)]
        for label, st in stores.items():
            st.add(ceil_name, make_shard(RANK, crows, 65536))
            st.sync()
        for label, st in stores.items():
            if CONFIGS[label][0] in (0, 1):
                start = peer * crows
                cfns[f"contig_{label}"] = (lambda st=st, start=start: st.get(ceil_name, cout, start))
        mpi_fn, mpi_close = mpi_get_ceiling()
        cfns["contig_mpi_get"] = mpi_fn
        t = C.interleaved(cfns, repeats, target_s, COMM)
        mpi_close()
        for v in cfns:
            agg = sum(COMM.allgather(CEIL_BYTES / t[v]["s"]))
            results.append({"bench": "B5", "part": "ceiling", "variant": v, "bytes": CEIL_BYTES,
                            "agg_bytes_per_s": agg, "label": args.label, "ranks": SIZE,
                            "hosts": len(set(hosts)),
                            "ratio_iperf3": agg / link["iperf3_bytes_per_s"] if link else None})
            C.log(f"B5 ceiling {v:16s}: {agg / 1e6:9.1f} MB/s aggregate"
                  + (f" ({results[-1]['ratio_iperf3']:.2f}x iperf3)" if link else ""))

        for rb in args.sizes:
            rows = rows_per_rank(rb, args.quick)
            name = f"b5/{rb}"
            shards = {r: None for r in remote}
            shard = make_shard(RANK, rows, rb)  # every store copies it; the floor and Gather read it
            for label, st in stores.items():
                st.add(name, shard)
                st.sync()
            sets = remote_batches(17 + RANK, remote, rows, k)
            out = np.empty((k, rb), np.uint8)
            # Bit-exact check: rows of rank r are make_shard(r, ...).
            for r in remote:
                shards[r] = make_shard(r, rows, rb)
            want = np.stack([shards[int(g) // rows][int(g) % rows] for g in sets[0]])
            ok = True
            for label, st in stores.items():
                out[:] = 0
                st.get_batch(name, out, sets[0])
                ok &= bool(np.array_equal(out, want))
            C.require_everywhere(ok, f"B5 {rb} B: get_batch returned wrong rows")
            del shards
            it = {"i": 0}

            def nxt():
                i = it["i"]
                it["i"] = (i + 1) % len(sets)
                return sets[i]

            fns = {label: (lambda st=st: st.get_batch(name, out, nxt())) for label, st in stores.items()}
            if floor:
                floor.serve(shard)
                out_f = np.zeros((k, rb), np.uint8)
                floor.batch_fn(sets[:1], out_f)()
                C.require_everywhere(bool(np.array_equal(out_f, want)), f"B5 {rb} B: the C floor returned wrong rows")
                fns["c_floor_inproc"] = floor.batch_fn(sets, out_f)
            if args.gather_ceiling:
                # The same batches through plain mpi4py collectives (b5_gather_ceiling.py), in the
                # same interleaved loops: collective, so every rank runs the same number of calls.
                gat = Gather(COMM, shard, rows)
                out_g = np.empty((k, rb), np.uint8)
                gat(sets[0], out_g)
                if not COMM.allreduce(bool(np.array_equal(out_g, want)), op=C.MPI.LAND):
                    raise SystemExit(f"B5 {rb} B: the mpi4py gather ceiling returned wrong rows")
                fns["gather_mpi4py"] = lambda: gat(nxt(), out_g)
            del want
            t = C.interleaved(fns, repeats, target_s, COMM)
            for v in fns:
                agg = sum(COMM.allgather(k * rb / t[v]["s"]))
                agg_cpu = sum(COMM.allgather(k * rb / t[v]["cpu_s"]))
                cpu_batch = float(np.mean(COMM.allgather(t[v]["cpu_s"])))
                results.append({
                    "bench": "B5", "part": "get_batch", "config": v, "row_bytes": rb, "k": k,
                    "cpu_s_per_batch": cpu_batch,
                    "label": args.label, "ranks": SIZE, "hosts": len(set(hosts)),
                    "rows_per_rank": rows, "us_per_call": C.gather_stat(COMM, t[v]["s"] * 1e6)["median"],
                    "agg_bytes_per_s": agg, "agg_bytes_per_cpu_s": agg_cpu,
                    "ratio_iperf3": agg / link["iperf3_bytes_per_s"] if link else None,
                    "repeats": repeats, "iters": t[v]["n"]})
                C.log(f"B5 {v:13s} {rb:6d} B: {results[-1]['us_per_call']:9.1f} us/call, "
                      f"{agg / 1e6:9.1f} MB/s aggregate, {cpu_batch * 1e3:7.3f} CPU ms/batch"
                      + (f" ({results[-1]['ratio_iperf3']:.3f}x iperf3)" if link else ""))
        results += run_fields(args, stores, remote, hosts, repeats, target_s)
    finally:
        for st in stores.values():
            st.free()
        if floor:
            floor.close()
    return results, notes


def run_fields(args, stores, remote, hosts, repeats, target_s):
    """Samples of two fields (the loader's 512 B + 8 B) read for the same K random remote
    rows: one get_batch per field vs one get_batch_vars (methods 1 and 2: one request per
    owner for both fields), interleaved in the same loops, for each libfabric store that
    gathers."""
    k, rows, results = args.k, 4096 if args.quick else 16384, []
    labels = [lb for lb, st in stores.items() if CONFIGS[lb][0] in (1, 2) and lb not in CONFIG_ENV]
    if not labels:
        return results
    x = np.random.default_rng(RANK).standard_normal((rows, 128)).astype(np.float32)
    y = np.arange(RANK * rows, (RANK + 1) * rows, dtype=np.int64)
    sets = remote_batches(29 + RANK, remote, rows, k)
    ox, oy = np.empty((k, 128), np.float32), np.empty(k, np.int64)
    step = C.cycler(len(sets))

    def nxt():
        return sets[step()]

    fns = {}
    for lb in labels:
        st = stores[lb]
        st.add("b5f/x", x)
        st.add("b5f/y", y)
        st.sync()
        st.get_batch_vars(["b5f/x", "b5f/y"], [ox, oy], sets[0])
        C.require_everywhere(bool(np.array_equal(oy, sets[0])), f"B5 fields {lb}: wrong rows")
        fns[f"{lb} get_batch x2"] = (lambda st=st: (lambda r: (st.get_batch("b5f/x", ox, r),
                                                               st.get_batch("b5f/y", oy, r)))(nxt()))
        fns[f"{lb} get_batch_vars"] = (lambda st=st: st.get_batch_vars(["b5f/x", "b5f/y"], [ox, oy], nxt()))
    t = C.interleaved(fns, repeats, target_s, COMM)
    for v in fns:
        results.append({
            "bench": "B5", "part": "fields", "config": v, "row_bytes": 520, "k": k,
            "label": args.label, "ranks": SIZE, "hosts": len(set(hosts)),
            "us_per_call": C.gather_stat(COMM, t[v]["s"] * 1e6)["median"],
            "agg_bytes_per_s": sum(COMM.allgather(k * 520 / t[v]["s"])),
            "cpu_s_per_batch": float(np.mean(COMM.allgather(t[v]["cpu_s"]))),
            "repeats": repeats, "iters": t[v]["n"]})
        C.log(f"B5 fields {v:26s}: {results[-1]['us_per_call']:9.1f} us/call, "
              f"{results[-1]['cpu_s_per_batch'] * 1e3:7.3f} CPU ms/batch")
    return results


def run_loader(args, hs_root):
    import torch
    from torch.utils.data import DistributedSampler

    from pyddstore.torch import DistDataset, ThreadDataLoader

    torch.set_num_threads(1)
    hosts = COMM.allgather(socket.gethostname())
    d, batch = 128, 256
    # Without --per-rank: 32k samples in all (16 MiB of features), every epoch timed whole.
    n = (1 << 14) if args.quick else (1 << 15)
    if args.per_rank:  # weak scaling: the same share per rank at every job size
        n = args.per_rank * SIZE
    results, notes = [], []
    repeats = 2 if args.quick else 5

    # Sample i is x = (i * d + j) % 65521 for j < d, y = i % 1000: computed where needed, so
    # that no rank holds the whole dataset (8 ranks x 1M samples would not fit).
    def xrows(idx):
        return ((np.asarray(idx, np.int64)[:, None] * d + np.arange(d)) % 65521).astype(np.float32)

    class Src:
        def __len__(self):
            return n

        def read_range(self, a, b):
            return (xrows(np.arange(a, b)), np.arange(a, b, dtype=np.int64) % 1000)

        def __getitem__(self, i):
            return torch.from_numpy(xrows([i])[0]), i % 1000

    for label in [c for c in args.configs if c in LOADER_CONFIGS]:
        method, fabric = CONFIGS[label]
        try:
            with C.environ(**({"DDSTORE_FABRIC": fabric} if fabric else {})):
                ds = DistDataset(Src(), f"b5_{label}", comm=COMM, method=method,
                                 handshake_dir=os.path.join(hs_root, "ld_" + label), progress=False)
        except DDStoreError as e:
            notes.append(f"B5 loader {label}: skipped ({type(e).__name__}: {str(e)[:200]})")
            C.log(notes[-1])
            continue
        sampler = DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
        loader = ThreadDataLoader(ds, batch_size=batch, sampler=sampler, num_workers=1)
        n_local = len(sampler)
        # Check one epoch's first batches against the source.
        sampler.set_epoch(99)
        want = list(sampler)
        ok, pos = True, 0
        for x, y in loader:
            idx = want[pos:pos + y.shape[0]]
            pos += y.shape[0]
            ok &= bool(np.array_equal(x.numpy(), xrows(idx)) and np.array_equal(y.numpy(), np.asarray(idx) % 1000))
        C.require_everywhere(ok, f"B5 loader {label}: wrong samples")
        times, cpus, main_cpus = [], [], []
        for r in range(repeats):
            sampler.set_epoch(r)
            COMM.Barrier()
            c0, t0, m0 = C.cpu_now(), C.now(), time.thread_time()
            got = sum(y.shape[0] for _, y in loader)
            times.append(C.now() - t0)
            cpus.append(C.cpu_now() - c0)
            # The calling thread alone (sampler, batch hand-over): the rest of the process's
            # CPU is the loader's reader thread and the store's (reads, serving peers, waits).
            main_cpus.append(time.thread_time() - m0)
            assert got == n_local
        rate = C.gather_stat(COMM, n_local / float(np.median(times)))
        rate_cpu = C.gather_stat(COMM, n_local / float(np.median(cpus)))
        nbatch = n_local / batch
        cpu_batch = float(np.mean(COMM.allgather(float(np.median(cpus)) / nbatch)))
        main_batch = float(np.mean(COMM.allgather(float(np.median(main_cpus)) / nbatch)))
        results.append({"bench": "B5", "part": "loader", "config": label, "label": args.label,
                        "ranks": SIZE, "hosts": len(set(hosts)), "sample_bytes": d * 4 + 8,
                        "samples": n, "batch": batch, "samples_per_s_per_rank": rate["median"],
                        "cpu_s_per_batch": cpu_batch, "main_thread_cpu_s_per_batch": main_batch,
                        "samples_per_cpu_s_per_rank": rate_cpu["median"], "per_rank": rate["per_rank"],
                        "epoch_s_all": times, "cpu_s_all": cpus, "main_thread_cpu_s_all": main_cpus,
                        "repeats": repeats,
                        "per_rank_samples": n_local})
        C.log(f"B5 loader {args.label} {label:7s}: {rate['median'] / 1e3:9.1f}k samples/s per rank, "
              f"{rate_cpu['median'] / 1e3:9.1f}k samples per CPU-second per rank, CPU per batch "
              f"{cpu_batch * 1e6:.0f} us ({main_batch * 1e6:.0f} us in the calling thread)")
        loader.close()
        ds.free()
    return results, notes


def main():
    args, machine = C.start(__doc__, extra)
    machine["hosts"] = sorted(set(COMM.allgather(socket.gethostname())))
    link = None
    if args.link:
        with open(args.link) as f:
            link = json.load(f)
    root = args.hs_dir or os.path.dirname(os.path.abspath(args.out))
    hs_root = COMM.bcast(os.path.join(root, f".b5-hs-{os.getpid()}") if RANK == 0 else None)
    try:
        if args.loader:
            results, notes = run_loader(args, hs_root)
        else:
            results, notes = run_get(args, link, hs_root)
    finally:
        COMM.Barrier()
        if RANK == 0:
            shutil.rmtree(hs_root, ignore_errors=True)
    if RANK == 0 and SIZE > C.cores() * len(machine["hosts"]):
        notes.append(f"B5: {SIZE} ranks on {C.cores()} cores (all simulated hosts share them): "
                     "oversubscribed")
    doc_machine = dict(machine, link=link)
    C.write_result(args.out, "B5", doc_machine, results, notes)


if __name__ == "__main__":
    main()
