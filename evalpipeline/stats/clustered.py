"""Clustered questions: Miller's clustered SE, the clustered Beta-Binomial posterior, design effect.

Sources:

* the position paper (Bowyer et al.) Section 3.2: the clustered standard error
  (Miller 2024, Sec. 2.2) and the generative model Eq. 8
  (``d ~ Gamma(1, 1)``, ``theta ~ Beta(1, 1)``,
  ``theta_t ~ Beta(d theta, d (1 - theta))``, ``y ~ Bernoulli(theta_t)``),
  integrated to ``Y_t ~ BetaBin(N_t, d theta, d (1 - theta))`` (Eq. 65).
* the measurement post "How many questions do you actually
  have?" (design effect = clustered posterior variance / naive posterior
  variance, effective n = n / design effect, priors Beta(2, 2) on the
  overall accuracy and Gamma(2, rate 0.1) on the concentration) and its
  appendix "Clustering cross-check" (Kish: ``1 + (m - 1) ICC`` with
  ``ICC = 1 / (1 + concentration)``).

Choice: the paper samples the posterior by importance sampling from the
prior (Appendix E.1); here the same posterior is computed by deterministic
quadrature on a (theta, log d) grid, refined around the posterior mass.
It is reproducible without a seed and does not degrade when the posterior
is much narrower than the prior (where prior-proposal importance sampling
loses most of its effective samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special, stats

from evalpipeline.stats.conventional import beta_equal_tailed_interval
from evalpipeline.stats.intervals import beta_posterior


def _check_scores_clusters(scores, clusters) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float).ravel()
    clusters = np.asarray(clusters).ravel()
    if scores.size == 0:
        raise ValueError("no scores given")
    if scores.size != clusters.size:
        raise ValueError(f"scores and clusters differ in length ({scores.size} vs {clusters.size})")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; drop unscored attempts first")
    if pd.isna(pd.Series(clusters)).any():
        raise ValueError("cluster labels contain missing values; give every score a cluster (its item id, say)")
    return scores, clusters


def clustered_standard_error(scores, clusters) -> tuple[float, float]:
    """Miller's clustered standard error of the mean (position paper Section 3.2).

    ``SE^2 = SE_CLT^2 + (1/N^2) sum_t sum_i sum_{j != i} (y_it - ybar)(y_jt - ybar)``,
    which equals ``(1/N^2) sum_t (sum_i (y_it - ybar))^2``. ``SE_CLT^2`` is
    ``sum (y - ybar)^2 / N^2`` -- Eq. 5 for 0/1 scores; for graded scores
    this is the divide-by-N variance, so that clusters of one score each
    reproduce the naive SE exactly. Returns ``(mean, se)``.
    """
    scores, clusters = _check_scores_clusters(scores, clusters)
    n = scores.size
    mean = float(scores.mean())
    residual_sums = pd.Series(scores - mean).groupby(clusters, sort=False).sum().to_numpy()
    return mean, float(math.sqrt(np.sum(residual_sums**2)) / n)


def naive_standard_error(scores) -> float:
    """``sqrt(sum (y - ybar)^2) / N`` -- Eq. 5 for 0/1 scores (no clustering)."""
    scores = np.asarray(scores, dtype=float).ravel()
    return float(math.sqrt(np.sum((scores - scores.mean()) ** 2)) / scores.size)


def clustered_clt_interval(scores, clusters, level: float = 0.95) -> tuple[float, float, float]:
    """``mean +- z * SE_clustered`` (not clipped). Returns (mean, low, high)."""
    mean, se = clustered_standard_error(scores, clusters)
    z = float(stats.norm.ppf(0.5 + level / 2))
    return mean, mean - z * se, mean + z * se


def icc_from_concentration(concentration: float) -> float:
    """Within-cluster correlation of Eq. 8: ``1 / (1 + d)`` (the post's appendix)."""
    if concentration <= 0:
        raise ValueError(f"concentration must be positive, got {concentration}")
    return 1.0 / (1.0 + concentration)


def kish_design_effect(cluster_size: float, icc: float) -> float:
    """Kish (1965) cluster-sampling design effect ``1 + (m - 1) ICC``."""
    if cluster_size < 1:
        raise ValueError(f"cluster size must be at least 1, got {cluster_size}")
    if not -1 <= icc <= 1:
        raise ValueError(f"ICC must be in [-1, 1], got {icc}")
    return 1.0 + (cluster_size - 1) * icc


def effective_sample_size(n: float, design_effect: float) -> float:
    """Variance-equivalent number of independent questions: ``n / design effect``."""
    if design_effect <= 0:
        raise ValueError(f"design effect must be positive, got {design_effect}")
    return n / design_effect


def empirical_design_effect(scores, clusters) -> float:
    """Miller's clustered variance over the naive variance (``(SE_clustered / SE_naive)^2``)."""
    _, se_clustered = clustered_standard_error(scores, clusters)
    se_naive = naive_standard_error(scores)
    if se_naive == 0:
        return math.nan
    return (se_clustered / se_naive) ** 2


@dataclass(frozen=True)
class ClusteredPosterior:
    """Posterior of the overall success rate ``theta`` under Eq. 8, on a grid.

    ``theta_grid`` and ``theta_mass`` give the marginal posterior of theta (masses sum to 1), each point's
    mass spread over its cell, whose bounds are ``theta_edges`` (one more than the points; the grid is
    even in logit(theta), so cells narrow towards 0 and 1); ``concentration_mean`` is the posterior mean of d.
    """

    theta_grid: np.ndarray
    theta_mass: np.ndarray
    theta_edges: np.ndarray
    concentration_mean: float
    mean_prior: tuple[float, float]
    concentration_prior: tuple[float, float]

    @property
    def mean(self) -> float:
        return float(np.sum(self.theta_grid * self.theta_mass))

    @property
    def sd(self) -> float:
        return float(math.sqrt(np.sum((self.theta_grid - self.mean) ** 2 * self.theta_mass)))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Equal-tailed credible interval (the percentiles of the paper's Snippet 4)."""
        tail = (1 - level) / 2
        cdf = np.concatenate([[0.0], np.cumsum(self.theta_mass)])
        low, high = np.interp([tail, 1 - tail], cdf / cdf[-1], self.theta_edges)
        return float(low), float(high)

    def sample(self, size: int, seed: int = 0) -> np.ndarray:
        """Draws of theta (a cell by its mass, then uniform within the cell on the logit scale)."""
        rng = np.random.default_rng(seed)
        index = rng.choice(self.theta_grid.size, size=size, p=self.theta_mass)
        low, high = special.logit(self.theta_edges[index]), special.logit(self.theta_edges[index + 1])
        return special.expit(low + rng.random(size) * (high - low))


def _unit_patterns(successes: np.ndarray, trials: np.ndarray) -> pd.DataFrame:
    """Distinct (successes, trials) of the units with their counts: units alike share a likelihood term."""
    return pd.DataFrame({"y": successes, "n": trials}).value_counts(sort=False).reset_index(name="count")


def clustered_beta_binomial_posterior(
    successes,
    trials,
    *,
    mean_prior: tuple[float, float] = (1.0, 1.0),
    concentration_prior: tuple[float, float] = (1.0, 1.0),
    grid_size: tuple[int, int] = (160, 64),
) -> ClusteredPosterior:
    """Posterior of the overall accuracy under the clustered model Eq. 8 (position paper Section 3.2).

    ``successes[t]`` of ``trials[t]`` attempts right in unit t (a cluster of questions, or a question with
    its repeats; fractional successes read quasi-binomially): ``y_t ~ BetaBin(n_t, d theta, d (1 - theta))``.
    Priors: ``theta ~ Beta(*mean_prior)``, ``d ~ Gamma(shape, rate)`` with ``concentration_prior =
    (shape, rate)``. Defaults are the paper's Beta(1, 1) and Gamma(1, 1); the post uses Beta(2, 2) and
    Gamma(2, 0.1).

    Computed by quadrature: a grid even in logit(theta) (a coarse pass over (-20, 20) locates the mass, a
    second grid covers it), times a grid even in log d spanning the prior's 1e-6..1 - 1e-6 quantiles; the
    likelihood in log-gamma functions, which stay finite for any d > 0 and theta in (0, 1).
    """
    successes = np.asarray(successes, dtype=float).ravel()
    trials = np.asarray(trials, dtype=float).ravel()
    if successes.size == 0 or successes.size != trials.size:
        raise ValueError("need one (successes, trials) pair per cluster, and at least one cluster")
    if np.any(trials <= 0) or np.any(successes < 0) or np.any(successes > trials):
        raise ValueError("need 0 <= successes <= trials and trials > 0 in every cluster")
    a, b = mean_prior
    shape, rate = concentration_prior
    if min(a, b, shape, rate) <= 0:
        raise ValueError(
            f"prior parameters must be positive, got mean_prior={mean_prior}, concentration_prior={concentration_prior}"
        )
    n_theta, n_conc = grid_size
    gamma = stats.gamma(shape, scale=1 / rate)
    log_conc = np.linspace(math.log(gamma.ppf(1e-6)), math.log(gamma.ppf(1 - 1e-6)), n_conc)
    concentration = np.exp(log_conc)
    log_conc_prior = gamma.logpdf(concentration) + log_conc  # density of log d
    patterns = _unit_patterns(successes, trials)
    conc_terms = special.gammaln(concentration)
    trial_terms = {n: special.gammaln(concentration + n) for n in patterns["n"].unique()}

    def posterior_on(logit_theta):
        # theta ~ Beta(a, b) on the logit scale: theta^a (1 - theta)^b (the Jacobian is theta (1 - theta))
        theta, other = special.expit(logit_theta)[:, None], special.expit(-logit_theta)[:, None]
        alpha, beta = concentration * theta, concentration * other
        base = conc_terms - special.gammaln(alpha) - special.gammaln(beta)
        log_post = (a * np.log(theta) + b * np.log(other)) + log_conc_prior
        for y, n, count in patterns.itertuples(index=False):
            log_post = log_post + count * (
                base + special.gammaln(alpha + y) + special.gammaln(beta + n - y) - trial_terms[n]
            )
        return np.exp(log_post - log_post.max())

    coarse = np.linspace(-20.0, 20.0, 241)
    coarse_mass = posterior_on(coarse).sum(axis=1)
    support = np.nonzero(coarse_mass > coarse_mass.max() * 1e-12)[0]
    step = coarse[1] - coarse[0]
    logit_theta = np.linspace(coarse[support[0]] - step, coarse[support[-1]] + step, n_theta)
    joint = posterior_on(logit_theta)
    joint /= joint.sum()
    half = (logit_theta[1] - logit_theta[0]) / 2
    return ClusteredPosterior(
        theta_grid=special.expit(logit_theta),
        theta_mass=joint.sum(axis=1),
        theta_edges=special.expit(np.concatenate([logit_theta - half, [logit_theta[-1] + half]])),
        concentration_mean=float(np.sum(joint.sum(axis=0) * concentration)),
        mean_prior=(float(a), float(b)),
        concentration_prior=(float(shape), float(rate)),
    )


CLUSTERED_COLUMNS = {
    "method": "naive_beta (every score independent), clustered_beta_binomial (Eq. 8), clt (naive), clustered_clt (Miller)",
    "estimate": "posterior mean (Bayesian rows) or observed mean",
    "low": "interval lower bound (equal-tailed for the Bayesian rows; unclipped for the CLT rows)",
    "high": "interval upper bound",
    "width": "high - low",
    "sd": "posterior SD (Bayesian rows) or standard error (CLT rows)",
    "design_effect": "variance of this row over the variance of its naive counterpart (1 for the naive rows)",
    "effective_n": "n / design_effect",
    "n": "scores counted",
    "n_clusters": "distinct clusters",
    "level": "interval probability / confidence level",
    "prior": "priors of the Bayesian rows, written out",
}


def clustered_summary(
    scores,
    clusters,
    *,
    level: float = 0.95,
    mean_prior: tuple[float, float] = (1.0, 1.0),
    concentration_prior: tuple[float, float] = (1.0, 1.0),
) -> pd.DataFrame:
    """Naive and clustered readings of one success rate side by side (columns: ``CLUSTERED_COLUMNS``).

    The Bayesian design effect is the post's: clustered posterior variance
    over the naive Beta posterior variance (same prior on the mean).
    """
    scores, clusters = _check_scores_clusters(scores, clusters)
    n = scores.size
    groups = pd.DataFrame({"y": scores, "c": clusters}).groupby("c", sort=False)["y"]
    successes, trials = groups.sum().to_numpy(), groups.size().to_numpy()
    a, b = beta_posterior(float(scores.sum()), n, mean_prior)
    naive_sd = float(stats.beta(a, b).std())
    naive_low, naive_high = (float(x) for x in beta_equal_tailed_interval(a, b, level))
    posterior = clustered_beta_binomial_posterior(
        successes, trials, mean_prior=mean_prior, concentration_prior=concentration_prior
    )
    clustered_low, clustered_high = posterior.interval(level)
    bayes_deff = (posterior.sd / naive_sd) ** 2
    z = float(stats.norm.ppf(0.5 + level / 2))
    mean, se_clustered = clustered_standard_error(scores, clusters)
    se_naive = naive_standard_error(scores)
    clt_deff = (se_clustered / se_naive) ** 2 if se_naive > 0 else math.nan
    prior_text = f"theta ~ Beta{tuple(mean_prior)}"
    rows = [
        ("naive_beta", a / (a + b), naive_low, naive_high, naive_sd, 1.0, prior_text),
        (
            "clustered_beta_binomial",
            posterior.mean,
            clustered_low,
            clustered_high,
            posterior.sd,
            bayes_deff,
            f"{prior_text}, concentration ~ Gamma(shape={concentration_prior[0]}, rate={concentration_prior[1]})",
        ),
        ("clt", mean, mean - z * se_naive, mean + z * se_naive, se_naive, 1.0, None),
        ("clustered_clt", mean, mean - z * se_clustered, mean + z * se_clustered, se_clustered, clt_deff, None),
    ]
    frame = pd.DataFrame(
        [
            {
                "method": m,
                "estimate": float(e),
                "low": float(lo),
                "high": float(hi),
                "width": float(hi - lo),
                "sd": float(sd),
                "design_effect": float(deff),
                "effective_n": n / deff if deff and deff > 0 else math.nan,
                "n": n,
                "n_clusters": int(trials.size),
                "level": level,
                "prior": prior,
            }
            for m, e, lo, hi, sd, deff, prior in rows
        ],
        columns=list(CLUSTERED_COLUMNS),
    )
    return frame
