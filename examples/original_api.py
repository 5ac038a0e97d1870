"""Code written for the original DDStore, HydraGNN-style, running unchanged.

Graph-network training codes built on the original ORNL ``pyddstore`` pack
variable-size samples (pickled graphs) into one flat byte buffer per rank,
store it with ``add("label/record_array", buf)`` plus a table of where each
record starts, and read a record with ``get(name, arr, start)`` between
``epoch_begin()`` and ``epoch_end()``. Nothing here uses an API the original
lacks. Run:

    mpiexec -n 4 python examples/original_api.py

The store is built on a communicator split from COMM_WORLD (two stores side by
side, each holding a full copy) when the number of ranks is even, as codes
with a "ddstore width" do.
"""

import pickle

import numpy as np
from mpi4py import MPI

from pyddstore import PyDDStore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# A "ddstore width": groups of consecutive ranks, each with a full copy.
width = size // 2 if size % 2 == 0 and size > 1 else size
ddstore_comm = comm.Split(rank // width, rank)
drank, dsize = ddstore_comm.Get_rank(), ddstore_comm.Get_size()


def make_graph(i):
    """A variable-size sample: i % 5 + 1 nodes with 4 features each."""
    n = i % 5 + 1
    return {"id": i, "x": np.full((n, 4), i, np.float32), "y": float(i) / 10}


# Each rank of the group builds its contiguous share of the samples.
total = 37
lo, hi = drank * total // dsize, (drank + 1) * total // dsize
records = [pickle.dumps(make_graph(i)) for i in range(lo, hi)]
record_array = np.frombuffer(b"".join(records), dtype=np.uint8).copy()   # 1-D: one byte per "row"
lengths = np.array([len(r) for r in records], dtype=np.int64)

label = "trainset"
ddstore = PyDDStore(ddstore_comm)                 # the original signature
ddstore.add(f"{label}/record_array", record_array)
# (start byte in the global byte space, length) of every record, as rows of 2.
my_first_byte = ddstore_comm.scan(len(record_array)) - len(record_array)
starts = my_first_byte + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
ddstore.add(f"{label}/record_offset", np.stack([starts, lengths], axis=1))

if ddstore and drank == 0:                        # the store object is always truthy
    print(f"group {rank // width}: {ddstore.info(label + '/record_array')[0]} bytes "
          f"in {total} records over {dsize} ranks")


def get(idx):
    """Sample idx, read from whichever rank holds it (not collective)."""
    where = np.zeros((1, 2), dtype=np.int64)
    ddstore.get(f"{label}/record_offset", where, idx)   # idx may be a numpy integer
    start, length = where[0]
    buf = np.zeros(length, dtype=np.uint8)
    ddstore.get(f"{label}/record_array", buf, start)    # a byte offset as start
    return pickle.loads(buf.tobytes())


rng = np.random.default_rng(rank)
for epoch in range(2):
    ddstore.epoch_begin()                         # same number of calls on every rank
    for idx in rng.integers(0, total, size=8):    # each rank reads what it wants
        g = get(idx)
        assert g["id"] == idx and g["x"].shape == (idx % 5 + 1, 4)
    ddstore.epoch_end()

# Zero-row reads work, also at the very end of a variable.
nothing = np.zeros(0, dtype=np.uint8)
ddstore.get(f"{label}/record_array", nothing, ddstore.info(f"{label}/record_array")[0])

ddstore.free()
ddstore.free()                                    # a second free() is harmless
ddstore_comm.Free()
if rank == 0:
    print("original-API example: all reads checked")
