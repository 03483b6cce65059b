import numpy as np
import pytest
from scipy import stats

from evalpipeline.stats.conventional import (
    INTERVAL_COLUMNS,
    bootstrap_interval,
    clopper_pearson_interval,
    interval_table,
    t_interval,
    wald_interval,
    wilson_interval,
)
from evalpipeline.stats.coverage import exact_average_coverage, interval_methods, simulate_iid_coverage

METHODS = interval_methods()


# ---- the exact-coverage checks (theta ~ U(0, 1), summed over the binomial)


@pytest.mark.parametrize("n,expected", [(10, 0.77), (100, 0.92)])
def test_wald_average_coverage_matches_position_paper(n, expected):
    assert exact_average_coverage(METHODS["clt"], n) == pytest.approx(expected, abs=0.005)


@pytest.mark.parametrize("n", [3, 10, 30, 100])
def test_wilson_near_nominal_clopper_pearson_above_beta_exact(n):
    assert exact_average_coverage(METHODS["wilson"], n) == pytest.approx(0.95, abs=0.01)
    assert exact_average_coverage(METHODS["clopper_pearson"], n) > 0.95
    # Under its own prior a 95% credible interval covers exactly 95% on average.
    assert exact_average_coverage(METHODS["beta_equal_tailed"], n) == pytest.approx(0.95, abs=1e-9)
    assert exact_average_coverage(METHODS["beta_hpdi"], n) == pytest.approx(0.95, abs=1e-6)


def test_exact_coverage_matches_brute_force_integration():
    n = 7
    grid = np.linspace(0.0005, 0.9995, 1000)
    low, high = METHODS["clt"](np.arange(n + 1), n, 0.95)
    pmf = stats.binom.pmf(np.arange(n + 1)[None, :], n, grid[:, None])
    covered = (low[None, :] <= grid[:, None]) & (grid[:, None] <= high[None, :])
    assert exact_average_coverage(METHODS["clt"], n) == pytest.approx((pmf * covered).sum(axis=1).mean(), abs=2e-3)


# ---- the post's single-accuracy table (equal-tailed Beta(2, 2) interval, the post's ppf([0.025, 0.975]))


@pytest.mark.parametrize("k,n,low,high", [(47, 50, 0.818, 0.969), (50, 50, 0.899, 0.995), (940, 1000, 0.923, 0.952)])
def test_post_single_accuracy_credible_intervals(k, n, low, high):
    table = interval_table(k=k, n=n, prior=(2, 2)).set_index("method")
    assert table.loc["beta_equal_tailed", ["low", "high"]].tolist() == pytest.approx([low, high], abs=6e-4)
    assert table.loc["beta_equal_tailed", ["prior_a", "prior_b"]].tolist() == [2.0, 2.0]


def test_post_wald_intervals_and_their_flags():
    table = interval_table(k=47, n=50).set_index("method")
    assert table.loc["clt", ["low", "high"]].tolist() == pytest.approx([0.874, 1.006], abs=6e-4)
    assert table.loc["clt", "flag"] == "outside [0, 1]"
    table = interval_table(k=50, n=50).set_index("method")
    assert table.loc["clt", ["low", "high"]].tolist() == [1.0, 1.0]
    assert table.loc["clt", "flag"] == "zero width"
    assert table.loc["bootstrap", "flag"] == "zero width"
    for method in ("beta_hpdi", "beta_equal_tailed", "wilson", "clopper_pearson"):
        assert table.loc[method, "flag"] is None or table.loc[method, "flag"] != table.loc[method, "flag"]  # None/NaN


# ---- each method against an independent implementation


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (17, 40)])
def test_wilson_and_clopper_pearson_match_scipy(k, n):
    result = stats.binomtest(k, n)
    wilson = result.proportion_ci(0.95, "wilson")
    exact = result.proportion_ci(0.95, "exact")
    assert [float(x) for x in wilson_interval(k, n)] == pytest.approx([wilson.low, wilson.high], abs=1e-10)
    assert [float(x) for x in clopper_pearson_interval(k, n)] == pytest.approx([exact.low, exact.high], abs=1e-10)


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_is_exactly_0_at_no_successes_and_1_at_all(level):
    # centre -+ half left 2.8e-17 at k = 0 (n = 3, 6, 7, ...) and 1 - 1.1e-16 at k = n (n = 10, 13, ...)
    n = np.arange(1, 201)
    low, high = wilson_interval(np.zeros(n.size), n, level)
    assert (low == 0.0).all() and (high > 0.0).all()
    low, high = wilson_interval(n, n, level)
    assert (high == 1.0).all() and (low < 1.0).all()
    for k, n_one in ((0, 7), (2.5, 2.5), (0.0, 3)):  # scalars (graded k too) stay scalars
        low, high = wilson_interval(k, n_one, level)
        assert np.ndim(low) == np.ndim(high) == 0
        assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n_one)


def test_wald_eq5_and_t_eq11():
    low, high = wald_interval(3, 4)
    half = stats.norm.ppf(0.975) * np.sqrt(0.75 * 0.25 / 4)
    assert (float(low), float(high)) == pytest.approx((0.75 - half, 0.75 + half))
    scores = np.array([0.2, 0.9, 0.4, 0.7, 1.0])
    expected = stats.t.interval(0.9, 4, loc=scores.mean(), scale=stats.sem(scores))
    assert t_interval(scores, 0.9) == pytest.approx(expected)


def test_bootstrap_is_seeded_and_approaches_the_ideal_percentiles():
    scores = np.array([1] * 14 + [0] * 6)
    first = bootstrap_interval(scores, seed=3)
    assert first == bootstrap_interval(scores, seed=3)
    ideal = METHODS["bootstrap_ideal"](np.array([14.0]), 20, 0.95)
    assert first == pytest.approx([float(ideal[0][0]), float(ideal[1][0])], abs=0.051)


def test_interval_table_shape_and_agreement_between_scores_and_counts():
    scores = np.array([1, 0, 1, 1, 0, 1, 1, 1])
    from_scores = interval_table(scores, seed=1)
    from_counts = interval_table(k=6, n=8, seed=1)
    assert list(from_scores.columns) == list(INTERVAL_COLUMNS)
    assert from_scores["method"].tolist() == [
        "beta_hpdi",
        "beta_equal_tailed",
        "wilson",
        "clopper_pearson",
        "clt",
        "t",
        "bootstrap",
    ]
    assert np.allclose(from_scores[["low", "high"]], from_counts[["low", "high"]])
    assert from_scores.loc[from_scores["kind"] == "confidence", "prior_a"].isna().all()


def test_interval_table_graded_scores_and_bad_input():
    table = interval_table([0.5, 0.25, 1.0, 0.75]).set_index("method")
    assert table.loc["wilson", "k"] == 2.5
    with pytest.raises(ValueError, match="not both"):
        interval_table([1, 0], k=1, n=2)
    with pytest.raises(ValueError, match="whole numbers"):
        interval_table(k=2.5, n=4)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        interval_table([1.5, 0])
    with pytest.raises(ValueError, match="NaN"):
        interval_table([np.nan, 1])
    with pytest.raises(ValueError, match="0 <= k <= n"):
        interval_table(k=5, n=4)


# ---- the position paper's simulation protocol, reduced


def test_reduced_simulated_coverage_follows_the_exact_values():
    simulated = simulate_iid_coverage(n_thetas=2500, n_datasets=4, levels=(0.95,), n_resamples=2000, seed=5)
    table = simulated.set_index(["method", "n"])["coverage"]
    for n in (3, 10, 30, 100):
        for method in ("beta_equal_tailed", "wilson", "clopper_pearson", "clt"):
            assert table[(method, n)] == pytest.approx(exact_average_coverage(METHODS[method], n), abs=0.03)
    assert table[("clt", 3)] < 0.6 and table[("bootstrap", 3)] < 0.6
