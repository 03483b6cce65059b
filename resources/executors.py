"""Which engine runs the steps of a run, chosen by environment configuration alone.

``EVALPIPELINE_EXECUTOR`` (read when the code location loads):

* unset or ``multiprocess`` (the default): Dagster's local ``multiprocess_executor``,
  one process per step on this machine, forked from a forkserver that has imported the code
  location once per run (``local_executor``) instead of a fresh interpreter per step.
* ``dask``: dagster-dask's executor connected to an existing Dask scheduler whose address is
  ``$EVALPIPELINE_DASK_SCHEDULER`` (e.g. ``tcp://127.0.0.1:8786``). The address is an ``env:``
  config source, so it is read when a run starts, never stored in the repo. Task arguments
  travel as Dagster's JSON serialisation (see ``resources.dask_executor.SerialisedDaskExecutor`` for why).
  Every step is one Dask task; the workers rebuild the job from ``evalpipeline.definitions``
  and write to the same lake and Dagster instance, so both must be reachable from them.

* ``k8s``: ``dagster_k8s.k8s_job_executor``, one Kubernetes Job per step, configured by the
  run config's ``execution:`` block (README, "Production set-up"). dagster-k8s is not a
  dependency and Kubernetes cannot run on this machine, so this path is documented and
  configuration-tested only.

``EVALPIPELINE_STEP_THREADS`` (default 1; ``0`` leaves the libraries' defaults): the threads a
step process gives BLAS and XLA (``limit_step_threads``). The ``fit`` pool runs one fitting step
per core, so a step that also spread its work over every core (BLAS and XLA's default) would
oversubscribe them (docs/performance.md). XLA's own pool (one thread per CPU, whatever its flags
say) is sized when the fits start the backend (see ``step_threads``).

``start_dask_cluster`` starts a scheduler and worker processes on loopback (what
``make dask-cluster`` and tests/test_distributed.py use); ``execute_partitions`` runs a job
out of process, one run per partition, with whatever executor the environment selects --
``JobDefinition.execute_in_process`` would ignore the configured executor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AssetKey,
    DagsterInstance,
    Executor,
    ExecutorDefinition,
    Field,
    StringSource,
    deserialize_value,
    execute_job,
    executor,
    multiple_process_executor_requirements,
    multiprocess_executor,
    serialize_value,
)

from evalpipeline.config import EXECUTOR_ENV
from resources.dagster_internals import ReconstructableJob, ReconstructableRepository

STEP_THREADS_ENV = "EVALPIPELINE_STEP_THREADS"
#: what BLAS (OpenBLAS, MKL, OpenMP builds) and XLA's CPU backend read when they load
_BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"


def step_threads(environ: Mapping[str, str] | None = None) -> int:
    """``$EVALPIPELINE_STEP_THREADS``: the threads a step gives BLAS and XLA (default 1; 0: the libraries'
    defaults). Raises ValueError naming the variable for anything but a whole number."""
    environ = os.environ if environ is None else environ
    raw = environ.get(STEP_THREADS_ENV, "").strip() or "1"
    if not raw.isdigit():
        raise ValueError(
            f"{STEP_THREADS_ENV} must be a whole number of threads (0: the libraries' defaults), got {raw!r}"
        )
    return int(raw)


def limit_step_threads(environ: dict | None = None) -> dict[str, str]:
    """Give every step process started from here ``$EVALPIPELINE_STEP_THREADS`` threads (default 1)
    for BLAS and XLA, unless the variables are set already; returns what it set.

    The variables are read when the libraries load, so they take effect in the processes started
    after this call (the multiprocess executor's steps, `evalpipeline run`'s workers) and, for XLA,
    in this one if JAX has not initialised its backend yet. XLA's flags have no count for its
    intra-op thread pool: the fits start the backend with a pool of this many threads instead
    (``GlmSettings.fitter``, ``evalpipeline.models.fit.configure_jax(intra_op_threads=...)``)."""
    environ = os.environ if environ is None else environ
    threads, applied = step_threads(environ), {}
    if threads == 0:
        return applied
    for name in _BLAS_THREAD_VARIABLES:
        if name not in environ:
            environ[name] = applied[name] = str(threads)
    flags = environ.get("XLA_FLAGS", "")
    if threads == 1 and "multi_thread_eigen" not in flags:
        environ["XLA_FLAGS"] = applied["XLA_FLAGS"] = f"{flags} {_XLA_ONE_THREAD}".strip()
    return applied


DASK_SCHEDULER_ENV = "EVALPIPELINE_DASK_SCHEDULER"
EXECUTOR_CHOICES = ("multiprocess", "dask", "k8s")
#: Where the code location lives: what workers (and `dagster dev`) import to rebuild a job.
DEFINITIONS_MODULE = "evalpipeline.definitions"


def code_location():
    """The code location's ``Definitions``, imported by module name (:data:`DEFINITIONS_MODULE`): what a step
    process rebuilds, and what the run loop executes, without the Dagster layer importing its composition root."""
    import importlib

    return importlib.import_module(DEFINITIONS_MODULE).defs


#: What a step process imports before its work starts: the code location (Dagster, JAX, numpyro,
#: ArviZ, pandas, pyarrow, matplotlib; ~4.4 s) and Great Expectations (~1.6 s, imported by the
#: validation steps). None of it starts a thread or initialises JAX's backend, so forking after it
#: is safe (JAX's fork warning is installed with the backend, which each step creates for itself).
#: ``evalpipeline run``'s workers fork from a server that preloads the same (``resources.run.pool.WorkerPool``).
STEP_PRELOAD_MODULES = (DEFINITIONS_MODULE, "great_expectations")


def _forkserver_unless_configured(config: dict) -> dict:
    """The multiprocess executor's run config, with ``start_method`` forkserver and
    :data:`STEP_PRELOAD_MODULES` preloaded unless the run config chose a start method."""
    import multiprocessing

    if config.get("start_method") or "forkserver" not in multiprocessing.get_all_start_methods():
        return config
    return {**config, "start_method": {"forkserver": {"preload_modules": list(STEP_PRELOAD_MODULES)}}}


#: The default executor: Dagster's ``multiprocess_executor`` (same name and run config), whose steps
#: fork from a server that imported :data:`STEP_PRELOAD_MODULES` once per run. With ``spawn`` (its
#: own default) every step of every run is a fresh interpreter that imports them again: ~6 s a step,
#: seven steps in a model x suite run. A run config's ``execution: config: start_method: spawn: {}``
#: restores it.
local_executor = multiprocess_executor.configured(
    _forkserver_unless_configured,
    name="multiprocess",
    config_schema=multiprocess_executor.config_schema,
)


def configured_executor(environ: Mapping[str, str] | None = None) -> ExecutorDefinition:
    """The executor named by ``$EVALPIPELINE_EXECUTOR`` (default: the local multiprocess one). Choosing it
    limits the threads of the step processes started from here (:func:`limit_step_threads`): before any
    step process starts, and before JAX initialises in this one."""
    env = os.environ if environ is None else environ
    if environ is None:
        limit_step_threads()
    choice = (env.get(EXECUTOR_ENV) or "multiprocess").strip().lower()
    if choice == "multiprocess":
        return local_executor
    if choice == "dask":
        if not (env.get(DASK_SCHEDULER_ENV) or "").strip():
            raise ValueError(
                f"{EXECUTOR_ENV}=dask needs {DASK_SCHEDULER_ENV}, the address of a running Dask "
                "scheduler (e.g. tcp://127.0.0.1:8786; start one with `make dask-cluster`)"
            )
        return dask_existing_executor.configured({"address": {"env": DASK_SCHEDULER_ENV}}, name="dask")
    if choice == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise ValueError(
                f"{EXECUTOR_ENV}=k8s needs the dagster-k8s package (pip install 'dagster-k8s>=0.29,<0.30'), "
                "which evalpipeline does not install"
            ) from exc
        return k8s_job_executor
    raise ValueError(f"{EXECUTOR_ENV}={choice!r} is not a known executor; choose one of {', '.join(EXECUTOR_CHOICES)}")


@executor(
    name="dask",
    config_schema={"address": Field(StringSource, description="address of a running Dask scheduler")},
    requirements=multiple_process_executor_requirements(),
)
def dask_existing_executor(init_context) -> Executor:
    """dagster-dask's executor on an existing scheduler, with each task's arguments sent as
    Dagster's JSON serialisation. Steps run as Dask tasks on the workers, one task per step."""
    # imported here: dagster-dask imports dask.dataframe (~0.5 s), which every process loading the code
    # location (the CLI, the UI, each worker) would otherwise pay without using it
    from resources.dask_executor import SerialisedDaskExecutor

    return SerialisedDaskExecutor(init_context.executor_config["address"])


def reconstructable_job(job_name: str) -> ReconstructableJob:
    """A pointer to a job of the code location that other processes (Dask workers, the
    multiprocess executor's step processes) can rebuild by importing ``evalpipeline.definitions``."""
    return ReconstructableRepository.for_module(DEFINITIONS_MODULE, "defs").get_reconstructable_job(job_name)


@dataclass
class RunSummary:
    """One finished run: its partition, outcome and, per step, where and how long it ran."""

    run_id: str
    partition_key: str
    success: bool
    step_seconds: dict[str, float] = field(default_factory=dict)
    step_pids: dict[str, int] = field(default_factory=dict)


def execute_partitions(
    job_name: str,
    partition_keys: Sequence[str],
    *,
    instance: DagsterInstance,
    run_config: Mapping | None = None,
    concurrent_runs: int = 1,
    assets: Sequence[str] | None = None,
) -> list[RunSummary]:
    """Run ``job_name`` (or only its ``assets``) once per partition with the executor the code
    location was loaded with.

    Up to ``concurrent_runs`` runs are in flight at once, each from its own process as a run
    queue's run workers would (each run's steps are sequential, so this is what lets several
    workers fit at the same time; ``execute_job`` is not thread-safe: Dagster reconfigures
    ``logging`` per run). The dynamic partitions must already be registered on ``instance``,
    which must be persistent.
    """
    if concurrent_runs < 1:
        raise ValueError(f"concurrent_runs must be at least 1, got {concurrent_runs}")
    requests = [
        (
            job_name,
            None if key is None else dict(getattr(key, "keys_by_dimension", {})) or str(key),
            dict(run_config or {}),
            list(assets or []),
        )
        for key in partition_keys
    ]
    if concurrent_runs == 1:
        return [_run_partition(*request, instance=instance) for request in requests]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ref = serialize_value(instance.get_ref())
    with ProcessPoolExecutor(concurrent_runs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_run_partition_from_ref, [(ref, *request) for request in requests]))


def _run_partition_from_ref(request) -> RunSummary:
    ref, *args = request
    with DagsterInstance.from_ref(deserialize_value(ref)) as instance:
        return _run_partition(*args, instance=instance)


def _run_partition(job_name, key, run_config, assets, *, instance: DagsterInstance) -> RunSummary:
    """One run of ``job_name`` for partition ``key`` (a string, a multi-partition key's keys by
    dimension, or None for an unpartitioned job), through the reconstructable job so that the
    configured executor applies."""
    from dagster import MultiPartitionKey

    defs = code_location()
    partition_key = MultiPartitionKey(key) if isinstance(key, dict) else key
    job_def = defs.resolve_job_def(job_name)
    tags = {} if key is None else dict(job_def.get_tags_for_partition_key(partition_key, selected_asset_keys=None))
    result = execute_job(
        reconstructable_job(job_name),
        instance=instance,
        run_config=run_config,
        tags=tags,
        asset_selection=[AssetKey.from_user_string(a) for a in assets] or None,
    )
    return _summarise(instance, result.run_id, "" if key is None else str(partition_key), result.success)


def _summarise(instance: DagsterInstance, run_id: str, partition_key: str, success: bool) -> RunSummary:
    summary = RunSummary(run_id=run_id, partition_key=partition_key, success=success)
    started: dict[str, float] = {}
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            started[event.step_key] = record.timestamp
            summary.step_pids[event.step_key] = event.pid
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in started:
            summary.step_seconds[event.step_key] = record.timestamp - started[event.step_key]
    return summary


@dataclass
class DaskCluster:
    """A running scheduler and its workers: ``address`` to connect, ``worker_pids`` of the processes
    that execute tasks (the nanny's children), ``log_dir`` with one log file per process."""

    address: str
    worker_pids: list[int]
    log_dir: Path
    processes: list[subprocess.Popen]


@contextmanager
def start_dask_cluster(
    n_workers: int = 2,
    *,
    log_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    env: Mapping[str, str] | None = None,
    preload: Sequence[str] = (DEFINITIONS_MODULE,),
    timeout: float = 90.0,
) -> Iterator[DaskCluster]:
    """Start ``dask scheduler`` and ``n_workers`` ``dask worker`` processes, all listening on
    ``host`` (loopback by default), and stop them on exit, also on error or interrupt.

    Workers get one thread each (Dagster steps are not thread-safe) and preload the code
    location so the first step does not pay for the imports. Port 0 lets the OS choose.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be at least 1, got {n_workers}")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    scheduler_file = log_dir / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    child_env = {**os.environ, **(env or {})}
    processes: list[subprocess.Popen] = []

    def spawn(args: list[str], name: str) -> None:
        log = open(log_dir / f"{name}.log", "wb")
        # Own session: teardown signals the whole group, nanny and the worker it forked.
        processes.append(
            subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
        )
        log.close()

    try:
        spawn(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                host,
                "--port",
                str(port),
                # the dashboards (HTTP, no authentication) stay on loopback whatever --host serves the cluster
                "--dashboard-address",
                "127.0.0.1:0",
                "--scheduler-file",
                str(scheduler_file),
            ],
            "scheduler",
        )
        deadline = time.monotonic() + timeout
        address = None
        while address is None:
            _check_alive(processes, log_dir)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the Dask scheduler did not start within {timeout:.0f}s; see {log_dir}/scheduler.log"
                )
            time.sleep(0.1)
            address = _scheduler_address(scheduler_file)
        for number in range(1, n_workers + 1):
            args = [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--host",
                host,
                "--nworkers",
                "1",
                "--nthreads",
                "1",
                "--no-dashboard",
                "--dashboard-address",
                "127.0.0.1:0",
                "--name",
                f"worker-{number}",
                "--local-directory",
                str(log_dir / f"worker-{number}"),
            ]
            for module in preload:
                args += ["--preload", module]
            spawn(args, f"worker-{number}")
        worker_pids = _wait_for_workers(address, n_workers, deadline, processes, log_dir)
        yield DaskCluster(address=address, worker_pids=worker_pids, log_dir=log_dir, processes=processes)
    finally:
        _stop(processes)


def _scheduler_address(scheduler_file: Path) -> str | None:
    """The address in the scheduler's file, or None while it is missing or half written.

    The scheduler writes the file in place, so it can exist empty or truncated for a moment."""
    try:
        return json.loads(scheduler_file.read_text())["address"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def _check_alive(processes: list[subprocess.Popen], log_dir: Path) -> None:
    for process in processes:
        if process.poll() is not None:
            raise RuntimeError(
                f"a Dask process exited with code {process.returncode}: {process.args}; logs in {log_dir}"
            )


def _wait_for_workers(address: str, n_workers: int, deadline: float, processes, log_dir: Path) -> list[int]:
    from distributed import Client

    with Client(address, timeout=max(1.0, deadline - time.monotonic())) as client:
        while len(client.scheduler_info(n_workers=-1)["workers"]) < n_workers:
            _check_alive(processes, log_dir)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n_workers} Dask workers did not register in time; see the logs in {log_dir}")
            time.sleep(0.2)
        return sorted(client.run(os.getpid).values())


def _stop(processes: list[subprocess.Popen], grace: float = 10.0) -> None:
    """SIGTERM each process group we started, then SIGKILL what is left after ``grace`` seconds."""
    for process in reversed(processes):  # workers first, then the scheduler
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:
        # The group may outlive its leader (a worker forked by the nanny): kill it by id regardless.
        _signal_group(process, signal.SIGKILL)
        if process.poll() is None:
            process.wait(timeout=5)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def landing_partitions(landing: Path) -> list[tuple[str, str]]:
    """(model, suite) display names of every partition the readable logs in ``landing`` hold."""
    from evalpipeline.ingest import find_log_files, scan_sources
    from resources.lake import IngestSettings

    found, _unreadable = scan_sources(find_log_files(landing), IngestSettings().options())
    return sorted({(p.model, p.suite) for _, parts in found for p in parts})


def run_landing(
    job_name: str,
    *,
    lake: Path,
    landing: Path,
    instance: DagsterInstance,
    only: Sequence[tuple[str, str]] | None = None,
    concurrent_runs: int = 1,
    assets: Sequence[str] | None = None,
    all_stages: bool = False,
) -> list[RunSummary]:
    """Register the landing folder's partitions on ``instance`` and run ``job_name`` for each
    (or for ``only``), with the lake and landing folder passed as run config so that every
    process executing a step -- a Dask worker on another host included -- uses the same ones.

    ``all_stages`` (with the ``ingest_and_fit`` job): then the rest of the demo job, as ``evalpipeline
    run`` orders it: ``suite_analysis`` and ``suite_comparisons`` per suite, ``model_analysis`` per
    model, ``lake_reports`` once; a stage starts when the previous one is done."""
    from dagster import MultiPartitionKey

    from evalpipeline.lake.keys import to_partition_key

    def model_suite_key(model: str, suite: str) -> MultiPartitionKey:
        return MultiPartitionKey({"model": to_partition_key(model), "suite": to_partition_key(suite)})

    if all_stages and (job_name != "ingest_and_fit" or assets):
        raise ValueError("all_stages runs the whole demo job: it starts from ingest_and_fit, with no asset selection")

    pairs = list(only) if only is not None else landing_partitions(landing)
    for dimension, names in (("model", {m for m, _ in pairs}), ("suite", {s for _, s in pairs})):
        keys = {to_partition_key(n) for n in names}
        missing = sorted(keys - set(instance.get_dynamic_partitions(dimension)))
        if missing:
            instance.add_dynamic_partitions(dimension, missing)
    run_config = {"resources": {"lake": {"config": {"root": str(lake), "landing": str(landing)}}}}
    stages = [(job_name, [model_suite_key(m, s) for m, s in pairs])]
    if all_stages:
        suites, models = (
            sorted({to_partition_key(s) for _, s in pairs}),
            sorted({to_partition_key(m) for m, _ in pairs}),
        )
        stages += [
            ("suite_analysis", suites),
            ("suite_comparisons", suites),
            ("model_analysis", models),
            ("lake_reports", [None]),
        ]
    summaries: list[RunSummary] = []
    for stage_job, keys in stages:
        summaries += execute_partitions(
            stage_job,
            keys,
            instance=instance,
            run_config=run_config,
            concurrent_runs=min(concurrent_runs, len(keys)),
            assets=assets,
        )
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m resources.executors --lake L --landing F [--job J] [--only MODEL SUITE]...
    [--asset A]... [--concurrent-runs N] [--json OUT]``:
    run a job over the landing folder's partitions, out of process, on the executor that
    ``$EVALPIPELINE_EXECUTOR`` selects, against the instance in ``$DAGSTER_HOME``."""
    import argparse
    from dataclasses import asdict

    parser = argparse.ArgumentParser(prog="python -m resources.executors", description=main.__doc__)
    parser.add_argument("--job", default="ingest_and_fit")
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--landing", type=Path, required=True)
    parser.add_argument("--only", nargs=2, action="append", metavar=("MODEL", "SUITE"))
    parser.add_argument("--asset", action="append", help="run only these assets of the job (repeatable)")
    parser.add_argument("--concurrent-runs", type=int, default=1, help="runs in flight at once (default 1)")
    parser.add_argument(
        "--all-stages",
        action="store_true",
        help="after ingest_and_fit, the suite, comparison, model and lake-wide jobs (the whole demo job)",
    )
    parser.add_argument("--json", type=Path, help="write one summary per run here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with DagsterInstance.get() as instance:
        summaries = run_landing(
            args.job,
            lake=args.lake.resolve(),
            landing=args.landing.resolve(),
            instance=instance,
            only=args.only,
            concurrent_runs=args.concurrent_runs,
            assets=args.asset,
            all_stages=args.all_stages,
        )
    report = {
        "executor": configured_executor().name,
        "driver_pid": os.getpid(),
        "wall_seconds": time.perf_counter() - started,
        "runs": [asdict(s) for s in summaries],
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    for s in summaries:
        print(f"{s.partition_key}: {'ok' if s.success else 'FAILED'} {s.step_seconds}")
    return 0 if all(s.success for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
