"""Shared helpers of the benchmark scripts in bench/ (timing, machine record, JSON output).

Every benchmark reports ratios to a baseline measured in the same process and the same run,
with the baseline and the measured variant interleaved repeat by repeat, so that load from
other processes on a shared machine hits both sides alike. Medians over repeats, never means.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time

# Import torch (when a benchmark needs it) before mpi4py: the torch helper's rule.
if os.environ.get("PYDDSTORE_BENCH_TORCH"):
    import torch  # noqa: F401

from mpi4py import MPI  # noqa: E402

import numpy as np  # noqa: E402

# environ(): shared with the test suites (tests/python/suite_helpers.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from suite_helpers import environ  # noqa: E402

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()


def open_store(method, env, fabric=None, handshake_dir=None):
    """A store for one configuration, created with the environment `env` set
    (libddstore reads its settings at creation), or (None, the reason why
    not): the same outcome on every rank."""
    from pyddstore import DDStoreError, DDStoreNotSupportedError, PyDDStore

    kw = {"fabric": fabric} if fabric else {}
    if method == 2:
        kw["handshake_dir"] = handshake_dir
    with environ(**env):
        try:
            return PyDDStore(COMM, method=method, **kw), None
        except DDStoreNotSupportedError as e:
            return None, f"not supported: {e}"
        except DDStoreError as e:
            return None, f"error: {type(e).__name__}: {e}"


def parse_args(doc, extra=None):
    """Command line shared by all benchmarks: --out FILE, --quick; extra(parser) adds options."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write (rank 0)")
    p.add_argument("--quick", action="store_true", help="CI smoke run: fewer repeats, smaller data")
    if extra:
        extra(p)
    return p.parse_args()


def start(doc, extra=None, torch_threads=None):
    """A benchmark's start: its command line (parse_args), torch's thread count
    when given, and the machine record. Returns (args, machine)."""
    args = parse_args(doc, extra)
    if torch_threads is not None:
        import torch  # the benchmark's own import (before mpi4py) already loaded it
        torch.set_num_threads(torch_threads)
    return args, machine_info()


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def cores():
    """CPUs of the machine (what oversubscription is measured against). Not the affinity
    mask: mpiexec binds each rank to one core when ranks <= cores."""
    return os.cpu_count() or 1


def affinity():
    """CPUs this process may run on (its binding)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return cores()


def machine_info(comm=COMM):
    """What the numbers were measured on; the same dict on every rank."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("torch", "pyddstore"):
        m = sys.modules.get(mod)
        if m is not None:
            versions[mod] = getattr(m, "__version__", "?")
    nodes = len(set(comm.allgather(socket.gethostname())))
    n = cores()
    return {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cores": n,
        "affinity_cpus_rank0": affinity(),
        "mem_gib": _mem_total_gib(),
        "kernel": platform.release(),
        "mpi": MPI.Get_library_version().replace("\0", "").splitlines()[0].strip(),
        "ranks": comm.Get_size(),
        "nodes": nodes,
        "oversubscribed": comm.Get_size() > n * nodes,
        "loadavg_start": list(os.getloadavg()),
        "versions": versions,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("DDSTORE_", "FI_PROVIDER", "OMP_NUM_THREADS"))},
    }


def now():
    return time.perf_counter()


def calibrate(fn, target_s, comm=None, cap=1 << 20, min_n=1):
    """Iterations of fn() that take about target_s; agreed over comm (the max of the ranks'
    minimum) so that collective calls run the same number of times everywhere."""
    fn()  # warm up (page faults, lazy initialisation)
    n = 1
    while True:
        t0 = now()
        for _ in range(n):
            fn()
        dt = now() - t0
        done = dt >= target_s / 4 or n >= cap
        if comm is not None:  # every rank must leave the loop after the same number of calls
            done = comm.allreduce(done, op=MPI.LOR)
            dt = comm.allreduce(dt, op=MPI.MAX)
        if done:
            break
        n *= 4
    n = max(min_n, min(cap, int(n * target_s / max(dt, 1e-9)) or 1))
    if comm is not None:
        n = comm.allreduce(n, op=MPI.MIN)
    return n


def cpu_now():
    """CPU seconds of this process (all threads): unlike wall time, not inflated while other
    processes hold the cores, which on a loaded shared machine is the steadier measure."""
    return time.process_time()


def timed_loop(fn, n, comm=None):
    """(wall, cpu) seconds per call of fn() over n calls; a barrier first when comm is given."""
    if comm is not None:
        comm.Barrier()
    c0 = cpu_now()
    t0 = now()
    for _ in range(n):
        fn()
    return (now() - t0) / n, (cpu_now() - c0) / n


def interleaved(fns, repeats, target_s, comm=None):
    """Median seconds per call of each zero-argument callable in dict `fns`, their loops
    interleaved repeat by repeat (so load changes hit all of them alike). With comm, every
    loop starts after a barrier and runs the same number of calls on every rank, so ranks
    sharing cores (oversubscription) contend alike in every loop and collective callables
    stay matched. Returns {name: {"s": median wall, "cpu_s": median CPU, "all": [...],
    "n": calls per loop}}."""
    ns = {k: calibrate(f, target_s, comm) for k, f in fns.items()}
    times = {k: [] for k in fns}
    cpus = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            w, c = timed_loop(f, ns[k], comm)
            times[k].append(w)
            cpus[k].append(c)
    return {k: {"s": statistics.median(v), "cpu_s": statistics.median(cpus[k]), "all": v,
                "n": ns[k]} for k, v in times.items()}


def timed_epochs(fns, repeats, counts, after_repeat=None, comm=COMM):
    """The loader benchmarks' epochs: a warm-up epoch of each f(epoch) ->
    samples in dict `fns`, then `repeats` rounds with the variants
    interleaved, each epoch after a barrier and checked to yield counts[name]
    samples; after_repeat() runs after each round. Returns ({name: [wall s]},
    {name: [CPU s]})."""
    times = {k: [] for k in fns}
    cpus = {k: [] for k in fns}
    for f in fns.values():
        f(0)
    for r in range(repeats):
        for k, f in fns.items():
            comm.Barrier()
            c0, t0 = cpu_now(), now()
            got = f(r + 1)
            times[k].append(now() - t0)
            cpus[k].append(cpu_now() - c0)
            assert got == counts[k], (k, got, counts[k])
        if after_repeat is not None:
            after_repeat()
    return times, cpus


def require_everywhere(ok, message, comm=COMM):
    """Stop every rank with `message` (SystemExit) unless `ok` holds on every rank."""
    if not comm.allreduce(bool(ok), op=MPI.LAND):
        raise SystemExit(message)


def cycler(n):
    """A function returning 0, 1, ..., n - 1, 0, 1, ... on successive calls:
    which of n prepared index sets a timed call uses next."""
    it = {"i": 0}

    def nxt():
        i = it["i"]
        it["i"] = (i + 1) % n
        return i
    return nxt


def gather_stat(comm, value):
    """Per-rank values gathered on every rank, with their median/min/max."""
    vals = comm.allgather(value)
    return {"per_rank": vals, "median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def peak_rss_bytes():
    """Peak resident set size of this process (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def rss_bytes():
    """Current resident set size of this process (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def reset_peak_rss():
    """Restart the VmHWM high-water mark at the current RSS (Linux >= 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def write_result(path, bench, machine, results, notes=(), comm=COMM):
    """Rank 0 writes {bench, machine, results, notes, loadavg_end} as JSON; a
    note says so when the ranks outnumber the cores (oversubscribed)."""
    if comm.Get_rank() != 0:
        return
    if comm.Get_size() > cores():
        notes = [*notes, f"{bench}: {comm.Get_size()} ranks on {cores()} cores: oversubscribed"]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"bench": bench, "machine": machine, "results": results, "notes": list(notes),
           "loadavg_end": list(os.getloadavg())}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=_json_default)
    os.replace(tmp, path)
    print(f"[{bench}] wrote {path}", flush=True)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def log(*args):
    """Progress on rank 0 (stderr, so stdout stays clean)."""
    if RANK == 0:
        print(*args, file=sys.stderr, flush=True)
