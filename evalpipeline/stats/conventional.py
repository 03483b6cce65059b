"""Intervals for one model's success rate on one suite, every method side by side.

Sources: the position paper (Bowyer et al.) Section 2.1 (CLT interval, Eq. 2 and
Eq. 5), Section 3 (bootstrap, Bayesian credible intervals, Snippet 1) and
Appendix A (t interval Eq. 11, Wilson Eq. 12, Clopper-Pearson Eq. 24-25);
the measurement post "What can a single accuracy actually tell
you?" (Beta posterior, equal-tailed ``ppf([0.025, 0.975])``).

Every interval here is a function of the scores or of ``(k, n)`` alone.
Graded scores in [0, 1] enter the binomial methods (Beta, Wilson,
Clopper-Pearson) through ``k = sum of scores`` -- a quasi-binomial reading
that is exact for 0/1 scores; the t and bootstrap intervals use the scores
themselves, and the CLT interval uses the sample variance for graded
scores (see :func:`evalpipeline.stats.intervals.clt_interval`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from evalpipeline.stats.intervals import beta_hpdi, beta_posterior, clt_flags, clt_interval

INTERVAL_COLUMNS = {
    "method": "beta_hpdi, beta_equal_tailed, wilson, clopper_pearson, clt, t, bootstrap",
    "kind": "credible (Bayesian, a probability statement about the rate) or confidence (frequentist)",
    "estimate": "point estimate: posterior mean for the Beta rows, k / n otherwise",
    "low": "interval lower bound (the CLT and t bounds are not clipped, so that failures stay visible)",
    "high": "interval upper bound",
    "width": "high - low",
    "level": "nominal probability / confidence level",
    "flag": "zero width or outside [0, 1] (the failures of the position paper's Section 3.1), else None",
    "n": "attempts counted",
    "k": "sum of scores (successes; fractional for graded scores)",
    "prior_a": "Beta prior a of the Bayesian rows (NaN for frequentist rows)",
    "prior_b": "Beta prior b of the Bayesian rows (NaN for frequentist rows)",
    "bootstrap_resamples": "bootstrap resamples (bootstrap row only)",
    "bootstrap_seed": "bootstrap seed (bootstrap row only)",
}

METHODS = ("beta_hpdi", "beta_equal_tailed", "wilson", "clopper_pearson", "clt", "t", "bootstrap")


def _z(level: float) -> float:
    _check_level(level)
    return float(stats.norm.ppf(0.5 + level / 2))


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _check_counts(k, n) -> None:
    k_arr, n_arr = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(n_arr <= 0):
        raise ValueError(f"need n > 0 attempts, got n={n}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")


def wald_interval(k, n, level: float = 0.95):
    """CLT (Wald) interval for a proportion, Eq. 2 with Eq. 5: ``p +- z sqrt(p (1 - p) / n)``.

    Vectorised over ``k`` (and ``n``). Not clipped to [0, 1]: at k = 0 or
    k = n it has zero width, near the boundary it leaves [0, 1].
    """
    _check_counts(k, n)
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    p = k / n
    half = _z(level) * np.sqrt(p * (1 - p) / n)
    return p - half, p + half


def wilson_interval(k, n, level: float = 0.95):
    """Wilson score interval, position paper Appendix A.2 Eq. 12 (vectorised)."""
    _check_counts(k, n)
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    z = _z(level)
    p = k / n
    denominator = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denominator
    half = (z / (2 * n)) / denominator * np.sqrt(4 * n * p * (1 - p) + z**2)
    # Mathematically inside [0, 1], and exactly 0 at k = 0 and 1 at k = n, where centre -+ half leaves
    # rounding (~1e-17 above 0, 1e-16 below 1): those ends are set, the rest clipped. [()] keeps scalars scalar.
    low = np.where(k == 0, 0.0, np.clip(centre - half, 0.0, 1.0))[()]
    high = np.where(k == n, 1.0, np.clip(centre + half, 0.0, 1.0))[()]
    return low, high


def clopper_pearson_interval(k, n, level: float = 0.95):
    """Exact Clopper-Pearson interval, Appendix A.3 Eq. 24-25, via Beta quantiles (vectorised).

    ``lower = B(alpha/2; k, n - k + 1)`` (0 when k = 0) and
    ``upper = B(1 - alpha/2; k + 1, n - k)`` (1 when k = n).
    """
    _check_counts(k, n)
    _check_level(level)
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    alpha = 1 - level
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, stats.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return low, high


def beta_equal_tailed_interval(a, b, level: float = 0.95):
    """Central (equal-tailed, quantile-based) credible interval of Beta(a, b).

    This is the interval of the position paper's Snippet 1
    (``posterior.interval``) and of the post's ``post.ppf([0.025, 0.975])``.
    """
    _check_level(level)
    tail = (1 - level) / 2
    return stats.beta.ppf(tail, a, b), stats.beta.ppf(1 - tail, a, b)


def t_interval(scores, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval, Appendix A.1 Eq. 11: ``mean +- t_{N-1} S / sqrt(N)`` (sample variance).

    Needs at least two scores (one score has no sample variance).
    """
    scores = _scores(scores)
    _check_level(level)
    n = scores.size
    if n < 2:
        raise ValueError(f"the t interval needs at least 2 scores, got {n}")
    mean = float(scores.mean())
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(scores.std(ddof=1)) / math.sqrt(n)
    return mean - half, mean + half


def bootstrap_interval(scores, level: float = 0.95, *, n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap of the mean (position paper Section 3, K = 10,000 resamples by default).

    Resamples the scores with replacement ``n_resamples`` times with a
    seeded generator and takes the empirical alpha/2 and 1 - alpha/2
    quantiles of the resampled means.
    """
    scores = _scores(scores)
    _check_level(level)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    rng = np.random.default_rng(seed)
    n = scores.size
    means = np.empty(n_resamples)
    # Chunks keep memory bounded for long score vectors.
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        means[start:stop] = scores[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def _scores(scores) -> np.ndarray:
    array = np.asarray(scores, dtype=float).ravel()
    if array.size == 0:
        raise ValueError("no scores given")
    if np.isnan(array).any():
        raise ValueError("scores contain NaN; drop unscored attempts first (see posteriors.countable)")
    if (array < 0).any() or (array > 1).any():
        raise ValueError("scores must lie in [0, 1]")
    return array


def interval_table(
    scores=None,
    *,
    k: float | None = None,
    n: int | None = None,
    level: float = 0.95,
    prior: tuple[float, float] = (1.0, 1.0),
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every interval for one success rate, one row per method (columns: ``INTERVAL_COLUMNS``).

    Give either ``scores`` (one score in [0, 1] per attempt) or the counts
    ``k`` (successes) and ``n`` (attempts). With counts only, the t and
    bootstrap rows are computed from the 0/1 vector with ``k`` ones (so
    ``k`` must then be a whole number). The Beta prior (default the
    position paper's uniform Beta(1, 1); the post's worked examples use
    Beta(2, 2)) is recorded in ``prior_a`` / ``prior_b``.
    """
    if scores is not None:
        if k is not None or n is not None:
            raise ValueError("give either scores or (k, n), not both")
        values = _scores(scores)
        n_value, k_value = int(values.size), float(values.sum())
    else:
        if k is None or n is None:
            raise ValueError("give scores, or both k and n")
        _check_counts(k, n)
        if float(k) != int(k) or float(n) != int(n):
            raise ValueError(
                f"with counts only, k and n must be whole numbers (got k={k}, n={n}); pass graded scores instead"
            )
        n_value, k_value = int(n), float(k)
        values = np.concatenate([np.ones(int(k)), np.zeros(int(n) - int(k))])
    _check_level(level)
    a, b = beta_posterior(k_value, n_value, prior)
    posterior_mean = a / (a + b)
    observed = k_value / n_value
    rows = []

    def add(method, kind, estimate, low, high, bayesian=False, bootstrap=False):
        low, high = float(low), float(high)
        rows.append(
            {
                "method": method,
                "kind": kind,
                "estimate": float(estimate),
                "low": low,
                "high": high,
                "width": high - low,
                "level": level,
                "flag": clt_flags(low, high),
                "n": n_value,
                "k": k_value,
                "prior_a": float(prior[0]) if bayesian else math.nan,
                "prior_b": float(prior[1]) if bayesian else math.nan,
                "bootstrap_resamples": n_resamples if bootstrap else pd.NA,
                "bootstrap_seed": seed if bootstrap else pd.NA,
            }
        )

    try:
        hpdi = beta_hpdi(a, b, level)
    except ValueError:  # U-shaped posterior (prior a, b < 1 and no data): no single HPD interval
        hpdi = (math.nan, math.nan)
    add("beta_hpdi", "credible", posterior_mean, *hpdi, bayesian=True)
    add("beta_equal_tailed", "credible", posterior_mean, *beta_equal_tailed_interval(a, b, level), bayesian=True)
    add("wilson", "confidence", observed, *(float(x) for x in wilson_interval(k_value, n_value, level)))
    add(
        "clopper_pearson",
        "confidence",
        observed,
        *(float(x) for x in clopper_pearson_interval(k_value, n_value, level)),
    )
    _, clt_low, clt_high = clt_interval(values, level)
    add("clt", "confidence", observed, clt_low, clt_high)
    if n_value >= 2:
        add("t", "confidence", observed, *t_interval(values, level))
    else:
        add("t", "confidence", observed, math.nan, math.nan)
    add(
        "bootstrap",
        "confidence",
        observed,
        *bootstrap_interval(values, level, n_resamples=n_resamples, seed=seed),
        bootstrap=True,
    )
    frame = pd.DataFrame(rows, columns=list(INTERVAL_COLUMNS))
    frame["bootstrap_resamples"] = frame["bootstrap_resamples"].astype("Int64")
    frame["bootstrap_seed"] = frame["bootstrap_seed"].astype("Int64")
    return frame
