"""Method 2, a reader: join a core job's store from another job and read it.

No MPI is needed: the reader finds the core job's endpoints in the handshake
directory (waiting up to DDSTORE_HANDSHAKE_TIMEOUT_S, default 300 s, for them
to appear), then reads any row with one-sided libfabric reads. Reads are not
collective and may come from several threads. See examples/method2_core.py
for how to start both.

A reader can itself be one rank of an MPI training job (each rank joins on
its own); this script is a single process.
"""

import argparse
import os
import sys

import numpy as np

import pyddstore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--dir", required=True, help="the core job's handshake directory")
parser.add_argument("--n-core", type=int, required=True, help="number of ranks of the core job")
parser.add_argument("--id", type=int, default=0, help="this reader's number (names its done-file)")
parser.add_argument("--timeout", type=float, default=None, help="seconds to wait for the core job")
args = parser.parse_args()

if not pyddstore.has_fabric():
    sys.exit("method2_reader: this libddstore was built without libfabric; method 2 needs it")

# join() waits for a complete, current publication and attaches the variables.
reader = pyddstore.join(["x", "y"], handshake_dir=args.dir, n_core=args.n_core, timeout=args.timeout)
try:
    total = reader.query("x").global_rows
    rng = np.random.default_rng(args.id)
    rows = rng.integers(0, total, size=256)

    x = np.empty((len(rows), 16), np.float32)
    reader.register_recv(x)                  # register once: later reads into x skip registration
    reader.get_batch("x", x, rows)           # not collective for method 2
    y = np.empty(len(rows), np.int64)
    reader.get_batch("y", y, rows)
    assert np.array_equal(y, rows) and np.array_equal(x[:, 0], rows.astype(np.float32))

    head = np.empty((4, 16), np.float32)
    reader.get("x", head, total - 4)         # a contiguous range, possibly across shards
    assert head[-1, 0] == total - 1
    reader.unregister_recv(x)
    st = reader.stats()
    print(f"method2_reader {args.id}: read {st['rows_remote']} rows ({st['bytes_remote']} bytes) "
          f"of {total} from {reader.group_size} core ranks; all values checked")
finally:
    reader.free()                            # local for a reader
    # Tell the core job this reader is done (see method2_core.py).
    signals = args.dir.rstrip("/") + ".readers"
    os.makedirs(signals, exist_ok=True)
    with open(os.path.join(signals, f"reader-{args.id}.done"), "w") as f:
        f.write("done\n")
