"""Coverage of interval methods: exact (summing over the binomial) and by the position paper's simulation.

the position paper (Bowyer et al.) Section 3, "Experimental setup": sample
``theta`` from the prior (100 values), generate 200 datasets per theta for
N in {3, 10, 30, 100}, build every interval, count how often it contains
the true theta. For IID 0/1 data every interval here depends on the data
only through ``k``, which makes two shortcuts exact:

* :func:`exact_average_coverage` integrates the coverage over
  ``theta ~ Beta(a, b)`` in closed form:
  ``sum_k BetaBinom(k; N, a, b) * [F(u_k) - F(l_k)]`` with ``F`` the CDF of
  the posterior Beta(a + k, b + N - k). No simulation noise at all.
* :func:`simulate_iid_coverage` follows the paper's protocol, computing each
  method once per distinct ``(N, k)``; the bootstrap of 0/1 data resamples
  ``k* ~ Binomial(N, k / N)``, which is the distribution of the resampled
  count, so it is drawn directly (one seeded set of K resamples per
  ``(N, k)``, shared by the datasets with that ``k``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
from scipy import stats

from evalpipeline.stats.conventional import (
    beta_equal_tailed_interval,
    clopper_pearson_interval,
    wald_interval,
    wilson_interval,
)
from evalpipeline.stats.intervals import beta_hpdi

IntervalFromCounts = Callable[[np.ndarray, int, float], tuple[np.ndarray, np.ndarray]]


def _beta_equal_tailed(prior: tuple[float, float]) -> IntervalFromCounts:
    def method(k, n, level):
        return beta_equal_tailed_interval(prior[0] + k, prior[1] + n - k, level)

    return method


def _beta_hpdi(prior: tuple[float, float]) -> IntervalFromCounts:
    def method(k, n, level):
        bounds = np.array([beta_hpdi(prior[0] + kk, prior[1] + n - kk, level) for kk in np.asarray(k, dtype=float)])
        return bounds[:, 0], bounds[:, 1]

    return method


def _t_from_counts(k, n, level):
    # The t interval of 0/1 data: S^2 = n / (n - 1) * p (1 - p).
    k = np.asarray(k, dtype=float)
    p = k / n
    s = np.sqrt(n / (n - 1) * p * (1 - p))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * s / np.sqrt(n)
    return p - half, p + half


def _ideal_bootstrap(k, n, level):
    # The percentile bootstrap with infinitely many resamples: quantiles of Binomial(n, k / n) / n.
    k = np.asarray(k, dtype=float)
    tail = (1 - level) / 2
    return stats.binom.ppf(tail, n, k / n) / n, stats.binom.ppf(1 - tail, n, k / n) / n


def interval_methods(prior: tuple[float, float] = (1.0, 1.0)) -> dict[str, IntervalFromCounts]:
    """The IID methods as functions of ``(k, n, level)``; Beta rows use ``prior`` for inference."""
    return {
        "beta_equal_tailed": _beta_equal_tailed(prior),
        "beta_hpdi": _beta_hpdi(prior),
        "wilson": wilson_interval,
        "clopper_pearson": clopper_pearson_interval,
        "clt": wald_interval,
        "t": _t_from_counts,
        "bootstrap_ideal": _ideal_bootstrap,
    }


def exact_average_coverage(
    method: IntervalFromCounts, n: int, level: float = 0.95, theta_prior: tuple[float, float] = (1.0, 1.0)
) -> float:
    """Coverage of ``method`` averaged over ``theta ~ Beta(theta_prior)``, computed exactly.

    ``P(theta in I(K)) = sum_k P(K = k) P(theta in [l_k, u_k] | K = k)``,
    where ``P(K = k)`` is Beta-Binomial and ``theta | K = k`` is
    Beta(a + k, b + n - k). Bounds are clipped to [0, 1] (a bound outside
    covers nothing more). With a uniform prior and the Beta(1, 1)
    equal-tailed interval every term is ``level / (n + 1)``: exactly
    ``level``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    a, b = theta_prior
    k = np.arange(n + 1, dtype=float)
    low, high = method(k, n, level)
    low, high = np.clip(np.asarray(low, dtype=float), 0, 1), np.clip(np.asarray(high, dtype=float), 0, 1)
    weights = stats.betabinom.pmf(k, n, a, b)
    inside = stats.beta.cdf(high, a + k, b + n - k) - stats.beta.cdf(low, a + k, b + n - k)
    return float(np.sum(weights * np.maximum(inside, 0.0)))


def exact_coverage_table(
    n_values: Iterable[int] = (3, 10, 30, 100),
    level: float = 0.95,
    theta_prior: tuple[float, float] = (1.0, 1.0),
    inference_prior: tuple[float, float] = (1.0, 1.0),
) -> pd.DataFrame:
    """Exact average coverage per method and N (columns: method, n, level, coverage)."""
    rows = []
    for name, method in interval_methods(inference_prior).items():
        for n in n_values:
            rows.append(
                {
                    "method": name,
                    "n": int(n),
                    "level": level,
                    "coverage": exact_average_coverage(method, int(n), level, theta_prior),
                }
            )
    return pd.DataFrame(rows)


def simulate_iid_coverage(
    n_values: Iterable[int] = (3, 10, 30, 100),
    *,
    n_thetas: int = 100,
    n_datasets: int = 200,
    levels: Iterable[float] = (0.8, 0.9, 0.95, 0.99),
    theta_prior: tuple[float, float] = (1.0, 1.0),
    inference_prior: tuple[float, float] = (1.0, 1.0),
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """The position paper's IID coverage experiment (Section 3, Eq. 6).

    Returns one row per (method, n, level) with columns ``method, n, level,
    coverage, mean_width, n_datasets`` (``n_thetas * n_datasets`` datasets
    per N). Methods: those of :func:`interval_methods` (the ideal bootstrap
    dropped) plus ``bootstrap`` with ``n_resamples`` resamples.
    """
    rng = np.random.default_rng(seed)
    methods = {name: fn for name, fn in interval_methods(inference_prior).items() if name != "bootstrap_ideal"}
    rows = []
    for n in n_values:
        n = int(n)
        thetas = rng.beta(*theta_prior, size=n_thetas)
        successes = rng.binomial(n, np.repeat(thetas, n_datasets))
        truth = np.repeat(thetas, n_datasets)
        k_all = np.arange(n + 1, dtype=float)
        boot_counts = rng.binomial(n, k_all[:, None] / n, size=(n + 1, n_resamples)) / n
        for level in levels:
            bounds = {name: fn(k_all, n, level) for name, fn in methods.items()}
            tail = (1 - level) / 2
            bounds["bootstrap"] = (np.quantile(boot_counts, tail, axis=1), np.quantile(boot_counts, 1 - tail, axis=1))
            for name, (low, high) in bounds.items():
                low, high = np.asarray(low, dtype=float)[successes], np.asarray(high, dtype=float)[successes]
                covered = (low <= truth) & (truth <= high)
                rows.append(
                    {
                        "method": name,
                        "n": n,
                        "level": level,
                        "coverage": float(covered.mean()),
                        "mean_width": float(np.mean(high - low)),
                        "n_datasets": int(truth.size),
                    }
                )
    return pd.DataFrame(rows)


#: The designs of :func:`simulate_design_coverage`: name -> (units, attempts per unit, unit kind). Items with
#: repeats draw each item's rate from Beta(theta d, (1 - theta) d); clusters draw each cluster's rate so and give
#: each of its items one attempt.
DESIGNS = {
    "10 items x 1 epoch": (10, 1, "item"),
    "100 items x 1 epoch": (100, 1, "item"),
    "40 items x 5 epochs": (40, 5, "item"),
    "20 items x 10 epochs": (20, 10, "item"),
    "100 items x 3 epochs": (100, 3, "item"),
    "10 clusters x 5 items": (10, 5, "cluster"),
}


def simulate_design_coverage(
    designs: dict[str, tuple[int, int, str]] | None = None,
    *,
    n_datasets: int = 1000,
    level: float = 0.95,
    theta: float | None = None,
    concentration: float = 2.0,
    seed: int = 0,
) -> pd.DataFrame:
    """Coverage of the headline interval (:func:`evalpipeline.stats.posteriors.success_rate_posterior`) and of the
    independent-attempts interval beside it, by the position paper's protocol with planted truth.

    Per dataset: ``theta`` from the uniform prior (the paper's protocol; or fixed when ``theta`` is given),
    unit rates from Beta(theta d, (1 - theta) d) with ``d = concentration`` (the mean is theta; ICC 1 / (1 + d)),
    attempts Bernoulli. An interval covers when it holds theta, the rate on a new question. Returns one row per
    design: ``design, units, attempts_per_unit, n_datasets, coverage, coverage_independent, mc_se,
    mean_design_effect, mean_width, mean_width_independent``.
    """
    from evalpipeline.stats.posteriors import success_rate_posterior

    rng = np.random.default_rng(seed)
    rows = []
    for name, (n_units, per_unit, kind) in (designs or DESIGNS).items():
        units = np.repeat(np.arange(n_units), per_unit).astype(str)
        covered = covered_independent = 0
        effects, widths, widths_independent = [], [], []
        for _ in range(n_datasets):
            truth = rng.uniform() if theta is None else theta
            rates = (
                rng.beta(truth * concentration, (1 - truth) * concentration, n_units)
                if per_unit > 1
                else np.full(n_units, truth)
            )
            scores = (rng.random(n_units * per_unit) < np.repeat(rates, per_unit)).astype(float)
            result = success_rate_posterior(scores, units, kind, mass=level)
            covered += result["hpdi_low"] <= truth <= result["hpdi_high"]
            covered_independent += result["independent_hpdi_low"] <= truth <= result["independent_hpdi_high"]
            effects.append(result["design_effect"])
            widths.append(result["hpdi_high"] - result["hpdi_low"])
            widths_independent.append(result["independent_hpdi_high"] - result["independent_hpdi_low"])
        coverage = covered / n_datasets
        rows.append(
            {
                "design": name,
                "units": n_units,
                "attempts_per_unit": per_unit,
                "n_datasets": n_datasets,
                "coverage": coverage,
                "coverage_independent": covered_independent / n_datasets,
                "mc_se": float(np.sqrt(coverage * (1 - coverage) / n_datasets)),
                "mean_design_effect": float(np.mean(effects)),
                "mean_width": float(np.mean(widths)),
                "mean_width_independent": float(np.mean(widths_independent)),
            }
        )
    return pd.DataFrame(rows)


def simulate_pair_calibration(
    *,
    n_pairs: int = 4000,
    n_items: int = 12,
    epochs: int = 5,
    interaction: float = 0.0,
    bins: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """Calibration of the paired logit's P(A > B) (:func:`evalpipeline.stats.compare.paired_logit_comparison`)
    under repeats, with planted truth drawn from the comparison's prior.

    Per pair: ``mid ~ N(0, 1.5)``, ``gap ~ N(0, 1)``, ``spread ~ HalfNormal(2.5)``, item effects
    ``N(0, spread)``; each model's rate on an item is ``s(mid + item +- gap / 2 + u)`` with ``u ~ N(0,
    interaction)`` per model and item (models that differ item by item beyond one gap), and ``epochs`` 0/1
    attempts of each. A is truly better when the gap is positive. Pairs are oriented so that the reported
    probability is at least 0.5 (the comparison is symmetric) and binned in ``bins`` equal bins of [0.5, 1].
    Returns per bin: ``bin, pairs, mean_reported, share_better, mc_se``.
    """
    from scipy import special

    from evalpipeline.stats.compare import paired_logit_comparison

    rng = np.random.default_rng(seed)
    reported, better = np.empty(n_pairs), np.empty(n_pairs, dtype=bool)
    trials = np.full(n_items, float(epochs))
    for i in range(n_pairs):
        mid, gap, spread = rng.normal(0, 1.5), rng.normal(0, 1.0), abs(rng.normal(0, 2.5))
        item = rng.normal(0, spread, n_items)
        rate_a = special.expit(mid + item + gap / 2 + rng.normal(0, interaction, n_items))
        rate_b = special.expit(mid + item - gap / 2 + rng.normal(0, interaction, n_items))
        k_a, k_b = rng.binomial(epochs, rate_a).astype(float), rng.binomial(epochs, rate_b).astype(float)
        p = paired_logit_comparison(k_a, trials, k_b, trials)["p_a_better"]
        reported[i], better[i] = (p, gap > 0) if p >= 0.5 else (1 - p, gap < 0)
    edges = np.linspace(0.5, 1.0, bins + 1)
    index = np.clip(np.digitize(reported, edges) - 1, 0, bins - 1)
    rows = []
    for b in range(bins):
        chosen = index == b
        if chosen.any():
            mean = float(reported[chosen].mean())
            rows.append(
                {
                    "bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}",
                    "pairs": int(chosen.sum()),
                    "mean_reported": mean,
                    "share_better": float(better[chosen].mean()),
                    "mc_se": float(np.sqrt(mean * (1 - mean) / chosen.sum())),
                }
            )
    return pd.DataFrame(rows)
