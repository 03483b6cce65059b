"""Comparing two models: independent Beta posteriors, paired models on shared items, t-tests.

Sources:

* Independent: ``no-clt-position-paper.txt`` Section 3.3 (Eq. 7, Snippet 2:
  difference and odds ratio from Beta posterior draws, 95% quantile-based
  intervals) and Remark 1 (P(theta_A > theta_B)).
* Paired, bivariate probit: Section 3.4, Appendix C and E.2 (Eq. 67-90):
  ``theta_A, theta_B ~ Beta(1, 1)``, ``rho = 2 rho_hat - 1``,
  ``rho_hat ~ Beta(4, 2)``, the 2x2 table S/T/U/V with cell probabilities
  from the bivariate normal CDF.
* Paired, logit with item effects: ``eval-as-measurement-post.txt`` "Is the
  new version actually better?": ``base ~ N(0, 1.5)``, ``gap ~ N(0, 1)``,
  ``spread ~ HalfNormal(2.5)``, ``item ~ N(0, spread)``,
  ``logit p = base + item + gap * [model]``.
* Conventional reading: Welch's unpaired t-test and the paired t-test
  (position paper Eq. 3-4 with t quantiles; the tests HiBayES contrasts with).

Choices:

* Both paired models are computed by deterministic quadrature rather than
  MCMC / importance sampling: the probit posterior on a (theta_A, theta_B,
  rho) grid (the bivariate normal CDF by Gauss-Legendre integration of
  its rho-derivative), the logit posterior on a (base, gap, spread) grid
  with each item's effect integrated out by Gauss-Hermite quadrature.
  Items with the same outcome pattern share one likelihood factor, which
  makes this exact up to the grid and fast. Seed-free and reproducible.
* Epochs: the logit model reads an item's epochs as a binomial count per
  model (graded scores quasi-binomially). The probit model needs one
  0/1 pair per unit; it pairs attempts by (item, epoch) and is skipped
  (NaN) for graded scores.
* The logit gap is reported on the log-odds scale (``exp(gap)`` is the
  item-conditional odds ratio) and on the accuracy scale as the
  population-average difference ``E_item[sigmoid(base + item + gap) -
  sigmoid(base + item)]`` over a new item.
* "A" is always the model whose advantage is measured: P(A > B),
  differences A - B, odds ratios A : B.
"""

from __future__ import annotations

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
    value, _ = integrate.quad(lambda x: d1.pdf(x) * d2.cdf(x), low, high, points=[d1.mean(), d2.mean()], limit=200,
                              epsabs=1e-12, epsrel=1e-10)
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
    values, weights = values[order], weights[order]
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
) -> dict:
    """Independent Beta posteriors for A and B (position paper Section 3.3, Snippet 2, Remark 1).

    ``p_a_better`` is exact (quadrature: 200-point Gauss-Legendre when every
    Beta parameter is >= 1, accurate to ~1e-9, else adaptive); ``diff_mean`` is exact; the
    difference and odds-ratio intervals are equal-tailed quantiles of
    ``n_draws`` seeded posterior draws, as in Snippet 2.
    """
    a_a, b_a = beta_posterior(k_a, n_a, prior)
    a_b, b_b = beta_posterior(k_b, n_b, prior)
    rng = np.random.default_rng(seed)
    draws_a = rng.beta(a_a, b_a, n_draws)
    draws_b = rng.beta(a_b, b_b, n_draws)
    diff = draws_a - draws_b
    with np.errstate(divide="ignore", invalid="ignore"):
        odds_ratio = (draws_a / (1 - draws_a)) / (draws_b / (1 - draws_b))
    tail = (1 - level) / 2
    diff_low, diff_high = np.quantile(diff, [tail, 1 - tail])
    or_low, or_median, or_high = np.quantile(odds_ratio, [tail, 0.5, 1 - tail])
    return {
        "p_a_better": (float(prob_beta_greater_many(a_a, b_a, a_b, b_b)) if min(a_a, b_a, a_b, b_b) >= 1
                       else prob_beta_greater(a_a, b_a, a_b, b_b)),
        "diff_mean": a_a / (a_a + b_a) - a_b / (a_b + b_b),
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
    """
    h, k, rho = (np.asarray(x, dtype=float).ravel() for x in (h, k, rho))
    if np.any(np.abs(rho) >= 1):
        raise ValueError("|rho| must be < 1")
    tops = np.arcsin(rho)
    breaks = np.unique(np.concatenate([[0.0], tops]))
    low, high = breaks[:-1], breaks[1:]
    t = low[:, None] + (high - low)[:, None] * (_BVN_PIECE_NODES + 1) / 2  # (pieces, nodes)
    sin_t, cos2_t = np.sin(t), np.cos(t) ** 2
    squares = (h[:, None] ** 2 + k[None, :] ** 2)[:, :, None, None]
    product = (h[:, None] * k[None, :])[:, :, None, None]
    integrand = np.exp(-(squares - 2 * sin_t * product) / (2 * cos2_t))
    pieces = np.einsum("ijpn,n->ijp", integrand, _BVN_PIECE_WEIGHTS) * (high - low) / 2
    cumulative = np.concatenate([np.zeros(pieces.shape[:2] + (1,)), np.cumsum(pieces, axis=-1)], axis=-1)
    zero = int(np.searchsorted(breaks, 0.0))
    integral = cumulative[..., np.searchsorted(breaks, tops)] - cumulative[..., zero:zero + 1]
    return special.ndtr(h)[:, None, None] * special.ndtr(k)[None, :, None] + integral / (2 * math.pi)


def paired_table(y_a, y_b) -> tuple[int, int, int, int]:
    """The 2x2 table of Appendix E.2: S (both right), T (A only), U (B only), V (both wrong)."""
    y_a, y_b = np.asarray(y_a, dtype=float), np.asarray(y_b, dtype=float)
    if y_a.shape != y_b.shape or y_a.size == 0:
        raise ValueError("need two equally long, non-empty 0/1 vectors (one entry per shared question)")
    if not (np.isin(y_a, (0, 1)).all() and np.isin(y_b, (0, 1)).all()):
        raise ValueError("the bivariate-probit model needs 0/1 outcomes")
    return (int(np.sum(y_a * y_b)), int(np.sum(y_a * (1 - y_b))), int(np.sum((1 - y_a) * y_b)),
            int(np.sum((1 - y_a) * (1 - y_b))))


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
    """
    s, t, u, v = (float(x) for x in table)
    if min(s, t, u, v) < 0 or s + t + u + v == 0:
        raise ValueError(f"table counts must be non-negative with at least one pair, got {table}")
    n = s + t + u + v
    n_theta_a, n_theta_b, n_rho = grid_size

    def axis(successes, size):
        dist = stats.beta(prior[0] + successes, prior[1] + n - successes)
        return np.linspace(max(dist.ppf(1e-9), 1e-6), min(dist.isf(1e-9), 1 - 1e-6), size)

    theta_a = axis(s + t, n_theta_a)
    theta_b = axis(s + u, n_theta_b)
    rho_hat = stats.beta.ppf((np.arange(n_rho) + 0.5) / n_rho, *rho_prior)
    rho = np.clip(2 * rho_hat - 1, -0.99, 0.99)
    # every factor that depends on one axis only is computed on that axis and broadcast
    ta, tb = theta_a[:, None, None], theta_b[None, :, None]
    p_v = bivariate_normal_cdf_grid(-stats.norm.ppf(theta_a), -stats.norm.ppf(theta_b), rho)
    p_s = ta + tb + p_v - 1
    p_t = 1 - tb - p_v
    p_u = 1 - ta - p_v
    valid = (p_s > 0) & (p_t > 0) & (p_u > 0) & (p_v > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_like = s * np.log(p_s) + t * np.log(p_t) + u * np.log(p_u) + v * np.log(p_v)
    log_post = np.where(valid, log_like, -np.inf)
    log_post = log_post + stats.beta.logpdf(theta_a, *prior)[:, None, None] + stats.beta.logpdf(theta_b, *prior)[None, :, None]
    weights = np.exp(log_post - np.max(log_post))
    weights /= weights.sum()
    # theta_A - theta_B does not depend on rho: its distribution is the (theta_A, theta_B) marginal
    marginal = weights.sum(axis=2)
    diff = (theta_a[:, None] - theta_b[None, :]).ravel()
    w = marginal.ravel()
    tail = (1 - level) / 2
    low, high = _weighted_quantiles(diff, w, [tail, 1 - tail])
    return {
        "p_a_better": float(w[diff > 0].sum() + 0.5 * w[diff == 0].sum()),
        "diff_mean": float(np.sum(diff * w)),
        "diff_low": float(low),
        "diff_high": float(high),
        "rho_mean": float(np.sum(weights.sum(axis=(0, 1)) * rho)),
        "table": (int(s), int(t), int(u), int(v)),
        "level": level,
    }


# ---------------------------------------------------------------- paired: logit with item effects

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()  # expectation over a standard normal


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _binary_pattern_log_likelihood(base, gap, spread, patterns: pd.DataFrame) -> np.ndarray | None:
    """:func:`_logit_pattern_log_likelihood` for one 0/1 attempt per item and model (n = 1, k in {0, 1}), or None.

    The four outcome patterns need the item integrals of ``s(eta_a)^ka s(-eta_a)^(1-ka)``
    times B's factor: the sigmoids are computed directly (no logs) and each
    integral is one batched matrix product over the quadrature nodes. Returns
    None (the caller takes the general path) where an integral underflows.
    """
    eta_b = base[:, None, None] + spread[None, :, None] * _GH_NODES  # (B, S, Q)
    eta_a = eta_b[:, None] + gap[None, :, None, None]  # (B, G, S, Q)
    a_right = special.expit(eta_a).transpose(0, 2, 1, 3)  # (B, S, G, Q)
    a_wrong = special.expit(-eta_a).transpose(0, 2, 1, 3)
    b_right = (special.expit(eta_b) * _GH_WEIGHTS)[..., None]  # (B, S, Q, 1)
    b_wrong = (special.expit(-eta_b) * _GH_WEIGHTS)[..., None]
    total = np.zeros((len(base), len(spread), len(gap)))
    for pka, pkb, count in patterns[["ka", "kb", "count"]].itertuples(index=False):
        item = np.matmul(a_right if pka else a_wrong, b_right if pkb else b_wrong)[..., 0]  # (B, S, G)
        if np.any(item < 1e-280):
            return None
        total += count * np.log(item)
    return total.transpose(0, 2, 1)


def _logit_pattern_log_likelihood(base, gap, spread, patterns: pd.DataFrame) -> np.ndarray:
    """Sum over items of log int Bin(k_a | n_a, sigmoid(eta + gap)) Bin(k_b | n_b, sigmoid(eta)) N(item) d item.

    On the (base, gap, spread) grid (axes ``ij``), one factor per distinct
    outcome pattern ``(ka, na, kb, nb)`` raised to its ``count``; the item
    effect is integrated by Gauss-Hermite quadrature. Computed so that the
    quantity is unchanged but the work per pattern is small:

    * ``k log s(x) + (n - k) log s(-x) = n log s(x) - (n - k) x``, with the
      log-sigmoids computed once per grid, not once per pattern;
    * the item integral is ``sum_q w_q A_q B_q`` with A's factor
      ``exp(n_a log s(eta_a) - (n_a - k_a) eta_a)`` shared by every pattern with
      the same ``(k_a, n_a)`` and B's factor on the small (base, spread) slice
      (it does not depend on the gap), so a pattern costs one contraction.
      Each factor is a probability (<= 1), so no overflow is possible; where
      the sum underflows (extreme grid corners with many attempts per item)
      those entries are recomputed with a log-sum-exp.
    """
    if ((patterns[["na", "nb"]] == 1).all(axis=None) and patterns[["ka", "kb"]].isin((0.0, 1.0)).all(axis=None)):
        binary = _binary_pattern_log_likelihood(base, gap, spread, patterns)
        if binary is not None:
            return binary
    eta_b = base[:, None, None, None] + spread[None, None, :, None] * _GH_NODES  # (B, 1, S, Q)
    eta_a = eta_b + gap[None, :, None, None]  # (B, G, S, Q)
    log_s_a, log_s_b = _log_sigmoid(eta_a), _log_sigmoid(eta_b)
    log_w = np.log(_GH_WEIGHTS)
    total = np.zeros(eta_a.shape[:3])
    a_factor = np.empty(eta_a.shape)
    for (pka, pna), group in patterns.groupby(["ka", "na"], sort=True):
        log_a = log_s_a * pna
        if pna != pka:
            log_a -= (pna - pka) * eta_a
        np.exp(log_a, out=a_factor)
        for pkb, pnb, count in group[["kb", "nb", "count"]].itertuples(index=False):
            log_b = pnb * log_s_b[:, 0] - (pnb - pkb) * eta_b[:, 0] + log_w  # (B, S, Q)
            item = np.einsum("bgsq,bsq->bgs", a_factor, np.exp(log_b), optimize=False)
            with np.errstate(divide="ignore"):
                log_item = np.log(item)
            tiny = item < 1e-280
            if tiny.any():  # underflow: the same sum, stabilised
                per_node = log_a + log_b[:, None]
                log_item = np.where(tiny, special.logsumexp(per_node, axis=-1), log_item)
            total += count * log_item
    return total


def paired_logit_comparison(
    successes_a,
    trials_a,
    successes_b,
    trials_b,
    *,
    base_sd: float = 1.5,
    gap_sd: float = 1.0,
    spread_scale: float = 2.5,
    level: float = 0.95,
    grid_size: tuple[int, int, int] = (32, 61, 24),
) -> dict:
    """The post's paired model: shared item difficulty, one log-odds gap (A over B), on a grid.

    Per shared item i: ``successes_a[i]`` of ``trials_a[i]`` attempts of A
    (graded scores summed, read quasi-binomially), likewise for B.
    ``logit p_B,i = base + item_i``, ``logit p_A,i = base + item_i + gap``;
    ``base ~ N(0, base_sd)``, ``gap ~ N(0, gap_sd)``,
    ``item_i ~ N(0, spread)``, ``spread ~ HalfNormal(spread_scale)``
    (the post's priors). Returns P(gap > 0), gap and odds-ratio intervals,
    and the population-average accuracy difference with its interval.
    """
    arrays = [np.asarray(x, dtype=float).ravel() for x in (successes_a, trials_a, successes_b, trials_b)]
    if len({x.size for x in arrays}) != 1 or arrays[0].size == 0:
        raise ValueError("need equally long, non-empty per-item arrays for both models")
    ka, na, kb, nb = arrays
    if np.any(na <= 0) or np.any(nb <= 0) or np.any((ka < 0) | (ka > na)) or np.any((kb < 0) | (kb > nb)):
        raise ValueError("need 0 <= successes <= trials and trials > 0 for every item and model")
    patterns = pd.DataFrame({"ka": ka, "na": na, "kb": kb, "nb": nb}).value_counts().reset_index(name="count")
    n_base, n_gap, n_spread = grid_size

    def log_posterior(base, gap, spread):
        b, g, sp = np.meshgrid(base, gap, spread, indexing="ij")
        log_like = _logit_pattern_log_likelihood(base, gap, spread, patterns)
        log_prior = (stats.norm.logpdf(base, 0, base_sd)[:, None, None] + stats.norm.logpdf(gap, 0, gap_sd)[None, :, None]
                     + stats.halfnorm.logpdf(spread, scale=spread_scale)[None, None, :])
        return b, g, sp, log_like + log_prior

    def support(values, mass, pad):
        keep = np.nonzero(mass > mass.max() * 1e-9)[0]
        step = values[1] - values[0]
        return values[keep[0]] - pad * step, values[keep[-1]] + pad * step

    # Pass 1: coarse grid over the prior's range; pass 2: refine on the region holding the mass.
    base0, gap0, spread0 = np.linspace(-7, 7, 29), np.linspace(-5, 5, 41), np.linspace(0, 8, 17)
    _, _, _, lp = log_posterior(base0, gap0, spread0)
    w0 = np.exp(lp - lp.max())
    lo_b, hi_b = support(base0, w0.sum(axis=(1, 2)), 1)
    lo_g, hi_g = support(gap0, w0.sum(axis=(0, 2)), 1)
    lo_s, hi_s = support(spread0, w0.sum(axis=(0, 1)), 1)
    base = np.linspace(lo_b, hi_b, n_base)
    gap = np.linspace(lo_g, hi_g, n_gap)
    spread = np.linspace(max(lo_s, 0.0), hi_s, n_spread)
    b, g, sp, lp = log_posterior(base, gap, spread)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    # Accuracy-scale difference for a new item: average over the item-effect distribution.
    eta = base[:, None, None] + spread[None, :, None] * _GH_NODES  # (B, S, Q): B's accuracy does not depend on the gap
    accuracy_a = special.expit(eta[:, None] + gap[None, :, None, None]) @ _GH_WEIGHTS  # (B, G, S)
    accuracy_diff = accuracy_a - (special.expit(eta) @ _GH_WEIGHTS)[:, None, :]
    tail = (1 - level) / 2
    wf, gf, df = w.ravel(), g.ravel(), accuracy_diff.ravel()
    gap_edges, gap_cdf = _cell_cdf(gap, w.sum(axis=(0, 2)))
    gap_low, gap_median, gap_high = np.interp([tail, 0.5, 1 - tail], gap_cdf, gap_edges)
    diff_low, diff_high = _weighted_quantiles(df, wf, [tail, 1 - tail])
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
        "spread_mean": float(np.sum(sp.ravel() * wf)),
        "n_items": int(ka.size),
        "level": level,
    }


# ---------------------------------------------------------------- conventional t-tests


def unpaired_t_test(scores_a, scores_b, level: float = 0.95) -> dict:
    """Welch's two-sample t-test of mean A - mean B (unequal variances; position paper Eq. 3 with t).

    Returns ``statistic, p_value, diff, diff_low, diff_high``; NaN where a
    sample has fewer than two scores or both have zero variance.
    """
    a, b = np.asarray(scores_a, dtype=float), np.asarray(scores_b, dtype=float)
    diff = float(a.mean() - b.mean()) if a.size and b.size else math.nan
    if a.size < 2 or b.size < 2 or (a.var() == 0 and b.var() == 0):
        return {"statistic": math.nan, "p_value": math.nan, "diff": diff, "diff_low": math.nan, "diff_high": math.nan}
    result = stats.ttest_ind(a, b, equal_var=False)
    ci = result.confidence_interval(level)
    return {"statistic": float(result.statistic), "p_value": float(result.pvalue), "diff": diff,
            "diff_low": float(ci.low), "diff_high": float(ci.high)}


def paired_t_test(scores_a, scores_b, level: float = 0.95) -> dict:
    """Paired t-test on per-item scores (position paper Eq. 4 with t quantiles). Same keys as the unpaired test."""
    a, b = np.asarray(scores_a, dtype=float), np.asarray(scores_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("paired scores must have one entry per shared item for each model")
    d = a - b
    diff = float(d.mean()) if d.size else math.nan
    if d.size < 2 or d.var() == 0:
        return {"statistic": math.nan, "p_value": math.nan, "diff": diff, "diff_low": math.nan, "diff_high": math.nan}
    result = stats.ttest_rel(a, b)
    ci = result.confidence_interval(level)
    return {"statistic": float(result.statistic), "p_value": float(result.pvalue), "diff": diff,
            "diff_low": float(ci.low), "diff_high": float(ci.high)}


# ---------------------------------------------------------------- pairwise table

PAIRWISE_COLUMNS = {
    "model_a": "the model with the higher posterior mean (ties: alphabetical); every probability is of A beating B",
    "model_b": "the other model",
    "n_a": "attempts of A counted",
    "n_b": "attempts of B counted",
    "mean_a": "observed mean score of A",
    "mean_b": "observed mean score of B",
    "n_shared_items": "items both models attempted (the paired analyses use only these)",
    "p_a_better_independent": "P(theta_A > theta_B) from independent Beta posteriors (exact)",
    "diff_mean_independent": "posterior mean of theta_A - theta_B (independent)",
    "diff_low_independent": "equal-tailed interval of theta_A - theta_B, lower (independent)",
    "diff_high_independent": "upper bound of that interval",
    "odds_ratio_median_independent": "posterior median odds ratio A : B (independent)",
    "odds_ratio_low_independent": "equal-tailed interval of the odds ratio, lower",
    "odds_ratio_high_independent": "upper bound",
    "p_a_better_paired": "P(gap > 0) in the post's paired logit model with item effects (shared items)",
    "diff_mean_paired": "population-average accuracy difference A - B (paired logit)",
    "diff_low_paired": "its equal-tailed interval, lower",
    "diff_high_paired": "upper",
    "odds_ratio_median_paired": "exp(gap): item-conditional odds ratio A : B, posterior median",
    "odds_ratio_low_paired": "its equal-tailed interval, lower",
    "odds_ratio_high_paired": "upper",
    "p_a_better_probit": "P(theta_A > theta_B), position paper's bivariate-probit model (0/1 scores, pairs by item and epoch; NaN for graded)",
    "diff_low_probit": "equal-tailed interval of theta_A - theta_B (probit), lower",
    "diff_high_probit": "upper",
    "hpdi_low_a": "A's Beta posterior HPDI, lower",
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
    "prior_a": "Beta prior a (independent posteriors and HPDIs)",
    "prior_b": "Beta prior b",
    "level": "interval probability",
    "inputs_hash": "content hash of both models' counted rows and the comparison settings; a rerun reuses the row "
                   "when it is unchanged",
}

#: Part of every pair's inputs hash: bump it when a pair row's computation changes, so that rows
#: computed by the old code are recomputed rather than reused.
PAIR_ROW_VERSION = "2"


def _countable_rows(samples: pd.DataFrame) -> pd.DataFrame:
    missing = {"model", "item_id", "epoch", "score"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lack columns {sorted(missing)}; need model, item_id, epoch, score")
    keep = samples["score"].notna()
    for column in ("error", "limit"):
        if column in samples.columns:
            keep &= samples[column].isna()
    frame = samples.loc[keep, ["model", "item_id", "epoch", "score"]].copy()
    frame["score"] = frame["score"].astype(float)
    if ((frame["score"] < 0) | (frame["score"] > 1)).any():
        raise ValueError("scores must lie in [0, 1]")
    return frame


def pairwise_table(
    samples: pd.DataFrame,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    n_draws: int = 100_000,
    seed: int = 0,
    probit: bool = True,
    previous: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per unordered pair of models on one suite (columns: ``PAIRWISE_COLUMNS``).

    ``samples``: the canonical sample rows of every model on the suite
    (``model, item_id, epoch, score``; rows with an error or limit, if those
    columns exist, and unscored rows are dropped).

    ``previous``: an earlier table of the suite (with its ``inputs_hash``). A
    row depends only on its two models' counted rows and the settings (the
    A/B orientation too), so a pair whose inputs hash is unchanged is copied
    from it instead of recomputed: adding a model costs its new pairs, not
    every pair again. ``frame.attrs`` records ``pairs_computed`` and
    ``pairs_reused``.
    """
    frame = _countable_rows(samples)
    models = sorted(frame["model"].unique())
    totals = frame.groupby("model")["score"].agg(["sum", "size"])
    posterior_mean = {m: beta_posterior(totals.loc[m, "sum"], totals.loc[m, "size"], prior) for m in models}
    posterior_mean = {m: a / (a + b) for m, (a, b) in posterior_mean.items()}
    by_item = frame.groupby(["model", "item_id"])["score"].agg(["sum", "size", "mean"])
    fingerprints = _model_fingerprints(frame)
    settings = repr((PAIR_ROW_VERSION, tuple(float(x) for x in prior), float(level), int(n_draws), int(seed), bool(probit)))
    reusable = {}
    if previous is not None and len(previous) and "inputs_hash" in previous.columns:
        reusable = {(a, b, h): row for a, b, h, row in zip(previous["model_a"], previous["model_b"],
                                                          previous["inputs_hash"], previous[list(PAIRWISE_COLUMNS)].to_dict("records"))}
    per_model = _PerModel(frame, by_item, prior, level)
    rows, computed = [], 0
    for first, second in itertools.combinations(models, 2):
        model_a, model_b = sorted((first, second), key=lambda m: (-posterior_mean[m], m))
        inputs_hash = _digest(settings, first, fingerprints[first], second, fingerprints[second])
        row = reusable.get((model_a, model_b, inputs_hash))
        if row is None:
            row = _pair_row(per_model, totals, model_a, model_b, prior, level, n_draws, seed, probit)
            row["inputs_hash"] = inputs_hash
            computed += 1
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(PAIRWISE_COLUMNS))
    table.attrs.update(pairs_computed=computed, pairs_reused=len(rows) - computed)
    return table


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


def _model_fingerprints(frame: pd.DataFrame) -> dict[str, str]:
    """A content hash of each model's counted rows (item, epoch, score), independent of row order."""
    ordered = frame.sort_values(["model", "item_id", "epoch"], kind="stable")
    hashes = pd.util.hash_pandas_object(ordered[["item_id", "epoch", "score"]], index=False).to_numpy()
    result = {}
    for model, positions in ordered.groupby("model", sort=True).indices.items():
        result[model] = hashlib.blake2b(hashes[positions].tobytes(), digest_size=16).hexdigest()
    return result


class _PerModel:
    """What every pair row reads of one model, computed once per model rather than once per pair."""

    def __init__(self, frame: pd.DataFrame, by_item: pd.DataFrame, prior, level: float):
        self.prior, self.level = prior, level
        self.scores = {m: g["score"].to_numpy() for m, g in frame.groupby("model", sort=True)}
        self.items = {m: by_item.xs(m, level="model") for m in self.scores}
        self.attempts = {}
        for m, g in frame.groupby("model", sort=True):
            attempts = g.set_index(["item_id", "epoch"])["score"]
            self.attempts[m] = attempts[~attempts.index.duplicated(keep="first")].sort_index()
        self._hpdi: dict = {}

    def hpdi(self, model: str, posterior) -> tuple[float, float]:
        if model not in self._hpdi:
            self._hpdi[model] = beta_hpdi(*posterior, self.level)
        return self._hpdi[model]


def _pair_row(per_model: _PerModel, totals, model_a, model_b, prior, level, n_draws, seed, probit) -> dict:
    k_a, n_a = float(totals.loc[model_a, "sum"]), int(totals.loc[model_a, "size"])
    k_b, n_b = float(totals.loc[model_b, "sum"]), int(totals.loc[model_b, "size"])
    independent = independent_comparison(k_a, n_a, k_b, n_b, prior=prior, level=level, n_draws=n_draws, seed=seed)
    hpdi_a = per_model.hpdi(model_a, independent["posterior_a"])
    hpdi_b = per_model.hpdi(model_b, independent["posterior_b"])
    items_a, items_b = per_model.items[model_a], per_model.items[model_b]
    shared = items_a.index.intersection(items_b.index)
    nan = math.nan
    paired = {"p_a_better": nan, "diff_mean": nan, "diff_low": nan, "diff_high": nan,
              "odds_ratio_median": nan, "odds_ratio_low": nan, "odds_ratio_high": nan}
    probit_result = {"p_a_better": nan, "diff_low": nan, "diff_high": nan}
    t_paired = {"p_value": nan}
    if len(shared):
        ia, ib = items_a.loc[shared], items_b.loc[shared]
        paired = paired_logit_comparison(ia["sum"], ia["size"], ib["sum"], ib["size"], level=level)
        t_paired = paired_t_test(ia["mean"].to_numpy(), ib["mean"].to_numpy(), level)
        if probit:
            # attempts paired by (item, epoch) on the shared items
            wide = pd.concat([per_model.attempts[model_a], per_model.attempts[model_b]], axis=1, join="inner",
                             keys=[model_a, model_b])
            wide = wide[wide.index.get_level_values(0).isin(shared)]
            if len(wide) and np.isin(wide.to_numpy(), (0.0, 1.0)).all():
                probit_result = paired_probit_comparison(paired_table(wide[model_a], wide[model_b]), prior=prior, level=level)
    t_unpaired = unpaired_t_test(per_model.scores[model_a], per_model.scores[model_b], level)
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
