"""PSIS-LOO (Vehtari, Gelman & Gabry 2017) vectorised over observational units.

``arviz.loo`` smooths each unit's importance weights in a Python loop; on a
100-LLM suite (20,000 units x 2,000 draws) that is ~4 s of every fit's
diagnostics and again of its WAIC/LOO ranking. :func:`loo` computes the same
quantities -- arviz's reff, its tail length, its generalised-Pareto fit
(Zhang & Stephens, with arviz's prior on k) and its smoothing and truncation --
for all units at once, in chunks, and from draws given in chunks
(:class:`StreamingLoo`). Units whose tails are shortened by ties at the cutoff
or a tiny cutoff are smoothed in groups of one tail length; a unit with a value
that is not finite is handed to arviz's own per-unit routine, so every unit gets
arviz's answer (tests/test_psis.py checks the values against ``arviz.loo``).
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
    return values.reshape(chains * draws, -1).T, relative_efficiency(idata.posterior)


def relative_efficiency(posterior) -> float:
    """arviz's reff for PSIS-LOO: the mean ESS ("mean" method) over every quantity of ``posterior``
    (an xarray Dataset with chain and draw dimensions) over the number of draws; 1 with one chain."""
    chains, draws = posterior.sizes["chain"], posterior.sizes["draw"]
    if chains == 1:
        return 1.0
    ess = convergence.ess_mean(posterior)  # arviz's az.ess(method="mean"), vectorised
    return float(np.hstack([v.ravel() for v in ess.values()]).mean()) / (chains * draws)


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
        terms = StreamingLoo(rows.shape[0], samples, reff)
        terms.add(rows)
        loo_i[block], pareto_k[block], lppd_i[block], _variance = terms.finish(lambda index: rows[index])
    return _result(loo_i, pareto_k, lppd_i, samples)


def _result(loo_i: np.ndarray, pareto_k: np.ndarray, lppd_i: np.ndarray, samples: int) -> LooResult:
    lppd, elpd, units = float(lppd_i.sum()), float(loo_i.sum()), loo_i.shape[0]
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
    top[np.isneginf(top)] = 0.0  # a row of -inf only: -inf, not NaN
    return np.log(np.exp(x - top).sum(axis=1)) + top[:, 0]


class StreamingLoo:
    """PSIS-LOO, lppd and the log-likelihood's variance per unit, from the draws given in chunks of
    columns (``add``), in the order of arviz's stacking (chain, then draw).

    PSIS needs of a unit's importance ratios (minus its log-likelihood) only their largest
    ``tail_len + 1`` (arviz's cutoff and tail) and the sum of the rest; lppd and the variance are
    running sums. So the memory is units x (tail + chunk), not units x draws: a 93-LLM x 1,136-task
    suite's 4 x 2,000 draws never need their 0.8 billion log-likelihoods at once. A unit whose values
    are not all finite goes to arviz's per-unit routine: ``finish`` asks for its whole row then.
    """

    def __init__(self, units: int, samples: int, reff: float):
        self.samples, self.reff = samples, reff
        self.cutoff_ind = -int(np.ceil(min(samples / 5.0, 3 * (samples / reff) ** 0.5))) - 1
        self.keep = -self.cutoff_ind  # the tail and the cutoff
        self.seen = np.zeros(units, np.int64)
        self.top = np.full((units, self.keep), -np.inf)  # the largest ratios so far (unordered; -inf: none yet)
        self.body_ref = np.full(units, -np.inf)  # the largest ratio left out of ``top`` so far
        self.body_sum = np.zeros(units)  # sum of exp(ratio - body_ref) over the ratios left out of ``top``
        self.lse_ref = np.full(units, -np.inf)  # log-sum-exp of the log-likelihood: reference and sum
        self.lse_sum = np.zeros(units)
        self.mean, self.m2 = np.zeros(units), np.zeros(units)  # Chan et al.'s running mean and squares
        self.not_finite = np.zeros(units, bool)

    def add(self, log_lik: np.ndarray, units: slice = slice(None)) -> None:
        """The next draws of the units ``units``: a (units, draws) block of the log-likelihood."""
        log_lik = np.asarray(log_lik, dtype=float)
        count = log_lik.shape[1]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            self.not_finite[units] |= ~np.isfinite(log_lik).all(axis=1)
            ratios = np.concatenate([self.top[units], np.negative(log_lik)], axis=1)
            ratios.partition(count, axis=1)
            self.top[units] = ratios[:, count:]
            left_out = ratios[:, :count]
            ref = np.maximum(self.body_ref[units], left_out.max(axis=1))
            finite_ref = np.where(np.isneginf(ref), 0.0, ref)  # -inf: nothing left out yet
            self.body_sum[units] = self.body_sum[units] * np.exp(self.body_ref[units] - finite_ref) + np.exp(
                left_out - finite_ref[:, None]
            ).sum(axis=1)
            self.body_ref[units] = ref
            ref = np.maximum(self.lse_ref[units], log_lik.max(axis=1))
            self.lse_sum[units] = self.lse_sum[units] * np.exp(self.lse_ref[units] - ref) + np.exp(
                log_lik - ref[:, None]
            ).sum(axis=1)
            self.lse_ref[units] = ref
            mean = log_lik.mean(axis=1)
            seen = self.seen[units]
            total = seen + count
            delta = mean - self.mean[units]
            self.m2[units] += ((log_lik - mean[:, None]) ** 2).sum(axis=1) + delta**2 * seen * count / total
            self.mean[units] += delta * count / total
            self.seen[units] = total

    def finish(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """loo_i, Pareto k, lppd_i and the log-likelihood's variance (ddof 0) of each unit;
        ``rows(index)`` returns the whole (len(index), samples) log-likelihood of the units in
        ``index``: those with a value that is not finite, for arviz's per-unit routine."""
        if np.any(self.seen != self.samples):
            raise ValueError(f"{self.seen.min()}-{self.seen.max()} draws were added, {self.samples} announced")
        samples = self.samples
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            loo_i, k = np.empty(self.seen.size), np.empty(self.seen.size)
            for start in range(0, self.seen.size, CHUNK_UNITS):  # bounds the Pareto fit's (units, m, tail) array
                block = slice(start, start + CHUNK_UNITS)
                raw = np.sort(self.top[block], axis=1)  # ascending: arviz's cutoff first
                largest = raw[:, -1]
                log_left_out = np.log(self.body_sum[block]) + self.body_ref[block] - largest
                loo_i[block], k[block] = _smoothed_loo(raw, largest, log_left_out, samples)
            lppd_i = np.log(self.lse_sum) + self.lse_ref - math.log(samples)
            fallback = np.flatnonzero(self.not_finite)
            if fallback.size:  # NaN or inf: arviz per unit, on the whole row
                cutoffmin = np.log(np.finfo(float).tiny)
                for row, log_lik in zip(fallback, np.asarray(rows(fallback), dtype=float)):
                    weights, k[row] = _psislw(-log_lik.copy(), self.cutoff_ind, cutoffmin, True)
                    loo_i[row] = _logsumexp((weights + log_lik)[None, :])[0]
                    lppd_i[row] = _logsumexp(log_lik[None, :])[0] - math.log(samples)
        return loo_i, k, lppd_i, self.m2 / samples


def _smoothed_loo(raw: np.ndarray, largest: np.ndarray, log_left_out: np.ndarray, samples: int):
    """loo_i and Pareto k of each unit, as arviz's ``_psislw`` and the log-sum-exp of weight x
    likelihood give them, from the unit's largest ratios ``raw`` (minus log-likelihoods, ascending;
    the first is arviz's cutoff) and the log of the other ratios' summed weights relative to the
    largest (``log_left_out``).

    arviz's tail is the ratios above the cutoff (or above the smallest float's log): all of them kept
    in ``raw``, and usually all but the cutoff. Ties at the cutoff (float32 log-likelihoods of items
    a model nearly always gets right have many) and tiny cutoffs give shorter tails: units are
    smoothed in groups of one tail length; a tail of 4 or fewer is not smoothed (k = inf), a fit with
    k not finite leaves the raw weights, and one with sigma <= 0 gives NaN weights, as in arviz."""
    units, keep = raw.shape
    cutoffmin = np.log(np.finfo(float).tiny)
    x = raw - largest[:, None]  # the largest weight at 0, as arviz does
    xcutoff = np.maximum(x[:, 0], cutoffmin)
    tail_lengths = (x > xcutoff[:, None]).sum(axis=1)
    k = np.full(units, np.inf)
    for length in np.unique(tail_lengths[tail_lengths > 4]):
        rows = np.flatnonzero(tail_lengths == length)
        tail = x[rows, keep - length :]
        k_rows, sigma = _gpdfit(np.exp(tail) - np.exp(xcutoff[rows])[:, None])
        k[rows] = k_rows
        fitted = np.isfinite(k_rows)
        probs = np.arange(0.5, length) / length
        kk, ss = k_rows[fitted, None], sigma[fitted, None]
        tiny = np.abs(kk) < np.finfo(float).eps
        quantiles = np.where(tiny, -np.log1p(-probs), np.expm1(-kk * np.log1p(-probs)) / np.where(tiny, 1.0, kk)) * ss
        quantiles[ss[:, 0] <= 0] = np.nan  # arviz's _gpinv
        smoothed = np.log(quantiles + np.exp(xcutoff[rows[fitted]])[:, None])
        x[rows[fitted], keep - length :] = np.minimum(smoothed, 0.0)  # truncated at the largest raw weight
    log_norm = np.logaddexp(log_left_out, _logsumexp(x))
    # a body weight is exp(-log_lik - largest), so weight x likelihood is exp(-largest) for each of them
    in_tail = np.arange(keep)[None, :] >= keep - tail_lengths[:, None]
    tail_terms = np.where(in_tail, x - raw, -np.inf)  # smoothed weight + log-likelihood, tail draws only
    loo_i = np.logaddexp(np.log(samples - tail_lengths) - largest, _logsumexp(tail_terms)) - log_norm
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
