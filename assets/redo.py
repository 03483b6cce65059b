"""Sensor ``rerun_rest_of_failed_ranges``: the partitions of a failed range run that did not fail,
rerun without the ones that did.

A backfill the daemon runs in ranges (the assets' backfill policy: assets/partitions.py) fails a whole
range when one of its partitions fails. Where the step's failure names its partitions and the run
materialised nothing (``failing_partitions``: a backfill of every partition of a sparse grid asks for
model x suite combinations that have no samples, and ``eval_samples`` names them), no later
automation tick would redo the others: their inputs did not change. This sensor requests runs of the
others, in ranges again (a range that fails again is split again, each time without the partitions
it names), as ``evalpipeline run`` reruns a failed range. A run that materialised something is left
to automation, which refreshes what its new data feeds; a run whose error names no partition is left
to the nightly, as before.
"""

from dagster import AssetKey, DagsterEventType, RunFailureSensorContext, RunRequest, run_failure_sensor

from assets.jobs import JOB_STEPS, ingest_and_fit_job, model_job
from assets.partitions import partition_blocks, split_failed_range
from assets.status import (
    _STATUS_SENSOR,
    check_evaluations,
    failing_partitions,
    materialised_assets,
    range_partition_keys,
    recorded_here,
    run_partitions_def,
    step_failures,
)
from resources.dagster_internals import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

#: Tag of a run that redoes the rest of a failed range: the failed run's id.
REST_OF_TAG = "evalpipeline/rest_of"

#: The jobs the reruns belong to: the steps of a model x suite range, and of a per-model range.
_JOBS = (ingest_and_fit_job, model_job)


@run_failure_sensor(
    **_STATUS_SENSOR,
    request_jobs=list(_JOBS),
    description="Reruns, in ranges, the partitions of a failed range run (a backfill's) that did not fail, "
    "when the failure names its partitions and the run materialised nothing: a backfill of every model x "
    "suite then fails only the combinations without samples, not every range that holds one.",
)
def rerun_rest_of_failed_ranges(context: RunFailureSensorContext):
    # None for a run it leaves alone: Dagster's run status sensors then go on to the next failed run
    # in the same tick (a returned value ends the tick)
    run = context.dagster_run
    if not recorded_here(context):
        return None
    partitions_def = run_partitions_def(context.repository_def, run)
    keys = range_partition_keys(run.tags, partitions_def, context.instance)
    if not keys or len(keys) < 2:
        return None
    events = [
        record.dagster_event
        for record in context.instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    ]
    if materialised_assets(events):  # automation refreshes what its new data feeds
        return None
    failing = failing_partitions(
        step_failures(context.get_step_failure_events(), ""), check_evaluations(context.instance, run.run_id)
    )
    split = split_failed_range(keys, failing)
    if split is None or not split[1]:  # names no partition, or every one: the nightly's
        return None
    selected = (
        [key.to_user_string() for key in run.asset_selection]
        if run.asset_selection
        else JOB_STEPS.get(run.job_name, [])
    )
    job = next((job for job in _JOBS if set(selected) & set(JOB_STEPS[job.name])), None)
    if job is None:
        return None
    steps = [step for step in JOB_STEPS[job.name] if step in selected]
    left_out = sorted(set(selected) - set(steps))
    if left_out:  # partition_plots, drawn on request: materialise it again for those partitions
        context.log.warning(f"not rerun for the rest of run {run.run_id}: {', '.join(left_out)}")
    rest = split[1]
    requests = []
    for block in partition_blocks(rest, partitions_def, context.instance):
        tags = {REST_OF_TAG: run.run_id}
        if len(block) > 1:
            tags |= {ASSET_PARTITION_RANGE_START_TAG: block[0], ASSET_PARTITION_RANGE_END_TAG: block[-1]}
        requests.append(
            RunRequest(
                run_key=f"rest-of:{run.run_id}:{block[0]}..{block[-1]}",
                job_name=job.name,
                asset_selection=[AssetKey.from_user_string(step) for step in steps],
                partition_key=block[0] if len(block) == 1 else None,
                tags=tags,
            )
        )
    context.log.info(
        f"run {run.run_id} failed for {len(failing)} of its {len(keys)} partitions "
        f"({', '.join(failing)}): rerunning the other {len(rest)} in {len(requests)} run(s)"
    )
    return requests
