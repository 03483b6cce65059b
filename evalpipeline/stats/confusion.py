"""Confusion-matrix metrics with uncertainty: F1 from a Dirichlet posterior.

Source: ``no-clt-position-paper.txt`` Section 3.5 (Eq. 9: categorical
outcomes TP/FP/FN/TN, uniform Dirichlet(1, 1, 1, 1) prior, posterior
Dirichlet(1 + counts); Eq. 10: F1; Snippet 3: 2000 draws, HDI and
quantile interval) and Appendix A.5 (the delta-method CLT interval,
Eq. 41, reported beside as the conventional reading).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats


def _check_counts(tp, fp, fn, tn) -> np.ndarray:
    counts = np.array([tp, fp, fn, tn], dtype=float)
    if np.any(counts < 0) or np.any(np.isnan(counts)):
        raise ValueError(f"confusion counts must be non-negative numbers, got TP={tp}, FP={fp}, FN={fn}, TN={tn}")
    return counts


def f1_from_probabilities(theta: np.ndarray) -> np.ndarray:
    """Eq. 29: ``F1 = 2 theta_TP / (2 theta_TP + theta_FP + theta_FN)``; last axis is (TP, FP, FN, TN)."""
    theta = np.asarray(theta, dtype=float)
    return 2 * theta[..., 0] / (2 * theta[..., 0] + theta[..., 1] + theta[..., 2])


def f1_delta_interval(tp, fp, fn, tn, level: float = 0.95) -> tuple[float, float, float]:
    """Plug-in F1 and its delta-method CLT interval, Appendix A.5 Eq. 40-41. Returns (f1, low, high)."""
    _check_counts(tp, fp, fn, tn)
    denominator = 2 * tp + fp + fn
    if denominator == 0:
        return math.nan, math.nan, math.nan
    f1 = 2 * tp / denominator
    se = math.sqrt(f1 * (1 - f1) * (2 - f1) / denominator)
    z = float(stats.norm.ppf(0.5 + level / 2))
    return f1, f1 - z * se, f1 + z * se


def _hdi(samples: np.ndarray, mass: float) -> tuple[float, float]:
    # Shortest window holding `mass` of the sorted draws (what arviz.hdi computes for unimodal draws).
    ordered = np.sort(samples)
    count = int(math.floor(mass * ordered.size))
    widths = ordered[count:] - ordered[: ordered.size - count]
    start = int(np.argmin(widths))
    return float(ordered[start]), float(ordered[start + count])


F1_COLUMNS = {
    "tp": "true positives", "fp": "false positives", "fn": "false negatives", "tn": "true negatives",
    "f1_plugin": "2 TP / (2 TP + FP + FN)",
    "f1_posterior_mean": "posterior mean of F1 (Dirichlet posterior)",
    "qbi_low": "equal-tailed (quantile-based) credible interval, lower",
    "qbi_high": "upper",
    "hdi_low": "highest-density interval of the F1 draws, lower",
    "hdi_high": "upper",
    "delta_low": "delta-method CLT interval (Eq. 41), lower, unclipped",
    "delta_high": "upper",
    "level": "interval probability",
    "prior_concentration": "Dirichlet prior concentration per cell",
    "n_draws": "posterior draws",
    "seed": "seed of the draws",
}


def f1_posterior(
    tp, fp, fn, tn, *, prior_concentration: float = 1.0, level: float = 0.95, n_draws: int = 20_000, seed: int = 0
) -> dict:
    """F1 under the Dirichlet-categorical model Eq. 9 (Snippet 3), plus the plug-in and delta-method readings.

    Returns a dict with the keys of ``F1_COLUMNS`` and ``draws`` (the F1 draws).
    """
    counts = _check_counts(tp, fp, fn, tn)
    if prior_concentration <= 0:
        raise ValueError(f"prior concentration must be positive, got {prior_concentration}")
    rng = np.random.default_rng(seed)
    draws = f1_from_probabilities(rng.dirichlet(counts + prior_concentration, n_draws))
    tail = (1 - level) / 2
    qbi_low, qbi_high = np.quantile(draws, [tail, 1 - tail])
    hdi_low, hdi_high = _hdi(draws, level)
    plugin, delta_low, delta_high = f1_delta_interval(tp, fp, fn, tn, level)
    return {
        "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "f1_plugin": plugin,
        "f1_posterior_mean": float(draws.mean()),
        "qbi_low": float(qbi_low), "qbi_high": float(qbi_high),
        "hdi_low": hdi_low, "hdi_high": hdi_high,
        "delta_low": delta_low, "delta_high": delta_high,
        "level": level, "prior_concentration": float(prior_concentration), "n_draws": n_draws, "seed": seed,
        "draws": draws,
    }


def f1_table(counts: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """:func:`f1_posterior` for every row of a frame with columns tp, fp, fn, tn (other columns kept in front)."""
    missing = {"tp", "fp", "fn", "tn"} - set(counts.columns)
    if missing:
        raise ValueError(f"confusion counts lack columns {sorted(missing)}")
    keys = [c for c in counts.columns if c not in {"tp", "fp", "fn", "tn"}]
    rows = []
    for record in counts.to_dict("records"):
        result = f1_posterior(record["tp"], record["fp"], record["fn"], record["tn"], **kwargs)
        result.pop("draws")
        rows.append({**{k: record[k] for k in keys}, **result})
    return pd.DataFrame(rows, columns=keys + list(F1_COLUMNS))
