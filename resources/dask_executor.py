"""dagster-dask's executor on an existing Dask cluster, with its task arguments serialised by Dagster
(``resources.executors.dask_existing_executor`` builds it; imported only when the Dask executor is chosen)."""

from __future__ import annotations

from dagster_dask.executor import DaskExecutor


def _execute_serialised_step(dependencies: list, payload: str) -> str:
    """Runs on a Dask worker: dagster-dask's own step entry point, on deserialised arguments.
    ``dependencies`` (the upstream steps' results) only make Dask order the tasks."""
    from dagster._serdes import deserialize_value, serialize_value
    from dagster_dask.executor import query_on_dask_worker

    task = deserialize_value(payload, as_type=dict)
    events = query_on_dask_worker(
        None, task["job"], task["run"], task["run_config"], task["step_keys"], task["instance_ref"], task["known_state"]
    )
    return serialize_value(list(events))


class SerialisedDaskExecutor(DaskExecutor):
    """``dagster_dask.executor.DaskExecutor`` for an existing cluster, with one change: the task
    arguments (the run, the job pointer, the instance reference, the known state) travel as a
    JSON string from Dagster's serdes and results come back the same way.

    Why: dagster-dask 0.29.27 passes Dagster's NamedTuple records to ``Client.submit`` as they
    are; distributed >= 2024.12 walks every tuple among task arguments looking for futures, and
    Dagster's ``@record`` types (``RunOpConcurrency``, set on runs whose steps use a concurrency
    pool) forbid iteration, so submitting such a run fails before any step starts.
    And one fix: tasks are keyed ``<job>.<step>.<run id>``. dagster-dask keys them ``<job>.<step>``,
    so concurrent runs of one job (two partitions) share task keys; Dask then runs the step for
    one run only and hands its events to both, and the other run "succeeds" having run nothing.
    Otherwise scheduling is unchanged: one task per step, depending on the tasks of its upstream
    steps, with the step's ``dagster-dask/resource_requirements`` tag as Dask resources.
    """

    def __init__(self, address: str):
        super().__init__("existing", {"address": address})

    def execute(self, plan_context, execution_plan):
        import dask.distributed
        from dagster._core.errors import raise_execution_interrupts
        from dagster._serdes import deserialize_value, serialize_value
        from dagster._utils import iterate_with_context
        from dagster_dask.executor import get_dask_resource_requirements

        if not plan_context.instance.is_persistent:
            raise ValueError("Dask execution needs a persistent Dagster instance (set DAGSTER_HOME) that the workers can reach")
        common = {
            "job": plan_context.reconstructable_job,
            "run": plan_context.dagster_run,
            "run_config": plan_context.run_config,
            "instance_ref": plan_context.instance.get_ref(),
            "known_state": execution_plan.known_state,
        }
        with dask.distributed.Client(self.cluster_configuration["address"]) as client:
            futures_by_step = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    upstream = [futures_by_step[k] for i in step.step_inputs for k in i.dependency_keys]
                    futures_by_step[step.key] = client.submit(
                        _execute_serialised_step,
                        upstream,
                        serialize_value({**common, "step_keys": [step.key]}),
                        # dagster-dask keys tasks "<job>.<step>": two concurrent runs of one job then
                        # share a key, Dask runs the step once and both runs get its events.
                        key=f"{plan_context.job_name}.{step.key}.{plan_context.run_id}",
                        resources=get_dask_resource_requirements(step.tags),
                        pure=False,
                    )
            finished = dask.distributed.as_completed(list(futures_by_step.values()), with_results=True)
            for _future, result in iterate_with_context(raise_execution_interrupts, finished):
                yield from deserialize_value(result, as_type=list)
