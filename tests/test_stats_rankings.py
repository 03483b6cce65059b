import numpy as np
import pytest
from scipy import stats

from evalpipeline.stats.compare import prob_beta_greater
from evalpipeline.stats.rankings import (
    RANKING_COLUMNS,
    beta_posterior_draws,
    rank_probabilities,
    threshold_probabilities,
    threshold_probabilities_beta,
)


def test_two_models_p_best_is_p_a_better():
    draws = beta_posterior_draws([30, 25], [40, 40], n_draws=200_000, seed=2)
    table = rank_probabilities(draws, ["a", "b"])
    assert list(table.columns) == list(RANKING_COLUMNS)
    exact = prob_beta_greater(31, 11, 26, 16)
    assert table.loc[0, "p_best"] == pytest.approx(exact, abs=0.004)
    assert table.loc[0, "expected_rank"] == pytest.approx(2 - exact, abs=0.004)
    assert table["p_best"].sum() == pytest.approx(1.0)


def test_exchangeable_models_share_the_ranks():
    draws = beta_posterior_draws([10, 10, 10], [20, 20, 20], n_draws=60_000, seed=1)
    table = rank_probabilities(draws, ["a", "b", "c"])
    assert table["p_best"].to_numpy() == pytest.approx([1 / 3] * 3, abs=0.01)
    assert table["expected_rank"].to_numpy() == pytest.approx([2, 2, 2], abs=0.02)


def test_ties_share_the_best_rank_and_bad_shapes_fail():
    table = rank_probabilities(np.array([[0.5, 0.5], [0.7, 0.1]]), ["a", "b"])
    assert table["p_best"].tolist() == pytest.approx([0.75, 0.25])
    with pytest.raises(ValueError, match="one column per model"):
        rank_probabilities(np.zeros((3, 2)), ["a"])


def test_threshold_probabilities_closed_form_and_from_draws():
    # HiBayES Scenario 1: has the model passed an 80% threshold? 85/100 with a uniform prior.
    exact = threshold_probabilities_beta(86, 16, [0.8, 0.9])
    assert exact[0.8] == pytest.approx(stats.beta.sf(0.8, 86, 16))
    draws = beta_posterior_draws([85], [100], n_draws=200_000, seed=3)
    table = threshold_probabilities(draws, ["m"], [0.8, 0.9])
    assert table["p_above"].tolist() == pytest.approx([exact[0.8], exact[0.9]], abs=0.004)
    with pytest.raises(ValueError):
        threshold_probabilities_beta(2, 2, [1.5])


def test_ranks_are_one_plus_the_models_strictly_better_in_each_draw():
    # discrete draws, so that many draws hold ties: every summary equals the definition, computed pair by pair
    rng = np.random.default_rng(4)
    draws = rng.integers(0, 4, size=(500, 7)).astype(float)
    draws[rng.random(draws.shape) < 0.05] = np.inf  # ranked as the comparisons rank them (tied with each other)
    draws[rng.random(draws.shape) < 0.05] = -np.inf
    ranks = 1 + (draws[:, None, :] > draws[:, :, None]).sum(axis=2)
    best = ranks == 1
    table = rank_probabilities(draws, list("abcdefg"))
    assert table["p_best"].tolist() == (best / best.sum(axis=1, keepdims=True)).mean(axis=0).tolist()
    assert table["expected_rank"].tolist() == ranks.mean(axis=0).tolist()
    # the interval's ends: the best rank with >= 2.5% of the draws at it or better, the worst with >= 2.5% at it
    # or worse (counted, so 1/40 of the draws is compared exactly)
    at_or_better = lambda r: 40 * (ranks <= r).sum(axis=0) >= len(ranks)  # noqa: E731
    at_or_worse = lambda r: 40 * (ranks >= r).sum(axis=0) >= len(ranks)  # noqa: E731
    low = [min(r for r in range(1, 8) if at_or_better(r)[j]) for j in range(7)]
    high = [max(r for r in range(1, 8) if at_or_worse(r)[j]) for j in range(7)]
    assert table["rank_low"].tolist() == low
    assert table["rank_high"].tolist() == high
    with pytest.raises(ValueError, match="NaN"):
        rank_probabilities(np.array([[0.5, np.nan]]), ["a", "b"])


@pytest.mark.parametrize("n_draws, seed", [(40, 0), (40, 1), (400, 2), (41, 0), (4000, 0)])
def test_rank_intervals_are_observed_ranks_holding_at_least_95_percent_of_the_draws(n_draws, seed):
    """Close models spread each one's rank draws over several ranks; where a 2.5% or 97.5% point fell between
    two ranks it was interpolated (2.95, 1.975, 4.025 for these draws). The ends are ranks the model has in
    some draw, and under 2.5% of the draws lie beyond each end."""
    draws = beta_posterior_draws([20, 22, 24, 26, 28], [60] * 5, n_draws=n_draws, seed=seed)
    table = rank_probabilities(draws, list("abcde"))
    assert table["rank_low"].dtype == np.int64 and table["rank_high"].dtype == np.int64
    ranks = stats.rankdata(-draws, method="min", axis=1)
    for j, (low, high) in enumerate(zip(table["rank_low"], table["rank_high"])):
        mine = ranks[:, j]
        assert low in mine and high in mine and low <= high
        assert (mine < low).mean() < 0.025 <= (mine <= low).mean()
        assert (mine > high).mean() < 0.025 <= (mine >= high).mean()
        assert ((mine >= low) & (mine <= high)).mean() >= 0.95
