"""GLM fits over a lake (evalpipeline/steps/fits.py, steps/rankings.py): provenance reuse, disabled and failing fits
reported and never ranked, WAIC/LOO rankings and the per-suite WAIC plot."""

import dataclasses

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipeline.steps.fits import GlmConfig, fit_partition_glm, fit_suite_glm, read_outcome, suite_fit_dir
from evalpipeline.steps.rankings import waic_plot_path, write_waic_rankings
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.models import DiagnosticThresholds, FitSettings
from tests.test_comparison import planted_scores, write_samples

FAST = FitSettings(num_warmup=300, num_samples=300)
LENIENT = DiagnosticThresholds(min_ess_bulk=100, min_ess_tail=100, max_r_hat=1.05)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    rng = np.random.default_rng(3)
    lake = Lake(tmp_path_factory.mktemp("lake"))
    difficulty = rng.normal(0.0, 1.0, 40)
    write_samples(lake, "strong", "quiz", planted_scores(rng, difficulty, 2.0))
    write_samples(lake, "weak", "quiz", planted_scores(rng, difficulty, -0.5))
    return lake


@pytest.mark.slow
def test_fits_are_reused_disabled_or_excluded_and_the_rest_ranked(lake):
    config = GlmConfig(FAST, LENIENT, models=("binomial", "null", "suite_binomial", "suite_null"))
    first = fit_partition_glm(lake, "strong", "quiz", "binomial", config, version="v1")
    assert first.status == "fitted" and first.passed
    checks = pd.read_parquet(first.directory / "predictive.parquet")
    assert set(checks["check"]) == {"prior", "posterior"} and (first.directory / "predictive.png").exists()
    # HiBayES Figures 4-6 per fit: traces/ranks and the forest of success rates beside the empirical means
    from PIL import Image

    for name in ("trace.png", "forest.png"):
        with Image.open(first.directory / name) as image:
            assert image.format == "PNG" and image.width > 300, name
    again = fit_partition_glm(lake, "strong", "quiz", "binomial", config, version="v1")
    assert again.status == "reused"  # same inputs, code and settings: no sampling
    # the log moved or renamed (same bytes): only log_path changes, and the fit is reused;
    # a changed score refits
    samples_path = lake.table_path("samples", "samples.parquet", "strong", "quiz")
    original = pd.read_parquet(samples_path)
    for where in ("/landing/a.eval", "/landing/archive/renamed.eval"):
        write_parquet_atomic(pa.Table.from_pandas(original.assign(log_path=where), preserve_index=False), samples_path)
        assert fit_partition_glm(lake, "strong", "quiz", "binomial", config, version="v1").status == "reused"
    changed = original.assign(log_path=where)
    changed.loc[0, "score"] = 1.0 - changed.loc[0, "score"]
    write_parquet_atomic(pa.Table.from_pandas(changed, preserve_index=False), samples_path)
    assert fit_partition_glm(lake, "strong", "quiz", "binomial", config, version="v1").status == "fitted"
    write_parquet_atomic(pa.Table.from_pandas(original, preserve_index=False), samples_path)
    assert fit_partition_glm(lake, "strong", "quiz", "binomial", config, version="v2").status == "fitted"

    disabled = fit_partition_glm(lake, "strong", "quiz", "beta_binomial", config, version="v1")
    assert disabled.status == "not applicable" and "disabled" in disabled.reason

    # r-hat <= 0.5 cannot be met: the fit is retried once, stored, and marked failed
    strict = dataclasses.replace(config, thresholds=dataclasses.replace(LENIENT, max_r_hat=0.5))
    failed = fit_partition_glm(lake, "strong", "quiz", "null", strict, version="v1")
    assert failed.status == "fitted" and not failed.passed and len(failed.attempts) == 2
    assert read_outcome(failed.directory).passed is False

    for glm in ("suite_binomial", "suite_null"):
        assert fit_suite_glm(lake, "quiz", glm, config, version="v1").passed

    table, path = write_waic_rankings(lake)
    assert pd.read_parquet(path).equals(table)
    assert table.attrs == {"groups_computed": 2, "groups_reused": 0}  # the partition and the suite
    stored = path.read_bytes()
    again, _ = write_waic_rankings(lake)  # unchanged fits: read back, same bytes
    assert again.attrs == {"groups_computed": 0, "groups_reused": 2} and path.read_bytes() == stored
    assert write_waic_rankings(lake, pareto_k_threshold=0.5)[0].attrs["groups_computed"] == 2
    table, path = write_waic_rankings(lake)
    assert table.attrs["groups_computed"] == 2 and path.read_bytes() == stored
    partition = table[table["scope"] == "partition"].set_index("glm")
    assert partition.loc["binomial", "excluded"] == "" and np.isfinite(partition.loc["binomial", "elpd_waic"])
    assert partition.loc["null", "excluded"] == "failed diagnostics: r_hat"
    assert partition.loc["beta_binomial", "excluded"].startswith("not applicable: disabled")
    suite = table[(table["scope"] == "suite") & (table["excluded"] == "")]
    assert sorted(suite["glm"]) == ["suite_binomial", "suite_null"]
    assert sorted(suite["waic_rank"]) == [0, 1] and suite["waic_weight"].sum() == pytest.approx(1.0)
    assert waic_plot_path(lake, "quiz").exists()
    # Ranks and counts are whole numbers in the file, null for excluded candidates; so they stay
    # when the rows are copied from a file an older release wrote with them as doubles.
    whole = ["waic_rank", "loo_rank", "n_pareto_k_high", "n_units"]
    older = pd.read_parquet(path).astype(dict.fromkeys(whole, "float64"))
    older.to_parquet(path, index=False)
    for reread in (write_waic_rankings(lake)[0], pd.read_parquet(path)):
        assert reread.attrs.get("groups_reused", 2) == 2
        assert all(str(reread[c].dtype) == "Int64" for c in whole), reread.dtypes
    schema = pq.read_schema(path)
    assert {c: str(schema.field(c).type) for c in [*whole, "waic_warning"]} == {
        **dict.fromkeys(whole, "int64"),
        "waic_warning": "bool",
    }
    assert pd.read_parquet(path).query("excluded != ''")["waic_rank"].isna().all()

    # The rankings come from each fit's stored criteria.parquet, not its posterior: with the suite
    # posteriors unreadable a recompute gives the same table. A fit stored without criteria (written
    # before they were) falls back to its posterior, with the same numbers.
    suite_dirs = [suite_fit_dir(lake, "quiz", glm) for glm in ("suite_binomial", "suite_null")]
    assert suite_dirs and all((d / "criteria.parquet").exists() for d in suite_dirs)
    for directory in suite_dirs:
        (directory / "posterior.nc").write_bytes(b"unreadable")
    recomputed, _ = write_waic_rankings(lake, pareto_k_threshold=0.5)
    recomputed, _ = write_waic_rankings(lake)
    assert recomputed.attrs["groups_computed"] == 2 and recomputed.drop(columns="inputs_hash").equals(
        table.drop(columns="inputs_hash")
    )
    # posterior.nc holds no log-likelihood by default ([glm] store_log_likelihood): the fallback has
    # nothing to compute from and says so. A fit stored with it (a setting that refits, same draws)
    # has the same criteria, and falls back to its posterior with the same numbers.
    partition_fit = first.directory
    (partition_fit / "criteria.parquet").unlink()
    with pytest.raises(ValueError, match="criteria.parquet is missing and posterior.nc holds no log-likelihood"):
        write_waic_rankings(lake, pareto_k_threshold=0.5)
    kept = dataclasses.replace(config, settings=dataclasses.replace(FAST, store_log_likelihood=True))
    assert fit_partition_glm(lake, "strong", "quiz", "binomial", kept, version="v1").status == "fitted"
    stored, _ = write_waic_rankings(lake)
    assert stored.drop(columns="inputs_hash").equals(table.drop(columns="inputs_hash"))
    (partition_fit / "criteria.parquet").unlink()
    fallback, _ = write_waic_rankings(lake, pareto_k_threshold=0.5)
    fallback, _ = write_waic_rankings(lake)
    assert fallback.drop(columns="inputs_hash").equals(table.drop(columns="inputs_hash"))

    # A candidate folder without a complete fit is listed with the reason, not dropped: a fit file
    # deleted after its record was written (the rows change with it, though the record does not),
    # and a first fit killed before its record was.
    (suite_dirs[1] / "summary.parquet").unlink()
    listed, _ = write_waic_rankings(lake)
    assert listed.attrs["groups_computed"] == 1  # the suite's group; the partition's rows are reused
    assert listed[listed["glm"] == "suite_null"]["excluded"].tolist() == [
        "no stored fit: summary.parquet missing; materialise it again to refit"
    ]
    killed = suite_fit_dir(lake, "quiz", "suite_nested")
    killed.mkdir()
    (killed / "posterior.nc").write_bytes(b"half written")
    listed, _ = write_waic_rankings(lake)
    suite = listed[listed["scope"] == "suite"].set_index("glm")
    assert sorted(suite.index) == ["suite_binomial", "suite_nested", "suite_null"]
    assert (
        suite.loc["suite_null", "excluded"] == "no stored fit: summary.parquet missing; materialise it again to refit"
    )
    assert suite.loc["suite_nested", "excluded"].startswith("no stored fit: provenance.json is missing")
    assert suite.loc["suite_binomial", "excluded"] == "" and suite.loc["suite_binomial", "waic_rank"] == 0
    assert not waic_plot_path(lake, "quiz").exists()  # one suite GLM left to rank: no comparison to plot


def test_a_disabled_glm_is_recorded_without_reading_its_data(lake, monkeypatch):
    """A GLM left out of `[glm] models` is recorded as not applicable without reading or hashing the
    samples: at 100 models each left-out suite GLM spent ~3 s a refresh reading its suite's tables. Its
    record does not change with the data, and a suite with no data still fails with NoDataError."""
    from evalpipeline.steps import fits
    from evalpipeline.steps.samples import NoDataError

    config = GlmConfig(FAST, LENIENT, models=("binomial",))

    def no_reading(*args, **kwargs):
        raise AssertionError("a disabled GLM read the samples")

    monkeypatch.setattr(fits, "samples_content_hash", no_reading)
    monkeypatch.setattr(Lake, "read_files", no_reading)
    suite = fit_suite_glm(lake, "quiz", "suite_beta_binomial", config, version="v1")
    partition = fit_partition_glm(lake, "weak", "quiz", "item_difficulty", config, version="v1")
    for outcome in (suite, partition):
        assert outcome.status == "not applicable" and outcome.reason.startswith("disabled: not in [glm] models")
        stored = read_outcome(outcome.directory)
        assert stored.status == "not applicable" and stored.reason == outcome.reason
    record = (suite.directory / "provenance.json").stat().st_mtime_ns
    assert fit_suite_glm(lake, "quiz", "suite_beta_binomial", config, version="v1").status == "not applicable"
    assert (suite.directory / "provenance.json").stat().st_mtime_ns == record  # written once
    with pytest.raises(NoDataError, match="no sample tables for suite 'absent'"):
        fit_suite_glm(lake, "absent", "suite_beta_binomial", config, version="v1")


def test_a_suites_samples_are_read_as_one_frame_with_each_tables_own_content_hash(tmp_path):
    """suite_samples reads a suite's tables into one frame and hashes each table from its slice of it.
    Each model's rows must be its table's, and each digest samples_content_hash of that table alone
    (what the reuse of a fit compares): also when one table's schema differs, and then the frame is
    pandas' concatenation of the tables."""
    import pyarrow.parquet as pq

    from evalpipeline.steps.fits import samples_content_hash, suite_samples

    rng = np.random.default_rng(5)
    lake = Lake(tmp_path)
    write_samples(lake, "a", "quiz", planted_scores(rng, rng.normal(size=12), 0.0))
    write_samples(lake, "b/large", "quiz", planted_scores(rng, rng.normal(size=7), 1.0, epochs=3))
    write_samples(lake, "c", "quiz", planted_scores(rng, rng.normal(size=1), 0.0, epochs=1))

    def check():
        frame, hashes = suite_samples(lake, "quiz")
        tables = lake.sample_tables(suite="quiz")
        assert frame.columns[0] == "model" and list(frame["model"].unique()) == [m for m, _s, _p in tables]
        assert hashes == {model: samples_content_hash(path) for model, _suite, path in tables}
        assert len(set(hashes.values())) == 3
        alone = pd.concat([pq.read_table(path).to_pandas() for _m, _s, path in tables], ignore_index=True)
        pd.testing.assert_frame_equal(frame.drop(columns="model"), alone, check_exact=True)

    check()
    path = lake.table_path("samples", "samples.parquet", "b/large", "quiz")
    table = pq.read_table(path)
    write_parquet_atomic(table.append_column("difficulty", pa.array(np.linspace(0, 1, table.num_rows))), path)
    check()


@pytest.mark.slow
def test_a_beta_binomial_the_data_cannot_identify_is_not_fitted_and_the_tables_say_why(tmp_path):
    """With repeats the beta-binomial is fitted. Once every item has one attempt its overdispersion is
    not identified: rerun on such tables, the partition and suite beta-binomials are recorded as not
    applicable with the reason, nothing of the earlier fit stays in the folder, and the suite's fit
    status table and the rankings give the reason; the binomial models are fitted as before."""
    from evalpipeline.steps.comparison import suite_fit_status

    rng = np.random.default_rng(9)
    lake = Lake(tmp_path)
    difficulty = rng.normal(0.0, 1.0, 30)
    shifts = {"a": 1.0, "b": -0.5}
    for model, shift in shifts.items():
        write_samples(lake, model, "quiz", planted_scores(rng, difficulty, shift, epochs=2))
    config = GlmConfig(FAST, LENIENT, models=("binomial", "beta_binomial", "suite_binomial", "suite_beta_binomial"))
    repeated = fit_partition_glm(lake, "a", "quiz", "beta_binomial", config, version="v1")
    assert repeated.status == "fitted"
    written = {path.name for path in repeated.directory.iterdir()}
    assert {"posterior.nc", "criteria.parquet", "predictive.parquet", "predictive.png", "forest.png"} <= written

    for model, shift in shifts.items():  # the same items, one attempt each
        write_samples(lake, model, "quiz", planted_scores(rng, difficulty, shift, epochs=1))
    once = fit_partition_glm(lake, "a", "quiz", "beta_binomial", config, version="v1")
    assert once.status == "not applicable"
    assert once.reason.startswith(
        "every item has one countable attempt: the beta-binomial's overdispersion phi is not identified"
    )
    assert sorted(path.name for path in once.directory.iterdir()) == ["provenance.json"]
    assert read_outcome(once.directory).reason == once.reason
    assert fit_partition_glm(lake, "a", "quiz", "binomial", config, version="v1").status == "fitted"
    suite = fit_suite_glm(lake, "quiz", "suite_beta_binomial", config, version="v1")
    assert suite.status == "not applicable" and suite.reason.startswith("every LLM's item has one countable attempt")
    assert fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1").status == "fitted"

    status = suite_fit_status(lake, "quiz")[0].set_index("glm")
    assert status.loc["suite_beta_binomial", "status"] == "not applicable"
    assert status.loc["suite_beta_binomial", "reason"] == suite.reason
    assert not status.loc["suite_beta_binomial", "used"]
    assert status.loc["suite_binomial", "status"] == "reused" and status.loc["suite_binomial", "reason"] == ""
    table, _ = write_waic_rankings(lake)
    excluded = table.set_index(["scope", "glm"])["excluded"]
    assert excluded[("partition", "beta_binomial")] == f"not applicable: {once.reason}"
    assert excluded[("suite", "suite_beta_binomial")] == f"not applicable: {suite.reason}"
    assert not excluded[("partition", "binomial")].startswith("not applicable")
    assert not excluded[("suite", "suite_binomial")].startswith("not applicable")


def test_a_sampler_asked_for_a_glm_that_no_longer_applies_is_not_prepared(tmp_path):
    """A request to prepare a suite GLM's sampler, made before the tables changed, for a GLM the suite's
    tables (with one LLM more) cannot identify is dropped with the reason, nothing compiled."""
    import json

    from evalpipeline.models import Fitter
    from evalpipeline.models.fit import preparation_requests
    from evalpipeline.steps.fits import prepare_requested_samplers

    rng = np.random.default_rng(4)
    lake, programs = Lake(tmp_path / "lake"), tmp_path / "programs"
    difficulty = rng.normal(0.0, 1.0, 10)
    for model in ("a", "b"):
        write_samples(lake, model, "quiz", planted_scores(rng, difficulty, 0.0, epochs=1))
    (programs / "requests").mkdir(parents=True)
    (programs / "requests" / "beta.json").write_text(
        json.dumps({"suite": "quiz", "glm": "suite_beta_binomial", "lake": str(lake.root.resolve()), "reason": "test"})
    )
    fitter = Fitter(program_cache=programs)
    (record,) = prepare_requested_samplers(lake, GlmConfig(FAST, LENIENT), fitter)
    assert record["done"].startswith("skipped: not applicable: every LLM's item has one countable attempt")
    assert not preparation_requests(programs) and fitter.stats()["compilations"] == 0
