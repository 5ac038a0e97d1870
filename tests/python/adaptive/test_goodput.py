"""The Pollux model of pyddstore.torch.adaptive.goodput against analytic cases (pure arithmetic)."""
import math

import numpy as np
import pytest

from pyddstore.torch.adaptive.goodput import (GoodputFunction, GradientStatistics, GradParams, PerfParams,
                                     ThroughputProfile, noise_scale_estimates)


def linear_regression_truth(d, delta_sqr, sigma):
    """tr(Sigma) and |G|^2 of the per-sample gradient x (x.delta - eps), x ~ N(0, I_d).

    E[g] = delta; E[g g^T] = (|delta|^2 + sigma^2) I + 2 delta delta^T, so
    tr(Sigma) = d (|delta|^2 + sigma^2) + |delta|^2.
    """
    return d * (delta_sqr + sigma ** 2) + delta_sqr, delta_sqr


def test_noise_scale_estimator_linear_regression():
    rng = np.random.default_rng(5)
    d, sigma, b, k, reps = 4, 2.0, 8, 4, 3000
    delta = np.ones(d) / math.sqrt(d)           # |delta|^2 = 1
    trace_true, sqr_true = linear_regression_truth(d, 1.0, sigma)
    traces, sqrs = [], []
    for _ in range(reps):
        x = rng.normal(size=(k, b, d))
        eps = sigma * rng.normal(size=(k, b))
        g = x * ((x @ delta) - eps)[..., None]   # per-sample gradients
        local = g.mean(axis=1)                   # one gradient per replica
        small = float(np.mean(np.sum(local ** 2, axis=1)))
        big = float(np.sum(local.mean(axis=0) ** 2))
        t, s = noise_scale_estimates(small, big, b, b * k)
        traces.append(t)
        sqrs.append(s)
    assert np.mean(traces) == pytest.approx(trace_true, rel=0.05)
    assert np.mean(sqrs) == pytest.approx(sqr_true, rel=0.1)


def test_noise_scale_estimates_checks_sizes():
    with pytest.raises(ValueError, match="b_small < b_big"):
        noise_scale_estimates(1.0, 1.0, 8, 8)


def test_gradient_statistics_average_and_ratio():
    st = GradientStatistics(smoothing=0.5)
    assert not st.ready and st.estimates() == (0.0, 0.0)
    st.update(10.0, 2.0)
    assert st.estimates() == pytest.approx((10.0, 2.0))    # bias-corrected from the first step
    st.update(30.0, 2.0)
    assert st.estimates() == pytest.approx(((0.5 * 10 * 0.5 + 0.5 * 30) / 0.75, 2.0))
    assert st.noise_scale() == pytest.approx(st.estimates()[0] / 2.0)
    st.update(0.0, -100.0)
    assert st.noise_scale() == math.inf                    # |G|^2 estimate <= 0: all noise
    copy = GradientStatistics()
    copy.load_state_dict(st.state_dict())
    assert copy.estimates() == st.estimates() and copy.count == 3
    with pytest.raises(ValueError):
        GradientStatistics(smoothing=1.0)


def test_throughput_fit_recovers_the_model():
    alpha, beta, sync2, sync4 = 0.01, 0.002, 0.03, 0.05
    prof = ThroughputProfile()
    for m in (8, 16, 32):
        for _ in range(3):
            prof.record(2, m, "accum", alpha + beta * m)
            prof.record(2, m, "optim", alpha + beta * m + sync2)
            prof.record(4, m, "optim", alpha + beta * m + sync4)
    p = prof.fit(2)
    assert p.alpha == pytest.approx(alpha, rel=1e-6)
    assert p.beta == pytest.approx(beta, rel=1e-6)
    assert p.sync[2] == pytest.approx(sync2, rel=1e-6)
    assert p.sync[4] == pytest.approx(sync4, rel=1e-6)
    again = ThroughputProfile()
    again.load_state_dict(prof.state_dict())
    assert again.fit(2) == p


def test_throughput_fit_with_one_size_assumes_half_overhead():
    prof = ThroughputProfile()
    assert prof.fit(1) is None
    prof.record(1, 16, "optim", 0.02)
    p = prof.fit(1)
    assert p.alpha == pytest.approx(p.beta * 16) and p.alpha + p.beta * 16 == pytest.approx(0.02)


def test_efficiency_and_gain():
    f = GoodputFunction(PerfParams(0.0, 1.0, {1: 0.0}), GradParams(sqr=1.0, var=3.0 / 32), 32)
    phi = f.noise_scale()
    assert phi == pytest.approx(3.0)
    for m in (32, 64, 320):
        assert float(f.efficiency(m)) == pytest.approx((phi + 32) / (phi + m))
        assert float(f.gain(m)) == pytest.approx(f.efficiency(m) * m / 32)
    assert float(f.efficiency(32)) == pytest.approx(1.0)


PERF = PerfParams(alpha=0.02, beta=0.0002, sync={2: 0.01})


def test_chosen_batch_size_grows_with_gradient_noise():
    chosen = []
    for var in (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0):
        f = GoodputFunction(PERF, GradParams(sqr=1.0, var=var), 32)
        best, m, accum = f.optimize(2, 4096, (8, 512), gradient_accumulation=True)
        assert best >= float(f(2, 16, 0)) - 1e-9      # never worse than the initial split
        chosen.append(2 * m * (accum + 1))
    assert chosen == sorted(chosen), chosen
    assert chosen[0] <= 64 and chosen[-1] >= 1024, chosen


def test_optimize_respects_bounds():
    f = GoodputFunction(PERF, GradParams(sqr=1.0, var=100.0), 32)
    _, m, accum = f.optimize(2, 4096, (8, 64), gradient_accumulation=False)
    assert (m, accum) == (64, 0)                     # capped by max local, no accumulation
    _, m, accum = f.optimize(2, 4096, (8, 64), gradient_accumulation=True)
    assert m <= 64 and 2 * m * (accum + 1) <= 4096 and accum > 0
    _, m, accum = f.optimize(2, 100, (8, 64), gradient_accumulation=True)
    assert 32 <= 2 * m * (accum + 1) <= 100
    clean = GoodputFunction(PERF, GradParams(sqr=1.0, var=0.0), 32)
    _, m, accum = clean.optimize(2, 4096, (8, 64), gradient_accumulation=True)
    assert 2 * m * (accum + 1) == 32                 # no noise: the smallest batch allowed


# --------------------------------------- AdaptDL's adaptdl/goodput_test.py
# Its optimize tests, over random models as there; our PerfParams stand for
# its seven-parameter throughput model (one node: num_nodes left out).
RNG = np.random.RandomState(0)
PERFS = [PerfParams(*RNG.gamma(2.0, 2.0, [2]) * [1e-2, 1e-4],
                    dict(zip((2, 4, 16), RNG.gamma(2.0, 2.0, [3]) * 1e-2))) for _ in range(3)]
GRADS = [GradParams(*RNG.gamma(2.0, 2.0, [2])) for _ in range(3)]
REPLICAS = (1, 2, 3, 4, 5, 7, 10, 16, 33, 99)
MODELS = [(p, g) for p in PERFS for g in GRADS]


def ceil_div(a, b):
    return -(-a // b)


@pytest.mark.parametrize("perf, grad", MODELS)
def test_optimize_rounds_up_as_adaptdl(perf, grad):
    """AdaptDL's test_optimize_no_bounds: max_batch_size defaults to M0; 128 on 3 is 43 each."""
    fun = GoodputFunction(perf, grad, 128)
    goodput, bsz, steps = fun.optimize(3)
    assert (bsz, steps) == (43, 0) and isinstance(goodput, float)
    for k in range(1, 6):
        assert fun.optimize(k)[1:] == (ceil_div(128, k), 0)
    # The case of the issue: a noisy gradient wants the largest batch, and
    # 128 on 3 replicas is 43 each (129), not 42 (126).
    noisy = GoodputFunction(perf, GradParams(sqr=1.0, var=1e6), 32)
    assert noisy.optimize(3, 128)[1:] == (43, 0)
    assert noisy.optimize(3, 128, (1, None), gradient_accumulation=True)[1:] == (43, 0)


@pytest.mark.parametrize("perf, grad", MODELS)
def test_optimize_local_bounds(perf, grad):
    fun = GoodputFunction(perf, grad, 128)
    assert fun.optimize(1, None, (64, 256))[1] == 128
    for k in REPLICAS:
        _, bsz, steps = fun.optimize(k, None, (64, 256))
        assert max(ceil_div(128, k), 64) <= bsz <= 256 and bsz * k <= 100 * 128 and steps == 0
        # Closed bounds, with or without accumulation.
        for acc in (False, True):
            goodput, bsz, steps = fun.optimize(k, None, (256, 256), gradient_accumulation=acc)
            assert (bsz, steps) == (256, 0) and goodput > 0


@pytest.mark.parametrize("perf, grad", MODELS)
def test_optimize_max_bounds(perf, grad):
    """AdaptDL's test_optimize_max_bounds and test_optimize_all_bounds.

    Not its ``bsz == 128`` on one replica: AdaptDL keeps M0 on one replica
    without accumulation, which pyddstore does not (see the migration guide).
    """
    fun = GoodputFunction(perf, grad, 128)
    for k in REPLICAS:
        _, bsz, steps = fun.optimize(k, 1280)
        assert bsz >= ceil_div(128, k) and bsz * k <= 1280 + k and steps == 0
        _, bsz, steps = fun.optimize(k, 1280, (64, 256))
        assert max(ceil_div(128, k), 64) <= bsz <= 256 and steps == 0
        assert bsz * k <= 1280 + k or bsz == 64
    goodput, bsz, steps = fun.optimize(4, 1024, (128, 128))
    assert goodput > 0 and (bsz, steps) == (128, 0)


@pytest.mark.parametrize("perf, grad", MODELS)
def test_optimize_accumulation(perf, grad):
    fun = GoodputFunction(perf, grad, 128)
    for k in REPLICAS:
        _, bsz, steps = fun.optimize(k, 1280, (64, 256), gradient_accumulation=True)
        assert 64 <= bsz <= 256 and 0 <= steps <= 15
        assert bsz * k * (steps + 1) < 1280 + k * (steps + 1) or bsz == 64
        assert bsz * k * (steps + 1) >= 128
        # As AdaptDL splits: the fewest micro-batches of at most 256 per replica.
        assert bsz * (steps + 1) > 256 * steps
