import numpy as np
import pytest
from scipy import stats

from evalpipeline.stats.clustered import (
    CLUSTERED_COLUMNS,
    clustered_beta_binomial_posterior,
    clustered_standard_error,
    clustered_summary,
    effective_sample_size,
    empirical_design_effect,
    icc_from_concentration,
    kish_design_effect,
    naive_standard_error,
)


def test_singleton_clusters_give_the_naive_eq5_standard_error():
    scores = np.array([1, 0, 1, 1, 0, 1, 1])
    mean, se = clustered_standard_error(scores, np.arange(7))
    p = scores.mean()
    assert se == pytest.approx(np.sqrt(p * (1 - p) / 7))
    assert se == pytest.approx(naive_standard_error(scores))


def test_clustered_se_is_millers_triple_sum():
    rng = np.random.default_rng(1)
    scores = rng.random(40).round(1)
    clusters = rng.integers(0, 7, 40)
    ybar = scores.mean()
    naive_sq = np.sum((scores - ybar) ** 2) / 40**2
    cross = 0.0
    for c in np.unique(clusters):
        r = scores[clusters == c] - ybar
        cross += np.sum(np.outer(r, r)) - np.sum(r**2)
    assert clustered_standard_error(scores, clusters)[1] == pytest.approx(np.sqrt(naive_sq + cross / 40**2))


def test_perfectly_correlated_clusters_multiply_the_variance_by_their_size():
    base = np.array([1, 0, 0, 1, 1])
    scores, clusters = np.repeat(base, 4), np.repeat(np.arange(5), 4)
    assert empirical_design_effect(scores, clusters) == pytest.approx(4.0)


def test_kish_cross_check_from_the_post_appendix():
    icc = icc_from_concentration(2.0)
    assert icc == pytest.approx(1 / 3)
    deff = kish_design_effect(6, icc)
    assert deff == pytest.approx(2.67, abs=0.005)
    assert effective_sample_size(300, deff) == pytest.approx(112.5)
    with pytest.raises(ValueError):
        kish_design_effect(0, 0.1)


def test_miller_design_effect_recovers_kish_on_planted_clusters():
    rng = np.random.default_rng(4)
    effects = []
    for _ in range(60):
        theta_t = rng.beta(0.6 * 2, 0.4 * 2, size=400)
        passes = rng.binomial(1, np.repeat(theta_t, 6))
        effects.append(empirical_design_effect(passes, np.repeat(np.arange(400), 6)))
    assert np.mean(effects) == pytest.approx(kish_design_effect(6, 1 / 3), abs=0.1)


def test_post_clustering_example_is_reproduced():
    # The post's data-generating code (numpy, seed 202) and its priors: Beta(2, 2), Gamma(2, rate 0.1).
    rng = np.random.default_rng(202)
    record_acc = rng.beta(0.74 * 2.0, 0.26 * 2.0, size=50)
    passes = rng.binomial(6, record_acc)
    scores = np.concatenate([[1] * p + [0] * (6 - p) for p in passes])
    table = clustered_summary(scores, np.repeat(np.arange(50), 6), mean_prior=(2, 2), concentration_prior=(2, 0.1))
    assert list(table.columns) == list(CLUSTERED_COLUMNS)
    rows = table.set_index("method")
    assert rows.loc["naive_beta", ["estimate", "low", "high"]].tolist() == pytest.approx(
        [0.720, 0.669, 0.769], abs=1e-3
    )
    # Post (PyMC, 16,000 draws): 0.719 [0.633, 0.796], design effect ~2.65, ~113 effective questions.
    assert rows.loc["clustered_beta_binomial", ["estimate", "low", "high"]].tolist() == pytest.approx(
        [0.719, 0.633, 0.796], abs=3e-3
    )
    assert rows.loc["clustered_beta_binomial", "design_effect"] == pytest.approx(2.65, abs=0.08)
    assert rows.loc["clustered_beta_binomial", "effective_n"] == pytest.approx(113, abs=4)


def _paper_importance_sampling(successes, trials, k=400_000, seed=0):
    # Appendix E.1, Snippet 4, as a reference implementation.
    rng = np.random.default_rng(seed)
    thetas = rng.beta(1, 1, size=(k, 1))
    ds = rng.gamma(1, 1, size=(k, 1))
    log_w = stats.betabinom(trials, ds * thetas, ds * (1 - thetas)).logpmf(successes).sum(-1)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    posterior = thetas[rng.choice(k, size=k, p=w), 0]
    return posterior.mean(), np.percentile(posterior, [2.5, 97.5])


def test_grid_posterior_matches_the_papers_importance_sampling():
    successes, trials = np.array([3, 5, 1, 4, 4, 2]), np.array([5, 5, 4, 6, 5, 3])
    posterior = clustered_beta_binomial_posterior(successes, trials)
    mean, (low, high) = _paper_importance_sampling(successes, trials)
    assert posterior.mean == pytest.approx(mean, abs=0.005)
    assert posterior.interval() == pytest.approx((low, high), abs=0.01)
    draws = posterior.sample(50_000, seed=1)
    assert draws.mean() == pytest.approx(posterior.mean, abs=0.003)


def test_clustered_bad_input():
    with pytest.raises(ValueError, match="differ in length"):
        clustered_standard_error([1, 0], [1])
    with pytest.raises(ValueError, match="0 <= successes <= trials"):
        clustered_beta_binomial_posterior([3], [2])
    with pytest.raises(ValueError, match="missing"):
        clustered_standard_error([1, 0], ["a", None])
