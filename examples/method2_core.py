"""Method 2, the core job: hold a dataset in memory and publish it for readers.

The core job's ranks add their shards to a method-2 store, which publishes
endpoint addresses, memory keys and variable metadata in a shared handshake
directory. Processes of *another* job (examples/method2_reader.py) join from
those files, with no MPI communicator in common, and read any row with
one-sided libfabric reads: the core ranks do nothing while they are read.

The core job must outlive its readers. Here it waits until every expected
reader has left a ``reader-<k>.done`` file in ``<dir>.readers/`` (beside the
handshake directory, which belongs to the library), or until --wait seconds
have passed, then frees the store, which withdraws the publication. Run (two terminals, or two batch jobs on a shared file system):

    DDSTORE_FABRIC=tcp FI_TCP_IFACE=lo mpiexec -n 2 python examples/method2_core.py --dir /tmp/hs --readers 1
    DDSTORE_FABRIC=tcp FI_TCP_IFACE=lo python examples/method2_reader.py --dir /tmp/hs --n-core 2 --id 0

Needs a libddstore built with libfabric (``pyddstore.has_fabric()``).
"""

import argparse
import glob
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import pyddstore
from pyddstore import PyDDStore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--dir", required=True, help="handshake directory, on a file system the readers see")
parser.add_argument("--readers", type=int, default=1, help="readers to wait for before freeing the store")
parser.add_argument("--wait", type=float, default=300.0, help="give up waiting for readers after this many seconds")
parser.add_argument("--rows", type=int, default=1000, help="rows per core rank")
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if not pyddstore.has_fabric():
    if rank == 0:
        print("method2_core: this libddstore was built without libfabric; methods 1 and 2 "
              "need it (rebuild with -Dlibddstore:libfabric=enabled)", file=sys.stderr)
    sys.exit(2)

# Every sample is a row of 16 float32 whose values encode the global row index,
# so that readers can check what they read.
first = rank * args.rows
x = (np.arange(first, first + args.rows, dtype=np.float32)[:, None]
     + np.arange(16, dtype=np.float32) / 100)
y = np.arange(first, first + args.rows, dtype=np.int64)

store = PyDDStore(comm, method=2, handshake_dir=args.dir)   # collective; publishes the endpoints
store.add("x", x)                                           # each add() publishes the variable
store.add("y", y)
comm.Barrier()
if rank == 0:
    print(f"method2_core: {size} core ranks publish {size * args.rows} rows in {args.dir}", flush=True)

# Wait for the readers (rank 0 looks, everyone follows).
signals = args.dir.rstrip("/") + ".readers"
if rank == 0:
    os.makedirs(signals, exist_ok=True)
    for f in glob.glob(os.path.join(signals, "reader-*.done")):   # from an earlier run
        os.unlink(f)
deadline = time.monotonic() + args.wait
done = 0
while True:
    if rank == 0:
        done = len(glob.glob(os.path.join(signals, "reader-*.done")))
    done = comm.bcast(done, root=0)
    if done >= args.readers or time.monotonic() > deadline:
        break
    time.sleep(0.2)

store.free()                                                # collective; withdraws the publication
if rank == 0:
    print(f"method2_core: {done} of {args.readers} readers finished; store freed")
sys.exit(0 if done >= args.readers else 1)
