"""Comparing two models: independent Beta posteriors, paired models on shared items, t-tests.

Sources:

* Independent: the position paper (Bowyer et al.) Section 3.3 (Eq. 7, Snippet 2:
  difference and odds ratio from Beta posterior draws, 95% quantile-based
  intervals) and Remark 1 (P(theta_A > theta_B)).
* Paired, bivariate probit: Section 3.4, Appendix C and E.2 (Eq. 67-90):
  ``theta_A, theta_B ~ Beta(1, 1)``, ``rho = 2 rho_hat - 1``,
  ``rho_hat ~ Beta(4, 2)``, the 2x2 table S/T/U/V with cell probabilities
  from the bivariate normal CDF.
* Paired, logit with item effects: the measurement post "Is the
  new version actually better?": the post's priors ``N(0, 1.5)`` on the
  centre, ``gap ~ N(0, 1)``, ``spread ~ HalfNormal(2.5)``,
  ``item ~ N(0, spread)``, written symmetrically in A and B:
  ``logit p = mid + item +- gap / 2`` (the post's ``base + item + gap *
  [model]`` favours one side; see :func:`paired_logit_comparison`).
* Conventional reading: Welch's unpaired t-test and the paired t-test
  (position paper Eq. 3-4 with t quantiles; the tests HiBayES contrasts with).

Choices:

* Both paired models are computed by deterministic quadrature rather than
  MCMC / importance sampling: the probit posterior on a (theta_A, theta_B,
  rho) grid (the bivariate normal CDF by Gauss-Legendre integration of
  its rho-derivative), the logit posterior on a (mid, gap, spread) grid
  with each item's effect integrated out by Gauss-Hermite quadrature.
  Items with the same outcome pattern share one likelihood factor, which
  makes this exact up to the grid and fast. Seed-free and reproducible.
* Epochs: the logit model reads an item's epochs as a binomial count per
  model (graded scores quasi-binomially). The probit model needs one
  0/1 pair per unit; it pairs attempts by (item, epoch) and is skipped
  (NaN) for graded scores.
* The logit gap is reported on the log-odds scale (``exp(gap)`` is the
  item-conditional odds ratio) and on the accuracy scale as the
  population-average difference ``E_item[sigmoid(mid + item + gap/2) -
  sigmoid(mid + item - gap/2)]`` over a new item.
* Independent intervals: each model's posterior draws come from its own
  random stream, named by the model (:func:`posterior_draws`), so a table
  draws each model once, whichever pair it is in, and a pair's numbers do not
  depend on the rest of the table. Their quantiles are ``np.quantile``'s,
  selected near a normal approximation (:func:`draw_quantiles`).
* "A" is always the model whose advantage is measured: P(A > B),
  differences A - B, odds ratios A : B.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math

import numpy as np
import pandas as pd
from scipy import integrate, special, stats

from evalpipeline.stats.intervals import beta_hpdi, beta_posterior
from evalpipeline.stats.verdicts import hpdi_overlap_fraction, hpdi_verdict, probability_band, probability_verdict


# ---------------------------------------------------------------- independent


def prob_beta_greater(a1: float, b1: float, a2: float, b2: float) -> float:
    """P(X1 > X2) for independent X1 ~ Beta(a1, b1), X2 ~ Beta(a2, b2), by adaptive quadrature.

    ``int f1(x) F2(x) dx`` over the central 1 - 1e-12 of X1's mass.
    """
    if min(a1, b1, a2, b2) <= 0:
        raise ValueError("Beta parameters must be positive")
    d1, d2 = stats.beta(a1, b1), stats.beta(a2, b2)
    low, high = d1.ppf(1e-13), d1.isf(1e-13)
    value, _ = integrate.quad(
        lambda x: d1.pdf(x) * d2.cdf(x), low, high, points=[d1.mean(), d2.mean()], limit=200, epsabs=1e-12, epsrel=1e-10
    )
    return float(min(1.0, max(0.0, value)))


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(200)


def prob_beta_greater_many(a1, b1, a2, b2) -> np.ndarray:
    """Vectorised P(X1 > X2) for many Beta pairs with parameters >= 1 (unimodal, bounded densities).

    200-point Gauss-Legendre over the central 1 - 1e-12 of each X1: smooth
    integrand, so accurate to ~1e-9 (tested against :func:`prob_beta_greater`).
    """
    a1, b1, a2, b2 = (np.asarray(x, dtype=float) for x in np.broadcast_arrays(a1, b1, a2, b2))
    if np.any(np.minimum.reduce([a1, b1, a2, b2]) < 1):
        raise ValueError("prob_beta_greater_many needs every Beta parameter >= 1; use prob_beta_greater")
    low = stats.beta.ppf(1e-13, a1, b1)[..., None]
    high = stats.beta.isf(1e-13, a1, b1)[..., None]
    x = low + (high - low) * (_GL_NODES + 1) / 2
    integrand = stats.beta.pdf(x, a1[..., None], b1[..., None]) * stats.beta.cdf(x, a2[..., None], b2[..., None])
    return np.clip(np.sum(integrand * _GL_WEIGHTS, axis=-1) * (high[..., 0] - low[..., 0]) / 2, 0.0, 1.0)


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, probabilities) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    return _sorted_weighted_quantiles(values[order], weights[order], probabilities)


def _sorted_weighted_quantiles(values: np.ndarray, weights: np.ndarray, probabilities) -> np.ndarray:
    """:func:`_weighted_quantiles` of values already in (stable) ascending order, weights in the same order."""
    cdf = np.cumsum(weights)
    cdf = (cdf - weights / 2) / cdf[-1]
    return np.interp(probabilities, cdf, values)


def _cell_cdf(grid: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CDF of a grid marginal whose mass is spread evenly over each point's cell: (cell edges, CDF at edges)."""
    step = grid[1] - grid[0]
    edges = np.concatenate([[grid[0] - step / 2], grid + step / 2])
    cdf = np.concatenate([[0.0], np.cumsum(mass)])
    return edges, cdf / cdf[-1]


def independent_comparison(
    k_a: float,
    n_a: float,
    k_b: float,
    n_b: float,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    n_draws: int = 200_000,
    seed: int = 0,
    streams: tuple[str, str] = ("A", "B"),
) -> dict:
    """Independent Beta posteriors for A and B (position paper Section 3.3, Snippet 2, Remark 1).

    ``p_a_better`` is exact (quadrature: 200-point Gauss-Legendre when every
    Beta parameter is >= 1, accurate to ~1e-9, else adaptive); ``diff_mean`` is exact; the
    difference and odds-ratio intervals are equal-tailed quantiles of
    ``n_draws`` seeded posterior draws, as in Snippet 2. Each side's draws come
    from its own random stream, named by ``streams`` (:func:`posterior_draws`;
    in a pairwise table the model names, so that a model's draws are the same in
    every pair it is in); the two names must differ, or the draws would be the same.
    """
    if streams[0] == streams[1]:
        raise ValueError(
            f"A and B need different draw streams, got {streams!r} twice: the same stream gives "
            "the same draws, not independent ones"
        )
    posterior_a, posterior_b = beta_posterior(k_a, n_a, prior), beta_posterior(k_b, n_b, prior)
    return _independent_comparison(
        posterior_a,
        posterior_b,
        posterior_draws(*posterior_a, n_draws, seed, streams[0]),
        posterior_draws(*posterior_b, n_draws, seed, streams[1]),
        prior,
        level,
    )


def posterior_draws(a: float, b: float, n_draws: int, seed: int, stream: str) -> np.ndarray:
    """``n_draws`` draws of Beta(a, b) from the random stream named ``stream`` under ``seed``.

    The stream is ``SeedSequence(seed, spawn_key=digest(stream))``: streams of different names
    are independent, and a name's draws do not depend on what else is drawn (so a table draws each
    model once and pairs it with every other model; a pair's numbers do not depend on the table).
    """
    key = hashlib.blake2b(stream.encode(), digest_size=16).digest()
    spawn_key = tuple(int.from_bytes(key[i : i + 4], "little") for i in range(0, 16, 4))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=spawn_key)).beta(a, b, int(n_draws))


def posterior_odds(draws: np.ndarray) -> np.ndarray:
    """The odds ``p / (1 - p)`` of posterior draws (inf at a draw of 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return draws / (1 - draws)


def _independent_comparison(
    posterior_a, posterior_b, draws_a, draws_b, prior, level: float, odds: tuple[np.ndarray, np.ndarray] | None = None
) -> dict:
    """:func:`independent_comparison` from the two Beta posteriors and their :func:`posterior_draws`
    (``odds``: their :func:`posterior_odds`, when the caller keeps them)."""
    (a_a, b_a), (a_b, b_b) = posterior_a, posterior_b
    diff = draws_a - draws_b
    odds_a, odds_b = odds if odds is not None else (posterior_odds(draws_a), posterior_odds(draws_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        odds_ratio = odds_a / odds_b
    tail = (1 - level) / 2
    # where the quantiles should lie: the exact mean and sd of the difference, and of the log odds ratio
    # (log odds of Beta(a, b): mean digamma(a) - digamma(b), variance trigamma(a) + trigamma(b))
    mean_a, mean_b = a_a / (a_a + b_a), a_b / (a_b + b_b)
    diff_sd = math.sqrt(_beta_variance(a_a, b_a) + _beta_variance(a_b, b_b))
    log_or_mean = float(special.digamma(a_a) - special.digamma(b_a) - special.digamma(a_b) + special.digamma(b_b))
    log_or_sd = math.sqrt(float(special.polygamma(1, [a_a, b_a, a_b, b_b]).sum()))
    diff_low, diff_high = draw_quantiles(diff, [tail, 1 - tail], lambda z: mean_a - mean_b + diff_sd * z)
    or_low, or_median, or_high = draw_quantiles(
        odds_ratio, [tail, 0.5, 1 - tail], lambda z: np.exp(log_or_mean + log_or_sd * z)
    )
    return {
        "p_a_better": _prob_beta_greater(float(a_a), float(b_a), float(a_b), float(b_b)),
        "diff_mean": mean_a - mean_b,
        "diff_low": float(diff_low),
        "diff_high": float(diff_high),
        "odds_ratio_median": float(or_median),
        "odds_ratio_low": float(or_low),
        "odds_ratio_high": float(or_high),
        "posterior_a": (a_a, b_a),
        "posterior_b": (a_b, b_b),
        "prior": tuple(float(x) for x in prior),
        "level": level,
    }


@functools.lru_cache(maxsize=1 << 14)
def _prob_beta_greater(a1: float, b1: float, a2: float, b2: float) -> float:
    """P(X1 > X2) of two Beta posteriors, kept: in a pairwise table many pairs have the same two success
    counts (at 100 models on 200 items half of them share theirs with another pair)."""
    if min(a1, b1, a2, b2) >= 1:
        return float(prob_beta_greater_many(a1, b1, a2, b2))
    return prob_beta_greater(a1, b1, a2, b2)


def _beta_variance(a: float, b: float) -> float:
    return a * b / ((a + b) ** 2 * (a + b + 1))


#: Half the width, in approximate standard deviations, of the band :func:`draw_quantiles` selects from.
_QUANTILE_BAND = 0.25


def draw_quantiles(values: np.ndarray, probabilities, location=None) -> np.ndarray:
    """``np.quantile(values, probabilities)`` (the default linear method; the same numbers, tested) of 1-D draws.

    ``location(z)``: roughly where the ``Phi(z)`` quantile lies (a normal approximation, increasing in
    z). Each order statistic a quantile needs is then selected among the draws in a band around its
    ``location(z -+ _QUANTILE_BAND)``, found by counting, instead of partitioning all of them: ~0.4 ms
    against ~1.4 ms a quantile at 100,000 draws, and the draws are not reordered. Where a band misses
    its order statistics (a poor approximation), a value is NaN or there is no ``location``, it is
    ``np.quantile`` itself.
    """
    values = np.asarray(values, dtype=float).ravel()
    probabilities = np.asarray(probabilities, dtype=float)
    n = values.size
    if location is None or n < 2 or np.isnan(values).any():
        return np.quantile(values, probabilities)
    virtual = (n - 1) * probabilities  # numpy's "linear" method: indexes, then _lerp
    previous = np.floor(virtual)
    gamma = virtual - previous
    first = np.clip(previous.astype(np.intp), 0, n - 1)
    second = np.minimum(first + 1, n - 1)
    low_values, high_values = np.empty(probabilities.size), np.empty(probabilities.size)
    for j, p in enumerate(probabilities):
        z = float(special.ndtri(p))
        low, high = location(z - _QUANTILE_BAND), location(z + _QUANTILE_BAND)
        if not (np.isfinite(low) and np.isfinite(high) and low <= high):
            return np.quantile(values, probabilities)
        below = np.count_nonzero(values < low)
        band = values[(values >= low) & (values <= high)]
        at = (first[j] - below, second[j] - below)
        if at[0] < 0 or at[1] >= band.size:
            return np.quantile(values, probabilities)
        band.partition(at)
        low_values[j], high_values[j] = band[at[0]], band[at[1]]
    step = high_values - low_values
    result = low_values + step * gamma
    np.subtract(high_values, step * (1 - gamma), out=result, where=gamma >= 0.5)
    return result


# ---------------------------------------------------------------- paired: bivariate probit

_BVN_NODES, _BVN_WEIGHTS = np.polynomial.legendre.leggauss(24)


def bivariate_normal_cdf(h, k, rho) -> np.ndarray:
    """Standard bivariate normal CDF ``P(X <= h, Y <= k)`` with correlation ``rho`` (vectorised).

    ``Phi(h) Phi(k) + (1 / 2pi) int_0^rho exp(-(h^2 - 2 r h k + k^2) / (2 (1 - r^2))) / sqrt(1 - r^2) dr``
    (the derivative of the CDF in rho is the density at (h, k)). Substituting
    ``r = sin(t)`` (as in Genz's BVN algorithm) cancels the ``1 / sqrt(1 - r^2)``
    factor and leaves ``int_0^asin(rho) exp(-(h^2 - 2 sin(t) h k + k^2) / (2 cos(t)^2)) dt``,
    a smooth integrand: 24-point Gauss-Legendre is accurate to ~5e-12 for
    |rho| <= 0.99 (the plain rho integral needed 48 points for ~5e-11;
    checked in tests/test_stats_compare.py against a 600-point rule and scipy).
    """
    h, k, rho = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (h, k, rho)))
    if np.any(np.abs(rho) >= 1):
        raise ValueError("|rho| must be < 1")
    top = np.arcsin(rho)
    t = top[..., None] * (_BVN_NODES + 1) / 2
    sin_t = np.sin(t)
    h_, k_ = h[..., None], k[..., None]
    integrand = np.exp(-(h_**2 - 2 * sin_t * h_ * k_ + k_**2) / (2 * (1 - sin_t**2)))
    integral = np.sum(integrand * _BVN_WEIGHTS, axis=-1) * top / 2
    return special.ndtr(h) * special.ndtr(k) + integral / (2 * math.pi)


_BVN_PIECE_NODES, _BVN_PIECE_WEIGHTS = np.polynomial.legendre.leggauss(8)


def bivariate_normal_cdf_grid(h, k, rho) -> np.ndarray:
    """:func:`bivariate_normal_cdf` on the grid ``h x k x rho`` (1-D axes), shape ``(len(h), len(k), len(rho))``.

    Same integral, organised for a grid: every ``asin(rho)`` is a break point,
    each piece between consecutive break points (and 0) gets 8-point
    Gauss-Legendre, and a cumulative sum gives ``int_0^asin(rho)`` for every
    rho at once. The integrand is evaluated at ~8 (len(rho) + 1) nodes per
    (h, k) instead of 24 len(rho), and the pieces are short, so the values
    agree with :func:`bivariate_normal_cdf` to ~1e-15 (tested) at a tenth of its cost.

    The exponent ``-(h^2 + k^2 - 2 sin(t) h k) / (2 cos(t)^2)`` is ``(h^2 + k^2) a_t + h k b_t`` with
    ``a_t = -1 / (2 cos(t)^2)``, ``b_t = sin(t) / cos(t)^2``: two outer products and a sum. The work
    arrays are node-major, ``(node, piece, h k cell)``, so that every operation -- the outer
    products, the weighted sum over a piece's nodes, the cumulative sum over pieces -- runs along
    contiguous rows of (h, k) cells rather than over short axes of 8 nodes or 33 pieces.
    """
    h, k, rho = (np.asarray(x, dtype=float).ravel() for x in (h, k, rho))
    if np.any(np.abs(rho) >= 1):
        raise ValueError("|rho| must be < 1")
    tops = np.arcsin(rho)
    breaks = np.unique(np.concatenate([[0.0], tops]))
    low, high = breaks[:-1], breaks[1:]
    n_pieces, n_nodes = low.size, _BVN_PIECE_NODES.size
    t = low[None, :] + (high - low)[None, :] * (_BVN_PIECE_NODES[:, None] + 1) / 2  # (nodes, pieces)
    cos2_t = np.cos(t) ** 2
    square_coef, product_coef = (-0.5 / cos2_t).ravel(), (np.sin(t) / cos2_t).ravel()
    half_widths = ((high - low) / 2)[:, None]
    zero = int(np.searchsorted(breaks, 0.0))
    top_index = np.searchsorted(breaks, tops)
    ndtr_h, ndtr_k = special.ndtr(h), special.ndtr(k)
    result = np.empty((h.size, k.size, rho.size))
    # Blocks of h rows, each op in place in a few buffers: the same arithmetic, element by element, as the
    # whole grid at once (tested), but the (node, piece, cell) integrand stays in cache.
    rows = max(1, _BVN_BLOCK_ELEMENTS // max(1, k.size * t.size))
    width = min(rows, h.size) * k.size
    integrand, scratch = np.empty((t.size, width)), np.empty((t.size, width))
    cumulative = np.empty((n_pieces + 1, width))
    cumulative[0] = 0.0
    for start in range(0, h.size, rows):
        hb = h[start : start + rows]
        cells = hb.size * k.size
        exponent, products = integrand[:, :cells], scratch[:, :cells]
        np.einsum("t,c->tc", square_coef, (hb[:, None] ** 2 + k[None, :] ** 2).ravel(), out=exponent)
        np.einsum("t,c->tc", product_coef, (hb[:, None] * k[None, :]).ravel(), out=products)
        exponent += products
        values = np.exp(exponent, out=exponent).reshape(n_nodes, n_pieces, cells)
        pieces = cumulative[1:, :cells]
        np.multiply(values[0], _BVN_PIECE_WEIGHTS[0], out=pieces)
        weighted = products[:n_pieces]
        for node in range(1, n_nodes):
            pieces += np.multiply(values[node], _BVN_PIECE_WEIGHTS[node], out=weighted)
        pieces *= half_widths
        np.cumsum(pieces, axis=0, out=pieces)
        integral = cumulative[top_index, :cells] - cumulative[zero, :cells]  # (rho, cells)
        independent_part = ndtr_h[start : start + rows, None, None] * ndtr_k[None, :, None]
        result[start : start + rows] = independent_part + (integral / (2 * math.pi)).T.reshape(
            hb.size, k.size, rho.size
        )
    return result


_BVN_BLOCK_ELEMENTS = 1 << 17  # integrand values per block of bivariate_normal_cdf_grid (1 MiB)


def paired_table(y_a, y_b) -> tuple[int, int, int, int]:
    """The 2x2 table of Appendix E.2: S (both right), T (A only), U (B only), V (both wrong)."""
    y_a, y_b = np.asarray(y_a, dtype=float), np.asarray(y_b, dtype=float)
    if y_a.shape != y_b.shape or y_a.size == 0:
        raise ValueError("need two equally long, non-empty 0/1 vectors (one entry per shared question)")
    if not (np.isin(y_a, (0, 1)).all() and np.isin(y_b, (0, 1)).all()):
        raise ValueError("the bivariate-probit model needs 0/1 outcomes")
    return (
        int(np.sum(y_a * y_b)),
        int(np.sum(y_a * (1 - y_b))),
        int(np.sum((1 - y_a) * y_b)),
        int(np.sum((1 - y_a) * (1 - y_b))),
    )


@functools.lru_cache(maxsize=4096)
def _probit_theta_axis(successes: float, trials: float, prior: tuple[float, float], size: int):
    """A theta axis of :func:`paired_probit_comparison` (the 1e-9..1-1e-9 quantiles of the marginal Beta
    posterior), its ``-Phi^-1(theta)`` and its log prior density. Cached: in a table a model's axis is
    the same in every pair with the same paired attempts, and scipy's quantiles cost more than the grid.
    """
    dist = stats.beta(prior[0] + successes, prior[1] + trials - successes)
    theta = np.linspace(max(dist.ppf(1e-9), 1e-6), min(dist.isf(1e-9), 1 - 1e-6), size)
    arrays = (theta, -stats.norm.ppf(theta), stats.beta.logpdf(theta, *prior))
    for array in arrays:
        array.setflags(write=False)
    return arrays


@functools.lru_cache(maxsize=16)
def _probit_rho_axis(rho_prior: tuple[float, float], size: int) -> np.ndarray:
    """The rho axis of :func:`paired_probit_comparison`: prior-quantile midpoints (equal prior mass per cell)."""
    rho_hat = stats.beta.ppf((np.arange(size) + 0.5) / size, *rho_prior)
    rho = np.clip(2 * rho_hat - 1, -0.99, 0.99)
    rho.setflags(write=False)
    return rho


def paired_probit_comparison(
    table: tuple[int, int, int, int],
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    rho_prior: tuple[float, float] = (4.0, 2.0),
    level: float = 0.95,
    grid_size: tuple[int, int, int] = (64, 64, 32),
) -> dict:
    """The position paper's paired model (Section 3.4, Appendix C and E.2), on a grid.

    ``table = (S, T, U, V)``: both right, only A right, only B right, both
    wrong. ``theta_A, theta_B ~ Beta(prior)``; ``rho = 2 rho_hat - 1`` with
    ``rho_hat ~ Beta(rho_prior)``. The theta axes span the 1e-9..1-1e-9
    quantiles of each model's marginal Beta posterior; the rho axis uses
    prior-quantile midpoints (equal prior mass per cell).

    Everything but the counts' weights depends on the margins ``(S + T, S + U, n)`` alone
    (:func:`_probit_grid`: the axes, the bivariate normal CDF, the cells' log probabilities),
    and the last grid is kept: a pairwise table visits its pairs in the order of their margins
    (:func:`_paired_probits`), and at 100 models on 200 items half its pairs share them with
    the pair before.
    """
    s, t, u, v = (float(x) for x in table)
    if min(s, t, u, v) < 0 or s + t + u + v == 0:
        raise ValueError(f"table counts must be non-negative with at least one pair, got {table}")
    grid = _probit_grid(
        s + t,
        s + u,
        s + t + u + v,
        tuple(float(x) for x in prior),
        tuple(float(x) for x in rho_prior),
        tuple(int(x) for x in grid_size),
    )
    # s log p_s + t log p_t + u log p_u + v log p_v, left to right, as the sum was first written
    with np.errstate(invalid="ignore"):  # 0 x log 0 in an impossible cell, which is set to -inf below
        log_post = np.multiply(grid.log_p[0], s)
        term = np.empty_like(log_post)
        for count, log_p in zip((t, u, v), grid.log_p[1:]):
            log_post += np.multiply(log_p, count, out=term)
    log_post[grid.invalid] = -np.inf
    for log_prior in grid.log_priors:
        log_post += log_prior
    log_post -= np.max(log_post)
    weights = np.exp(log_post, out=log_post)
    weights /= weights.sum()
    # theta_A - theta_B does not depend on rho: its distribution is the (theta_A, theta_B) marginal
    w = weights.sum(axis=2).ravel()
    diff = grid.diff
    tail = (1 - level) / 2
    low, high = _sorted_weighted_quantiles(grid.sorted_diff, w[grid.diff_order], [tail, 1 - tail])
    return {
        "p_a_better": float(w[diff > 0].sum() + 0.5 * w[diff == 0].sum()),
        "diff_mean": float(np.sum(diff * w)),
        "diff_low": float(low),
        "diff_high": float(high),
        "rho_mean": float(np.sum(weights.sum(axis=(0, 1)) * grid.rho)),
        "table": (int(s), int(t), int(u), int(v)),
        "level": level,
    }


class _ProbitGrid:
    """What :func:`paired_probit_comparison` computes from a table's margins: its axes, the log of each
    cell probability (S, T, U, V) on the (theta_A, theta_B, rho) grid, where a cell is impossible, the
    log priors to add (none for a uniform prior) and the difference theta_A - theta_B with its order."""

    def __init__(self, successes_a, successes_b, trials, prior, rho_prior, grid_size):
        n_theta_a, n_theta_b, n_rho = grid_size
        theta_a, h_a, log_prior_a = _probit_theta_axis(successes_a, trials, prior, n_theta_a)
        theta_b, h_b, log_prior_b = _probit_theta_axis(successes_b, trials, prior, n_theta_b)
        self.rho = _probit_rho_axis(rho_prior, n_rho)
        # every factor that depends on one axis only is computed on that axis and broadcast
        ta, tb = theta_a[:, None, None], theta_b[None, :, None]
        p_v = bivariate_normal_cdf_grid(h_a, h_b, self.rho)
        p_s = np.add(ta + tb, p_v)
        p_s -= 1
        p_t = np.subtract(1 - tb, p_v)
        p_u = np.subtract(1 - ta, p_v)
        self.invalid = ~((p_s > 0) & (p_t > 0) & (p_u > 0) & (p_v > 0))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.log_p = tuple(np.log(p, out=p) for p in (p_s, p_t, p_u, p_v))
        self.log_priors = tuple(
            log_prior for log_prior in (log_prior_a[:, None, None], log_prior_b[None, :, None]) if log_prior.any()
        )  # adding a uniform prior's zeros changes nothing
        self.diff = (theta_a[:, None] - theta_b[None, :]).ravel()
        self.diff_order = np.argsort(self.diff, kind="stable")
        self.sorted_diff = self.diff[self.diff_order]
        for array in (*self.log_p, self.invalid, self.diff, self.diff_order, self.sorted_diff):
            array.setflags(write=False)


@functools.lru_cache(maxsize=2)
def _probit_grid(
    successes_a: float,
    successes_b: float,
    trials: float,
    prior: tuple[float, float],
    rho_prior: tuple[float, float],
    grid_size: tuple[int, int, int],
) -> _ProbitGrid:
    """:class:`_ProbitGrid` of a table's margins, kept for the next tables with the same ones (~4 MiB each)."""
    return _ProbitGrid(successes_a, successes_b, trials, prior, rho_prior, grid_size)


# ---------------------------------------------------------------- paired: logit with item effects

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()  # expectation over a standard normal


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + e^-x)``: within ~2 ulp of ``special.expit`` at a third of its cost (numpy's vectorised
    ``exp``). Below x = -709 ``e^-x`` overflows and the value is 0 instead of a number under 1e-308. The
    one formula for A's accuracy on a new item, with or without :func:`_binary_log_integrals`, so that
    both give the same bits."""
    with np.errstate(over="ignore"):
        value = np.exp(np.negative(x))
    value += 1.0
    return np.reciprocal(value, out=value)


def _log_factor(k, n, eta: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """``log(s(eta)^k s(-eta)^(n - k)) = n log s(eta) - (n - k) eta`` (quasi-binomially for fractional k).

    One function for A's and B's factors, so that swapping the models swaps the factors bit for bit."""
    log_factor = log_s * n
    if n != k:
        log_factor -= (n - k) * eta
    return log_factor


_LOGIT_BLOCK_ELEMENTS = 1 << 17  # (mid, gap, spread, node) values per block of a grid's contractions (1 MiB)


class _LogitGrid:
    """A (mid, gap, spread) grid of :func:`paired_logit_comparison` and what on it does not depend on the data.

    A's log-odds ``mid + gap/2`` and B's ``mid - gap/2`` lie on two 1-D lattices: the mid step is ``p``
    lattice steps and half the gap step ``q`` (small integers, the lattice step the finer of the two
    requested steps), so grid point (i, j) is A's lattice point ``i p + j q`` and B's ``i p + (G-1-j) q``.
    Everything that costs an ``exp`` (sigmoids, each outcome's factor) is computed once per lattice point,
    spread and node (``L x S x Q``), and a grid point's item integral is a product of two strided views of
    those tables summed over the nodes. The gap points are symmetric about their centre, and the swapped
    pair's grid (the gap range negated) has B's lattice as A's: swapping A and B mirrors every number
    bit for bit, and a grid whose gap range is symmetric about 0 is exactly symmetric.
    """

    def __init__(self, lo_m, hi_m, n_mid, lo_g, hi_g, n_gap, lo_s, hi_s, n_spread, base_sd, gap_sd, spread_scale):
        mid_step, half_gap_step = (hi_m - lo_m) / max(n_mid - 1, 1), (hi_g - lo_g) / (2 * max(n_gap - 1, 1))
        step = min(mid_step, half_gap_step)
        p, q = max(1, round(mid_step / step)), max(1, round(half_gap_step / step))
        n_mid = int(math.ceil((hi_m - lo_m) / (p * step) - 1e-9)) + 1
        n_gap = int(math.ceil((hi_g - lo_g) / (2 * q * step) - 1e-9)) + 1
        centre_m, centre_g = (lo_m + hi_m) / 2, (lo_g + hi_g) / 2
        self.p, self.q = p, q
        self.mid = centre_m + (2 * np.arange(n_mid) - (n_mid - 1)) * (p * step / 2)
        self.gap = centre_g + (2 * np.arange(n_gap) - (n_gap - 1)) * (q * step)
        self.spread = np.linspace(lo_s, hi_s, n_spread)
        offsets = (2 * np.arange((n_mid - 1) * p + (n_gap - 1) * q + 1) - (n_mid - 1) * p - (n_gap - 1) * q) * (
            step / 2
        )
        nodes = self.spread[None, :, None] * _GH_NODES  # (1, S, Q)
        # A's and B's log-odds on their lattices, (L, S, Q): the centre of B's is that of A's with the gap negated
        self.eta = tuple(
            (centre_m + centre_g / 2) + offsets[:, None, None] + nodes
            if side == 0
            else (centre_m + (-centre_g) / 2) + offsets[:, None, None] + nodes
            for side in (0, 1)
        )
        self.log_s = tuple(_log_sigmoid(eta) for eta in self.eta)
        self.log_prior = _logit_log_prior(self.mid, self.gap, self.spread, base_sd, gap_sd, spread_scale)
        _, g, sp = np.meshgrid(self.mid, self.gap, self.spread, indexing="ij")
        self.gap_flat, self.spread_flat = g.ravel(), sp.ravel()
        for array in (
            self.mid,
            self.gap,
            self.spread,
            self.log_prior,
            self.gap_flat,
            self.spread_flat,
            *self.eta,
            *self.log_s,
        ):
            array.setflags(write=False)  # shared by every pair on the grid
        self._binary = None
        self._accuracy_diff = None
        self._diff_support = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return len(self.mid), len(self.gap), len(self.spread)

    def _views(self, table_a: np.ndarray, table_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lattice tables of A and B, (L, ...), as (M, G, ...) views of the grid: A at ``i p + j q``, B at
        ``i p + (G-1-j) q``."""
        n_mid, n_gap = len(self.mid), len(self.gap)
        views = []
        for table, start, sign in ((table_a, 0, 1), (table_b, (n_gap - 1) * self.q, -1)):
            table = np.ascontiguousarray(table)
            views.append(
                np.lib.stride_tricks.as_strided(
                    table[start:],
                    shape=(n_mid, n_gap, *table.shape[1:]),
                    strides=(self.p * table.strides[0], sign * self.q * table.strides[0], *table.strides[1:]),
                    writeable=False,
                )
            )
        return views[0], views[1]

    def _blocks(self):
        rows = max(1, _LOGIT_BLOCK_ELEMENTS // max(1, len(self.gap) * self.eta[0][0].size))
        return [slice(start, start + rows) for start in range(0, len(self.mid), rows)]

    def item_integrals(self, factor_a: np.ndarray, factor_b: np.ndarray) -> np.ndarray:
        """``sum_q w_q factor_a factor_b`` at every grid point, (M, G, S), from A's and B's (L, S, Q) tables."""
        view_a, view_b = self._views(factor_a, factor_b)
        out = np.empty(self.shape)
        for block in self._blocks():
            np.matmul(view_a[block] * view_b[block], _GH_WEIGHTS, out=out[block])
        return out

    def log_item_integrals(self, log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
        """:meth:`item_integrals` of ``exp(log_a)`` and ``exp(log_b)``, in logs; where the sum underflows
        (grid corners with many attempts per item), the same sum by log-sum-exp."""
        item = self.item_integrals(np.exp(log_a), np.exp(log_b))
        with np.errstate(divide="ignore"):
            log_item = np.log(item)
        tiny = item < 1e-280
        if tiny.any():
            view_a, view_b = self._views(log_a, log_b)
            stable = special.logsumexp(view_a + view_b + np.log(_GH_WEIGHTS), axis=-1)
            log_item = np.where(tiny, stable, log_item)
        return log_item

    def binary_log_integrals(self) -> dict:
        """The log item integrals of the four 0/1 outcome patterns (ka, kb), (M, G, S) each, or None where one
        underflows (< 1e-280: the caller then takes the general path)."""
        if self._binary is None:
            right = tuple(np.exp(log_s) for log_s in self.log_s)
            wrong = tuple(np.exp(log_s - eta) for log_s, eta in zip(self.log_s, self.eta))  # s(-x) = e^-x s(x)
            factors = {0: wrong, 1: right}
            self._binary = {}
            for ka in (0, 1):
                for kb in (0, 1):
                    item = self.item_integrals(factors[ka][0], factors[kb][1])
                    if (item < 1e-280).any():
                        self._binary[ka, kb] = None
                    else:
                        self._binary[ka, kb] = np.log(item)
                        self._binary[ka, kb].setflags(write=False)
        return self._binary

    def general_log_likelihood(self, patterns: pd.DataFrame) -> np.ndarray:
        """``sum count * log item integral`` over ``patterns`` ((ka, na, kb, nb, count) rows), (M, G, S):
        each distinct (k, n) of A, and of B, has its lattice factor computed once."""
        log_a_factors, log_b_factors = {}, {}
        total = np.zeros(self.shape)
        for ka, na, kb, nb, count in patterns[["ka", "na", "kb", "nb", "count"]].itertuples(index=False):
            if (ka, na) not in log_a_factors:
                log_a_factors[ka, na] = _log_factor(ka, na, self.eta[0], self.log_s[0])
            if (kb, nb) not in log_b_factors:
                log_b_factors[kb, nb] = _log_factor(kb, nb, self.eta[1], self.log_s[1])
            total += count * self.log_item_integrals(log_a_factors[ka, na], log_b_factors[kb, nb])
        return total

    def accuracy_diff(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The accuracy-scale difference A - B for a new item on the grid, flat, with its stable sort order
        and sorted values."""
        if self._accuracy_diff is None:
            accuracy = [_sigmoid(eta) @ _GH_WEIGHTS for eta in self.eta]  # (L, S) each
            view_a, view_b = self._views(*accuracy)
            diff = (view_a - view_b).ravel()
            order = np.argsort(diff, kind="stable")
            arrays = (diff, order, diff[order])
            for array in arrays:
                array.setflags(write=False)
            self._accuracy_diff = arrays
        return self._accuracy_diff

    def diff_support(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """What the accuracy difference's quantiles are read from: its values in ascending order, the flat grid
        index whose mass each carries, and the share of that mass (None: all of it).

        That is :meth:`accuracy_diff`'s sorted grid, except in the gap cell holding 0. P(A better) spreads each
        gap point's mass evenly over its cell (:func:`_cell_cdf`), so part of that cell's mass lies below 0 and
        part above; a grid point of its own would put all of it on one side, or, at a gap of exactly 0, at a
        difference of exactly 0 whatever the mid and spread: an atom in which a tail quantile would fall as
        exactly 0.0 while P(A better) puts more than the tail below 0. There each point is split in two: the
        share of its cell below 0 at the midpoint of that part, the rest at the midpoint of the part above, the
        difference interpolated linearly along the gap between grid points. The difference has the sign of the
        gap, so below 0 lies exactly the mass P(A better) puts there, and the interval's ends take the sides of
        the gap interval's.
        """
        if self._diff_support is None:
            diff, order, sorted_diff = self.accuracy_diff()
            gap, n_gap = self.gap, len(self.gap)
            step = gap[1] - gap[0]
            cell = int(np.rint(-gap[0] / step))  # the gap point whose cell holds 0, if any
            below_share = 0.5 - gap[cell] / step if 0 <= cell < n_gap else 0.0
            if not 1e-9 < below_share < 1 - 1e-9:
                support = (order, None, sorted_diff)
            else:
                cells = diff.reshape(self.shape)

                def at_gap(x: float) -> np.ndarray:  # linear between the grid points either side (or the last two)
                    j = min(max(int(np.floor((x - gap[0]) / step)), 0), n_gap - 2)
                    t = (x - gap[j]) / step
                    return (1 - t) * cells[:, j] + t * cells[:, j + 1]

                split = np.arange(diff.size).reshape(cells.shape)[:, cell].ravel()
                parts = np.concatenate(
                    [at_gap((gap[cell] - step / 2) / 2).ravel(), at_gap((gap[cell] + step / 2) / 2).ravel()]
                )
                part_index = np.concatenate([split, split])
                part_share = np.repeat([below_share, 1.0 - below_share], split.size)
                kept = np.ones(diff.size, dtype=bool)
                kept[split] = False
                kept_sorted = kept[order]
                values, index = sorted_diff[kept_sorted], order[kept_sorted]
                part_order = np.argsort(parts, kind="stable")
                parts, part_index, part_share = parts[part_order], part_index[part_order], part_share[part_order]
                where = np.searchsorted(values, parts, side="right")
                support = (
                    np.insert(index, where, part_index),
                    np.insert(np.ones(values.size), where, part_share),
                    np.insert(values, where, parts),
                )
            for array in support:
                if array is not None:
                    array.setflags(write=False)
            self._diff_support = support
        return self._diff_support


@functools.lru_cache(maxsize=4)
def _logit_grid(*key) -> _LogitGrid:
    """:class:`_LogitGrid` for a key of :func:`_paired_logit_pass1`: kept for the next pairs with the same one."""
    return _LogitGrid(*key)


def _binary_log_likelihood(log_integrals: dict, patterns) -> np.ndarray | None:
    """``sum count * log_integrals[ka, kb]`` over ``patterns`` ((ka, kb, count) rows), (M, G, S).

    None (take the general path) if the integral of a pattern present underflowed; absent ones do not matter.
    """
    total = None
    for pka, pkb, count in patterns:
        log_item = log_integrals[pka, pkb]
        if log_item is None:
            return None
        if total is None:
            total = np.zeros(log_item.shape)
        total += count * log_item
    return total


#: Pass 1's fixed coarse grid over the priors' range, the gap's symmetric about 0: (mid, gap, spread) bounds
#: and sizes, as a :func:`_logit_grid` key without the priors.
_COARSE_GRID = (-7.0, 7.0, 29, -5.0, 5.0, 41, 0.0, 8.0, 17)


@functools.lru_cache(maxsize=2)
def _coarse_grid(base_sd: float, gap_sd: float, spread_scale: float) -> _LogitGrid:
    """Pass 1's grid: the same for every pair under the same priors, so built (and its 0/1 integrals computed) once."""
    return _LogitGrid(*_COARSE_GRID, base_sd, gap_sd, spread_scale)


def _logit_log_prior(mid, gap, spread, base_sd: float, gap_sd: float, spread_scale: float) -> np.ndarray:
    return (
        stats.norm.logpdf(mid, 0, base_sd)[:, None, None]
        + stats.norm.logpdf(gap, 0, gap_sd)[None, :, None]
        + stats.halfnorm.logpdf(spread, scale=spread_scale)[None, None, :]
    )


def _binary_patterns(ka: np.ndarray, kb: np.ndarray) -> list[tuple[int, int, int]]:
    """``(ka, kb, count)`` of the 0/1 outcome patterns present, in ``DataFrame.value_counts`` order
    (count descending, ties in order of first appearance)."""
    codes = 2 * ka.astype(np.intp) + kb.astype(np.intp)
    counts = np.bincount(codes, minlength=4)
    present, first = np.unique(codes, return_index=True)
    order = sorted(zip(-counts[present], first, present))
    return [(int(code) // 2, int(code) % 2, int(counts[code])) for _, _, code in order]


#: The post's priors of :func:`paired_logit_comparison` and its refined grid (mid, gap, spread points).
LOGIT_PRIORS = {"base_sd": 1.5, "gap_sd": 1.0, "spread_scale": 2.5}
LOGIT_GRID = (32, 61, 24)


def paired_logit_comparison(
    successes_a,
    trials_a,
    successes_b,
    trials_b,
    *,
    base_sd: float = LOGIT_PRIORS["base_sd"],
    gap_sd: float = LOGIT_PRIORS["gap_sd"],
    spread_scale: float = LOGIT_PRIORS["spread_scale"],
    level: float = 0.95,
    grid_size: tuple[int, int, int] = LOGIT_GRID,
    squares_a=None,
    squares_b=None,
) -> dict:
    """The post's paired model, symmetric in A and B: shared item difficulty, one log-odds gap, on a grid.

    Per shared item i: ``successes_a[i]`` of ``trials_a[i]`` attempts of A (graded scores summed, read
    quasi-binomially), likewise for B. ``logit p_A,i = mid + item_i + gap / 2``,
    ``logit p_B,i = mid + item_i - gap / 2``; ``mid ~ N(0, base_sd)``, ``gap ~ N(0, gap_sd)``,
    ``item_i ~ N(0, spread)``, ``spread ~ HalfNormal(spread_scale)`` (the post's priors). The post writes B
    at ``base`` and A at ``base + gap``, which gives A's log-odds the wider prior and so favours A at high
    accuracy and B at low (P(A better) = 0.76 for two models both right on all of 20 items); here swapping
    A and B mirrors the gap, so P(A better) + P(B better) = 1 and identical results give 0.5.

    Returns P(gap > 0), gap and odds-ratio intervals, and the population-average accuracy difference
    ``E_item[s(mid + item + gap/2) - s(mid + item - gap/2)]`` over a new item, with its interval.

    Repeats: given the item effect the model reads an item's attempts as a binomial count, so the repeats of
    one item tell it that item's gap precisely. Models also differ item by item beyond one gap (A is better
    on some items, worse on others); then the items' own gaps spread more than their repeats' noise, and a
    binomial reading is overconfident (planted pairs with such spread, 12 items x 5 epochs: stated 0.85,
    true 0.79). So each item's counts are divided by a quasi-binomial dispersion (:func:`pair_dispersion`:
    the spread of the items' observed A - B differences over what their repeats alone would give, at least
    1), which is 1 where every item has one attempt. ``squares_a`` / ``squares_b``: each item's sum of
    squared scores, for graded scores' within-item variance (default: 0/1 scores, equal to the successes).

    Two passes: a fixed coarse grid over the priors' range locates the mass (:func:`_paired_logit_pass1`),
    then a refined grid over that region (:func:`_paired_logit_pass2`). The refined grid's bounds are coarse
    grid points, so many pairs of a table share it, and what depends on the grid alone is computed once per
    grid (:func:`_logit_grid`); :func:`pairwise_table` orders its pairs so.
    """
    dispersion = pair_dispersion(successes_a, trials_a, successes_b, trials_b, squares_a, squares_b)
    first = _paired_logit_pass1(
        np.asarray(successes_a, dtype=float) / dispersion,
        np.asarray(trials_a, dtype=float) / dispersion,
        np.asarray(successes_b, dtype=float) / dispersion,
        np.asarray(trials_b, dtype=float) / dispersion,
        base_sd=base_sd,
        gap_sd=gap_sd,
        spread_scale=spread_scale,
        grid_size=grid_size,
    )
    return {**_paired_logit_pass2(first, level), "dispersion": dispersion}


def pair_dispersion(successes_a, trials_a, successes_b, trials_b, squares_a=None, squares_b=None) -> float:
    """Quasi-binomial dispersion of a pair's per-item counts: the variance of the items' observed differences
    ``mean_A - mean_B`` over its part from the repeats' noise (each item's within-item sample variances over
    its attempts), over the items with at least two attempts of each model; at least 1, and 1 when fewer
    than three items have repeats. ``squares_*``: per-item sums of squared scores (None: 0/1 scores)."""
    ka, na, kb, nb = (np.asarray(x, dtype=float).ravel() for x in (successes_a, trials_a, successes_b, trials_b))
    qa = ka if squares_a is None else np.asarray(squares_a, dtype=float).ravel()
    qb = kb if squares_b is None else np.asarray(squares_b, dtype=float).ravel()
    repeated = (na >= 2) & (nb >= 2)
    if repeated.sum() < 3:
        return 1.0
    ka, na, kb, nb, qa, qb = (x[repeated] for x in (ka, na, kb, nb, qa, qb))
    mean_a, mean_b = ka / na, kb / nb
    within = (np.maximum(qa - na * mean_a**2, 0) / (na - 1)) / na + (np.maximum(qb - nb * mean_b**2, 0) / (nb - 1)) / nb
    if within.mean() <= 0:
        return 1.0
    return float(max(1.0, np.var(mean_a - mean_b, ddof=1) / within.mean()))


class _LogitPass1:
    """What pass 1 of :func:`paired_logit_comparison` found: the data's patterns and the refined grid's key."""

    def __init__(self, ka, na, kb, nb, binary_patterns, grid_key):
        self.ka, self.na, self.kb, self.nb = ka, na, kb, nb
        self.binary_patterns = binary_patterns  # None unless one 0/1 attempt per item and model
        self.grid_key = grid_key  # the arguments of _logit_grid
        self._general_patterns = None

    def log_likelihood(self, grid: _LogitGrid) -> np.ndarray:
        if self.binary_patterns is not None:
            log_like = _binary_log_likelihood(grid.binary_log_integrals(), self.binary_patterns)
            if log_like is not None:
                return log_like
        if self._general_patterns is None:
            self._general_patterns = (
                pd.DataFrame({"ka": self.ka, "na": self.na, "kb": self.kb, "nb": self.nb})
                .value_counts()
                .reset_index(name="count")
            )
        return grid.general_log_likelihood(self._general_patterns)


def _paired_logit_pass1(
    successes_a, trials_a, successes_b, trials_b, *, base_sd, gap_sd, spread_scale, grid_size
) -> _LogitPass1:
    """Pass 1: the coarse grid over the prior's range, and the region holding the mass (one cell of padding).

    The coarse grid is fixed, so what it computes without the data is computed once per process.
    """
    arrays = [np.asarray(x, dtype=float).ravel() for x in (successes_a, trials_a, successes_b, trials_b)]
    if len({x.size for x in arrays}) != 1 or arrays[0].size == 0:
        raise ValueError("need equally long, non-empty per-item arrays for both models")
    ka, na, kb, nb = arrays
    if np.any(na <= 0) or np.any(nb <= 0) or np.any((ka < 0) | (ka > na)) or np.any((kb < 0) | (kb > nb)):
        raise ValueError("need 0 <= successes <= trials and trials > 0 for every item and model")
    binary = bool(
        np.all(na == 1) and np.all(nb == 1) and np.all((ka == 0) | (ka == 1)) and np.all((kb == 0) | (kb == 1))
    )
    first = _LogitPass1(ka, na, kb, nb, _binary_patterns(ka, kb) if binary else None, None)

    def support(values, mass, pad):
        keep = np.nonzero(mass > mass.max() * 1e-9)[0]
        step = values[1] - values[0]
        return values[keep[0]] - pad * step, values[keep[-1]] + pad * step

    coarse = _coarse_grid(float(base_sd), float(gap_sd), float(spread_scale))
    lp = first.log_likelihood(coarse) + coarse.log_prior
    w0 = np.exp(lp - lp.max())
    lo_m, hi_m = support(coarse.mid, w0.sum(axis=(1, 2)), 1)
    lo_g, hi_g = support(coarse.gap, w0.sum(axis=(0, 2)), 1)
    lo_s, hi_s = support(coarse.spread, w0.sum(axis=(0, 1)), 1)
    n_mid, n_gap, n_spread = grid_size
    first.grid_key = (
        float(lo_m),
        float(hi_m),
        int(n_mid),
        float(lo_g),
        float(hi_g),
        int(n_gap),
        float(max(lo_s, 0.0)),
        float(hi_s),
        int(n_spread),
        base_sd,
        gap_sd,
        spread_scale,
    )
    return first


def _paired_logit_pass2(first: _LogitPass1, level: float) -> dict:
    grid = _logit_grid(*first.grid_key)
    lp = first.log_likelihood(grid) + grid.log_prior
    w = np.exp(lp - lp.max())
    w /= w.sum()
    tail = (1 - level) / 2
    wf, gf = w.ravel(), grid.gap_flat
    df = grid.accuracy_diff()[0]
    gap_edges, gap_cdf = _cell_cdf(grid.gap, w.sum(axis=(0, 2)))
    gap_low, gap_median, gap_high = np.interp([tail, 0.5, 1 - tail], gap_cdf, gap_edges)
    index, share, sorted_df = grid.diff_support()
    diff_low, diff_high = _sorted_weighted_quantiles(
        sorted_df, wf[index] if share is None else wf[index] * share, [tail, 1 - tail]
    )
    return {
        "p_a_better": float(1 - np.interp(0.0, gap_edges, gap_cdf)),
        "gap_logit_mean": float(np.sum(gf * wf)),
        "gap_logit_low": float(gap_low),
        "gap_logit_high": float(gap_high),
        "odds_ratio_median": float(np.exp(gap_median)),
        "odds_ratio_low": float(np.exp(gap_low)),
        "odds_ratio_high": float(np.exp(gap_high)),
        "diff_mean": float(np.sum(df * wf)),
        "diff_low": float(diff_low),
        "diff_high": float(diff_high),
        "spread_mean": float(np.sum(grid.spread_flat * wf)),
        "n_items": int(first.ka.size),
        "level": level,
    }


# ---------------------------------------------------------------- conventional t-tests


def _t_result(diff: float, se: float, df: float, level: float) -> dict:
    """Two-sided t-test of ``diff`` with standard error ``se`` on ``df`` degrees of freedom, and its interval.

    What ``scipy.stats.ttest_ind`` / ``ttest_rel`` return (statistic, p-value, ``confidence_interval``),
    computed directly: their per-call overhead (~2 ms) was ~10% of a pairwise row.
    """
    statistic = diff / se
    quantile = float(special.stdtrit(df, 0.5 + level / 2))
    return {
        "statistic": float(statistic),
        "p_value": float(min(1.0, 2.0 * special.stdtr(df, -abs(statistic)))),
        "diff": float(diff),
        "diff_low": float(diff - quantile * se),
        "diff_high": float(diff + quantile * se),
    }


def _t_moments(scores: np.ndarray) -> tuple[int, float, float]:
    """(size, mean, variance with ddof 1; NaN below two scores) of one sample."""
    n = int(scores.size)
    return n, float(scores.mean()) if n else math.nan, float(scores.var(ddof=1)) if n > 1 else math.nan


def _welch(moments_a: tuple[int, float, float], moments_b: tuple[int, float, float], level: float) -> dict:
    """:func:`unpaired_t_test` from each sample's :func:`_t_moments`."""
    (n_a, mean_a, var_a), (n_b, mean_b, var_b) = moments_a, moments_b
    diff = mean_a - mean_b if n_a and n_b else math.nan
    if n_a < 2 or n_b < 2 or (var_a == 0 and var_b == 0):
        return {"statistic": math.nan, "p_value": math.nan, "diff": diff, "diff_low": math.nan, "diff_high": math.nan}
    share_a, share_b = var_a / n_a, var_b / n_b
    df = (share_a + share_b) ** 2 / (share_a**2 / (n_a - 1) + share_b**2 / (n_b - 1))  # Welch-Satterthwaite
    return _t_result(diff, math.sqrt(share_a + share_b), df, level)


def unpaired_t_test(scores_a, scores_b, level: float = 0.95) -> dict:
    """Welch's two-sample t-test of mean A - mean B (unequal variances; position paper Eq. 3 with t).

    Returns ``statistic, p_value, diff, diff_low, diff_high``; NaN where a
    sample has fewer than two scores or both have zero variance. Equal to
    ``scipy.stats.ttest_ind(a, b, equal_var=False)`` and its confidence interval (tested).
    """
    a, b = np.asarray(scores_a, dtype=float), np.asarray(scores_b, dtype=float)
    return _welch(_t_moments(a), _t_moments(b), level)


def paired_t_test(scores_a, scores_b, level: float = 0.95) -> dict:
    """Paired t-test on per-item scores (position paper Eq. 4 with t quantiles). Same keys as the unpaired test;
    equal to ``scipy.stats.ttest_rel`` and its confidence interval (tested)."""
    a, b = np.asarray(scores_a, dtype=float), np.asarray(scores_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("paired scores must have one entry per shared item for each model")
    n, diff, var = _t_moments(a - b)
    if n < 2 or var == 0:
        return {"statistic": math.nan, "p_value": math.nan, "diff": diff, "diff_low": math.nan, "diff_high": math.nan}
    return _t_result(diff, math.sqrt(var / n), n - 1, level)


# ---------------------------------------------------------------- pairwise table

PAIRWISE_COLUMNS = {
    "model_a": "the model with the higher posterior mean (ties: alphabetical); every probability is of A beating B",
    "model_b": "the other model",
    "n_a": "attempts of A counted",
    "n_b": "attempts of B counted",
    "mean_a": "observed mean score of A",
    "mean_b": "observed mean score of B",
    "n_shared_items": "units both models attempted: items, or declared clusters of items (the paired analyses use "
    "only these, each unit's epochs summed)",
    "p_a_better_independent": "P(theta_A > theta_B) from the models' independent headline (design-aware) Beta "
    "posteriors (exact)",
    "diff_mean_independent": "posterior mean of theta_A - theta_B (independent)",
    "diff_low_independent": "equal-tailed interval of theta_A - theta_B, lower (independent)",
    "diff_high_independent": "upper bound of that interval",
    "odds_ratio_median_independent": "posterior median odds ratio A : B (independent)",
    "odds_ratio_low_independent": "equal-tailed interval of the odds ratio, lower",
    "odds_ratio_high_independent": "upper bound",
    "p_a_better_paired": "P(gap > 0) in the post's paired logit model with item effects (shared items)",
    "diff_mean_paired": "population-average accuracy difference A - B (paired logit)",
    "diff_low_paired": "its equal-tailed interval, lower (on the side of 0 where odds_ratio_low_paired is of 1)",
    "diff_high_paired": "upper",
    "odds_ratio_median_paired": "exp(gap): item-conditional odds ratio A : B, posterior median",
    "odds_ratio_low_paired": "its equal-tailed interval, lower",
    "odds_ratio_high_paired": "upper",
    "dispersion_paired": "the paired logit's quasi-binomial dispersion: the spread of the units' A - B differences "
    "over their repeats' noise, at least 1 (1 with one attempt per unit)",
    "p_a_better_probit": "P(theta_A > theta_B), position paper's bivariate-probit model: one 0/1 pair per item; NaN "
    "for graded scores, repeats or clusters (its pairs would not be independent)",
    "diff_low_probit": "equal-tailed interval of theta_A - theta_B (probit), lower",
    "diff_high_probit": "upper",
    "hpdi_low_a": "A's headline (design-aware) HPDI, lower",
    "hpdi_high_a": "A's HPDI, upper",
    "hpdi_low_b": "B's HPDI, lower",
    "hpdi_high_b": "B's HPDI, upper",
    "hpdi_overlap": "overlap length / width of the narrower HPDI",
    "hpdi_verdict": "HiBayES Figure 3: different / equivalent / inconclusive",
    "verdict_source": "paired (logit) when the models share items, else independent",
    "verdict_band": "too close to call / leaning / likely / confident / near-certain (verdicts.LADDER)",
    "verdict": "the sentence for the room",
    "t_unpaired_p": "Welch t-test p-value on all attempts (conventional reading)",
    "t_paired_p": "paired t-test p-value on per-item mean scores over shared items",
    "prior_a": "Beta prior a (headline posteriors and HPDIs)",
    "prior_b": "Beta prior b",
    "level": "interval probability",
    "inputs_hash": "content hash of both models' counted rows, headline posteriors and the comparison settings; a "
    "rerun reuses the row when it is unchanged",
}

#: Part of every pair's inputs hash: bump it when a pair row's computation changes, so that rows
#: computed by the old code are recomputed rather than reused.
PAIR_ROW_VERSION = "9"


def _countable_rows(samples: pd.DataFrame) -> pd.DataFrame:
    """The counted attempts (a score, no error or limit) with their unit of evidence (:func:`attempt_units`)."""
    from evalpipeline.stats.posteriors import attempt_units

    missing = {"model", "item_id", "epoch", "score"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lack columns {sorted(missing)}; need model, item_id, epoch, score")
    keep = samples["score"].notna()
    for column in ("error", "limit"):
        if column in samples.columns:
            keep &= samples[column].isna()
    columns = ["model", "item_id", "epoch", "score"] + (["cluster"] if "cluster" in samples.columns else [])
    frame = samples.loc[keep, columns].copy()
    frame["score"] = frame["score"].astype(float)
    if ((frame["score"] < 0) | (frame["score"] > 1)).any():
        raise ValueError("scores must lie in [0, 1]")
    frame["unit"], kind = attempt_units(frame)
    frame.attrs["unit_kind"] = kind
    return frame.drop(columns=[c for c in ("cluster",) if c in frame.columns])


def headline_posteriors(
    frame: pd.DataFrame, prior, level: float, concentration_prior
) -> dict[str, tuple[float, float]]:
    """Each model's headline (design-aware) Beta posterior from :func:`_countable_rows`."""
    from evalpipeline.stats.posteriors import success_rate_posterior

    result = {}
    for model, rows in frame.groupby("model", sort=True):
        headline = success_rate_posterior(
            rows["score"].to_numpy(),
            rows["unit"].to_numpy(),
            frame.attrs.get("unit_kind", "item"),
            prior=prior,
            mass=level,
            concentration_prior=concentration_prior,
        )
        result[model] = (headline["posterior_a"], headline["posterior_b"])
    return result


def pairwise_table(
    samples: pd.DataFrame,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    n_draws: int = 100_000,
    seed: int = 0,
    probit: bool = True,
    previous: pd.DataFrame | None = None,
    posteriors: dict[str, tuple[float, float]] | None = None,
    concentration_prior: tuple[float, float] = (1.0, 1.0),
) -> pd.DataFrame:
    """One row per unordered pair of models on one suite (columns: ``PAIRWISE_COLUMNS``).

    ``samples``: the canonical sample rows of every model on the suite
    (``model, item_id, epoch, score`` and ``cluster`` if declared; rows with an error or limit, if those
    columns exist, and unscored rows are dropped).

    ``posteriors``: each model's headline Beta posterior (a, b), as its leaderboard row states it; computed
    from the samples (:func:`evalpipeline.stats.posteriors.success_rate_posterior`) when not given. The
    independent comparison and the HPDIs read them; the paired ones sum each unit's attempts (an item's
    epochs, a declared cluster's items).

    ``previous``: an earlier table of the suite (with its ``inputs_hash``). A
    row depends only on its two models' counted rows, posteriors and the settings (the
    A/B orientation too), so a pair whose inputs hash is unchanged is copied
    from it instead of recomputed: adding a model costs its new pairs, not
    every pair again. ``frame.attrs`` records ``pairs_computed`` and
    ``pairs_reused``.
    """
    frame = _countable_rows(samples)
    models = sorted(frame["model"].unique())
    if posteriors is None:
        posteriors = headline_posteriors(frame, prior, level, concentration_prior)
    posteriors = {m: (float(posteriors[m][0]), float(posteriors[m][1])) for m in models}
    posterior_mean = {m: a / (a + b) for m, (a, b) in posteriors.items()}
    totals = frame.groupby("model")["score"].agg(["sum", "size"])
    by_item = (
        frame.assign(square=frame["score"] ** 2)
        .groupby(["model", "unit"])
        .agg(sum=("score", "sum"), size=("score", "size"), mean=("score", "mean"), squares=("square", "sum"))
    )
    fingerprints = _model_fingerprints(frame)
    settings = repr(
        (PAIR_ROW_VERSION, tuple(float(x) for x in prior), float(level), int(n_draws), int(seed), bool(probit))
    )
    reusable = {}
    if previous is not None and len(previous) and "inputs_hash" in previous.columns:
        reusable = {
            (a, b, h): row
            for a, b, h, row in zip(
                previous["model_a"],
                previous["model_b"],
                previous["inputs_hash"],
                previous[list(PAIRWISE_COLUMNS)].to_dict("records"),
            )
        }
    per_model = _PerModel(frame, by_item, totals, posteriors, level, n_draws, seed)
    rows, pending = [], []
    for first, second in itertools.combinations(models, 2):
        model_a, model_b = sorted((first, second), key=lambda m: (-posterior_mean[m], m))
        inputs_hash = _digest(
            settings,
            first,
            fingerprints[first],
            repr(posteriors[first]),
            second,
            fingerprints[second],
            repr(posteriors[second]),
        )
        row = reusable.get((model_a, model_b, inputs_hash))
        if row is None:
            pending.append((len(rows), model_a, model_b, inputs_hash))
        rows.append(row)
    paired = _paired_logits(per_model, [(a, b) for _, a, b, _ in pending], level)
    probits = _paired_probits(per_model, [(a, b) for _, a, b, _ in pending], prior, level) if probit else None
    for position, model_a, model_b, inputs_hash in pending:
        rows[position] = _pair_row(per_model, model_a, model_b, prior, level, probit, paired, probits)
        rows[position]["inputs_hash"] = inputs_hash
    table = pd.DataFrame(rows, columns=list(PAIRWISE_COLUMNS))
    table.attrs.update(pairs_computed=len(pending), pairs_reused=len(rows) - len(pending))
    return table


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


def _model_fingerprints(frame: pd.DataFrame) -> dict[str, str]:
    """A content hash of each model's counted rows (item, epoch, score, unit), independent of row order."""
    ordered = frame.sort_values(["model", "item_id", "epoch"], kind="stable")
    hashes = pd.util.hash_pandas_object(ordered[["item_id", "epoch", "score", "unit"]], index=False).to_numpy()
    result = {}
    for model, positions in ordered.groupby("model", sort=True).indices.items():
        result[model] = hashlib.blake2b(hashes[positions].tobytes(), digest_size=16).hexdigest()
    return result


class _PerModel:
    """What every pair row reads of one model, computed once per model rather than once per pair.

    A model's units (items, or declared clusters) are integer codes into one sorted unit order (the unit
    level of ``by_item``, grouped with ``sort=True``), so a pair's shared units are an intersection of
    integer arrays, with numpy arrays of their sums, sizes and means. For the probit, a model whose every
    unit has one attempt keeps its units' codes and scores (None otherwise: its attempts do not pair as
    independent 0/1 outcomes).
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        by_item: pd.DataFrame,
        totals: pd.DataFrame,
        posteriors: dict,
        level: float,
        n_draws: int,
        seed: int,
    ):
        self.posteriors, self.level, self.n_draws, self.seed = posteriors, level, n_draws, seed
        self.totals = {m: (float(row["sum"]), int(row["size"])) for m, row in totals.iterrows()}
        unit_level = by_item.index.levels[by_item.index.names.index("unit")]
        self.items, self.attempts, self.squares = {}, {}, {}
        for m in totals.index:
            rows = by_item.xs(m, level="model")
            codes, sizes = unit_level.get_indexer(rows.index), rows["size"].to_numpy(dtype=float)
            self.items[m] = (codes, rows["sum"].to_numpy(dtype=float), sizes, rows["mean"].to_numpy(dtype=float))
            self.squares[m] = rows["squares"].to_numpy(dtype=float)
            self.attempts[m] = (codes, rows["sum"].to_numpy(dtype=float)) if np.all(sizes == 1) else None
        scores = frame["score"].to_numpy(dtype=float)
        self.t_moments = {
            m: _t_moments(scores[positions])  # every pair's Welch test reads them
            for m, positions in frame.groupby("model", sort=True).indices.items()
        }
        self._hpdi: dict = {}
        self._draws: dict = {}
        self._odds: dict = {}

    def shared(self, model_a: str, model_b: str) -> tuple:
        """The pair's shared unit codes, their positions in A's and B's arrays, and both models' unit arrays."""
        items_a, items_b = self.items[model_a], self.items[model_b]
        shared, in_a, in_b = np.intersect1d(items_a[0], items_b[0], assume_unique=True, return_indices=True)
        return shared, in_a, in_b, items_a, items_b

    def hpdi(self, model: str, posterior) -> tuple[float, float]:
        if model not in self._hpdi:
            self._hpdi[model] = beta_hpdi(*posterior, self.level)
        return self._hpdi[model]

    def odds(self, model: str, posterior) -> np.ndarray:
        """:func:`posterior_odds` of the model's :meth:`draws`, computed once for all its pairs."""
        if model not in self._odds:
            self._odds[model] = posterior_odds(self.draws(model, posterior))
            self._odds[model].setflags(write=False)
        return self._odds[model]

    def draws(self, model: str, posterior) -> np.ndarray:
        """The model's :func:`posterior_draws` (its stream is its name), drawn once for all its pairs.

        Kept for the whole table (``n_draws`` floats a model: 0.8 MB at 100,000): a model is B in
        the pairs of every model above it, and drawing was half of a pair's independent comparison."""
        if model not in self._draws:
            self._draws[model] = posterior_draws(*posterior, self.n_draws, self.seed, model)
            self._draws[model].setflags(write=False)
        return self._draws[model]


def _paired_logits(per_model: _PerModel, pairs: list[tuple[str, str]], level: float) -> dict:
    """:func:`paired_logit_comparison` of every pair with shared items, keyed by (A, B).

    Pass 1 for every pair, then pass 2 in the order of the refined grids: pairs with the
    same grid follow each other and share its grid-only work (:func:`_logit_grid`; at 100
    models ~60% of a suite's pairs share a grid with another). Each result is what the
    pair gets alone.
    """
    firsts = []
    for model_a, model_b in pairs:
        _, in_a, in_b, (_, sum_a, size_a, _), (_, sum_b, size_b, _) = per_model.shared(model_a, model_b)
        if len(in_a):
            dispersion = pair_dispersion(
                sum_a[in_a],
                size_a[in_a],
                sum_b[in_b],
                size_b[in_b],
                per_model.squares[model_a][in_a],
                per_model.squares[model_b][in_b],
            )
            first = _paired_logit_pass1(
                sum_a[in_a] / dispersion,
                size_a[in_a] / dispersion,
                sum_b[in_b] / dispersion,
                size_b[in_b] / dispersion,
                **LOGIT_PRIORS,
                grid_size=LOGIT_GRID,
            )
            firsts.append(((model_a, model_b), first, dispersion))
    firsts.sort(key=lambda item: item[1].grid_key)
    return {pair: {**_paired_logit_pass2(first, level), "dispersion": dispersion} for pair, first, dispersion in firsts}


def _probit_table(per_model: _PerModel, model_a: str, model_b: str) -> tuple[int, int, int, int] | None:
    """The pair's :func:`paired_table` over the units both models attempted, each unit one 0/1 attempt, or
    None when there is none, a unit has several attempts or a score is not 0/1 (then the bivariate probit
    does not apply)."""
    if per_model.attempts[model_a] is None or per_model.attempts[model_b] is None:
        return None
    keys_a, attempts_a = per_model.attempts[model_a]
    keys_b, attempts_b = per_model.attempts[model_b]
    _, at_a, at_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    y_a, y_b = attempts_a[at_a], attempts_b[at_b]
    if y_a.size and np.isin(y_a, (0.0, 1.0)).all() and np.isin(y_b, (0.0, 1.0)).all():
        return paired_table(y_a, y_b)
    return None


def _paired_probits(per_model: _PerModel, pairs: list[tuple[str, str]], prior, level: float) -> dict:
    """:func:`paired_probit_comparison` of every pair with a 0/1 table (keyed by (A, B); others absent),
    in the order of the tables' margins: pairs with the same margins follow each other and share
    their grid (:func:`_probit_grid`). Each result is what the pair gets alone."""
    tables = []
    for model_a, model_b in pairs:
        if len(per_model.shared(model_a, model_b)[0]):  # a pair without shared items has no paired rows
            table = _probit_table(per_model, model_a, model_b)
            if table is not None:
                s, t, u, v = table
                tables.append(((s + t, s + u, s + t + u + v), (model_a, model_b), table))
    tables.sort(key=lambda item: item[0])
    return {pair: paired_probit_comparison(table, prior=prior, level=level) for _, pair, table in tables}


def _pair_row(
    per_model: _PerModel,
    model_a,
    model_b,
    prior,
    level,
    probit,
    paired_logits: dict | None = None,
    paired_probits: dict | None = None,
) -> dict:
    k_a, n_a = per_model.totals[model_a]
    k_b, n_b = per_model.totals[model_b]
    posterior_a, posterior_b = per_model.posteriors[model_a], per_model.posteriors[model_b]
    independent = _independent_comparison(
        posterior_a,
        posterior_b,
        per_model.draws(model_a, posterior_a),
        per_model.draws(model_b, posterior_b),
        prior,
        level,
        (per_model.odds(model_a, posterior_a), per_model.odds(model_b, posterior_b)),
    )
    hpdi_a = per_model.hpdi(model_a, independent["posterior_a"])
    hpdi_b = per_model.hpdi(model_b, independent["posterior_b"])
    shared, in_a, in_b, (_, sum_a, size_a, mean_a), (_, sum_b, size_b, mean_b) = per_model.shared(model_a, model_b)
    nan = math.nan
    paired = {
        "p_a_better": nan,
        "diff_mean": nan,
        "diff_low": nan,
        "diff_high": nan,
        "odds_ratio_median": nan,
        "odds_ratio_low": nan,
        "odds_ratio_high": nan,
        "dispersion": nan,
    }
    probit_result = {"p_a_better": nan, "diff_low": nan, "diff_high": nan}
    t_paired = {"p_value": nan}
    if len(shared):
        if paired_logits is not None and (model_a, model_b) in paired_logits:
            paired = paired_logits[(model_a, model_b)]
        else:
            paired = paired_logit_comparison(
                sum_a[in_a],
                size_a[in_a],
                sum_b[in_b],
                size_b[in_b],
                level=level,
                squares_a=per_model.squares[model_a][in_a],
                squares_b=per_model.squares[model_b][in_b],
            )
        t_paired = paired_t_test(mean_a[in_a], mean_b[in_b], level)
        if probit:
            # one 0/1 attempt per unit, paired by unit
            if paired_probits is not None:
                probit_result = paired_probits.get((model_a, model_b), probit_result)
            else:
                table = _probit_table(per_model, model_a, model_b)
                if table is not None:
                    probit_result = paired_probit_comparison(table, prior=prior, level=level)
    t_unpaired = _welch(per_model.t_moments[model_a], per_model.t_moments[model_b], level)
    source = "paired" if len(shared) else "independent"
    p_headline = paired["p_a_better"] if len(shared) else independent["p_a_better"]
    return {
        "model_a": model_a,
        "model_b": model_b,
        "n_a": n_a,
        "n_b": n_b,
        "mean_a": k_a / n_a,
        "mean_b": k_b / n_b,
        "n_shared_items": int(len(shared)),
        "p_a_better_independent": independent["p_a_better"],
        "diff_mean_independent": independent["diff_mean"],
        "diff_low_independent": independent["diff_low"],
        "diff_high_independent": independent["diff_high"],
        "odds_ratio_median_independent": independent["odds_ratio_median"],
        "odds_ratio_low_independent": independent["odds_ratio_low"],
        "odds_ratio_high_independent": independent["odds_ratio_high"],
        "p_a_better_paired": paired["p_a_better"],
        "diff_mean_paired": paired["diff_mean"],
        "diff_low_paired": paired["diff_low"],
        "diff_high_paired": paired["diff_high"],
        "odds_ratio_median_paired": paired["odds_ratio_median"],
        "odds_ratio_low_paired": paired["odds_ratio_low"],
        "odds_ratio_high_paired": paired["odds_ratio_high"],
        "dispersion_paired": paired["dispersion"],
        "p_a_better_probit": probit_result["p_a_better"],
        "diff_low_probit": probit_result["diff_low"],
        "diff_high_probit": probit_result["diff_high"],
        "hpdi_low_a": hpdi_a[0],
        "hpdi_high_a": hpdi_a[1],
        "hpdi_low_b": hpdi_b[0],
        "hpdi_high_b": hpdi_b[1],
        "hpdi_overlap": hpdi_overlap_fraction(*hpdi_a, *hpdi_b),
        "hpdi_verdict": hpdi_verdict(*hpdi_a, *hpdi_b),
        "verdict_source": source,
        "verdict_band": probability_band(p_headline),
        "verdict": probability_verdict(p_headline, model_a, model_b),
        "t_unpaired_p": t_unpaired["p_value"],
        "t_paired_p": t_paired["p_value"],
        "prior_a": float(prior[0]),
        "prior_b": float(prior[1]),
        "level": level,
    }
