"""The landing sensor: new or changed logs register their partitions and are requested in ranges
sized by the run queue; logs the lake already holds are skipped."""

import os

from dagster import AssetKey, DagsterInstance, build_sensor_context

from assets.partitions import model_suite_key
from assets.sensors import landing_sensor
from evalpipeline.definitions import defs
from resources import IngestSettings, LakeResource
from tests.conftest import REPO
from tests.helpers.dagster import requested_partitions


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
    requested = requested_partitions(result, instance)
    # every partition of the new logs once, in as many runs as the run queue starts at once
    assert sorted(key for keys in requested for key in keys) == sorted(
        str(model_suite_key(m, s))
        for m, s in [("mockllm/alpha", "unit suite"), ("mockllm/beta/v2", "unit suite"), ("mockllm/alpha", "other")]
    )
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
    with DagsterInstance.local_temp(
        str(tmp_path), overrides={"concurrency": {"runs": {"max_concurrent_runs": 5}}}
    ) as instance:
        assert runs_at_once(instance) == 5
    with DagsterInstance.ephemeral() as instance:  # no run queue: the cores
        assert runs_at_once(instance) == os.cpu_count()


def test_the_landing_sensors_ranges_run_and_a_range_whose_check_fails_for_one_log_leaves_the_rest_to_automation(
    tmp_path, monkeypatch
):
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
        rows = [
            f"{model},{suite},q{i},{i % 2},{'timeout' if model == 'm4' and suite == 's1' and i % 2 else ''}"
            for suite in ("s1", "s2")
            for i in range(10)
        ]
        (landing / f"{model}.csv").write_text("model,suite,item_id,score,error\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("EVALPIPELINE_LANDING", str(landing))
    monkeypatch.setattr(assets.partitions, "runs_at_once", lambda _instance: 2)
    instance = DagsterInstance.ephemeral()
    with build_sensor_context(
        instance=instance, resources={"lake": LakeResource(), "ingest_settings": IngestSettings()}
    ) as context:
        result = landing_sensor(context)
    key = {(m, s): str(model_suite_key(m, s)) for m in ("m1", "m2", "m3", "m4") for s in ("s1", "s2")}
    assert requested_partitions(result, instance) == [
        [key["m1", "s1"], key["m1", "s2"], key["m2", "s1"], key["m2", "s2"]],
        [key["m3", "s1"], key["m3", "s2"], key["m4", "s1"], key["m4", "s2"]],
    ]
    cursor = evaluate_automation_conditions(defs, instance).cursor  # the automation sensor's earlier tick
    steps = [AssetKey("eval_samples"), AssetKey("accuracy_posteriors")]
    outcomes = [
        defs.resolve_job_def("ingest_and_fit").execute_in_process(  # as the daemon launches them
            instance=instance,
            raise_on_error=False,
            asset_selection=steps,
            tags=request.tags,
            partition_key=request.partition_key,
        )
        for request in result.run_requests
    ]
    assert [outcome.success for outcome in outcomes] == [True, False]
    assert set(instance.get_materialized_partitions(AssetKey("eval_samples"))) == set(key.values())
    assert set(instance.get_materialized_partitions(AssetKey("accuracy_posteriors"))) == {
        key["m1", "s1"],
        key["m1", "s2"],
        key["m2", "s1"],
        key["m2", "s2"],
    }
    automation = evaluate_automation_conditions(defs, instance, cursor=cursor)
    requested = {
        asset: set(map(str, automation.get_requested_partitions(AssetKey(asset))))
        for asset in ("accuracy_posteriors", "glm_binomial", "reliability")
    }
    passed = set(key.values()) - {key["m4", "s1"]}
    assert requested == {
        "accuracy_posteriors": {key["m3", "s1"], key["m3", "s2"], key["m4", "s2"]},
        "glm_binomial": passed,
        "reliability": passed,
    }, requested
    instance.dispose()


def test_sensor_skips_logs_the_lake_already_holds(landing, tmp_path):
    from evalpipeline.ingest import find_log_files, ingest_paths, scan_sources
    from evalpipeline.lake import Lake

    files = find_log_files(landing)
    ingest_paths(files[:2], Lake(tmp_path / "lake"))
    with build_sensor_context(
        instance=DagsterInstance.ephemeral(),
        resources={
            "lake": LakeResource(root=str(tmp_path / "lake"), landing=str(landing)),
            "ingest_settings": IngestSettings(),
        },
    ) as context:
        result = landing_sensor(context)
        requested = requested_partitions(result, context.instance)
    assert [r.tags["evalpipeline/source"] for r in result.run_requests] == [files[2].name]
    ((source, parts),) = scan_sources([files[2]], IngestSettings().options())[0]
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
    contents = {
        "A": "model,suite,item_id,score\nm,s,a,1\nm,s,b,0\n",
        "B": "model,suite,item_id,score\nm,s,a,1\nm,s,b,1\n",
    }
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
