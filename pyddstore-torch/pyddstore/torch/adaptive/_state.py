"""The job state of pyddstore.torch.adaptive and its process group.

What AdaptDL keeps per process (the epoch loop's counters, the training loader,
the model, the measurements), which :func:`reset` replaces; and
:func:`init_process_group`, which starts torch.distributed over the MPI job's
ranks. Other modules read the state as ``_state._job`` (never a copy of it:
``reset`` rebinds the name).
"""

import atexit
import gc
import os
import socket

import torch.distributed as dist

from .._storedataset import raise_agreed
from .goodput import GradientStatistics, ThroughputProfile


# --------------------------------------------------------------- job state
class _Job:
    """What AdaptDL keeps per process: the epoch loop, the training loader, measurements."""

    def __init__(self):
        self.finished_epochs = 0
        self.current_epoch = None
        self.training = None          # weakref to the training AdaptiveDataLoaderHelper
        self.current = None           # weakref to the helper being iterated
        self.model = None             # weakref to the AdaptiveDataParallel
        self.stats = GradientStatistics()
        self.profile = ThroughputProfile()
        self.progress = 0.0           # optimizer steps, in steps of the initial batch size
        self.figures = {}             # the last decision's model values (to_tensorboard)
        self.trajectory = []          # (optimizer step, local bsz, accum, global bsz, goodput)
        self.optim_steps = 0
        self.positions = {}           # epoch -> dataloader loops entered in it (AdaptDL's positions)



_job = _Job()
_store_names = [0]


def reset():
    """Forget the epoch loop, the training loader and the measurements of this process.

    AdaptDL runs one training per process; call this between two trainings in
    the same process (tests, notebooks). Not collective.
    """
    global _job
    _job = _Job()


def _deref(ref):
    return ref() if ref is not None else None


# ------------------------------------------------------- process group
def init_process_group(backend, init_method=None, world_size=None, rank=None):
    """``torch.distributed.init_process_group`` over the ranks of the MPI job (AdaptDL's signature).

    AdaptDL reads its scheduler's environment; here the ranks are those of
    ``MPI.COMM_WORLD``: rank 0 picks ``MASTER_ADDR`` (``127.0.0.1`` when all
    ranks share one host, else rank 0's host name; an ``MASTER_ADDR`` already
    set wins) and a free ``MASTER_PORT`` (unless set), and broadcasts them.
    ``backend``: ``"gloo"`` on CPU, ``"nccl"`` on GPUs. Collective over
    ``MPI.COMM_WORLD``. ``world_size``/``rank``, if given, must be MPI's.
    """
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"backend must be a torch.distributed backend name such as 'gloo', "
                         f"got {backend!r}")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size, me = comm.Get_size(), comm.Get_rank()
    err = None
    if dist.is_initialized():
        err = "torch.distributed is already initialised; call init_process_group once"
    elif world_size is not None and world_size != size:
        err = f"world_size={world_size} but the MPI job has {size} ranks; leave world_size=None"
    elif rank is not None and rank != me:
        err = f"rank={rank} but this MPI rank is {me}; leave rank=None"
    # Every rank raises the first failed rank's error, as a dataset's loading does.
    raise_agreed(comm, None if err is None else RuntimeError(err), "init_process_group")
    if init_method is None:
        hosts = comm.allgather(socket.gethostname())
        addr = port = None
        if me == 0:
            addr = os.environ.get("MASTER_ADDR") or (
                "127.0.0.1" if len(set(hosts)) == 1 else hosts[0])
            port = os.environ.get("MASTER_PORT")
            if not port:
                with socket.socket() as s:
                    s.bind(("" if len(set(hosts)) > 1 else "127.0.0.1", 0))
                    port = str(s.getsockname()[1])
        addr, port = comm.bcast((addr, port), root=0)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, port
        init_method = "env://"
    dist.init_process_group(backend, init_method=init_method, world_size=size, rank=me)
    atexit.register(_destroy_at_exit)


def _destroy_at_exit():
    # A gloo worker thread that drops the last reference to a Python-owned
    # tensor while the interpreter finalises aborts the process. Release the
    # model's reducer (which holds the process group) and the process group
    # while Python still runs, so that gloo joins its threads now.
    model = _deref(_job.model)
    if model is not None:
        model._hook_state.prev.clear()
        for attr in ("logger", "reducer", "process_group"):
            model.__dict__.pop(attr, None)
        del model
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def _world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1

