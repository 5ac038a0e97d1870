"""Worker processes and a store-backed dataset: a clear error, not a raw pickling failure.

A DataLoader with fork workers gets the store's fork message (pyddstore core); with spawn
or forkserver workers the dataset is pickled to be sent to them, and that must say what to
do (threads) instead of "cannot serialize 'mpi4py.MPI.Intracomm'".
"""
import copy
import multiprocessing
import pickle

import pytest
import torch

from pyddstore.torch import DistDataset, WindowedDataset


@pytest.fixture
def ds(comm):
    d = DistDataset([torch.full((2,), float(i)) for i in range(8 * comm.size)], "workerproc", comm=comm)
    yield d
    d.free()


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_process_workers_get_a_clear_error(ds, context):
    if context not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{context} is not available here")
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context=context)
    with pytest.raises(TypeError, match=r"DistDataset 'workerproc' cannot be sent to another process.*"
                                        r"ThreadDataLoader\(\.\.\., num_workers=N\)"):
        next(iter(loader))
    # The store is untouched: the same rank can read on as usual.
    assert torch.equal(ds[3], torch.full((2,), 3.0))


def test_pickle_and_copy_of_a_dataset_say_why(ds):
    for attempt in (lambda: pickle.dumps(ds), lambda: copy.copy(ds),
                    lambda: pickle.dumps(WindowedDataset(ds, 2))):
        with pytest.raises(TypeError, match="its store lives in this MPI process"):
            attempt()
