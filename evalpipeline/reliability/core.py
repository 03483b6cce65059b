"""HIP-LLM: imprecise hierarchical Beta-Binomial reliability envelopes.

Source: ``shared/reference/hip-llm-reliability-paper.txt``.

Model (Section 3.2.1, Appendix A.1), per domain i, subdomain j:
    C_ij | theta_ij ~ Binomial(N_ij, theta_ij)
    theta_ij | mu_i, nu_i ~ Beta(mu_i nu_i, (1 - mu_i) nu_i)
    mu_i ~ Beta(a_i, b_i),  nu_i ~ Gamma(c_i, rate = d_i)     (rate! footnote 16)
domains independent; p_i = sum_j Omega_ij theta_ij, p_L = sum_i W_i p_i;
reliability over n future tasks R(n) = p**n (Def. 4, Eq. 1, Appendix A.5).
Imprecision (Eq. 4): (a_i, b_i, c_i, d_i) range over a box; every output is
the pointwise min / max over K configurations sampled from the box, its
corners always included (Theorems 1-6; Appendix B).

How each quantity is computed (per configuration h):
* Hyper-posterior Pr(mu, nu | C_i, h) (Lemma 7, Eqs. A.7-A.8) on a G-point
  grid in (logit mu, log nu). The grid is shared by the K configurations of a
  domain (the likelihood is computed once, each configuration only reweights
  it; Table 6's "grid reused across configurations") and placed by zooming in
  from a wide range until it holds all but 1e-8 of every configuration's
  marginal posterior mass in each tail of each axis. Equal cells in
  (logit mu, log nu): the weights include the Jacobian mu (1 - mu) nu. One
  grid serves configurations of very different widths, so strongly pooled
  configurations (large nu) can be resolved coarsely in mu when weakly
  pooled ones stretch the mu range; raise ``grid_size`` if that matters.
* Subdomain level, exact given the grid: theta_ij | mu, nu, C_i is
  Beta(C_ij + mu nu, N_ij - C_ij + (1 - mu) nu) (Lemma 7.1), so the CDF is a
  grid mixture of regularized incomplete Beta functions (Theorem 1, Theorem 4
  with F_R(t) = F_theta(t**(1/n))), and E[theta**n] a mixture of Beta moments
  prod_{r<n} (alpha + r) / (alpha + beta + r). The CDF's mixture is tabulated
  by quadrature of the Beta densities between exact anchors
  (:func:`beta_mixture_cdf`, within ~1e-12 of ``betainc``).
* E[p_i**n] and E[p_L**n], exact given the grid: given (mu, nu) the theta_ij
  are independent, so the moments of the weighted sum follow from binomial
  convolution of the Beta moments (all terms positive: no cancellation);
  domains are independent, so E[p_L**n | H] convolves domain moments.
* Domain and LLM CDFs, quantiles and P(R(n) >= r): Monte Carlo (Theorems 2-3,
  5-6; Appendix B steps 1-4), S draws per configuration: grid points drawn
  by stratified inverse-CDF sampling with the same uniforms for every
  configuration of a domain (common random numbers, which keeps Monte Carlo
  noise from inflating the envelope), then theta_ij from its Beta.
  A domain with a single subdomain reuses the exact subdomain results.
* LLM level: configurations are paired across domains (A_LLM = A_1 x ... x
  A_m, Theorem 3). All K**m pairings when there are at most
  ``max_pairings``, else the extremal pairings (every domain at its
  configuration minimising / maximising E[p_i**n] for each n, and each
  quantile) plus random pairings up to the cap. With the extremal pairings
  the n = 1 envelope is exact: E[p_L | H] = sum_i W_i E[p_i | h_i].

Choices where the paper is silent or ambiguous (also in the docstrings below):
* The CDF grid of T points spans [min_h (mean - 8 sd), max_h (mean + 8 sd)]
  (exact moments, clipped to [0, 1]) for each unit, instead of the whole of
  [0, 1], so narrow posteriors (large N) are resolved; outside it the CDF is
  0 or 1 to within Phi(-8).
* Monte Carlo envelopes (domain and LLM CDFs and quantiles, P(R(n) >= r)
  above the subdomain level) are the min / max of K noisy estimates; each has
  standard error <= 0.5 / sqrt(S) (0.009 at S = 3000), recorded in metadata.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import special, stats

from evalpipeline.reliability.settings import HyperBox, ReliabilitySettings
from evalpipeline.stats.posteriors import ALL

SUBDOMAIN, DOMAIN, LLM = "subdomain", "domain", "llm"
COUNT_COLUMNS = ("domain", "subdomain", "n", "k")

CDF_COLUMNS = ("level", "domain", "subdomain", "x", "cdf_lower", "cdf_upper")
QUANTILE_COLUMNS = ("level", "domain", "subdomain", "quantile", "lower", "upper", "method")
EXPECTED_COLUMNS = ("level", "domain", "subdomain", "n", "lower", "upper", "method")
TARGET_COLUMNS = ("level", "domain", "subdomain", "n", "r", "lower", "upper", "method")

_ZOOM_POINTS = 64  # per axis, while locating the posterior mass
_TAIL_MASS = 1e-8  # posterior mass each configuration may leave outside the grid, per tail and axis
_ZOOM_ROUNDS = 10
_ZOOM_CHUNK = 32  # configurations per block while zooming
_WEIGHT_FLOOR = 1e-14  # grid points below this weight in every configuration are dropped
_SPAN_SD = 8.0  # CDF grid half-width in posterior standard deviations
_CHUNK_ELEMENTS = 1 << 18  # Monte Carlo and CDF-quadrature work arrays are chunked to this many numbers


# --------------------------------------------------------------------------- input


def validate_counts(counts: pd.DataFrame) -> pd.DataFrame:
    """Check a (domain, subdomain, n, k) table; return it with str labels and int counts, sorted.

    Raises ValueError naming the offending rows for: missing columns, no
    rows, missing labels, non-integer / negative counts, k > n, duplicated
    (domain, subdomain).
    """
    if not isinstance(counts, pd.DataFrame):
        raise ValueError(f"counts must be a DataFrame with columns {COUNT_COLUMNS}, got {type(counts).__name__}")
    missing = [c for c in COUNT_COLUMNS if c not in counts.columns]
    if missing:
        raise ValueError(f"counts lack column(s) {missing}; expected {list(COUNT_COLUMNS)}")
    if counts.empty:
        raise ValueError("counts have no rows: nothing to assess")
    frame = counts[list(COUNT_COLUMNS)].copy()
    for label in ("domain", "subdomain"):
        if frame[label].isna().any():
            rows = frame.index[frame[label].isna()].tolist()
            raise ValueError(f"counts: {label} is missing in row(s) {rows}")
        frame[label] = frame[label].astype(str)
    for col in ("n", "k"):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            raise ValueError(f"counts: {col} must be whole numbers; bad row(s) {frame.index[bad].tolist()}")
        if (values < 0).any():
            raise ValueError(f"counts: {col} must be >= 0 (negative in row(s) {frame.index[values < 0].tolist()})")
        frame[col] = values.astype(np.int64)
    over = frame["k"] > frame["n"]
    if over.any():
        raise ValueError(f"counts: k > n (more successes than trials) in row(s) {frame.index[over].tolist()}")
    dup = frame.duplicated(["domain", "subdomain"], keep=False)
    if dup.any():
        cells = sorted(set(map(tuple, frame.loc[dup, ["domain", "subdomain"]].to_numpy().tolist())))
        raise ValueError(f"counts: (domain, subdomain) repeated: {cells}")
    return frame.sort_values(["domain", "subdomain"], kind="stable").reset_index(drop=True)


def hyperparameter_configurations(box: HyperBox, n_configurations: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """K configurations (rows a, b, c, d) from the box: its distinct corners, then a Latin hypercube.

    Returns (configurations, is_corner). Duplicate rows (degenerate intervals)
    are dropped, so a fully degenerate box yields one configuration.
    """
    corners = box.corners()
    if n_configurations < len(corners):
        raise ValueError(
            f"n_configurations={n_configurations} is fewer than the {len(corners)} distinct corners of the box {box}"
        )
    extra = n_configurations - len(corners)
    bounds = box.bounds()
    strata = np.stack([(rng.permutation(extra) + rng.random(extra)) / max(extra, 1) for _ in range(4)], axis=1)
    interior = bounds[:, 0] + strata * (bounds[:, 1] - bounds[:, 0])
    configs = np.concatenate([corners, interior])
    is_corner = np.arange(len(configs)) < len(corners)
    _, first = np.unique(configs, axis=0, return_index=True)
    keep = np.sort(first)
    return configs[keep], is_corner[keep]


# --------------------------------------------------------------------------- grid


def log_marginal_likelihood(mu: np.ndarray, nu: np.ndarray, successes: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """log Pr(C_i | mu, nu) of Eq. A.8 (Beta-Binomial per subdomain), without the binomial coefficients.

    sum_j log B(C_j + mu nu, N_j - C_j + (1 - mu) nu) - log B(mu nu, (1 - mu) nu),
    written as differences of log-gamma so no Beta function is formed.
    """
    alpha = (mu * nu)[:, None]
    beta = ((1.0 - mu) * nu)[:, None]
    nu_ = nu[:, None]
    c = successes[None, :].astype(float)
    n = trials[None, :].astype(float)
    terms = (
        special.gammaln(alpha + c)
        - special.gammaln(alpha)
        + special.gammaln(beta + (n - c))  # not (beta + n) - c: that rounds a tiny beta away
        - special.gammaln(beta)
        - special.gammaln(nu_ + n)
        + special.gammaln(nu_)
    )
    return terms.sum(axis=1)


def _log_posterior(u: np.ndarray, v: np.ndarray, configs: np.ndarray, successes, trials) -> np.ndarray:
    """Unnormalised log hyper-posterior density in (u = logit mu, v = log nu), K x points."""
    log_mu, log_1m_mu = special.log_expit(u), special.log_expit(-u)
    mu, nu = special.expit(u), np.exp(v)
    shared = log_marginal_likelihood(mu, nu, successes, trials) + log_mu + log_1m_mu + v  # + Jacobian
    features = np.stack([log_mu, log_1m_mu, v, nu])  # Beta(a, b) and Gamma(c, rate d) kernels
    coefficients = np.stack([configs[:, 0] - 1, configs[:, 1] - 1, configs[:, 2] - 1, -configs[:, 3]], axis=1)
    return coefficients @ features + shared[None, :]


@dataclass
class HyperGrid:
    """The (mu, nu) grid of one domain and each configuration's posterior weights on it (Lemma 7)."""

    mu: np.ndarray  # (G,) grid points kept (weight above the floor for some configuration)
    nu: np.ndarray
    weights: np.ndarray  # (K, G) normalised per configuration
    mu_range: tuple[float, float]
    nu_range: tuple[float, float]
    shape: tuple[int, int]


def hyper_posterior_grid(successes, trials, configs: np.ndarray, shape: tuple[int, int]) -> HyperGrid:
    """Grid posterior Pr(mu, nu | C_i, h) for every configuration h (rows of ``configs``).

    Placement (the paper gives only the grid size, 40 x 50): start from
    logit mu in [-20, 20] and log nu spanning the configurations' Gamma
    priors (quantiles 1e-12 and 1 - 1e-12, widened to [1e-6, 1e4]); on a
    64 x 64 grid find, on each axis, the range that leaves at most 1e-8 of
    every configuration's marginal posterior mass out in each tail, widen it
    by one cell, and repeat until the range stops shrinking. The final n_mu x n_nu grid is uniform over that box.
    """
    successes = np.asarray(successes, dtype=float)
    trials = np.asarray(trials, dtype=float)
    shape_c, rate_d = configs[:, 2], configs[:, 3]
    q_low = stats.gamma.ppf(1e-12, shape_c, scale=1.0 / rate_d).min()
    q_high = stats.gamma.ppf(1.0 - 1e-12, shape_c, scale=1.0 / rate_d).max()
    u_range = (-20.0, 20.0)
    v_range = (math.log(min(1e-6, max(q_low, 1e-300))), math.log(max(1e4, q_high)))
    for _ in range(_ZOOM_ROUNDS):
        u = np.linspace(*u_range, _ZOOM_POINTS)
        v = np.linspace(*v_range, _ZOOM_POINTS)
        uu, vv = np.meshgrid(u, v, indexing="ij")
        u_marginals, v_marginals = [], []
        for start in range(0, len(configs), _ZOOM_CHUNK):  # chunked: K x 4096 arrays dominated peak memory
            lp = _log_posterior(uu.ravel(), vv.ravel(), configs[start : start + _ZOOM_CHUNK], successes, trials)
            lp -= lp.max(axis=1, keepdims=True)
            mass = np.exp(lp, out=lp).reshape(-1, len(u), len(v))
            mass /= mass.sum(axis=(1, 2), keepdims=True)
            u_marginals.append(mass.sum(axis=2))
            v_marginals.append(mass.sum(axis=1))
        new_u = _mass_range(u, np.concatenate(u_marginals))
        new_v = _mass_range(v, np.concatenate(v_marginals))
        shrunk = (new_u[1] - new_u[0]) < 0.5 * (u_range[1] - u_range[0]) or (new_v[1] - new_v[0]) < 0.5 * (
            v_range[1] - v_range[0]
        )
        u_range, v_range = new_u, new_v
        if not shrunk:
            break
    n_mu, n_nu = shape
    uu, vv = np.meshgrid(np.linspace(*u_range, n_mu), np.linspace(*v_range, n_nu), indexing="ij")
    u, v = uu.ravel(), vv.ravel()
    weights = _log_posterior(u, v, configs, successes, trials)
    weights -= weights.max(axis=1, keepdims=True)
    np.exp(weights, out=weights)
    weights /= weights.sum(axis=1, keepdims=True)
    kept = weights.max(axis=0) > _WEIGHT_FLOOR
    weights = weights[:, kept]
    weights /= weights.sum(axis=1, keepdims=True)
    return HyperGrid(
        mu=special.expit(u[kept]),
        nu=np.exp(v[kept]),
        weights=weights,
        mu_range=(float(special.expit(u_range[0])), float(special.expit(u_range[1]))),
        nu_range=(float(math.exp(v_range[0])), float(math.exp(v_range[1]))),
        shape=(n_mu, n_nu),
    )


def _mass_range(points: np.ndarray, marginals: np.ndarray) -> tuple[float, float]:
    """Smallest range of ``points`` holding all but _TAIL_MASS of every row's marginal mass, plus one cell."""
    cumulative = np.cumsum(marginals, axis=1)
    first = int(np.argmax(cumulative >= _TAIL_MASS, axis=1).min())
    last = int(np.argmax(cumulative >= 1.0 - _TAIL_MASS, axis=1).max())
    return float(points[max(first - 1, 0)]), float(points[min(last + 1, len(points) - 1)])


# --------------------------------------------------------------------------- moments


def beta_moments(alpha: np.ndarray, beta: np.ndarray, n_max: int) -> np.ndarray:
    """E[theta**k] for theta ~ Beta(alpha, beta), k = 0..n_max: prod_{r<k} (alpha + r) / (alpha + beta + r)."""
    r = np.arange(n_max)
    ratios = (alpha[..., None] + r) / (alpha[..., None] + beta[..., None] + r)
    return np.concatenate([np.ones(alpha.shape + (1,)), np.cumprod(ratios, axis=-1)], axis=-1)


def _inverse_factorials(length: int) -> np.ndarray:
    return np.exp(-special.gammaln(np.arange(length) + 1.0))


def weighted_sum_moments(moments: list[np.ndarray], weights) -> np.ndarray:
    """E[(sum_j w_j X_j)**k], k = 0..L-1, for independent X_j with moment sequences ``moments[j]`` (..., L).

    Binomial convolution done on exponential generating functions
    (E[X**k] w**k / k!); every term is >= 0, so nothing cancels.
    """
    length = moments[0].shape[-1]
    inv_fact = _inverse_factorials(length)
    powers = np.arange(length)
    total = None
    for seq, w in zip(moments, weights):
        egf = seq * (float(w) ** powers) * inv_fact
        if total is None:
            total = egf
            continue
        out = np.empty(np.broadcast_shapes(total.shape, egf.shape))
        for k in range(length):
            out[..., k] = np.sum(total[..., : k + 1] * egf[..., k::-1], axis=-1)
        total = out
    return total / inv_fact


# --------------------------------------------------------------------------- helpers


def _span(moments: np.ndarray) -> tuple[float, float]:
    """CDF grid range from exact first two moments of each configuration (rows of ``moments``)."""
    mean = moments[:, 1]
    sd = np.sqrt(np.clip(moments[:, 2] - mean**2, 0.0, None))
    low = float(np.clip((mean - _SPAN_SD * sd).min(), 0.0, 1.0))
    high = float(np.clip((mean + _SPAN_SD * sd).max(), 0.0, 1.0))
    if high - low < 1e-12:
        low, high = max(0.0, low - 1e-6), min(1.0, high + 1e-6)
    return low, high


def beta_survival(alpha, beta, x) -> np.ndarray:
    """``P(theta > x)`` for ``theta ~ Beta(alpha, beta)`` (broadcast): ``betaincc(alpha, beta, x)``.

    For ``x >= 1/2`` it is computed as ``betainc(beta, alpha, 1 - x)``, the same quantity (``1 - x`` is
    exact there), which scipy evaluates ~10x faster near 1, where the reliability targets' thresholds
    ``r**(1/n)`` lie (measured on a partition's grid: 38 -> 3.8 ms for 1,703 Betas x 6 thresholds,
    relative difference <= 2e-14).
    """
    alpha, beta, x = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (alpha, beta, x)))
    upper = x >= 0.5
    result = np.empty(x.shape)
    result[upper] = special.betainc(beta[upper], alpha[upper], 1.0 - x[upper])
    lower = ~upper
    result[lower] = special.betaincc(alpha[lower], beta[lower], x[lower])
    return result


_CDF_NODES, _CDF_WEIGHTS = np.polynomial.legendre.leggauss(8)  # per interval of a CDF grid
_CDF_MAX_WIDTH_SD = 1.0  # a grid Beta narrower than the grid's widest interval / this is tabulated exactly


def beta_mixture_cdf(weights: np.ndarray, alpha: np.ndarray, beta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``weights @ I_x(alpha, beta)``: mixtures of Beta CDFs on an ascending grid ``x``, (R, T).

    ``weights`` (R, G) mixes the G Betas (``alpha``, ``beta``: (G,)) once per row. The regularized
    incomplete Beta function costs ~0.7 us a value, so tabulating it for every (G, T) pair was ~70% of
    a partition's assessment. Instead each Beta's CDF is anchored exactly (``betainc``) at ``x[0]``
    and integrated from there by 8-point Gauss-Legendre quadrature of its density over each interval
    of ``x``: one density evaluation is a dot product of (alpha - 1, beta - 1, -ln B) with
    (ln x, ln(1 - x), 1) and an exponential. That is analytic inside each interval, so the rule is
    accurate to rounding (tested against ``betainc``: ~1e-14) except where it is not, which is then
    tabulated exactly instead:

    * an interval closer to 0 (or 1) than its own width, where ``x**(alpha - 1)`` (``(1 - x)**(beta -
      1)``) has its branch point: the first interval when ``x[0] < x[1] - x[0]`` (e.g. a grid clipped
      at 0), the last when ``1 - x[-1] < x[-1] - x[-2]``; the CDF is anchored exactly at its far end
      and integration goes on from there. Farther away the nearest singularity lies at least 1.5
      widths from an interval's centre, which bounds the rule's error near 1e-12 of the interval's
      mass;
    * a Beta whose standard deviation is below the widest interval (``_CDF_MAX_WIDTH_SD``): a peak
      narrower than an interval would be under-resolved by 8 nodes, so its whole row is ``betainc``.
    """
    x = np.asarray(x, dtype=float)
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    table = np.empty((alpha.size, x.size))
    if x.size == 1:
        return weights @ special.betainc(alpha[:, None], beta[:, None], x[None, :])
    width = np.diff(x)
    # exact anchors: x[0] and the far end of every interval the rule must not integrate
    near_edge = (x[:-1] < width) | (1.0 - x[1:] < width)
    exact_columns = np.concatenate([[0], 1 + np.flatnonzero(near_edge)])
    total = alpha + beta
    sd = np.sqrt(alpha * beta / (total**2 * (total + 1.0)))
    narrow = sd * _CDF_MAX_WIDTH_SD < width.max()
    exact_rows, smooth = np.flatnonzero(narrow), np.flatnonzero(~narrow)
    if exact_rows.size:
        table[exact_rows] = special.betainc(alpha[exact_rows, None], beta[exact_rows, None], x[None, :])
    if smooth.size:
        a, b = alpha[smooth], beta[smooth]
        half = width / 2
        nodes = ((x[:-1] + x[1:]) / 2)[:, None] + half[:, None] * _CDF_NODES[None, :]  # (T - 1, nodes)
        nodes = np.clip(nodes, np.finfo(float).tiny, 1.0 - np.finfo(float).epsneg).ravel()  # edge intervals' nodes are unused
        coefficients = np.stack([a - 1.0, b - 1.0, -special.betaln(a, b)], axis=1)
        powers = np.stack([np.log(nodes), np.log1p(-nodes), np.ones(nodes.size)])
        pieces = np.empty((smooth.size, x.size - 1))
        rows_per_block = max(1, _CHUNK_ELEMENTS // nodes.size)  # the densities in blocks: memory stays flat in G
        for start in range(0, smooth.size, rows_per_block):
            block = slice(start, start + rows_per_block)
            density = coefficients[block] @ powers
            with np.errstate(over="ignore"):  # only at nodes of edge intervals, which are never summed
                np.exp(density, out=density)
            pieces[block] = (density.reshape(-1, x.size - 1, _CDF_NODES.size) @ _CDF_WEIGHTS) * half
        anchors = special.betainc(a[:, None], b[:, None], x[None, exact_columns])
        bounds = np.append(exact_columns, x.size)
        rows = table[smooth]
        for anchor, start, stop in zip(anchors.T, bounds[:-1], bounds[1:]):
            # from the anchor at ``start``, integrate intervals start+1 .. stop-1
            rows[:, start] = anchor
            rows[:, start + 1:stop] = anchor[:, None] + np.cumsum(pieces[:, start:stop - 1], axis=1)
        table[smooth] = rows
    return weights @ table


def _batched_searchsorted(sorted_rows: np.ndarray, values: np.ndarray, side: str = "right") -> np.ndarray:
    """searchsorted of ``values`` (R, V) or (V,) into each row of ``sorted_rows`` (R, S); all numbers in [0, 1]."""
    rows, width = sorted_rows.shape
    offsets = 2.0 * np.arange(rows)[:, None]
    values = np.broadcast_to(values, (rows, values.shape[-1]))
    idx = np.searchsorted((sorted_rows + offsets).ravel(), (values + offsets).ravel(), side=side)
    return idx.reshape(rows, -1) - width * np.arange(rows)[:, None]


def _invert_cdf(cdf: np.ndarray, x: np.ndarray, quantiles) -> np.ndarray:
    """Quantiles (R, Q) of each row of a CDF tabulated on ``x``, by linear interpolation."""
    q = np.asarray(quantiles, dtype=float)
    cdf = np.maximum.accumulate(np.clip(cdf, 0.0, 1.0), axis=1)
    hi = np.clip(_batched_searchsorted(cdf, q, side="left"), 1, len(x) - 1)
    rows = np.arange(cdf.shape[0])[:, None]
    f0, f1 = cdf[rows, hi - 1], cdf[rows, hi]
    frac = np.where(f1 > f0, (q[None, :] - f0) / np.where(f1 > f0, f1 - f0, 1.0), 0.5)
    return x[hi - 1] + np.clip(frac, 0.0, 1.0) * (x[hi] - x[hi - 1])


def _sorted_quantiles(sorted_draws: np.ndarray, quantiles) -> np.ndarray:
    """Linear-interpolated empirical quantiles (R, Q) of sorted rows (numpy's default method)."""
    s = sorted_draws.shape[1]
    pos = np.asarray(quantiles) * (s - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, s - 1)
    return sorted_draws[:, lo] + (pos - lo) * (sorted_draws[:, hi] - sorted_draws[:, lo])


@dataclass
class _Unit:
    """Per-configuration results of one unit (a subdomain, a domain, or the LLM)."""

    level: str
    domain: str
    subdomain: str
    x: np.ndarray  # (T,)
    cdf: np.ndarray  # (R, T)
    quantiles: np.ndarray  # (R, Q)
    moments: np.ndarray  # (R, L) E[p**k]
    target: np.ndarray  # (R, H) P(p**n >= r)
    method: str  # "exact" or "monte_carlo" for cdf / quantiles / target


@dataclass
class SubdomainEnvelopes:
    """The table rows of one subdomain-level unit (envelopes over the configurations), as
    :func:`assess_reliability` writes them: what an assessment may take over from an earlier one
    of the same domain (same cells, settings and domain seed) instead of recomputing them.

    Per field: ``x``, ``cdf_lower``, ``cdf_upper`` (T,); ``quantile_lower``/``_upper`` (Q,) in
    ``settings.quantiles`` order; ``expected_lower``/``_upper`` and ``target_lower``/``_upper``
    (H,) in ``settings.horizons`` order.
    """

    x: np.ndarray
    cdf_lower: np.ndarray
    cdf_upper: np.ndarray
    quantile_lower: np.ndarray
    quantile_upper: np.ndarray
    expected_lower: np.ndarray
    expected_upper: np.ndarray
    target_lower: np.ndarray
    target_upper: np.ndarray


@dataclass
class _Envelopes:
    """A unit's rows in the tables: :class:`SubdomainEnvelopes` with its labels and method."""

    level: str
    domain: str
    subdomain: str
    method: str
    values: SubdomainEnvelopes


def _envelopes(unit: _Unit, settings) -> _Envelopes:
    horizons = list(settings.horizons)
    return _Envelopes(unit.level, unit.domain, unit.subdomain, unit.method, SubdomainEnvelopes(
        x=unit.x, cdf_lower=unit.cdf.min(axis=0), cdf_upper=unit.cdf.max(axis=0),
        quantile_lower=unit.quantiles.min(axis=0), quantile_upper=unit.quantiles.max(axis=0),
        expected_lower=unit.moments[:, horizons].min(axis=0), expected_upper=unit.moments[:, horizons].max(axis=0),
        target_lower=unit.target.min(axis=0), target_upper=unit.target.max(axis=0)))


@dataclass
class _DomainState:
    name: str
    configs: np.ndarray
    is_corner: np.ndarray
    grid: HyperGrid
    draws: np.ndarray  # (K, S) Monte Carlo draws of p_i
    unit: _Unit


@dataclass
class ReliabilityResult:
    """Tidy outputs of :func:`assess_reliability` (columns documented in ``TABLE_COLUMNS``)."""

    cdf_envelopes: pd.DataFrame
    quantile_envelopes: pd.DataFrame
    expected_reliability: pd.DataFrame
    target_probability: pd.DataFrame
    configurations: pd.DataFrame
    weights: pd.DataFrame
    settings: ReliabilitySettings
    metadata: dict = field(default_factory=dict)
    #: subdomains whose rows were taken over from ``known_subdomains`` (not stored: a rerun that
    #: recomputes them writes the same tables)
    subdomains_taken_over: int = 0

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "cdf_envelopes": self.cdf_envelopes,
            "quantile_envelopes": self.quantile_envelopes,
            "expected_reliability": self.expected_reliability,
            "target_probability": self.target_probability,
            "configurations": self.configurations,
            "weights": self.weights,
        }

    def summary(self) -> pd.DataFrame:
        """One row per unit: 5-95% envelope, median interval and E[R(1)] interval."""
        q = self.quantile_envelopes
        keys = ["level", "domain", "subdomain"]
        q05 = q[np.isclose(q["quantile"], 0.05)].set_index(keys)
        q50 = q[np.isclose(q["quantile"], 0.5)].set_index(keys)
        q95 = q[np.isclose(q["quantile"], 0.95)].set_index(keys)
        e1 = self.expected_reliability[self.expected_reliability["n"] == 1].set_index(keys)
        out = pd.DataFrame(
            {
                "q05_lower": q05["lower"],
                "median_lower": q50["lower"],
                "median_upper": q50["upper"],
                "q95_upper": q95["upper"],
                "mean_lower": e1["lower"],
                "mean_upper": e1["upper"],
            }
        )
        return out.reset_index()


TABLE_COLUMNS = {
    "cdf_envelopes": {
        "level": "subdomain, domain or llm",
        "domain": "domain ((all) at the llm level)",
        "subdomain": "subdomain ((all) above the subdomain level)",
        "x": "value of the non-failure probability (theta_ij, p_i or p_L)",
        "cdf_lower": "min over configurations of Pr(p <= x | data, h)",
        "cdf_upper": "max over configurations of Pr(p <= x | data, h)",
    },
    "quantile_envelopes": {
        "quantile": "probability q of the posterior quantile",
        "lower": "min over configurations of the q-quantile",
        "upper": "max over configurations of the q-quantile",
        "method": "exact (grid mixture of Beta CDFs) or monte_carlo",
    },
    "expected_reliability": {
        "n": "number of future tasks",
        "lower": "min over configurations of E[R(n)] = E[p**n | data, h] (exact moments)",
        "upper": "max over configurations of E[p**n | data, h]",
    },
    "target_probability": {
        "n": "number of future tasks",
        "r": "target reliability",
        "lower": "min over configurations of Pr(p**n >= r | data, h)",
        "upper": "max over configurations of Pr(p**n >= r | data, h)",
    },
}


# --------------------------------------------------------------------------- main


def assess_reliability(counts: pd.DataFrame, settings: ReliabilitySettings | None = None, *,
                       known_subdomains: Mapping[str, Sequence[SubdomainEnvelopes]] | None = None) -> ReliabilityResult:
    """HIP-LLM posterior envelopes at subdomain, domain and LLM level (Theorems 1-6).

    ``counts``: one row per (domain, subdomain) with n trials and k successes.
    Weights come from ``settings.profile`` (default proportional to n).
    Deterministic given ``settings.seed`` (and ``settings.domain_seeds``).

    ``known_subdomains``: per domain, the subdomain rows an earlier assessment of the same
    cells (in (domain, subdomain) order) wrote under the same settings and the same seed for
    the domain (its ``domain_seeds`` entry here, ``seed`` there if it was the only domain).
    They are taken over instead of recomputing the exact subdomain CDFs (most of a domain's
    cost); the output is unchanged. Checked before use: the CDF grids and E[R(n)] envelopes,
    which depend on the data, grid and configurations, must equal this assessment's to the
    last bit, else the domain is computed in full. Ignored for one-subdomain domains (their
    domain level needs the per-configuration arrays).
    """
    settings = settings or ReliabilitySettings()
    frame = settings.profile.resolve(validate_counts(counts))
    n_max = max(max(settings.horizons), 2)
    thresholds = settings.target ** (1.0 / np.array(settings.horizons, dtype=float))
    domains = sorted(frame["domain"].unique())
    rows: list[_Envelopes] = []
    states: list[_DomainState] = []
    taken_over = 0
    for index, domain in enumerate(domains):
        cells = frame[frame["domain"] == domain]
        known = (known_subdomains or {}).get(domain)
        state, sub_rows, used_known = _assess_domain(domain, index, cells, settings, n_max, thresholds, known)
        taken_over += len(sub_rows) if used_known else 0
        rows.extend(sub_rows)
        rows.append(_envelopes(state.unit, settings))
        states.append(state)
    domain_weights = frame.groupby("domain", sort=True)["domain_weight"].first().reindex(domains).to_numpy()
    llm_unit, pairing_info = _assess_llm(states, domain_weights, settings, n_max, thresholds)
    rows.append(_envelopes(llm_unit, settings))
    result = _result(rows, states, frame, settings, pairing_info)
    result.subdomains_taken_over = taken_over
    return result


def _domain_rng(settings: ReliabilitySettings, domain: str, index: int, stream: int) -> np.random.Generator:
    """Stream 0 (configurations) or 1 (draws) of a domain: ``[seed, stream, index]``, or
    ``[domain_seed, stream, 0]`` (what the domain gets when assessed alone under that seed)."""
    if domain in settings.domain_seeds:
        return np.random.default_rng([int(settings.domain_seeds[domain]), stream, 0])
    return np.random.default_rng([settings.seed, stream, index])


def _assess_domain(domain, index, cells, settings, n_max, thresholds,
                   known=None) -> tuple[_DomainState, list[_Envelopes], bool]:
    successes = cells["k"].to_numpy(dtype=float)
    trials = cells["n"].to_numpy(dtype=float)
    omega = cells["omega"].to_numpy(dtype=float)
    subdomains = cells["subdomain"].tolist()
    configs, is_corner = hyperparameter_configurations(
        settings.box_for(domain), settings.n_configurations, _domain_rng(settings, domain, index, 0)
    )
    grid = hyper_posterior_grid(successes, trials, configs, settings.grid_shape)
    w = grid.weights
    alpha = successes[None, :] + (grid.mu * grid.nu)[:, None]  # (G, J) Lemma 7.1 conditional Betas
    beta = (trials - successes)[None, :] + ((1.0 - grid.mu) * grid.nu)[:, None]

    # subdomain level: exact mixtures of Beta distributions
    grid_moments = [beta_moments(alpha[:, j], beta[:, j], n_max) for j in range(len(subdomains))]
    moments = [w @ moments_g for moments_g in grid_moments]
    xs = [np.linspace(*_span(m), settings.cdf_points) for m in moments]
    horizons = list(settings.horizons)
    usable = (known is not None and len(subdomains) > 1 and len(known) == len(subdomains)
              and all(np.array_equal(k.x, x) and np.array_equal(k.expected_lower, m[:, horizons].min(axis=0))
                      and np.array_equal(k.expected_upper, m[:, horizons].max(axis=0))
                      for k, x, m in zip(known, xs, moments)))
    sub_units, sub_rows = [], []
    for j, subdomain in enumerate(subdomains):
        if usable:
            sub_rows.append(_Envelopes(SUBDOMAIN, domain, subdomain, "exact", known[j]))
            continue
        x = xs[j]
        cdf = np.clip(beta_mixture_cdf(w, alpha[:, j], beta[:, j], x), 0.0, 1.0)
        target = w @ beta_survival(alpha[:, j, None], beta[:, j, None], thresholds[None, :])
        quantiles = _invert_cdf(cdf, x, settings.quantiles)
        unit = _Unit(SUBDOMAIN, domain, subdomain, x, cdf, quantiles, moments[j], np.clip(target, 0, 1), "exact")
        sub_units.append(unit)
        sub_rows.append(_envelopes(unit, settings))

    domain_moments = w @ weighted_sum_moments(grid_moments, omega)
    draws = _draw_domain(grid, alpha, beta, omega, settings, _domain_rng(settings, domain, index, 1))
    if len(subdomains) == 1:  # p_i = theta_i1: the exact subdomain results are the domain's
        only = sub_units[0]
        unit = _Unit(DOMAIN, domain, ALL, only.x, only.cdf, only.quantiles, domain_moments, only.target, "exact")
    else:
        unit = _monte_carlo_unit(DOMAIN, domain, ALL, draws, domain_moments, settings, thresholds)
    return _DomainState(domain, configs, is_corner, grid, draws, unit), sub_rows, usable


def _draw_domain(grid: HyperGrid, alpha, beta, omega, settings, rng) -> np.ndarray:
    """S draws of p_i = sum_j Omega_ij theta_ij per configuration (Appendix B steps 1-3), (K, S)."""
    n_configs, n_grid = grid.weights.shape
    s = settings.n_draws
    cumulative = np.cumsum(grid.weights, axis=1)
    cumulative[:, -1] = 1.0
    # stratified uniforms in random order, shared by all configurations of the domain
    uniforms = (rng.permutation(s) + rng.random(s)) / s
    cells = _batched_searchsorted(cumulative, uniforms, side="right")
    cells = np.minimum(cells, n_grid - 1)
    draws = np.empty((n_configs, s), dtype=np.float32)  # Monte Carlo error (~1e-2) >> float32 rounding
    chunk = max(1, _CHUNK_ELEMENTS // (s * alpha.shape[1]))
    for start in range(0, n_configs, chunk):
        idx = cells[start : start + chunk]
        theta = rng.beta(alpha[idx], beta[idx])  # (chunk, S, J)
        draws[start : start + chunk] = theta @ omega
    return draws


def _monte_carlo_unit(level, domain, subdomain, draws, moments, settings, thresholds) -> _Unit:
    x = np.linspace(*_span(moments), settings.cdf_points)
    cdf, quantiles, target = _monte_carlo_stats(draws, x, settings, thresholds)
    return _Unit(level, domain, subdomain, x, cdf, quantiles, moments, target, "monte_carlo")


def _monte_carlo_stats(draws: np.ndarray, x: np.ndarray, settings, thresholds):
    """Empirical CDF on ``x``, quantiles and Pr(p >= r**(1/n)) of each row of ``draws``."""
    ordered = np.sort(draws, axis=1)
    s = ordered.shape[1]
    cdf = _batched_searchsorted(ordered, x, side="right") / s
    target = 1.0 - _batched_searchsorted(ordered, thresholds, side="left") / s  # share of draws >= threshold
    return cdf, _sorted_quantiles(ordered, settings.quantiles), target


def _pairings(states: list[_DomainState], settings: ReliabilitySettings) -> tuple[np.ndarray, bool]:
    """Configuration pairings across domains: all of them, or extremal + random up to the cap."""
    sizes = [len(st.configs) for st in states]
    total = math.prod(sizes)
    if total <= settings.max_pairings:
        grids = np.indices(sizes).reshape(len(sizes), -1).T
        return grids, True
    chosen: dict[tuple, None] = {}
    for n in settings.horizons:
        for pick in (np.argmin, np.argmax):
            chosen[tuple(int(pick(st.unit.moments[:, n])) for st in states)] = None
    for q in range(len(settings.quantiles)):
        for pick in (np.argmin, np.argmax):
            chosen[tuple(int(pick(st.unit.quantiles[:, q])) for st in states)] = None
    rng = np.random.default_rng([settings.seed, 2])
    while len(chosen) < settings.max_pairings:
        for row in rng.integers(0, sizes, size=(settings.max_pairings, len(sizes))):
            chosen[tuple(int(v) for v in row)] = None
            if len(chosen) >= settings.max_pairings:
                break
    return np.array(list(chosen)[: settings.max_pairings]), False


def _assess_llm(states, domain_weights, settings, n_max, thresholds) -> tuple[_Unit, dict]:
    if len(states) == 1:  # p_L = p_1
        u = states[0].unit
        return _Unit(LLM, ALL, ALL, u.x, u.cdf, u.quantiles, u.moments, u.target, u.method), {
            "n_pairings": len(states[0].configs),
            "pairings_exhaustive": True,
        }
    pairs, exhaustive = _pairings(states, settings)
    moments = weighted_sum_moments([st.unit.moments[pairs[:, i]] for i, st in enumerate(states)], domain_weights)
    x = np.linspace(*_span(moments), settings.cdf_points)
    s = settings.n_draws
    n_pairs = len(pairs)
    cdf = np.empty((n_pairs, len(x)))
    target = np.empty((n_pairs, len(thresholds)))
    quantiles = np.empty((n_pairs, len(settings.quantiles)))
    chunk = max(1, _CHUNK_ELEMENTS // s)
    for start in range(0, n_pairs, chunk):
        block = pairs[start : start + chunk]
        draws = np.zeros((len(block), s))
        for i, st in enumerate(states):  # domains independent: pair the i.i.d. streams draw by draw
            draws += domain_weights[i] * st.draws[block[:, i]]
        rows = slice(start, start + len(block))
        cdf[rows], quantiles[rows], target[rows] = _monte_carlo_stats(draws, x, settings, thresholds)
    return _Unit(LLM, ALL, ALL, x, cdf, quantiles, moments, target, "monte_carlo"), {
        "n_pairings": int(n_pairs),
        "pairings_exhaustive": bool(exhaustive),
    }


# --------------------------------------------------------------------------- tables


def _result(rows: list[_Envelopes], states: list[_DomainState], frame, settings, pairing_info) -> ReliabilityResult:
    cdf_parts, q_rows, e_rows, t_rows = [], [], [], []
    for r in rows:
        v = r.values
        t = len(v.x)
        cdf_parts.append(
            pd.DataFrame(
                {
                    "level": [r.level] * t,
                    "domain": [r.domain] * t,
                    "subdomain": [r.subdomain] * t,
                    "x": v.x,
                    "cdf_lower": v.cdf_lower,
                    "cdf_upper": v.cdf_upper,
                }
            )
        )
        for qi, q in enumerate(settings.quantiles):
            q_rows.append((r.level, r.domain, r.subdomain, q, v.quantile_lower[qi], v.quantile_upper[qi], r.method))
        for hi, n in enumerate(settings.horizons):
            e_rows.append((r.level, r.domain, r.subdomain, n, v.expected_lower[hi], v.expected_upper[hi], "exact"))
            t_rows.append((r.level, r.domain, r.subdomain, n, settings.target, v.target_lower[hi], v.target_upper[hi], r.method))
    order = {SUBDOMAIN: 0, DOMAIN: 1, LLM: 2}

    def tidy(df: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
        df = df.assign(_o=df["level"].map(order)).sort_values(["_o", "domain", "subdomain", *extra], kind="stable")
        return df.drop(columns="_o").reset_index(drop=True)

    config_rows = []
    for st in states:
        for k, (a, b, c, d) in enumerate(st.configs):
            config_rows.append(
                (st.name, k, a, b, c, d, bool(st.is_corner[k]), st.unit.moments[k, 1], st.unit.quantiles[k, _median_index(settings)])
            )
    configurations = pd.DataFrame(
        config_rows, columns=["domain", "config", "a", "b", "c", "d", "is_corner", "posterior_mean", "posterior_median"]
    )
    weights = frame[["domain", "subdomain", "n", "k", "omega", "domain_weight", "op"]].reset_index(drop=True)
    metadata = {
        "source": "HIP-LLM (hip-llm-reliability-paper.txt), Theorems 1-6, Appendix B",
        "settings": settings.to_dict(),
        "grids": {
            st.name: {
                "shape": list(st.grid.shape),
                "points_kept": int(st.grid.mu.size),
                "mu_range": list(st.grid.mu_range),
                "nu_range": list(st.grid.nu_range),
                "n_configurations": int(len(st.configs)),
            }
            for st in states
        },
        **pairing_info,
        "monte_carlo_standard_error_max": 0.5 / math.sqrt(settings.n_draws),
        "methods": {
            "subdomain": "exact grid mixtures of Beta distributions (CDF, quantiles, E[R(n)], P(R(n) >= r))",
            "domain": "exact E[R(n)]; CDF, quantiles, P(R(n) >= r) by Monte Carlo unless one subdomain",
            "llm": "exact E[R(n)] per pairing; CDF, quantiles, P(R(n) >= r) by Monte Carlo",
        },
    }
    return ReliabilityResult(
        cdf_envelopes=tidy(pd.concat(cdf_parts, ignore_index=True), ["x"]),
        quantile_envelopes=tidy(pd.DataFrame(q_rows, columns=list(QUANTILE_COLUMNS)), ["quantile"]),
        expected_reliability=tidy(pd.DataFrame(e_rows, columns=list(EXPECTED_COLUMNS)), ["n"]),
        target_probability=tidy(pd.DataFrame(t_rows, columns=list(TARGET_COLUMNS)), ["n"]),
        configurations=configurations,
        weights=weights,
        settings=settings,
        metadata=metadata,
    )


def _median_index(settings: ReliabilitySettings) -> int:
    return int(np.argmin(np.abs(np.array(settings.quantiles) - 0.5)))


def conjugate_envelope(k: int, n: int, a_range: tuple[float, float], b_range: tuple[float, float], horizons=(1,)) -> pd.DataFrame:
    """Non-hierarchical Beta-Binomial with an imprecise Beta(a, b) prior (Table 2, Section 3.1).

    theta | data ~ Beta(a + k, b + n - k); E[theta**h] = B(a + k + h, b + n - k) / B(a + k, b + n - k).
    Beta(a', b') is stochastically increasing in a' and decreasing in b', so
    the envelope over the box is attained at its corners (a_min, b_max) and
    (a_max, b_min).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    rows = []
    for h in horizons:
        def moment(a, b):
            return math.exp(special.betaln(a + k + h, b + n - k) - special.betaln(a + k, b + n - k))

        rows.append((h, moment(a_range[0], b_range[1]), moment(a_range[1], b_range[0])))
    return pd.DataFrame(rows, columns=["n", "lower", "upper"])
