"""The repository's Dagster instance (dagster_home/dagster.yaml): Dagster's own instance and its default
SQLite storage in that folder, with the run queue, the fit pool, run monitoring and retries it sets."""

from __future__ import annotations

import shutil
from pathlib import Path

from dagster import AssetKey, AssetMaterialization, DagsterInstance

REPO = Path(__file__).resolve().parents[1]


def test_the_repositorys_instance_is_dagsters_default_sqlite_instance_with_its_settings(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance) is DagsterInstance  # no instance_class: any Dagster can open the folder
        assert type(instance.event_log_storage).__name__ == "SqliteEventLogStorage"
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 2
        assert instance.global_op_concurrency_default_limit == 2
        assert instance.run_monitoring_enabled and instance.run_monitoring_max_runtime_seconds == 14400
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 1
        instance.report_runless_asset_event(AssetMaterialization(AssetKey("samples"), partition="m|s"))
        assert instance.get_latest_materialization_event(AssetKey("samples")).asset_materialization.partition == "m|s"
    assert (home / "history" / "runs.db").exists()  # Dagster's files, in the instance's own folder
