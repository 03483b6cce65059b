"""Run status in the lake: the failure sensor records failed runs, checks and range runs per partition
(with the error the step raised), and later successes resolve them."""

import pandas as pd
from dagster import AssetKey, DagsterInstance, materialize

from assets.partitions import model_suite_key
from assets.samples import eval_samples
from assets.status import PID_TAG
from evalpipeline.definitions import defs
from evalpipeline.lake.keys import to_partition_key
from resources import LakeResource
from tests.helpers.dagster import lake_resources


def _record_failed_run(instance, run_id: str, lake_resource):
    """Run the failure sensor on the failed run ``run_id``, as the daemon would; returns the run."""
    from dagster import DagsterEventType, build_run_status_sensor_context

    from assets.status import record_run_failures

    run = instance.get_run_by_id(run_id)
    failure = next(
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type == DagsterEventType.RUN_FAILURE
    ).dagster_event
    with build_run_status_sensor_context(
        sensor_name="record_run_failures",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure,
        resources={"lake": lake_resource},
    ) as context:
        record_run_failures(context.for_run_failure())
    return run


def test_failed_run_is_recorded_in_the_lake_by_the_failure_sensor(landing, tmp_path):
    """A run that fails (a model x suite with no sources: a permanent error, not retried) ends up in
    run_status/failures with its run id, asset, partition and error, as people reading Parquet see it."""
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["mockllm%2Fghost"])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    resources = lake_resources(tmp_path / "lake", landing)
    result = materialize(
        [eval_samples],
        partition_key=model_suite_key("mockllm/ghost", "unit suite"),
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    run = _record_failed_run(instance, result.run_id, resources["lake"])
    table = read_run_failures(Lake(tmp_path / "lake"))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["run_id"], row["asset"], row["partition"]) == (
        run.run_id,
        "eval_samples",
        "mockllm%2Fghost|unit%20suite",
    )
    assert row["error_type"] == "NoDataError" and "mockllm/ghost" in row["error_summary"]  # not Dagster's "Failure"
    instance.dispose()


def test_the_failure_sensor_records_what_a_failed_check_saw_and_the_file_and_sample_behind_it(tmp_path):
    """A blocking check's step error names the check only; the record adds what it observed and its
    first offending row, so that the failure table names the file and sample to fix."""
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [f"m,s,q{i},0,{'timeout' if i % 2 else ''}" for i in range(10)]  # half errored: a blocking check fails
    (landing / "half errored.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows) + "\n")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m"])
    instance.add_dynamic_partitions("suite", ["s"])
    resources = lake_resources(tmp_path / "lake", landing)
    result = materialize(
        [eval_samples],
        partition_key=model_suite_key("m", "s"),
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    _record_failed_run(instance, result.run_id, resources["lake"])
    (summary,) = read_run_failures(Lake(tmp_path / "lake"))["error_summary"]
    assert summary.startswith(
        "1 blocking asset check failed with ERROR severity: eval_samples: "
        "errored_share_within_bound | eval_samples:errored_share_within_bound on m x s: "
        "observed 0.5; first: item_id=q1; epoch=1; log_path="
    ), summary
    assert "half errored.csv; sample_index=1; source_line=3; error=timeout" in summary, summary
    instance.dispose()


def test_the_failure_table_reads_as_one_table_with_resolved_and_unresolved_files(tmp_path):
    """The README's reader, ``pd.read_parquet("<lake>/run_status/failures")``, must read a folder where
    some files have resolved rows and others none; a file an older release wrote with its resolved
    columns typed null is rewritten with the string schema by the next resolution."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import FAILURE_SCHEMA, StepFailure, record_run_failure, resolve_failures

    lake = Lake(tmp_path / "lake")
    for run_id, partition in (("a1", "p"), ("b1", "q")):
        record_run_failure(
            lake, run_id=run_id, job="j", partition=partition, failures=[StepFailure("x", "x", "E", "m")], failed_at="t"
        )
    folder = tmp_path / "lake" / "run_status" / "failures"
    old = pd.DataFrame(
        [
            {
                "run_id": "0old",
                "job": "j",
                "asset": "x",
                "partition": "r",
                "step": "x",
                "error_type": "E",
                "error_summary": "m",
                "failed_at": "t",
                "resolved_by": None,
                "resolved_at": None,
            }
        ]
    )
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), folder / "0old.parquet")  # as an older release did
    assert pa.types.is_null(pq.read_schema(folder / "0old.parquet").field("resolved_at").type)
    assert resolve_failures(lake, job="j", partitions=["q"], assets={"x"}, run_id="r1", resolved_at="t2") == 1
    table = pd.read_parquet(folder).sort_values("run_id")
    assert table["run_id"].tolist() == ["0old", "a1", "b1"]
    assert table["resolved_by"].fillna("").tolist() == ["", "", "r1"]
    for path in folder.glob("*.parquet"):
        assert pq.read_schema(path).remove_metadata().equals(FAILURE_SCHEMA), path


def test_the_status_sensors_keep_this_locations_runs_and_leave_evalpipeline_runs_own(tmp_path):
    """The status sensors see every run of the instance (Dagster's filter by code location dropped the
    runs `dagster asset materialize -m evalpipeline.definitions` launches, which carry none) and keep
    those of this location's jobs or assets, except the runs `evalpipeline run` executes and records itself."""
    from dagster import DagsterEventType, asset, build_run_status_sensor_context

    from assets.status import recorded_here
    from evalpipeline.definitions import defs

    @asset
    def someone_elses():
        return 1

    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(materialize([someone_elses], instance=instance).run_id)
    event = next(
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type == DagsterEventType.RUN_SUCCESS
    ).dagster_event
    cases = [
        ("__ASSET_JOB", {}, {AssetKey("eval_samples")}, True),  # the CLI's or the UI's materialisation
        ("ingest_and_fit", {}, None, True),  # the nightly's, a backfill's
        ("ingest_and_fit", {PID_TAG: "123"}, None, False),  # evalpipeline run's own
        ("__ASSET_JOB", {}, {AssetKey("someone_elses")}, False),  # another location's assets
        ("__ASSET_JOB", {}, {AssetKey("eval_samples"), AssetKey("someone_elses")}, False),
        ("their_job", {}, None, False),
    ]
    for job, tags, selection, expected in cases:
        other = run._replace(job_name=job, tags=tags, asset_selection=frozenset(selection) if selection else None)
        with build_run_status_sensor_context(
            sensor_name="record_run_failures",
            dagster_event=event,
            dagster_instance=instance,
            dagster_run=other,
            repository_def=defs.get_repository_def(),
        ) as context:
            assert recorded_here(context) is expected, (job, tags, selection)
    instance.dispose()


def test_a_range_run_of_a_backfill_is_recorded_and_resolved_per_partition(tmp_path, monkeypatch):
    """The daemon runs a backfill's partitions in ranges (the assets' backfill policy). A failed range
    run gets a row per partition its failed check or its error names (the others refreshed, or were not
    for want of data elsewhere), or, when its error names none, per partition of the range; a range run
    that succeeds resolves each of its partitions' rows, whichever run recorded them. As the daemon's
    runs are: the implicit asset job, a selection."""
    import assets.samples
    from dagster import DagsterEventType, build_run_status_sensor_context
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from assets.status import record_run_failures, resolve_run_failures
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    landing = tmp_path / "landing"
    landing.mkdir()
    for model in ("m1", "m2", "m3"):
        errored = model == "m2"  # half its samples errored: a blocking check fails for m2 x s alone
        rows = [f"{model},s,q{i},{i % 2},{'timeout' if errored and i % 2 else ''}" for i in range(10)]
        (landing / f"{model}.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows) + "\n")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m1", "m2", "m3", "m4"])  # m4: no log, the step's error names it
    instance.add_dynamic_partitions("suite", ["s"])
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("EVALPIPELINE_LANDING", str(landing))
    lake_resource = LakeResource()
    job = defs.resolve_implicit_global_asset_job_def()
    key = {m: str(model_suite_key(m, "s")) for m in ("m1", "m2", "m3", "m4")}

    def range_run(first: str, last: str):
        result = job.execute_in_process(
            instance=instance,
            raise_on_error=False,
            asset_selection=[AssetKey("eval_samples")],
            tags={ASSET_PARTITION_RANGE_START_TAG: key[first], ASSET_PARTITION_RANGE_END_TAG: key[last]},
        )
        run = instance.get_run_by_id(result.run_id)
        status = DagsterEventType.RUN_SUCCESS if result.success else DagsterEventType.RUN_FAILURE
        event = next(
            e for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.event_type == status
        ).dagster_event
        with build_run_status_sensor_context(
            sensor_name="status",
            dagster_instance=instance,
            dagster_run=run,
            dagster_event=event,
            resources={"lake": lake_resource},
            repository_def=defs.get_repository_def(),
        ) as context:
            if result.success:
                resolve_run_failures(context)
            else:
                record_run_failures(context.for_run_failure())
        return result.success, run.run_id

    lake = Lake(tmp_path / "lake")
    ok, checked = range_run("m1", "m3")
    assert not ok
    table = read_run_failures(lake)
    assert sorted(zip(table["partition"], table["asset"])) == [(key["m2"], "eval_samples")], table
    ok, no_data = range_run("m3", "m4")
    assert not ok
    table = read_run_failures(lake)
    rows = table[table["run_id"] == no_data]
    assert list(zip(rows["partition"], rows["error_type"])) == [(key["m4"], "NoDataError")], table
    with monkeypatch.context() as patched:  # an error that names no partition: every one of the range

        def broken(*_args, **_kwargs):
            raise ValueError("the reader broke")

        patched.setattr(assets.samples, "ingest_partitions", broken)
        ok, errored = range_run("m1", "m3")
    assert not ok
    table = read_run_failures(lake)
    assert sorted(table.loc[table["run_id"] == errored, "partition"]) == [key["m1"], key["m2"], key["m3"]], table

    (landing / "m2.csv").write_text((landing / "m1.csv").read_text().replace("m1,", "m2,"))  # fixed
    ok, _run_id = range_run("m1", "m3")
    assert ok
    table = read_run_failures(lake)
    unresolved = table[table["resolved_at"].isna()]
    assert sorted(zip(unresolved["run_id"], unresolved["partition"])) == [(no_data, key["m4"])], table
    instance.dispose()


def test_the_rest_of_a_failed_range_is_rerun_without_the_partitions_its_failure_names(tmp_path, monkeypatch):
    """A backfill of every partition of a sparse grid (m2 has no log on s) runs ranges that hold an
    empty combination: the range fails, naming it. The sensor requests the others, in ranges (m1 alone,
    m3..m4), of the steps the failed run selected; those runs materialise them. A failed range that
    materialised something (automation refreshes what it feeds), whose error names no partition, or a
    run of one partition gets nothing."""
    import assets.samples
    from dagster import DagsterEventType, build_run_status_sensor_context
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from assets.redo import REST_OF_TAG, rerun_rest_of_failed_ranges

    landing = tmp_path / "landing"
    landing.mkdir()
    models = ("m1", "m2", "m3", "m4", "m5")
    for model in ("m1", "m3", "m4", "m5"):
        errored = model == "m5"  # a blocking check fails for m5 x s
        rows = [f"{model},s,q{i},{i % 2},{'timeout' if errored and i % 2 else ''}" for i in range(10)]
        (landing / f"{model}.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows) + "\n")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", list(models))
    instance.add_dynamic_partitions("suite", ["s"])
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("EVALPIPELINE_LANDING", str(landing))
    key = {m: str(model_suite_key(m, "s")) for m in models}
    steps = [AssetKey("eval_samples"), AssetKey("accuracy_posteriors")]

    def rest_of(first: str, last: str | None = None):
        """Run the steps over first..last as the daemon's backfill does (the implicit asset job), then the
        sensor on its failure: (the run's success, the sensor's run requests)."""
        tags = (
            {}
            if last is None
            else {ASSET_PARTITION_RANGE_START_TAG: key[first], ASSET_PARTITION_RANGE_END_TAG: key[last]}
        )
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            raise_on_error=False,
            asset_selection=steps,
            tags=tags,
            partition_key=key[first] if last is None else None,
        )
        run = instance.get_run_by_id(result.run_id)
        if result.success:
            return True, []
        event = next(
            e
            for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.event_type == DagsterEventType.RUN_FAILURE
        ).dagster_event
        with build_run_status_sensor_context(
            sensor_name="rerun_rest_of_failed_ranges",
            dagster_instance=instance,
            dagster_run=run,
            dagster_event=event,
            repository_def=defs.get_repository_def(),
        ) as context:
            return False, list(rerun_rest_of_failed_ranges(context.for_run_failure()) or [])

    ok, requests = rest_of("m1", "m4")
    assert not ok
    blocks = [
        (r.partition_key, r.tags.get(ASSET_PARTITION_RANGE_START_TAG), r.tags.get(ASSET_PARTITION_RANGE_END_TAG))
        for r in requests
    ]
    assert blocks == [(key["m1"], None, None), (None, key["m3"], key["m4"])], blocks
    assert {r.job_name for r in requests} == {"ingest_and_fit"}
    assert all(list(r.asset_selection) == steps and r.tags[REST_OF_TAG] for r in requests)
    assert len({r.run_key for r in requests}) == 2
    for request in requests:  # as the daemon launches them
        result = defs.resolve_job_def(request.job_name).execute_in_process(
            instance=instance,
            raise_on_error=False,
            asset_selection=request.asset_selection,
            partition_key=request.partition_key,
            tags=request.tags,
        )
        assert result.success
    for step in steps:
        done = instance.get_materialized_partitions(step)
        assert {key["m1"], key["m3"], key["m4"]} <= set(done) and key["m2"] not in done, (step, done)

    assert rest_of("m4", "m5") == (False, [])  # the failed check: eval_samples materialised both
    with monkeypatch.context() as patched:

        def broken(*_args, **_kwargs):
            raise ValueError("the reader broke")

        patched.setattr(assets.samples, "ingest_partitions", broken)
        assert rest_of("m3", "m4") == (False, [])  # the error names no partition
    assert rest_of("m2") == (False, [])  # one partition
    instance.dispose()


def test_a_killed_range_run_is_recorded_per_partition_and_rows_of_current_partitions_are_resolved(tmp_path):
    """A killed `evalpipeline run` range run gets one whole-run row per partition, so that each is
    resolved when its partition is redone; the nightly resolves those of partitions it finds current
    (the run was redoing outputs already current: no later run would resolve them)."""
    from dagster import DagsterInstance
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from resources.run.loop import _run_partition_keys
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import StepFailure, read_run_failures, record_run_failure, resolve_up_to_date

    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["a", "b", "c"])
    instance.add_dynamic_partitions("suite", ["s"])
    first, last = str(model_suite_key("a", "s")), str(model_suite_key("b", "s"))
    run = DagsterRun(
        job_name="ingest_and_fit",
        run_id="r1",
        tags={ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last},
    )
    assert _run_partition_keys(run, instance) == [first, last]
    assert _run_partition_keys(DagsterRun(job_name="lake_reports", run_id="r2", tags={}), instance) == ""

    lake = Lake(tmp_path / "lake")
    record_run_failure(
        lake,
        run_id="r1",
        job="ingest_and_fit",
        partition=[first, last],
        failures=[StepFailure("(run)", "", "ProcessDied", "gone")],
        failed_at="t",
    )
    record_run_failure(
        lake,
        run_id="r3",
        job="ingest_and_fit",
        partition=first,
        failures=[StepFailure("glm_binomial", "glm_binomial", "E", "m")],
        failed_at="t",
    )
    assert resolve_up_to_date(lake, partitions={first}, resolved_at="t2") == 1
    table = read_run_failures(lake)
    assert sorted(zip(table["run_id"], table["partition"], table["resolved_by"].fillna(""))) == [
        ("r1", first, "(up to date)"),
        ("r1", last, ""),
        ("r3", first, ""),
    ], table  # a failed step waits for its rerun
    instance.dispose()


def test_a_later_success_that_redoes_a_failed_asset_resolves_its_failure_rows(landing, tmp_path):
    """What still fails is what the failure table leaves unresolved: the success sensor (and
    `evalpipeline run`) marks a row resolved once a run succeeds that materialised the row's asset
    for its partition, whichever job failed it, and a whole-run row ((run)) once its job succeeds for
    the partition; it touches nothing else (a success of other assets of the partition included)."""
    from dagster import DagsterEventType, build_run_status_sensor_context

    from assets.status import resolve_run_failures
    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import StepFailure, read_run_failures, record_run_failure, resolve_failures

    lake = Lake(tmp_path / "lake")
    key = model_suite_key("mockllm/alpha", "unit suite")
    other = model_suite_key("mockllm/beta/v2", "unit suite")
    job = "__ephemeral_asset_job__"  # the job materialize() runs
    steps = [StepFailure("eval_samples", "eval_samples", "OSError", "disk full"), StepFailure("x", "x", "E", "m")]
    for run_id, run_job, partition in (("a1", job, key), ("a2", job, other), ("b1", "ingest_and_fit", key)):
        record_run_failure(lake, run_id=run_id, job=run_job, partition=partition, failures=steps, failed_at="t")
    for run_id, run_job in (("c1", job), ("c2", "ingest_and_fit")):  # whole runs that failed outside any step
        record_run_failure(
            lake,
            run_id=run_id,
            job=run_job,
            partition=key,
            failures=[StepFailure("(run)", "", "ProcessDied", "killed")],
            failed_at="t",
        )
    assert read_run_failures(lake)["resolved_at"].isna().all()
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize(
        [eval_samples], partition_key=key, instance=instance, resources=lake_resources(tmp_path / "lake", landing)
    )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    success = next(
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type == DagsterEventType.RUN_SUCCESS
    ).dagster_event
    with build_run_status_sensor_context(
        sensor_name="resolve_run_failures",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=success,
        resources={"lake": LakeResource(root=str(tmp_path / "lake"))},
    ) as context:
        resolve_run_failures(context)
    table = read_run_failures(lake)
    resolved = table[table["resolved_at"].notna()]
    # eval_samples of this partition, whichever job failed it, and the whole failed run of this job
    assert sorted(zip(resolved["run_id"], resolved["asset"])) == [
        ("a1", "eval_samples"),
        ("b1", "eval_samples"),
        ("c1", "(run)"),
    ], table
    assert set(resolved["resolved_by"]) == {run.run_id}
    unresolved = table[table["resolved_at"].isna()]
    # another partition; an asset the run did not materialise; a whole run of another job
    assert sorted(zip(unresolved["run_id"], unresolved["asset"])) == [
        ("a1", "x"),
        ("a2", "eval_samples"),
        ("a2", "x"),
        ("b1", "x"),
        ("c2", "(run)"),
    ], table
    # resolving again marks nothing: the first resolution stays
    assert (
        resolve_failures(lake, job=job, partitions=[key], assets={"eval_samples"}, run_id="later", resolved_at="t2")
        == 0
    )
    assert (
        resolve_failures(
            lake, job="ingest_and_fit", partitions=[key], assets={"partition_plots"}, run_id="r", resolved_at="t3"
        )
        == 1
    )  # its whole-run row only
    assert (
        resolve_failures(lake, job="ingest_and_fit", partitions=[key], assets={"x"}, run_id="r", resolved_at="t3") == 2
    )
    instance.dispose()


def test_failure_records_name_the_error_the_step_raised_not_dagsters_wrapper():
    """After its retries a step's error is Dagster's "Exceeded max_retries", and a failed blocking check
    names the checks on a second line: the failure table records the step's own error and the checks."""
    from dagster import AssetCheckResult, AssetCheckSpec, MaterializeResult, RetryPolicy, asset

    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from assets.status import run_partitions, step_failures

    # a range run (evalpipeline run's batches) is recorded as "first..last", not as unpartitioned
    assert run_partitions({ASSET_PARTITION_RANGE_START_TAG: "a|s", ASSET_PARTITION_RANGE_END_TAG: "c|s"}) == "a|s..c|s"

    @asset(retry_policy=RetryPolicy(max_retries=1))
    def full_disk():
        raise OSError(28, "No space left on device")

    @asset(
        check_specs=[
            AssetCheckSpec("rows_sane", asset="strict", blocking=True),
            AssetCheckSpec("rows_few", asset="strict", blocking=True),
        ]
    )
    def strict():
        yield MaterializeResult()
        yield AssetCheckResult(
            check_name="rows_sane",
            passed=False,
            metadata={
                "partition": "m x s",
                "observed": "{'items_not_scored': 1}",
                "first_example": "item_id=q7; log_path=logs/m.eval; sample_index=3; reason=score 1.7 outside [0, 1]",
            },
        )
        yield AssetCheckResult(check_name="rows_few", passed=True, metadata={"first_example": "not a failure"})

    for assets_def, error_type, words in (
        (full_disk, "OSError", ["No space left on device", "max_retries of 1"]),
        (strict, "DagsterAssetCheckFailedError", ["blocking asset check", "rows_sane"]),
    ):
        result = materialize([assets_def], instance=DagsterInstance.ephemeral(), raise_on_error=False)
        (record,) = step_failures([e for e in result.all_events if e.is_step_failure], "")
        assert record.error_type == error_type, record
        assert all(word in record.message for word in words), record

    # with the run's check evaluations, a failed check's record says what it saw and where (first line)
    from evalpipeline.steps.run_status import summarise_error

    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    (record,) = step_failures([e for e in result.all_events if e.is_step_failure], "", checks)
    summary = summarise_error(record.message)
    assert summary.endswith(
        " | strict:rows_sane on m x s: observed {'items_not_scored': 1}; first: item_id=q7; "
        "log_path=logs/m.eval; sample_index=3; reason=score 1.7 outside [0, 1]"
    ), summary
    assert "rows_few" not in summary and "not a failure" not in summary
