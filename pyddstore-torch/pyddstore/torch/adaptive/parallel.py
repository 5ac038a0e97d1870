"""The parallel wrapper: AdaptiveDataParallel and its learning-rate scaling rules."""

import functools
import math
import weakref

import torch
import torch.distributed as dist

from . import _state
from . import goodput as _gp
from ._state import _deref
from .data import _gain


# --------------------------------------------------------------- model
class ScalingRuleBase:
    """Learning-rate rule for a batch larger than the initial one (AdaptDL's base class).

    Subclasses define :meth:`scale_lr`: the factor applied to every param
    group's learning rate for the optimizer step, given ``scale = M / M0``.
    The factor is applied around ``optimizer.step()`` only, so an
    ``lr_scheduler`` keeps seeing its own learning rates.
    """

    adp = None

    def initialize(self, adp):
        """Attach to an AdaptiveDataParallel (called by it)."""
        self.adp = adp

    def scale_lr(self, scale):
        """The learning-rate factor for batch-size ratio ``scale``."""
        raise NotImplementedError


class AdaScale(ScalingRuleBase):
    """AdaScale (Johnson et al., 2020): factor = the gain ``(var + sqr) / (var / scale + sqr)``."""

    def scale_lr(self, scale):
        """The gain at ``scale`` from the measured gradient statistics (1 before any)."""
        return self.adp.gain(scale)


class LinearScale(ScalingRuleBase):
    """Linear scaling rule (Goyal et al., 2017): factor = ``scale``."""

    def scale_lr(self, scale):
        """``scale``."""
        return float(scale)


class SqrtScale(ScalingRuleBase):
    """Square-root scaling rule (Krizhevsky, 2014): factor = ``sqrt(scale)``."""

    def scale_lr(self, scale):
        """``sqrt(scale)``."""
        return math.sqrt(scale)


class _HookState:
    """What the communication hook measured during one optimizer step's backward."""

    def __init__(self, world):
        self.world = world
        self.local = []      # per bucket: squared norm of this replica's gradient
        self.reduced = []    # per bucket: squared norm of the averaged gradient
        self.prev = {}       # world 1: bucket index -> previous step's gradient
        self.diff = []       # world 1: squared norm of the change since the previous step
        self.diff_ok = True


def _sqnorm(t):
    return torch.linalg.vector_norm(t, dtype=torch.float64).square()


def _gradstats_hook(state, bucket):
    """All-reduce the bucket as DDP's default does, recording the squared norms around it."""
    tensor = bucket.buffer()
    state.local.append(_sqnorm(tensor))
    if state.world == 1:
        prev = state.prev.get(bucket.index())
        if prev is not None and prev.shape == tensor.shape:
            state.diff.append(_sqnorm(tensor - prev))
        else:
            state.diff_ok = False
        state.prev[bucket.index()] = tensor.detach().clone()
    # DDP's built-in reduction multiplies by 1/world while copying into the
    # bucket and sums; doing the same keeps the applied gradient bit for bit.
    tensor.mul_(1.0 / state.world)
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(f):
        out = f.value()[0]
        state.reduced.append(_sqnorm(out))
        return out

    return fut.then(done)


def _forward_to(original, method):
    def call(*args, **kwargs):
        return method(*args, **kwargs)

    return functools.wraps(original)(call)


class AdaptiveDataParallel(torch.nn.parallel.DistributedDataParallel):
    """AdaptDL's ``AdaptiveDataParallel(model, optimizer, lr_scheduler=None)``: DDP that feeds goodput.

    Parameters
    ----------
    model : torch.nn.Module
        The model to train, as for DistributedDataParallel.
    optimizer : torch.optim.Optimizer
        Its ``step`` and ``zero_grad`` are wrapped: on an accumulation step
        (``current_dataloader().is_accum_step()``) they do nothing and the
        backward pass skips the all-reduce; at the optimizer step the
        accumulated gradient is divided by the number of batches and the
        learning rate is scaled by ``scaling_rule`` for that step.
    lr_scheduler : optional
        Kept as ``self.lr_scheduler`` (AdaptDL checkpoints it); step it as usual.
    scaling_rule : ScalingRuleBase, optional
        Default :class:`AdaScale`.
    **kwargs
        DistributedDataParallel's (``device_ids``, ``bucket_cap_mb``, ...).

    Needs torch.distributed (:func:`init_process_group`). The gradient
    statistics (local and averaged squared norms of every bucket, hence the
    gradient noise scale) come from a DDP communication hook, at the cost of
    one all-reduce of one number per optimizer step; on a single replica
    they come from the change of the gradient between two steps (one copy
    of the gradient kept).
    """

    def __init__(self, model, optimizer, lr_scheduler=None, mp_scaler=None, scaling_rule=None,
                 name="adaptdl-dataparallel", **kwargs):
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("AdaptiveDataParallel needs torch.distributed: call "
                               "pyddstore.torch.adaptive.init_process_group('gloo') first")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        if mp_scaler is not None:
            raise NotImplementedError("mp_scaler (AdaptDL's mixed-precision hooks) is not carried "
                                      "over; leave it None")
        if scaling_rule is None:
            scaling_rule = AdaScale()
        if not isinstance(scaling_rule, ScalingRuleBase):
            raise TypeError("scaling_rule must be a ScalingRuleBase (AdaScale(), LinearScale(), ...)")
        super().__init__(model, **kwargs)
        self.name = name
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.scaling_rule = scaling_rule
        scaling_rule.initialize(self)
        self._hook_state = _HookState(dist.get_world_size())
        self.register_comm_hook(self._hook_state, _gradstats_hook)
        self._micro = 0               # forward passes since the last optimizer step
        self._last_factor = 1.0
        self._orig_step = optimizer.step
        self._orig_zero_grad = optimizer.zero_grad
        # functools.wraps also carries the marks torch's lr schedulers put on
        # the step they wrapped, so they do not warn that it was replaced.
        optimizer.step = _forward_to(self._orig_step, self._step)
        optimizer.zero_grad = _forward_to(self._orig_zero_grad, self._zero_grad)
        _state._job.model = weakref.ref(self)

    def forward(self, *inputs, **kwargs):
        """DDP's forward; skips the all-reduce of the coming backward on an accumulation step."""
        loader = _deref(_state._job.training)
        if torch.is_grad_enabled() and self.training:
            self._micro += 1
            self.require_backward_grad_sync = not (loader is not None and loader.is_accum_step())
        return super().forward(*inputs, **kwargs)

    def zero_grad(self, set_to_none=True):
        """Module.zero_grad, except in the middle of an accumulated step (then nothing)."""
        if self._micro == 0:
            super().zero_grad(set_to_none=set_to_none)

    def _zero_grad(self, *args, **kwargs):
        if self._micro == 0:
            return self._orig_zero_grad(*args, **kwargs)
        return None

    def _step(self, *args, **kwargs):  # noqa: C901 - one optimizer step, in order
        loader = _deref(_state._job.training)
        if loader is not None and loader.is_accum_step():
            return None
        micro = max(self._micro, 1)
        self._micro = 0
        if micro > 1:
            with torch.no_grad():
                for group in self.optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.mul_(1.0 / micro)
        self._update_stats(loader, micro)
        factor = 1.0
        if loader is not None:
            factor = float(self.scaling_rule.scale_lr(loader.current_batch_size / loader.batch_size))
        self._last_factor = factor
        if factor == 1.0:
            return self._orig_step(*args, **kwargs)
        saved = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * factor
        try:
            return self._orig_step(*args, **kwargs)
        finally:
            for g, lr in zip(self.optimizer.param_groups, saved):
                g["lr"] = lr

    def _update_stats(self, loader, micro):
        st = self._hook_state
        local, reduced, diff, diff_ok = st.local, st.reduced, st.diff, st.diff_ok
        st.local, st.reduced, st.diff, st.diff_ok = [], [], [], True
        if not local or loader is None or len(reduced) != len(local):
            return
        world = st.world
        b_small = loader.current_local_bsz * micro
        # The buckets hold the sum of `micro` batch means: divide by micro^2 for the mean's norm.
        norm = float(micro) ** 2
        if world > 1:
            small = torch.stack(local).sum() / norm
            dist.all_reduce(small)        # the one extra all-reduce: one float64
            small = float(small) / world
            big = float(torch.stack(reduced).sum()) / norm
            trace, sqr = _gp.noise_scale_estimates(small, big, b_small, b_small * world)
        else:
            if not diff_ok or not diff or getattr(st, "prev_b", None) is None:
                st.prev_b = b_small
                return
            # E|g_t - g_{t-1}|^2 = tr(S) (1/B_t + 1/B_{t-1}) when G changes slowly.
            trace = float(torch.stack(diff).sum()) / norm / (1.0 / b_small + 1.0 / st.prev_b)
            sqr = float(torch.stack(local).sum()) / norm - trace / b_small
            st.prev_b = b_small
        _state._job.stats.update(trace, sqr)

    @property
    def gradient_statistics(self):
        """The job's :class:`~pyddstore.torch.adaptive.goodput.GradientStatistics` (same on every rank)."""
        return _state._job.stats

    def gain(self, scale):
        """AdaScale's gain for a batch ``scale`` times the initial one (1 before any statistics)."""
        loader = _deref(_state._job.training)
        m0 = loader.batch_size if loader is not None else 1
        return _gain(scale * m0, m0)

    def to_tensorboard(self, writer, global_step, tag_prefix=""):
        """Write the gradient statistics to a ``SummaryWriter``.

        Tags (after ``tag_prefix``): ``Gradient_Norm_Sqr``, ``Gradient_Variance``
        (``tr(Sigma) / M0``), ``Noise_Scale``, ``Gain`` (at the current batch
        size) and ``Learning_Rate_Factor`` (of the last optimizer step).
        """
        if tag_prefix and not tag_prefix.endswith("/"):
            tag_prefix += "/"
        loader = _deref(_state._job.training)
        m0 = loader.batch_size if loader is not None else 1
        g = _state._job.stats.grad_params(m0)
        writer.add_scalar(tag_prefix + "Gradient_Norm_Sqr", g.sqr, global_step)
        writer.add_scalar(tag_prefix + "Gradient_Variance", g.var, global_step)
        phi = _state._job.stats.noise_scale()
        if math.isfinite(phi):
            writer.add_scalar(tag_prefix + "Noise_Scale", phi, global_step)
        if loader is not None:
            writer.add_scalar(tag_prefix + "Gain", self.gain(loader.current_batch_size / m0),
                              global_step)
        writer.add_scalar(tag_prefix + "Learning_Rate_Factor", self._last_factor, global_step)

