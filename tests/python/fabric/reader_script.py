"""A method-2 reader started as a plain process (no mpiexec, no MPI): joins
the store published in argv[1] by argv[2] core ranks, reads every row of
every published variable bit-exact through get, get_batch and get_ranges,
and exits 0 (any failure raises and exits non-zero).

Usage: python reader_script.py HANDSHAKE_DIR N_CORE [TIMEOUT_S]
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # fabric_helpers, and the suite_helpers it imports

import pyddstore  # noqa: E402
from fabric_helpers import VARIABLES, offsets, values  # noqa: E402


def main():
    hs, n_core = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    names = [v[0] for v in VARIABLES]
    r = pyddstore.join(names, handshake_dir=hs, n_core=n_core, timeout=timeout)
    assert r.is_reader and r.method == 2 and r.group_size == n_core, (r.is_reader, r.method, r.group_size)
    off = offsets(n_core)
    total = int(off[-1])
    rng = np.random.default_rng(os.getpid())
    for name, dtype, shape, salt in VARIABLES:
        info = r.query(name)
        assert info.global_rows == total, (name, info.global_rows, total)
        assert list(info.offsets) == list(off), (name, info.offsets)
        want = values(np.arange(total), shape, dtype, salt)
        out = np.zeros((total,) + shape, dtype=dtype)
        r.get(name, out, 0)
        assert out.tobytes() == want.tobytes(), f"{name}: get"
        rows = rng.integers(0, total, size=3 * total)
        outb = np.zeros((len(rows),) + shape, dtype=dtype)
        r.get_batch(name, outb, rows)
        assert outb.tobytes() == want[rows].tobytes(), f"{name}: get_batch"
        starts = np.array([total - 1, 0, 1], dtype=np.int64)
        counts = np.array([1, total, total - 2], dtype=np.int64)
        outr = np.zeros((int(counts.sum()),) + shape, dtype=dtype)
        r.get_ranges(name, outr, starts, counts)
        expect = np.concatenate([want[s:s + c] for s, c in zip(starts, counts)])
        assert outr.tobytes() == expect.tobytes(), f"{name}: get_ranges"
    # A reader never initialises MPI.
    assert "mpi4py.MPI" not in sys.modules, "the reader imported mpi4py.MPI"
    r.free()
    print(f"reader {os.getpid()}: read {len(VARIABLES)} variables of {total} rows bit-exact")


if __name__ == "__main__":
    main()
