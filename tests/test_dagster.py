"""The Dagster layer: the code location loads, one partition and a leaderboard materialise,
the sensor discovers logs, and the main job runs the whole demo graph twice with the same result."""

import os
import shutil

import pandas as pd
import pytest
from dagster import AssetKey, DagsterInstance, Definitions, build_sensor_context, materialize

from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.samples import VALIDATION_CHECKS, eval_samples
from assets.sensors import landing_sensor
from evalpipeline.definitions import defs, run_main_job
from evalpipeline.keys import to_partition_key
from evalpipeline.lake import sha256_file
from resources import IngestSettings, LakeResource, PosteriorSettings
from tests.conftest import DEMO_LOGS
from tests.inspect_logs import echo, make_log


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    folder = tmp_path_factory.mktemp("landing")
    make_log(folder, model="mockllm/alpha", suite="unit suite", items=6)
    make_log(folder, model="mockllm/beta/v2", suite="unit suite", items=6, answers={(f"q{i}", 1): "yes" for i in range(6)})
    make_log(folder, model="mockllm/alpha", suite="other", items=4, log_format="json")
    return folder


def test_code_location_loads_and_every_asset_is_described():
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"eval_samples", "accuracy_posteriors", "suite_leaderboard", "ingest_accounting"} <= keys
    for spec in defs.resolve_all_asset_specs():
        assert spec.description, spec.key
        assert spec.group_name and spec.group_name != "default", spec.key
        assert "dagster/column_schema" in spec.metadata, spec.key
        assert spec.owners and spec.kinds, spec.key
    assert "evalpipeline" not in {m.split(".")[0] for m in _dagster_importers()}


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


def test_sensor_registers_partitions_and_requests_one_run_per_log_content(landing, tmp_path):
    instance = DagsterInstance.ephemeral()
    context = build_sensor_context(instance=instance, resources={"lake": LakeResource(root=str(tmp_path), landing=str(landing)), "ingest_settings": IngestSettings()})
    result = landing_sensor(context)
    shas = sorted(sha256_file(p) for p in landing.iterdir())
    assert sorted(r.run_key.split(":")[0] for r in result.run_requests) == shas
    assert {r.partition_key for r in result.run_requests} == {
        model_suite_key("mockllm/alpha", "unit suite"),
        model_suite_key("mockllm/beta/v2", "unit suite"),
        model_suite_key("mockllm/alpha", "other"),
    }
    added = {tuple(sorted(r.partition_keys)) for r in result.dynamic_partitions_requests}
    assert added == {("mockllm%2Falpha", "mockllm%2Fbeta%2Fv2"), ("other", "unit%20suite")}
    again = landing_sensor(
        build_sensor_context(
            instance=instance, cursor=result.cursor, resources={"lake": LakeResource(root=str(tmp_path), landing=str(landing)), "ingest_settings": IngestSettings()}
        )
    )
    assert not again.run_requests


def test_sensor_skips_logs_the_lake_already_holds(landing, tmp_path):
    from evalpipeline.ingest import find_log_files, ingest_paths
    from evalpipeline.lake import Lake

    files = find_log_files(landing)
    ingest_paths(files[:2], Lake(tmp_path / "lake"))
    context = build_sensor_context(
        instance=DagsterInstance.ephemeral(),
        resources={"lake": LakeResource(root=str(tmp_path / "lake"), landing=str(landing)), "ingest_settings": IngestSettings()},
    )
    result = landing_sensor(context)
    assert [r.run_key.split(":")[0] for r in result.run_requests] == [sha256_file(files[2])]


@pytest.mark.slow
def test_main_job_runs_the_demo_graph_and_is_safe_to_run_twice(tmp_path, monkeypatch, capsys):
    landing = tmp_path / "landing"
    shutil.copytree(DEMO_LOGS, landing)
    (landing / "broken.eval").write_bytes(b"not a zip")  # reported and recorded, the rest still runs
    lake = tmp_path / "lake"
    monkeypatch.chdir(tmp_path)  # relative paths, as `make demo` uses them
    monkeypatch.setenv("EVALPIPELINE_LANDING", "landing")
    monkeypatch.setenv("EVALPIPELINE_LAKE", "lake")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert run_main_job() == 0
    out = capsys.readouterr().out
    assert "[15/15] suite_leaderboards leaderboard reading: ok" in out
    assert "skipped (unreadable, recorded under file_errors/): landing/broken.eval: cannot read" in out
    assert len(list((lake / "file_errors").glob("*.json"))) == 1
    files = {p: p.read_bytes() for p in lake.rglob("*.parquet")}
    assert len(list(lake.glob("samples/model=*/suite=*/samples.parquet"))) == 12
    assert run_main_job() == 0
    assert {p: p.read_bytes() for p in lake.rglob("*.parquet")} == files
    instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    event = instance.get_latest_materialization_event(AssetKey("suite_leaderboard"))
    assert event is not None
    board = pd.read_parquet(lake / "suite_leaderboard")
    assert set(board["suite"].astype(str)) == {"arith", "reading", "agentic_ops"}
    assert board.groupby("suite", observed=True).size().tolist() == [4, 4, 4]
