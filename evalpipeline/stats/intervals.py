"""Intervals for a success rate: Beta posterior HPDI and the CLT interval.

Plain functions on numbers; see the position paper (Bowyer et al.) Section 2
(CLT intervals, Eq. 2 and Eq. 5) and Section 4 (Beta posteriors).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats


def beta_posterior(successes: float, trials: float, prior: tuple[float, float] = (1.0, 1.0)) -> tuple[float, float]:
    """Conjugate update: Beta(a, b) prior, ``successes`` of ``trials`` -> Beta(a + k, b + n - k).

    ``successes`` may be fractional (the sum of scores in [0, 1]); the update
    then reads each score as that fraction of a success, a quasi-binomial
    likelihood that is exact for 0/1 scores.
    """
    a, b = prior
    if a <= 0 or b <= 0:
        raise ValueError(f"Beta prior parameters must be positive, got {prior}")
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    return a + successes, b + trials - successes


def beta_hpdi(a: float, b: float, mass: float = 0.95) -> tuple[float, float]:
    """Highest posterior density interval of Beta(a, b) holding ``mass``.

    Exact for unimodal and monotone densities: for ``a, b > 1`` the interval
    [l, u] with F(u) - F(l) = mass and equal density at both ends, found by
    minimising the width over the lower tail probability; for a density
    that falls (a <= 1 < b) it is [0, F^-1(mass)], for one that rises
    (b <= 1 < a) [F^-1(1 - mass), 1]; the flat Beta(1, 1) gets the central
    interval. A U-shaped Beta (a < 1 and b < 1) has a two-piece HPD region,
    which one interval cannot express: it raises ``ValueError``.
    """
    if not 0 < mass < 1:
        raise ValueError(f"mass must be in (0, 1), got {mass}")
    if a < 1 and b < 1:
        raise ValueError(f"Beta({a}, {b}) is U-shaped: its HPD region is not one interval")
    if a == 1 and b == 1:
        return (1 - mass) / 2, 1 - (1 - mass) / 2

    # The quantile function as a plain ufunc: the same numbers as ``stats.beta(a, b).ppf`` (which calls
    # it) without ~50 us of argument handling per call, of which the width search makes ~70.
    def ppf(q: float) -> float:
        return float(special.betaincinv(a, b, q))

    if a <= 1:
        return 0.0, ppf(mass)
    if b <= 1:
        return ppf(1 - mass), 1.0

    def width(lower_tail: float) -> float:
        return ppf(lower_tail + mass) - ppf(lower_tail)

    best = optimize.minimize_scalar(width, bounds=(0.0, 1.0 - mass), method="bounded", options={"xatol": 1e-12})
    lower_tail = float(best.x)
    return ppf(lower_tail), ppf(lower_tail + mass)


def clt_interval(scores: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """The CLT (Wald) interval ``mean +- z * SE`` as commonly reported.

    For 0/1 scores SE = sqrt(p (1 - p) / N) (position paper Eq. 5); for
    graded scores SE = sqrt(S^2 / N) with the sample variance S^2 (N - 1
    denominator). Returns (mean, low, high), not clipped to [0, 1], so that
    its failures stay visible (see :func:`clt_flags`).
    """
    scores = np.asarray(scores, dtype=float)
    n = scores.size
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(scores.mean())
    if np.isin(scores, (0.0, 1.0)).all():
        variance = mean * (1 - mean)
    else:
        variance = float(scores.var(ddof=1)) if n > 1 else 0.0
    z = float(stats.norm.ppf(0.5 + level / 2))
    half = z * math.sqrt(variance / n)
    return mean, mean - half, mean + half


def clt_flags(low: float, high: float) -> str | None:
    """Say when a CLT interval is degenerate: zero width, or leaving [0, 1]."""
    flags = []
    if high - low == 0:
        flags.append("zero width")
    if low < 0 or high > 1:
        flags.append("outside [0, 1]")
    return ", ".join(flags) or None
