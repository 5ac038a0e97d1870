"""Goodput of data-parallel training, as modelled by Pollux (OSDI'21).

Pollux (and AdaptDL, its implementation) picks the batch size that makes the
most *statistical* progress per second::

    goodput(m, s) = throughput(m, s) * efficiency(M),    M = K * m * s

for ``K`` replicas, local batch size ``m`` and ``s = accumulation_steps + 1``
micro-batches per optimizer step.

* **Statistical efficiency** compares the progress of one step of batch ``M``
  with that of the initial batch ``M0``: ``E(M) = (phi + M0) / (phi + M)``,
  where ``phi = tr(Sigma) / |G|^2`` is the gradient noise scale (McCandlish et
  al., "An empirical model of large-batch training", 2018). A noisy gradient
  (large ``phi``) loses little from a large batch; a clean one loses a lot.
* **Gradient noise scale** from two squared gradient norms measured at two
  batch sizes, here the local gradient of one replica (``B_small`` samples)
  and the averaged gradient DDP applies (``B_big`` samples): since
  ``E|G_B|^2 = |G|^2 + tr(Sigma) / B``, :func:`noise_scale_estimates` solves
  the two equations for unbiased estimates of ``|G|^2`` and ``tr(Sigma)``.
* **Throughput** from measured step times: a micro-batch that only
  accumulates takes ``T_grad(m) = alpha + beta * m``; an optimizer step adds
  ``T_sync(K)``, the all-reduce and the optimizer for ``K`` replicas. Pollux
  also lets computation and communication overlap (its ``gamma``); this model
  adds them (no overlap), which is exact for the gloo CPU case and
  conservative elsewhere.

Everything here is plain arithmetic on numbers the caller supplies (no
communication), so every replica given the same inputs computes the same
result; :mod:`pyddstore.torch.adaptive` gathers the inputs and agrees on them.
"""

import collections
import itertools
import math

import numpy as np

from .batchsize import split_batch

__all__ = [
    "GradParams",
    "PerfParams",
    "GoodputFunction",
    "GradientStatistics",
    "ThroughputProfile",
    "noise_scale_estimates",
]

GradParams = collections.namedtuple("GradParams", ["sqr", "var"])
GradParams.__doc__ = """Gradient statistics for the efficiency model.

``sqr``: estimate of the squared norm of the true gradient ``|G|^2``;
``var``: estimate of ``tr(Sigma) / M0``, the gradient variance at the initial
batch size ``M0`` (AdaptDL's convention), so ``phi = var * M0 / sqr``."""

PerfParams = collections.namedtuple("PerfParams", ["alpha", "beta", "sync"])
PerfParams.__doc__ = """Throughput model: seconds per micro-batch ``alpha + beta * m``, plus
``sync[K]`` seconds per optimizer step on ``K`` replicas (a dict)."""


def noise_scale_estimates(small_sqr, big_sqr, b_small, b_big):
    """Unbiased estimates ``(trace_sigma, grad_sqr)`` from two squared gradient norms.

    ``small_sqr`` is ``|g|^2`` of a gradient averaged over ``b_small``
    samples (one replica's), ``big_sqr`` that of one averaged over ``b_big >
    b_small`` samples (all replicas'). With ``E|g_B|^2 = |G|^2 + tr(Sigma)/B``:

    * ``|G|^2 = (b_big * big_sqr - b_small * small_sqr) / (b_big - b_small)``
    * ``tr(Sigma) = (small_sqr - big_sqr) / (1/b_small - 1/b_big)``

    Single estimates are noisy and may be negative; average many before
    taking their ratio (see :class:`GradientStatistics`).
    """
    b_small, b_big = float(b_small), float(b_big)
    if not (0 < b_small < b_big):
        raise ValueError(f"need 0 < b_small < b_big, got b_small={b_small}, b_big={b_big}")
    grad_sqr = (b_big * big_sqr - b_small * small_sqr) / (b_big - b_small)
    trace = (small_sqr - big_sqr) / (1.0 / b_small - 1.0 / b_big)
    return float(trace), float(grad_sqr)


class GradientStatistics:
    """Running (bias-corrected exponential) averages of ``tr(Sigma)`` and ``|G|^2``.

    ``smoothing`` is the weight of the past in the average (0.9: roughly the
    last ten steps count). Averaging the two estimates separately and taking
    their ratio afterwards keeps the noise scale well defined even when single
    estimates are negative.
    """

    def __init__(self, smoothing=0.9):
        if not 0.0 <= float(smoothing) < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        self.smoothing = float(smoothing)
        self.trace = 0.0
        self.sqr = 0.0
        self.weight = 0.0   # 1 - smoothing**n: the bias correction
        self.count = 0

    def update(self, trace, sqr):
        """Add one step's estimates (from :func:`noise_scale_estimates`)."""
        a = self.smoothing
        self.trace = a * self.trace + (1 - a) * float(trace)
        self.sqr = a * self.sqr + (1 - a) * float(sqr)
        self.weight = a * self.weight + (1 - a)
        self.count += 1

    @property
    def ready(self):
        """Whether at least one estimate was added."""
        return self.count > 0

    def estimates(self):
        """``(trace_sigma, grad_sqr)``, bias-corrected; ``(0.0, 0.0)`` before any update."""
        if self.weight <= 0:
            return 0.0, 0.0
        return self.trace / self.weight, self.sqr / self.weight

    def noise_scale(self):
        """``phi = tr(Sigma) / |G|^2``: ``inf`` when ``|G|^2 <= 0``, 0 when ``tr(Sigma) <= 0``."""
        trace, sqr = self.estimates()
        if trace <= 0:
            return 0.0
        if sqr <= 0:
            return math.inf
        return trace / sqr

    def grad_params(self, init_batch_size):
        """:class:`GradParams` for :class:`GoodputFunction` (``var`` at ``init_batch_size``)."""
        trace, sqr = self.estimates()
        return GradParams(sqr=max(sqr, 0.0), var=max(trace, 0.0) / float(init_batch_size))

    def state_dict(self):
        """Plain values; restore with :meth:`load_state_dict`."""
        return {"smoothing": self.smoothing, "trace": self.trace, "sqr": self.sqr,
                "weight": self.weight, "count": self.count}

    def load_state_dict(self, state):
        """Restore what :meth:`state_dict` returned."""
        self.smoothing = float(state["smoothing"])
        self.trace, self.sqr = float(state["trace"]), float(state["sqr"])
        self.weight, self.count = float(state["weight"]), int(state["count"])


class ThroughputProfile:
    """Measured step times per (replicas, local batch size, kind), and the throughput fit.

    ``kind`` is ``"accum"`` for a micro-batch that only accumulates its
    gradient and ``"optim"`` for one followed by an all-reduce and an
    optimizer step. Keeps the last ``keep`` times of each and fits their
    medians: a step slowed down by another process on the machine moves a
    median much less than a mean.
    """

    def __init__(self, keep=64):
        self.keep = int(keep)
        self.table = {}   # (replicas, local_bsz, kind) -> recent seconds

    def record(self, replicas, local_bsz, kind, seconds):
        """Add one measured step."""
        if kind not in ("accum", "optim"):
            raise ValueError(f"kind must be 'accum' or 'optim', got {kind!r}")
        times = self.table.setdefault((int(replicas), int(local_bsz), kind), [])
        times.append(float(seconds))
        del times[:-self.keep]

    def __len__(self):
        return len(self.table)

    def fit(self, replicas):
        """Least-squares :class:`PerfParams` (all terms >= 0), or None without a measurement.

        Unknowns: ``alpha``, ``beta`` and ``sync[K]`` for every replica count
        ``K`` measured. Where the measurements cannot separate two terms the
        fit assumes (and the docs say) the following: with a single local
        batch size measured, half of its micro-batch time is per-step
        overhead (``alpha = beta * m``), so a larger batch is predicted
        moderately faster until it is measured; with no accumulation step
        measured at ``K`` replicas, ``sync[K] = 0`` unless another replica
        count's accumulation steps pin ``alpha`` (gradient accumulation then
        looks no better than a smaller batch, a cautious choice).
        """
        rows = [(k, m, kind, float(np.median(t)), len(t))
                for (k, m, kind), t in sorted(self.table.items()) if t]
        if not rows:
            return None
        ks = sorted({k for k, _, kind, _, _ in rows if kind == "optim"})
        sizes = sorted({m for _, m, _, _, _ in rows})
        has_accum = any(kind == "accum" for _, _, kind, _, _ in rows)
        single = len(sizes) == 1
        # Columns: [alpha, beta] or [beta] (alpha tied to beta * m0), then one sync per K.
        m0 = float(sizes[0])
        n_base = 1 if single else 2
        n = n_base + len(ks)
        a = np.zeros((len(rows), n))
        b = np.zeros(len(rows))
        w = np.zeros(len(rows))
        for i, (k, m, kind, t, c) in enumerate(rows):
            if single:
                a[i, 0] = m0 + m
            else:
                a[i, 0], a[i, 1] = 1.0, float(m)
            if kind == "optim":
                a[i, n_base + ks.index(k)] = 1.0
            # Relative error: weight each mean by count / t^2.
            b[i], w[i] = t, c / (t * t) if t > 0 else float(c)
        held = [] if has_accum else [n_base + j for j in range(len(ks))]
        x = _nnls(a * np.sqrt(w)[:, None], b * np.sqrt(w), free_zero=held)
        if single:
            beta = x[0]
            alpha = beta * m0
        else:
            alpha, beta = x[0], x[1]
        sync = {k: float(x[n_base + j]) for j, k in enumerate(ks)}
        sync.setdefault(int(replicas), 0.0)
        return PerfParams(alpha=float(alpha), beta=float(beta), sync=sync)

    def state_dict(self):
        """The table as a list of plain values."""
        return [[k, m, kind, list(t)] for (k, m, kind), t in sorted(self.table.items())]

    def load_state_dict(self, state):
        """Replace the table with one from :meth:`state_dict`."""
        self.table = {(int(k), int(m), str(kind)): [float(x) for x in t][-self.keep:]
                      for k, m, kind, t in state}


def _nnls(a, b, free_zero=()):
    """min |a x - b| with x >= 0, by trying every active set (a has a handful of columns).

    Columns in ``free_zero`` are not identifiable from the data (see
    ThroughputProfile.fit) and are held at 0.
    """
    n = a.shape[1]
    keep = [j for j in range(n) if j not in set(free_zero)]
    best, best_err = np.zeros(n), math.inf
    for r in range(len(keep), 0, -1):
        for cols in itertools.combinations(keep, r):
            sol, *_ = np.linalg.lstsq(a[:, list(cols)], b, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(n)
            x[list(cols)] = sol
            err = float(np.sum((a @ x - b) ** 2))
            if err < best_err * (1 - 1e-12):
                best, best_err = x, err
    return best


def _candidates(lo, hi, limit=4096):
    """Integers in [lo, hi]: all of them, or a geometric grid of about `limit` when the range is wide."""
    if hi - lo + 1 <= limit:
        return np.arange(lo, hi + 1, dtype=np.int64)
    grid = np.unique(np.round(np.geomspace(lo, hi, limit)).astype(np.int64))
    return np.unique(np.concatenate([grid, [lo, hi]]))


class GoodputFunction:
    """Goodput of ``(replicas, local batch size, accumulation steps)`` (AdaptDL's name).

    Parameters
    ----------
    perf_params : PerfParams
        From :meth:`ThroughputProfile.fit`.
    grad_params : GradParams
        From :meth:`GradientStatistics.grad_params`.
    init_batch_size : int
        ``M0``, the batch size the user asked for: efficiency is relative to it.
    """

    def __init__(self, perf_params, grad_params, init_batch_size):
        self.perf_params = perf_params
        self.grad_params = grad_params
        self.init_batch_size = int(init_batch_size)

    def __call__(self, num_replicas, local_bsz, accumulation_steps=0):
        """Same as :meth:`evaluate`."""
        return self.evaluate(num_replicas, local_bsz, accumulation_steps)

    def _sync(self, num_replicas):
        sync = self.perf_params.sync
        if num_replicas in sync:
            return sync[num_replicas]
        # An unmeasured replica count: the nearest measured one.
        return sync[min(sync, key=lambda k: (abs(k - num_replicas), k))] if sync else 0.0

    def step_time(self, num_replicas, local_bsz, accumulation_steps=0):
        """Predicted seconds per optimizer step."""
        p = self.perf_params
        m = np.asarray(local_bsz, dtype=np.float64)
        s = np.asarray(accumulation_steps, dtype=np.float64) + 1
        return s * (p.alpha + p.beta * m) + self._sync(int(num_replicas))

    def throughput(self, num_replicas, local_bsz, accumulation_steps=0):
        """Predicted samples per second."""
        m = np.asarray(local_bsz, dtype=np.float64)
        s = np.asarray(accumulation_steps, dtype=np.float64) + 1
        t = self.step_time(num_replicas, local_bsz, accumulation_steps)
        return np.where(t > 0, num_replicas * m * s / np.maximum(t, 1e-300), np.inf)

    def noise_scale(self):
        """``phi = var * M0 / sqr`` (``inf`` when ``sqr`` is 0, 0 when ``var`` is 0)."""
        g = self.grad_params
        if g.var <= 0:
            return 0.0
        if g.sqr <= 0:
            return math.inf
        return g.var * self.init_batch_size / g.sqr

    def gain(self, batch_size):
        """AdaScale's gain: progress of one step of ``batch_size`` in steps of ``M0`` (1..scale)."""
        scale = np.asarray(batch_size, dtype=np.float64) / self.init_batch_size
        g = self.grad_params
        denom = g.var / scale + g.sqr
        return np.where(denom > 0, (g.var + g.sqr) / np.where(denom > 0, denom, 1.0), 1.0)

    def efficiency(self, batch_size):
        """``E(M) = (phi + M0) / (phi + M)``: progress per sample relative to batch ``M0``."""
        scale = np.asarray(batch_size, dtype=np.float64) / self.init_batch_size
        return self.gain(batch_size) / scale

    def evaluate(self, num_replicas, local_bsz, accumulation_steps=0):
        """``throughput * efficiency``, in samples (of batch ``M0``'s worth) per second."""
        m = np.asarray(local_bsz, dtype=np.float64)
        s = np.asarray(accumulation_steps, dtype=np.float64) + 1
        return self.throughput(num_replicas, local_bsz, accumulation_steps) * \
            self.efficiency(num_replicas * m * s)

    def optimize(self, num_replicas, max_batch_size=None, local_bsz_bounds=(1, None),
                 gradient_accumulation=False):
        """The ``(goodput, local_bsz, accumulation_steps)`` with the highest goodput (AdaptDL's rounding).

        As in AdaptDL, every global target ``M`` with ``M0 <= M <=
        max_batch_size`` (default ``M0``; and ``M >= K * min_local``) is split
        the way AdaptDL splits it (``pyddstore.torch.adaptive.batchsize.split_batch``:
        with ``gradient_accumulation``, ``s = ceil(M / (K * max_local))``
        micro-batches, else one; ``local = ceil(M / (K * s))``, clamped into
        ``local_bsz_bounds``, a pair whose items may be None), and the split
        with the highest goodput wins; ties go to the smaller batch. Rounding
        up lets the global batch exceed ``max_batch_size`` by less than
        ``K * s`` samples: ``max_batch_size=128`` on 3 replicas gives 43 per
        replica (129 in total). A global batch below ``M0`` comes out only
        when the bounds allow nothing else (``max_local * K < M0`` without
        accumulation): then the largest one. AdaptDL samples 50 targets; here
        every integer target is tried (a geometric grid of about 4096 when
        the range is wider).
        """
        k = int(num_replicas)
        m0 = self.init_batch_size
        top = m0 if max_batch_size is None else int(max_batch_size)
        lo, hi = local_bsz_bounds if local_bsz_bounds is not None else (None, None)
        lo = int(lo or 1)
        hi = int(hi) if hi is not None else None
        bottom = max(m0, lo * k)
        targets = _candidates(bottom, max(top, bottom))
        local, accum = split_batch(targets, k, min_local=lo, max_local=hi,
                                   gradient_accumulation=gradient_accumulation)
        pairs = np.unique(np.stack(np.broadcast_arrays(local, accum), axis=1), axis=0)
        local, accum = pairs[:, 0], pairs[:, 1]
        total = k * local * (accum + 1)
        order = np.lexsort((accum, total))          # smaller batch first, then fewer micro-batches
        local, accum, total = local[order], accum[order], total[order]
        if not np.any(total >= m0):
            i = int(np.argmax(total))
            return float(self.evaluate(k, local[i], accum[i])), int(local[i]), int(accum[i])
        g = np.where(total >= m0, self.evaluate(k, local, accum), -np.inf)
        i = int(np.argmax(g))
        return float(g[i]), int(local[i]), int(accum[i])
