"""Child reader (method 2, no MPI) for the system-level fault tests.

    python rel_reader.py DIR N_CORE SECONDS

Joins DIR/hs, reads random batches of "x" for SECONDS (0: until an error)
and checks every value. Prints "reading" after the first good batch, then
"done <batches>" on success or "error <seconds since last good read>
<class>: <message>" and exits 3 when a read fails.
"""
import sys
import time

import numpy as np

import pyddstore

COLS = 256


def main():
    d, n_core, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    r = pyddstore.join("x", handshake_dir=d + "/hs", n_core=n_core, timeout=30)
    g = r.query("x").global_rows
    out = np.zeros((64, COLS), np.int64)
    rng = np.random.default_rng()
    k = 0
    t0 = last = time.monotonic()
    try:
        while seconds <= 0 or time.monotonic() - t0 < seconds:
            rows = rng.integers(0, g, 64)
            r.get_batch("x", out, rows)
            want = rows[:, None] * COLS + np.arange(COLS)[None, :]
            if not np.array_equal(out, want):
                print("error corrupt rows", flush=True)
                sys.exit(4)
            k += 1
            last = time.monotonic()
            if k == 1:
                print("reading", flush=True)
    except pyddstore.DDStoreError as e:
        print(f"error {time.monotonic() - last:.2f} {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
    r.free()
    print(f"done {k}", flush=True)


if __name__ == "__main__":
    main()
