"""dagster-dask's executor on an existing Dask cluster, with its task arguments serialised by Dagster
(``resources.executors.dask_existing_executor`` builds it; imported only when the Dask executor is chosen)."""

from __future__ import annotations

from dagster_dask.executor import DaskExecutor


def _execute_serialised_step(dependencies: list, payload: str) -> str:
    """Runs on a Dask worker: dagster-dask's own step entry point, on deserialised arguments.
    ``dependencies`` (the upstream steps' results) only make Dask order the tasks."""
    from dagster import deserialize_value, serialize_value
    from dagster_dask.executor import query_on_dask_worker

    task = deserialize_value(payload, as_type=dict)
    events = query_on_dask_worker(
        None, task["job"], task["run"], task["run_config"], task["step_keys"], task["instance_ref"], task["known_state"]
    )
    return serialize_value(list(events))


class SerialisedDaskExecutor(DaskExecutor):
    """dagster-dask's ``DaskExecutor`` on an existing cluster, for two defects of dagster-dask 0.29.27,
    the newest release for Dagster 1.13 (tests/test_distributed.py fails on either):

    * dagster-dask 0.29.27 with distributed >= 2024.12: a run whose steps use a concurrency pool fails at submission.
    * dagster-dask 0.29.27: concurrent runs of one job share task keys, and one "succeeds" having run nothing.

    The first: dagster-dask passes Dagster's records (the run, the instance reference, the known
    state) to ``Client.submit`` as they are, distributed walks every tuple among task arguments
    looking for futures, and Dagster's ``@record`` types (``RunOpConcurrency``, on runs whose steps
    use a pool) are tuples that forbid iteration. Here the arguments travel as one string of
    Dagster's serialisation and the events come back the same way. The second: dagster-dask keys
    tasks ``<job>.<step>``, so Dask runs a step for one of two concurrent runs and hands its events
    to both; here tasks are keyed ``<job>.<step>.<run id>``. Otherwise scheduling is dagster-dask's:
    one task per step, after the tasks of its upstream steps, with the step's
    ``dagster-dask/resource_requirements`` tag as Dask resources.
    """

    def __init__(self, address: str):
        super().__init__("existing", {"address": address})

    def execute(self, plan_context, execution_plan):
        import dask.distributed
        from dagster import deserialize_value, raise_execution_interrupts, serialize_value
        from dagster_dask.executor import get_dask_resource_requirements

        if not plan_context.instance.is_persistent:
            raise ValueError(
                "Dask execution needs a persistent Dagster instance (set DAGSTER_HOME) that the workers can reach"
            )
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
            finished = iter(dask.distributed.as_completed(list(futures_by_step.values()), with_results=True))
            while True:
                # an interrupt (the run cancelled) is raised while waiting for a task, not while
                # the caller handles the events this generator yields
                with raise_execution_interrupts():
                    _future, result = next(finished, (None, None))
                if result is None:
                    return
                yield from deserialize_value(result, as_type=list)
