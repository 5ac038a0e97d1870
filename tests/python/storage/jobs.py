"""The jobs of the storage suite (run.sh): each is one MPI job, so that a
store saved by one job is reopened by later ones, at other rank counts,
methods and DDSTORE_NODE_LOCAL settings, and so that one job can hold a
directory while another tries it.

    mpiexec -n N python jobs.py save DIR [--rows R] [--row-bytes B] [--chunk-mib C]
    mpiexec -n M python jobs.py open DIR [--epoch]        reopen, check every row bit-exact
    mpiexec -n N python jobs.py save-dataset DIR           a DistDataset (torch) in DIR
    mpiexec -n M python jobs.py open-dataset DIR           reopen it without the source
    mpiexec -n M python jobs.py fails WHAT DIR WORDS...    WHAT = open | create | open-dataset:
                                                           raises on every rank, naming WORDS
    mpiexec -n N python jobs.py hold WHAT DIR FLAG         WHAT = create | open: hold DIR until
                                                           FLAG.release exists (FLAG.ready: held)
    python jobs.py drop DIR                                drop DIR's files from the page cache,
                                                           so that the next job charges what it
                                                           reads to its own memory cap

Every job prints one line "jobs: <what>: ok ..." on rank 0 when all ranks
passed, and exits non-zero (every rank) otherwise. Rows are a function of
their global index (`expected`), so any job checks any row.
"""
import argparse
import os
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

import pyddstore
from pyddstore import PyDDStore

comm = MPI.COMM_WORLD
MUL = np.uint64(0x9E3779B97F4A7C15)


def expected(rows, row_bytes, var=0):
    """Rows `rows` of variable `var`: (len(rows), row_bytes) uint8, a function of the global index."""
    rows = np.asarray(rows, dtype=np.uint64)
    words = (row_bytes + 7) // 8
    with np.errstate(over="ignore"):
        w = rows[:, None] * MUL + np.arange(words, dtype=np.uint64)[None, :] + np.uint64(var << 40)
    return np.ascontiguousarray(w.view(np.uint8).reshape(len(rows), words * 8)[:, :row_bytes])


def say(text):
    if comm.Get_rank() == 0:
        print(f"jobs: {text}", flush=True)


def peak_rss():
    """This rank's peak resident set (bytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now():
    """This rank's resident set now (bytes)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


# Resident at start, after the imports: mostly libraries' pages, which another
# cgroup may have brought in (then not charged to this job's cap).
RSS_AT_START = rss_now()


# Variables of a saved store: name -> row bytes ("b" odd-sized, "e" empty on all but one rank).
VARS = {"a": 24, "b": 13}


def save(a):
    s = PyDDStore(comm, storage_dir=a.dir)
    g, n = s.group_rank, s.group_size
    t0 = time.perf_counter()
    for k, (name, rb) in enumerate(VARS.items()):
        rb = a.row_bytes if name == "a" and a.row_bytes else rb
        first, last = a.rows * g // n, a.rows * (g + 1) // n
        s.init(name, last - first, rb)
        chunk = max(1, (a.chunk_mib << 20) // rb)
        for lo in range(first, last, chunk):  # never the whole share in memory
            hi = min(lo + chunk, last)
            s.update(name, expected(np.arange(lo, hi), rb, k), lo - first)
    s.add("e", np.arange(5, dtype=np.int16) if g == n - 1 else np.zeros(0, np.int16))
    s.sync()
    s.save()
    info = s.info()
    assert info["storage"] == "files" and info["storage_state"] == "saved", info
    seconds = time.perf_counter() - t0
    rss = comm.allreduce(peak_rss(), op=MPI.MAX)
    s.free()
    say(f"save: ok {a.rows} rows on {n} ranks in {seconds:.2f} s, peak RSS {rss >> 20} MiB")


def open_(a):
    s = PyDDStore.open(a.dir, comm)
    try:
        assert s.info()["storage_state"] == "reopened"
        assert s.names() == list(VARS) + ["e"], s.names()
        rng = np.random.default_rng(1234)  # the same draws on every rank
        for k, name in enumerate(VARS):
            q = s.query(name)
            rb, rows = q.row_bytes, q.global_rows
            assert not a.rows or rows == a.rows, (rows, a.rows)
            # An epoch in random order, each rank its share of it, in batches of
            # equal count on every rank (get_batch may be collective).
            order = rng.permutation(rows) if a.epoch or rows <= 100_000 else rng.integers(0, rows, 100_000)
            mine = np.array_split(order, comm.Get_size())[comm.Get_rank()]
            batch = max(1, (4 << 20) // rb)
            nb = comm.allreduce(-(-len(mine) // batch), op=MPI.MAX)
            out = np.empty((batch, rb), np.uint8)
            for j in range(nb):
                idx = np.ascontiguousarray(mine[j * batch:(j + 1) * batch], dtype=np.int64)
                s.get_batch(name, out, idx)
                assert np.array_equal(out[:len(idx)], expected(idx, rb, k)), f"{name}: rows differ"
        e = np.empty(5, np.int16)
        s.get("e", e, 0)
        assert np.array_equal(e, np.arange(5, dtype=np.int16))
        if a.verify:
            assert s.verify_saved() == 0
        rss = comm.allreduce(peak_rss(), op=MPI.MAX)
        grew = comm.allreduce(peak_rss() - RSS_AT_START, op=MPI.MAX)
        assert not a.cap or grew <= a.cap, f"peak RSS grew by {grew} bytes on a rank, more than the cap {a.cap}"
        method = s.method
    finally:
        s.free()
    say(f"open: ok on {comm.Get_size()} ranks (method {method}), every row bit-exact, "
        f"peak RSS {rss >> 20} MiB ({grew >> 20} MiB more than at start)")


def dataset_source(n):
    import torch

    class Source(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return {"x": torch.arange(5, dtype=torch.float32) * i, "y": i,
                    "z": np.arange(3 * (i % 3), dtype=np.int32).reshape(-1, 3) - i}

    return Source()


def save_dataset(a):
    from pyddstore.torch import DistDataset
    DistDataset(dataset_source(a.rows), "train", storage_dir=a.dir, ragged={"z": 0}).free()
    say(f"save-dataset: ok {a.rows} samples on {comm.Get_size()} ranks")


def open_dataset(a):
    import torch

    from pyddstore.torch import DistDataset
    ds = DistDataset.open(a.dir, "train")
    try:
        src = dataset_source(len(ds))
        for i in range(len(ds)):
            want, got = src[i], ds[i]
            assert torch.equal(got["x"], want["x"]) and got["y"] == want["y"], i
            assert got["z"].dtype == want["z"].dtype and np.array_equal(got["z"], want["z"]), i
    finally:
        ds.free()
    say(f"open-dataset: ok {len(src)} samples on {comm.Get_size()} ranks, without the source")


def drop(a):
    """Not an MPI job: every file of a.dir written to disk and dropped from the page cache."""
    for name in os.listdir(a.dir):
        fd = os.open(os.path.join(a.dir, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    print(f"jobs: drop: ok {a.dir}", flush=True)


def _attempt(what, d):
    if what == "create":
        s = PyDDStore(comm, storage_dir=d)
        s.add("w", np.zeros(3, np.int8))
        return s
    if what == "open":
        return PyDDStore.open(d, comm)
    if what == "open-dataset":
        from pyddstore.torch import DistDataset
        return DistDataset.open(d, "train")
    raise SystemExit(f"jobs: unknown WHAT {what!r}")


def fails(a):
    err = None
    try:
        obj = _attempt(a.what, a.dir)
        obj.free()
    except Exception as e:  # noqa: BLE001 - checked below, on every rank
        err = (type(e).__name__, str(e))
    errs = comm.allgather(err)
    bad = [(r, e) for r, e in enumerate(errs) if e is None or not all(w in e[1] for w in a.words)]
    if bad:
        raise AssertionError(f"{a.what} {a.dir}: expected an error naming {a.words} on every rank; "
                             f"got {errs}")
    if len({e[0] for e in errs}) != 1:
        raise AssertionError(f"different error types across ranks: {errs}")
    say(f"fails {a.what}: ok, on every rank: {errs[0][0]}: {errs[0][1]}")


def hold(a):
    obj = _attempt(a.what, a.dir)
    comm.Barrier()
    if comm.Get_rank() == 0:
        open(a.flag + ".ready", "w").close()
    deadline = time.monotonic() + a.timeout
    while not os.path.exists(a.flag + ".release"):
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs: hold: {a.flag}.release did not appear in {a.timeout} s")
        time.sleep(0.1)
    comm.Barrier()
    obj.free()
    say(f"hold {a.what}: ok")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("save", "open", "save-dataset", "open-dataset"):
        q = sub.add_parser(name)
        q.add_argument("dir")
        q.add_argument("--rows", type=int, default=0 if name.startswith("open") else 1001)
        q.add_argument("--row-bytes", type=int, default=0)
        q.add_argument("--chunk-mib", type=int, default=4)
        q.add_argument("--epoch", action="store_true", help="open: read every row (default: up to 100k)")
        q.add_argument("--verify", action="store_true", help="open: verify_saved() too")
        q.add_argument("--cap", type=int, default=0,
                       help="open: fail if a rank's peak RSS grows by more than this many bytes")
    sub.add_parser("drop").add_argument("dir")
    q = sub.add_parser("fails")
    q.add_argument("what")
    q.add_argument("dir")
    q.add_argument("words", nargs="*")
    q = sub.add_parser("hold")
    q.add_argument("what")
    q.add_argument("dir")
    q.add_argument("flag")
    q.add_argument("--timeout", type=float, default=120)
    a = p.parse_args()
    if a.cmd == "drop":
        return drop(a)
    try:
        {"save": save, "open": open_, "save-dataset": save_dataset, "open-dataset": open_dataset,
         "fails": fails, "hold": hold, "drop": drop}[a.cmd](a)
    except BaseException as e:
        print(f"jobs: {a.cmd}: FAILED on rank {comm.Get_rank()}: {type(e).__name__}: {e}", file=sys.stderr,
              flush=True)
        comm.Abort(1)


if __name__ == "__main__":
    main()
