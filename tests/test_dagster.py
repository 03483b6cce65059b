"""The Dagster layer: the code location loads, one partition and a leaderboard materialise,
the sensor discovers logs, and the main job runs the whole demo graph twice with the same result."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    Definitions,
    MultiPartitionKey,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
    materialize,
)

from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.samples import VALIDATION_CHECKS, eval_samples
from assets.sensors import landing_sensor
from assets.status import PID_TAG
from evalpipeline.definitions import defs
from resources.run.loop import run_main_job
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import sha256_file
from resources import IngestSettings, LakeResource, PosteriorSettings
from tests.conftest import DEMO_LOGS, REPO
from tests.helpers.inspect_logs import echo, make_log

README = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])  # the README and docs/


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    folder = tmp_path_factory.mktemp("landing")
    make_log(folder, model="mockllm/alpha", suite="unit suite", items=6)
    make_log(folder, model="mockllm/beta/v2", suite="unit suite", items=6, answers={(f"q{i}", 1): "yes" for i in range(6)})
    make_log(folder, model="mockllm/alpha", suite="other", items=4, log_format="json")
    return folder


def test_code_location_loads_and_every_asset_is_described():
    """The UI as users meet it: every asset has a description, a group, owners and kinds, and
    every table asset a column schema; groups follow the pipeline's stages."""
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"eval_samples", "accuracy_posteriors", "suite_leaderboard", "ingest_accounting", "waic_rankings",
            "glm_binomial", "glm_beta_binomial", "glm_null", "glm_item_difficulty"} <= keys
    groups = set()
    for spec in defs.resolve_all_asset_specs():
        assert spec.description and len(spec.description) > 60, spec.key
        assert spec.group_name and spec.group_name != "default", spec.key
        groups.add(spec.group_name)
        assert spec.owners and spec.kinds, spec.key
        if "parquet" in spec.kinds:
            schema = spec.metadata.get("dagster/column_schema")
            assert schema is not None and schema.columns, spec.key
            assert all(column.description for column in schema.columns), spec.key
    assert groups <= {"ingest", "validate", "fit", "compare", "report"}
    assert {"ingest", "validate", "fit", "compare"} <= groups
    assert "evalpipeline" not in {m.split(".")[0] for m in _dagster_importers()}


def test_a_backfill_of_many_partitions_runs_them_in_ranges():
    """Automation requests many partitions of an asset at once as one backfill (a prior edit: every fit
    it made), and a backfill from the UI is one too; the daemon plans a backfill's runs from the assets'
    backfill policy, with the planner tested here. Every model x suite and per-model asset has the
    policy (per-suite ones run a suite per run), so that the runs are ranges of at most PARTITIONS_PER_RUN partitions of one suite (or model) that cover exactly
    the requested partitions: 5 runs for 139 partitions, not 139 runs of one."""
    from dagster._core.definitions.events import AssetKeyPartitionKey
    from dagster._core.definitions.partitions.context import partition_loading_context
    from dagster._core.definitions.automation_tick_evaluation_context import (
        build_run_requests_with_backfill_policies,
    )
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from dagster import PartitionKeyRange

    from assets.partitions import PARTITIONS_PER_RUN, RANGE_BACKFILL, model_partitions, model_suite_partitions

    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        ranged = node.partitions_def in (model_suite_partitions, model_partitions)  # suites: one per run
        assert node.backfill_policy == (RANGE_BACKFILL if ranged else None), key
    assert PARTITIONS_PER_RUN == 60
    instance = DagsterInstance.ephemeral()
    models = [f"m{i:02d}" for i in range(70)]
    instance.add_dynamic_partitions("model", models)
    instance.add_dynamic_partitions("suite", ["s1", "s2"])
    wanted = {str(model_suite_key(m, s)) for m in models for s in ("s1", "s2")} - {str(model_suite_key("m05", "s2"))}
    with partition_loading_context(dynamic_partitions_store=instance):  # as the backfill daemon calls it
        requests = build_run_requests_with_backfill_policies(
            [AssetKeyPartitionKey(AssetKey("glm_binomial"), key) for key in wanted], graph, instance)
    covered, sizes = [], []
    for request in requests:
        assert request.asset_selection == [AssetKey("glm_binomial")] and request.partition_key is None
        keys = model_suite_partitions.get_partition_keys_in_range(
            PartitionKeyRange(request.tags[ASSET_PARTITION_RANGE_START_TAG], request.tags[ASSET_PARTITION_RANGE_END_TAG]),
            dynamic_partitions_store=instance)
        assert 1 <= len(keys) <= PARTITIONS_PER_RUN and len({k.keys_by_dimension["suite"] for k in keys}) == 1
        covered += [str(k) for k in keys]
        sizes.append(len(keys))
    assert sorted(covered) == sorted(wanted)  # each once, and none without a request (m05 x s2)
    assert sorted(sizes) == [4, 5, 10, 60, 60]  # s1: m00-m69 in 60 + 10; s2: m00-m04, then m06-m69 in 60 + 4
    instance.dispose()


def test_automation_skips_combinations_without_samples_and_profiles_wait_for_leaderboards(tmp_path, monkeypatch):
    """New samples for 3 of 4 model x suite combinations (a new model on one suite): the partition
    fits are requested for those 3 only (never for the combination without samples, which could only
    fail), and the assets that read the suite GLMs (suite comparison, model profiles, report) wait for
    them instead of running now and again after them."""
    from dagster import AssetMaterialization, DataVersion, MultiPartitionKey, evaluate_automation_conditions
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    from evalpipeline.lake import Lake

    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m1"])
    instance.add_dynamic_partitions("suite", ["s1", "s2"])
    present = [("m1", "s1"), ("m1", "s2"), ("m2", "s1")]
    first = evaluate_automation_conditions(defs, instance)  # the sensor's first tick: a baseline
    instance.add_dynamic_partitions("model", ["m2"])  # a new model, evaluated on s1 only: m2 x s2 newly missing
    for model, suite in present:  # the tables, which passed validation (assets.automation.PassedValidation)
        table = Lake(tmp_path / "lake").table_path("samples", "samples.parquet", model, suite)
        table.parent.mkdir(parents=True)
        table.write_bytes(b"")
        instance.report_runless_asset_event(AssetMaterialization(
            "eval_samples", partition=MultiPartitionKey({"model": model, "suite": suite}),
            tags={DATA_VERSION_TAG: DataVersion(f"{model}{suite}").value}))
    result = evaluate_automation_conditions(defs, instance, cursor=first.cursor)
    requested = {key.to_user_string(): set(map(str, result.get_requested_partitions(key))) for key in defs.resolve_asset_graph().get_all_asset_keys()}
    combos = {str(MultiPartitionKey({"model": m, "suite": s})) for m, s in present}
    for asset in ("glm_binomial", "reliability", "accuracy_posteriors"):
        assert requested[asset] == combos, (asset, requested[asset])
    assert requested["suite_glm_binomial"] == {"s1", "s2"}
    # one tick at a time down the graph: what reads the suite GLMs waits while they refresh
    for waiting in ("model_profile", "suite_comparison", "report"):
        assert requested[waiting] == set(), (waiting, requested[waiting])
    instance.dispose()


def test_automation_requests_nothing_that_could_only_read_rejected_samples(tmp_path, monkeypatch):
    """A sample table that failed a blocking check stops its downstream assets in the nightly's run;
    automation must not then request them one by one (each would fail: 'the sample table failed
    validation'), nor a new model's or suite's assets when none of its tables passed ('no sample
    tables'), a failure row every night at the retry tick. An asset with outputs of an earlier night
    is requested all the same, as `evalpipeline run` runs it: its step fails rather than leave those
    outputs shown as current. A fixed table is then followed as usual."""
    from datetime import datetime, timedelta, timezone

    from dagster import AssetMaterialization, DataVersion, evaluate_automation_conditions
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    from evalpipeline.lake import Lake

    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    lake = Lake(tmp_path / "lake")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m1", "m3"])
    instance.add_dynamic_partitions("suite", ["s1"])
    # m3's model-level table exists from an earlier night
    instance.report_runless_asset_event(AssetMaterialization("model_reliability", partition="m3"))
    cursor = evaluate_automation_conditions(defs, instance).cursor
    instance.add_dynamic_partitions("model", ["m2"])  # new, its only table rejected
    instance.add_dynamic_partitions("suite", ["s2"])  # new, its only table rejected

    def samples(model: str, suite: str, version: str, rejected: bool = False):
        """What a run of eval_samples leaves: the table, its validation verdict and a materialisation."""
        lake.table_path("samples", "samples.parquet", model, suite).parent.mkdir(parents=True, exist_ok=True)
        lake.table_path("samples", "samples.parquet", model, suite).write_bytes(b"")
        lake.write_json_atomic({"failed_checks": [VALIDATION_CHECKS[0].name] if rejected else []},
                               lake.validation_path(model, suite))
        instance.report_runless_asset_event(AssetMaterialization(
            "eval_samples", partition=str(MultiPartitionKey({"model": model, "suite": suite})),
            tags={DATA_VERSION_TAG: DataVersion(version).value}))

    samples("m1", "s1", "a")
    samples("m2", "s1", "b", rejected=True)
    samples("m1", "s2", "c", rejected=True)
    samples("m3", "s1", "d", rejected=True)  # m3's only table, now rejected

    def requested(result) -> dict[str, set[str]]:
        return {key.to_user_string(): set(map(str, result.get_requested_partitions(key)))
                for key in defs.resolve_asset_graph().get_all_asset_keys()}

    result = evaluate_automation_conditions(defs, instance, cursor=cursor)
    now = requested(result)
    for asset in ("glm_binomial", "reliability", "accuracy_posteriors"):  # the accepted table's partition only
        assert now[asset] == {str(MultiPartitionKey({"model": "m1", "suite": "s1"}))}, (asset, now[asset])
    assert now["suite_glm_binomial"] == {"s1"}  # s2 holds no table that passed
    assert now["model_reliability"] == {"m1", "m3"}  # not m2, which has none; m3 has outputs to retire
    # the nightly tick's retry of what is missing does not request them either
    tomorrow = datetime.now(timezone.utc).replace(hour=2, minute=1) + timedelta(days=1)
    nightly = requested(evaluate_automation_conditions(defs, instance, cursor=result.cursor, evaluation_time=tomorrow))
    assert "m2" not in nightly["model_reliability"] and "m2" not in nightly["model_profile"], nightly
    assert not {"s2"} & (nightly["suite_glm_binomial"] | nightly["suite_leaderboard"] | nightly["suite_comparison"]), nightly
    # a fixed log for m2 passes: its assets follow
    samples("m2", "s1", "e")
    fixed = requested(evaluate_automation_conditions(defs, instance, cursor=result.cursor))
    assert str(MultiPartitionKey({"model": "m2", "suite": "s1"})) in fixed["reliability"], fixed["reliability"]
    assert "m2" in fixed["model_reliability"], fixed["model_reliability"]
    instance.dispose()


def test_a_table_rejected_on_a_later_night_refreshes_its_suite_leaderboard(tmp_path, monkeypatch):
    """A model's table passed, then a new log makes it fail a blocking check: the check stops its
    posteriors, so nothing the leaderboard reads from changed. The leaderboard leaves rejected tables out
    and must refresh on the sample table itself, or it keeps listing the model (found under the daemon:
    suite_comparison, which reads the samples, dropped it; the leaderboard did not)."""
    from dagster import AssetMaterialization, DataVersion, evaluate_automation_conditions
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    from evalpipeline.lake import Lake

    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    lake = Lake(tmp_path / "lake")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m1", "m2"])
    instance.add_dynamic_partitions("suite", ["s1"])

    def samples(model: str, version: str, rejected: bool = False):
        table = lake.table_path("samples", "samples.parquet", model, "s1")
        table.parent.mkdir(parents=True, exist_ok=True)
        table.write_bytes(b"")
        lake.write_json_atomic({"failed_checks": [VALIDATION_CHECKS[0].name] if rejected else []},
                               lake.validation_path(model, "s1"))
        instance.report_runless_asset_event(AssetMaterialization(
            "eval_samples", partition=str(MultiPartitionKey({"model": model, "suite": "s1"})),
            tags={DATA_VERSION_TAG: DataVersion(version).value}))

    for model in ("m1", "m2"):
        samples(model, f"{model}-first")
        instance.report_runless_asset_event(AssetMaterialization(
            "accuracy_posteriors", partition=str(MultiPartitionKey({"model": model, "suite": "s1"})),
            tags={DATA_VERSION_TAG: DataVersion(f"{model}-posteriors").value}))
    instance.report_runless_asset_event(AssetMaterialization(
        "suite_leaderboard", partition="s1", tags={DATA_VERSION_TAG: DataVersion("board").value}))
    cursor = evaluate_automation_conditions(defs, instance).cursor
    samples("m2", "m2-second", rejected=True)  # its posteriors are not made again
    requested = set()
    for _tick in range(3):  # it may wait a tick while what sits between is expected to refresh
        result = evaluate_automation_conditions(defs, instance, cursor=cursor)
        cursor = result.cursor
        requested |= set(map(str, result.get_requested_partitions(AssetKey("suite_leaderboard"))))
    assert requested == {"s1"}
    instance.dispose()


def test_a_failed_suite_refresh_is_requested_again_at_the_nightly_tick_not_before(tmp_path, landing, monkeypatch):
    """Automation requests a downstream partition once per change, handled whether its run succeeds or
    not, and the nightly schedule only launches model x suite runs: a suite comparison whose run failed
    is requested again at the next nightly tick (02:00 UTC by default), once, and not in between."""
    from datetime import datetime, timedelta, timezone

    from dagster import evaluate_automation_conditions

    from assets.compare import suite_comparison
    from evalpipeline.lake import Lake

    # the suite's one sample table passed validation, but is unreadable: its comparison fails
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    table = Lake(tmp_path / "lake").table_path("samples", "samples.parquet", "m1", "s1")
    table.parent.mkdir(parents=True)
    table.write_bytes(b"not parquet")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("suite", ["s1"])
    day = datetime(2026, 11, 23, tzinfo=timezone.utc)
    ticks = {"baseline": day + timedelta(hours=1), "before": day + timedelta(hours=1, minutes=30),
             "nightly": day + timedelta(hours=2, minutes=1), "after": day + timedelta(hours=2, minutes=2)}
    cursor, requested = None, {}
    for name, when in ticks.items():
        if name == "before":  # the suite's refresh fails
            failed = materialize([suite_comparison], partition_key="s1", instance=instance,
                                 resources=_resources(tmp_path / "lake", landing), raise_on_error=False)
            assert not failed.success
        result = evaluate_automation_conditions(defs, instance, cursor=cursor, evaluation_time=when)
        cursor = result.cursor
        requested[name] = set(map(str, result.get_requested_partitions(AssetKey("suite_comparison"))))
    assert requested["before"] == set() and requested["after"] == set()
    assert requested["nightly"] == {"s1"}
    instance.dispose()


def test_the_nightly_retry_waits_while_an_upstream_assets_inputs_are_being_refreshed(tmp_path, monkeypatch):
    """A new model's profile and the report are missing, so the nightly tick requests them (the retry of
    what failed or is missing), but not while the suite GLMs their suite comparison reads are refitting:
    they would read comparisons without the new model, then run again after them. Seen under the daemon:
    each model's profile ran twice on the first night. They run once, after the comparison."""
    from datetime import datetime, timedelta, timezone

    from dagster import AssetMaterialization, DagsterRunStatus, MultiPartitionKey, evaluate_automation_conditions
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    from assets.fits import SUITE_GLM_ASSETS
    from evalpipeline.lake import Lake

    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    table = Lake(tmp_path / "lake").table_path("samples", "samples.parquet", "m1", "s1")
    table.parent.mkdir(parents=True)
    table.write_bytes(b"")  # passed validation (no verdict file)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m1"])
    instance.add_dynamic_partitions("suite", ["s1"])
    day = datetime(2026, 11, 23, tzinfo=timezone.utc)
    cursor = evaluate_automation_conditions(defs, instance, evaluation_time=day + timedelta(hours=1)).cursor

    def tick(minutes: int) -> dict[str, set[str]]:
        nonlocal cursor
        result = evaluate_automation_conditions(defs, instance, cursor=cursor, evaluation_time=day + timedelta(minutes=minutes))
        cursor = result.cursor
        return {key.to_user_string(): set(map(str, result.get_requested_partitions(key)))
                for key in defs.resolve_asset_graph().get_all_asset_keys()}

    def materialised(asset: str, partition, version: str) -> None:
        instance.report_runless_asset_event(AssetMaterialization(asset, partition=partition, tags={DATA_VERSION_TAG: version}))

    materialised("eval_samples", MultiPartitionKey({"model": "m1", "suite": "s1"}), "samples")
    assert tick(61)["suite_glm_binomial"] == {"s1"}
    glms = {spec.key for glm in SUITE_GLM_ASSETS for spec in glm.specs}
    refit = instance.create_run_for_job(defs.resolve_implicit_global_asset_job_def(), asset_selection=glms,
                                        status=DagsterRunStatus.STARTED, tags={"dagster/partition": "s1"})
    tick(62)
    nightly = tick(121)  # 02:01 UTC, the suite GLMs still refitting
    assert nightly["model_profile"] == set() and nightly["report"] == set(), nightly
    for key in glms:
        materialised(key.to_user_string(), "s1", "refitted")
    instance.delete_run(refit.run_id)
    assert tick(122)["suite_comparison"] == {"s1"}
    materialised("suite_comparison", "s1", "with m1")
    assert tick(123)["model_profile"] == {"m1"}
    materialised("model_profile", "m1", "profile")
    after = tick(124)
    assert after["report"] == {"None"} and after["model_profile"] == set(), after
    instance.dispose()


def test_the_nightly_does_not_request_a_partition_a_run_is_already_running_for(tmp_path):
    """The landing sensor, automation and the nightly can each want the same partition: a partition
    with a run queued or running is left to it (both runs would fit it), also when the run is a
    range run (a backfill's: automation's or the UI's)."""
    from dagster import DagsterRunStatus
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
    from dagster._core.test_utils import create_run_for_test

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "t.csv").write_text("model,suite,item_id,score\n" + "".join(f"m{i},s,a,{i % 2}\n" for i in range(1, 6)))
    (tmp_path / "home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "home"))
    resources = {"lake": LakeResource(root=str(tmp_path / "lake"), landing=str(landing)), "ingest_settings": IngestSettings()}
    create_run_for_test(instance, job_name="ingest_and_fit", status=DagsterRunStatus.STARTED,
                        tags={"dagster/partition": str(model_suite_key("m1", "s"))})
    create_run_for_test(instance, job_name="__ASSET_JOB", status=DagsterRunStatus.STARTING,
                        tags={ASSET_PARTITION_RANGE_START_TAG: str(model_suite_key("m2", "s")),
                              ASSET_PARTITION_RANGE_END_TAG: str(model_suite_key("m3", "s"))})
    requests = _nightly_tick(instance, resources)
    assert sorted(key for keys in _requested_partitions(requests, instance) for key in keys) == [
        str(model_suite_key(m, "s")) for m in ("m4", "m5")]


def test_the_nightly_requests_ranges_one_group_per_asset_selection_and_they_run(tmp_path, monkeypatch):
    """Four models' logs on two suites, two runs at a time: the first tick requests two ranges of four
    partitions (a run per partition was eight runs). They run as the daemon runs them; then m3's log
    changes and the tables' downstream asset is missing everywhere: m3's two partitions rerun every
    asset, the other six only the missing one, each group in ranges of its own. A tick evaluated
    again gives the same run keys (Dagster launches a key once per tick); once all ran, nothing is stale."""
    import assets.partitions
    from assets.jobs import ingest_and_fit_job
    from assets.schedules import build_nightly_schedule

    landing = tmp_path / "landing"
    landing.mkdir()

    def write_log(model: str, flip: int = 0) -> None:
        rows = [f"{model},{suite},q{i},{(i + flip) % 2}" for suite in ("s1", "s2") for i in range(10)]
        (landing / f"{model}.csv").write_text("model,suite,item_id,score\n" + "\n".join(rows) + "\n")

    for model in ("m1", "m2", "m3", "m4"):
        write_log(model)
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("EVALPIPELINE_LANDING", str(landing))
    monkeypatch.setattr(assets.partitions, "runs_at_once", lambda _instance: 2)
    (tmp_path / "home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "home"))  # a schedule context needs a persistent one
    resources = {"lake": LakeResource(), "ingest_settings": IngestSettings()}
    key = {(m, s): str(model_suite_key(m, s)) for m in ("m1", "m2", "m3", "m4") for s in ("s1", "s2")}

    def tick(partition_assets):
        with build_schedule_context(instance=instance, resources=resources) as context:
            return build_nightly_schedule(ingest_and_fit_job, partition_assets)(context)

    def run(requests, steps):  # as the daemon launches them: the request's tags and selection
        return [defs.resolve_job_def("ingest_and_fit").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=request.asset_selection or steps,
            tags=request.tags, partition_key=request.partition_key).success for request in requests]

    first = tick([eval_samples])
    assert _requested_partitions(first, instance) == [
        [key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]],
        [key["m3", "s1"], key["m3", "s2"], key["m4", "s1"], key["m4", "s2"]]]
    assert [r.asset_selection for r in first] == [None, None]
    assert {r.tags["evalpipeline/reason"] for r in first} == {"1 new or changed source(s); eval_samples missing"}
    assert [r.run_key for r in tick([eval_samples])] == [r.run_key for r in first]
    assert len({r.run_key for r in first}) == 2
    assert run(first, [AssetKey("eval_samples")]) == [True, True]
    assert isinstance(tick([eval_samples]), SkipReason)

    write_log("m3", flip=1)
    second = tick([eval_samples, accuracy_posteriors])
    requested = {tuple(keys): (None if r.asset_selection is None else [k.to_user_string() for k in r.asset_selection],
                               r.tags["evalpipeline/reason"])
                 for keys, r in zip(_requested_partitions(second, instance), second)}
    missing = "accuracy_posteriors missing"
    assert requested == {
        (key["m3", "s1"], key["m3", "s2"]): (None, f"1 new or changed source(s); {missing}"),
        (key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]): (["accuracy_posteriors"], missing),
        (key["m4", "s1"], key["m4", "s2"]): (["accuracy_posteriors"], missing)}, requested
    assert run(second, [AssetKey("eval_samples"), AssetKey("accuracy_posteriors")]) == [True, True, True]
    assert set(instance.get_materialized_partitions(AssetKey("accuracy_posteriors"))) == set(key.values())
    assert isinstance(tick([eval_samples, accuracy_posteriors]), SkipReason)
    instance.dispose()


def test_every_asset_retries_transient_failures_with_backoff_but_not_bad_input():
    from dagster import Backoff, Failure

    from assets.errors import permanent_errors
    from evalpipeline.steps.samples import NoDataError

    for assets_def in defs.assets:
        policy = assets_def.op.retry_policy
        assert policy is not None and policy.max_retries >= 2 and policy.backoff == Backoff.EXPONENTIAL, assets_def.key
    # the waits the README states ("after 5 s, then 15 s, each ±5 s"), as Dagster computes them
    from dagster._core.definitions.policy import calculate_delay

    from assets.errors import TRANSIENT_RETRY as policy

    assert [calculate_delay(n, policy.backoff, None, policy.delay) for n in (1, 2)] == [5, 15]
    assert policy.max_retries == 2 and policy.delay == 5 and "after 5 s, then 15 s, each ±5 s" in README
    jittered = [calculate_delay(2, policy.backoff, policy.jitter, policy.delay) for _ in range(200)]
    assert 10 <= min(jittered) and max(jittered) <= 20
    with pytest.raises(Failure) as failure:
        with permanent_errors():
            raise NoDataError("no sources for model 'x'")
    assert failure.value.allow_retries is False and "no sources" in failure.value.description
    with pytest.raises(OSError):  # transient: propagates to the retry policy
        with permanent_errors():
            raise OSError("share busy")
    for deterministic in (TypeError("unsupported operand"), KeyError("cov_x"), IndexError("out of range")):
        with pytest.raises(Failure) as failure:  # the same input and code raise it again: not retried
            with permanent_errors():
                raise deterministic
        assert failure.value.allow_retries is False and type(deterministic).__name__ in failure.value.description


def test_every_fit_asset_has_diagnostic_checks_and_a_code_version():
    from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS

    for assets_def in PARTITION_GLM_ASSETS + SUITE_GLM_ASSETS:
        checks = {spec.name: spec for spec in assets_def.check_specs}
        assert set(checks) == {"divergences", "r_hat", "ess_bulk", "ess_tail", "bfmi", "pareto_k"}
        assert all(checks[name].blocking for name in ("divergences", "r_hat", "ess_bulk", "ess_tail", "bfmi"))
        assert not checks["pareto_k"].blocking
        (version,) = set(assets_def.code_versions_by_key.values())
        assert version
        assert assets_def.op.pool == "fit"
    from assets.reliability import model_reliability, reliability

    assert reliability.op.pool == model_reliability.op.pool == "fit"  # HIP-LLM fits share the cores too


def test_changing_one_models_priors_changes_only_its_code_version(tmp_path, monkeypatch):
    from assets.fits import glm_version

    before = {glm: glm_version(glm) for glm in ("binomial", "beta_binomial", "null")}
    config = tmp_path / "evalpipeline.toml"
    config.write_text("[glm.priors.binomial]\nsigma_subdomain_scale = 0.2\n")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    after = {glm: glm_version(glm) for glm in before}
    assert after["binomial"] != before["binomial"]
    assert after["beta_binomial"] == before["beta_binomial"] and after["null"] == before["null"]


def test_the_ingest_and_validation_configuration_is_in_the_sample_tables_code_version(tmp_path, monkeypatch):
    """Editing how scores are read or validated marks the sample tables stale (and only them);
    the chunk size, which does not change a row, does not."""
    from assets.fits import glm_version
    from assets.posteriors import posteriors_version
    from assets.samples import samples_version

    config = tmp_path / "evalpipeline.toml"
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    others = (posteriors_version(), glm_version("binomial"))
    versions = {}
    for label, text in [
        ("default", ""),
        ("chunk", "[ingest]\nchunk_rows = 1000\n"),
        ("score map", "[ingest.scores]\nvalue_map = {C = 1.0, I = 0.0, P = 1.0}\n"),
        ("validation", "[validate]\nmax_error_share = 0.5\n"),
    ]:
        config.write_text(text)
        versions[label] = samples_version()
        assert (posteriors_version(), glm_version("binomial")) == others, label
    assert versions["chunk"] == versions["default"]
    assert len({versions["default"], versions["score map"], versions["validation"]}) == 3


def test_moving_a_suite_marks_the_partition_reliability_stale_and_a_profile_edit_only_the_models(tmp_path, monkeypatch):
    from assets.reliability import model_reliability, model_version, partition_version, reliability

    # the assets carry these versions (computed at import, under the session's configuration)
    assert set(model_reliability.code_versions_by_key.values()) == {model_version()}
    assert set(reliability.code_versions_by_key.values()) == {partition_version()}
    config, taxonomy = tmp_path / "evalpipeline.toml", tmp_path / "taxonomy.toml"
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    taxonomy.write_text("# nothing mapped yet\n")
    before = (partition_version(), model_version())
    taxonomy.write_text("# a comment changes nothing\n\n")
    assert (partition_version(), model_version()) == before
    taxonomy.write_text('[suites]\narith = "arith"\n')  # a suite listed under its own name: no move
    assert partition_version() == before[0]
    taxonomy.write_text('[suites]\narith = "math"\n')
    mapped = (partition_version(), model_version())
    taxonomy.write_text('[suites]\narith = "math"\n[profile.domains]\nmath = 1.0\n')
    weighted = (partition_version(), model_version())
    # the partitions' tables name the suite's domain; the profile weighs only the model level
    assert mapped[0] != before[0] and weighted[0] == mapped[0]
    assert len({before[1], mapped[1], weighted[1]}) == 3


def test_reliability_versions_do_not_depend_on_where_the_project_lives(tmp_path, monkeypatch):
    """The same configuration and taxonomy in two folders give the same reliability versions: a lake
    or project copied elsewhere must not recompute every reliability table (the taxonomy's absolute
    path was part of them). Its contents still count."""
    from assets.reliability import _version, model_version, partition_version

    versions = []
    for folder in ("here", "elsewhere"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "evalpipeline.toml").write_text("[reliability]\nn_draws = 500\n")
        (tmp_path / folder / "taxonomy.toml").write_text('[suites]\narith = "math"\n')
        monkeypatch.setenv("EVALPIPELINE_CONFIG", str(tmp_path / folder / "evalpipeline.toml"))
        versions.append((_version(), partition_version(), model_version()))
    assert versions[0] == versions[1]
    (tmp_path / "elsewhere" / "taxonomy.toml").write_text('[suites]\narith = "numbers"\n')
    moved = (_version(), partition_version(), model_version())
    assert moved[0] == versions[0][0] and moved[1] != versions[0][1] and moved[2] != versions[0][2]


def test_the_conjugate_prior_comes_from_the_configuration_and_changes_only_its_code_version(
    landing, tmp_path, monkeypatch
):
    from assets.fits import glm_version
    from assets.compare import comparison_version
    from assets.posteriors import posteriors_version
    from assets.reliability import partition_version as reliability_version
    from evalpipeline.settings import ConfigError

    config = tmp_path / "evalpipeline.toml"  # (the taxonomy path is relative to the configuration's folder)
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    before = (posteriors_version(), comparison_version(), glm_version("binomial"), reliability_version())
    config.write_text("[posterior]\nprior_a = 2\nprior_b = 2\n")
    after = (posteriors_version(), comparison_version(), glm_version("binomial"), reliability_version())
    # the suite comparisons and model profiles state the same conjugate posterior, so they go stale too
    assert after[0] != before[0] and after[1] != before[1] and after[2:] == before[2:]

    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/beta/v2")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize([eval_samples, accuracy_posteriors], partition_key=model_suite_key("mockllm/beta/v2", "unit suite"),
                         instance=instance, resources=_resources(tmp_path / "lake", landing))
    assert result.success
    table = pd.read_parquet(next((tmp_path / "lake" / "accuracy_posteriors").rglob("posteriors.parquet")))
    overall = table[table["level"] == "overall"].iloc[0]
    # 6 of 6 right under Beta(2, 2): posterior Beta(8, 2), mean 8 / 10 (Beta(1, 1) would give 7 / 8)
    assert (overall["prior_a"], overall["prior_b"], overall["k"], overall["n"]) == (2.0, 2.0, 6, 6)
    assert overall["posterior_mean"] == pytest.approx(0.8)
    from assets.compare import _comparison

    import logging

    _comparison(_resources(tmp_path / "lake", landing)["lake"], to_partition_key("unit suite"), logging.getLogger("test"))
    (board,) = (tmp_path / "lake" / "suite_comparison").rglob("leaderboard.parquet")
    row = pd.read_parquet(board).iloc[0]
    assert (row["prior_a"], row["prior_b"], row["posterior_mean"]) == (2.0, 2.0, pytest.approx(0.8))

    config.write_text("[posterior]\nprior_a = 0\n")
    with pytest.raises(ConfigError, match=r"evalpipeline.toml: \[posterior\] prior_a and prior_b must be positive"):
        posteriors_version()
    config.write_text("[posterior]\nhpdi = 0.9\n")
    with pytest.raises(ConfigError, match=r"unknown keys in \[posterior\]: \['hpdi'\]"):
        posteriors_version()


def _dagster_importers():
    """Modules of the library (other than the composition root) that import dagster."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "evalpipeline"
    pattern = re.compile(r"^\s*(import|from) dagster", re.M)
    return [str(p) for p in root.rglob("*.py") if p.name != "definitions.py" and pattern.search(p.read_text())]


def _resources(lake_root, landing):
    return {
        "lake": LakeResource(root=str(lake_root), landing=str(landing)),
        "ingest_settings": IngestSettings(),
        "posterior_settings": PosteriorSettings(),
    }


def test_materialize_one_partition_and_the_leaderboard(landing, tmp_path):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha"), to_partition_key("mockllm/beta/v2")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite"), "other"])
    resources = _resources(tmp_path / "lake", landing)
    for model in ["mockllm/alpha", "mockllm/beta/v2"]:
        result = materialize(
            [eval_samples, accuracy_posteriors],
            partition_key=model_suite_key(model, "unit suite"),
            instance=instance,
            resources=resources,
        )
        assert result.success
        meta = result.asset_materializations_for_node("eval_samples")[0].metadata
        assert meta["rows_read"].value == 6 == meta["rows_ingested"].value + meta["rows_quarantined"].value
        assert (tmp_path / "lake" / "validation" / "data_docs").exists() and "index.html" in meta["data_docs"].value
        assert all(c.passed for c in result.get_asset_check_evaluations())
    board_run = materialize(
        [suite_leaderboard], partition_key=to_partition_key("unit suite"), instance=instance, resources=resources
    )
    assert board_run.success
    board = pd.read_parquet(tmp_path / "lake/suite_leaderboard/suite=unit%20suite/leaderboard.parquet")
    # beta answered all 6 right, alpha 3 of 6; (alpha, other) was never materialised and is simply absent.
    assert board["model"].tolist() == ["mockllm/beta/v2", "mockllm/alpha"]
    assert board["posterior_mean"].tolist() == pytest.approx([7 / 8, 4 / 8])
    event = instance.get_latest_materialization_event(AssetKey("suite_leaderboard"))
    assert event.asset_materialization.metadata["dagster/row_count"].value == 2


def test_what_a_killed_run_leaves_behind_is_stale_until_refreshed(tmp_path):
    """A nightly killed after staging a changed log (or after some of its assets) must be finished by
    the next one, although the lake already holds the log's bytes: the sample table whose files
    changed after it was recorded, then each asset older than its input, is stale until rerun."""
    from assets.schedules import current_files_states, input_partitions, stale_partitions
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import ingest_partitions
    from evalpipeline.steps.discovery import discover

    landing = tmp_path / "landing"
    make_log(landing, model="mockllm/alpha", suite="unit suite", items=6)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    resources = _resources(tmp_path / "lake", landing)
    pair_key, suite_key = model_suite_key("mockllm/alpha", "unit suite"), to_partition_key("unit suite")
    store = Lake(tmp_path / "lake")
    pair_assets, suite_assets = [eval_samples, accuracy_posteriors], [suite_leaderboard]

    def stale() -> dict[str, set[str]]:
        discovery = discover(store, landing)
        assert not discovery.changed  # the lake holds every log: only the checks below can tell
        inputs = input_partitions(pair_assets + suite_assets, discovery.partitions)
        found = set()
        for assets, partition, states in ((pair_assets, str(pair_key), current_files_states(store, discovery.partitions)),
                                          (suite_assets, suite_key, None)):
            versions = {k: v for a in assets for k, v in a.code_versions_by_key.items()}
            why = stale_partitions(instance, versions, [partition], inputs=inputs, files_states=states)
            found |= {reason for reasons in why.values() for reason in reasons.values()}
        return found

    def run(assets, key):
        assert materialize(assets, partition_key=key, instance=instance, resources=resources).success

    run(pair_assets, pair_key)
    run(suite_assets, suite_key)
    assert stale() == set()
    # a second log of the same pair is staged and consolidated, then the run is killed. Inspect records
    # whole seconds: in the first log's second the two would tie, and which is kept would be arbitrary.
    time.sleep(1.05 - time.time() % 1)
    make_log(landing, model="mockllm/alpha", suite="unit suite", items=6, answers={(f"q{i}", 1): "yes" for i in range(6)})
    ingest_partitions(store, landing, [("mockllm/alpha", "unit suite")])
    assert stale() == {"eval_samples its files changed since (an interrupted run, or an ingest outside Dagster)"}
    run([eval_samples], pair_key)  # killed after the sample table, before the posteriors
    # the leaderboard reads the sample table's verdict too (a table rejected later leaves it)
    assert stale() == {"accuracy_posteriors older than its input eval_samples",
                       "suite_leaderboard older than its input eval_samples"}
    run([accuracy_posteriors], pair_key)  # killed before the suite stage
    assert stale() == {"suite_leaderboard older than its input accuracy_posteriors, eval_samples"}
    run(suite_assets, suite_key)
    assert stale() == set()
    board = pd.read_parquet(store.root / "suite_leaderboard/suite=unit%20suite/leaderboard.parquet")
    assert board["posterior_mean"].tolist() == pytest.approx([7 / 8])  # the newer log's 6 of 6, not 3 of 6
    instance.dispose()


def test_failing_validation_blocks_the_downstream_fit(tmp_path):
    landing = tmp_path / "landing"
    # every answer is scored with an unknown value: all rows quarantined, the sample table is empty
    make_log(landing, model="mockllm/broken", suite="unit suite", items=4, scorers=[echo()])
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/broken")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize(
        [eval_samples, accuracy_posteriors],
        partition_key=model_suite_key("mockllm/broken", "unit suite"),
        instance=instance,
        resources=_resources(tmp_path / "lake", landing),
        raise_on_error=False,
    )
    assert not result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {spec.name for spec in VALIDATION_CHECKS}
    assert not checks["row_count_positive"].passed
    assert checks["row_count_positive"].metadata["partition"].value == "mockllm/broken x unit suite"
    meta = result.asset_materializations_for_node("eval_samples")[0].metadata
    assert (meta["rows_read"].value, meta["rows_ingested"].value, meta["rows_quarantined"].value) == (4, 0, 4)
    assert result.asset_materializations_for_node("accuracy_posteriors") == []
    assert not (tmp_path / "lake" / "accuracy_posteriors").exists()


def test_rows_in_no_partition_reach_the_accounting_asset(tmp_path):
    """A landing table with rows that name no model, or a model too long for a partition key: the
    partition of the file's other rows ingests them, and the accounting counts the rest."""
    from assets.accounting import ingest_accounting
    from evalpipeline.steps.accounting import UNPLACED_MODEL

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "t.csv").write_text("model,suite,item_id,score\nm,s,q1,1\nm,s,q2,0\n,s,q3,1\n"
                                   f"{'x' * 201},s,q1,1\n")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m"])
    instance.add_dynamic_partitions("suite", ["s"])
    resources = _resources(tmp_path / "lake", landing)
    assert materialize([eval_samples], partition_key=model_suite_key("m", "s"), instance=instance,
                       resources=resources).success
    result = materialize([ingest_accounting], instance=instance, resources=resources)
    meta = result.asset_materializations_for_node("ingest_accounting")[0].metadata
    assert (meta["rows_ingested"].value, meta["rows_quarantined"].value) == (2, 2)
    assert meta["rows_in_no_partition"].value == 2 and meta["unreadable_files"].value == 0
    table = pd.read_parquet(tmp_path / "lake" / "ingest_accounting" / "accounting.parquet")
    assert table["model"].tolist() == ["m", UNPLACED_MODEL] and table["suite"].tolist()[1] == str(landing / "t.csv")
    instance.dispose()


def _record_failed_run(instance, run_id: str, lake_resource):
    """Run the failure sensor on the failed run ``run_id``, as the daemon would; returns the run."""
    from dagster import DagsterEventType, build_run_status_sensor_context

    from assets.status import record_run_failures

    run = instance.get_run_by_id(run_id)
    failure = next(e for e in instance.all_logs(run.run_id) if e.dagster_event and
                   e.dagster_event.event_type == DagsterEventType.RUN_FAILURE).dagster_event
    with build_run_status_sensor_context(sensor_name="record_run_failures", dagster_instance=instance,
                                         dagster_run=run, dagster_event=failure,
                                         resources={"lake": lake_resource}) as context:
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
    resources = _resources(tmp_path / "lake", landing)
    result = materialize([eval_samples], partition_key=model_suite_key("mockllm/ghost", "unit suite"),
                         instance=instance, resources=resources, raise_on_error=False)
    assert not result.success
    run = _record_failed_run(instance, result.run_id, resources["lake"])
    table = read_run_failures(Lake(tmp_path / "lake"))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["run_id"], row["asset"], row["partition"]) == (run.run_id, "eval_samples", "mockllm%2Fghost|unit%20suite")
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
    resources = _resources(tmp_path / "lake", landing)
    result = materialize([eval_samples], partition_key=model_suite_key("m", "s"), instance=instance,
                         resources=resources, raise_on_error=False)
    assert not result.success
    run = _record_failed_run(instance, result.run_id, resources["lake"])
    (summary,) = read_run_failures(Lake(tmp_path / "lake"))["error_summary"]
    assert summary.startswith("1 blocking asset check failed with ERROR severity: eval_samples: "
                              "errored_share_within_bound | eval_samples:errored_share_within_bound on m x s: "
                              "observed 0.5; first: item_id=q1; epoch=1; log_path="), summary
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
        record_run_failure(lake, run_id=run_id, job="j", partition=partition,
                           failures=[StepFailure("x", "x", "E", "m")], failed_at="t")
    folder = tmp_path / "lake" / "run_status" / "failures"
    old = pd.DataFrame([{"run_id": "0old", "job": "j", "asset": "x", "partition": "r", "step": "x", "error_type": "E",
                         "error_summary": "m", "failed_at": "t", "resolved_by": None, "resolved_at": None}])
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

    from assets.status import PID_TAG, recorded_here
    from evalpipeline.definitions import defs

    @asset
    def someone_elses():
        return 1

    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(materialize([someone_elses], instance=instance).run_id)
    event = next(e for e in instance.all_logs(run.run_id) if e.dagster_event and
                 e.dagster_event.event_type == DagsterEventType.RUN_SUCCESS).dagster_event
    cases = [("__ASSET_JOB", {}, {AssetKey("eval_samples")}, True),        # the CLI's or the UI's materialisation
             ("ingest_and_fit", {}, None, True),                            # the nightly's, a backfill's
             ("ingest_and_fit", {PID_TAG: "123"}, None, False),             # evalpipeline run's own
             ("__ASSET_JOB", {}, {AssetKey("someone_elses")}, False),       # another location's assets
             ("__ASSET_JOB", {}, {AssetKey("eval_samples"), AssetKey("someone_elses")}, False),
             ("their_job", {}, None, False)]
    for job, tags, selection, expected in cases:
        other = run._replace(job_name=job, tags=tags, asset_selection=frozenset(selection) if selection else None)
        with build_run_status_sensor_context(sensor_name="record_run_failures", dagster_event=event,
                                             dagster_instance=instance, dagster_run=other,
                                             repository_def=defs.get_repository_def()) as context:
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
    from evalpipeline.definitions import defs
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
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("eval_samples")],
            tags={ASSET_PARTITION_RANGE_START_TAG: key[first], ASSET_PARTITION_RANGE_END_TAG: key[last]})
        run = instance.get_run_by_id(result.run_id)
        status = DagsterEventType.RUN_SUCCESS if result.success else DagsterEventType.RUN_FAILURE
        event = next(e for e in instance.all_logs(run.run_id) if e.dagster_event and
                     e.dagster_event.event_type == status).dagster_event
        with build_run_status_sensor_context(sensor_name="status", dagster_instance=instance, dagster_run=run,
                                             dagster_event=event, resources={"lake": lake_resource},
                                             repository_def=defs.get_repository_def()) as context:
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
    from evalpipeline.definitions import defs

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
        tags = {} if last is None else {ASSET_PARTITION_RANGE_START_TAG: key[first], ASSET_PARTITION_RANGE_END_TAG: key[last]}
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=steps, tags=tags,
            partition_key=key[first] if last is None else None)
        run = instance.get_run_by_id(result.run_id)
        if result.success:
            return True, []
        event = next(e for e in instance.all_logs(run.run_id) if e.dagster_event and
                     e.dagster_event.event_type == DagsterEventType.RUN_FAILURE).dagster_event
        with build_run_status_sensor_context(sensor_name="rerun_rest_of_failed_ranges", dagster_instance=instance,
                                             dagster_run=run, dagster_event=event,
                                             repository_def=defs.get_repository_def()) as context:
            return False, list(rerun_rest_of_failed_ranges(context.for_run_failure()) or [])

    ok, requests = rest_of("m1", "m4")
    assert not ok
    blocks = [(r.partition_key, r.tags.get(ASSET_PARTITION_RANGE_START_TAG), r.tags.get(ASSET_PARTITION_RANGE_END_TAG))
              for r in requests]
    assert blocks == [(key["m1"], None, None), (None, key["m3"], key["m4"])], blocks
    assert {r.job_name for r in requests} == {"ingest_and_fit"}
    assert all(list(r.asset_selection) == steps and r.tags[REST_OF_TAG] for r in requests)
    assert len({r.run_key for r in requests}) == 2
    for request in requests:  # as the daemon launches them
        result = defs.resolve_job_def(request.job_name).execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=request.asset_selection,
            partition_key=request.partition_key, tags=request.tags)
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
    run = DagsterRun(job_name="ingest_and_fit", run_id="r1",
                     tags={ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last})
    assert _run_partition_keys(run, instance) == [first, last]
    assert _run_partition_keys(DagsterRun(job_name="lake_reports", run_id="r2", tags={}), instance) == ""

    lake = Lake(tmp_path / "lake")
    record_run_failure(lake, run_id="r1", job="ingest_and_fit", partition=[first, last],
                       failures=[StepFailure("(run)", "", "ProcessDied", "gone")], failed_at="t")
    record_run_failure(lake, run_id="r3", job="ingest_and_fit", partition=first,
                       failures=[StepFailure("glm_binomial", "glm_binomial", "E", "m")], failed_at="t")
    assert resolve_up_to_date(lake, partitions={first}, resolved_at="t2") == 1
    table = read_run_failures(lake)
    assert sorted(zip(table["run_id"], table["partition"], table["resolved_by"].fillna(""))) == [
        ("r1", first, "(up to date)"), ("r1", last, ""), ("r3", first, "")], table  # a failed step waits for its rerun
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
        record_run_failure(lake, run_id=run_id, job=run_job, partition=key,
                           failures=[StepFailure("(run)", "", "ProcessDied", "killed")], failed_at="t")
    assert read_run_failures(lake)["resolved_at"].isna().all()
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize([eval_samples], partition_key=key, instance=instance,
                         resources=_resources(tmp_path / "lake", landing))
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    success = next(e for e in instance.all_logs(run.run_id) if e.dagster_event and
                   e.dagster_event.event_type == DagsterEventType.RUN_SUCCESS).dagster_event
    with build_run_status_sensor_context(sensor_name="resolve_run_failures", dagster_instance=instance,
                                         dagster_run=run, dagster_event=success,
                                         resources={"lake": LakeResource(root=str(tmp_path / "lake"))}) as context:
        resolve_run_failures(context)
    table = read_run_failures(lake)
    resolved = table[table["resolved_at"].notna()]
    # eval_samples of this partition, whichever job failed it, and the whole failed run of this job
    assert sorted(zip(resolved["run_id"], resolved["asset"])) == [("a1", "eval_samples"), ("b1", "eval_samples"),
                                                                  ("c1", "(run)")], table
    assert set(resolved["resolved_by"]) == {run.run_id}
    unresolved = table[table["resolved_at"].isna()]
    # another partition; an asset the run did not materialise; a whole run of another job
    assert sorted(zip(unresolved["run_id"], unresolved["asset"])) == [
        ("a1", "x"), ("a2", "eval_samples"), ("a2", "x"), ("b1", "x"), ("c2", "(run)")], table
    # resolving again marks nothing: the first resolution stays
    assert resolve_failures(lake, job=job, partitions=[key], assets={"eval_samples"}, run_id="later",
                            resolved_at="t2") == 0
    assert resolve_failures(lake, job="ingest_and_fit", partitions=[key], assets={"partition_plots"}, run_id="r",
                            resolved_at="t3") == 1  # its whole-run row only
    assert resolve_failures(lake, job="ingest_and_fit", partitions=[key], assets={"x"}, run_id="r",
                            resolved_at="t3") == 2
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

    @asset(check_specs=[AssetCheckSpec("rows_sane", asset="strict", blocking=True),
                        AssetCheckSpec("rows_few", asset="strict", blocking=True)])
    def strict():
        yield MaterializeResult()
        yield AssetCheckResult(check_name="rows_sane", passed=False, metadata={
            "partition": "m x s", "observed": "{'items_not_scored': 1}",
            "first_example": "item_id=q7; log_path=logs/m.eval; sample_index=3; reason=score 1.7 outside [0, 1]"})
        yield AssetCheckResult(check_name="rows_few", passed=True, metadata={"first_example": "not a failure"})

    for assets_def, error_type, words in ((full_disk, "OSError", ["No space left on device", "max_retries of 1"]),
                                          (strict, "DagsterAssetCheckFailedError", ["blocking asset check", "rows_sane"])):
        result = materialize([assets_def], instance=DagsterInstance.ephemeral(), raise_on_error=False)
        (record,) = step_failures([e for e in result.all_events if e.is_step_failure], "")
        assert record.error_type == error_type, record
        assert all(word in record.message for word in words), record

    # with the run's check evaluations, a failed check's record says what it saw and where (first line)
    from evalpipeline.steps.run_status import summarise_error

    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    (record,) = step_failures([e for e in result.all_events if e.is_step_failure], "", checks)
    summary = summarise_error(record.message)
    assert summary.endswith(" | strict:rows_sane on m x s: observed {'items_not_scored': 1}; first: item_id=q7; "
                            "log_path=logs/m.eval; sample_index=3; reason=score 1.7 outside [0, 1]"), summary
    assert "rows_few" not in summary and "not a failure" not in summary


def _requested_partitions(result, instance) -> list[list[str]]:
    """The partitions of each run request of a landing sensor result (its new partitions registered as
    the daemon registers them) or of a schedule's list of requests (a range request names its ends)."""
    from assets.partitions import model_suite_partitions
    from assets.status import range_partition_keys

    for request in getattr(result, "dynamic_partitions_requests", None) or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    requests = result.run_requests if hasattr(result, "run_requests") else result
    return [range_partition_keys(r.tags, model_suite_partitions, instance) or [str(r.partition_key)]
            for r in requests]


def test_sensor_registers_partitions_and_requests_each_new_contents_partitions_in_ranges(landing, tmp_path):
    from assets.partitions import runs_at_once

    instance = DagsterInstance.ephemeral()
    resources = {"lake": LakeResource(root=str(tmp_path), landing=str(landing)), "ingest_settings": IngestSettings()}
    # Contexts are used as context managers: reading .instance enters the instance into a
    # context variable that only __exit__ resets (tests/conftest.py fails a test that leaks it).
    with build_sensor_context(instance=instance, resources=resources) as context:
        result = landing_sensor(context)
    added = {tuple(sorted(r.partition_keys)) for r in result.dynamic_partitions_requests}
    assert added == {("mockllm%2Falpha", "mockllm%2Fbeta%2Fv2"), ("other", "unit%20suite")}
    requested = _requested_partitions(result, instance)
    # every partition of the new logs once, in as many runs as the run queue starts at once
    assert sorted(key for keys in requested for key in keys) == sorted(str(model_suite_key(m, s)) for m, s in [
        ("mockllm/alpha", "unit suite"), ("mockllm/beta/v2", "unit suite"), ("mockllm/alpha", "other")])
    assert all(len(keys) <= -(-3 // runs_at_once(instance)) for keys in requested), requested
    names = sorted(p.name for p in landing.iterdir())
    assert sorted(n for r in result.run_requests for n in r.tags["evalpipeline/source"].split(", ")) == names
    assert len({r.run_key for r in result.run_requests}) == len(result.run_requests)
    with build_sensor_context(instance=instance, cursor=result.cursor, resources=resources) as context:
        again = landing_sensor(context)
    assert not again.run_requests
    instance.dispose()


def test_the_landing_sensor_sizes_its_ranges_by_the_run_queue(tmp_path):
    from assets.partitions import runs_at_once

    import yaml

    repository = yaml.safe_load((REPO / "dagster_home" / "dagster.yaml").read_text())  # the repository's instance
    (tmp_path / "repository").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "repository"), overrides=repository) as instance:
        assert runs_at_once(instance) == 2
    with DagsterInstance.local_temp(str(tmp_path), overrides={"concurrency": {"runs": {"max_concurrent_runs": 5}}}) as instance:
        assert runs_at_once(instance) == 5
    with DagsterInstance.ephemeral() as instance:  # no run queue: the cores
        assert runs_at_once(instance) == os.cpu_count()


def test_the_landing_sensors_ranges_run_and_a_range_whose_check_fails_for_one_log_leaves_the_rest_to_automation(
        tmp_path, monkeypatch):
    """Four models' logs on two suites land at once; m4's log on s1 is half errored (a blocking check
    fails). The sensor asks for two runs of four partitions (two runs at a time): m1..m2 and m3..m4 on
    s1..s2. Run as the daemon runs them, the first materialises its four; the second materialises its
    sample tables, and Dagster skips its later steps for all four partitions. Automation then requests
    them for the three whose tables passed, and nothing for the rejected one."""
    import assets.partitions
    from dagster import evaluate_automation_conditions

    landing = tmp_path / "landing"
    landing.mkdir()
    for model in ("m1", "m2", "m3", "m4"):
        rows = [f"{model},{suite},q{i},{i % 2},{'timeout' if model == 'm4' and suite == 's1' and i % 2 else ''}"
                for suite in ("s1", "s2") for i in range(10)]
        (landing / f"{model}.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("EVALPIPELINE_LANDING", str(landing))
    monkeypatch.setattr(assets.partitions, "runs_at_once", lambda _instance: 2)
    instance = DagsterInstance.ephemeral()
    with build_sensor_context(instance=instance, resources={"lake": LakeResource(), "ingest_settings": IngestSettings()}) as context:
        result = landing_sensor(context)
    key = {(m, s): str(model_suite_key(m, s)) for m in ("m1", "m2", "m3", "m4") for s in ("s1", "s2")}
    assert _requested_partitions(result, instance) == [
        [key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]],
        [key["m3", "s1"], key["m3", "s2"], key["m4", "s1"], key["m4", "s2"]]]
    cursor = evaluate_automation_conditions(defs, instance).cursor  # the automation sensor's earlier tick
    steps = [AssetKey("eval_samples"), AssetKey("accuracy_posteriors")]
    outcomes = [defs.resolve_job_def("ingest_and_fit").execute_in_process(  # as the daemon launches them
        instance=instance, raise_on_error=False, asset_selection=steps, tags=request.tags,
        partition_key=request.partition_key) for request in result.run_requests]
    assert [outcome.success for outcome in outcomes] == [True, False]
    assert set(instance.get_materialized_partitions(AssetKey("eval_samples"))) == set(key.values())
    assert set(instance.get_materialized_partitions(AssetKey("accuracy_posteriors"))) == {
        key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]}
    automation = evaluate_automation_conditions(defs, instance, cursor=cursor)
    requested = {asset: set(map(str, automation.get_requested_partitions(AssetKey(asset))))
                 for asset in ("accuracy_posteriors", "glm_binomial", "reliability")}
    passed = set(key.values()) - {key["m4", "s1"]}
    assert requested == {"accuracy_posteriors": {key["m3", "s1"], key["m3", "s2"], key["m4", "s2"]},
                         "glm_binomial": passed, "reliability": passed}, requested
    instance.dispose()


def test_sensor_skips_logs_the_lake_already_holds(landing, tmp_path):
    from evalpipeline.ingest import find_log_files, ingest_paths, scan_sources
    from evalpipeline.lake import Lake

    files = find_log_files(landing)
    ingest_paths(files[:2], Lake(tmp_path / "lake"))
    with build_sensor_context(
        instance=DagsterInstance.ephemeral(),
        resources={"lake": LakeResource(root=str(tmp_path / "lake"), landing=str(landing)), "ingest_settings": IngestSettings()},
    ) as context:
        result = landing_sensor(context)
        requested = _requested_partitions(result, context.instance)
    assert [r.tags["evalpipeline/source"] for r in result.run_requests] == [files[2].name]
    (source, parts), = scan_sources([files[2]], IngestSettings().options())[0]
    assert requested == [[str(model_suite_key(part.model, part.suite)) for part in parts]]


def test_sensor_requests_a_log_reverted_to_an_earlier_content_again(tmp_path):
    """A log edited from A to B and back to A is a change each time: the third request must not reuse
    the first's run key, which Dagster would skip (the run keys of a content alone did that). The
    revert here also restores A's mtime, as `cp -p A.bak scores.csv` does (a key of the content and
    the mtime did not see it)."""
    import os

    from evalpipeline.ingest import ingest_paths
    from evalpipeline.lake import Lake

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    log = landing / "scores.csv"
    contents = {"A": "model,suite,item_id,score\nm,s,a,1\nm,s,b,0\n", "B": "model,suite,item_id,score\nm,s,a,1\nm,s,b,1\n"}
    instance = DagsterInstance.ephemeral()
    resources = {"lake": LakeResource(root=str(lake.root), landing=str(landing)), "ingest_settings": IngestSettings()}
    cursor, keys = None, []
    for step, content in enumerate(["A", "B", "A"]):
        log.write_text(contents[content])
        os.utime(log, ns=(10**18 + (step % 2) * 10**9,) * 2)  # A's mtime twice; B's later
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            result = landing_sensor(context)
        (request,) = result.run_requests
        assert (str(request.partition_key), request.tags["evalpipeline/source"]) == ("m|s", "scores.csv")
        keys.append(request.run_key)
        cursor = result.cursor
        ingest_paths([log], lake, IngestSettings().options())  # what the requested run does
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            assert not landing_sensor(context).run_requests  # unchanged since: nothing to request
    assert len(set(keys)) == 3


def _nightly_tick(instance, resources):
    from assets.jobs import ingest_and_fit_job
    from assets.schedules import build_nightly_schedule

    with build_schedule_context(instance=instance, resources=resources) as context:
        return build_nightly_schedule(ingest_and_fit_job, [eval_samples])(context)


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
    _nightly_tick(instance, resources)
    assert set(instance.get_dynamic_partitions("model")) == {"old-name", "kept", "flaky"}
    assert set(instance.get_dynamic_partitions("suite")) == {"s1", "old-suite"}
    ingest_paths([table, unstable], lake)
    # failures recorded against partitions that are about to be retired, and against others
    from evalpipeline.steps.run_status import RETIRED, StepFailure, read_run_failures, record_run_failure

    doomed = {"r1": str(model_suite_key("old-name", "s1")), "r2": "old-name", "r3": "old-suite"}
    others = {"r4": str(model_suite_key("flaky", "s1")), "r5": str(model_suite_key("kept", "s1")), "r6": "kept",
              "r7": "old-name|s1..kept|s1", "r8": ""}
    for run_id, partition in {**doomed, **others}.items():
        record_run_failure(lake, run_id=run_id, job="j", partition=partition,
                           failures=[StepFailure("a", "a", "E", "m")], failed_at="t")

    # registered and in the lake, but no log names them now: nothing is deleted before the ingest retires them
    table.write_text("model,suite,item_id,score\nnew-name,s1,a,1\nkept,s1,a,1\n")
    unstable.write_bytes(b"\xff\xfe\x00 a half-copied file")  # unreadable: recorded under file_errors/
    _nightly_tick(instance, resources)
    assert set(instance.get_dynamic_partitions("model")) == {"old-name", "kept", "flaky", "new-name"}
    assert read_run_failures(lake)["resolved_at"].isna().all()  # nothing is retired yet
    report = ingest_paths([table], lake)
    assert set(report.retired) == {("old-name", "s1"), ("old-name", "old-suite")}

    _nightly_tick(instance, resources)
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
        capsys.readouterr().out)


#: Small settings for the end-to-end tests of a few tiny partitions: no GLM, a short reliability run.
SMALL_PROJECT_CONFIG = (
    "[glm]\nmodels = []\n[reliability]\nn_configurations = 20\nn_draws = 200\ngrid_size = 100\nhorizons = [1, 5]\n")


def _small_project(tmp_path, monkeypatch, logs: dict[str, str] | None = None):
    """A project in ``tmp_path`` (the working folder) with ``SMALL_PROJECT_CONFIG`` and a landing
    folder of ``logs`` (file name -> text; default: alpha and beta on arith and logic, 8 items each,
    one table each). Returns the landing folder."""
    landing = tmp_path / "landing"
    landing.mkdir()
    if logs is None:
        logs = {}
        for model in ("alpha", "beta"):
            for suite in ("arith", "logic"):
                rows = [f"{model},{suite},q{i},{(i + len(model)) % 2},d,{suite}" for i in range(8)]
                logs[f"{model}_{suite}.csv"] = "model,suite,item_id,score,domain,subdomain\n" + "\n".join(rows) + "\n"
    for name, text in logs.items():
        (landing / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evalpipeline.toml").write_text(SMALL_PROJECT_CONFIG)
    monkeypatch.setenv("EVALPIPELINE_LANDING", "landing")
    monkeypatch.setenv("EVALPIPELINE_LAKE", "lake")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return landing


@pytest.mark.slow
def test_only_changed_refreshes_the_suite_and_model_a_retired_partition_leaves(tmp_path, monkeypatch, capsys):
    """A log rewritten under another model name retires the old model x suite. The nightly
    (`--only-changed`) must then also redo the suite it left (its leaderboard listed the old model)
    and the old model's other suites' model outputs, though neither has a new or changed log."""
    landing = _small_project(tmp_path, monkeypatch)
    assert run_main_job() == 0
    board = lambda suite: set(pd.read_parquet(f"lake/suite_comparison/suite={suite}/leaderboard.parquet")["model"])  # noqa: E731
    assert board("logic") == {"alpha", "beta"}

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
    logs = {f"{m}_{s}.csv": "model,suite,item_id,score,domain,subdomain\n"
            + "\n".join(f"{m},{s},q{i},{(i + len(m)) % 2},d,{s}" for i in range(8)) + "\n"
            for m in ("alpha", "beta") for s in ("arith", "logic")}
    landing = _small_project(tmp_path, monkeypatch, logs={**logs, "bad.csv": "model,suite,item_id,score,error\n" + bad})
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


@pytest.mark.slow
def test_only_changed_reruns_only_the_stale_assets_of_a_partition_whose_logs_are_unchanged(tmp_path, monkeypatch,
                                                                                           capsys):
    """A partition asset made under other code or settings (here: never materialised, after a wipe)
    is redone by the nightly (`--only-changed`) without reading and validating the partition's
    unchanged logs again: the run selects the stale asset, not the whole partition job."""
    from assets.schedules import latest_materialisations
    from resources.run.loop import local_instance

    _small_project(tmp_path, monkeypatch)
    assert run_main_job() == 0
    instance = local_instance()
    keys = [AssetKey(name) for name in ("eval_samples", "accuracy_posteriors", "reliability")]
    before = {key: latest_materialisations(instance, key) for key in keys}
    assert all(len(latest) == 4 for latest in before.values()), before
    samples = {p: p.stat().st_mtime_ns for p in (tmp_path / "lake" / "samples").rglob("*.parquet")}

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
    landing = _small_project(tmp_path, monkeypatch,
                             logs={"s.csv": "model,suite,item_id,score,error\n" + "\n".join(rows + bad_rows) + "\n"})
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
    from dagster import MultiPartitionKey

    from assets.fits import PARTITION_GLM_ASSETS
    from assets.reliability import reliability

    for assets_def in (accuracy_posteriors, reliability, PARTITION_GLM_ASSETS[0]):
        done = materialize([assets_def], instance=instance, partition_key=MultiPartitionKey({"model": "bad", "suite": "s"}),
                           resources=defs.resources, raise_on_error=False)
        assert not done.success
        message = str(done.get_step_failure_events()[0].event_specific_data.error)
        assert "'bad' x 's': the sample table failed validation (errored_share_within_bound)" in message, message
    assert not (tmp_path / "lake/accuracy_posteriors/model=bad").exists()
    assert not (tmp_path / "lake/reliability/model=bad").exists()

    # the log fixed: the nightly reruns the partition, which passes, and its failures are resolved
    (landing / "s.csv").write_text("model,suite,item_id,score,error\n"
                                   + "\n".join(rows + [f"bad,s,q{i},{int(i % 3 == 0)}," for i in range(20)]) + "\n")
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
    "eval_samples": "samples/*/*/samples.parquet", "accuracy_posteriors": "accuracy_posteriors/*/*/posteriors.parquet",
    "suite_leaderboard": "suite_leaderboard/*/leaderboard.parquet",
    "suite_comparison": "suite_comparison/*/leaderboard.parquet", "model_profile": "model_profile/*/profile.parquet",
    "ingest_accounting": "ingest_accounting/accounting.parquet", "waic_rankings": "waic_rankings/rankings.parquet",
    "reliability": "reliability/*/*/expected_reliability.parquet",
    "model_reliability": "model_reliability/*/expected_reliability.parquet",
    **{f"glm_{g}": f"glm_fits/*/*/{g}/summary.parquet" for g in ("binomial", "beta_binomial", "null", "item_difficulty")},
    **{f"suite_glm_{g}": f"glm_suite_fits/*/suite_{g}/summary.parquet"
       for g in ("nested", "binomial", "beta_binomial", "null")},
}


def _assert_declared_column_types_match_the_files(lake):
    """Every column the UI's schema of an asset declares has the type its files hold, and the files hold
    no undeclared column and no column typed null (a text column empty in one file: readers of a folder
    or glob refuse null next to string)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def kind(arrow_type) -> str | None:
        for test, name in ((pa.types.is_null, None), (pa.types.is_integer, "int64"), (pa.types.is_floating, "double"),
                           (pa.types.is_boolean, "bool"), (pa.types.is_string, "string"),
                           (pa.types.is_large_string, "string")):
            if test(arrow_type):
                return name
        return str(arrow_type)

    schemas = {key.to_user_string(): assets_def.metadata_by_key[key]["dagster/column_schema"]
               for assets_def in defs.assets for key in assets_def.keys
               if "dagster/column_schema" in assets_def.metadata_by_key.get(key, {})}
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
    assert out.rstrip().endswith("exit 1: 1 unreadable log(s) in landing (the skipped lines above; recorded under "
                                 "file_errors/): fix, replace or remove them")
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
    drawn = materialize([partition_plots], partition_key=model_suite_key("mockllm/atlas-large", "arith"),
                        instance=DagsterInstance.from_config(os.environ["DAGSTER_HOME"]),
                        resources={"lake": LakeResource()})
    assert drawn.success
    metadata = drawn.asset_materializations_for_node("partition_plots")[0].metadata
    assert {"plot_binomial_trace", "plot_binomial_forest", "plot_binomial_predictive",
            "plot_reliability_cdf_envelopes", "plot_reliability_expected_reliability"} <= set(metadata)
    assert metadata["plot_binomial_trace"].value.startswith("![binomial/trace: mockllm/atlas-large x arith](data:image/png")
    partition = lake / f"glm_fits/model={to_partition_key('mockllm/atlas-large')}/suite=arith/binomial"
    assert all((partition / name).exists() for name in ("trace.png", "forest.png", "predictive.png"))
    # a suite GLM's figures likewise ([plots] suite_fits), drawn by suite_fit_plots
    from assets.plots import suite_fit_plots

    for fit_dir in lake.glob("glm_suite_fits/suite=*/suite_binomial"):
        assert (fit_dir / "trace.png").exists() == (not read_outcome(fit_dir).passed), fit_dir
    drawn = materialize([suite_fit_plots], partition_key="arith",
                        instance=DagsterInstance.from_config(os.environ["DAGSTER_HOME"]),
                        resources={"lake": LakeResource()})
    assert drawn.success
    metadata = drawn.asset_materializations_for_node("suite_fit_plots")[0].metadata
    assert {"plot_suite_binomial_trace", "plot_suite_binomial_forest", "plot_suite_binomial_predictive"} <= set(metadata)
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
    assert materialised("model_profile") == {joined, *(to_partition_key(m) for m in ("mockllm/atlas-large",
                                                                                       "mockllm/cirrus 7b"))}
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

    _two_models_on_three_suites(tmp_path, monkeypatch, '"suite_binomial"')  # the partition GLMs are not what this is about
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
    assert "1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each (suite reading)" in out
    reruns = [line for line in out.splitlines()
              if line.startswith("[") and "suite_analysis" in line and "[suite_glm_binomial]: " in line]
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
    assert ("1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each "
            "(mockllm/cirrus 7b x reading) and the other 5 in ") in out
    outcomes = [line for line in out.splitlines() if line.startswith("[") and " ingest_and_fit " in line
                and (": ok (" in line or ": FAILED (" in line)]
    first, *reruns = outcomes
    assert "6 partitions (" in first and ": FAILED (" in first, outcomes
    # only the step that did not succeed: the culprit alone, the other five in fewer runs than one each
    assert all("[glm_binomial]: " in line for line in reruns), outcomes
    alone = [line for line in reruns if "partitions (" not in line and "mockllm/cirrus 7b x reading [" in line]
    assert len(alone) == 1 and ": FAILED (" in alone[0], outcomes
    together = [line for line in reruns if line not in alone]
    assert all(": ok (" in line for line in together) and len(together) < 5, outcomes
    covered = sum(int(line.split(" partitions (")[0].rsplit(" ", 1)[1]) if " partitions (" in line else 1
                  for line in together)
    assert covered == 5, outcomes
    # six fits in the range run, then the culprit's and the five others' once more (reused from the lake)
    assert len(fitted) == 12 and fitted.count(culprit) == 2 and len(set(fitted)) == 6, fitted
    failures = read_run_failures(Lake(tmp_path / "lake"))
    (row,) = failures.itertuples()  # the culprit's own run, not the range
    assert (row.asset, row.error_type) == ("glm_binomial", "DagsterAssetCheckFailedError"), row
    assert row.partition == str(MultiPartitionKey({"model": to_partition_key(culprit[0]),
                                                    "suite": to_partition_key(culprit[1])})), row
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
    assert ("1 range run(s) failed: rerunning the 1 partition(s) their checks or errors failed for one run each "
            "(mockllm/cirrus 7b x reading) and the other 5 in ") in out
    assert out.count("ingest_and_fit mockllm/cirrus 7b x reading [glm_binomial]: FAILED") == 1
    failures = read_run_failures(Lake(tmp_path / "lake"))
    rows = failures[failures["resolved_at"].isna() & (failures["error_type"] == "ValueError")]
    assert list(rows["partition"]) == [row.partition], failures

    # An error outside any partition's computation (a setting the step reads) names none: every
    # partition of the range, one run each.
    monkeypatch.setattr(fit_assets, "fit_partition_glm", real_fit)
    monkeypatch.setattr(fit_assets, "load_plot_settings", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad [plots]")))
    assert run_main_job() == 1
    out = capsys.readouterr().out
    assert "1 range run(s) failed: rerunning their 6 partition(s) one run each" in out
    failed = [line for line in out.splitlines() if " ingest_and_fit " in line and ": FAILED (" in line]
    assert len(failed) == 1 + 6, out  # the range, then each partition alone


def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    """A job killed with SIGKILL leaves no worker behind still running its range (the rerun would
    fit the same partitions beside it): a worker exits within a second or two of its parent."""
    import signal
    import subprocess
    import sys

    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, time\n"
        "from resources.run.pool import WorkerPool\n"
        "if __name__ == '__main__':\n"
        "    pool = WorkerPool(1)\n"
        "    print(pool.submit(os.getpid).result(timeout=300), flush=True)\n"
        "    pool.submit(time.sleep, 600)  # a long run in progress\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    worker = None
    try:
        worker = int(parent.stdout.readline())
        os.kill(worker, 0)  # running
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _alive(worker):
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived the killed parent"
    finally:
        parent.kill()
        if worker and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_worker_pool_starts_fresh_workers_after_one_dies():
    """A killed worker breaks a ProcessPoolExecutor for good; run_main_job's pool replaces it, so
    the runs after a lost worker still execute."""
    import math
    from concurrent.futures.process import BrokenProcessPool

    from resources.run.pool import WorkerPool

    pool = WorkerPool(2)
    try:
        with pytest.raises(BrokenProcessPool):
            pool.submit(os._exit, 1).result(timeout=120)  # the worker dies as if killed
        assert pool.submit(math.sqrt, 16.0).result(timeout=120) == 4.0
    finally:
        pool.shutdown()


@pytest.mark.parametrize("model_runs, profiles, workers", [
    ([1], 101, 2), ([1], 7, 2), ([1, 1], 100, 2), ([3, 2], 100, 2), ([1], 100, 3), ([], 50, 2), ([1], 101, 1),
])
def test_profile_runs_are_sized_so_that_the_workers_end_the_model_stage_together(model_runs, profiles, workers):
    """The model stage's profile-only runs: the pool hands the model runs out first, each to the first
    free worker, then the profile runs, largest first. Simulating that hand-out with the assumed costs,
    the workers end within a profile of each other whenever the profiles are enough to even them out,
    and every profile is in exactly one run."""
    from resources.run.plan import MODEL_ANALYSIS_IN_PROFILES, profile_shares

    shares = profile_shares(model_runs, profiles, workers)
    assert sum(shares) == profiles and all(share > 0 for share in shares) and shares == sorted(shares, reverse=True)
    ends = [0.0] * workers
    for cost in [size * MODEL_ANALYSIS_IN_PROFILES for size in model_runs]:
        ends[ends.index(min(ends))] += cost
    busiest = max(ends)
    for cost in shares:
        ends[ends.index(min(ends))] += cost
    if profiles >= workers * busiest - sum(size * MODEL_ANALYSIS_IN_PROFILES for size in model_runs):
        assert max(ends) - min(ends) <= 1.0, (shares, ends)  # enough profiles to even the model runs out
    else:  # too few: they all fit beside the busiest model runs
        assert max(ends) == busiest, (shares, ends)


def test_workers_fork_from_a_server_that_imported_the_code_location_before_the_first_run(tmp_path):
    """run_main_job starts the server (WorkerPool.prepare) before discovery: its imports overlap it,
    and the workers start with the code location and Great Expectations imported. In a fresh process:
    a server started here by an earlier test under another environment would not be used."""
    import json
    import subprocess
    import sys

    driver = tmp_path / "driver.py"
    driver.write_text(
        "import json, os\n"
        "from resources.run.pool import WorkerPool\n"
        "from tests.helpers.pool_steps import preloaded\n"
        "if __name__ == '__main__':\n"
        "    pool = WorkerPool(2)\n"
        "    pool.prepare()\n"
        "    seen = [pool.submit(preloaded).result(timeout=300) for _ in range(4)]\n"
        "    pool.shutdown()\n"
        "    print(json.dumps({'job': os.getpid(), 'seen': seen}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, timeout=600, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    seen = report["seen"]
    assert all(s["modules"] == ["evalpipeline.definitions", "great_expectations"] for s in seen), seen
    assert all(s["parent"] != report["job"] for s in seen), "workers are the server's children, not the job's"


def test_workers_see_the_environment_of_the_job_that_submits_to_them(monkeypatch):
    """A forked worker has its server's environment, where the lake and the configuration are named: a
    job run here under another environment than the server started with gets workers that see its own."""
    from resources.run.pool import WorkerPool
    from tests.helpers.pool_steps import environment

    for value in ("first lake", "second lake"):
        monkeypatch.setenv("EVALPIPELINE_PROBE", value)
        pool = WorkerPool(2)
        try:
            pool.prepare()
            assert {pool.submit(environment, "EVALPIPELINE_PROBE").result(timeout=300) for _ in range(4)} == {value}
        finally:
            pool.shutdown()


def test_the_worker_pool_starts_every_worker_even_when_the_first_is_idle_before_the_next_submit(monkeypatch):
    """ProcessPoolExecutor starts a worker in submit only when none is idle, after waking its manager
    thread, which watches only the workers that exist when it waits: a worker started later could die
    unnoticed (a CI run saw the sibling's one-minute run finish instead of being ended by the death).
    On a loaded machine the first worker can finish its start-up task before the next submit: here each
    submit waits for its task (up to 10 s) before returning. Every worker must be started all the same."""
    import concurrent.futures
    from concurrent.futures.process import ProcessPoolExecutor

    from resources.run.pool import WorkerPool

    original = ProcessPoolExecutor.submit

    def late(self, fn, *args, **kwargs):
        future = original(self, fn, *args, **kwargs)
        concurrent.futures.wait([future], timeout=10)
        return future

    monkeypatch.setattr(ProcessPoolExecutor, "submit", late)
    pool = WorkerPool(2)
    try:
        assert pool.submit(os.getpid).result() > 0
        assert len(pool._pool._processes) == 2
    finally:
        pool.shutdown()


def test_a_dying_worker_fails_its_own_run_and_the_sibling_run_it_took_down_is_rerun(tmp_path):
    """A killed worker breaks the pool, which also ends the other worker's run. The lost runs are
    marked failed once their processes are gone (on_lost_workers), the sibling's run is run again
    and succeeds, the dying one fails: one lost worker fails its own run only.

    The pool runs in a fresh interpreter, as in `evalpipeline run`. On 2026-11-29's host, under the
    load of the full suite (3 CI runs of 3), ``ProcessPoolExecutor`` noticed the death only when the
    sibling's minute-long step returned (both steps started at the same instant, the rerun of the dying
    one 68 s later; the workers do end on SIGTERM, checked): the sibling then finished and is reported
    as it ended, not run again, the pool's other documented path. Alone, or under CPU hogs, the death
    was noticed at once in every try. Both paths keep the contract: the dying run fails, the sibling's
    succeeds once, nothing is left running."""
    result = subprocess.run([sys.executable, "-m", "tests.helpers.pool_steps", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ran = json.loads(result.stdout.strip().splitlines()[-1])
    lines = ran["lines"]
    assert ran["ok"] == [False, True], lines
    assert len(ran["die"]) == 2, ("the dying run ran again and died again", ran)
    # once after the break, once after the dying run's second death; every lost process gone by then
    assert len(ran["lost_calls"]) == 2 and not any(alive for call in ran["lost_calls"] for alive in call), ran
    text = "\n".join(lines)
    if len(ran["finish"]) == 2:  # the break ended the sibling's run, which was run again
        assert "a worker process died: running the 2 run(s) the break ended once more" in text, lines
        assert lines[-1].startswith("[2/2] finish finishes: ok"), lines
    else:  # the death was noticed when the sibling's run had returned: reported as it ended
        assert len(ran["finish"]) == 1, ran
        assert "a worker process died: running the 1 run(s) the break ended once more" in text, lines
        assert "[2/2] finish finishes: ok" in text and "finish finishes: FAILED" not in text, lines
        assert lines[-1] == "    worker process lost twice: not run again", lines


def test_a_step_that_finished_before_a_sibling_worker_died_is_reported_as_it_ended_not_rerun(tmp_path):
    """The pool breaks while the sibling sends a finished step's result: the future fails, but the
    outcome its worker kept says it finished, so it is reported ok (with its own lines) and not run
    again; the dying step is run once more and fails."""
    import types

    from resources.run.pool import WorkerPool, run_steps
    from tests.helpers.pool_steps import finished_unsent

    lines = []
    steps = [(1, "die", [str(tmp_path)], "dies", None), (2, "finish", [str(tmp_path)], "finishes", None)]
    pool = WorkerPool(2)
    try:
        outcomes = run_steps(steps, 2, lines.append, pool=pool, instance=types.SimpleNamespace(root_directory=""),
                              on_lost_workers=lambda: None, block=finished_unsent)
    finally:
        pool.shutdown()
    assert [outcome.ok for outcome in outcomes] == [False, True], lines
    assert len(list(tmp_path.glob("finish-*.pid"))) == 1, "the finished step was run again"
    assert len(list(tmp_path.glob("die-*.pid"))) == 2, lines
    assert "    the finished step's own line" in outcomes[1].lines, outcomes[1]
    text = "\n".join(lines)
    assert "[2/2] finish finishes: ok (0.5s)" in text and "finish finishes: FAILED" not in text, text
    assert "running the 1 run(s) the break ended once more" in text, text
    assert lines[-1] == "    worker process lost twice: not run again", lines


def test_the_compilation_cache_bound_comes_from_the_resource_or_the_environment(monkeypatch):
    from resources.fit import CACHE_MAX_ENV, DEFAULT_CACHE_MAX_MB, GlmSettings

    monkeypatch.delenv(CACHE_MAX_ENV, raising=False)
    assert GlmSettings().cache_max_bytes() == DEFAULT_CACHE_MAX_MB * 2**20
    monkeypatch.setenv(CACHE_MAX_ENV, "300")
    assert GlmSettings().cache_max_bytes() == 300 * 2**20
    assert GlmSettings(cache_max_mb=64).cache_max_bytes() == 64 * 2**20
    for bad in ("2GB", "-5"):
        monkeypatch.setenv(CACHE_MAX_ENV, bad)
        with pytest.raises(ValueError, match=rf"\$EVALPIPELINE_JAX_CACHE_MAX_MB = '{bad}': .* whole number of MiB"):
            GlmSettings().cache_max_bytes()


def _quiz_log(model: str, skill: float, seed: int) -> str:
    import numpy as np

    rng = np.random.default_rng(seed)
    difficulty = np.random.default_rng(0).normal(0.0, 1.0, 30)  # the same items for every model
    scores = rng.random(30) < 1 / (1 + np.exp(-(skill - difficulty)))
    rows = [f"{model},quiz,q{i},{int(s)},d,quiz" for i, s in enumerate(scores)]
    return "model,suite,item_id,score,domain,subdomain\n" + "\n".join(rows) + "\n"


@pytest.mark.slow
def test_the_main_job_prepares_the_samplers_suite_fits_ask_for(tmp_path, monkeypatch, capsys):
    """A suite fit whose warm refit after one LLM more would compile a sampler asks for it; the main job
    then runs `prepare_samplers` in its model stage, and the night that LLM joins the suite's warm refit
    loads that sampler instead of tracing it. Its outputs are those of a job without the preparation."""
    from evalpipeline.steps.fits import read_outcome
    from evalpipeline.models import fit as fit_module
    from evalpipeline.models.fit import preparation_requests

    models = {"alpha": 1.0, "beta": 0.0, "gamma": -0.5}
    _small_project(tmp_path, monkeypatch, {f"{m}.csv": _quiz_log(m, skill, i) for i, (m, skill) in enumerate(models.items())})
    config = ('[glm]\nmodels = ["suite_binomial"]\nnum_warmup = 300\nnum_samples = 500\nprepare_samplers_from = {}\n'
              "[glm.thresholds]\nmin_ess_bulk = 100\nmin_ess_tail = 100\nmax_r_hat = 1.05\n")
    (tmp_path / "evalpipeline.toml").write_text(config.format(1))
    assert run_main_job() == 0
    out = capsys.readouterr().out
    assert "prepare_samplers warm samplers the suite fits asked for: ok" in out and "FAILED" not in out, out
    programs = defs.resources["glm_settings"].program_cache(tmp_path / "lake")  # the tests' shared cache
    assert list(programs.glob("nuts-*.zip")) and not preparation_requests(programs, tmp_path / "lake")
    fit_dir = tmp_path / "lake" / "glm_suite_fits" / "suite=quiz" / "suite_binomial"
    assert read_outcome(fit_dir).passed

    (tmp_path / "landing" / "delta.csv").write_text(_quiz_log("delta", 0.5, 7))
    (tmp_path / "evalpipeline.toml").write_text(config.format(0))  # this night asks for nothing more
    traced = fit_module._build_runner

    def build(*args, warm=False, **kwargs):
        assert not warm, "the prepared warm sampler was traced again"
        return traced(*args, warm=warm, **kwargs)

    monkeypatch.setattr(fit_module, "_build_runner", build)
    assert run_main_job(only_changed=True) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "prepare_samplers" not in out, out
    refit = read_outcome(fit_dir)
    assert refit.metadata["start"] == "warm" and "delta" in set(refit.summary["model"].dropna())


def test_the_sampler_sensor_requests_one_preparation_per_set_of_this_lakes_requests(tmp_path):
    """The daemon's path to `prepare_samplers`: no request, no run; this lake's requests, one run per
    set of them (the run key), and none for another lake's requests in a shared cache."""
    from dagster import RunRequest, SkipReason

    from assets.samplers import sampler_requests
    from resources.fit import GlmSettings

    lake = tmp_path / "lake"
    settings = GlmSettings(compilation_cache_dir=str(tmp_path / "cache"))
    resources = {"lake": LakeResource(root=str(lake)), "glm_settings": settings}

    def evaluate():
        with build_sensor_context(instance=DagsterInstance.ephemeral(), resources=resources) as context:
            return sampler_requests(context)

    assert isinstance(evaluate(), SkipReason)
    requests = settings.program_cache(lake) / "requests"
    requests.mkdir(parents=True)
    (requests / "other.json").write_text(json.dumps({"suite": "s", "glm": "suite_binomial", "lake": str(tmp_path / "x")}))
    assert isinstance(evaluate(), SkipReason)
    (requests / "ours.json").write_text(json.dumps({"suite": "s", "glm": "suite_binomial", "lake": str(lake.resolve())}))
    first = evaluate()
    assert isinstance(first, RunRequest) and first.run_key == evaluate().run_key  # the same requests: one run
    (requests / "ours.json").write_text(json.dumps({"suite": "t", "glm": "suite_binomial", "lake": str(lake.resolve())}))
    os.utime(requests / "ours.json", ns=(10**18, 10**18))
    assert evaluate().run_key != first.run_key  # asked again (a later fit): another run


def test_a_preparation_that_fails_fails_its_run_and_says_which(tmp_path):
    """`prepare_samplers` lists what it did in its metadata; a request it cannot prepare is removed (a fit
    that still needs one asks again) and fails the run, naming the suite, the GLM and the error."""
    import numpy as np

    from assets.samplers import prepare_samplers
    from evalpipeline.lake import Lake
    from resources.fit import GlmSettings
    from tests.test_comparison import planted_scores, write_samples

    lake = tmp_path / "lake"
    write_samples(Lake(lake), "m1", "quiz", planted_scores(np.random.default_rng(1), np.zeros(5), 0.0))
    settings = GlmSettings(compilation_cache_dir=str(tmp_path / "cache"))
    requests = settings.program_cache(lake) / "requests"
    requests.mkdir(parents=True)
    (requests / "a.json").write_text(json.dumps({"suite": "quiz", "glm": "no_such_glm", "lake": str(lake.resolve())}))
    resources = {"lake": LakeResource(root=str(lake)), "glm_settings": settings}
    result = prepare_samplers.execute_in_process(resources=resources, raise_on_error=False,
                                                 instance=DagsterInstance.ephemeral())
    assert not result.success and not list(requests.iterdir())
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "1 of 1 sampler(s) could not be prepared: no_such_glm on suite quiz: failed:" in message, message
    (requests / "b.json").write_text(json.dumps({"suite": "gone", "glm": "suite_binomial", "lake": str(lake.resolve())}))
    result = prepare_samplers.execute_in_process(resources=resources, instance=DagsterInstance.ephemeral())
    assert result.output_for_node("prepare_warm_samplers") == 1 and not list(requests.iterdir())  # handled: skipped
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    table = output.event_specific_data.metadata["samplers"].value
    assert "| gone | suite_binomial |" in table and "skipped: no sample tables for suite 'gone'" in table, table
