import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from evalpipeline.stats.compare import (
    PAIRWISE_COLUMNS,
    bivariate_normal_cdf,
    bivariate_normal_cdf_grid,
    independent_comparison,
    paired_logit_comparison,
    paired_probit_comparison,
    paired_t_test,
    paired_table,
    pairwise_table,
    prob_beta_greater,
    prob_beta_greater_many,
    unpaired_t_test,
)


def _evan_miller(a1, b1, a2, b2):
    # Closed form P(X1 > X2) for integer a1: sum_{i<a1} B(a2 + i, b1 + b2) / ((b1 + i) B(1 + i, b1) B(a2, b2)).
    i = np.arange(int(a1))
    return np.exp(special.betaln(a2 + i, b1 + b2) - np.log(b1 + i) - special.betaln(1 + i, b1) - special.betaln(a2, b2)).sum()


@pytest.mark.parametrize("params", [(5, 3, 4, 4), (60, 42, 57, 45), (2, 9, 1, 1), (300, 20, 280, 40)])
def test_p_a_better_is_exact(params):
    assert prob_beta_greater(*params) == pytest.approx(_evan_miller(*params), abs=1e-9)
    assert prob_beta_greater_many(*params) == pytest.approx(_evan_miller(*params), abs=1e-8)
    a1, b1, a2, b2 = params
    assert prob_beta_greater(*params) + prob_beta_greater(a2, b2, a1, b1) == pytest.approx(1.0)


def test_independent_comparison_agrees_with_monte_carlo_beta_draws():
    rng = np.random.default_rng(9)
    draws_a, draws_b = rng.beta(1 + 14, 1 + 6, 400_000), rng.beta(1 + 11, 1 + 9, 400_000)
    result = independent_comparison(14, 20, 11, 20)
    assert result["p_a_better"] == pytest.approx((draws_a > draws_b).mean(), abs=0.003)
    assert [result["diff_low"], result["diff_high"]] == pytest.approx(np.percentile(draws_a - draws_b, [2.5, 97.5]), abs=0.004)
    odds = (draws_a / (1 - draws_a)) / (draws_b / (1 - draws_b))
    assert result["odds_ratio_median"] == pytest.approx(np.median(odds), rel=0.01)


# The post's paired example: A (old) 56/100, B (new) 59/100, per-question correlation 0.41, so the 2x2 table is
# both right 43, only new right 16, only old right 13, both wrong 28 (the only table with those margins and phi ~ 0.41).
NEW = np.array([1] * 43 + [1] * 16 + [0] * 13 + [0] * 28)
OLD = np.array([1] * 43 + [0] * 16 + [1] * 13 + [0] * 28)


def test_post_unpaired_row_is_reproduced():
    assert np.corrcoef(NEW, OLD)[0, 1] == pytest.approx(0.41, abs=0.005)
    result = independent_comparison(59, 100, 56, 100)
    assert result["diff_mean"] == pytest.approx(0.029, abs=5e-4)
    assert [result["diff_low"], result["diff_high"]] == pytest.approx([-0.107, 0.165], abs=2e-3)
    assert result["p_a_better"] == pytest.approx(0.663, abs=0.005)


@pytest.mark.slow
def test_post_paired_row_is_reproduced_and_narrower():
    paired = paired_logit_comparison(NEW, np.ones(100), OLD, np.ones(100))
    unpaired = independent_comparison(59, 100, 56, 100)
    # Post (PyMC NUTS, 8,000 draws): gap 0.028, [-0.068, 0.125], width 0.193, P(B better) 0.724.
    assert paired["diff_mean"] == pytest.approx(0.028, abs=2e-3)
    assert [paired["diff_low"], paired["diff_high"]] == pytest.approx([-0.068, 0.125], abs=3e-3)
    assert paired["p_a_better"] == pytest.approx(0.724, abs=0.02)  # the post's value carries MCMC noise
    narrowing = 1 - (paired["diff_high"] - paired["diff_low"]) / (unpaired["diff_high"] - unpaired["diff_low"])
    assert 0.25 < narrowing < 0.35  # "about thirty percent narrower"
    assert paired["odds_ratio_low"] < 1 < paired["odds_ratio_high"]
    assert paired["odds_ratio_low"] == pytest.approx(np.exp(paired["gap_logit_low"]))


@pytest.mark.parametrize("h,k,rho", [(0.3, -0.5, 0.97), (1.3, 1.1, -0.6), (-0.25, -1.28, 0.7), (0.0, 0.0, 0.0)])
def test_bivariate_normal_cdf_matches_scipy(h, k, rho):
    expected = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([h, k])
    assert float(bivariate_normal_cdf(h, k, rho)) == pytest.approx(expected, abs=1e-6)


def test_bivariate_normal_cdf_grid_equals_the_pointwise_rule():
    # the probit's grid form (cumulative pieces over asin(rho)) against the 24-point rule, cell by cell
    rng = np.random.default_rng(7)
    rho = np.clip(2 * stats.beta.ppf((np.arange(32) + 0.5) / 32, 4, 2) - 1, -0.99, 0.99)
    for _ in range(3):
        h = -stats.norm.ppf(np.linspace(*sorted(rng.uniform(1e-6, 1 - 1e-6, 2)), 17))
        k = -stats.norm.ppf(np.linspace(*sorted(rng.uniform(1e-6, 1 - 1e-6, 2)), 13))
        grid = bivariate_normal_cdf_grid(h, k, rho)
        pointwise = bivariate_normal_cdf(*np.meshgrid(h, k, rho, indexing="ij"))
        assert grid.shape == (17, 13, 32)
        assert np.abs(grid - pointwise).max() < 1e-12
    with pytest.raises(ValueError, match="rho"):
        bivariate_normal_cdf_grid([0.0], [0.0], [1.0])


def test_binary_logit_likelihood_equals_the_general_pattern_path(monkeypatch):
    import evalpipeline.stats.compare as compare

    rng = np.random.default_rng(11)
    base, gap, spread = np.linspace(-7, 7, 29), np.linspace(-5, 5, 41), np.linspace(0, 8, 17)
    for _ in range(5):
        n = int(rng.integers(5, 300))
        y_a = (rng.random(n) < rng.uniform(0.02, 0.98)).astype(float)
        y_b = (rng.random(n) < rng.uniform(0.02, 0.98)).astype(float)
        patterns = pd.DataFrame({"ka": y_a, "na": 1.0, "kb": y_b, "nb": 1.0}).value_counts().reset_index(name="count")
        fast = compare._binary_pattern_log_likelihood(base, gap, spread, patterns)
        with monkeypatch.context() as patch:
            patch.setattr(compare, "_binary_pattern_log_likelihood", lambda *args: None)
            general = compare._logit_pattern_log_likelihood(base, gap, spread, patterns)
        assert fast is not None and fast.shape == general.shape == (29, 41, 17)
        assert np.abs(fast - general).max() <= 1e-12 * np.abs(general).max()


def _paper_paired_importance_sampling(table, k=300_000, seed=0):
    # Appendix E.2, Snippet 5, with the bivariate normal CDF from scipy, as a reference implementation.
    s, t, u, v = table
    rng = np.random.default_rng(seed)
    ta, tb, rho = rng.beta(1, 1, k), rng.beta(1, 1, k), 2 * rng.beta(4, 2, k) - 1
    p_v = bivariate_normal_cdf(-stats.norm.ppf(ta), -stats.norm.ppf(tb), np.clip(rho, -0.999, 0.999))
    p_s, p_t, p_u = ta + tb + p_v - 1, 1 - tb - p_v, 1 - ta - p_v
    ok = (p_s > 0) & (p_t > 0) & (p_u > 0) & (p_v > 0)
    log_w = np.full(k, -np.inf)
    log_w[ok] = s * np.log(p_s[ok]) + t * np.log(p_t[ok]) + u * np.log(p_u[ok]) + v * np.log(p_v[ok])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    diff = (ta - tb)[rng.choice(k, size=k, p=w)]
    return (diff > 0).mean(), np.percentile(diff, [2.5, 97.5])


@pytest.mark.slow
def test_probit_grid_matches_the_papers_importance_sampling():
    table = (9, 5, 2, 4)
    result = paired_probit_comparison(table)
    p, (low, high) = _paper_paired_importance_sampling(table)
    assert result["p_a_better"] == pytest.approx(p, abs=0.01)
    assert [result["diff_low"], result["diff_high"]] == pytest.approx([low, high], abs=0.01)


@pytest.mark.slow
def test_probit_on_planted_correlated_data_is_narrower_and_covers_truth():
    # Appendix C's generator with theta_A = 0.6, theta_B = 0.7, rho = 0.7, 400 shared questions.
    rng = np.random.default_rng(12)
    points = rng.multivariate_normal(stats.norm.ppf([0.6, 0.7]), [[1, 0.7], [0.7, 1]], size=400)
    y_a, y_b = (points[:, 0] > 0).astype(int), (points[:, 1] > 0).astype(int)
    paired = paired_probit_comparison(paired_table(y_a, y_b))
    unpaired = independent_comparison(y_a.sum(), 400, y_b.sum(), 400)
    assert paired["diff_low"] < -0.1 < paired["diff_high"]
    assert paired["diff_high"] - paired["diff_low"] < 0.85 * (unpaired["diff_high"] - unpaired["diff_low"])
    # The tetrachoric correlation's sampling SD at n = 400 is ~0.08, and the Beta(4, 2) prior pulls it towards 1/3.
    assert paired["rho_mean"] == pytest.approx(0.7, abs=0.2)
    assert paired["p_a_better"] < 0.01


def test_t_tests_match_their_definitions():
    a = np.array([1, 1, 0, 1, 1, 0, 1, 1.0])
    b = np.array([0, 1, 0, 1, 0, 0, 1, 0.0])
    paired = paired_t_test(a, b)
    d = a - b
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    assert paired["statistic"] == pytest.approx(t)
    assert paired["p_value"] == pytest.approx(2 * stats.t.sf(abs(t), d.size - 1))
    welch = unpaired_t_test(a, b)
    se = np.sqrt(a.var(ddof=1) / 8 + b.var(ddof=1) / 8)
    assert welch["statistic"] == pytest.approx((a.mean() - b.mean()) / se)
    assert np.isnan(unpaired_t_test([1, 1], [1, 1])["p_value"])


def _samples(rng, accuracies, n_items=30, epochs=2, graded=False):
    difficulty = rng.normal(0, 1.2, n_items)
    rows = []
    for model, acc in accuracies.items():
        p = special.expit(special.logit(acc) + difficulty)
        for item in range(n_items):
            for epoch in range(1, epochs + 1):
                score = rng.random() < p[item]
                rows.append({"model": model, "item_id": f"q{item}", "epoch": epoch,
                             "score": float(score) if not graded else round(float(p[item]), 2)})
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_pairwise_table_on_planted_models():
    rng = np.random.default_rng(3)
    samples = _samples(rng, {"weak": 0.35, "strong": 0.9, "mid": 0.6})
    table = pairwise_table(samples)
    assert list(table.columns) == list(PAIRWISE_COLUMNS)
    assert len(table) == 3
    strong_weak = table[(table.model_a == "strong") & (table.model_b == "weak")].iloc[0]
    assert strong_weak["p_a_better_paired"] > 0.99 and strong_weak["p_a_better_independent"] > 0.99
    assert strong_weak["verdict_band"] == "near-certain"
    assert strong_weak["hpdi_verdict"] == "different"
    assert strong_weak["n_shared_items"] == 30
    assert strong_weak["t_paired_p"] < 0.01
    assert not np.isnan(strong_weak["p_a_better_probit"])
    assert (table["p_a_better_independent"] >= 0.5).all()  # model_a is the one with the higher posterior mean


@pytest.mark.slow
def test_pairwise_table_reuses_exactly_the_unchanged_pairs(tmp_path):
    rng = np.random.default_rng(5)
    samples = _samples(rng, {"m1": 0.4, "m2": 0.6, "m3": 0.7, "m4": 0.8}, n_items=12, epochs=1)
    first = pairwise_table(samples)
    assert first.attrs == {"pairs_computed": 6, "pairs_reused": 0}
    # through Parquet, as the lake stores it, with rows in another order
    first.sample(frac=1, random_state=0).to_parquet(tmp_path / "pairwise.parquet", index=False)
    previous = pd.read_parquet(tmp_path / "pairwise.parquet")

    # a new model: only its 4 pairs are computed, and the table equals a fresh one
    grown = pd.concat([samples, _samples(rng, {"m5": 0.5}, n_items=12, epochs=1)], ignore_index=True)
    reused = pairwise_table(grown, previous=previous)
    assert reused.attrs == {"pairs_computed": 4, "pairs_reused": 6}
    pd.testing.assert_frame_equal(reused, pairwise_table(grown))

    # one changed score of m2: its 3 pairs are recomputed, and the result matches a fresh table
    changed = samples.copy()
    row = changed.index[(changed.model == "m2")][0]
    changed.loc[row, "score"] = 1.0 - changed.loc[row, "score"]
    again = pairwise_table(changed, previous=previous)
    assert again.attrs == {"pairs_computed": 3, "pairs_reused": 3}
    pd.testing.assert_frame_equal(again, pairwise_table(changed))

    # other settings: nothing is reused
    assert pairwise_table(samples, previous=previous, level=0.9).attrs["pairs_computed"] == 6
    # row order of the samples does not matter
    assert pairwise_table(samples.iloc[::-1], previous=previous).attrs["pairs_computed"] == 0


@pytest.mark.slow
def test_pairwise_table_graded_scores_skip_probit_and_unshared_items_fall_back():
    rng = np.random.default_rng(4)
    samples = _samples(rng, {"a": 0.5, "b": 0.55}, n_items=10, epochs=1, graded=True)
    table = pairwise_table(samples)
    assert np.isnan(table.loc[0, "p_a_better_probit"])
    samples.loc[samples.model == "b", "item_id"] += "_other"
    table = pairwise_table(samples)
    assert table.loc[0, "n_shared_items"] == 0 and table.loc[0, "verdict_source"] == "independent"
    with pytest.raises(ValueError, match="lack columns"):
        pairwise_table(samples.drop(columns="epoch"))
