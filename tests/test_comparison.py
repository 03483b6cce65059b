"""Suite comparison and model profile over a small synthetic lake (evalpipeline/steps/comparison.py),
plus accuracy checks of the faster quadrature in evalpipeline/stats/compare.py."""

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import special, stats

from evalpipeline.steps.comparison import (
    LEADERBOARD_COLUMNS,
    PAIRWISE_TABLE_COLUMNS,
    PROFILE_COLUMNS,
    ComparisonSettings,
    build_model_profile,
    build_suite_comparison,
    leaderboard_columns,
    threshold_column,
)
from evalpipeline.steps.fits import suite_fit_dir
from evalpipeline.lake import Lake, write_bytes_atomic, write_parquet_atomic
from evalpipeline.steps.samples import NoDataError
from evalpipeline.stats import compare


def write_samples(lake: Lake, model: str, suite: str, scores: np.ndarray, *, errors=None) -> None:
    """One canonical sample table: scores is (items x epochs)."""
    items, epochs = scores.shape
    rows = []
    for i in range(items):
        for e in range(epochs):
            rows.append(
                {
                    "domain": "d",
                    "subdomain": None,
                    "item_id": f"q{i:03d}",
                    "epoch": e + 1,
                    "scorer": "match",
                    "score": float(scores[i, e]),
                    "correct": bool(scores[i, e] == 1),
                    "error": None if errors is None else errors,
                    "limit": None,
                }
            )
    frame = pd.DataFrame(rows)
    frame["subdomain"] = frame["subdomain"].astype("string")
    frame["error"] = frame["error"].astype("string")
    frame["limit"] = frame["limit"].astype("string")
    write_parquet_atomic(
        pa.Table.from_pandas(frame, preserve_index=False), lake.table_path("samples", "samples.parquet", model, suite)
    )


def planted_scores(rng, difficulty, shift, epochs=2):
    p = special.expit(difficulty + shift)
    return (rng.random((difficulty.size, epochs)) < p[:, None]).astype(float)


@pytest.fixture(scope="module")
def planted_lake(tmp_path_factory):
    rng = np.random.default_rng(11)
    lake = Lake(tmp_path_factory.mktemp("lake"))
    difficulty = rng.normal(0.0, 1.0, 30)
    twin = planted_scores(rng, difficulty, 0.0)
    write_samples(lake, "strong/one", "quiz", planted_scores(rng, difficulty, 3.0))
    write_samples(lake, "twin a", "quiz", twin)
    write_samples(lake, "twin b", "quiz", twin.copy())  # identical answers: no evidence either way
    write_samples(lake, "strong/one", "other", planted_scores(rng, difficulty[:10], 1.0, epochs=1))
    return lake


def test_planted_truth(planted_lake):
    result = build_suite_comparison(planted_lake, "quiz")
    board, pairs = result.leaderboard, result.pairwise
    assert list(board.columns) == list(LEADERBOARD_COLUMNS) and list(pairs.columns) == list(PAIRWISE_TABLE_COLUMNS)
    assert board.loc[0, "model"] == "strong/one" and board.loc[0, "p_best"] > 0.95
    assert board["p_best"].sum() == pytest.approx(1.0)
    # P(> 0.8) is the exact Beta tail of the recorded posterior
    row = board.iloc[0]
    assert row[threshold_column(0.8)] == pytest.approx(stats.beta.sf(0.8, row.posterior_a, row.posterior_b))
    assert (board[["prior_a", "prior_b"]] == 1.0).all().all()
    assert (board["wilson_low"] <= board["observed_mean"]).all() and (
        board["clopper_pearson_low"] <= board["wilson_low"] + 0.02
    ).all()
    strong = pairs[pairs.model_a == "strong/one"]
    assert len(strong) == 2
    assert (strong["verdict_band"] == "near-certain").all() and (strong["hpdi_verdict"] == "different").all()
    assert strong["verdict"].str.contains("almost certainly better").all()
    assert (
        strong["p_a_better_probit"].isna().all()
    )  # two epochs an item: the probit's 0/1 pairs would not be independent
    assert (board["unit"] == "item").all() and (board["design_effect"] >= 1).all()
    assert (board["n_effective"] == board["n"] / board["design_effect"]).all()
    twins = pairs[pairs.model_b.isin(["twin a", "twin b"]) & pairs.model_a.isin(["twin a", "twin b"])].iloc[0]
    assert twins["p_a_better_independent"] == pytest.approx(0.5, abs=1e-9)
    # identical answers: the symmetric paired logit says exactly even
    assert twins["p_a_better"] == twins["p_a_better_paired"] == pytest.approx(0.5, abs=1e-12)
    assert twins["verdict_band"] == "too close to call" and twins["hpdi_verdict"] == "equivalent"
    assert set(result.plots) == {"leaderboard", "pairwise"} and all(p.exists() for p in result.plots.values())
    assert board["glm"].isna().all() and pairs["p_a_better_glm"].isna().all()


def test_rerun_writes_identical_bytes(planted_lake):
    first = build_suite_comparison(planted_lake, "quiz")
    files = sorted(first.directory.rglob("*.*"))
    before = {p: p.read_bytes() for p in files}
    mtimes = {p: p.stat().st_mtime_ns for p in files}
    second = build_suite_comparison(planted_lake, "quiz")
    assert second.pairwise.attrs == {"pairs_computed": 0, "pairs_reused": len(second.pairwise)}  # read back
    assert sorted(second.directory.rglob("*.*")) == files
    assert {p: p.read_bytes() for p in files} == before
    assert {p: p.stat().st_mtime_ns for p in files} == mtimes  # unchanged files are not rewritten


def test_bad_input(tmp_path, planted_lake):
    with pytest.raises(NoDataError, match="'nowhere' has no sample tables"):
        build_suite_comparison(planted_lake, "nowhere")
    lake = Lake(tmp_path)
    write_samples(lake, "m", "broken", np.ones((3, 1)), errors="timeout")
    with pytest.raises(ValueError, match="none counts"):
        build_suite_comparison(lake, "broken")
    with pytest.raises(ValueError, match="thresholds"):
        ComparisonSettings(thresholds=(1.5,))
    with pytest.raises(NoDataError, match="'ghost'"):
        build_model_profile(planted_lake, "ghost")


def test_a_sample_table_that_failed_validation_reaches_no_comparison(tmp_path):
    """A partition whose sample table fails a blocking check (half its samples errored against the
    0.2 bound) is ingested and recorded, but left out of the suite comparison, the conjugate
    leaderboard, the suite GLMs' data, the model profile and the model's reliability, each naming it;
    once its logs are fixed it is back. Its older posteriors (from data that passed) are left out too."""
    from evalpipeline.steps.fits import suite_samples
    from evalpipeline.steps.samples import (
        ingest_partitions,
        partition_validator,
        write_accuracy_posteriors,
        write_suite_leaderboard,
    )
    from evalpipeline.steps.reliability import ReliabilityConfig, assess_model

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    rows = ["model,suite,item_id,score,error"]
    rows += [f"good,s,q{i},{i % 2}," for i in range(20)] + [f"bad,s,q{i},{i % 3 == 0:d}," for i in range(20)]
    (landing / "s.csv").write_text("\n".join(rows) + "\n")
    pairs = [("good", "s"), ("bad", "s")]
    validator = partition_validator(lake, data_docs=False)
    ingest_partitions(lake, landing, pairs, validator=validator)
    for model, suite in pairs:
        write_accuracy_posteriors(lake, model, suite)  # "bad"'s from data that passed
    assert lake.failed_validation("bad", "s") == []

    rows = rows[:21] + [f"bad,s,q{i},0,{'timeout' if i % 2 else ''}" for i in range(20)]  # half errored
    (landing / "s.csv").write_text("\n".join(rows) + "\n")
    report = ingest_partitions(lake, landing, pairs, validator=validator)
    assert [c.name for c in report.partitions[("bad", "s")].validation.failed_checks] == ["errored_share_within_bound"]
    assert lake.failed_validation("bad", "s") == ["errored_share_within_bound"]
    assert len(pd.read_parquet(lake.table_path("samples", "samples.parquet", "bad", "s"))) == 20  # recorded, not lost

    comparison = build_suite_comparison(lake, "s")
    assert comparison.leaderboard["model"].tolist() == ["good"] and len(comparison.pairwise) == 0
    assert comparison.rejected == {"bad": ["errored_share_within_bound"]}
    assert set(write_suite_leaderboard(lake, "s")[0]["model"]) == {"good"}
    assert set(suite_samples(lake, "s")[0]["model"]) == {"good"}
    for build in (build_model_profile, lambda lake_, model: assess_model(lake_, model, ReliabilityConfig())):
        with pytest.raises(NoDataError, match=r"left out, failed validation: bad x s \(errored_share_within_bound\)"):
            build(lake, "bad")

    rows = rows[:21] + [f"bad,s,q{i},{i % 3 == 0:d}," for i in range(20)]  # the logs fixed
    (landing / "s.csv").write_text("\n".join(rows) + "\n")
    ingest_partitions(lake, landing, pairs, validator=validator)
    assert lake.failed_validation("bad", "s") == []
    assert set(build_suite_comparison(lake, "s").leaderboard["model"]) == {"good", "bad"}


def test_thresholds_are_wide_columns(planted_lake):
    settings = ComparisonSettings(thresholds=(0.5, 0.8, 0.95))
    board = build_suite_comparison(planted_lake, "other", settings).leaderboard
    assert [c for c in board.columns if c.startswith("p_above_")] == ["p_above_0.5", "p_above_0.8", "p_above_0.95"]
    assert list(board.columns) == list(leaderboard_columns(settings.thresholds))
    assert board["p_above_0.5"].iloc[0] >= board["p_above_0.8"].iloc[0] >= board["p_above_0.95"].iloc[0]


def _write_suite_fit(lake, suite, glm, models, draws, *, passed=True):
    """A stored suite GLM fit in the layout of evalpipeline/steps/fits.py (summary, diagnostics, draws, provenance)."""
    import xarray as xr

    directory = suite_fit_dir(lake, suite, glm)
    directory.mkdir(parents=True, exist_ok=True)
    prob = special.expit(draws)
    low, high = np.quantile(prob, [0.025, 0.975], axis=0)
    low2, high2 = np.quantile(prob, [0.055, 0.945], axis=0)  # the fits' default second mass, 0.89: narrower
    summary = pd.DataFrame(
        {
            "parameter": "model",
            "model": models,
            "scale": "location",
            "mean": draws.mean(0),
            "hpdi_mass": 0.95,
            "hpdi2_mass": 0.89,
            "prob_mean": prob.mean(0),
            "prob_hpdi_low": low,
            "prob_hpdi_high": high,
            "prob_hpdi2_low": low2,
            "prob_hpdi2_high": high2,
        }
    )
    write_parquet_atomic(pa.Table.from_pandas(summary, preserve_index=False), directory / "summary.parquet")
    diagnostics = pd.DataFrame({"diagnostic": ["divergences", "r_hat"], "passed": [passed, True]})
    write_parquet_atomic(pa.Table.from_pandas(diagnostics, preserve_index=False), directory / "diagnostics.parquet")
    xr.Dataset({"model": (("chain", "draw", "model_dim"), draws.reshape(2, -1, len(models)))}).to_netcdf(
        directory / "posterior.nc", group="posterior", engine="h5netcdf"
    )
    write_bytes_atomic(b"{}", directory / "fit.json")
    provenance = {"inputs": {}, "version": "test", "config": {"glm": glm}, "status": "fitted", "passed": passed}
    write_bytes_atomic(json.dumps(provenance).encode(), directory / "provenance.json")


def test_passed_suite_glm_is_used_and_failed_one_listed(tmp_path):
    rng = np.random.default_rng(5)
    lake = Lake(tmp_path)
    difficulty = rng.normal(0, 1, 20)
    write_samples(lake, "a", "s", planted_scores(rng, difficulty, 1.0))
    write_samples(lake, "b", "s", planted_scores(rng, difficulty, 0.0))
    draws = rng.normal([1.0, 0.2], 0.3, size=(400, 2))
    _write_suite_fit(lake, "s", "suite_binomial", ["a", "b"], draws, passed=False)
    _write_suite_fit(lake, "s", "suite_null", ["a", "b"], draws)
    result = build_suite_comparison(lake, "s")
    assert result.glm == "suite_null"
    fits = result.fits.set_index("glm")
    assert not fits.loc["suite_binomial", "used"] and fits.loc["suite_binomial", "failed"] == "divergences"
    assert fits.loc["suite_null", "used"]
    board = result.leaderboard.set_index("model")
    assert board.loc["a", "glm_mean"] == pytest.approx(special.expit(draws[:, 0]).mean())
    assert board.loc["a", "glm_p_best"] == pytest.approx((draws[:, 0] > draws[:, 1]).mean())
    pair = result.pairwise.iloc[0]
    expected = (draws[:, 0] > draws[:, 1]).mean() if pair.model_a == "a" else (draws[:, 1] > draws[:, 0]).mean()
    assert pair["p_a_better_glm"] == pytest.approx(expected)
    assert result.plots["glm_forest"].exists()
    # once no fit passes, the GLM columns empty and the stale forest plot goes
    _write_suite_fit(lake, "s", "suite_null", ["a", "b"], draws, passed=False)
    again = build_suite_comparison(lake, "s")
    assert again.glm is None and again.leaderboard["glm_mean"].isna().all()
    assert not (again.directory / "plots" / "glm_forest.png").exists()
    # a GLM whose folder holds no complete fit is listed with why, not left out, and not used
    (suite_fit_dir(lake, "s", "suite_null") / "summary.parquet").unlink()
    _write_suite_fit(lake, "s", "suite_binomial", ["a", "b"], draws)
    killed = suite_fit_dir(lake, "s", "suite_nested")
    killed.mkdir()
    (killed / "posterior.nc").write_bytes(b"half written")
    listed = build_suite_comparison(lake, "s")
    fits = listed.fits.set_index("glm")
    assert listed.glm == "suite_binomial" and sorted(fits.index) == ["suite_binomial", "suite_nested", "suite_null"]
    assert fits.loc["suite_null", "status"] == "no stored fit" and not fits.loc["suite_null", "used"]
    assert fits.loc["suite_null", "reason"] == "no stored fit: summary.parquet missing; materialise it again to refit"
    assert fits.loc["suite_nested", "reason"].startswith("no stored fit: provenance.json is missing")
    assert pd.isna(fits.loc["suite_nested", "passed"])


def test_model_profile(planted_lake):
    profile = build_model_profile(planted_lake, "strong/one")
    assert list(profile.columns) == list(PROFILE_COLUMNS)
    assert list(profile["scope"]) == ["suite", "suite", "pooled", "mean of suites"]
    suites = profile[profile.scope == "suite"].set_index("suite")
    assert suites.loc["quiz", "rank"] == 1 and suites.loc["quiz", "n_models"] == 3
    assert suites.loc["other", "n_models"] == 1 and suites.loc["other", "p_best"] == 1.0
    pooled = profile[profile.scope == "pooled"].iloc[0]
    k, n = suites["k"].sum(), suites["n"].sum()
    effect = pooled["design_effect"]  # quiz has two epochs an item: its items are the units
    assert pooled["unit"] == "item" and effect > 1 and pooled["n_effective"] == pytest.approx(n / effect)
    assert pooled["n"] == n and pooled["posterior_mean"] == pytest.approx((1 + k / effect) / (2 + n / effect))
    mean_row = profile[profile.scope == "mean of suites"].iloc[0]
    assert mean_row["posterior_mean"] == pytest.approx(suites["posterior_mean"].mean())
    assert mean_row["hpdi_low"] < mean_row["posterior_mean"] < mean_row["hpdi_high"]
    folder = planted_lake.root / "model_profile" / "model=strong%2Fone"
    assert (folder / "profile.parquet").exists() and (folder / "plots" / "forest.png").exists()


def test_model_profile_agrees_with_the_stored_leaderboards(planted_lake, tmp_path):
    """Suite rows are the model's rows of the leaderboards suite_comparison stored (the asset's deps)."""
    import shutil

    from evalpipeline.steps.comparison import suite_comparison_dir

    build_suite_comparison(planted_lake, "quiz")
    stored = pd.read_parquet(suite_comparison_dir(planted_lake, "quiz") / "leaderboard.parquet").set_index("model")
    row = build_model_profile(planted_lake, "strong/one").set_index("suite").loc["quiz"]
    for column in ("rank", "p_best", "expected_rank", "posterior_mean", "hpdi_low", "hpdi_high", "n"):
        assert row[column] == stored.loc["strong/one", column], column
    # a leaderboard written before the model had samples on the suite is refused, not misread
    lake = Lake(tmp_path / "copy")
    shutil.copytree(planted_lake.root, lake.root)
    path = suite_comparison_dir(lake, "quiz") / "leaderboard.parquet"
    board = pd.read_parquet(path)
    board[board["model"] != "strong/one"].to_parquet(path)
    with pytest.raises(NoDataError, match="predates"):
        build_model_profile(lake, "strong/one")


def test_profiles_read_a_stored_board_once_and_see_it_rewritten(planted_lake, tmp_path, monkeypatch):
    import shutil

    from evalpipeline.steps import comparison

    lake = Lake(tmp_path / "copy")
    shutil.copytree(planted_lake.root, lake.root)
    build_suite_comparison(lake, "quiz")
    reads = []
    real = pd.read_parquet
    monkeypatch.setattr(
        comparison.pd,
        "read_parquet",
        lambda path, *a, **k: (
            (reads.append(str(path)) if str(path).endswith("leaderboard.parquet") else None) or real(path, *a, **k)
        ),
    )
    comparison._stored_board.cache_clear()
    first = comparison._suite_board(lake, "quiz", ComparisonSettings())
    first.loc[0, "model"] = "scribbled on"  # a caller's change to its copy stays its own
    second = comparison._suite_board(lake, "quiz", ComparisonSettings())
    assert len(reads) == 1 and "scribbled on" not in set(second["model"])
    # a model joins: the rewritten board (a new file) is read, not the one kept
    write_samples(lake, "newcomer", "quiz", np.ones((30, 2)))
    build_suite_comparison(lake, "quiz")
    third = comparison._suite_board(lake, "quiz", ComparisonSettings())
    assert len(reads) == 2 and "newcomer" in set(third["model"]) and len(third) == len(second) + 1


# ---------------------------------------------------------------- accuracy of the faster quadrature


_FINE_NODES, _FINE_WEIGHTS = np.polynomial.legendre.leggauss(600)


def _bvn_reference(h, k, rho):
    # The plain rho-integral of the CDF's derivative with a very fine rule (independent of the asin substitution).
    x, w = _FINE_NODES, _FINE_WEIGHTS
    r = rho * (x + 1) / 2
    f = np.exp(-(h**2 - 2 * r * h * k + k**2) / (2 * (1 - r**2))) / np.sqrt(1 - r**2)
    return stats.norm.cdf(h) * stats.norm.cdf(k) + np.sum(f * w) * rho / 2 / (2 * math.pi)


def test_bivariate_normal_cdf_is_accurate_up_to_rho_099():
    rng = np.random.default_rng(0)
    h, k = rng.normal(0, 1.5, 300), rng.normal(0, 1.5, 300)
    rho = np.concatenate([rng.uniform(-0.99, 0.99, 200), np.full(50, 0.99), np.full(50, -0.99)])
    h[:40] = k[:40] + rng.normal(0, 0.05, 40)  # near the diagonal, where |rho| -> 1 is sharpest
    fast = compare.bivariate_normal_cdf(h, k, rho)
    reference = np.array([_bvn_reference(*args) for args in zip(h, k, rho)])
    assert np.abs(fast - reference).max() < 1e-9
    # (tests/test_stats_compare.py also checks it against scipy's multivariate normal CDF)


def _naive_item_log_likelihood(mid, gap, spread, ka, na, kb, nb):
    # Item by item, log-sigmoid by log-sigmoid, as the symmetric paired model reads: A at mid + item + gap / 2,
    # B at mid + item - gap / 2; no pattern sharing, no lattices, no factorisation.
    m, g, s = np.meshgrid(mid, gap, spread, indexing="ij")
    total = np.zeros(m.shape)
    log_w = np.log(compare._GH_WEIGHTS)
    for a_k, a_n, b_k, b_n in zip(ka, na, kb, nb):
        eta = m[..., None] + s[..., None] * compare._GH_NODES
        eta_a, eta_b = eta + g[..., None] / 2, eta - g[..., None] / 2
        per_node = (
            a_k * compare._log_sigmoid(eta_a)
            + (a_n - a_k) * compare._log_sigmoid(-eta_a)
            + b_k * compare._log_sigmoid(eta_b)
            + (b_n - b_k) * compare._log_sigmoid(-eta_b)
        )
        total += special.logsumexp(per_node + log_w, axis=-1)
    return total


@pytest.mark.parametrize("epochs,graded", [(3, False), (1, True), (40, False)])
def test_pattern_likelihood_equals_item_by_item_sum(epochs, graded):
    rng = np.random.default_rng(epochs)
    n_items = 12
    na = nb = np.full(n_items, float(epochs))
    ka = rng.binomial(epochs, 0.7, n_items).astype(float)
    kb = rng.binomial(epochs, 0.4, n_items).astype(float)
    if graded:
        ka, kb = np.round(rng.random(n_items), 2), np.round(rng.random(n_items), 2)
    patterns = pd.DataFrame({"ka": ka, "na": na, "kb": kb, "nb": nb}).value_counts().reset_index(name="count")
    grid = compare._LogitGrid(-7.0, 7.0, 9, -5.0, 5.0, 11, 0.0, 8.0, 5, 1.5, 1.0, 2.5)
    fast = grid.general_log_likelihood(patterns)
    naive = _naive_item_log_likelihood(grid.mid, grid.gap, grid.spread, ka, na, kb, nb)
    assert np.isfinite(fast).all()  # 40 epochs at the grid corners underflow the product form: stabilised fallback
    assert np.allclose(fast, naive, rtol=1e-10, atol=1e-8)


def test_model_profile_renders_its_plot_again_only_when_what_it_shows_changed(planted_lake, tmp_path, monkeypatch):
    import shutil

    import evalpipeline.plots as plots

    lake = Lake(tmp_path / "copy")
    shutil.copytree(planted_lake.root, lake.root)
    build_model_profile(lake, "twin a")
    forest = lake.root / "model_profile" / "model=twin%20a" / "plots" / "forest.png"
    before = forest.read_bytes()
    drawn = []
    real = plots.forest_plot
    monkeypatch.setattr(plots, "forest_plot", lambda *a, **k: drawn.append(k["title"]) or real(*a, **k))
    # another model joins the suite: twin a's rank and model count change, its plotted posterior does not
    write_samples(lake, "newcomer", "quiz", np.ones((30, 2)))
    build_suite_comparison(lake, "quiz")
    profile = build_model_profile(lake, "twin a").set_index("suite")
    assert profile.loc["quiz", "n_models"] == 4 and drawn == [] and forest.read_bytes() == before
    # its own samples change: the plot is drawn again
    write_samples(lake, "twin a", "quiz", np.zeros((30, 2)))
    build_suite_comparison(lake, "quiz")
    build_model_profile(lake, "twin a")
    assert drawn == ["twin a across suites"] and forest.read_bytes() != before


def test_leaderboard_counts_each_models_scored_rows_whatever_the_others_hold():
    # rows interleaved by model; an errored row's score is not a number and must not be read as one
    from evalpipeline.steps.comparison import ComparisonSettings, suite_leaderboard_table

    samples = pd.DataFrame(
        {
            "model": ["a", "b", "a", "b", "c", "a"],
            "item_id": ["1", "1", "2", "2", "1", "2"],
            "score": [1.0, 0.0, 0.0, 1.0, "ERR", None],
            "error": [None, None, None, None, "timeout", None],
        },
        dtype=object,
    )
    board = suite_leaderboard_table(samples, "s", ComparisonSettings(rank_draws=500)).set_index("model")
    assert board.loc[["a", "b", "c"], "k"].tolist() == [1.0, 1.0, 0.0]
    assert board.loc[["a", "b", "c"], "n"].tolist() == [2, 2, 0]
    assert board.loc[["a", "b", "c"], "n_items"].tolist() == [2, 2, 0]
    numeric = suite_leaderboard_table(
        samples.assign(score=[1.0, 0.0, 0.0, 1.0, np.nan, np.nan]), "s", ComparisonSettings(rank_draws=500)
    ).set_index("model")
    pd.testing.assert_frame_equal(board, numeric)


def test_the_ui_previews_the_verdicts_that_decide_a_large_suites_ranking(tmp_path):
    """Above 50 pairs the suite_comparison asset's verdict preview walks down the leaderboard (each model
    against the leader and the one ranked above), not the table's first rows, and says where the rest are."""
    import logging

    from assets.compare import VERDICTS_SHOWN, _comparison
    from evalpipeline.steps.comparison import ranking_pairs
    from evalpipeline.lake.keys import to_partition_key
    from resources.lake import LakeResource

    rng = np.random.default_rng(5)
    lake = Lake(tmp_path / "lake")
    difficulty = rng.normal(0.0, 1.0, 12)
    for i in range(11):  # 55 pairs
        write_samples(lake, f"m{i:02d}", "big", planted_scores(rng, difficulty, 0.4 * i - 2.0, epochs=1))
    result = _comparison(LakeResource(root=str(lake.root)), to_partition_key("big"), logging.getLogger("test"))
    text = result.metadata["verdicts"].value
    pairs = pd.read_parquet(lake.root / "suite_comparison" / f"suite={to_partition_key('big')}" / "pairwise.parquet")
    board = pd.read_parquet(lake.root / "suite_comparison" / f"suite={to_partition_key('big')}" / "leaderboard.parquet")
    assert len(pairs) == 55 > VERDICTS_SHOWN
    expected = ranking_pairs(pairs, board)
    assert len(expected) == 2 * 10 - 1
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines == [
        f"- {a} vs {b}: {v}" for a, b, v in zip(expected["model_a"], expected["model_b"], expected["verdict"])
    ]
    leader, second = board.sort_values("rank")["model"].iloc[:2]
    assert {leader, second} == set(pairs.loc[expected.index[0], ["model_a", "model_b"]])
    assert "each model against the leader" in text and "every pair of the 55 is in pairwise.parquet" in text


def test_comparisons_and_profiles_read_only_the_columns_they_need_and_get_what_the_full_tables_give(tmp_path):
    """build_suite_comparison and model profiles read the attempt, score, error and limit columns alone
    (COMPARISON_COLUMNS, COUNTING_COLUMNS); an errored or limit-hit attempt must still not count, so the
    tables equal those computed from the full sample tables."""
    from evalpipeline.steps.comparison import (
        COMPARISON_COLUMNS,
        model_profile_table,
        read_suite_samples,
        suite_leaderboard_table,
        suite_pairwise_table,
    )

    rng = np.random.default_rng(5)
    lake = Lake(tmp_path)
    difficulty = rng.normal(0.0, 1.0, 25)
    for i, model in enumerate(("a", "b", "c")):
        write_samples(lake, model, "quiz", planted_scores(rng, difficulty, 0.5 * i))
    path = lake.table_path("samples", "samples.parquet", "b", "quiz")
    frame = pd.read_parquet(path)
    frame.loc[frame.index[:7], "error"] = "timeout"  # counted by score alone, b would have 7 more attempts
    frame.loc[frame.index[7:10], "limit"] = "tokens"
    write_parquet_atomic(pa.Table.from_pandas(frame, preserve_index=False), path)

    settings = ComparisonSettings()
    narrow = read_suite_samples(lake, "quiz", COMPARISON_COLUMNS)
    assert set(narrow.columns) == {"model", *COMPARISON_COLUMNS} - {"cluster"}  # the planted tables declare none
    full = read_suite_samples(lake, "quiz")
    result = build_suite_comparison(lake, "quiz", settings)
    pd.testing.assert_frame_equal(result.leaderboard, suite_leaderboard_table(full, "quiz", settings))
    pd.testing.assert_frame_equal(
        result.pairwise.reset_index(drop=True),
        suite_pairwise_table(full, "quiz", settings, None, None, None).reset_index(drop=True),
    )
    assert result.leaderboard.set_index("model").loc["b", "n"] == len(frame) - 10
    pooled = model_profile_table(lake, "b", settings).set_index("scope").loc["pooled"]
    assert pooled["n"] == len(frame) - 10 and pooled["k"] == frame["score"].iloc[10:].sum()


# ------------------------------------------------------------------ classification metrics


def _labelled_csv(path, rows) -> None:
    """A long table of (model, item_id, epoch, answer, target[, error]) rows on suite "mc", scored by equality."""
    lines = ["model,suite,item_id,epoch,score,answer,target,error"]
    for model, item, epoch, answer, target, *error in rows:
        score = int(answer == target) if answer is not None else 0
        lines.append(f"{model},mc,{item},{epoch},{score},{answer or ''},{target},{error[0] if error else ''}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_a_labelled_suite_gets_per_class_f1_tables_beside_its_comparison(tmp_path):
    from evalpipeline.steps.classification import (
        CLASSIFICATION_COLUMNS,
        CLASSIFICATION_PAIRWISE_COLUMNS,
        MACRO_LABEL,
        OTHER_LABEL,
    )
    from evalpipeline.ingest import ingest_paths

    rng = np.random.default_rng(3)
    targets = {f"q{i:02d}": "ABC"[i % 3] for i in range(30)}
    rows = []
    for model, p_right in (("good", 0.9), ("poor", 0.45)):
        for item, target in targets.items():
            for epoch in (1, 2):
                answer = target if rng.random() < p_right else rng.choice([c for c in "ABC" if c != target])
                rows.append((model, item, epoch, str(answer), target))
    rows[5] = ("good", "q02", 2, None, "C")  # no answer: counted by the leaderboard, not classified
    rows[70] = ("poor", "q05", 1, "none of these", "C")  # outside the targets: predicted (other)
    rows[71] = ("poor", "q05", 2, "C", "C", "timeout")  # errored: not counted anywhere
    lake = Lake(tmp_path / "lake")
    _labelled_csv(tmp_path / "in" / "mc.csv", rows)
    assert not ingest_paths([tmp_path / "in" / "mc.csv"], lake).file_errors

    result = build_suite_comparison(lake, "mc")
    per_class = pd.read_parquet(result.directory / "classification.parquet")
    pairwise = pd.read_parquet(result.directory / "classification_pairwise.parquet")
    assert list(per_class.columns) == list(CLASSIFICATION_COLUMNS)
    assert list(pairwise.columns) == list(CLASSIFICATION_PAIRWISE_COLUMNS)
    labels = ["A", "B", "C", OTHER_LABEL, MACRO_LABEL]
    assert per_class["model"].tolist() == ["good"] * 5 + ["poor"] * 5 and per_class["class"].tolist() == labels * 2
    table = per_class.set_index(["model", "class"])
    counted = [r for r in rows if len(r) == 5 and r[3] is not None]
    for model in ("good", "poor"):
        mine = [r for r in counted if r[0] == model]
        assert table.loc[(model, MACRO_LABEL), "n"] == len(mine)
        assert table.loc[(model, MACRO_LABEL), "n_correct"] == sum(r[3] == r[4] for r in mine)
        for label in "ABC":
            assert table.loc[(model, label), "n"] == sum(r[4] == label for r in mine)
            assert table.loc[(model, label), "n_predicted"] == sum(r[3] == label for r in mine)
        scored = table.loc[model].drop(index=OTHER_LABEL)  # (other) has no metrics: no attempt's target
        assert (scored["f1_low"] <= scored["f1_mean"]).all() and (scored["f1_mean"] <= scored["f1_high"]).all()
    assert (
        table.loc[("good", MACRO_LABEL), "n_unlabelled"] == 1 and table.loc[("poor", MACRO_LABEL), "n_unlabelled"] == 0
    )
    assert table.loc[("poor", OTHER_LABEL), "n_predicted"] == 1 and table.loc[("good", OTHER_LABEL), "n_predicted"] == 0
    assert table.loc[("good", MACRO_LABEL), "f1_mean"] > table.loc[("poor", MACRO_LABEL), "f1_high"]
    assert pairwise["class"].tolist() == ["A", "B", "C", MACRO_LABEL]
    assert (pairwise["model_a"] == "good").all() and pairwise.set_index("class").loc[
        MACRO_LABEL, "p_a_better_f1"
    ] > 0.99

    files = [result.directory / "classification.parquet", result.directory / "classification_pairwise.parquet"]
    mtimes = [p.stat().st_mtime_ns for p in files]
    build_suite_comparison(lake, "mc")  # seeded: the same bytes, not rewritten
    assert [p.stat().st_mtime_ns for p in files] == mtimes

    _labelled_csv(tmp_path / "in" / "mc.csv", [(m, i, e, None, t) for m, i, e, _a, t, *_ in rows])  # answers gone
    ingest_paths([tmp_path / "in" / "mc.csv"], lake)
    build_suite_comparison(lake, "mc")
    assert not any(p.exists() for p in files)  # nothing classified: the earlier tables are removed


def test_labels_that_are_not_classes_are_not_classified():
    from evalpipeline.steps.classification import MAX_CLASSES, suite_classification, suite_classification_tables

    def samples(targets, answers=None, items=None):
        return pd.DataFrame(
            {
                "model": "m",
                "item_id": items or [f"q{i}" for i in range(len(targets))],
                "score": 1.0,
                "answer": answers or targets,
                "target": targets,
            }
        )

    free_text = suite_classification(samples([f"{i} + {i} = {2 * i}" for i in range(6)]))
    assert free_text.not_computed == "no two items share a target: free-text references, not class labels"
    many = suite_classification(samples([f"label {i}" for i in range(MAX_CLASSES + 1)] * 2))
    assert many.not_computed.startswith(f"{MAX_CLASSES + 1} distinct targets, more than {MAX_CLASSES}")
    unlabelled = samples(["A", "B"]).drop(columns=["answer", "target"])  # a table written before labels were kept
    per_class, pairwise = suite_classification_tables(unlabelled)
    assert per_class.empty and pairwise.empty
    reserved = suite_classification(samples(["(other)", "(other)", "A", "A"]))
    assert reserved.not_computed.startswith("a target is '(other)'")
    with pytest.raises(ValueError, match=r"lack column\(s\) \['score'\]"):
        suite_classification(samples(["A"]).drop(columns="score"))
    one_model = suite_classification(samples(["A", "B", "A", "B"], ["A", "A", "A", "B"]))
    assert one_model.not_computed is None and one_model.pairwise.empty and len(one_model.per_class) == 3
    silent = pd.concat([samples(["A", "B", "A", "B"]), samples(["A", "B"]).assign(model="quiet", answer=None)])
    listed = suite_classification(silent).per_class.set_index(["model", "class"])
    assert listed.loc[("quiet", "(macro)"), ["n", "n_unlabelled"]].tolist() == [0, 2]  # listed, not dropped
    assert np.isnan(listed.loc[("quiet", "(macro)"), "f1_mean"]) and len(listed.loc["quiet"]) == 1


def test_judge_corrected_columns_reproduce_the_posts_example(tmp_path):
    # The post's judge example: 323 of 400 answers passed by the judge; on a calibration set it passed 72 of 80
    # answers humans marked correct and failed 51 of 60 marked wrong. With the uniform prior the post's prior
    # sweep gives 0.884 [0.796, 0.979] (PyMC); the naive reading 0.804 [0.764, 0.842] misses the planted 0.85.
    from evalpipeline.report.build import build_report
    from evalpipeline.stats.judge import JudgeCalibration

    lake = Lake(tmp_path / "lake")
    write_samples(lake, "judged", "qa", np.r_[np.ones(323), np.zeros(77)][:, None])
    write_samples(lake, "other", "qa", np.r_[np.ones(300), np.zeros(100)][:, None])
    judge = JudgeCalibration("match", good_passed=72, n_good=80, bad_failed=51, n_bad=60)
    settings = ComparisonSettings(judges=(judge,))
    board = build_suite_comparison(lake, "qa", settings).leaderboard.set_index("model")
    row = board.loc["judged"]
    assert row["judge"] == "match" and row["judge_note"] is None
    assert [row["judge_mean"], row["judge_low"], row["judge_high"]] == pytest.approx([0.884, 0.796, 0.979], abs=0.006)
    assert row["posterior_mean"] == pytest.approx(324 / 402)  # the headline stays the judge's reading
    # a graded model on the same scorer is not corrected, and says why; a judge of another scorer is warned of
    unknown = JudgeCalibration("model_graded_qa", sensitivity=0.9, specificity=0.9)
    graded = np.full((10, 1), 0.5)
    write_samples(lake, "graded", "qa", graded)
    board = build_suite_comparison(lake, "qa", ComparisonSettings(judges=(judge, unknown))).leaderboard.set_index(
        "model"
    )
    assert np.isnan(board.loc["graded", "judge_mean"]) and "graded scores" in board.loc["graded", "judge_note"]
    html = build_report(lake, "now", judges=("match", "model_graded_qa")).read_text()
    assert "[judge.model_graded_qa] corrected nothing" in html and "[judge.match]" not in html


def test_repeats_are_said_in_words_and_subsets_flagged(tmp_path):
    from evalpipeline.report.build import build_report

    rng = np.random.default_rng(5)
    lake = Lake(tmp_path / "lake")
    rates = rng.beta(1.4, 0.6, 40)
    write_samples(lake, "full", "qa", (rng.random((40, 5)) < rates[:, None]).astype(float))
    write_samples(lake, "partial", "qa", (rng.random((8, 5)) < rates[:8, None]).astype(float))
    result = build_suite_comparison(lake, "qa")
    board = result.leaderboard.set_index("model")
    assert board.loc["full", "subset_flag"] is None
    assert board.loc["partial", "subset_flag"].startswith("counted on 8 of the suite's 40 items")
    assert board.loc["full", "n_effective"] < 200 and board.loc["full", "independent_flag"] is not None
    html = build_report(lake, "now").read_text()
    effective = int(round(board.loc["full", "n_effective"]))
    assert f"5 repeats of 40 questions carried the information of about {effective} independent questions" in html
    assert "Not comparable by raw success rate: partial was counted on 8" in html
