"""PSIS-LOO (Vehtari, Gelman & Gabry 2017) vectorised over observational units.

``arviz.loo`` smooths each unit's importance weights in a Python loop; on a
100-LLM suite (20,000 units x 2,000 draws) that is ~4 s of every fit's
diagnostics and again of its WAIC/LOO ranking. :func:`loo` computes the same
quantities -- arviz's reff, its tail length, its generalised-Pareto fit
(Zhang & Stephens, with arviz's prior on k) and its smoothing and truncation --
for all units at once, in chunks. A unit whose tail is not the standard length
(ties at the cutoff, a cutoff below the smallest float) or whose fit fails is
handed to arviz's own per-unit routine, so every unit gets arviz's answer
(tests/test_psis.py checks the values against ``arviz.loo``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import arviz as az
import numpy as np
from arviz.stats.stats import _psislw

from evalpipeline.models import convergence

#: units smoothed together; bounds the (units, m, tail) work array of the Pareto fit (~100 MB)
CHUNK_UNITS = 1024


@dataclass(frozen=True)
class LooResult:
    """What ``arviz.loo(..., pointwise=True)`` reports, on the log scale."""

    elpd_loo: float
    se: float
    p_loo: float
    loo_i: np.ndarray  # (units,)
    pareto_k: np.ndarray  # (units,)
    lppd_i: np.ndarray  # (units,) log of the mean likelihood over the draws
    good_k: float
    n_samples: int

    @property
    def warning(self) -> bool:
        return bool(np.any(self.pareto_k > self.good_k))


def loo(idata: az.InferenceData, var_name: str = "obs") -> LooResult:
    """PSIS-LOO of ``idata``'s pointwise log-likelihood ``var_name``, as ``arviz.loo`` computes it.

    reff is arviz's: the mean ESS ("mean" method) over every posterior quantity over the number
    of draws (1 with one chain)."""
    return loo_from_log_likelihood(*log_likelihood_matrix(idata, var_name))


def log_likelihood_matrix(idata: az.InferenceData, var_name: str = "obs") -> tuple[np.ndarray, float]:
    """``idata``'s pointwise log-likelihood as a (units, samples) matrix in arviz's stacking order
    (a view where possible: a 100-LLM suite fit's is 320 MB), and arviz's reff."""
    log_lik = idata.log_likelihood[var_name]
    chains, draws = log_lik.sizes["chain"], log_lik.sizes["draw"]
    values = np.asarray(log_lik.transpose("chain", "draw", ...).values, dtype=float)
    values = values.reshape(chains * draws, -1).T
    if chains == 1:
        return values, 1.0
    ess = convergence.ess_mean(idata.posterior)  # arviz's az.ess(method="mean"), vectorised
    return values, float(np.hstack([v.ravel() for v in ess.values()]).mean()) / (chains * draws)


def loo_from_log_likelihood(log_lik: np.ndarray, reff: float) -> LooResult:
    """PSIS-LOO from a (units, samples) log-likelihood matrix and relative efficiency ``reff``."""
    log_lik = np.asarray(log_lik, dtype=float)
    if log_lik.ndim != 2 or log_lik.shape[1] < 2:
        raise ValueError(f"log-likelihood must be (units, samples) with >= 2 samples, got shape {log_lik.shape}")
    units, samples = log_lik.shape
    loo_i, pareto_k, lppd_i = np.empty(units), np.empty(units), np.empty(units)
    for start in range(0, units, CHUNK_UNITS):  # chunks of rows stay in cache
        block = slice(start, start + CHUNK_UNITS)
        # row-major first: a fit's matrix is a transposed view, and partitioning or reducing its rows in
        # place strides over memory (2.1 against 1.2 s for a 100-LLM suite's 20,200 units x 2,000 draws)
        rows = np.ascontiguousarray(log_lik[block])
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # arviz's NaN/inf units stay so
            loo_i[block], pareto_k[block] = _smoothed_loo(rows, reff)
        lppd_i[block] = _logsumexp(rows) - math.log(samples)
    lppd = float(lppd_i.sum())
    elpd = float(loo_i.sum())
    return LooResult(
        elpd_loo=elpd,
        se=float(math.sqrt(units * np.var(loo_i))),
        p_loo=lppd - elpd,
        loo_i=loo_i,
        pareto_k=pareto_k,
        lppd_i=lppd_i,
        good_k=min(1 - 1 / math.log10(samples), 0.7),
        n_samples=samples,
    )


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=1, keepdims=True)
    return np.log(np.exp(x - top).sum(axis=1)) + top[:, 0]


def _smoothed_loo(log_lik: np.ndarray, reff: float) -> tuple[np.ndarray, np.ndarray]:
    """loo_i and Pareto k of each row (unit): arviz's ``_psislw`` on -log_lik, then logsumexp."""
    units, samples = log_lik.shape
    cutoff_ind = -int(np.ceil(min(samples / 5.0, 3 * (samples / reff) ** 0.5))) - 1
    tail_len = -cutoff_ind - 1
    cutoffmin = np.log(np.finfo(float).tiny)

    # only the cutoff and the tail need order (a weight's log-likelihood is minus the weight itself)
    split = samples - tail_len - 1
    raw = np.negative(log_lik, order="C")
    raw.partition(split, axis=1)
    raw[:, split:] = np.sort(raw[:, split:], axis=1)  # the cutoff, then the tail ascending
    largest = raw[:, -1]
    body = raw[:, : samples - tail_len] - largest[:, None]  # the largest weight at 0, as arviz does
    tail = raw[:, -tail_len:] - largest[:, None]
    tail_lik = -raw[:, -tail_len:]
    xcutoff = body[:, -1]
    standard = (xcutoff > cutoffmin) & (tail[:, 0] > xcutoff) & (tail_len > 4)

    k = np.full(units, np.nan)
    if standard.any():
        k_std, sigma = _gpdfit(np.exp(tail[standard]) - np.exp(xcutoff[standard])[:, None])
        k[standard] = k_std
        fitted = np.isfinite(k_std) & (sigma > 0)
        rows = np.flatnonzero(standard)[fitted]
        probs = np.arange(0.5, tail_len) / tail_len
        kk, ss = k_std[fitted, None], sigma[fitted, None]
        tiny = np.abs(kk) < np.finfo(float).eps
        quantiles = np.where(tiny, -np.log1p(-probs), np.expm1(-kk * np.log1p(-probs)) / np.where(tiny, 1.0, kk)) * ss
        tail[rows] = np.log(quantiles + np.exp(xcutoff[rows])[:, None])
        # a fit with k not finite leaves the raw weights (as arviz does); sigma <= 0 goes to arviz below
        standard[np.flatnonzero(standard)[~fitted & np.isfinite(k_std)]] = False
    np.minimum(tail, 0.0, out=tail)  # truncate at the largest raw weight
    top = np.maximum(xcutoff, tail.max(axis=1))[:, None]
    log_norm = np.log(np.exp(body - top).sum(axis=1) + np.exp(tail - top).sum(axis=1)) + top[:, 0]
    # a body weight is exp(-log_lik - largest), so weight x likelihood is exp(-largest) for each of them
    loo_i = np.logaddexp(math.log(samples - tail_len) - largest, _logsumexp(tail + tail_lik)) - log_norm
    for row in np.flatnonzero(~standard):  # ties at the cutoff, tiny cutoffs, short tails: arviz per unit
        weights, k[row] = _psislw(-log_lik[row].copy(), cutoff_ind, cutoffmin, True)
        loo_i[row] = _logsumexp((weights + log_lik[row])[None, :])[0]
    return loo_i, k


def _gpdfit(tails: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """arviz's ``_gpdfit`` (Zhang & Stephens 2009, prior k ~ 10 pseudo-observations at 0.5) per row of
    ``tails`` (each row sorted ascending): the shape k (with the prior) and the scale sigma."""
    rows, n = tails.shape
    m = 30 + int(n**0.5)
    b = 1 - np.sqrt(m / (np.arange(1, m + 1, dtype=float) - 0.5))
    b = b[None, :] / (3 * tails[:, int(n / 4 + 0.5) - 1])[:, None] + (1 / tails[:, -1])[:, None]  # (rows, m)
    k_grid = np.log1p(-b[:, :, None] * tails[:, None, :]).mean(axis=2)
    profile = n * (np.log(-(b / k_grid)) - k_grid - 1)
    weights = 1 / np.exp(profile[:, None, :] - profile[:, :, None]).sum(axis=2)
    weights = np.where(weights >= 10 * np.finfo(float).eps, weights, 0.0)
    weights /= weights.sum(axis=1, keepdims=True)
    b_post = (b * weights).sum(axis=1)
    k_post = np.log1p(-b_post[:, None] * tails).mean(axis=1)
    sigma = -k_post / b_post
    return (n * k_post + 10 * 0.5) / (n + 10), sigma
