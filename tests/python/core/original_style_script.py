"""A training-data script written for the original DDStore (ORNL pyddstore),
in the style of HydraGNN's distributed dataset: it must run unchanged.

Every rank packs its variable-size records into one uint8 byte buffer and
an int64 table of (global byte offset, length); any rank then fetches any
record with get(name, arr, start) between epoch_begin()/epoch_end(), with
start a numpy integer taken from the table.

Run: mpiexec -n N python original_style_script.py [ddstore_width]
"""
import sys

import numpy as np
from mpi4py import MPI

from pyddstore import PyDDStore


def record(i):
    """Record i: a variable number of bytes (some empty) derived from i."""
    n = (i * 7) % 6
    return ((np.arange(n) + i * 31) % 256).astype(np.uint8)


def nsplit(a, n):
    k, m = divmod(len(a), n)
    return (a[i * k + min(i, m):(i + 1) * k + min(i + 1, m)] for i in range(n))


class DistDataset:
    """Shards records over a (possibly split) communicator like HydraGNN."""

    def __init__(self, total, label, comm=MPI.COMM_WORLD, ddstore_width=None):
        self.label = label
        self.comm = comm
        self.rank = comm.Get_rank()
        self.comm_size = comm.Get_size()
        self.ddstore_width = ddstore_width if ddstore_width is not None else self.comm_size
        self.ddstore_comm = self.comm.Split(self.rank // self.ddstore_width, self.rank)
        self.ddstore_comm_rank = self.ddstore_comm.Get_rank()
        self.ddstore_comm_size = self.ddstore_comm.Get_size()
        self.ddstore = PyDDStore(self.ddstore_comm)

        self.total_ns = total
        rx = list(nsplit(range(total), self.ddstore_comm_size))[self.ddstore_comm_rank]
        recs = [record(i) for i in rx]
        lengths = np.array([len(r) for r in recs], dtype=np.int64)
        nbytes = int(lengths.sum())
        start = self.ddstore_comm.exscan(nbytes)
        start = start if self.ddstore_comm_rank > 0 else 0
        offsets = start + np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(recs) else lengths
        table = np.ascontiguousarray(np.stack([offsets, lengths], axis=1) if len(recs)
                                     else np.zeros((0, 2), dtype=np.int64), dtype=np.int64)
        buf = np.concatenate(recs) if recs else np.zeros(0, dtype=np.uint8)
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        self.ddstore.add("%s/record_array" % self.label, buf)
        self.ddstore.add("%s/record_index" % self.label, table)

    def __len__(self):
        return self.total_ns

    def get(self, idx):
        entry = np.zeros((1, 2), dtype=np.int64)
        self.ddstore.get("%s/record_index" % self.label, entry, idx)
        offset, count = entry[0]
        val = np.zeros(count, dtype=np.uint8)
        self.ddstore.get("%s/record_array" % self.label, val, offset)
        return val

    def __del__(self):
        if self.ddstore:
            self.ddstore.free()


def main():
    comm = MPI.COMM_WORLD
    width = int(sys.argv[1]) if len(sys.argv) > 1 else None
    total = 3 * comm.Get_size() + 2
    dataset = DistDataset(total, "trainset", comm, ddstore_width=width)

    rng = np.random.default_rng(comm.Get_rank())
    index = np.arange(len(dataset))
    for epoch in range(3):
        rng.shuffle(index)
        dataset.ddstore.epoch_begin()
        for idx in index[: 4 + comm.Get_rank()]:
            got = dataset.get(idx)  # idx is a numpy integer
            assert np.array_equal(got, record(int(idx))), (idx, got, record(int(idx)))
        dataset.ddstore.epoch_end()
    # Reads outside an epoch, and every record once.
    for idx in index:
        assert np.array_equal(dataset.get(idx), record(int(idx)))
    # A zero-byte read at the very end of the byte buffer.
    end = np.int64(dataset.ddstore.query("trainset/record_array").global_rows)
    dataset.ddstore.get("trainset/record_array", np.zeros(0, dtype=np.uint8), end)
    # An epoch with no reads at all.
    dataset.ddstore.epoch_begin()
    dataset.ddstore.epoch_end()

    dataset.ddstore.free()
    dataset.ddstore.free()
    comm.Barrier()
    if comm.Get_rank() == 0:
        print("original-style script OK", flush=True)
    # The dataset's __del__ frees once more at exit: a no-op.


if __name__ == "__main__":
    main()
