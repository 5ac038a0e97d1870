"""Global batch size -> local batch size and gradient accumulation.

Data-parallel users think in global batch sizes (the number of samples per
optimizer step over all replicas), but a DataLoader takes a local one, and a
global size that does not fit in one replica's memory needs gradient
accumulation. :class:`GlobalBatchSize` does that arithmetic the way AdaptDL's
``AdaptiveDataLoaderHelper`` does for a fixed batch size (ceil rounding, so
each replica gets the same local size and the actual global size is at least
the target), with bounds on the local size, and lets an outside controller
change the target between epochs.

Choosing the batch size from measured goodput, as AdaptDL does, is
:mod:`pyddstore.torch.adaptive`'s job; :meth:`GlobalBatchSize.set_batch_size`
is where another controller plugs in.
"""

import operator

import numpy as np

from ..sampler import default_replicas

__all__ = ["GlobalBatchSize"]


def _positive_int(value, what, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a positive integer, got bool {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be a positive integer, got {value!r}") from None
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return value


def split_batch(batch_size, num_replicas, *, min_local=1, max_local=None,
                gradient_accumulation=False):
    """AdaptDL's split of a global batch size: ``(local_batch_size, accumulation_steps)``.

    ``steps = ceil(batch_size / (num_replicas * max_local))`` micro-batches per
    optimizer step with ``gradient_accumulation`` (else 1), ``local =
    ceil(batch_size / (num_replicas * steps))``, then clamped into
    ``[min_local, max_local]``. Works elementwise on numpy integer arrays
    (``batch_size`` may be one) and never raises: a clamp to ``max_local``
    without accumulation gives a global batch below ``batch_size``, which
    :func:`plan_local_batch` refuses. Arguments are not checked.
    """
    steps = 1
    if gradient_accumulation and max_local is not None:
        steps = np.maximum(-(-batch_size // (num_replicas * max_local)), 1)
    local = np.maximum(-(-batch_size // (num_replicas * steps)), min_local)
    if max_local is not None:
        local = np.minimum(local, max_local)
    return local, steps - 1


def max_local_batch(max_batch_size, num_replicas, accumulation_steps=0):
    """Largest local batch that :func:`split_batch` gives for a global batch of at most ``max_batch_size``.

    A replica's share of ``max_batch_size`` rounded up, ``ceil(max_batch_size
    / (num_replicas * (accumulation_steps + 1)))``: as in AdaptDL, the actual
    global batch may exceed ``max_batch_size`` by less than one sample per
    replica and micro-batch (128 on 3 replicas: 43 each, 129 in total).
    """
    return -(-max_batch_size // (num_replicas * (accumulation_steps + 1)))


def plan_local_batch(batch_size, num_replicas, *, min_local=1, max_local=None,
                     gradient_accumulation=False):
    """Split a global batch size: returns ``(local_batch_size, accumulation_steps)``.

    ``local = ceil(batch_size / num_replicas)`` as in AdaptDL. If that exceeds
    ``max_local``: with ``gradient_accumulation`` the batch is split into
    ``k = ceil(local / max_local)`` micro-batches per optimizer step,
    ``local = ceil(batch_size / (num_replicas * k))`` and
    ``accumulation_steps = k - 1``; without it, ``ValueError``. A local size
    below ``min_local`` is raised to ``min_local`` (the actual global batch is
    then larger than asked). The actual global batch size is
    ``local * (accumulation_steps + 1) * num_replicas >= batch_size``
    (:func:`split_batch` with the arguments checked).
    """
    batch_size = _positive_int(batch_size, "batch_size")
    num_replicas = _positive_int(num_replicas, "num_replicas")
    min_local = _positive_int(min_local, "min_local")
    max_local = _positive_int(max_local, "max_local", allow_none=True)
    if max_local is not None and max_local < min_local:
        raise ValueError(f"max_local ({max_local}) must be >= min_local ({min_local})")
    local = -(-batch_size // num_replicas)
    if max_local is not None and local > max_local and not gradient_accumulation:
        raise ValueError(
            f"global batch size {batch_size} on {num_replicas} replicas needs a local "
            f"batch of {local} > max_local={max_local}: pass gradient_accumulation=True, "
            f"raise max_local, or use more replicas"
        )
    local, accum = split_batch(batch_size, num_replicas, min_local=min_local, max_local=max_local,
                               gradient_accumulation=gradient_accumulation)
    return int(local), int(accum)


class SplitSizes:
    """AdaptDL's three sizes of a global batch split over replicas, as properties.

    One definition for :class:`GlobalBatchSize` and
    :class:`pyddstore.torch.adaptive.AdaptiveDataLoaderHelper`, which bind
    them in their class bodies (so the API docs list them on each class) and
    keep ``_local`` (samples per replica per micro-batch), ``_accum``
    (micro-batches per optimizer step minus one) and ``num_replicas``.
    """

    @property
    def current_local_bsz(self):
        """Samples per replica per micro-batch (the batch each replica's loader yields)."""
        return self._local

    @property
    def accumulation_steps(self):
        """Micro-batches per optimizer step minus one (0: no accumulation), as in AdaptDL."""
        return self._accum

    @property
    def current_batch_size(self):
        """Actual global samples per optimizer step: local * (accumulation_steps + 1) * replicas."""
        return self._local * (self._accum + 1) * self.num_replicas


class GlobalBatchSize:
    """Local batch size and gradient-accumulation schedule for a global batch size.

    Parameters
    ----------
    batch_size : int
        Target global batch size: samples per optimizer step over all replicas.
    num_replicas : int, optional
        Default: :func:`~pyddstore.torch.sampler.default_replicas` of
        ``dataset`` (give the same dataset as the sampler's).
    dataset : optional, keyword-only
        Only used to find the default ``num_replicas``.
    min_local, max_local : int, keyword-only
        Bounds on the local (per-replica, per-micro-batch) size, e.g. what
        fits in GPU memory. ``max_local=None``: no upper bound.
    gradient_accumulation : bool, keyword-only
        Allow splitting an optimizer step into several micro-batches when
        the local size would exceed ``max_local``.

    Attributes ``current_local_bsz``, ``accumulation_steps`` and
    ``current_batch_size`` follow AdaptDL's names and meanings: each
    optimizer step consumes ``accumulation_steps + 1`` micro-batches of
    ``current_local_bsz`` samples per replica, ``current_batch_size`` samples
    in total. All values are computed from the arguments alone, so they agree
    on every replica without communication.

    Use it with :class:`~pyddstore.torch.adaptive.resume.ResumableLoader`, which sets
    the loader's local batch size at the start of every iteration and tells
    this object where each micro-batch falls::

        gbs = GlobalBatchSize(256, max_local=32, gradient_accumulation=True)
        loader = ResumableLoader(DataLoader(ds, batch_size=gbs.current_local_bsz,
                                            sampler=ElasticSampler(ds)),
                                 global_batch_size=gbs)
        for epoch in range(loader.epoch, epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                with model.no_sync() if gbs.is_accum_step() else nullcontext():
                    loss_fn(model(batch)).backward()
                if gbs.is_optim_step():
                    opt.step(); opt.zero_grad()
            gbs.set_batch_size(new_size)   # e.g. from an external autoscaler

    Without a ResumableLoader, call :meth:`begin_epoch` before the loop and
    :meth:`advance` after each micro-batch. Goodput-based autoscaling is in
    :mod:`pyddstore.torch.adaptive`; :meth:`set_batch_size` is where an
    external controller changes the size.
    """

    def __init__(self, batch_size, num_replicas=None, *, dataset=None, min_local=1,
                 max_local=None, gradient_accumulation=False):
        if not isinstance(gradient_accumulation, bool):
            raise TypeError(f"gradient_accumulation must be a bool, got {gradient_accumulation!r}")
        if num_replicas is None:
            num_replicas, _ = default_replicas(dataset)
        self._gradient_accumulation = gradient_accumulation
        self._min_local = _positive_int(min_local, "min_local")
        self._max_local = _positive_int(max_local, "max_local", allow_none=True)
        self._num_replicas = _positive_int(num_replicas, "num_replicas")
        self._batch_size = _positive_int(batch_size, "batch_size")
        self._pending = None
        self._local, self._accum = self._plan(self._batch_size, self._num_replicas)
        self._micro = 0
        self._num_micro = None

    def _plan(self, batch_size, num_replicas):
        return plan_local_batch(batch_size, num_replicas, min_local=self._min_local,
                                max_local=self._max_local,
                                gradient_accumulation=self._gradient_accumulation)

    # ---------------------------------------------------------------- sizes
    @property
    def batch_size(self):
        """The target global batch size in effect (see :meth:`set_batch_size`)."""
        return self._batch_size

    @property
    def num_replicas(self):
        """Replicas the local size is computed for."""
        return self._num_replicas

    @property
    def local_bsz_bounds(self):
        """``(min_local, max_local)``; ``max_local`` may be None."""
        return (self._min_local, self._max_local)

    current_local_bsz = SplitSizes.current_local_bsz
    accumulation_steps = SplitSizes.accumulation_steps
    current_batch_size = SplitSizes.current_batch_size

    @property
    def next_local_bsz(self):
        """The local size the next :meth:`begin_epoch` will use (a pending change applied)."""
        if self._pending is None:
            return self._local
        return self._plan(self._pending, self._num_replicas)[0]

    def set_batch_size(self, batch_size):
        """Change the target global batch size: the hook for an external autoscaler.

        Takes effect at the next :meth:`begin_epoch` (which a
        ResumableLoader calls when an iteration starts), so that an
        accumulation cycle is never split between two sizes. Checked now:
        an impossible size raises ``ValueError`` here, not later.
        """
        batch_size = _positive_int(batch_size, "batch_size")
        self._plan(batch_size, self._num_replicas)
        self._pending = batch_size

    def set_num_replicas(self, num_replicas):
        """Recompute the split for another number of replicas (e.g. after a restart)."""
        num_replicas = _positive_int(num_replicas, "num_replicas")
        self._local, self._accum = self._plan(self._batch_size, num_replicas)
        self._num_replicas = num_replicas

    # ------------------------------------------------------ step schedule
    def begin_epoch(self, num_micro_batches=None):
        """Start an iteration: apply a pending :meth:`set_batch_size`, reset the cycle.

        ``num_micro_batches`` (batches this iteration will yield, if known)
        makes the last one an optimizer step even when it ends an
        incomplete accumulation cycle, so no gradient leaks into the next
        epoch. Returns the local batch size to use.
        """
        if self._pending is not None:
            self._local, self._accum = self._plan(self._pending, self._num_replicas)
            self._batch_size, self._pending = self._pending, None
        if num_micro_batches is not None:
            num_micro_batches = operator.index(num_micro_batches)
            if num_micro_batches < 0:
                raise ValueError(f"num_micro_batches must be >= 0, got {num_micro_batches}")
        self._micro = 0
        self._num_micro = num_micro_batches
        return self._local

    def advance(self):
        """Move to the next micro-batch (after the current one is processed)."""
        self._micro += 1

    @property
    def micro_step(self):
        """Index of the current micro-batch since :meth:`begin_epoch`."""
        return self._micro

    def is_optim_step(self):
        """True if the optimizer should step after the current micro-batch."""
        if self._num_micro is not None and self._micro + 1 >= self._num_micro:
            return True
        return self._micro % (self._accum + 1) == self._accum

    def is_accum_step(self):
        """True if the current micro-batch's gradient is only accumulated (no optimizer step)."""
        return not self.is_optim_step()

    # ---------------------------------------------------------------- state
    def state_dict(self):
        """The target size and bounds (a pending change counts as applied)."""
        return {
            "batch_size": self._pending if self._pending is not None else self._batch_size,
            "min_local": self._min_local,
            "max_local": self._max_local,
            "gradient_accumulation": self._gradient_accumulation,
        }

    def load_state_dict(self, state):
        """Restore the target size and bounds; the split is recomputed for this run's replicas."""
        if not isinstance(state, dict) or "batch_size" not in state:
            raise ValueError("state must be a dict from GlobalBatchSize.state_dict()")
        min_local = _positive_int(state.get("min_local", self._min_local), "min_local")
        max_local = _positive_int(state.get("max_local", self._max_local), "max_local",
                                  allow_none=True)
        accumulation = bool(state.get("gradient_accumulation", self._gradient_accumulation))
        batch_size = _positive_int(state["batch_size"], "batch_size")
        local, accum = plan_local_batch(batch_size, self._num_replicas, min_local=min_local,
                                        max_local=max_local,
                                        gradient_accumulation=accumulation)
        self._min_local, self._max_local = min_local, max_local
        self._gradient_accumulation = accumulation
        self._batch_size, self._pending = batch_size, None
        self._local, self._accum = local, accum

    def __repr__(self):
        return (f"GlobalBatchSize(batch_size={self._batch_size}, num_replicas={self._num_replicas}, "
                f"local={self._local}, accumulation_steps={self._accum}, "
                f"bounds={self.local_bsz_bounds})")
