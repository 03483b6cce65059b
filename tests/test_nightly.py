"""The nightly (`evalpipeline run --only-changed`) and `evalpipeline forget` on small projects: retired
models and suites, stale assets rerun alone, rejected partitions left alone until their logs change."""

import pandas as pd
import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    MultiPartitionKey,
    SkipReason,
    build_schedule_context,
    materialize,
)

from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors
from evalpipeline.definitions import defs
from resources.run.loop import run_main_job
from resources import IngestSettings, LakeResource
from tests.helpers.dagster import nightly_tick, small_project


def test_a_retired_model_or_suite_is_unregistered_but_not_one_whose_log_is_unreadable_tonight(tmp_path, capsys):
    """A model (or suite) whose logs were rewritten under another name is retired from the lake by the
    ingest; the nightly and `evalpipeline run` then delete its dynamic partition, so the UI stops
    offering it for materialisation. A model whose only log cannot be read tonight keeps its
    partition while the lake holds its records."""
    from evalpipeline.ingest import ingest_paths
    from evalpipeline.lake import Lake

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    table = landing / "scores.csv"
    table.write_text("model,suite,item_id,score\nold-name,s1,a,1\nold-name,old-suite,a,0\nkept,s1,a,1\n")
    unstable = landing / "flaky.csv"
    unstable.write_text("model,suite,item_id,score\nflaky,s1,a,1\n")
    (tmp_path / "home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "home"))  # a schedule context needs a persistent one
    resources = {"lake": LakeResource(root=str(lake.root), landing=str(landing)), "ingest_settings": IngestSettings()}
    nightly_tick(instance, resources)
    assert set(instance.get_dynamic_partitions("model")) == {"old-name", "kept", "flaky"}
    assert set(instance.get_dynamic_partitions("suite")) == {"s1", "old-suite"}
    ingest_paths([table, unstable], lake)
    # failures recorded against partitions that are about to be retired, and against others
    from evalpipeline.steps.run_status import RETIRED, StepFailure, read_run_failures, record_run_failure

    doomed = {"r1": str(model_suite_key("old-name", "s1")), "r2": "old-name", "r3": "old-suite"}
    others = {
        "r4": str(model_suite_key("flaky", "s1")),
        "r5": str(model_suite_key("kept", "s1")),
        "r6": "kept",
        "r7": "old-name|s1..kept|s1",
        "r8": "",
    }
    for run_id, partition in {**doomed, **others}.items():
        record_run_failure(
            lake, run_id=run_id, job="j", partition=partition, failures=[StepFailure("a", "a", "E", "m")], failed_at="t"
        )

    # registered and in the lake, but no log names them now: nothing is deleted before the ingest retires them
    table.write_text("model,suite,item_id,score\nnew-name,s1,a,1\nkept,s1,a,1\n")
    unstable.write_bytes(b"\xff\xfe\x00 a half-copied file")  # unreadable: recorded under file_errors/
    nightly_tick(instance, resources)
    assert set(instance.get_dynamic_partitions("model")) == {"old-name", "kept", "flaky", "new-name"}
    assert read_run_failures(lake)["resolved_at"].isna().all()  # nothing is retired yet
    report = ingest_paths([table], lake)
    assert set(report.retired) == {("old-name", "s1"), ("old-name", "old-suite")}

    nightly_tick(instance, resources)
    assert set(instance.get_dynamic_partitions("model")) == {"kept", "flaky", "new-name"}
    assert set(instance.get_dynamic_partitions("suite")) == {"s1"}
    # a retired partition cannot be rerun: its failures are resolved by the retirement, the others stay
    failures = read_run_failures(lake).set_index("run_id")
    assert set(failures.loc[list(doomed), "resolved_by"]) == {RETIRED}
    assert failures.loc[list(doomed), "resolved_at"].notna().all()
    assert failures.loc[list(others), "resolved_at"].isna().all()

    # `evalpipeline run` does the same. Logs deleted from the landing folder leave their tables in the lake,
    # so their partitions stay; a key registered for nothing goes.
    instance.add_dynamic_partitions("model", ["ghost"])
    table.unlink()
    unstable.unlink()
    from resources.run.loop import _sync_partitions
    from evalpipeline.steps.discovery import discover

    _sync_partitions(instance, lake, discover(lake, landing), print)
    assert set(instance.get_dynamic_partitions("model")) == {"kept", "flaky", "new-name"}
    assert "model(s) no log or lake table holds any more, unregistered from the Dagster instance: ghost" in (
        capsys.readouterr().out
    )


@pytest.mark.slow
def test_only_changed_reruns_only_stale_assets_and_refreshes_what_a_retired_partition_leaves(
    tmp_path, monkeypatch, capsys
):
    """Two nightlies (`--only-changed`) after one full run of the same small project.

    A partition asset made under other code or settings (here: never materialised, after a wipe)
    is redone without reading and validating the partition's unchanged logs again: the run selects
    the stale asset, not the whole partition job.

    A log rewritten under another model name retires the old model x suite. The nightly must then
    also redo the suite it left (its leaderboard listed the old model) and the old model's other
    suites' model outputs, though neither has a new or changed log."""
    from assets.schedules import latest_materialisations
    from resources.run.loop import local_instance

    landing = small_project(tmp_path, monkeypatch)
    assert run_main_job() == 0
    board = lambda suite: set(pd.read_parquet(f"lake/suite_comparison/suite={suite}/leaderboard.parquet")["model"])  # noqa: E731
    assert board("logic") == {"alpha", "beta"}
    instance = local_instance()
    keys = [AssetKey(name) for name in ("eval_samples", "accuracy_posteriors", "reliability")]
    before = {key: latest_materialisations(instance, key) for key in keys}
    assert all(len(latest) == 4 for latest in before.values()), before
    samples = {p: p.stat().st_mtime_ns for p in (tmp_path / "lake" / "samples").rglob("*.parquet")}

    # a stale asset of partitions whose logs are unchanged
    instance.wipe_assets([AssetKey("reliability")])
    capsys.readouterr()
    assert run_main_job(only_changed=True) == 0
    out = capsys.readouterr().out
    assert "4 model x suite partition(s)" in out and "[reliability]" in out and "FAILED" not in out, out
    after = {key: latest_materialisations(instance, key) for key in keys}
    assert after[AssetKey("eval_samples")] == before[AssetKey("eval_samples")], "unchanged logs were read again"
    assert after[AssetKey("accuracy_posteriors")] == before[AssetKey("accuracy_posteriors")]
    assert sorted(after[AssetKey("reliability")]) == sorted(before[AssetKey("reliability")])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "lake" / "samples").rglob("*.parquet")} == samples

    # and now nothing is stale: the next nightly launches no partition run
    capsys.readouterr()
    assert run_main_job(only_changed=True) == 0
    assert "ingest_and_fit" not in capsys.readouterr().out

    # a retired partition
    text = (landing / "beta_logic.csv").read_text()
    (landing / "beta_logic.csv").write_text(text.replace("beta,logic", "gamma,logic"))
    capsys.readouterr()
    assert run_main_job(only_changed=True) == 0
    out = capsys.readouterr().out
    assert "1 to retire" in out and "FAILED" not in out
    assert board("logic") == {"alpha", "gamma"}
    assert set(pd.read_parquet("lake/suite_leaderboard/suite=logic/leaderboard.parquet")["model"]) == {"alpha", "gamma"}
    assert set(pd.read_parquet("lake/model_profile/model=beta/profile.parquet")["suite"]) == {"arith", "(all)"}


@pytest.mark.slow
def test_forget_takes_a_model_out_of_a_suite_and_clears_a_rejected_partition(tmp_path, monkeypatch, capsys):
    """The lake keeps a log's rows when the log leaves the landing folder, so a model could not be taken
    out of a suite, nor a rejected partition whose log is gone cleared (every nightly exited 1, asking
    to fix a log that no longer exists). `evalpipeline forget` removes the log's records and refreshes
    what they fed; a log still in the landing folder is refused, an unknown one named."""
    import evalpipeline.cli.main as cli

    bad = "\n".join(f"bad,logic,q{i},0,{'timeout' if i % 2 else ''}" for i in range(8))  # half errored: rejected
    logs = {
        f"{m}_{s}.csv": "model,suite,item_id,score,domain,subdomain\n"
        + "\n".join(f"{m},{s},q{i},{(i + len(m)) % 2},d,{s}" for i in range(8))
        + "\n"
        for m in ("alpha", "beta")
        for s in ("arith", "logic")
    }
    landing = small_project(tmp_path, monkeypatch, logs={**logs, "bad.csv": "model,suite,item_id,score,error\n" + bad})
    assert run_main_job() == 1  # the rejected partition
    board = lambda suite: set(pd.read_parquet(f"lake/suite_comparison/suite={suite}/leaderboard.parquet")["model"])  # noqa: E731
    assert board("logic") == {"alpha", "beta"}
    records = sorted((tmp_path / "lake" / "ingested").rglob("*.parquet"))

    capsys.readouterr()
    assert cli.main(["forget", "landing/beta_logic.csv", "--workers", "1"]) == 2
    assert "landing/beta_logic.csv: a log of that name is in the landing folder" in capsys.readouterr().err
    (landing / "broken.eval").write_bytes(b"not a zip")  # unreadable, and still there: refused as well
    assert run_main_job(only_changed=True) == 1
    capsys.readouterr()
    assert cli.main(["forget", "landing/broken.eval", "--workers", "1"]) == 2
    assert "landing/broken.eval: a log of that name is in the landing folder" in capsys.readouterr().err
    (landing / "broken.eval").unlink()
    assert cli.main(["forget", "landing/broken.eval", "--workers", "1"]) == 1  # bad x logic is still rejected
    assert "forgot 1 record(s) of rows in no partition or of unreadable files" in capsys.readouterr().out
    assert cli.main(["forget", "elsewhere/beta_logic.csv", "--workers", "1"]) == 2
    assert "the lake holds nothing of elsewhere/beta_logic.csv" in capsys.readouterr().err
    assert sorted((tmp_path / "lake" / "ingested").rglob("*.parquet")) == records  # nothing removed

    (tmp_path / "old").mkdir()
    (landing / "beta_logic.csv").rename(tmp_path / "old" / "beta_logic.csv")
    (landing / "bad.csv").rename(tmp_path / "old" / "bad.csv")
    assert run_main_job(only_changed=True) == 1  # gone from the landing folder, kept by the lake
    assert board("logic") == {"alpha", "beta"}

    capsys.readouterr()
    assert cli.main(["forget", "landing/beta_logic.csv", "--workers", "1"]) == 1  # bad x logic is still rejected
    out = capsys.readouterr().out
    assert "forgot 1 ingest record(s), 8 rows, of beta x logic: retired: no other log holds it" in out, out
    assert "ingest_and_fit" not in out and "FAILED" not in out, out
    assert board("logic") == {"alpha"}
    assert set(pd.read_parquet("lake/model_profile/model=beta/profile.parquet")["suite"]) == {"arith", "(all)"}
    assert not (tmp_path / "lake" / "samples" / "model=beta" / "suite=logic").exists()

    assert cli.main(["forget", "--model", "bad ", "--workers", "1"]) == 0  # the name as the lake keys it
    out = capsys.readouterr().out
    assert "of bad x logic: retired" in out and "model(s) no log or lake table holds any more" in out, out
    failures = pd.read_parquet("lake/run_status/failures")
    assert set(failures.query("partition.str.contains('bad')")["resolved_by"]) == {"(retired)"}, failures
    assert run_main_job(only_changed=True) == 0


def test_a_partition_run_selects_its_stale_assets_only_when_its_table_is_current_and_passed():
    from assets.schedules import partition_run_selection

    glm, reliability, samples = AssetKey("glm_binomial"), AssetKey("reliability"), AssetKey("eval_samples")
    assert partition_run_selection(False, {reliability, glm}, []) == [glm, reliability]
    assert partition_run_selection(True, {glm}, []) is None  # new or changed logs: the whole job
    assert partition_run_selection(False, {glm, samples}, []) is None  # everything reads the table
    assert partition_run_selection(False, set(), []) is None  # a plain run: nothing singled out
    # a table that failed a blocking check meets the checks again, or its skipped assets would fit it
    assert partition_run_selection(False, {glm}, ["errored_share_within_bound"]) is None


def test_a_rejected_partition_is_left_alone_until_its_logs_or_its_validation_change():
    from assets.schedules import rejected_and_unchanged

    glm, samples = AssetKey("glm_binomial"), AssetKey("eval_samples")
    assert rejected_and_unchanged(False, {glm}, ["every_item_scored"])
    assert not rejected_and_unchanged(True, {glm}, ["every_item_scored"])  # new or changed logs
    assert not rejected_and_unchanged(False, {glm, samples}, ["every_item_scored"])  # validation code or settings
    assert not rejected_and_unchanged(False, {glm}, [])  # passed: its stale assets are redone


@pytest.mark.slow
def test_only_changed_does_not_fit_a_table_that_failed_validation(tmp_path, monkeypatch, capsys):
    """A sample table failing a blocking check leaves its partition's other assets unmaterialised
    (stale as missing), but --only-changed must not select them alone: run without the checks, they
    would fit the rejected rows and the run would mark the failure resolved. Nor does it rerun the
    partition while its logs are unchanged: that would fail the same checks every night, add a
    failure row each time and refresh its suite and models for nothing. A fixed log is rerun."""
    from assets.schedules import latest_materialisations
    from resources.run.loop import local_instance

    rows = [f"good,s,q{i},{i % 2}," for i in range(20)]
    bad_rows = [f"bad,s,q{i},0,{'timeout' if i % 2 else ''}" for i in range(20)]  # half errored: fails a blocking check
    landing = small_project(
        tmp_path, monkeypatch, logs={"s.csv": "model,suite,item_id,score,error\n" + "\n".join(rows + bad_rows) + "\n"}
    )
    assert run_main_job() == 1
    # the model has no other partition: its stage is not run (it failed with 'no sample tables', two
    # more failure rows that nothing resolved, and pages of tracebacks)
    out = capsys.readouterr().out
    assert "not run: model bad (no partition's sample table passed validation)" in out, out
    assert "model_analysis model bad" not in out and "suite_analysis suite s: ok" in out, out
    instance = local_instance()
    failure_rows = lambda: pd.read_parquet(tmp_path / "lake/run_status/failures").query("partition.str.contains('bad')")  # noqa: E731
    rejected_on_the_first_night = failure_rows()
    assert set(rejected_on_the_first_night["asset"]) == {"eval_samples"}, rejected_on_the_first_night
    assert len(rejected_on_the_first_night) and (rejected_on_the_first_night["resolved_at"].fillna("") == "").all()
    (summary,) = rejected_on_the_first_night.query("asset == 'eval_samples'")["error_summary"]
    assert "first: " in summary, summary
    assert "eval_samples:errored_share_within_bound on bad x s: observed" in summary, summary
    for attempt in range(2):
        capsys.readouterr()
        assert run_main_job(only_changed=True) == 1  # the partition is still rejected, and the exit status says so
        out = capsys.readouterr().out
        assert "not rerun: 1 model x suite partition(s) whose sample table failed blocking checks" in out, out
        assert "bad x s (errored_share_within_bound)" in out, out
        assert "ingest_and_fit" not in out and "model bad" not in out and "FAILED" not in out, out
        for name in ("accuracy_posteriors", "reliability"):
            assert "bad|s" not in latest_materialisations(instance, AssetKey(name)), (attempt, name)
        assert not (tmp_path / "lake/accuracy_posteriors/model=bad").exists()
        pd.testing.assert_frame_equal(failure_rows(), rejected_on_the_first_night)  # still failing, recorded once
    # the schedule agrees: nothing to request (the good partition is complete)
    from assets.jobs import ingest_and_fit_job
    from assets.schedules import build_nightly_schedule
    from assets.jobs import PARTITION_ASSETS

    with build_schedule_context(instance=instance, resources=defs.resources) as context:
        tick = build_nightly_schedule(ingest_and_fit_job, PARTITION_ASSETS)(context)
    assert isinstance(tick, SkipReason), tick

    # Materialised alone (from the UI, or requested by automation), the assets after the table run
    # no checks: each refuses the rejected table itself, naming it and the failed check.

    from assets.fits import PARTITION_GLM_ASSETS
    from assets.reliability import reliability

    for assets_def in (accuracy_posteriors, reliability, PARTITION_GLM_ASSETS[0]):
        done = materialize(
            [assets_def],
            instance=instance,
            partition_key=MultiPartitionKey({"model": "bad", "suite": "s"}),
            resources=defs.resources,
            raise_on_error=False,
        )
        assert not done.success
        message = str(done.get_step_failure_events()[0].event_specific_data.error)
        assert "'bad' x 's': the sample table failed validation (errored_share_within_bound)" in message, message
    assert not (tmp_path / "lake/accuracy_posteriors/model=bad").exists()
    assert not (tmp_path / "lake/reliability/model=bad").exists()

    # the log fixed: the nightly reruns the partition, which passes, and its failures are resolved
    (landing / "s.csv").write_text(
        "model,suite,item_id,score,error\n"
        + "\n".join(rows + [f"bad,s,q{i},{int(i % 3 == 0)}," for i in range(20)])
        + "\n"
    )
    capsys.readouterr()
    assert run_main_job(only_changed=True) == 0, capsys.readouterr().out
    assert "not rerun" not in capsys.readouterr().out
    assert "bad|s" in latest_materialisations(instance, AssetKey("accuracy_posteriors"))
    assert (failure_rows()["resolved_at"].fillna("") != "").all(), failure_rows()
    # rejected again, now that the model has a profile: its stage runs and fails, so that the profile
    # made from the superseded rows is not left looking current
    (landing / "s.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows + bad_rows) + "\n")
    assert run_main_job(only_changed=True) == 1
    out = capsys.readouterr().out
    assert "not run: model bad" not in out and "model_analysis model bad: FAILED" in out, out
