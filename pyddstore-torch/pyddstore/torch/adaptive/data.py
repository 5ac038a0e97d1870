"""The adaptive data loader: AdaptiveDataLoader, its helper and AdaptDL's ElasticSampler."""

import contextlib
import math
import operator
import time
import weakref

import torch
import torch.distributed as dist

from . import _state
from . import goodput as _gp
from .. import sampler as _sampler
from .._logging import logger
from ..loader import ThreadDataLoader
from ._state import _deref, _world
from .batchsize import SplitSizes, max_local_batch, plan_local_batch
from .epoch import current_dataloader


_STATE_VERSION = 2
# A new batch size must promise this much more goodput: measurements are
# noisy, and every change restarts the loader's prefetching.
_SPEEDUP_THRESHOLD = 1.05


# ------------------------------------------------------------ data loader
class ElasticSampler(_sampler.ElasticSampler):
    """AdaptDL's ``ElasticSampler(dataset, shuffle=True)``: partitions a dataset over the replicas, resumable.

    :class:`pyddstore.torch.sampler.ElasticSampler` in ``mode="adaptdl"``, with
    AdaptDL's signature: ``set_epoch(epoch, index)`` starts at position
    ``index % N`` of pass ``index // N`` of the epoch (``N = len(dataset)``;
    an ``index >= N`` is a position in a later pass, whose order differs
    when shuffling), ``len(sampler) == ceil((N - index % N) / num_replicas)``
    on every replica, and a replica short of that is given one more sample,
    the epoch's ``perm[rank]``. The order is AdaptDL's
    (``torch.randperm`` seeded by ``hash((epoch, index // N))``).

    ``num_replicas``, ``rank`` (keyword-only; AdaptDL takes them from its
    scheduler): default :func:`~pyddstore.torch.sampler.default_replicas`;
    as in AdaptDL they are plain attributes that may be set afterwards.
    ``seed`` (keyword-only, pyddstore's): added to AdaptDL's seed; 0 keeps
    AdaptDL's exact order. ``state_dict``/``load_state_dict`` are the
    parent class's.
    """

    def __init__(self, dataset, shuffle=True, *, num_replicas=None, rank=None, seed=0):
        super().__init__(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, mode="adaptdl")


def _check_bound(value, what):
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a positive int or None, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be a positive int or None, got {value!r}") from None
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return value


class AdaptiveDataLoaderHelper:
    """Batch-size schedule, position and profiling of one adaptive loader (AdaptDL's class).

    Parameters
    ----------
    batch_size : int
        Target global batch size; the actual one may be larger because every
        replica gets the same local size (rounded up), or because adaptive
        batch sizes scaled it up.
    num_replicas : int, keyword-only
        Replicas the data is split over (the loader passes its sampler's).
    """

    def __init__(self, batch_size=1, *, num_replicas=None):
        self.batch_size = _check_bound(batch_size, "batch_size")
        if self.batch_size is None:
            raise ValueError("batch_size must be a positive int (the global batch size)")
        self.num_replicas = num_replicas or _world()
        self._max_batch_size = None
        self._bounds = (1, None)
        self._accumulation = False
        self._sync_interval = 50
        self._local = -(-self.batch_size // self.num_replicas)
        self._accum = 0
        self._target = self.batch_size   # the global batch size _local/_accum split
        self._accum_count = 0
        self._index = 0
        self._index_epoch = None      # the epoch _index belongs to
        self._last_position = {}      # epoch -> position of this loader's last finished loop
        self._position = None         # position (in its epoch) of the loop being iterated
        self._skipping = False        # that loop finished before a restart
        self._pass_end = False        # the batch being yielded is the last of a pass
        self._dataset_len = None      # samples per pass, when the loader knows it
        self._steps_since_sync = 0
        self._pass_optim_steps = 0
        self.end_index = None

    # ------------------------------------------------------------ sizes
    current_local_bsz = SplitSizes.current_local_bsz
    accumulation_steps = SplitSizes.accumulation_steps
    current_batch_size = SplitSizes.current_batch_size

    @property
    def max_batch_size(self):
        """Largest global batch size for adaptive batch sizes; None while they are off."""
        return self._max_batch_size

    @property
    def local_bsz_bounds(self):
        """``(min_local_bsz, max_local_bsz)`` on each replica (``max`` may be None)."""
        return self._bounds

    @property
    def current_index(self):
        """Samples of this epoch consumed by all replicas so far; None when not being iterated."""
        if current_dataloader() is not self:
            return None
        return self._index

    @current_index.setter
    def current_index(self, value):
        self._index = operator.index(value)

    def is_accum_step(self):
        """Whether the current batch's gradient is only accumulated (no optimizer step after it)."""
        return self._accum_count < self._accum

    def is_optim_step(self):
        """Whether the optimizer steps after the current batch."""
        return not self.is_accum_step()

    # ----------------------------------------------------- configuration
    @property
    def training(self):
        """Whether this is the job's training loader (see :meth:`train`)."""
        return _deref(_state._job.training) is self

    def train(self):
        """Make this the loader used for training (its batches are profiled). Only one may be."""
        other = _deref(_state._job.training)
        if other is not None and other is not self:
            raise RuntimeError("another AdaptiveDataLoader is already the training loader: only "
                               "one may be (call autoscale_batch_size/train on one loader)")
        _state._job.training = weakref.ref(self)

    def autoscale_batch_size(self, max_batch_size, local_bsz_bounds=None,
                             gradient_accumulation=False, *, sync_interval=50):
        """Let goodput choose the batch size, up to ``max_batch_size`` in total (AdaptDL's signature).

        ``local_bsz_bounds``: ``(min, max)`` local batch size per replica
        (either may be None), e.g. what fits in memory;
        ``gradient_accumulation``: allow several batches per optimizer step.
        ``sync_interval`` (keyword-only, pyddstore's): optimizer steps
        between two choices (also made at every pass over the dataset).
        Makes this the training loader. Raises ``ValueError`` for bounds that
        cannot hold the initial batch size.
        """
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) \
                or max_batch_size < self.batch_size:
            raise ValueError(f"max_batch_size must be an int >= batch_size ({self.batch_size}), "
                             f"got {max_batch_size!r}")
        if local_bsz_bounds is None:
            local_bsz_bounds = (None, None)
        try:
            lo, hi = local_bsz_bounds
        except (TypeError, ValueError):
            raise ValueError(f"local_bsz_bounds must be a pair (min_local_bsz, max_local_bsz), "
                             f"got {local_bsz_bounds!r}") from None
        lo = _check_bound(lo, "local_bsz_bounds[0]") or 1
        hi = _check_bound(hi, "local_bsz_bounds[1]")
        if hi is not None and hi < lo:
            raise ValueError(f"local_bsz_bounds: max {hi} < min {lo}")
        if lo > self.batch_size:
            raise ValueError(f"local_bsz_bounds: min {lo} > batch_size {self.batch_size}")
        if not isinstance(gradient_accumulation, bool):
            raise ValueError(f"gradient_accumulation must be a bool, got {gradient_accumulation!r}")
        sync_interval = _check_bound(sync_interval, "sync_interval")
        if sync_interval is None:
            raise ValueError("sync_interval must be a positive int")
        try:
            local, accum = plan_local_batch(self.batch_size, self.num_replicas, min_local=lo,
                                            max_local=hi, gradient_accumulation=gradient_accumulation)
        except ValueError as e:
            raise ValueError(f"local_bsz_bounds {local_bsz_bounds!r}: {e}") from None
        _check_max_batch(local, accum, self.num_replicas, max_batch_size,
                         f"the initial batch {self.batch_size}")
        self._max_batch_size = max_batch_size
        self._bounds = (lo, hi)
        self._accumulation = gradient_accumulation
        self._sync_interval = sync_interval
        self._local, self._accum, self._target = local, accum, self.batch_size
        self.train()

    # ------------------------------------------------------- iteration
    @contextlib.contextmanager
    def context(self):
        """Iterate under this context: one dataloader loop (one at a time), as in AdaptDL.

        Loops are numbered in their epoch (over all loaders) in the order they
        start. When the loop ends, whether it ran to its end or was left
        (``break``, an exception), it counts as finished: the next loop over
        this loader starts at the beginning of a pass, and after a restart
        from a state taken later a loop finished before is skipped
        (:meth:`skipdone`).
        """
        cur = current_dataloader()
        if cur is not None and cur is not self:
            raise RuntimeError("another AdaptiveDataLoader is being iterated: only one dataloader "
                               "loop may run at a time")
        epoch = _state._job.current_epoch
        if epoch is None:
            raise RuntimeError("iterate an AdaptiveDataLoader inside an epoch loop: "
                               "for epoch in remaining_epochs_until(n): for batch in loader: ...")
        position = _state._job.positions.get(epoch, 0)
        _state._job.positions[epoch] = position + 1
        if self._index_epoch != epoch:
            self._index, self._index_epoch = 0, epoch
        # Finished epochs never run again: forget their loops.
        self._last_position = {e: p for e, p in self._last_position.items() if e >= epoch}
        skipping = position <= self._last_position.get(epoch, -1)
        self._position, self._skipping = position, skipping
        _state._job.current = weakref.ref(self)
        try:
            yield
        finally:
            _state._job.current = None
            self._position, self._skipping, self._pass_end = None, False, False
            if not skipping:
                self._last_position[epoch] = position
                self._index = 0

    def skipdone(self):
        """True if the loop being entered finished before the restart its state comes from: do not replay it.

        Call it first thing under :meth:`context` (AdaptDL's rule).
        """
        return self._skipping

    def _progress_done(self, progress):
        """With adaptive batch sizes: whether statistical progress ``progress`` ends the epoch."""
        n = self._dataset_len
        return bool(self._max_batch_size is not None and n
                    and progress >= n * (_state._job.current_epoch + 1) / self.batch_size)

    def _after_body(self, progress):
        """``(index, loop finished)`` once the body of the batch being yielded returns.

        ``progress``: the statistical progress then. What the loader does
        after that body: end the loop (the epoch's progress is reached, or,
        without adaptive batch sizes, the pass is over), go on with the next
        pass (the index rounded up to the next multiple of the dataset's
        length, as AdaptDL does) or go on in this one.
        """
        if self.is_optim_step() and self._progress_done(progress):
            return 0, True
        if self._pass_end:
            if self._max_batch_size is None:
                return 0, True
            return self._index + (-self._index) % self._dataset_len, False
        return self._index, False

    @contextlib.contextmanager
    def profile(self, commit):
        """Time one batch's loop body; ``commit``: record the time in the throughput profile.

        Must run the same number of times on every replica (it advances the
        accumulation counter).
        """
        optim = self.is_optim_step()
        start = time.perf_counter()
        try:
            yield
            if commit:
                _state._job.profile.record(self.num_replicas, self._local, "optim" if optim else "accum",
                                    time.perf_counter() - start)
        finally:
            # Counted also when the body leaves the loop (break, exception):
            # state_dict() taken in that body counts this step as done, and a
            # restart from it must meet the same counters as going on.
            if optim:
                self._accum_count = 0
                self._steps_since_sync += 1
                self._pass_optim_steps += 1
                _state._job.optim_steps += 1
                _state._job.progress += float(_gain(self.current_batch_size, self.batch_size))
            else:
                self._accum_count += 1

    def _sync_local_bsz(self):  # noqa: C901 - one decision, in order
        """Choose the local size and accumulation steps by goodput; returns True if they changed.

        Collective over torch.distributed when adaptive batch sizes are on and
        an AdaptiveDataParallel exists; only at the start of an accumulation
        cycle. Rank 0 decides from its profile and the (already agreed)
        gradient statistics and broadcasts the decision.
        """
        self._steps_since_sync = 0
        if self._max_batch_size is None or _deref(_state._job.model) is None or self._accum_count:
            return False
        if _state._job.trajectory and _state._job.trajectory[-1][0] == _state._job.optim_steps:
            return False          # already chosen at this step (a pass ended there)
        if not _state._job.stats.ready:
            return False
        k = self.num_replicas
        decision = torch.zeros(8, dtype=torch.float64)
        if dist.get_rank() == 0:
            perf = _state._job.profile.fit(k)
            if perf is not None:
                fn = _gp.GoodputFunction(perf, _state._job.stats.grad_params(self.batch_size),
                                         self.batch_size)
                best, local, accum = fn.optimize(k, self._max_batch_size, self._bounds,
                                                 self._accumulation)
                now = float(fn(k, self._local, self._accum))
                if not (now > 0 and best <= now * _SPEEDUP_THRESHOLD):
                    pick = (local, accum)
                else:
                    pick = (self._local, self._accum)
                chosen = float(fn(k, *pick))
                decision = torch.tensor(
                    [1.0, pick[0], pick[1], chosen, now,
                     float(fn.throughput(k, *pick)), float(fn.efficiency(k * pick[0] * (pick[1] + 1))),
                     fn.noise_scale()], dtype=torch.float64)
        dist.broadcast(decision, src=0)
        if decision[0] != 1.0:
            return False
        local, accum = int(decision[1]), int(decision[2])
        _state._job.figures = {"goodput": float(decision[3]), "goodput_before": float(decision[4]),
                        "throughput": float(decision[5]), "efficiency": float(decision[6]),
                        "noise_scale": float(decision[7])}
        changed = (local, accum) != (self._local, self._accum)
        if changed:
            self._local, self._accum = local, accum
            self._target = self.current_batch_size
        _state._job.trajectory.append((_state._job.optim_steps, local, accum, self.current_batch_size,
                                *(float(v) for v in decision[3:8])))
        if changed:
            logger.info("adaptive batch size: local %d x %d micro-batches x %d replicas = %d "
                        "(predicted goodput %.4g, was %.4g)", local, accum + 1, k,
                        self.current_batch_size, decision[3], decision[4])
        return changed

    # -------------------------------------------------------- metrics
    def to_tensorboard(self, writer, global_step, tag_prefix=""):
        """Write the batch sizes and the last goodput figures to a ``SummaryWriter``.

        Tags (after ``tag_prefix``): ``Total_Batch_Size``, ``Local_Batch_Size``,
        ``Accumulation_Steps``, ``Progress`` and, once a choice was made,
        ``Goodput``, ``Throughput``, ``Efficiency`` and ``Noise_Scale``.
        """
        if tag_prefix and not tag_prefix.endswith("/"):
            tag_prefix += "/"
        writer.add_scalar(tag_prefix + "Total_Batch_Size", self.current_batch_size, global_step)
        writer.add_scalar(tag_prefix + "Local_Batch_Size", self.current_local_bsz, global_step)
        writer.add_scalar(tag_prefix + "Accumulation_Steps", self.accumulation_steps, global_step)
        writer.add_scalar(tag_prefix + "Progress", _state._job.progress, global_step)
        names = {"goodput": "Goodput", "throughput": "Throughput", "efficiency": "Efficiency",
                 "noise_scale": "Noise_Scale"}
        for key, tag in names.items():
            value = _state._job.figures.get(key)
            if value is not None and math.isfinite(value):
                writer.add_scalar(tag_prefix + tag, value, global_step)

    @property
    def throughput_profile(self):
        """The job's :class:`~pyddstore.torch.adaptive.goodput.ThroughputProfile`: the step times measured."""
        return _state._job.profile

    @property
    def trajectory(self):
        """Every choice so far: ``(optimizer step, local bsz, accumulation steps, global bsz,
        predicted goodput, predicted goodput of the sizes before, predicted throughput,
        efficiency, noise scale)``."""
        return list(_state._job.trajectory)

    # ----------------------------------------------------------- state
    def state_dict(self):
        """Epoch loop, position, schedule and measurements, as plain values (save rank 0's).

        Take it at an optimizer step (in the body of a batch for which
        :meth:`is_optim_step` is True, or outside the loop), never between the
        batches of one accumulated step: RuntimeError there. In the body, the
        batch being trained on counts as consumed: the state is the one the
        loader will have once the body returns, so after the epoch's last
        batch it records the loop as finished (a restart does not replay it).
        """
        in_body = current_dataloader() is self
        if in_body and self.is_accum_step():
            raise RuntimeError("state_dict() at an accumulation step: the gradients of this "
                               "optimizer step are not applied yet; save at an optimizer step "
                               "(when is_optim_step() is True)")
        # In the body of an optimizer step the step is done once the state is
        # restored: count it as profile() will when the body returns.
        pending = 1 if in_body else 0
        progress = _state._job.progress + (
            float(_gain(self.current_batch_size, self.batch_size)) if pending else 0.0)
        index, last = self._index, dict(self._last_position)
        if in_body:
            index, finished = self._after_body(progress)
            if finished:
                last[_state._job.current_epoch] = self._position
        state = {
            "version": _STATE_VERSION,
            "batch_size": self.batch_size,
            "num_replicas": self.num_replicas,
            "local_bsz": self._local,
            "accumulation_steps": self._accum,
            "global_bsz": self.current_batch_size,
            "target_bsz": self._target,
            "index": index,
            "index_epoch": self._index_epoch,
            "last_position": [[e, p] for e, p in sorted(last.items())],
            "end_index": self.end_index,
            "finished_epochs": _state._job.finished_epochs,
            "max_batch_size": self._max_batch_size,
            "local_bsz_bounds": list(self._bounds),
            "gradient_accumulation": self._accumulation,
            "steps_since_sync": self._steps_since_sync + pending,
        }
        if self.training:
            state["job"] = {"stats": _state._job.stats.state_dict(), "profile": _state._job.profile.state_dict(),
                            "progress": progress, "optim_steps": _state._job.optim_steps + pending,
                            "trajectory": [list(t) for t in _state._job.trajectory],
                            "figures": dict(_state._job.figures)}
        return state

    def load_state_dict(self, state):
        """Restore :meth:`state_dict`, possibly saved on another number of replicas.

        On another number of replicas the local size and accumulation steps
        are recomputed for this one from the global batch size the saved
        ones were a split of, not from that split's rounded-up total (which
        would grow with every restart): the ``batch_size`` given to the
        loader without adaptive batch sizes, else the last choice by goodput
        (kept within ``[batch_size, max_batch_size]``), split within
        ``local_bsz_bounds`` as :meth:`autoscale_batch_size` does and checked
        against ``max_batch_size`` the same way (``ValueError`` if the bounds
        cannot hold it on this number of replicas; the loader is then left
        as it was). The adaptive batch-size settings saved
        (``max_batch_size``, ``local_bsz_bounds``, ``gradient_accumulation``)
        replace the loader's. The next choice by goodput then starts from
        there, at the step it is due.
        """
        if not isinstance(state, dict) or "version" not in state:
            raise ValueError("state must be a dict from AdaptiveDataLoader.state_dict()")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"the state has version {state['version']} but this pyddstore reads "
                             f"version {_STATE_VERSION}: resume it with the pyddstore that saved it")
        if state["batch_size"] != self.batch_size:
            raise ValueError(f"the state was saved with batch_size={state['batch_size']} but this "
                             f"loader has {self.batch_size}: build it with the saved batch_size")
        max_batch, bounds, accumulation = self._max_batch_size, self._bounds, self._accumulation
        if state["max_batch_size"] is not None:
            max_batch = state["max_batch_size"]
            bounds = tuple(state["local_bsz_bounds"])
            accumulation = bool(state["gradient_accumulation"])
        local, accum, target = state["local_bsz"], state["accumulation_steps"], state["target_bsz"]
        if state["num_replicas"] != self.num_replicas:
            if max_batch is None:
                target = self.batch_size
            else:
                target = min(max(target, self.batch_size), max_batch)
            what = (f"the global batch {target} (saved on {state['num_replicas']} replicas) on "
                    f"{self.num_replicas}")
            try:
                local, accum = plan_local_batch(target, self.num_replicas, min_local=bounds[0],
                                                max_local=bounds[1],
                                                gradient_accumulation=accumulation)
            except ValueError as e:
                raise ValueError(f"{what}: {e}") from None
            if max_batch is not None:
                _check_max_batch(local, accum, self.num_replicas, max_batch, what)
        self._max_batch_size, self._bounds, self._accumulation = max_batch, bounds, accumulation
        self._local, self._accum, self._target, self._accum_count = local, accum, target, 0
        self._index, self._index_epoch = state["index"], state["index_epoch"]
        self._last_position = {int(e): int(p) for e, p in state["last_position"]}
        self.end_index = state["end_index"]
        _state._job.finished_epochs = state["finished_epochs"]
        self._steps_since_sync = int(state.get("steps_since_sync", 0))
        job = state.get("job")
        if job is not None:
            self.train()
            _state._job.stats.load_state_dict(job["stats"])
            _state._job.profile.load_state_dict(job["profile"])
            _state._job.progress, _state._job.optim_steps = float(job["progress"]), int(job["optim_steps"])
            _state._job.trajectory = [tuple(t) for t in job["trajectory"]]
            _state._job.figures = dict(job["figures"])


def _check_max_batch(local, accum, num_replicas, max_batch_size, what):
    """ValueError unless ``local`` is within what AdaptDL's rounding of ``max_batch_size`` allows."""
    if local > max_local_batch(max_batch_size, num_replicas, accum):
        raise ValueError(f"{what} needs {local} x {accum + 1} per replica on {num_replicas} "
                         f"replicas, over max_batch_size {max_batch_size} (at most "
                         f"{max_local_batch(max_batch_size, num_replicas, accum)} per replica): "
                         f"raise max_batch_size, lower the minimum of local_bsz_bounds or use "
                         f"fewer replicas")


def _gain(batch_size, init_batch_size):
    if not _state._job.stats.ready:
        return 1.0
    fn = _gp.GoodputFunction(_gp.PerfParams(0.0, 0.0, {}), _state._job.stats.grad_params(init_batch_size),
                             init_batch_size)
    return float(fn.gain(batch_size))


class _FromHelper:
    """A member of AdaptiveDataLoaderMixin that is its helper's member of the same name
    (``loader.x`` is ``loader._elastic.x``, a method then bound to the helper):
    the one way the mixin exposes the helper, instead of a forwarding method each."""

    def __init__(self, settable=False, doc=None):
        self.settable = settable
        self.__doc__ = doc

    def __set_name__(self, owner, name):
        self.name = name
        if self.__doc__ is None:
            kind = "meth" if callable(getattr(AdaptiveDataLoaderHelper, name, None)) else "attr"
            self.__doc__ = f"See :{kind}:`AdaptiveDataLoaderHelper.{name}`."

    def __get__(self, loader, owner=None):
        if loader is None:
            return self
        return getattr(loader._elastic, self.name)

    def __set__(self, loader, value):
        if not self.settable:
            raise AttributeError(f"{self.name} cannot be set (it is the helper's: see "
                                 f"AdaptiveDataLoaderHelper.{self.name})")
        setattr(loader._elastic, self.name, value)


class AdaptiveDataLoaderMixin:
    """Adaptive batch sizes for a custom loader (AdaptDL's class): ``self._elastic`` is its helper.

    Its public members are the helper's (:class:`AdaptiveDataLoaderHelper`), read
    through: AdaptDL's (``autoscale_batch_size``, ``current_local_bsz``,
    ``accumulation_steps``, ``current_batch_size``, ``training``,
    ``to_tensorboard``) and those the training loop uses (``is_optim_step``,
    ``current_index``, ``trajectory``, ...). ``end_index`` may be set: it is free
    for the script's use, saved and restored with the state (AdaptDL's name).
    """

    def __init__(self, batch_size, *, num_replicas=None):
        self._elastic = AdaptiveDataLoaderHelper(batch_size, num_replicas=num_replicas)

    autoscale_batch_size = _FromHelper()
    current_local_bsz = _FromHelper()
    accumulation_steps = _FromHelper()
    current_batch_size = _FromHelper()
    current_index = _FromHelper()
    end_index = _FromHelper(settable=True, doc="Free for the script's use; saved and restored "
                                           "with the state (AdaptDL's name).")
    local_bsz_bounds = _FromHelper()
    max_batch_size = _FromHelper()
    training = _FromHelper()
    train = _FromHelper()
    is_accum_step = _FromHelper()
    is_optim_step = _FromHelper()
    context = _FromHelper()
    profile = _FromHelper()
    skipdone = _FromHelper()
    to_tensorboard = _FromHelper()
    throughput_profile = _FromHelper()
    trajectory = _FromHelper()


class AdaptiveDataLoader(ThreadDataLoader, AdaptiveDataLoaderMixin):
    """AdaptDL's ``AdaptiveDataLoader(dataset, batch_size=1, shuffle=False, **kwargs)`` over DDStore.

    A :class:`~pyddstore.torch.ThreadDataLoader` with an :class:`ElasticSampler`
    (AdaptDL's order). Differences from a DataLoader, as in AdaptDL:

    1. ``batch_size`` is the global batch size over all replicas; each replica
       gets ``ceil(batch_size / replicas)`` (or what
       :meth:`AdaptiveDataLoaderHelper.autoscale_batch_size` chooses).
    2. ``sampler`` and ``batch_sampler`` are refused (``ValueError``).
    3. Iterate only inside ``for epoch in remaining_epochs_until(n)``, one
       loader at a time.

    ``dataset``: a :class:`~pyddstore.torch.DistDataset` (or any dataset with
    a ``ddstore``); any other map-style dataset is first loaded into a
    DistDataset named ``adaptdl-<k>`` (collective, every rank loads its share;
    freed by :meth:`close`). ``**kwargs`` go to ThreadDataLoader (``num_workers``
    threads, ``drop_last``, ``collate_fn``, ...).

    Iteration: without adaptive batch sizes, one pass over the dataset split
    among the replicas (~1/K of it each). With them, the epoch lasts until the
    statistical progress equals one pass at the initial batch size (the
    dataset may then be seen more than once), and the batch size may change
    between two optimizer steps. The position is resumable: see
    :meth:`state_dict`.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, **kwargs):
        if kwargs.get("sampler") is not None or kwargs.get("batch_sampler") is not None:
            raise ValueError("AdaptiveDataLoader does not support a custom sampler or batch_sampler "
                             "(it uses an ElasticSampler); pass shuffle= instead")
        kwargs.pop("sampler", None)
        kwargs.pop("batch_sampler", None)
        if kwargs.get("reuse_buffers"):
            raise ValueError("AdaptiveDataLoader changes its local batch size: reuse_buffers=True "
                             "(buffers of a fixed size) is not supported")
        owned = None
        if getattr(dataset, "ddstore", None) is None:
            from ..dataset import DistDataset

            name = f"adaptdl-{_state._store_names[0]}"
            _state._store_names[0] += 1
            dataset = owned = DistDataset(dataset, name)
        sampler = ElasticSampler(dataset, shuffle=shuffle)
        AdaptiveDataLoaderMixin.__init__(self, batch_size, num_replicas=sampler.num_replicas)
        self._elastic._dataset_len = len(dataset)
        self._owned_store = owned
        super().__init__(dataset, batch_size=self._elastic.current_local_bsz, sampler=sampler,
                         **kwargs)

    def __iter__(self):
        """Batches of the current epoch, from the saved position (see the class docs).

        As in AdaptDL, every loop is a new one: a loop left with ``break``
        counts as finished, and iterating again starts at the beginning of a
        pass (only a restart from :meth:`load_state_dict` continues a loop in
        the middle).
        """
        h = self._elastic
        epoch = _state._job.current_epoch
        n = len(self.dataset)
        k = self.sampler.num_replicas
        with h.context():
            if h.skipdone():
                return
            done = False
            h._pass_optim_steps = 0
            resized = False
            # Entered mid-pass (a restart): choose only if a choice is due, so
            # that the decision points, and so the batches, are those of the
            # run that saved the state.
            entered_mid_pass = n > 0 and h._index % n != 0
            while not done:
                if not resized and (not entered_mid_pass
                                    or h._steps_since_sync >= h._sync_interval):
                    h._sync_local_bsz()
                entered_mid_pass = False
                whole_pass = n > 0 and h._index % n == 0
                self.sampler.set_epoch(epoch, h._index)
                self.batch_sampler.batch_size = h.current_local_bsz
                total = len(self.batch_sampler)
                it = super().__iter__()
                resized = False
                count = 0
                try:
                    for batch in it:
                        count += 1
                        h._index += k * h.current_local_bsz
                        h._pass_end = count == total
                        optim = h.is_optim_step()
                        with h.profile(self.training and count >= 2):
                            yield batch
                        h._pass_end = False
                        if not optim:
                            continue
                        if h._progress_done(_state._job.progress):
                            done = True
                            break
                        if h._steps_since_sync >= h._sync_interval and h._sync_local_bsz():
                            resized = True
                            break
                finally:
                    it.close()
                if done or (resized and count < total):
                    continue              # finished, or resized in the middle of the pass
                if h.max_batch_size is None:
                    break                 # one pass
                if whole_pass and h._pass_optim_steps == 0 and not h.is_accum_step():
                    # A pass shorter than one optimizer step, no progress possible
                    # (a pass resumed near its end may rightly have none).
                    raise RuntimeError("the dataset is smaller than one batch per replica: "
                                       "lower batch_size or use fewer ranks")
                # Next pass: round the position up to the start of the next pass.
                h._index += (-h._index) % n if n else 0
                h._pass_optim_steps = 0

    def __len__(self):
        """Batches of one pass over the dataset at the current local batch size, on this replica."""
        per = -(-len(self.dataset) // self.sampler.num_replicas)
        b = self._elastic.current_local_bsz
        return per // b if self.drop_last else -(-per // b)

    def state_dict(self):
        """Position, schedule and measurements (see :meth:`AdaptiveDataLoaderHelper.state_dict`)."""
        state = self._elastic.state_dict()
        state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict`, on this or another number of ranks."""
        sampler_state = state.get("sampler") if isinstance(state, dict) else None
        if sampler_state is None:
            raise ValueError("state must be a dict from AdaptiveDataLoader.state_dict()")
        # Checks that this process computes the saved order (same dataset length, torch,
        # Python) before anything else changes; the position is set when iterating.
        self.sampler.load_state_dict(sampler_state)
        self._elastic.load_state_dict(state)

    def close(self):
        """Stop the loader threads; free the DistDataset this loader created, if any (collective then)."""
        super().close()
        owned, self._owned_store = getattr(self, "_owned_store", None), None
        if owned is not None:
            owned.free()

