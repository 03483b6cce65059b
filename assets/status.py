"""Sensors ``record_run_failures`` (every failed run lands in the lake's run status table) and
``resolve_run_failures`` (a later success of the same job and partition marks its rows resolved)."""

import re
from datetime import datetime, timezone

from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    PartitionKeyRange,
    RunFailureSensorContext,
    RunStatusSensorContext,
    run_failure_sensor,
    run_status_sensor,
)

from assets.batch import FAILED_PARTITIONS
from evalpipeline.steps.run_status import RUN_ASSET, StepFailure, record_run_failure, resolve_failures
from resources import LakeResource
from resources.dagster_internals import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG


#: Dagster's wrappers around the error a step raised: the record names what they wrap.
_WRAPPERS = {
    "RetryRequestedFromPolicy",
    "RetryRequested",
    "Failure",
    "DagsterExecutionStepExecutionError",
    "DagsterUserCodeExecutionError",
}


def describe_step_error(error, fallback: str = "") -> tuple[str, str]:
    """(error type, message) of a failed step's error, as a reader of the failure table needs them:
    the error the step's code raised, not Dagster's wrapper around it (after the retries run out
    Dagster reports "Exceeded max_retries of 2", wrapping the OSError that caused them; bad input is
    a Failure wrapping the ValueError). A wrapper's own message is kept after it in brackets when it
    adds something; a failed-checks error keeps the names of the checks its later lines hold."""
    if error is None:
        return "", fallback
    outer, root, depth = error, error, 0
    while root.cls_name in _WRAPPERS and (root.cause or root.context) and depth < 10:
        root, depth = root.cause or root.context, depth + 1
    lines = [line.strip() for line in (root.message or "").splitlines() if line.strip()]
    if lines and lines[0].endswith(":") and len(lines) > 1:  # "1 blocking asset check failed ...:" then the names
        lines = [" ".join(lines)]
    message = "\n".join(lines) or fallback
    message = re.sub(rf"^([\w.]+\.)?{re.escape(root.cls_name or '')}: ", "", message)  # the type has its own column
    if outer is not root and outer.cls_name.startswith("Retry"):
        message += f" ({outer.message.strip()})"
    return root.cls_name or "", message


def run_partitions(tags) -> str:
    """The partition a run's tags name, "first..last" for a range run, "" for an unpartitioned one."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    if ASSET_PARTITION_RANGE_START_TAG in tags:
        return f"{tags[ASSET_PARTITION_RANGE_START_TAG]}..{tags[ASSET_PARTITION_RANGE_END_TAG]}"
    return ""


def range_partition_keys(tags, partitions_def, instance) -> list[str] | None:
    """The partition keys of a range run (``dagster/asset_partition_range_*`` tags), in order; None for
    a run of one partition or none, or when the keys cannot be listed (no partitions definition, or
    partitions unregistered since)."""
    if ASSET_PARTITION_RANGE_START_TAG not in tags or partitions_def is None:
        return None
    try:
        keys = partitions_def.get_partition_keys_in_range(
            PartitionKeyRange(tags[ASSET_PARTITION_RANGE_START_TAG], tags[ASSET_PARTITION_RANGE_END_TAG]),
            dynamic_partitions_store=instance,
        )
    except Exception:  # noqa: BLE001 - a key gone since: the range as the run named it
        return None
    return [str(key) for key in keys] or None


def run_partitions_def(repository, run):
    """The partitions definition of a run's assets: its asset selection's (a backfill's or automation's
    runs are of the implicit asset job), else its job's; None when the repository cannot tell."""
    if repository is None:
        return None
    if run.asset_selection:
        graph = repository.asset_graph
        known = [key for key in run.asset_selection if graph.has(key)]
        return graph.get(known[0]).partitions_def if known else None
    return repository.get_job(run.job_name).partitions_def if repository.has_job(run.job_name) else None


def failing_partitions(failures: list[StepFailure], evaluations) -> tuple[str, ...] | None:
    """The partitions a failed range run failed for, when each of its failed steps (``failures``) names
    them: its error does (``StepFailure.partitions``: a step that found no data for some partitions, or
    whose computation of one raised: ``assets/errors.py``), or it failed blocking checks and each failed
    check among ``evaluations`` names them (a range run's check lists its failing partitions:
    ``assets/batch.py``). None when a step failed otherwise (an error outside any partition's
    computation) or nothing names one."""
    failing: set[str] = set()
    for failure in failures:
        if failure.partitions:
            failing.update(failure.partitions)
        elif failure.error_type != "DagsterAssetCheckFailedError":
            return None
    if not any(f.error_type == "DagsterAssetCheckFailedError" and not f.partitions for f in failures):
        return tuple(sorted(failing)) or None
    for evaluation in evaluations:
        if evaluation.passed or evaluation.severity.value == "WARN":
            continue
        named = (evaluation.metadata or {}).get(FAILED_PARTITIONS)
        if named is None:
            return None
        failing.update(named.value)
    return tuple(sorted(failing)) or None


def failed_check_details(check_evaluations) -> list[str]:
    """One line per failed blocking check among ``check_evaluations`` (AssetCheckEvaluation): the check,
    its partition, what it observed and its first offending row, which names the file and sample
    (``first_example``: assets/samples.py). A failed check's step error names the check alone."""
    lines = []
    for evaluation in check_evaluations:
        if evaluation.passed or evaluation.severity.value == "WARN":
            continue
        metadata = {key: str(getattr(value, "value", value)) for key, value in (evaluation.metadata or {}).items()}
        line = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
        if "partition" in metadata:
            line += f" on {metadata['partition']}"
        if "observed" in metadata:
            line += f": observed {metadata['observed'][:200]}"
        if metadata.get("first_example"):
            line += f"; first: {metadata['first_example'][:300]}"
        lines.append(line)
    return lines


def step_failures(step_failure_events, run_failure_message: str, check_evaluations=()) -> list[StepFailure]:
    """One record per failed step, or one for the whole run when it failed outside any step. A step
    that failed blocking checks has what they saw appended to its message (:func:`failed_check_details`
    of ``check_evaluations``, the run's), on its first line: the failure table's summary."""
    details = " | ".join(failed_check_details(check_evaluations))
    failures = []
    for event in step_failure_events:
        error_type, message = describe_step_error(event.event_specific_data.error, event.message or "")
        if details and error_type == "DagsterAssetCheckFailedError":
            first, _newline, rest = message.partition("\n")
            message = f"{first} | {details}" + (f"\n{rest}" if rest else "")
        # our assets are single-op: the step key is the asset key
        failures.append(
            StepFailure(
                asset=event.step_key,
                step=event.step_key,
                error_type=error_type,
                message=message,
                partitions=_named_partitions(event.event_specific_data),
            )
        )
    return failures or [StepFailure(asset=RUN_ASSET, step="", error_type="", message=run_failure_message)]


def _named_partitions(failure_data) -> tuple[str, ...]:
    """The partitions a step's ``Failure`` names in its metadata (``FAILED_PARTITIONS``: assets/errors.py)."""
    user_data = getattr(failure_data, "user_failure_data", None)
    named = (getattr(user_data, "metadata", None) or {}).get(FAILED_PARTITIONS)
    value = getattr(named, "value", named)
    return tuple(str(key) for key in value) if isinstance(value, list) else ()


def materialised_assets(events) -> set[str]:
    """The asset keys (user strings) a run's ``events`` (DagsterEvent) materialised."""
    return {
        event.asset_key.to_user_string()
        for event in events
        if event is not None and event.event_type_value == "ASSET_MATERIALIZATION"
    }


def check_evaluations(instance, run_id: str) -> list:
    """The asset check evaluations of a run, from the instance's event log."""
    return [
        record.dagster_event.event_specific_data
        for record in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        if record.dagster_event is not None
    ]


#: Tags of the runs `evalpipeline run` executes itself (evalpipeline.definitions): host and process id.
HOST_TAG, PID_TAG = "evalpipeline/host", "evalpipeline/pid"

#: Both status sensors: on by default, every 30 s. They see every run of the instance and keep
#: this code location's (:func:`recorded_here`): Dagster's own filter drops the runs that carry no
#: code location, those `dagster asset materialize -m evalpipeline.definitions` or a script's
#: ``execute_job`` launch.
_STATUS_SENSOR = {
    "default_status": DefaultSensorStatus.RUNNING,
    "minimum_interval_seconds": 30,
    "monitor_all_code_locations": True,
}


def recorded_here(context: RunStatusSensorContext) -> bool:
    """Whether the status sensors record (or resolve) the context's run: a run of one of this code
    location's jobs, or of its assets (an asset job: the UI's or the CLI's materialisations), that
    `evalpipeline run` did not execute itself (``PID_TAG``: it records and resolves its own runs, and
    records no failed range it reruns one partition per run)."""
    run = context.dagster_run
    if PID_TAG in run.tags:
        return False
    repository = context.repository_def
    if repository is None:  # a test's context: nothing to compare with
        return True
    if repository.has_job(run.job_name) and not run.job_name.startswith("__"):
        return True
    ours = repository.asset_graph.get_all_asset_keys()
    return bool(run.asset_selection) and set(run.asset_selection) <= set(ours)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@run_failure_sensor(
    **_STATUS_SENSOR,
    description="Records every failed run (run id, asset, partition, error summary) in the lake's "
    "run_status/failures table, so that teams reading the Parquet outputs see what did not refresh "
    "(resolve_run_failures marks a row resolved once a later run materialises its asset for its partition).",
)
def record_run_failures(context: RunFailureSensorContext, lake: LakeResource):
    run = context.dagster_run
    if not recorded_here(context):
        return
    evaluations = check_evaluations(context.instance, run.run_id)
    failures = step_failures(context.get_step_failure_events(), context.failure_event.message or "", evaluations)
    # a range run (a backfill's): a row per partition its checks name, else per partition of the range,
    # each then resolved by whichever later run redoes that partition
    keys = range_partition_keys(run.tags, run_partitions_def(context.repository_def, run), context.instance)
    record_run_failure(
        lake.lake(),
        run_id=run.run_id,
        job=run.job_name,
        partition=list(failing_partitions(failures, evaluations) or keys) if keys else run_partitions(run.tags),
        failures=failures,
        failed_at=_now(),
    )


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    **_STATUS_SENSOR,
    description="Marks the rows of failed steps in the lake's run_status/failures table resolved (resolved_by, "
    "resolved_at) once a run succeeds that materialised their asset for their partition (rows of a whole "
    "failed run: a later success of its job): what still fails is the rows without resolved_at.",
)
def resolve_run_failures(context: RunStatusSensorContext, lake: LakeResource):
    run = context.dagster_run
    if not recorded_here(context):
        return
    events = [
        record.dagster_event
        for record in context.instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    ]
    keys = range_partition_keys(run.tags, run_partitions_def(context.repository_def, run), context.instance)
    resolve_failures(
        lake.lake(),
        job=run.job_name,
        partitions=[run_partitions(run.tags), *(keys or [])],
        assets=materialised_assets(events),
        run_id=run.run_id,
        resolved_at=_now(),
    )
