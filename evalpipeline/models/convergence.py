"""Rank-normalised split r-hat and bulk / tail ESS (Vehtari et al. 2021), vectorised over parameters.

``arviz.rhat(method="rank")`` and ``arviz.ess(method="bulk" | "tail")`` call their per-parameter
routine once for every element of every variable, in a Python loop: on a 100-LLM suite fit (623
elements) the three took ~1.3 s, and a fit computed them twice (its diagnostics, then its summary).
:func:`convergence` computes the same quantities for all elements of a variable at once -- the same
split chains, Blom rank transform, FFT autocovariance and Geyer initial positive and monotone
sequences as arviz -- and :func:`fit_glm <evalpipeline.models.fit.fit_glm>` shares one result
between the two: 0.45-0.49 s per fit instead of 2.6 s there (benchmarks/convergence_benchmark.py).
The values agree with arviz's to rounding (tests/test_convergence.py compares them at 1e-10
relative, on chains with ties, constant and NaN elements, one chain and short chains).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.fft import next_fast_len

#: arviz's minimum shapes: r-hat needs 2 chains, both need 4 draws
MIN_DRAWS = 4
MIN_CHAINS_RHAT = 2
#: arviz's tail ESS: the smaller of the ESS of the 5% and 95% quantile indicators
TAIL_PROBS = (0.05, 0.95)


@dataclass(frozen=True)
class Convergence:
    """Per variable, arrays of the variable's element shape (``posterior[name].shape[2:]``)."""

    r_hat: dict[str, np.ndarray]
    ess_bulk: dict[str, np.ndarray]
    ess_tail: dict[str, np.ndarray]

    def extreme(self, which: str, how) -> float:
        """``how`` (max or min) over every element of every variable; NaN if any element is NaN."""
        values = [np.ravel(v) for v in getattr(self, which).values()]
        values = np.concatenate(values) if values else np.array([np.nan])
        return float("nan") if np.isnan(values).any() else float(how(values))


def convergence(posterior) -> Convergence:
    """r-hat (rank, split, max of bulk and folded), bulk and tail ESS of every variable of ``posterior``
    (an xarray Dataset with leading dimensions ``chain``, ``draw``, as ``InferenceData.posterior``)."""
    r_hat, ess_bulk, ess_tail = {}, {}, {}
    for name, variable in posterior.data_vars.items():
        flat, shape = _elements(variable), _element_shape(variable)
        r_hat[name], ess_bulk[name], ess_tail[name] = (v.reshape(shape) for v in diagnostics_of(flat))
    return Convergence(r_hat, ess_bulk, ess_tail)


def ess_mean(posterior) -> dict[str, np.ndarray]:
    """arviz ``ess(method="mean")``: the ESS of the split chains themselves, per element of each variable."""
    found = {}
    for name, variable in posterior.data_vars.items():
        flat = _elements(variable)
        out = np.full(flat.shape[0], np.nan)
        valid = _valid(flat, 1)
        if valid.any():
            out[valid] = _ess(_split_chains(flat[valid]))
        found[name] = out.reshape(_element_shape(variable))
    return found


def diagnostics_of(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """arviz's ``_rhat_rank``, ``_ess_bulk`` and ``_ess_tail`` for each row of ``x`` (elements, chains, draws);
    r-hat and bulk ESS share the rank-normalised split chains."""
    r_hat, bulk = np.full(x.shape[0], np.nan), np.full(x.shape[0], np.nan)
    valid = _valid(x, 1)
    if valid.any():
        split = _split_chains(x[valid])
        z = _z_scale(split)
        bulk[valid] = _ess(z)
        if x.shape[1] >= MIN_CHAINS_RHAT:
            folded = np.abs(split - np.median(split.reshape(split.shape[0], -1), axis=1)[:, None, None])
            rank_bulk, rank_tail = _rhat(z), _rhat(_z_scale(folded))
            r_hat[valid] = np.where(rank_tail > rank_bulk, rank_tail, rank_bulk)  # Python's max(), NaN included
    return r_hat, bulk, ess_tail_of(x)


def ess_tail_of(x: np.ndarray) -> np.ndarray:
    """arviz ``_ess_tail`` (default probabilities) for each row of ``x`` (elements, chains, draws)."""
    out = np.full(x.shape[0], np.nan)
    valid = _valid(x, 1)
    if not valid.any():
        return out
    rows = x[valid]
    flat = rows.reshape(rows.shape[0], -1)
    found = []
    for prob in TAIL_PROBS:
        # R's type 7 quantile of all draws, as arviz's mquantiles(alphap=1, betap=1)
        quantile = np.quantile(flat, prob, axis=1)
        found.append(_ess(_split_chains((rows <= quantile[:, None, None]).astype(float))))
    low, high = found
    out[valid] = np.where(high < low, high, low)  # Python's min(low, high)
    return out


def _element_shape(variable) -> tuple[int, ...]:
    return tuple(variable.sizes[d] for d in variable.dims if d not in ("chain", "draw"))


def _elements(variable) -> np.ndarray:
    """A (chain, draw, ...) variable as (elements, chains, draws) floats."""
    other = [d for d in variable.dims if d not in ("chain", "draw")]
    values = np.asarray(variable.transpose("chain", "draw", *other).values, dtype=float)
    return np.moveaxis(values.reshape(values.shape[0], values.shape[1], -1), 2, 0)


def _valid(x: np.ndarray, min_chains: int) -> np.ndarray:
    if x.shape[1] < min_chains or x.shape[2] < MIN_DRAWS:
        return np.zeros(x.shape[0], dtype=bool)
    return ~np.isnan(x).any(axis=(1, 2))


def _split_chains(x: np.ndarray) -> np.ndarray:
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half :]], axis=1)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Blom-transformed ranks of all of a row's draws (chains pooled), as normal quantiles."""
    flat = x.reshape(x.shape[0], -1)
    rank = stats.rankdata(flat, method="average", axis=1)
    size = flat.shape[1]
    return stats.norm.ppf((rank - 3 / 8) / (size - 2 * 3 / 8 + 1)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    draws = x.shape[2]
    chain_mean = x.mean(axis=2)
    chain_var = x.var(axis=2, ddof=1)
    between = draws * chain_mean.var(axis=1, ddof=1)
    within = chain_var.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + draws - 1) / draws)


def _autocov(x: np.ndarray) -> np.ndarray:
    draws = x.shape[-1]
    size = next_fast_len(2 * draws)
    centred = x - x.mean(axis=-1, keepdims=True)
    transform = np.fft.rfft(centred, n=size, axis=-1)
    transform *= np.conjugate(transform)
    return np.fft.irfft(transform, n=size, axis=-1)[..., :draws] / draws


def _ess(x: np.ndarray) -> np.ndarray:
    """arviz ``_ess`` for each row of ``x`` (elements, chains, draws): Geyer's initial positive
    sequence over pairs of autocorrelations (lags 2j, 2j + 1), then its initial monotone sequence."""
    elements, chains, draws = x.shape
    total = chains * draws
    out = np.empty(elements)
    constant = (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) < np.finfo(float).resolution
    out[constant] = total
    x = x[~constant]
    if not len(x):
        return out
    acov = _autocov(x).mean(axis=1)  # (elements, lags): the chains' mean autocovariance
    mean_var = acov[:, 0] * draws / (draws - 1.0)
    var_plus = mean_var * (draws - 1.0) / draws
    if chains > 1:
        var_plus = var_plus + x.mean(axis=2).var(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov) / var_plus[:, None]
    rho[:, 0] = 1.0
    # arviz's loop visits pair j = 1, 2, ... while 2j - 1 < draws - 3 and pair j - 1's sum is > 0
    # (pair 0 is 1 + rho_1), so the last pair it computes is J = min(last_pair, first pair not > 0)
    last_pair = max(0, (draws - 3) // 2)
    sums = rho[:, 0 : 2 * last_pair + 2 : 2] + rho[:, 1 : 2 * last_pair + 2 : 2]
    not_positive = ~(sums > 0)  # NaN stops the loop too
    first = np.where(not_positive.any(axis=1), not_positive.argmax(axis=1), last_pair + 1)
    last = np.minimum(first, last_pair)
    # the monotone sequence: a pair whose sum exceeds the previous (already lowered) one is set to
    # two halves of that sum, i.e. the pair sums become their running minimum
    lowered = np.minimum.accumulate(sums, axis=1)
    tau = np.empty(len(x))
    for row in range(len(x)):  # the sums of arviz, over the same values in the same order
        J = int(last[row])
        values = rho[row, : 2 * J].copy()
        changed = np.flatnonzero(sums[row, 1:J] > lowered[row, : J - 1]) + 1
        values[2 * changed] = values[2 * changed + 1] = lowered[row, changed - 1] / 2.0
        if J == 0:
            after = 1.0
        else:  # lag 2J: kept when its pair's sum is >= 0, or set when it is > 0 itself
            after = rho[row, 2 * J] if (sums[row, J] >= 0 or rho[row, 2 * J] > 0) else 0.0
        tau[row] = -1.0 + 2.0 * np.sum(values) + after
    tau = np.maximum(tau, 1.0 / np.log10(total))
    ess = total / tau
    ess[np.isnan(rho[:, 1])] = np.nan
    out[~constant] = ess
    return out
