"""HIP-LLM: imprecise hierarchical Beta-Binomial reliability envelopes.

Source: the HIP-LLM paper.

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
  (:func:`beta_mixture_cdf`, within ~1e-12 of ``betainc``). Quantiles invert
  the mixture within the grid interval that brackets them, in log x or
  log(1 - x) near 0 or 1 (:func:`mixture_quantiles`), so they keep that
  accuracy where a posterior piles up within 1e-10 of 0 or 1 (all failures or
  all successes), inside the grid's first or last interval.
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


def hyperparameter_configurations(
    box: HyperBox, n_configurations: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
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
        nodes = np.clip(
            nodes, np.finfo(float).tiny, 1.0 - np.finfo(float).epsneg
        ).ravel()  # edge intervals' nodes are unused
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
            rows[:, start + 1 : stop] = anchor[:, None] + np.cumsum(pieces[:, start : stop - 1], axis=1)
        table[smooth] = rows
    return weights @ table


def _batched_searchsorted(sorted_rows: np.ndarray, values: np.ndarray, side: str = "right") -> np.ndarray:
    """searchsorted of ``values`` (R, V) or (V,) into each row of ``sorted_rows`` (R, S); all numbers in [0, 1]."""
    rows, width = sorted_rows.shape
    offsets = 2.0 * np.arange(rows)[:, None]
    values = np.broadcast_to(values, (rows, values.shape[-1]))
    idx = np.searchsorted((sorted_rows + offsets).ravel(), (values + offsets).ravel(), side=side)
    return idx.reshape(rows, -1) - width * np.arange(rows)[:, None]


_QUANTILE_NODES = 16  # Gauss-Legendre nodes per piece when a CDF cell is inverted
_QUANTILE_TAIL = 1e-13  # a piece is halved while its density's last two Legendre terms exceed this (probability)
_QUANTILE_SPLITS = 30  # rounds of halving at most
_QUANTILE_NEWTON = 12  # safeguarded Newton steps at most on a piece's polynomial CDF
_QUANTILE_STEP = math.log(2.0)  # near 0 or 1, the first piece spans a factor 2 in the distance to that end ...
_QUANTILE_MAX_STEP = 16.0  # ... the next ones the square of the previous factor, up to e**16
_EDGE_DISTANCE = (np.finfo(float).tiny, 2.0**-53)  # quantiles nearer 0 (1) than this are reported as 0 (1)
_LOG_NEGLIGIBLE = -600.0  # densities below e**-600 are set to that: exp (and BLAS) are slow on subnormals


def _legendre_analysis(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and the (n, n) matrix taking values at them to the Legendre coefficients of
    the interpolating polynomial of degree n - 1 (the n-point rule is exact to degree 2n - 1)."""
    nodes, gl_weights = np.polynomial.legendre.leggauss(n)
    vander = np.polynomial.legendre.legvander(nodes, n - 1)
    return nodes, (vander * gl_weights[:, None]).T * ((2 * np.arange(n) + 1) / 2.0)[:, None]


_QUANTILE_X, _QUANTILE_ANALYSIS = _legendre_analysis(_QUANTILE_NODES)


def mixture_quantiles(
    weights: np.ndarray, alpha: np.ndarray, beta: np.ndarray, x: np.ndarray, cdf: np.ndarray, quantiles
) -> np.ndarray:
    """Quantiles (R, Q) of the Beta mixtures ``weights @ Beta(alpha, beta)`` (``weights`` (R, G)) whose
    CDFs ``cdf`` (R, T) are tabulated on the ascending grid ``x`` (:func:`beta_mixture_cdf`).

    The table brackets each quantile in a cell of ``x`` (extended by 0 and 1, where the CDF is 0 and 1).
    Within the cell the CDF is the table's value at one end plus the integral of the mixture density,
    which is interpolated on pieces of the cell by polynomials of degree 15 (16 Gauss-Legendre nodes
    each), and the polynomial CDF is solved by safeguarded Newton steps. A piece is halved until, for
    every row with a quantile in its cell, the last two Legendre coefficients of its density are below
    1e-13, so the CDF is resolved to about the table's own accuracy (~1e-12) whether the density is
    smooth or peaked.

    A cell nearer 0 (1) than its own width is cut in log x (log(1 - x)), where a Beta density behaves
    like a power of the distance to that end, into pieces spanning a factor 2 in that distance at first.
    This resolves quantiles at any distance from 0 or 1, which linear interpolation in the table's edge
    cell cannot: with all successes a posterior can hold most of its mass within 1e-10 of 1, and its
    quantiles lie there. A cell that reaches 0 (1) is resolved down to a distance of 2.2e-308 (2**-53,
    the spacing of doubles below 1) from it; a quantile nearer than that is reported as 0 (1).
    """
    q = np.asarray(quantiles, dtype=float)
    cdf = np.maximum.accumulate(np.clip(cdf, 0.0, 1.0), axis=1)
    n_rows = cdf.shape[0]
    xe, fe = np.asarray(x, dtype=float), cdf
    if xe[0] > 0.0:
        xe, fe = np.concatenate([[0.0], xe]), np.concatenate([np.zeros((n_rows, 1)), fe], axis=1)
    if xe[-1] < 1.0:
        xe, fe = np.concatenate([xe, [1.0]]), np.concatenate([fe, np.ones((n_rows, 1))], axis=1)
    cells = np.minimum(_batched_searchsorted(fe, q, side="left") - 1, xe.size - 2)  # fe[cell] < q <= fe[cell + 1]
    width = np.diff(xe)
    if ((xe[:-1] < width) & (1.0 - xe[1:] < width))[cells].any():  # a cell near both ends: cut it at 1/2
        at = int(np.searchsorted(xe, 0.5))
        xe, fe = np.insert(xe, at, 0.5), np.insert(fe, at, weights @ special.betainc(alpha, beta, 0.5), axis=1)
        cells = np.minimum(_batched_searchsorted(fe, q, side="left") - 1, xe.size - 2)
    used = np.unique(cells)
    initial = [_initial_pieces(xe[c], xe[c + 1]) for c in used]
    cell_of = np.repeat(used, [len(p[1]) for p in initial])
    side = np.repeat([p[0] for p in initial], [len(p[1]) for p in initial])
    ua, ub = np.concatenate([p[1] for p in initial]), np.concatenate([p[2] for p in initial])
    has_pair = np.zeros((n_rows, xe.size - 1), dtype=bool)
    has_pair[np.arange(n_rows)[:, None], cells] = True
    coef = _piece_coefficients(weights, alpha, beta, cell_of, side, ua, ub, has_pair)
    for _ in range(_QUANTILE_SPLITS):
        tail = np.abs(coef[:, :, -1]) + np.abs(coef[:, :, -2])
        split = ((tail > _QUANTILE_TAIL) & has_pair[:, cell_of]).any(axis=0)
        if not split.any():
            break
        k, mid = int(split.sum()), (ua[split] + ub[split]) / 2
        halves = _piece_coefficients(
            weights,
            alpha,
            beta,
            np.tile(cell_of[split], 2),
            np.tile(side[split], 2),
            np.concatenate([ua[split], mid]),
            np.concatenate([mid, ub[split]]),
            has_pair,
        )
        # each split piece is replaced by its left and right halves, so pieces stay in x order
        origin = np.concatenate([np.flatnonzero(~split), np.flatnonzero(split), np.flatnonzero(split)])
        order = np.lexsort((np.arange(origin.size) >= origin.size - k, origin))
        cell_of = np.concatenate([cell_of[~split], cell_of[split], cell_of[split]])[order]
        side = np.concatenate([side[~split], side[split], side[split]])[order]
        ua = np.concatenate([ua[~split], ua[split], mid])[order]
        ub = np.concatenate([ub[~split], mid, ub[split]])[order]
        coef = np.concatenate([coef[:, ~split], halves], axis=1)[:, order]
    mass = 2.0 * coef[:, :, 0]  # (R, pieces): twice the constant term
    # the CDF at each piece's left end: from the table at the cell's left end, or at its right end when
    # the cell reaches 0 (the mass nearer 0 than the first piece is then the table's)
    first = np.searchsorted(cell_of, used, side="left")
    last = np.searchsorted(cell_of, used, side="right")
    start = fe[:, cell_of].copy()  # right for a cell of one piece not at 0
    for c, i, j in zip(used, first, last):
        if j - i > 1 or xe[c] == 0.0:
            before = np.cumsum(mass[:, i:j], axis=1) - mass[:, i:j]
            anchor = fe[:, c, None] if xe[c] > 0.0 else fe[:, c + 1, None] - mass[:, i:j].sum(axis=1, keepdims=True)
            start[:, i:j] = anchor + before
    rows, cols = (index.ravel() for index in np.indices(cells.shape))
    pair_cell, target = cells.ravel(), q[cols]
    lo, hi = first[np.searchsorted(used, pair_cell)], last[np.searchsorted(used, pair_cell)]
    index = np.arange(cell_of.size)
    below = (index >= lo[:, None]) & (index < hi[:, None]) & (start[rows] + mass[rows] < target[:, None])
    piece = np.minimum(lo + below.sum(axis=1), hi - 1)
    density = coef[rows, piece]
    integral = np.polynomial.legendre.legint(density.T, lbnd=-1).T  # (P, n + 1): the CDF minus its start
    t = _solve_polynomial_cdf(integral, density, target - start[rows, piece])
    u = ua[piece] + (t + 1.0) / 2.0 * (ub[piece] - ua[piece])
    out = np.where(side[piece] == 0, np.exp(u), np.where(side[piece] == 1, -np.expm1(u), u))
    out = np.clip(out, xe[pair_cell], xe[pair_cell + 1])
    # beyond the pieces: mass nearer 0 (1) than _EDGE_DISTANCE, or a table a rounding error above their sum
    nearer_zero = (xe[pair_cell] == 0.0) & (target <= start[rows, lo])
    out[nearer_zero] = 0.0
    beyond = (start[rows, hi - 1] + mass[rows, hi - 1] < target) & ~nearer_zero
    out[beyond] = xe[pair_cell[beyond] + 1]
    return out.reshape(cells.shape)


def _initial_pieces(low: float, high: float) -> tuple[int, np.ndarray, np.ndarray]:
    """A cell [low, high] cut into pieces: (side, starts, ends) in x order, in the variable of ``side``:
    -1: x (one piece); 0: log x; 1: log(1 - x) (decreasing in x). Near an end the first piece spans a
    factor of 2 in the distance to it and each next one the square of the previous factor, up to e**16."""
    width = high - low
    if low < width:
        side, near, far = 0, low, high
    elif 1.0 - high < width:
        side, near, far = 1, 1.0 - high, 1.0 - low
    else:
        return -1, np.array([low]), np.array([high])
    bottom = math.log(near if near > 0.0 else _EDGE_DISTANCE[side])
    points, step = [math.log(far)], _QUANTILE_STEP
    while points[-1] - step > bottom:
        points.append(points[-1] - step)
        step = min(2.0 * step, _QUANTILE_MAX_STEP)
    bounds = np.array(points + [bottom])
    if side == 0:  # x order is increasing log x
        bounds = bounds[::-1]
    return side, bounds[:-1], bounds[1:]


def _piece_coefficients(weights, alpha, beta, cell_of, side, ua, ub, has_pair) -> np.ndarray:
    """Legendre coefficients (R, pieces, n) of the mixtures' densities on each piece [ua, ub], in its
    variable t in [-1, 1] (Jacobian included: a piece's mass is twice coefficient 0); computed for the
    rows with a quantile in the piece's cell (``has_pair`` (R, cells)), zero for the others."""
    n = _QUANTILE_NODES
    out = np.zeros((weights.shape[0], ua.size, n))
    u = ua[:, None] + (_QUANTILE_X[None, :] + 1.0) / 2.0 * (ub - ua)[:, None]  # (pieces, n)
    log_x, log_1mx = np.empty(u.shape), np.empty(u.shape)
    lin, low, high = side == -1, side == 0, side == 1
    log_x[lin], log_1mx[lin] = np.log(u[lin]), np.log1p(-u[lin])
    log_x[low], log_1mx[low] = u[low], np.log1p(-np.exp(u[low]))
    log_x[high], log_1mx[high] = np.log1p(-np.exp(u[high])), u[high]
    # dx = (ub - ua) / 2 dt, times x (side 0) or 1 - x (side 1) when u is log x or log(1 - x)
    log_jacobian = np.log(np.abs(ub - ua) / 2.0)[:, None] + np.where(lin[:, None], 0.0, u)
    coefficients = np.stack([alpha - 1.0, beta - 1.0, -special.betaln(alpha, beta), np.ones(alpha.size)], axis=1)
    powers = np.stack([log_x, log_1mx, np.ones(u.shape), log_jacobian], axis=-1)  # (pieces, n, 4)
    order = np.argsort(cell_of, kind="stable")
    per_block = max(1, _CHUNK_ELEMENTS // (alpha.size * n))  # pieces per block: memory stays flat in G
    for begin in range(0, order.size, per_block):
        block = order[begin : begin + per_block]
        density = powers[block].reshape(-1, 4) @ coefficients.T  # (pieces * n, G)
        np.maximum(density, _LOG_NEGLIGIBLE, out=density)
        np.exp(density, out=density)
        block_cells, starts, counts = np.unique(cell_of[block], return_index=True, return_counts=True)
        for cell, i, m in zip(block_cells, starts, counts):  # block is sorted by cell
            rows = np.flatnonzero(has_pair[:, cell])
            mixed = weights[rows] @ density[i * n : (i + m) * n].T
            out[rows[:, None], block[None, i : i + m]] = mixed.reshape(rows.size, m, n) @ _QUANTILE_ANALYSIS.T
    return out


def _solve_polynomial_cdf(integral: np.ndarray, density: np.ndarray, y: np.ndarray) -> np.ndarray:
    """t in [-1, 1] where the polynomial with Legendre coefficients ``integral`` (P, n + 1) equals y, its
    derivative having coefficients ``density`` (P, n): bracketed on 33 points, then safeguarded Newton."""
    n = density.shape[1]
    grid = np.linspace(-1.0, 1.0, 33)
    values = np.maximum.accumulate(integral @ np.polynomial.legendre.legvander(grid, n).T, axis=1)
    j = np.clip((values < y[:, None]).sum(axis=1), 1, grid.size - 1)
    lo, hi = grid[j - 1], grid[j]
    f_lo, f_hi = values[np.arange(j.size), j - 1], values[np.arange(j.size), j]
    t = lo + np.clip((y - f_lo) / np.where(f_hi > f_lo, f_hi - f_lo, 1.0), 0.0, 1.0) * (hi - lo)
    for _ in range(_QUANTILE_NEWTON):
        basis = np.polynomial.legendre.legvander(t, n)
        gap = (basis * integral).sum(axis=1) - y
        lo, hi = np.where(gap < 0, t, lo), np.where(gap < 0, hi, t)
        slope = (basis[:, :n] * density).sum(axis=1)
        step = t - gap / np.where(slope > 0, slope, np.inf)
        newton = (slope > 0) & (step >= lo) & (step <= hi)
        t, previous = np.where(newton, step, (lo + hi) / 2), t
        if np.all(np.abs(t - previous) <= 4 * np.finfo(float).eps):
            break
    return t


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
    return _Envelopes(
        unit.level,
        unit.domain,
        unit.subdomain,
        unit.method,
        SubdomainEnvelopes(
            x=unit.x,
            cdf_lower=unit.cdf.min(axis=0),
            cdf_upper=unit.cdf.max(axis=0),
            quantile_lower=unit.quantiles.min(axis=0),
            quantile_upper=unit.quantiles.max(axis=0),
            expected_lower=unit.moments[:, horizons].min(axis=0),
            expected_upper=unit.moments[:, horizons].max(axis=0),
            target_lower=unit.target.min(axis=0),
            target_upper=unit.target.max(axis=0),
        ),
    )


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


def assess_reliability(
    counts: pd.DataFrame,
    settings: ReliabilitySettings | None = None,
    *,
    known_subdomains: Mapping[str, Sequence[SubdomainEnvelopes]] | None = None,
) -> ReliabilityResult:
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


def _assess_domain(
    domain, index, cells, settings, n_max, thresholds, known=None
) -> tuple[_DomainState, list[_Envelopes], bool]:
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
    usable = (
        known is not None
        and len(subdomains) > 1
        and len(known) == len(subdomains)
        and all(
            np.array_equal(k.x, x)
            and np.array_equal(k.expected_lower, m[:, horizons].min(axis=0))
            and np.array_equal(k.expected_upper, m[:, horizons].max(axis=0))
            for k, x, m in zip(known, xs, moments)
        )
    )
    sub_units, sub_rows = [], []
    for j, subdomain in enumerate(subdomains):
        if usable:
            sub_rows.append(_Envelopes(SUBDOMAIN, domain, subdomain, "exact", known[j]))
            continue
        x = xs[j]
        cdf = np.clip(beta_mixture_cdf(w, alpha[:, j], beta[:, j], x), 0.0, 1.0)
        target = w @ beta_survival(alpha[:, j, None], beta[:, j, None], thresholds[None, :])
        quantiles = mixture_quantiles(w, alpha[:, j], beta[:, j], x, cdf, settings.quantiles)
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
            t_rows.append(
                (r.level, r.domain, r.subdomain, n, settings.target, v.target_lower[hi], v.target_upper[hi], r.method)
            )
    order = {SUBDOMAIN: 0, DOMAIN: 1, LLM: 2}

    def tidy(df: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
        df = df.assign(_o=df["level"].map(order)).sort_values(["_o", "domain", "subdomain", *extra], kind="stable")
        return df.drop(columns="_o").reset_index(drop=True)

    config_rows = []
    for st in states:
        for k, (a, b, c, d) in enumerate(st.configs):
            config_rows.append(
                (
                    st.name,
                    k,
                    a,
                    b,
                    c,
                    d,
                    bool(st.is_corner[k]),
                    st.unit.moments[k, 1],
                    st.unit.quantiles[k, _median_index(settings)],
                )
            )
    configurations = pd.DataFrame(
        config_rows, columns=["domain", "config", "a", "b", "c", "d", "is_corner", "posterior_mean", "posterior_median"]
    )
    weights = frame[["domain", "subdomain", "n", "k", "omega", "domain_weight", "op"]].reset_index(drop=True)
    metadata = {
        "source": "HIP-LLM (Aghazadeh-Chakherlou et al., 2026), Theorems 1-6, Appendix B",
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


def conjugate_envelope(
    k: int, n: int, a_range: tuple[float, float], b_range: tuple[float, float], horizons=(1,)
) -> pd.DataFrame:
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
