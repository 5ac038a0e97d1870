"""B5 layers: where a remote get_batch spends its time beyond the request/reply floor.

    tests/cluster/ompi-run 2 2 --bind-to core -- .venv/bin/python bench/b5_layers.py \\
        --floor-lib build-b5c/libb5cfloor.so --out /var/tmp/b5_layers.json

(build-b5c/libb5cfloor.so comes from bench/b5.sh, or: mpicc -O2 -fPIC -shared -o
build-b5c/libb5cfloor.so bench/b5c/floor.c $(pkg-config --cflags --libs libfabric) -lpthread.)

Three layers read the same batches of K=256 random rows held by ranks on other hosts, in the
same interleaved loops (bench/_common.interleaved: a barrier and the same calls on every rank
before each loop, so the machine's drift hits them alike), method 1 over libfabric tcp:

* floor: bench/b5c/floor.c, one request and one reply per owner per batch, one ctypes call;
* ctypes: libddstore's dds_get_batch called through ctypes with prepared pointers (the library
  without the Python binding's checks and guard);
* get_batch: PyDDStore.get_batch, what users call.

Reported per row size and layer: MB/s summed over ranks, CPU per batch (all threads of all
ranks), the floor's time / the layer's time in the same repeat (each rank's median over repeats,
averaged over ranks: 1 = as fast as the floor), and
the caller thread's CPU per call (CLOCK_THREAD_CPUTIME_ID over a separate loop), which isolates
the reader's side from the owner's progress thread. Bind the ranks (--bind-to core): unbound, one
repeat of a loop runs at 0.3x to 2x the next on a small machine. A developer's tool, not part of
bench/run.sh.
"""

import statistics
import time

import _common as C
from _common import COMM, RANK, np

from b5_remote import Floor, make_shard, remote_batches, rows_per_rank, topology


def extra(p):
    p.add_argument("--floor-lib", required=True, help="libb5cfloor.so (bench/b5c/floor.c)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 4096])
    p.add_argument("--k", type=int, default=256, help="rows per batch (default 256)")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--target-s", type=float, default=0.2, help="seconds per loop (default 0.2)")


def thread_cpu_per_call(fn, n=1000):
    """The calling thread's CPU seconds per call over n calls (after a barrier)."""
    COMM.Barrier()
    t0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t0) / n


def main():
    args, machine = C.start(__doc__, extra)
    import pyddstore._store as S  # the ctypes layer reaches the handle and the C function

    _, remote = topology()
    k, results = args.k, []
    st, why = C.open_store(1, {"DDSTORE_NODE_LOCAL": "1"}, "tcp")
    if st is None:
        raise SystemExit(f"b5_layers: no method-1 tcp store: {why}")
    floor = Floor(args.floor_lib, k, max(args.sizes))
    try:
        for rb in args.sizes:
            rows = rows_per_rank(rb)
            name = f"b5l/{rb}"
            shard = make_shard(RANK, rows, rb)  # the store copies it; the floor reads it
            st.add(name, shard)
            st.sync()
            floor.serve(shard)
            sets = remote_batches(17 + RANK, remote, rows, k)
            outs = {lb: np.zeros((k, rb), np.uint8) for lb in ("floor", "ctypes", "get_batch")}
            step_c, step_g = C.cycler(len(sets)), C.cycler(len(sets))
            ptrs, h, bname = [s.ctypes.data for s in sets], st._h.ptr, st._vars[name].bname
            c_get, out_c = S._c.dds_get_batch, outs["ctypes"].ctypes.data
            fns = {"floor": floor.batch_fn(sets, outs["floor"]),
                   "ctypes": lambda: c_get(h, bname, out_c, ptrs[step_c()], k),
                   "get_batch": lambda: st.get_batch(name, outs["get_batch"], sets[step_g()])}
            for f in fns.values():
                f()
            want = outs["floor"]
            C.require_everywhere(all(np.array_equal(o, want) for o in outs.values()),
                                 f"b5_layers {rb} B: the layers read different rows")
            t = C.interleaved(fns, args.repeats, args.target_s, COMM)
            for lb, f in fns.items():
                # This rank's median over repeats, then the mean over ranks (as the MB/s sum them).
                ratio = float(np.mean(COMM.allgather(
                    statistics.median(fl / x for x, fl in zip(t[lb]["all"], t["floor"]["all"])))))
                tcpu = float(np.mean(COMM.allgather(thread_cpu_per_call(f))))
                r = {"bench": "B5-layers", "layer": lb, "row_bytes": rb, "k": k,
                     "agg_bytes_per_s": sum(COMM.allgather(k * rb / t[lb]["s"])),
                     "cpu_s_per_batch": float(np.mean(COMM.allgather(t[lb]["cpu_s"]))),
                     "caller_thread_cpu_s_per_call": tcpu, "floor_time_over_this": ratio,
                     "repeats": args.repeats, "iters": t[lb]["n"]}
                results.append(r)
                C.log(f"B5 layers {rb:6d} B {lb:9s}: {r['agg_bytes_per_s'] / 1e6:8.1f} MB/s, "
                      f"{r['cpu_s_per_batch'] * 1e6:7.1f} us CPU/batch, caller thread {tcpu * 1e6:7.1f} us/call, "
                      f"floor / this {ratio:.3f}")
    finally:
        st.free()
        floor.close()
    C.write_result(args.out, "B5-layers", machine, results)


if __name__ == "__main__":
    main()
