"""The paired statistics on synthetic samples: A/A says no difference, a 3 % shift is found, the interval covers."""
from __future__ import annotations

import math
import random

import pytest

from rapid_llm.bench.paired_stats import (FASTER, NO_DIFFERENCE, SLOWER, TOO_FEW, PairedEstimate, estimate,
                                          pairs_needed, t_quantile)


def _pairs(rng: random.Random, n: int, ratio: float, noise: float = 0.02, drift: float = 0.0):
    """n pairs of times around 10 us: a common drift (what pairing cancels), per-sample noise, B = ratio x A."""
    a, b = [], []
    for i in range(n):
        level = 10.0 * (1 + drift * math.sin(i / 3))
        a.append(level * rng.lognormvariate(0, noise))
        b.append(level * ratio * rng.lognormvariate(0, noise))
    return a, b


@pytest.mark.parametrize("df, p, want", [(1, 0.975, 12.706), (4, 0.975, 2.776), (9, 0.975, 2.262),
                                         (29, 0.975, 2.045), (60, 0.975, 2.000), (10, 0.8, 0.879), (3, 0.025, -3.182)])
def test_t_quantiles_match_the_tables(df, p, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-3)


def test_a_over_a_says_no_difference_at_about_the_nominal_rate():
    rng = random.Random(1)
    verdicts = [estimate(*_pairs(rng, 30, 1.0, drift=0.05)).verdict for _ in range(400)]
    false_positives = sum(v != NO_DIFFERENCE for v in verdicts)
    assert false_positives / 400 <= 0.08  # nominal 5 %; binomial spread at n=400 is about 1 %


def test_a_three_percent_shift_is_found_with_the_pairs_the_rule_asks_for():
    rng = random.Random(2)
    noise = 0.02
    sd_log = noise * math.sqrt(2)  # two independent samples in each log-ratio
    n = pairs_needed(sd_log, effect=0.03, power=0.8)
    verdicts = [estimate(*_pairs(rng, n, 1.03, noise, drift=0.05)).verdict for _ in range(400)]
    assert sum(v == SLOWER for v in verdicts) / 400 >= 0.75  # 80 % by design
    assert not any(v == FASTER for v in verdicts)
    faster = [estimate(*_pairs(rng, n, 1 / 1.03, noise)).verdict for _ in range(100)]
    assert sum(v == FASTER for v in faster) >= 70


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = random.Random(3)
    for true in (0.9, 1.0, 1.25):
        hits = 0
        for _ in range(400):
            e = estimate(*_pairs(rng, 12, true, noise=0.05, drift=0.1))
            hits += e.low <= true <= e.high
        assert 0.91 <= hits / 400 <= 0.99, (true, hits)


def test_pairing_cancels_drift_that_would_hide_a_difference():
    rng = random.Random(4)
    a, b = _pairs(rng, 30, 1.03, noise=0.005, drift=0.2)  # the machine drifts by 20 %, each pair sees it alike
    e = estimate(a, b)
    assert e.verdict == SLOWER and e.low > 1.0 and e.ratio == pytest.approx(1.03, rel=0.005)


def test_pairs_needed_follows_the_noise():
    assert pairs_needed(0.0) == 5
    small, large = pairs_needed(0.01), pairs_needed(0.04)
    assert small < large
    # the normal approximation ((1.96 + 0.84) sd / log 1.03)^2, a little more for t
    assert large >= math.ceil(((1.96 + 0.8416) * 0.04 / math.log(1.03)) ** 2)
    with pytest.raises(ValueError, match="effect"):
        pairs_needed(0.01, effect=0)


def test_verdicts_and_their_words():
    assert PairedEstimate(0.5, 0.49, 0.51, 20, 0.01).verdict == FASTER
    assert PairedEstimate(1.1, 1.05, 1.15, 20, 0.01).verdict == SLOWER
    assert PairedEstimate(1.0, 0.99, 1.01, 20, 0.01).verdict == NO_DIFFERENCE
    assert PairedEstimate(0.5, 0.4, 0.6, 3, 0.01).verdict == TOO_FEW
    assert "B 2.00x faster" in PairedEstimate(0.5, 0.49, 0.51, 20, 0.01).summary()
    assert estimate([1.0], [2.0]).verdict == TOO_FEW


@pytest.mark.parametrize("a, b, match", [([1.0, 2.0], [1.0], "pairs"), ([], [], "no samples"),
                                         ([1.0, -1.0], [1.0, 1.0], "positive")])
def test_bad_samples_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        estimate(a, b)
