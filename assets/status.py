"""Sensor ``record_run_failures``: every failed run lands in the lake's run status table."""


from datetime import datetime, timezone

from dagster import DefaultSensorStatus, RunFailureSensorContext, run_failure_sensor

from evalpipeline.status import StepFailure, record_run_failure
from resources import LakeResource


def step_failures(step_failure_events, run_failure_message: str) -> list[StepFailure]:
    """One record per failed step, or one for the whole run when it failed outside any step."""
    failures = []
    for event in step_failure_events:
        error = event.event_specific_data.error
        failures.append(
            StepFailure(
                asset=event.step_key,  # our assets are single-op: the step key is the asset key
                step=event.step_key,
                error_type=(error.cls_name if error else "") or "",
                message=(error.message if error else event.message) or "",
            )
        )
    return failures or [StepFailure(asset="(run)", step="", error_type="", message=run_failure_message)]


@run_failure_sensor(
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    monitor_all_code_locations=False,
    description="Records every failed run (run id, asset, partition, error summary) in the lake's "
    "run_status/failures table, so that teams reading the Parquet outputs see what did not refresh.",
)
def record_run_failures(context: RunFailureSensorContext, lake: LakeResource):
    run = context.dagster_run
    record_run_failure(
        lake.lake(),
        run_id=run.run_id,
        job=run.job_name,
        partition=run.tags.get("dagster/partition", ""),
        failures=step_failures(context.get_step_failure_events(), context.failure_event.message or ""),
        failed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
