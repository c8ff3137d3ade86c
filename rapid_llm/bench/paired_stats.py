"""Is B faster than A? A ratio with a 95 % confidence interval from interleaved, paired timings.

The samples come in pairs ``(a_i, b_i)`` taken next to each other in time
(rapid_llm.bench.compare alternates A B, B A, ...), and the figure is the
geometric mean of ``b_i / a_i`` with a Student-t interval on the mean of
``d_i = log(b_i / a_i)``. Why this and not something else:

* Pairing: a shared GPU drifts by a few percent over seconds (clocks, other
  tenants, temperature). Both members of a pair see nearly the same machine,
  so the drift cancels in ``d_i`` while it would widen any interval built
  from two separate sets of samples. Alternating the order inside pairs
  cancels a linear drift within a pair as well.
* Logs: a speed-up is a ratio, and ``log`` makes it a difference whose
  interval maps back to an interval on the ratio (``exp`` is monotonic), with
  the same meaning for 0.5x and 2x.
* Student t: each sample is itself the median of a block of calls (the
  harness's figure), so ``d_i`` is close to normal, and the t interval then
  has its nominal coverage at any number of pairs; a bootstrap would need
  more pairs for the same coverage and gives a different answer per seed.
  ``tests/unit/bench/test_paired_stats.py`` checks the coverage on synthetic data.

The verdict is "faster" or "slower" when the interval excludes 1, else
"no difference detectable" (with too few pairs for an interval, it says so).

How many pairs: to detect a relative difference ``effect`` (3 %) with
probability ``power`` (80 %) at the 5 % level, a paired t-test needs the
smallest ``n`` with ``(t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n) <=
log(1 + effect)``, where ``sd`` is the standard deviation of ``d_i`` measured
on a pilot (:func:`pairs_needed`). Choosing ``n`` from the pilot's spread,
never from its mean, keeps the false-positive rate at its nominal level.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

__all__ = ["PairedEstimate", "estimate", "pairs_needed", "t_quantile", "MIN_PAIRS", "FASTER", "SLOWER",
           "NO_DIFFERENCE", "TOO_FEW"]

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no difference detectable"
TOO_FEW = "too few samples"
#: Fewer pairs than this give no interval worth reading (the t quantile grows fast below it).
MIN_PAIRS = 5


@dataclass(frozen=True)
class PairedEstimate:
    """B's time over A's (geometric mean of paired ratios), its interval, and what follows from it."""

    ratio: float
    low: float
    high: float
    pairs: int
    sd_log: float  # standard deviation of log(b_i / a_i): the noise one pair carries
    level: float = 0.95

    @property
    def verdict(self) -> str:
        """B relative to A: "faster", "slower", "no difference detectable" (or "too few samples")."""
        if self.pairs < MIN_PAIRS or not math.isfinite(self.low):
            return TOO_FEW
        if self.high < 1.0:
            return FASTER
        if self.low > 1.0:
            return SLOWER
        return NO_DIFFERENCE

    @property
    def speedup(self) -> float:
        """How many times faster B is than A (A's time over B's)."""
        return 1.0 / self.ratio

    def summary(self) -> str:
        """One line: "B 1.83x faster (B/A 0.546, 95% CI 0.541-0.551, 40 pairs)"."""
        ci = f"{100 * self.level:.0f}% CI {self.low:.3f}-{self.high:.3f}" if math.isfinite(self.low) else "no CI"
        what = {FASTER: f"B {self.speedup:.2f}x faster", SLOWER: f"B {self.ratio:.2f}x slower"}.get(
            self.verdict, self.verdict)
        return f"{what} (B/A {self.ratio:.3f}, {ci}, {self.pairs} pairs)"


def estimate(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> PairedEstimate:
    """The paired estimate of B/A from samples taken in pairs (``a[i]`` beside ``b[i]``)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples must come in pairs: {len(a)} of A against {len(b)} of B")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if any(not (x > 0 and math.isfinite(x)) for x in (*a, *b)):
        raise ValueError("paired samples must be positive, finite times")
    n = len(a)
    if n == 0:
        raise ValueError("no samples to estimate from")
    d = [math.log(y / x) for x, y in zip(a, b)]
    mean = sum(d) / n
    if n < 2:
        return PairedEstimate(math.exp(mean), math.nan, math.nan, n, math.nan, level)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return PairedEstimate(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, sd, level)


def pairs_needed(sd_log: float, effect: float = 0.03, power: float = 0.8, level: float = 0.95,
                 cap: int = 100_000) -> int:
    """Pairs a paired t-test needs to detect a relative difference ``effect`` with ``power``, at noise
    ``sd_log`` (the spread of log-ratios a pilot measured); at least :data:`MIN_PAIRS`, at most ``cap``."""
    if not effect > 0:
        raise ValueError(f"effect must be > 0, got {effect}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if not sd_log >= 0 or not math.isfinite(sd_log):
        raise ValueError(f"sd_log must be a finite spread >= 0, got {sd_log}")
    delta = math.log1p(effect)
    z = NormalDist().inv_cdf(0.5 + level / 2) + NormalDist().inv_cdf(power)
    n = max(MIN_PAIRS, math.ceil((z * sd_log / delta) ** 2))  # the normal answer, then t's correction upward
    while n < cap and (t_quantile(0.5 + level / 2, n - 1) + t_quantile(power, n - 1)) * sd_log / math.sqrt(n) > delta:
        n += 1
    return min(n, cap)


def _two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4: exact, finite sums)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):  # cos + (2/3) cos^3 + (2*4)/(3*5) cos^5 + ...
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return (2 / math.pi) * (theta + s * total) if df > 1 else 2 * theta / math.pi
    term, total = 1.0, 0.0
    for k in range(1, df // 2 + 1):  # 1 + (1/2) cos^2 + (1*3)/(2*4) cos^4 + ...
        total += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the exact CDF)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df > 2000:  # the series grows with df; the normal is within 1e-4 there
        return NormalDist().inv_cdf(p)
    target = 2 * p - 1  # P(|T| <= t)
    lo, hi = 0.0, 1.0
    while _two_sided_mass(hi, df) < target:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _two_sided_mass(mid, df) < target else (lo, mid)
    return (lo + hi) / 2
