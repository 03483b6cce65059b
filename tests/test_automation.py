"""Automation and the nightly schedule: backfills planned as ranges, declarative automation that
requests only what has samples and passed validation, and the nightly tick's retries and ranges."""

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
from assets.samples import VALIDATION_CHECKS, eval_samples
from evalpipeline.definitions import defs
from resources import IngestSettings, LakeResource
from tests.helpers.dagster import lake_resources, nightly_tick, requested_partitions


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
            [AssetKeyPartitionKey(AssetKey("glm_binomial"), key) for key in wanted], graph, instance
        )
    covered, sizes = [], []
    for request in requests:
        assert request.asset_selection == [AssetKey("glm_binomial")] and request.partition_key is None
        keys = model_suite_partitions.get_partition_keys_in_range(
            PartitionKeyRange(
                request.tags[ASSET_PARTITION_RANGE_START_TAG], request.tags[ASSET_PARTITION_RANGE_END_TAG]
            ),
            dynamic_partitions_store=instance,
        )
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
        instance.report_runless_asset_event(
            AssetMaterialization(
                "eval_samples",
                partition=MultiPartitionKey({"model": model, "suite": suite}),
                tags={DATA_VERSION_TAG: DataVersion(f"{model}{suite}").value},
            )
        )
    result = evaluate_automation_conditions(defs, instance, cursor=first.cursor)
    requested = {
        key.to_user_string(): set(map(str, result.get_requested_partitions(key)))
        for key in defs.resolve_asset_graph().get_all_asset_keys()
    }
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
        lake.write_json_atomic(
            {"failed_checks": [VALIDATION_CHECKS[0].name] if rejected else []}, lake.validation_path(model, suite)
        )
        instance.report_runless_asset_event(
            AssetMaterialization(
                "eval_samples",
                partition=str(MultiPartitionKey({"model": model, "suite": suite})),
                tags={DATA_VERSION_TAG: DataVersion(version).value},
            )
        )

    samples("m1", "s1", "a")
    samples("m2", "s1", "b", rejected=True)
    samples("m1", "s2", "c", rejected=True)
    samples("m3", "s1", "d", rejected=True)  # m3's only table, now rejected

    def requested(result) -> dict[str, set[str]]:
        return {
            key.to_user_string(): set(map(str, result.get_requested_partitions(key)))
            for key in defs.resolve_asset_graph().get_all_asset_keys()
        }

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
    assert not {"s2"} & (nightly["suite_glm_binomial"] | nightly["suite_leaderboard"] | nightly["suite_comparison"]), (
        nightly
    )
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
        lake.write_json_atomic(
            {"failed_checks": [VALIDATION_CHECKS[0].name] if rejected else []}, lake.validation_path(model, "s1")
        )
        instance.report_runless_asset_event(
            AssetMaterialization(
                "eval_samples",
                partition=str(MultiPartitionKey({"model": model, "suite": "s1"})),
                tags={DATA_VERSION_TAG: DataVersion(version).value},
            )
        )

    for model in ("m1", "m2"):
        samples(model, f"{model}-first")
        instance.report_runless_asset_event(
            AssetMaterialization(
                "accuracy_posteriors",
                partition=str(MultiPartitionKey({"model": model, "suite": "s1"})),
                tags={DATA_VERSION_TAG: DataVersion(f"{model}-posteriors").value},
            )
        )
    instance.report_runless_asset_event(
        AssetMaterialization("suite_leaderboard", partition="s1", tags={DATA_VERSION_TAG: DataVersion("board").value})
    )
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
    ticks = {
        "baseline": day + timedelta(hours=1),
        "before": day + timedelta(hours=1, minutes=30),
        "nightly": day + timedelta(hours=2, minutes=1),
        "after": day + timedelta(hours=2, minutes=2),
    }
    cursor, requested = None, {}
    for name, when in ticks.items():
        if name == "before":  # the suite's refresh fails
            failed = materialize(
                [suite_comparison],
                partition_key="s1",
                instance=instance,
                resources=lake_resources(tmp_path / "lake", landing),
                raise_on_error=False,
            )
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
        result = evaluate_automation_conditions(
            defs, instance, cursor=cursor, evaluation_time=day + timedelta(minutes=minutes)
        )
        cursor = result.cursor
        return {
            key.to_user_string(): set(map(str, result.get_requested_partitions(key)))
            for key in defs.resolve_asset_graph().get_all_asset_keys()
        }

    def materialised(asset: str, partition, version: str) -> None:
        instance.report_runless_asset_event(
            AssetMaterialization(asset, partition=partition, tags={DATA_VERSION_TAG: version})
        )

    materialised("eval_samples", MultiPartitionKey({"model": "m1", "suite": "s1"}), "samples")
    assert tick(61)["suite_glm_binomial"] == {"s1"}
    glms = {spec.key for glm in SUITE_GLM_ASSETS for spec in glm.specs}
    refit = instance.create_run_for_job(
        defs.resolve_implicit_global_asset_job_def(),
        asset_selection=glms,
        status=DagsterRunStatus.STARTED,
        tags={"dagster/partition": "s1"},
    )
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
    resources = {
        "lake": LakeResource(root=str(tmp_path / "lake"), landing=str(landing)),
        "ingest_settings": IngestSettings(),
    }
    create_run_for_test(
        instance,
        job_name="ingest_and_fit",
        status=DagsterRunStatus.STARTED,
        tags={"dagster/partition": str(model_suite_key("m1", "s"))},
    )
    create_run_for_test(
        instance,
        job_name="__ASSET_JOB",
        status=DagsterRunStatus.STARTING,
        tags={
            ASSET_PARTITION_RANGE_START_TAG: str(model_suite_key("m2", "s")),
            ASSET_PARTITION_RANGE_END_TAG: str(model_suite_key("m3", "s")),
        },
    )
    requests = nightly_tick(instance, resources)
    assert sorted(key for keys in requested_partitions(requests, instance) for key in keys) == [
        str(model_suite_key(m, "s")) for m in ("m4", "m5")
    ]


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
        return [
            defs.resolve_job_def("ingest_and_fit")
            .execute_in_process(
                instance=instance,
                raise_on_error=False,
                asset_selection=request.asset_selection or steps,
                tags=request.tags,
                partition_key=request.partition_key,
            )
            .success
            for request in requests
        ]

    first = tick([eval_samples])
    assert requested_partitions(first, instance) == [
        [key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]],
        [key["m3", "s1"], key["m3", "s2"], key["m4", "s1"], key["m4", "s2"]],
    ]
    assert [r.asset_selection for r in first] == [None, None]
    assert {r.tags["evalpipeline/reason"] for r in first} == {"1 new or changed source(s); eval_samples missing"}
    assert [r.run_key for r in tick([eval_samples])] == [r.run_key for r in first]
    assert len({r.run_key for r in first}) == 2
    assert run(first, [AssetKey("eval_samples")]) == [True, True]
    assert isinstance(tick([eval_samples]), SkipReason)

    write_log("m3", flip=1)
    second = tick([eval_samples, accuracy_posteriors])
    requested = {
        tuple(keys): (
            None if r.asset_selection is None else [k.to_user_string() for k in r.asset_selection],
            r.tags["evalpipeline/reason"],
        )
        for keys, r in zip(requested_partitions(second, instance), second)
    }
    missing = "accuracy_posteriors missing"
    assert requested == {
        (key["m3", "s1"], key["m3", "s2"]): (None, f"1 new or changed source(s); {missing}"),
        (key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]): (["accuracy_posteriors"], missing),
        (key["m4", "s1"], key["m4", "s2"]): (["accuracy_posteriors"], missing),
    }, requested
    assert run(second, [AssetKey("eval_samples"), AssetKey("accuracy_posteriors")]) == [True, True, True]
    assert set(instance.get_materialized_partitions(AssetKey("accuracy_posteriors"))) == set(key.values())
    assert isinstance(tick([eval_samples, accuracy_posteriors]), SkipReason)
    instance.dispose()
