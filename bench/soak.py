"""Soak: load a large dataset into the store and read every row back through
each available method, verifying every byte, then verify the recorded
checksums (pyddstore._verify).

    # manual, the issue's setting: 4 ranks x 256 MiB = 1 GiB
    timeout 1800 mpiexec -n 4 python bench/soak.py --mib-per-rank 256
    # short CI setting (run by tests/python/reliability/run.sh): 4 x 16 MiB = 64 MiB
    timeout 300 mpiexec -n 4 python bench/soak.py --mib-per-rank 16

Methods (each skipped with a note when this build or machine lacks it):
m0_shm (method 0, node-local shared memory), m0_rma (method 0 with
DDSTORE_NODE_LOCAL=0: MPI RMA), m1_shm and m1_tcp (method 1, libfabric shm /
tcp on loopback), m2_shm (method 2, file handshake in a temporary directory).
Every rank reads the whole dataset (so 1 - 1/ranks of it from other ranks)
with get_batch, in chunks of shuffled rows, and compares each row with the
value it must hold. The report gives, per method, seconds and the ratio to
a baseline measured in the same run: gathering the same number of bytes from
a local array with np.take plus the same check. Exit status 1 on any
mismatch or error; `--out FILE` writes the JSON report (rank 0).
"""
import argparse
import json
import os
import sys
import tempfile
import time

from mpi4py import MPI

import numpy as np

import pyddstore
from pyddstore import DDStoreNotSupportedError, PyDDStore
from pyddstore import _verify

from _common import environ  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
ROW_BYTES = 4096
COLS = ROW_BYTES // 8
CHUNK_ROWS = 2048  # 8 MiB per get_batch

METHODS = {
    "m0_shm": (0, {"DDSTORE_NODE_LOCAL": "1"}),
    "m0_rma": (0, {"DDSTORE_NODE_LOCAL": "0"}),
    "m1_shm": (1, {"DDSTORE_NODE_LOCAL": "0", "DDSTORE_FABRIC": "shm"}),
    "m1_tcp": (1, {"DDSTORE_NODE_LOCAL": "0", "DDSTORE_FABRIC": "tcp", "FI_TCP_IFACE": "lo"}),
    "m2_shm": (2, {"DDSTORE_NODE_LOCAL": "0", "DDSTORE_FABRIC": "shm"}),
}


def expected(rows, salt):
    """Row r holds r * COLS + column + salt (uint64): every row distinct per run."""
    return rows.astype(np.uint64)[:, None] * np.uint64(COLS) + np.arange(COLS, dtype=np.uint64)[None, :] + \
        np.uint64(salt)


def log(msg):
    if RANK == 0:
        print(msg, flush=True)


def read_all(read, total, salt, seed):
    """Read every row once, in shuffled chunks, via read(out, rows); return
    (seconds, bytes, bad rows)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(total)
    out = np.empty((CHUNK_ROWS, COLS), np.uint64)
    bad = 0
    nchunks = -(-total // CHUNK_ROWS)
    t0 = time.perf_counter()
    for i in range(nchunks):
        rows = order[i * CHUNK_ROWS:(i + 1) * CHUNK_ROWS]
        read(out[:rows.size], rows)
        bad += int((out[:rows.size] != expected(rows, salt)).any(axis=1).sum())
    return time.perf_counter() - t0, total * ROW_BYTES, bad


def run_method(label, method, env, local_rows, salt, hsroot):
    with environ(**env):
        hs = os.path.join(hsroot, label) if method == 2 else None
        try:
            s = PyDDStore(COMM, method=method, handshake_dir=hs)
        except DDStoreNotSupportedError as e:
            return {"method": label, "skipped": str(e)}
        try:
            first = COMM.exscan(local_rows) or 0
            t0 = time.perf_counter()
            local = expected(np.arange(first, first + local_rows), salt)
            s.add("soak", local)
            _verify.record(s, "soak", local=local)
            COMM.Barrier()
            t_load = time.perf_counter() - t0
            total = s.query("soak").global_rows
            dt, nbytes, bad = read_all(lambda out, rows: s.get_batch("soak", out, rows), total, salt, RANK)
            # Baseline: the same gather and check from a local array.
            base_src = local if local_rows else expected(np.arange(1), salt)
            idx_mod = max(1, base_src.shape[0])

            def base_read(out, rows):
                np.take(base_src, rows % idx_mod, axis=0, out=out)  # its check fails: only timed
            bt, _, _ = read_all(base_read, total, salt, RANK)
            t1 = time.perf_counter()
            rep = _verify.verify(s, "soak")
            t_verify = time.perf_counter() - t1
            del local
        finally:
            s.free()
    per_rank = COMM.gather((dt, bt, nbytes, bad), root=0)
    res = None
    if RANK == 0:
        secs = max(p[0] for p in per_rank)
        base = max(p[1] for p in per_rank)
        res = {"method": label, "rows": int(total), "bytes_per_rank_read": int(nbytes),
               "bytes_all_ranks_read": int(sum(p[2] for p in per_rank)),
               "bad_rows": int(sum(p[3] for p in per_rank)), "load_s": round(t_load, 3),
               "read_s": round(secs, 3), "baseline_local_s": round(base, 3),
               "ratio_store_over_local": round(secs / base, 2) if base else None,
               "verify_ok": rep.ok, "verify_s": round(t_verify, 3)}
    return COMM.bcast(res)


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--mib-per-rank", type=int, default=256)
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--out", default=None)
    a = p.parse_args()
    local_rows = a.mib_per_rank * (1 << 20) // ROW_BYTES
    hsroot = COMM.bcast(tempfile.mkdtemp(prefix="ddstore-soak-") if RANK == 0 else None)
    log(f"soak: {SIZE} ranks x {a.mib_per_rank} MiB = {SIZE * a.mib_per_rank} MiB, rows of {ROW_BYTES} bytes, "
        f"libfabric: {pyddstore.has_fabric()}")
    results, failed = [], False
    t_all = time.perf_counter()
    for i, label in enumerate(a.methods):
        method, env = METHODS[label]
        if method and not pyddstore.has_fabric():
            results.append({"method": label, "skipped": "libddstore built without libfabric"})
            log(f"  {label}: skipped (no libfabric)")
            continue
        r = run_method(label, method, env, local_rows, salt=1000 + i, hsroot=hsroot)
        results.append(r)
        if "skipped" in r:
            log(f"  {label}: skipped: {r['skipped']}")
            continue
        ok = r["bad_rows"] == 0 and r["verify_ok"]
        failed |= not ok
        log(f"  {label}: {'OK' if ok else 'FAILED'} read {r['bytes_all_ranks_read'] / 2**30:.2f} GiB "
            f"(all ranks) in {r['read_s']:.2f} s, {r['ratio_store_over_local']}x the local gather; "
            f"bad rows {r['bad_rows']}; verify {'ok' if r['verify_ok'] else 'FAILED'} "
            f"({r['verify_s']:.2f} s); load {r['load_s']:.2f} s")
    wall = time.perf_counter() - t_all
    log(f"soak: {'FAILED' if failed else 'all verified'} in {wall:.1f} s")
    if RANK == 0:
        try:
            os.rmdir(hsroot)
        except OSError:
            pass
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"ranks": SIZE, "mib_per_rank": a.mib_per_rank, "wall_s": round(wall, 1),
                           "results": results}, f, indent=1)
    sys.exit(1 if COMM.allreduce(int(failed), op=MPI.MAX) else 0)


if __name__ == "__main__":
    main()
