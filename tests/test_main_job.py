"""The main job end to end on the demo logs: every stage, the declared column types against the files,
a rerun that rewrites nothing, the nightly after a model joins, and failing fits confined to their
partition or suite."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from dagster import AssetKey, DagsterInstance, MultiPartitionKey, materialize

from assets.partitions import model_suite_key
from assets.status import PID_TAG
from evalpipeline.definitions import defs
from resources.run.loop import run_main_job
from evalpipeline.lake.keys import to_partition_key
from resources import LakeResource
from tests.conftest import DEMO_LOGS


#: Short chains and one candidate GLM per scope keep the end-to-end test affordable; the paper's
#: defaults are what `make demo` runs. Thresholds are lowered to what 4 x 500 draws can show.
FAST_GLM_CONFIG = """
[glm]
models = ["binomial", "suite_binomial"]
num_warmup = 500
num_samples = 500
[glm.thresholds]
min_ess_bulk = 200
min_ess_tail = 200
max_r_hat = 1.05
"""


def _lake_files(lake):
    """Every file of the lake but the JAX cache and GX's Data Docs (a dated validation report)."""
    skip = {".cache", "data_docs"}
    return {p: p.read_bytes() for p in lake.rglob("*") if p.is_file() and not skip & set(p.parts)}


#: Where each asset with a column schema writes the table the schema describes.
_SCHEMA_FILES = {
    "eval_samples": "samples/*/*/samples.parquet",
    "accuracy_posteriors": "accuracy_posteriors/*/*/posteriors.parquet",
    "suite_leaderboard": "suite_leaderboard/*/leaderboard.parquet",
    "suite_comparison": "suite_comparison/*/leaderboard.parquet",
    "model_profile": "model_profile/*/profile.parquet",
    "ingest_accounting": "ingest_accounting/accounting.parquet",
    "waic_rankings": "waic_rankings/rankings.parquet",
    "reliability": "reliability/*/*/expected_reliability.parquet",
    "model_reliability": "model_reliability/*/expected_reliability.parquet",
    **{
        f"glm_{g}": f"glm_fits/*/*/{g}/summary.parquet"
        for g in ("binomial", "beta_binomial", "null", "item_difficulty")
    },
    **{
        f"suite_glm_{g}": f"glm_suite_fits/*/suite_{g}/summary.parquet"
        for g in ("nested", "binomial", "beta_binomial", "null")
    },
}


def _assert_declared_column_types_match_the_files(lake):
    """Every column the UI's schema of an asset declares has the type its files hold, and the files hold
    no undeclared column and no column typed null (a text column empty in one file: readers of a folder
    or glob refuse null next to string)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def kind(arrow_type) -> str | None:
        for test, name in (
            (pa.types.is_null, None),
            (pa.types.is_integer, "int64"),
            (pa.types.is_floating, "double"),
            (pa.types.is_boolean, "bool"),
            (pa.types.is_string, "string"),
            (pa.types.is_large_string, "string"),
        ):
            if test(arrow_type):
                return name
        return str(arrow_type)

    schemas = {
        key.to_user_string(): assets_def.metadata_by_key[key]["dagster/column_schema"]
        for assets_def in defs.assets
        for key in assets_def.keys
        if "dagster/column_schema" in assets_def.metadata_by_key.get(key, {})
    }
    assert set(schemas) == set(_SCHEMA_FILES), set(schemas) ^ set(_SCHEMA_FILES)
    checked = 0
    for asset, pattern in _SCHEMA_FILES.items():
        declared = {column.name: column.type for column in schemas[asset].columns}
        for path in lake.glob(pattern):
            for field in pq.read_schema(path):
                if field.name in ("model", "suite") and field.name not in declared:
                    continue  # hive partition columns, from the folder names
                assert field.name in declared or field.name.startswith("cov_"), (asset, path, field.name)
                expected = declared.get(field.name)
                # eval_samples declares its arrow types exactly (evalpipeline.schema); the others by kind
                found = kind(field.type) if expected in (None, "int64", "double", "bool", "string") else str(field.type)
                assert not pa.types.is_null(field.type), (asset, path, field.name)
                assert expected is None or found == expected, (asset, path, field.name, found, expected)
                checked += 1
    assert checked > 300, checked


@pytest.mark.slow
def test_main_job_runs_the_demo_graph_and_is_safe_to_run_twice(tmp_path, monkeypatch, capsys):
    landing = tmp_path / "landing"
    landing.mkdir()
    # two of the four demo models on all three suites keep the test affordable
    for log in DEMO_LOGS.iterdir():
        if "atlas-large" in log.name or "cirrus 7b" in log.name:
            shutil.copy(log, landing / log.name)
    (landing / "broken.eval").write_bytes(b"not a zip")  # reported and recorded, the rest still runs
    lake = tmp_path / "lake"
    monkeypatch.chdir(tmp_path)  # relative paths, as `make demo` uses them
    (tmp_path / "evalpipeline.toml").write_text(FAST_GLM_CONFIG)
    monkeypatch.setenv("EVALPIPELINE_LANDING", "landing")
    monkeypatch.setenv("EVALPIPELINE_LAKE", "lake")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("resources.run.loop.PROGRESS_SECONDS", 2.0)  # a progress line every 2 s, not 15
    assert run_main_job() == 1  # the unreadable log: held-back data, as a nightly must report it
    _assert_declared_column_types_match_the_files(tmp_path / "lake")
    out = capsys.readouterr().out
    # while the partition range ran: where it was, its steps' partitions done
    progress = [line for line in out.splitlines() if line.startswith("  ... ") and "run(s) ended" in line]
    assert progress and any("under way: ingest_and_fit: " in line and "/6" in line for line in progress), out
    assert out.rstrip().endswith(
        "exit 1: 1 unreadable log(s) in landing (the skipped lines above; recorded under "
        "file_errors/): fix, replace or remove them"
    )
    # one run per stage: the 6 partitions, the 3 suites (twice) and the 2 models are each one range run
    assert "[1/5] ingest_and_fit 6 partitions (mockllm/atlas-large x " in out
    assert "[2/5] suite_analysis 3 partitions (suite " in out and "[3/5] suite_comparisons 3 partitions (suite " in out
    assert "[4/5] model_analysis 2 partitions (model " in out
    assert "[5/5] lake_reports lake-wide tables: ok" in out and "FAILED" not in out
    assert "skipped (unreadable, recorded under file_errors/): landing/broken.eval: cannot read" in out
    assert len(list((lake / "file_errors").glob("*.json"))) == 1
    files = _lake_files(lake)
    assert len(list(lake.glob("samples/model=*/suite=*/samples.parquet"))) == 6
    assert len(list(lake.glob("glm_fits/model=*/suite=*/binomial/posterior.nc"))) == 6
    assert len(list(lake.glob("glm_suite_fits/suite=*/suite_binomial/posterior.nc"))) == 3
    assert len(list(lake.glob("reliability/model=*/suite=*/expected_reliability.parquet"))) == 6
    assert len(list(lake.glob("model_reliability/model=*/plots/cdf_envelopes.png"))) == 2
    assert len(list(lake.glob("suite_comparison/suite=*/pairwise.parquet"))) == 3
    assert len(list(lake.glob("model_profile/model=*/profile.parquet"))) == 2
    assert (lake / "report" / "index.html").exists()

    # A partition's figures are drawn on request ([plots] partitions = "on_request", the default): the
    # nightly drew only those of a fit that failed a blocking check; partition_plots draws the rest
    from assets.plots import partition_plots
    from evalpipeline.steps.fits import read_outcome

    for fit_dir in lake.glob("glm_fits/model=*/suite=*/binomial"):
        assert (fit_dir / "trace.png").exists() == (not read_outcome(fit_dir).passed), fit_dir
    assert not list(lake.glob("reliability/model=*/suite=*/plots/*.png"))
    drawn = materialize(
        [partition_plots],
        partition_key=model_suite_key("mockllm/atlas-large", "arith"),
        instance=DagsterInstance.from_config(os.environ["DAGSTER_HOME"]),
        resources={"lake": LakeResource()},
    )
    assert drawn.success
    metadata = drawn.asset_materializations_for_node("partition_plots")[0].metadata
    assert {
        "plot_binomial_trace",
        "plot_binomial_forest",
        "plot_binomial_predictive",
        "plot_reliability_cdf_envelopes",
        "plot_reliability_expected_reliability",
    } <= set(metadata)
    assert metadata["plot_binomial_trace"].value.startswith(
        "![binomial/trace: mockllm/atlas-large x arith](data:image/png"
    )
    partition = lake / f"glm_fits/model={to_partition_key('mockllm/atlas-large')}/suite=arith/binomial"
    assert all((partition / name).exists() for name in ("trace.png", "forest.png", "predictive.png"))
    # a suite GLM's figures likewise ([plots] suite_fits), drawn by suite_fit_plots
    from assets.plots import suite_fit_plots

    for fit_dir in lake.glob("glm_suite_fits/suite=*/suite_binomial"):
        assert (fit_dir / "trace.png").exists() == (not read_outcome(fit_dir).passed), fit_dir
    drawn = materialize(
        [suite_fit_plots],
        partition_key="arith",
        instance=DagsterInstance.from_config(os.environ["DAGSTER_HOME"]),
        resources={"lake": LakeResource()},
    )
    assert drawn.success
    metadata = drawn.asset_materializations_for_node("suite_fit_plots")[0].metadata
    assert {"plot_suite_binomial_trace", "plot_suite_binomial_forest", "plot_suite_binomial_predictive"} <= set(
        metadata
    )
    suite_fit = lake / "glm_suite_fits/suite=arith/suite_binomial"
    assert all((suite_fit / name).exists() for name in ("trace.png", "forest.png", "predictive.png"))
    files = _lake_files(lake)  # the rerun below must leave the drawn figures as they are

    # Nothing runs twice for the same input: the second run reuses every fit and rewrites nothing.
    # It runs in two worker processes, which must write what the single process wrote, byte for byte.
    instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    runs_before = {run.run_id for run in instance.get_runs()}
    assert run_main_job(workers=2) == 1  # broken.eval is still there
    out = capsys.readouterr().out
    assert "[1/9] ingest_and_fit 3 partitions (mockllm/atlas-large x " in out and "(worker process)" in out
    assert "FAILED" not in out
    assert _lake_files(lake) == files
    new_runs = [run for run in instance.get_runs() if run.run_id not in runs_before]
    worker_pids = {run.tags[PID_TAG] for run in new_runs if run.job_name != "lake_reports"}  # one run: in process
    assert len(new_runs) == 9 and len(worker_pids) == 2 and str(os.getpid()) not in worker_pids
    event = instance.get_latest_materialization_event(AssetKey("glm_binomial"))
    assert event.asset_materialization.metadata["status"].value == "reused"
    board = pd.read_parquet(lake / "suite_leaderboard")
    assert set(board["suite"].astype(str)) == {"arith", "reading", "agentic_ops"}
    assert board.groupby("suite", observed=True).size().tolist() == [2, 2, 2]
    for leaderboard in lake.glob("suite_comparison/suite=*/leaderboard.parquet"):
        assert pd.read_parquet(leaderboard)["model"].iloc[0] == "mockllm/atlas-large"  # planted the stronger
    rankings = pd.read_parquet(lake / "waic_rankings" / "rankings.parquet")
    assert set(rankings["scope"]) == {"partition", "suite"}
    accounting = pd.read_parquet(lake / "ingest_accounting" / "accounting.parquet")
    assert accounting["rows_accounted"].sum() == 2 * (225 + 60 + 72)

    # --only-changed (the nightly behaviour): unchanged logs launch no partition runs at all.
    # As the nightly cron would run it: a new process, which imports the code (and so computes the code
    # versions it compares with the recorded ones) under this folder's configuration. (This process
    # imported them before the test wrote evalpipeline.toml.)
    def nightly() -> str:
        command = [str(Path(sys.executable).parent / "evalpipeline"), "run", "--only-changed", "--workers", "1"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    (landing / "broken.eval").unlink()  # its operator removes it: the nightly exits 0 again
    out = nightly()
    assert "(0 new or changed)" in out and "ingest_and_fit" not in out and "to redo" not in out

    # A model joins one suite: its partition, that suite, and every model's profile on it refresh;
    # the reliability of the models already there has no new input and is not rematerialised.
    joining = next(log for log in DEMO_LOGS.iterdir() if "_arith_" in log.name and "atlas-small" in log.name)
    shutil.copy(joining, landing / joining.name)
    runs_before = {run.run_id for run in instance.get_runs()}
    out = nightly()
    assert "(1 new or changed)" in out and "FAILED" not in out and "to redo" not in out
    assert "suite_analysis suite arith: ok" in out and "suite reading" not in out
    assert "model_analysis model mockllm/atlas-small: ok" in out
    assert "model_profiles" in out and "model_analysis model mockllm/atlas-large" not in out
    new_runs = [run.run_id for run in instance.get_runs() if run.run_id not in runs_before]

    def materialised(asset: str) -> set[str]:
        records = instance.fetch_materializations(AssetKey(asset), limit=1000).records
        return {r.partition_key for r in records if r.run_id in new_runs}

    joined = to_partition_key("mockllm/atlas-small")
    assert materialised("model_reliability") == {joined}
    assert materialised("model_profile") == {
        joined,
        *(to_partition_key(m) for m in ("mockllm/atlas-large", "mockllm/cirrus 7b")),
    }
    profile = pd.read_parquet(lake / f"model_profile/model={to_partition_key('mockllm/atlas-large')}/profile.parquet")
    assert profile.loc[profile["suite"] == "arith", "n_models"].item() == 3  # its arith rank now counts the newcomer


def _two_models_on_three_suites(tmp_path, monkeypatch, glm_models: str) -> None:
    """A landing folder with two demo models' logs (six partitions), the fast GLM settings fitting
    ``glm_models`` only, and the job's environment pointing at ``tmp_path``."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for log in DEMO_LOGS.iterdir():
        if "atlas-large" in log.name or "cirrus 7b" in log.name:
            shutil.copy(log, landing / log.name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evalpipeline.toml").write_text(FAST_GLM_CONFIG.replace('"binomial", "suite_binomial"', glm_models))
    monkeypatch.setenv("EVALPIPELINE_LANDING", "landing")
    monkeypatch.setenv("EVALPIPELINE_LAKE", "lake")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))


@pytest.mark.slow
def test_a_failing_suite_fit_is_recorded_and_excluded_from_its_suites_comparison(tmp_path, monkeypatch, capsys):
    """Dagster gates per run: a blocking check that fails for one suite of a range run fails the run.
    run_main_job reruns a failed range one partition per run, so the failure is confined to its
    suite and recorded; the comparisons run in a stage of their own, so every suite is compared,
    the failing one without its GLM (listed in fits.parquet with the failed diagnostic)."""
    import dataclasses

    import assets.fits as fit_assets
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    _two_models_on_three_suites(
        tmp_path, monkeypatch, '"suite_binomial"'
    )  # the partition GLMs are not what this is about
    real_fit = fit_assets.fit_suite_glm

    def r_hat_fails_on_reading(store, suite, glm, config, **kwargs):
        outcome = real_fit(store, suite, glm, config, **kwargs)
        if (suite, glm) != ("reading", "suite_binomial"):  # the others are disabled: no diagnostics
            return outcome
        diagnostics = outcome.diagnostics.copy()
        diagnostics.loc[diagnostics["diagnostic"] == "r_hat", ["value", "passed"]] = [9.0, False]
        # stored as a real failed fit is, for the comparison that reads it in its own run
        diagnostics.to_parquet(outcome.directory / "diagnostics.parquet", index=False)
        provenance = json.loads((outcome.directory / "provenance.json").read_text())
        (outcome.directory / "provenance.json").write_text(json.dumps({**provenance, "passed": False}))
        return dataclasses.replace(outcome, diagnostics=diagnostics, passed=False)

    monkeypatch.setattr(fit_assets, "fit_suite_glm", r_hat_fails_on_reading)
    assert run_main_job() == 1
    out = capsys.readouterr().out
    assert "[2/5] suite_analysis 3 partitions (suite " in out
    # its check names the suite: that one alone, the others together for the step that did not succeed
    assert (
        "1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each (suite reading)"
        in out
    )
    reruns = [
        line
        for line in out.splitlines()
        if line.startswith("[") and "suite_analysis" in line and "[suite_glm_binomial]: " in line
    ]
    assert len(reruns) == 2 and "suite_analysis suite reading [suite_glm_binomial]: FAILED (" in reruns[1], reruns
    assert "2 partitions (suite " in reruns[0] and "reading" not in reruns[0] and ": ok (" in reruns[0], reruns
    assert "[3/5] suite_comparisons 3 partitions (suite " in out and "suite_comparisons suite reading" not in out
    lake = tmp_path / "lake"
    # every suite is compared: reading without its failed GLM, which fits.parquet lists with the reason
    compared = {p.parent.name for p in lake.glob("suite_comparison/suite=*/pairwise.parquet")}
    assert compared == {"suite=arith", "suite=agentic_ops", "suite=reading"}
    fits = pd.read_parquet(lake / "suite_comparison/suite=reading/fits.parquet").set_index("glm")
    assert not fits.loc["suite_binomial", "passed"] and not fits.loc["suite_binomial", "used"]
    assert "r_hat" in fits.loc["suite_binomial", "failed"]
    assert pd.read_parquet(lake / "suite_comparison/suite=reading/leaderboard.parquet")["glm"].isna().all()
    assert pd.read_parquet(lake / "suite_comparison/suite=arith/leaderboard.parquet")["glm"].eq("suite_binomial").all()
    failures = read_run_failures(Lake(lake))
    # one row for the failed step, naming the check, as the failure sensor records it (not a second row per check)
    (row,) = failures[failures["partition"] == "reading"].itertuples()
    assert (row.asset, row.error_type) == ("suite_glm_binomial", "DagsterAssetCheckFailedError"), row
    assert "r_hat" in row.error_summary, row
    # the failed range run is not recorded: its other suites refreshed when rerun one per run
    assert set(failures["partition"]) == {"reading"}, failures


@pytest.mark.slow
def test_a_failing_partition_fit_is_rerun_alone_and_its_range_neighbours_together(tmp_path, monkeypatch, capsys):
    """A partition GLM failing its blocking check fails its range run. Its check names the partition,
    so run_main_job reruns that partition alone and the range's other partitions together, only for the
    steps that did not succeed (one run, not one each: a leaderboard-sized rebuild lost ~95 s of two
    cores to one diverging fit among 600). An error that names no partition still reruns every
    partition of the range one run each."""
    import dataclasses

    import assets.fits as fit_assets
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    _two_models_on_three_suites(tmp_path, monkeypatch, '"binomial"')  # the suite GLMs are not what this is about
    real_fit = fit_assets.fit_partition_glm
    culprit = ("mockllm/cirrus 7b", "reading")
    fitted = []

    def r_hat_fails_for_the_culprit(store, model, suite, glm, config, **kwargs):
        outcome = real_fit(store, model, suite, glm, config, **kwargs)
        if glm != "binomial":  # the others are disabled: no diagnostics
            return outcome
        fitted.append((model, suite))
        if (model, suite) != culprit:
            return outcome
        diagnostics = outcome.diagnostics.copy()
        diagnostics.loc[diagnostics["diagnostic"] == "r_hat", ["value", "passed"]] = [9.0, False]
        return dataclasses.replace(outcome, diagnostics=diagnostics, passed=False)

    monkeypatch.setattr(fit_assets, "fit_partition_glm", r_hat_fails_for_the_culprit)
    assert run_main_job() == 1
    out = capsys.readouterr().out
    assert "[1/5] ingest_and_fit 6 partitions (" in out
    assert (
        "1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each "
        "(mockllm/cirrus 7b x reading) and the other 5 in "
    ) in out
    outcomes = [
        line
        for line in out.splitlines()
        if line.startswith("[") and " ingest_and_fit " in line and (": ok (" in line or ": FAILED (" in line)
    ]
    first, *reruns = outcomes
    assert "6 partitions (" in first and ": FAILED (" in first, outcomes
    # only the step that did not succeed: the culprit alone, the other five in fewer runs than one each
    assert all("[glm_binomial]: " in line for line in reruns), outcomes
    alone = [line for line in reruns if "partitions (" not in line and "mockllm/cirrus 7b x reading [" in line]
    assert len(alone) == 1 and ": FAILED (" in alone[0], outcomes
    together = [line for line in reruns if line not in alone]
    assert all(": ok (" in line for line in together) and len(together) < 5, outcomes
    covered = sum(
        int(line.split(" partitions (")[0].rsplit(" ", 1)[1]) if " partitions (" in line else 1 for line in together
    )
    assert covered == 5, outcomes
    # six fits in the range run, then the culprit's and the five others' once more (reused from the lake)
    assert len(fitted) == 12 and fitted.count(culprit) == 2 and len(set(fitted)) == 6, fitted
    failures = read_run_failures(Lake(tmp_path / "lake"))
    (row,) = failures.itertuples()  # the culprit's own run, not the range
    assert (row.asset, row.error_type) == ("glm_binomial", "DagsterAssetCheckFailedError"), row
    assert row.partition == str(
        MultiPartitionKey({"model": to_partition_key(culprit[0]), "suite": to_partition_key(culprit[1])})
    ), row
    # every stage went on, the culprit's model and suite included
    assert "[2/5] suite_analysis" in out and "[5/5] lake_reports lake-wide tables: ok" in out

    # An error in one partition's computation names that partition, as the failed check did.
    def fails_for_the_culprit(store, model, suite, glm, config, **kwargs):
        if (model, suite) == culprit and glm == "binomial":
            raise ValueError("the culprit's fit broke")  # deterministic: failed at once, not retried
        return real_fit(store, model, suite, glm, config, **kwargs)

    monkeypatch.setattr(fit_assets, "fit_partition_glm", fails_for_the_culprit)
    assert run_main_job() == 1
    out = capsys.readouterr().out
    assert (
        "1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each "
        "(mockllm/cirrus 7b x reading) and the other 5 in "
    ) in out
    assert out.count("ingest_and_fit mockllm/cirrus 7b x reading [glm_binomial]: FAILED") == 1
    failures = read_run_failures(Lake(tmp_path / "lake"))
    rows = failures[failures["resolved_at"].isna() & (failures["error_type"] == "ValueError")]
    assert list(rows["partition"]) == [row.partition], failures

    # An error outside any partition's computation (a setting the step reads) names none: every
    # partition of the range, one run each.
    monkeypatch.setattr(fit_assets, "fit_partition_glm", real_fit)
    monkeypatch.setattr(
        fit_assets, "load_plot_settings", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad [plots]"))
    )
    assert run_main_job() == 1
    out = capsys.readouterr().out
    assert "1 range run(s) failed: rerunning their 6 partition(s) one run each" in out
    failed = [line for line in out.splitlines() if " ingest_and_fit " in line and ": FAILED (" in line]
    assert len(failed) == 1 + 6, out  # the range, then each partition alone
