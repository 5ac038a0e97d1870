"""Resumable, elastic distributed sampling.

:class:`ElasticSampler` partitions a map-style dataset among data-parallel
replicas so that every replica gets the same number of samples (DDP never
hangs on a missing batch), the order depends only on ``(seed, epoch)``, and a
job restarted mid-epoch, on the same or on a different number of replicas,
continues with exactly the samples that were not consumed yet.
"""

import hashlib
import operator

import torch
from torch.utils.data import Sampler

__all__ = ["ElasticSampler", "default_replicas"]

_MODES = ("elastic", "torch", "adaptdl")
_STATE_VERSION = 1
# The fingerprint covers a bounded prefix of the epoch's order: enough to tell
# two different permutations apart, cheap for any dataset size.
_FINGERPRINT_LEN = 4096


def default_replicas(dataset=None):
    """Return ``(num_replicas, rank)`` for data-parallel sampling.

    Looked up in this order, first match wins:

    1. ``dataset.ddstore`` (a :class:`~pyddstore.torch.DistDataset`): the
       communicator the store was created over, ``(size, rank)``. With
       ``ddstore_width`` smaller than that communicator every group holds a
       full copy of the data, and all ranks still train one model together,
       so the samples are split over all of them, not over one group (which
       would make every group read the whole dataset each epoch). A method-2
       reader store (no communicator) is skipped: its group is the core job,
       not the reading job's replicas.
    2. ``torch.distributed`` when it is initialised: world size and rank.
    3. ``mpi4py``'s ``MPI.COMM_WORLD`` (imported only now, so that importing
       this module never starts MPI).
    4. ``(1, 0)`` when mpi4py is not installed.

    Pass ``num_replicas``/``rank`` to the sampler to split differently (for
    example over one group only).
    """
    store = getattr(dataset, "ddstore", None) if dataset is not None else None
    if store is not None and getattr(store, "comm", None) is not None:
        return int(store.size), int(store.rank)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    try:
        from mpi4py import MPI
    except ImportError:
        return 1, 0
    comm = MPI.COMM_WORLD
    return comm.Get_size(), comm.Get_rank()


def as_int(value, what):
    """`value` as an int (numpy integers too); TypeError naming `what` for a bool,
    float or anything else."""
    # operator.index accepts numpy integers (common for epochs read back from
    # checkpoints) but rejects floats and bools-as-strings with a clear error.
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{what} must be an integer, got {type(value).__name__} {value!r}"
        ) from None


def elastic_seed(seed, epoch):
    """The 63-bit generator seed of ElasticSampler's (and BudgetBatchSampler's) order for (seed, epoch)."""
    # torch's seed + epoch makes (seed=s, epoch=e+1) replay (seed=s+1, epoch=e);
    # a cryptographic hash of the pair gives unrelated orders for every pair
    # and is stable across Python, numpy and torch versions.
    digest = hashlib.blake2b(
        f"pyddstore.ElasticSampler/{seed}/{epoch}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def _torch_seed_value(value):
    # Generator.manual_seed accepts [-2**63, 2**64 - 1]; wrap anything else so
    # that large user seeds never make iteration fail.
    if -(1 << 63) <= value <= (1 << 64) - 1:
        return value
    return value % (1 << 64)


class ElasticSampler(Sampler):
    """Distributed sampler that survives restarts on a different number of replicas.

    Each epoch has one global order of the dataset, a deterministic function
    of ``(seed, epoch)`` (and of nothing else: not the number of replicas, not
    the rank). Replicas take that order round-robin: replica ``r`` of ``R``
    gets positions ``index + r``, ``index + r + R``, ... where ``index`` is
    the number of samples all replicas together have consumed so far in the
    epoch. Every replica gets the same number of samples: the tail is padded
    by continuing cyclically through the epoch's order (so a padded sample is
    one seen earlier in the epoch, and no sample is seen more than once more
    than any other), or cut with ``drop_last=True``.

    Because consumption is a prefix of the epoch's order, the position is a
    single number. Save :meth:`state_dict` with your checkpoint (or let
    :class:`~pyddstore.torch.adaptive.resume.ResumableLoader` track it per batch),
    restart on any number of replicas, :meth:`load_state_dict`, and the
    remaining samples are split among the new replicas: nothing is lost and
    nothing is repeated except the padding at the very end.

    Parameters
    ----------
    dataset : map-style dataset
        Anything with ``len()``; a :class:`~pyddstore.torch.DistDataset`
        also supplies the default replicas and rank.
    num_replicas, rank : int, optional
        Default: see :func:`default_replicas` (the store group of
        ``dataset.ddstore``, else ``torch.distributed``, else
        ``MPI.COMM_WORLD``, else 1 and 0).
    shuffle : bool
        Permute the dataset every epoch (else the order is ``0..N-1``).
    seed : int
        Must be the same on every replica.
    drop_last : bool
        Cut the tail to a multiple of the number of replicas instead of padding.
    mode : {'elastic', 'torch', 'adaptdl'}, keyword-only
        ``'elastic'`` (default): the order above, permutation seeded by a
        hash of ``(seed, epoch)``.
        ``'torch'``: the same partitioning with torch's seeding
        (``seed + epoch``); at ``index=0`` the indices are exactly those of
        :class:`torch.utils.data.DistributedSampler` with the same arguments,
        so switching changes nothing; with ``index > 0`` it resumes like
        ``'elastic'``.
        ``'adaptdl'``: AdaptDL's ``ElasticSampler``: the permutation is seeded
        by Python's ``hash((epoch, index // N))`` (plus ``seed``, which
        AdaptDL does not have; ``seed=0`` gives AdaptDL's exact order), the
        start is ``index % N`` (so ``index`` may count several passes), and a
        short replica is padded with one sample, ``perm[rank]``.
        ``drop_last`` is not available in this mode.

    Example: restart on a different number of replicas
    ---------------------------------------------------
    A job on 4 replicas checkpoints in epoch 3 after 10 steps of local batch
    8, i.e. 10 * 8 * 4 = 320 samples consumed by all replicas together, and
    is restarted on 2::

        sampler = ElasticSampler(ds, seed=1234)            # 4 replicas
        sampler.set_epoch(3)
        ...                                                # 10 steps of local batch 8
        state = sampler.state_dict()
        state["index"] = sampler.index_after(10 * 8)       # 320
        torch.save({"sampler": state, "model": ...}, "ckpt.pt")

        # --- restarted on 2 replicas ---
        sampler = ElasticSampler(ds, seed=1234)            # 2 replicas
        sampler.load_state_dict(torch.load("ckpt.pt")["sampler"])
        loader = DataLoader(ds, batch_size=16, sampler=sampler)
        # epoch 3 continues at position 320 of its order: the remaining
        # len(ds) - 320 samples are split between the 2 replicas.

    :class:`~pyddstore.torch.adaptive.resume.ResumableLoader` does this bookkeeping
    per batch; ``sampler.set_epoch(epoch, index)`` does it with numbers you
    kept yourself.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True,
                 seed=0, drop_last=False, *, mode="elastic"):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        try:
            n = len(dataset)
        except TypeError:
            raise TypeError(
                "ElasticSampler needs a map-style dataset with len(); "
                f"{type(dataset).__name__} has none"
            ) from None
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        if not isinstance(drop_last, bool):
            raise TypeError(f"drop_last must be a bool, got {drop_last!r}")
        if mode == "adaptdl" and drop_last:
            raise ValueError(
                "mode='adaptdl' pads like AdaptDL and has no drop_last; "
                "use mode='elastic' for drop_last=True"
            )
        seed = as_int(seed, "seed")
        if num_replicas is None or rank is None:
            default_n, default_r = default_replicas(dataset)
            if num_replicas is None:
                num_replicas = default_n
            if rank is None:
                rank = default_r
        num_replicas = as_int(num_replicas, "num_replicas")
        rank = as_int(rank, "rank")
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"rank must be in [0, {num_replicas - 1}] for "
                f"num_replicas={num_replicas}, got {rank}"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.mode = mode
        self._len = n
        self.epoch = 0
        self.index = 0
        self._perm_key = None
        self._perm = None

    # ----------------------------------------------------------- the order
    def _permutation(self):
        """The epoch's global order as an int64 tensor of length N (cached)."""
        n = self._len
        if not self.shuffle:
            key = ("range",)
        elif self.mode == "elastic":
            key = ("elastic", elastic_seed(self.seed, self.epoch))
        elif self.mode == "torch":
            key = ("torch", _torch_seed_value(self.seed + self.epoch))
        else:
            # Python's tuple hash of ints does not depend on PYTHONHASHSEED,
            # so every replica (and a restarted job on the same Python)
            # computes the same value.
            h = hash((self.epoch, self.index // n)) if n else 0
            key = ("adaptdl", _torch_seed_value(h + self.seed) if self.seed else h)
        if key != self._perm_key:
            if key[0] == "range":
                perm = torch.arange(n, dtype=torch.int64)
            else:
                g = torch.Generator()
                g.manual_seed(key[1])
                perm = torch.randperm(n, generator=g)
            self._perm_key, self._perm = key, perm
        return self._perm

    def _base(self):
        """Position in the epoch's order where this iteration starts."""
        if self.mode == "adaptdl":
            return self.index % self._len if self._len else 0
        return min(self.index, self._len)

    def _local_count(self):
        remaining = self._len - self._base()
        if remaining <= 0:
            return 0
        if self.drop_last:
            return remaining // self.num_replicas
        return -(-remaining // self.num_replicas)

    def __iter__(self):
        """Indices for this replica, from the set position to the end of the epoch."""
        count = self._local_count()
        if count == 0:
            return iter(())
        perm = self._permutation()
        n, base, R = self._len, self._base(), self.num_replicas
        pos = base + self.rank + R * torch.arange(count, dtype=torch.int64)
        if self.mode == "adaptdl":
            # AdaptDL pads the one missing slot with perm[rank] rather than
            # wrapping around.
            pos = torch.where(pos < n, pos, torch.full_like(pos, self.rank % n))
        else:
            pos = pos % n
        return iter(perm[pos].tolist())

    def __len__(self):
        """Number of indices this replica yields from the set position (equal on all replicas)."""
        return self._local_count()

    @property
    def num_samples(self):
        """Same as ``len(sampler)`` (name kept from DistributedSampler)."""
        return self._local_count()

    @property
    def total_size(self):
        """Samples all replicas together yield from the set position, padding included."""
        return self._local_count() * self.num_replicas

    @property
    def dataset_len(self):
        """``len(dataset)`` when the sampler was built."""
        return self._len

    def set_epoch(self, epoch, index=0):
        """Select the epoch's order and the position to start at.

        Parameters
        ----------
        epoch : int
            The epoch; different epochs give different orders when shuffling.
        index : int
            Samples of this epoch already consumed by all replicas together
            (e.g. steps * local batch size * replicas of the run that was
            interrupted). Iteration starts there; ``index >= len(dataset)``
            leaves nothing to yield (except in mode 'adaptdl', where it
            selects a later pass, as in AdaptDL).
        """
        epoch = as_int(epoch, "epoch")
        index = as_int(index, "index")
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        self.epoch = epoch
        self.index = index

    def index_after(self, local_samples):
        """Global position after every replica consumed ``local_samples`` more samples.

        This is what to pass to :meth:`set_epoch` (or what
        :class:`~pyddstore.torch.adaptive.resume.ResumableLoader` records) after each
        replica took that many indices from this iteration.
        """
        local_samples = as_int(local_samples, "local_samples")
        if not 0 <= local_samples <= self._local_count():
            raise ValueError(
                f"local_samples must be in [0, {self._local_count()}] "
                f"(len of this sampler), got {local_samples}"
            )
        return self.index + local_samples * self.num_replicas

    # ------------------------------------------------------------- state
    def _fingerprint(self):
        # Detects a restart whose order differs from the saved run's (another
        # torch version's randperm, another Python's hash in mode 'adaptdl'),
        # which would silently lose and repeat samples.
        if self._len == 0:
            return ""
        head = self._permutation()[:_FINGERPRINT_LEN].contiguous()
        return hashlib.blake2b(head.numpy().tobytes(), digest_size=8).hexdigest()

    def state_dict(self):
        """The position as a small dict of plain Python values.

        Keys: ``epoch``, ``index`` (samples consumed by all replicas), ``seed``,
        and, for checking on load, ``mode``, ``shuffle``, ``drop_last``,
        ``dataset_len``, ``order_fingerprint``; ``num_replicas`` is recorded
        for information only (a restart may use any number).
        """
        return {
            "version": _STATE_VERSION,
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "mode": self.mode,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "dataset_len": self._len,
            "num_replicas": self.num_replicas,
            "order_fingerprint": self._fingerprint(),
        }

    def load_state_dict(self, state):
        """Restore epoch, index and seed saved by :meth:`state_dict`.

        The replicas and rank stay this sampler's own, so the remaining
        samples are split among the current replicas. Raises ``ValueError``
        if the state was saved with another mode, shuffle, drop_last or
        dataset length, or if this process would produce a different order
        for the saved epoch.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("epoch", "index", "seed") if k not in state]
        if missing:
            raise ValueError(f"state is missing {missing}: pass a dict from ElasticSampler.state_dict()")
        for key, mine in (("mode", self.mode), ("shuffle", self.shuffle),
                          ("drop_last", self.drop_last), ("dataset_len", self._len)):
            if key in state and state[key] != mine:
                raise ValueError(
                    f"state was saved with {key}={state[key]!r} but this sampler has "
                    f"{key}={mine!r}: build the sampler with the saved settings"
                )
        seed = as_int(state["seed"], "seed")
        old = (self.seed, self.epoch, self.index)
        self.seed = seed
        try:
            self.set_epoch(state["epoch"], state["index"])
            expected = state.get("order_fingerprint")
            if expected is not None and expected != self._fingerprint():
                raise ValueError(
                    "the saved epoch's sample order differs from the one this process "
                    "computes (different torch version, or Python version in mode "
                    "'adaptdl'?): resuming would lose and repeat samples"
                )
        except Exception:
            self.seed, self.epoch, self.index = old
            raise

    def __repr__(self):
        return (f"ElasticSampler(len={self._len}, num_replicas={self.num_replicas}, "
                f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
                f"drop_last={self.drop_last}, mode={self.mode!r}, epoch={self.epoch}, "
                f"index={self.index})")
