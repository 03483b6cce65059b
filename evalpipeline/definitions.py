"""The composition root: the one module of evalpipeline that imports Dagster.

``defs`` is what ``dagster dev -w workspace.yaml`` loads; ``run_main_job``
is what ``evalpipeline run`` calls: it materialises the whole graph for the
logs in the landing folder against a persistent local Dagster instance, so
that ``make ui`` shows the same runs and materialisations afterwards.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import pandas as pd
from dagster import AssetSelection, AutomationConditionSensorDefinition, DagsterInstance, DefaultSensorStatus, Definitions

from assets.accounting import ingest_accounting
from assets.jobs import ingest_and_fit_job, leaderboard_job
from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.samples import eval_samples
from assets.schedules import build_nightly_schedule
from assets.sensors import landing_sensor
from assets.status import record_run_failures
from evalpipeline.ingest import find_log_files, record_file_error, scan_sources
from evalpipeline.keys import to_partition_key
from evalpipeline.pipeline import format_leaderboard, leaderboard_path
from resources import IngestSettings, LakeResource, PosteriorSettings
from resources.executors import configured_executor

DEFAULT_DAGSTER_HOME = "dagster_home"
# The CLI prints one progress line per run; Dagster's per-event console log stays in the instance.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

PARTITION_ASSETS = [eval_samples, accuracy_posteriors]
DOWNSTREAM_ASSETS = [suite_leaderboard, ingest_accounting]

#: Evaluates the assets' automation conditions (downstream refreshes) every 30 s while the daemon runs.
automation_sensor = AutomationConditionSensorDefinition(
    "refresh_downstream",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Refreshes per-suite, per-model and lake-wide assets when the data they read changed.",
)

defs = Definitions(
    assets=[*PARTITION_ASSETS, *DOWNSTREAM_ASSETS],
    jobs=[ingest_and_fit_job, leaderboard_job],
    schedules=[build_nightly_schedule(ingest_and_fit_job, PARTITION_ASSETS)],
    sensors=[landing_sensor, record_run_failures, automation_sensor],
    resources={
        "lake": LakeResource(),
        "ingest_settings": IngestSettings(),
        "posterior_settings": PosteriorSettings(),
    },
    executor=configured_executor(),
)


def local_instance() -> DagsterInstance:
    """The persistent local instance: ``$DAGSTER_HOME``, else ``dagster_home`` here (SQLite)."""
    home = Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    return DagsterInstance.from_config(str(home))


def run_main_job(
    *,
    instance: DagsterInstance | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Materialise eval_samples, accuracy_posteriors and suite_leaderboard for every partition
    found in the landing folder; return 0 when every run succeeded, 1 otherwise."""
    instance = instance or local_instance()
    lake = defs.resources["lake"]
    landing = lake.landing_dir()
    files = find_log_files(landing)
    found, unreadable = scan_sources(files, defs.resources["ingest_settings"].options())
    for error in unreadable:
        record_file_error(lake.lake(), error)
        echo(f"skipped (unreadable, recorded under file_errors/): {error.error}")
    pairs = sorted({(p.model, p.suite) for _, parts in found for p in parts})
    suites = sorted({s for _, s in pairs})
    _register(instance, "model", {to_partition_key(m) for m, _ in pairs})
    _register(instance, "suite", {to_partition_key(s) for s in suites})
    echo(f"{len(files)} source file(s) in {landing}: {len(pairs)} model x suite partition(s), {len(suites)} suite(s)")

    ingest_job = defs.resolve_job_def(ingest_and_fit_job.name)
    board_job = defs.resolve_job_def(leaderboard_job.name)
    steps = [(ingest_job, model_suite_key(m, s), f"{m} x {s}") for m, s in pairs]
    steps += [(board_job, to_partition_key(s), f"leaderboard {s}") for s in suites]
    failures = 0
    for number, (job, partition_key, label) in enumerate(steps, start=1):
        started = time.perf_counter()
        result = job.execute_in_process(
            instance=instance, partition_key=partition_key, raise_on_error=False, run_config=QUIET_CONSOLE
        )
        ok = result.success
        failures += not ok
        echo(f"[{number}/{len(steps)}] {job.name} {label}: {'ok' if ok else 'FAILED'} ({time.perf_counter() - started:.1f}s)")
        if not ok:
            for event in result.all_events:
                if event.is_step_failure:
                    echo(f"    {event.step_key}: {event.event_specific_data.error.message.strip()}")
    store = lake.lake()
    for suite in suites:
        path = leaderboard_path(store, suite)
        if path.exists():
            echo(f"\nsuite {suite}: models ranked by posterior mean success rate")
            echo(format_leaderboard(pd.read_parquet(path)))
    root = store.root
    echo(f"\noutputs in {root.resolve()}: samples/, quarantine/, accuracy_posteriors/, suite_leaderboard/")
    echo(f"Dagster instance: {instance.root_directory} (browse with `make ui`)")
    return 1 if failures else 0


def _register(instance: DagsterInstance, dimension: str, keys: set[str]) -> None:
    missing = sorted(keys - set(instance.get_dynamic_partitions(dimension)))
    if missing:
        instance.add_dynamic_partitions(dimension, missing)
