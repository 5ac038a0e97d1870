"""A first multi-rank pyddstore script.

Every rank adds its shard of two variables to one store, then reads rows that
other ranks hold: a single row, a batch of arbitrary rows, and a range. Run:

    mpiexec -n 4 python examples/first_store.py

(1 to any number of ranks). Prints one summary line from rank 0.
"""

import numpy as np
from mpi4py import MPI

from pyddstore import PyDDStore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# Shards may differ in size: rank r holds r + 2 rows. Row k of the global row
# space is the concatenation of the shards in rank order.
nrows = rank + 2
first = sum(r + 2 for r in range(rank))           # global index of my first row
features = np.arange(first, first + nrows, dtype=np.float32)[:, None] * np.ones(3, np.float32)
labels = np.arange(first, first + nrows, dtype=np.int64)   # one value per row (1-D)

with PyDDStore(comm) as store:                    # collective; method from DDSTORE_METHOD, default 0
    store.add("features", features)               # collective: every rank adds its shard
    store.add("labels", labels)
    total = store.query("labels").global_rows

    # get(): any rows, not collective, complete on return.
    last = np.empty((1, 3), np.float32)
    store.get("features", last, total - 1)
    assert last[0, 0] == total - 1

    # get_batch(): arbitrary rows in any order, repeats allowed. With method 0
    # it is collective over the group: every rank calls it the same number of times.
    rows = np.array([total - 1, 0, (rank * 7) % total, 0], dtype=np.int64)
    batch = np.empty((len(rows), 3), np.float32)
    store.get_batch("features", batch, rows)
    assert np.array_equal(batch[:, 0], rows.astype(np.float32))

    # get_ranges(): row ranges, concatenated (same collective rule as get_batch).
    out = np.empty(3, np.int64)
    store.get_ranges("labels", out, starts=[0, total - 1], counts=[2, 1])
    assert out.tolist() == [0, 1, total - 1]

    st = store.stats()
    local = comm.reduce(st["rows_local"], root=0)
    remote = comm.reduce(st["rows_remote"], root=0)
    if rank == 0:
        print(f"{size} ranks, {total} rows; read {local} rows locally and {remote} from other ranks "
              f"(method {store.method}, node shared memory: {store.node_local})")
# Leaving the with-block freed the store (collective).
