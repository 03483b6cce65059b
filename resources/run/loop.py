"""The run loop of ``evalpipeline run``: the whole graph for the logs in the landing folder, against a
persistent local Dagster instance, so that ``make ui`` shows the same runs and materialisations.

What to run and in which ranges is :mod:`resources.run.plan`'s; the worker processes are
:mod:`resources.run.pool`'s. This module executes the runs, reruns failed ranges, records failures
in the lake, and prints what happens. It reads the code location by name (:func:`resources.executors.code_location`),
as the executors' step processes do, so that it works the same in a worker process.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
from dagster import AssetKey, DagsterInstance

from assets.batch import PROGRESS_MARK
from assets.jobs import MODEL_ASSETS, PARTITION_ASSETS, SUITE_ASSETS
from assets.partitions import PARTITIONS_PER_RUN, model_suite_key
from assets.samplers import prepare_samplers
from assets.schedules import (
    current_files_states,
    input_partitions,
    rejected_and_unchanged,
    stale_partitions,
    sync_dynamic_partitions,
)
from assets.status import (
    HOST_TAG,
    PID_TAG,
    failed_check_details,
    failing_partitions,
    materialised_assets,
    range_partition_keys,
    run_partitions,
    run_partitions_def,
    step_failures,
)
from evalpipeline.config import LAKE_ENV, LANDING_ENV, lake_root, landing_overlaps_lake
from evalpipeline.lake import Lake, process_alive
from evalpipeline.lake.keys import from_partition_key, printable, to_partition_key
from evalpipeline.models.fit import preparation_requests
from evalpipeline.report.terminal import format_leaderboard
from evalpipeline.settings import check_config
from evalpipeline.steps.discovery import discover
from evalpipeline.steps.run_status import (
    RUN_ASSET,
    StepFailure,
    record_run_failure,
    resolve_failures,
    resolve_up_to_date,
)
from evalpipeline.steps.samples import leaderboard_path
from resources.dagster_internals import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from resources.executors import EXECUTOR_ENV, code_location, configured_executor
from resources.fit import CACHE_DIR_ENV
from resources.run.plan import NO_STALE, Run, RunPlanner, run_scope, with_data
from resources.run.pool import StepOutcome, WorkerPool, run_steps

DEFAULT_DAGSTER_HOME = "dagster_home"
LOG_LEVEL_ENV = "EVALPIPELINE_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Partitions a run of `evalpipeline run` covers at most (assets.partitions.PARTITIONS_PER_RUN).
DEFAULT_PARTITIONS_PER_RUN = PARTITIONS_PER_RUN

#: Rows of each suite's leaderboard printed at the end of `evalpipeline run`: at a public
#: leaderboard's size six full boards were 600 lines; the rest are counted and their table named.
LEADERBOARD_LINES = 20


def run_main_job(
    *,
    instance: DagsterInstance | None = None,
    echo: Callable[[str], None] = print,
    only_changed: bool = False,
    partitions_per_run: int = DEFAULT_PARTITIONS_PER_RUN,
    workers: int = 1,
    left: tuple[set[str], set[str]] = (set(), set()),
) -> int:
    """Materialise the whole graph for the logs in the landing folder, in five stages: the
    model x suite partitions (ingest, headline posteriors, GLM fits, reliability), the suites
    (leaderboard, GLMs), the suites' comparisons (a run of their own, so that a suite GLM failing
    its blocking checks is excluded from them rather than skipping them), the models, then the
    lake-wide tables. When a suite fit asked for the warm sampler of one LLM more to be compiled
    ahead (evalpipeline.steps.fits.prepare_requested_samplers), ``prepare_samplers`` runs beside the
    lake-wide tables, after every other output is written. Returns 0 when every run succeeded (and,
    with ``only_changed``, no partition is left rejected by its blocking checks), 1 otherwise.

    Each stage runs its partitions in ranges of up to ``partitions_per_run`` adjacent partitions
    (:class:`resources.run.plan.RunPlanner`). With ``workers`` > 1 (and a persistent instance), a
    stage's runs are split into at least ``workers`` ranges and executed side by side in that many
    worker processes (:mod:`resources.run.pool`): the stages stay in order, and a worker compiles
    samplers once. A range run that fails is rerun so that the failure is confined to its partition
    (:meth:`~resources.run.plan.RunPlanner.redo`).

    With ``only_changed`` (the nightly behaviour), only what changed or is stale is redone
    (:func:`resources.run.plan.run_scope`, :func:`_stale`); the lake-wide tables always refresh
    (cheaply: unchanged fits are reused). ``left``: suites and models that lost a partition since their
    outputs were made (``evalpipeline forget``).
    """
    check_run_settings()
    instance = instance or local_instance()
    defs = code_location()
    lake = defs.resources["lake"]
    store = lake.lake()
    _fail_orphaned_runs(instance, echo, store)
    workers = 1 if instance.root_directory is None else max(1, workers)  # an ephemeral instance: this process only
    pool = WorkerPool(workers)
    pool.prepare()  # the workers' imports overlap discovery, on the core it leaves idle
    landing = lake.landing_dir()
    discovery = discover(store, landing, defs.resources["ingest_settings"].options())
    for error in discovery.unreadable:
        echo(printable(f"skipped (unreadable, recorded under file_errors/): {error.error}"))
    stale = _stale(instance, discovery) if only_changed else NO_STALE
    scope = run_scope(discovery, stale, only_changed, left)
    _sync_partitions(instance, store, discovery, echo)
    if only_changed:  # what a killed run was redoing and is current (not rerun): nothing is left to fail
        current = (
            {str(model_suite_key(m, s)) for m, s in discovery.partitions - set(scope.pairs) - set(stale["rejected"])}
            | {to_partition_key(s) for s in discovery.suites - set(scope.suites)}
            | {to_partition_key(m) for m in discovery.models - set(scope.models) - set(scope.profile_only)}
        )
        resolve_up_to_date(
            store, partitions=current, resolved_at=datetime.now(timezone.utc).isoformat(timespec="seconds")
        )
    _echo_scope(echo, discovery, landing, scope, stale)

    planner = RunPlanner(
        instance.get_dynamic_partitions("model"), instance.get_dynamic_partitions("suite"), partitions_per_run, workers
    )
    stages = planner.stages(scope, discovery.changed, stale["pair_assets"], store.failed_validation)
    total = sum(len(stage) for stage in stages)
    failures = 0
    numbers = itertools.count(1)

    def execute(runs: list[Run], count: int, first: int | None = None) -> list[StepOutcome]:
        numbered = [
            (next(numbers) if first is None else first + i, run.job, run.keys, run.label, run.assets)
            for i, run in enumerate(runs)
        ]
        with StageProgress(instance, echo, len(runs)):
            return run_steps(
                numbered,
                count,
                echo,
                pool=pool if workers > 1 else None,
                instance=instance,
                on_lost_workers=lambda: _fail_orphaned_runs(instance, echo, store),
                block=_execute_block,
            )

    reported_not_run: set[str] = set()
    lake_stage = stages[-1]
    try:
        for stage in stages:
            if stage is not stages[0] and stage is not lake_stage:
                stage, left_out = with_data(stage, *_held(store))
                fresh = sorted(set(left_out) - reported_not_run)  # a suite is in two stages: said once
                reported_not_run.update(fresh)
                if fresh:
                    echo(f"not run: {', '.join(fresh)} (no partition's sample table passed validation)")
            if stage is lake_stage and preparation_requests(
                defs.resources["glm_settings"].program_cache(store.root), store.root
            ):
                # a suite fit asked for the sampler of one LLM more (evalpipeline.steps.fits.prepare_requested_samplers):
                # beside the lake-wide tables, the night's last outputs, so that it delays none of them
                stage = [*stage, Run(prepare_samplers.name, None, "warm samplers the suite fits asked for", [], None)]
                total += 1
            outcomes = execute(stage, total)
            # Dagster gates per run: a blocking check or error in one partition of a range run stops the
            # downstream steps of every partition in it. A failed range is rerun so that the failure is
            # confined to its partition; a range that fails again is split again.
            while True:
                failed = [
                    (run, outcome)
                    for run, outcome in zip(stage, outcomes)
                    if not outcome.ok and run.keys and len(run.keys) > 1
                ]
                failures += sum(not outcome.ok for outcome in outcomes) - len(failed)
                if not failed:
                    break
                alone, ranges = [], []
                for run, outcome in failed:
                    singles, rest = planner.redo(run, outcome.failing_partitions, outcome.succeeded_steps)
                    alone += singles
                    ranges += rest
                echo(
                    f"{len(failed)} range run(s) failed: "
                    + (
                        f"rerunning their {len(alone)} partition(s) one run each, so that a failing partition does "
                        "not hold back the others"
                        if not ranges
                        else f"rerunning the {len(alone)} partition(s) their checks or errors failed for one run each "
                        f"({', '.join(run.names[0] for run in alone[:5])}{', ...' if len(alone) > 5 else ''}) and "
                        f"the other {sum(len(r.keys) for r in ranges)} in {len(ranges)} range run(s)"
                    )
                )
                stage = ranges + alone  # the ranges first: the longer runs start first
                outcomes = execute(stage, len(stage), first=1)
    finally:
        pool.shutdown()
    _sync_partitions(instance, store, discovery, echo)  # what this run's ingest retired
    return _echo_results(echo, store, instance, scope, stale, discovery, landing, failures)


#: How often ``evalpipeline run`` says where a stage is while its runs are under way (seconds).
PROGRESS_SECONDS = 15.0


class StageProgress:
    """While a stage's runs are under way, every ``interval`` seconds one line: how many of its runs ended
    and failed so far, and for each run in flight how many partitions its steps have done (the steps'
    progress messages, :func:`assets.batch.partitions_in_turn`). Read from the instance: the runs this host
    started since the stage began."""

    def __init__(
        self, instance: DagsterInstance, echo: Callable[[str], None], total: int, interval: float | None = None
    ):
        self.instance, self.echo, self.total = instance, echo, total
        self.interval = PROGRESS_SECONDS if interval is None else interval
        self.started = datetime.now(timezone.utc)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stage-progress", daemon=True)

    def __enter__(self) -> StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                line = self.line()
            except Exception as exc:  # noqa: BLE001 - a progress line must never stop the runs
                line = f"  ... (progress unavailable: {type(exc).__name__}: {exc})"
            if not self._stop.is_set():
                self.echo(line)

    def line(self) -> str:
        from dagster import DagsterRunStatus, RunsFilter

        runs = self.instance.get_runs(RunsFilter(tags={HOST_TAG: socket.gethostname()}, created_after=self.started))
        ended = [run for run in runs if run.is_finished]
        failed = sum(run.status == DagsterRunStatus.FAILURE for run in ended)
        parts = []
        for run in runs:
            if run.status != DagsterRunStatus.STARTED:
                continue
            steps = {}
            for entry in self.instance.all_logs(run.run_id):
                if entry.step_key and entry.user_message.startswith(PROGRESS_MARK):
                    steps[entry.step_key] = entry.user_message[len(PROGRESS_MARK) :].strip()
            detail = ", ".join(f"{step} {done}" for step, done in steps.items()) or "starting"
            parts.append(f"{run.job_name}: {detail}")
        elapsed = (datetime.now(timezone.utc) - self.started).total_seconds()
        return f"  ... {elapsed:.0f}s: {len(ended)} of {self.total} run(s) ended, {failed} failed" + (
            f"; under way: {'; '.join(parts)}" if parts else ""
        )


def _held(store: Lake) -> tuple[set[str], set[str]]:
    """The suites and models (partition keys) with a sample table that passed validation (the rule
    automation follows, assets.automation.PassedValidation), or with outputs of an earlier night."""
    accepted = [(m, s) for m, s, _path in store.sample_tables()]
    made = lambda table, dimension: {p.name.split("=", 1)[1] for p in (store.root / table).glob(f"{dimension}=*")}  # noqa: E731
    return (
        {to_partition_key(s) for _, s in accepted} | made("suite_leaderboard", "suite"),
        {to_partition_key(m) for m, _ in accepted} | made("model_profile", "model"),
    )


def _echo_scope(echo: Callable[[str], None], discovery, landing: Path, scope, stale: dict) -> None:
    echo(
        f"{discovery.files} source file(s) in {landing}: {len(discovery.partitions)} model x suite partition(s) "
        f"({len(discovery.changed)} new or changed"
        + (f", {len(discovery.lake_only)} held only by the lake" if discovery.lake_only else "")
        + (f", {len(discovery.retiring)} to retire" if discovery.retiring else "")
        + f"), {len(scope.suites)} suite(s)"
    )
    labels = {"pairs": "model x suite partition(s)", "suites": "suite(s)", "models": "model(s)"}
    if any(stale[k] for k in labels):
        echo(
            "to redo as well (an output missing, or made by other code or settings): "
            + ", ".join(f"{len(stale[k])} {label}" for k, label in labels.items() if stale[k])
        )
    if stale["rejected"]:
        shown = [printable(f"{m} x {s} ({', '.join(checks)})") for (m, s), checks in sorted(stale["rejected"].items())]
        echo(
            f"not rerun: {len(shown)} model x suite partition(s) whose sample table failed blocking checks, with "
            f"logs unchanged since (fix or replace the log, or `evalpipeline forget` one you removed; the failure "
            f"stays in run_status/): " + ", ".join(shown[:10]) + (", ..." if len(shown) > 10 else "")
        )


def _echo_results(
    echo: Callable[[str], None],
    store: Lake,
    instance: DagsterInstance,
    scope,
    stale: dict,
    discovery,
    landing: Path,
    failures: int,
) -> int:
    """Print the leaderboards, where the outputs are, and why the exit code is what it is; return it."""
    for suite in scope.suites:
        path = leaderboard_path(store, suite)
        if path.exists():
            echo(f"\nsuite {printable(suite)}: models ranked by posterior mean success rate")
            echo(format_leaderboard(pd.read_parquet(path), LEADERBOARD_LINES, rest=f"every model in {path}"))
    folders = [
        "samples",
        "quarantine",
        "accuracy_posteriors",
        "glm_fits",
        "glm_suite_fits",
        "reliability",
        "model_reliability",
        "suite_leaderboard",
        "suite_comparison",
        "model_profile",
        "waic_rankings",
        "ingest_accounting",
        "run_status",
    ]
    echo(
        f"\noutputs in {store.root.resolve()}: "
        + ", ".join(f"{name}/" for name in folders if (store.root / name).exists())
    )
    report_page = store.root / "report" / "index.html"
    if report_page.exists():
        echo(f"report: {report_page.resolve()}")
    echo(f"Dagster instance: {instance.root_directory} (browse with `make ui`)")
    if stale["rejected"]:
        echo(
            f"exit 1: {len(stale['rejected'])} model x suite partition(s) not rerun, their sample tables rejected "
            "(the not rerun line above)"
        )
    if discovery.unreadable:  # as a rejected partition: data held back, every night until the file is fixed
        echo(
            f"exit 1: {len(discovery.unreadable)} unreadable log(s) in {landing} (the skipped lines above; "
            "recorded under file_errors/): fix, replace or remove them"
        )
    return 1 if failures or stale["rejected"] or discovery.unreadable else 0


# The CLI prints one progress line per run; Dagster's per-event console log stays in the instance
# (EVALPIPELINE_LOG_LEVEL=INFO shows it, e.g. each fit's progress).
def _console_config() -> dict:
    raw = os.environ.get(LOG_LEVEL_ENV, "")
    level = raw.strip().upper() or "WARNING"
    if level not in LOG_LEVELS:
        raise ValueError(f"{LOG_LEVEL_ENV}={raw!r} is not a log level; choose one of {', '.join(LOG_LEVELS)}")
    return {"loggers": {"console": {"config": {"log_level": level}}}}


def check_run_settings() -> None:
    """Raise ValueError, naming the setting, for a bad one that runs read only as they execute
    (the console log level, the compilation cache bound) or that would quietly find nothing (a
    landing folder that does not exist): before any work, not in every step. The default landing
    folder is relative: a cron job started in another folder found no log and exited 0."""
    _console_config()
    code_location().resources["glm_settings"].cache_max_bytes()
    check_config()  # a misspelt table or prior fails here, not in every partition's step
    _check_folders()
    landing = code_location().resources["lake"].landing_dir()
    if os.environ.get(LANDING_ENV, "").strip() and not landing.is_dir():
        raise ValueError(
            f"{LANDING_ENV}={os.environ[LANDING_ENV]!r}: {landing} is not a folder (a typo, or a "
            "volume not mounted?); unset it for the default, data/inspect_logs"
        )
    if not landing.is_dir():
        raise ValueError(
            f"the landing folder {landing} (the default, relative to {Path.cwd()}) is not a folder: run "
            f"from the repository root or set {LANDING_ENV} (to an empty folder when every log comes "
            "through `evalpipeline ingest`)"
        )
    overlap = landing_overlaps_lake(landing, code_location().resources["lake"].lake().root)
    if overlap:
        raise ValueError(f"{overlap}; set {LANDING_ENV} (or {LAKE_ENV}) so that neither holds the other")


def _check_folders() -> None:
    """The JAX compilation cache and the Dagster home must be folders, or ones that can be made: a file
    at the cache failed every fit step with a FileExistsError that named no setting (after its retries:
    an OSError looks transient), and one at DAGSTER_HOME the run with a traceback."""
    settings = code_location().resources["glm_settings"]
    home = os.environ.get("DAGSTER_HOME")
    folders = [
        (
            Path(home or DEFAULT_DAGSTER_HOME),
            f"DAGSTER_HOME={home!r}" if home else "the Dagster home (the default; set DAGSTER_HOME)",
        )
    ]
    if settings.compilation_cache_dir or os.environ.get(CACHE_DIR_ENV):  # the default is under the lake, checked as it
        folders.append(
            (
                settings.cache_dir(lake_root()),
                "compilation_cache_dir"
                if settings.compilation_cache_dir
                else f"{CACHE_DIR_ENV}={os.environ[CACHE_DIR_ENV]!r}",
            )
        )
    for path, label in folders:
        path = path.resolve()
        existing = next(p for p in (path, *path.parents) if p.exists())  # nothing is made here
        if not existing.is_dir():
            raise ValueError(f"{label}: {existing} is not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{label}: {existing} is not writable")


def executor_note(choice: str | None) -> str | None:
    """What `evalpipeline run` (which sets ``$EVALPIPELINE_EXECUTOR`` aside) says about the executor
    the variable names: nothing when unset or the default; else that it applies to the runs the
    daemon and the UI start, and, when those could not load it, why."""
    value = (choice or "").strip().lower()
    if value in ("", "multiprocess"):
        return None
    note = (
        f"note: {EXECUTOR_ENV}={value} selects the executor of runs that the daemon, the UI or `dagster job "
        "launch` start; `evalpipeline run` executes its runs in this process and its --workers"
    )
    try:
        configured_executor({**os.environ, EXECUTOR_ENV: value})
    except ValueError as exc:
        note += f". As set, the code location will not load for those: {exc}"
    return note


def local_instance() -> DagsterInstance:
    """The persistent local instance: ``$DAGSTER_HOME``, else ``dagster_home`` here (SQLite). ValueError
    naming the variable for a home that is not a folder or a ``dagster.yaml`` Dagster refuses (a raw
    FileExistsError or config error from inside Dagster otherwise)."""
    raw = os.environ.get("DAGSTER_HOME")
    home = Path(raw or DEFAULT_DAGSTER_HOME).resolve()
    label = f"DAGSTER_HOME={raw!r}" if raw else f"the Dagster home {home} (the default; set DAGSTER_HOME)"
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{label}: {home} is not a folder and cannot be made one ({exc.strerror or exc})") from None
    try:
        return DagsterInstance.from_config(str(home))
    except Exception as exc:  # noqa: BLE001 - not YAML, or not Dagster's schema: Dagster's own message, named
        where = f"{home / 'dagster.yaml'}: " if (home / "dagster.yaml").exists() else ""
        raise ValueError(f"{label}: {where}{type(exc).__name__}: {exc}") from None


def _stale(instance: DagsterInstance, discovery, partition_assets=None) -> dict:
    """What the nightly run must redo besides new logs, as the schedule decides it: the partitions,
    suites and models one of whose assets has no materialisation yet (a failure, say), was last
    materialised under another code version (edited code, priors, score map, taxonomy), is older
    than one of its inputs, or (eval_samples) recorded other files than the lake holds: the last
    two are what a killed run leaves. Only what new or changed logs do not bring in already, and
    not a partition whose sample table failed a blocking check, unchanged since
    (:func:`~assets.schedules.rejected_and_unchanged`).

    ``pairs``, ``suites`` and ``models`` are sets of names; ``pair_assets`` maps each stale pair
    to the set of its assets (``AssetKey``) that are stale; ``rejected`` each pair left so to the
    checks its table failed, and ``rejected_models`` names the models all of whose pairs are."""
    partition_assets = partition_assets or PARTITION_ASSETS
    store = code_location().resources["lake"].lake()
    inputs = input_partitions([*partition_assets, *SUITE_ASSETS, *MODEL_ASSETS], discovery.partitions)

    def stale_assets(assets_defs, names: dict[str, object], **checks) -> dict:
        code_versions: dict = {}
        for assets_def in assets_defs:
            code_versions.update(assets_def.code_versions_by_key)
        reasons = stale_partitions(instance, code_versions, list(names), inputs=inputs, **checks)
        return {names[key]: set(why) for key, why in reasons.items()}

    def stale_names(assets_defs, names: dict[str, object]) -> set:
        return set(stale_assets(assets_defs, names))

    pairs = {str(model_suite_key(m, s)): (m, s) for m, s in discovery.partitions}
    pair_assets = {
        pair: keys
        for pair, keys in stale_assets(
            partition_assets, pairs, files_states=current_files_states(store, discovery.partitions)
        ).items()
        if pair not in discovery.changed
    }
    rejected = {pair: store.failed_validation(*pair) for pair in pair_assets}
    rejected = {
        pair: checks for pair, checks in rejected.items() if rejected_and_unchanged(False, pair_assets[pair], checks)
    }
    pair_assets = {pair: keys for pair, keys in pair_assets.items() if pair not in rejected}
    # a model or suite whose every partition is so has no data: its outputs stay missing, not failing nightly
    only_rejected = [{p[i] for p in rejected} - {p[i] for p in discovery.partitions - set(rejected)} for i in (0, 1)]
    return {
        "pairs": set(pair_assets),
        "pair_assets": pair_assets,
        "rejected": rejected,
        "rejected_models": only_rejected[0],
        "suites": stale_names(SUITE_ASSETS, {to_partition_key(s): s for s in discovery.suites})
        - {s for _, s in discovery.changed}
        - only_rejected[1],
        "models": stale_names(MODEL_ASSETS, {to_partition_key(m): m for m in discovery.models})
        - {m for m, _ in discovery.changed}
        - only_rejected[0],
    }


_worker_instances: dict[str, DagsterInstance] = {}


def _execute_block(
    job_name: str,
    keys: list[str] | None,
    instance_root: str | None = None,
    assets: tuple[str, ...] | None = None,
    *,
    instance: DagsterInstance | None = None,
) -> StepOutcome:
    """Execute one run of ``job_name`` over ``keys`` (a partition, a range, or None for the
    unpartitioned lake job) in this process, materialising ``assets`` (asset key strings) or, when
    None, every asset of the job. Runs in a worker process too: there the instance is opened from
    ``instance_root``, once per worker."""
    if instance is None:
        instance = _worker_instances.get(instance_root)
        if instance is None:
            instance = _worker_instances[instance_root] = DagsterInstance.from_config(instance_root)
    started = time.perf_counter()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    partition_key = None
    if keys and len(keys) == 1:
        partition_key = keys[0]
    elif keys:  # a range run: the assets compute every partition of context.partition_keys
        tags |= {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
    result = (
        code_location()
        .resolve_job_def(job_name)
        .execute_in_process(
            instance=instance,
            partition_key=partition_key,
            raise_on_error=False,
            run_config=_console_config(),
            tags=tags,
            asset_selection=[AssetKey.from_user_string(a) for a in assets] if assets else None,
        )
    )
    lines: list[str] = []
    failing, succeeded_steps = None, ()
    if not result.success:
        if keys and len(keys) > 1:
            failing = failing_partitions(
                step_failures([e for e in result.all_events if e.is_step_failure], ""),
                [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"],
            )
        succeeded_steps = tuple(sorted({e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}))
        # A failed range run is rerun one partition per run (run_main_job), and those runs record what
        # still fails: a record of the range would list partitions that then refreshed as failed.
        _report_failure(
            code_location().resources["lake"].lake(),
            result,
            job_name,
            ",".join(keys or []),
            lines.append,
            record=not (keys and len(keys) > 1),
        )
    else:  # what failed before for these partitions has refreshed: the failure table says so
        resolved = [*(keys or [""]), *([f"{keys[0]}..{keys[-1]}"] if keys and len(keys) > 1 else [])]
        resolve_failures(
            code_location().resources["lake"].lake(),
            job=job_name,
            partitions=resolved,
            assets=materialised_assets(result.all_events),
            run_id=result.run_id,
            resolved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
    return StepOutcome(result.success, time.perf_counter() - started, lines, failing, succeeded_steps)


def _fail_orphaned_runs(instance: DagsterInstance, echo: Callable[[str], None], store: Lake) -> None:
    """Mark runs of a dead `evalpipeline run` process (or worker) on this host failed, record them in
    the lake's run status table and free their concurrency slots, so that a killed run neither
    blocks the fit pool nor shows as running, and the morning's failure table lists it."""
    from dagster import DagsterRunStatus, RunsFilter

    host = socket.gethostname()
    active = instance.get_runs(
        RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING], tags={HOST_TAG: host})
    )
    for run in active:
        pid = int(run.tags.get(PID_TAG, "0") or 0)
        if pid and not process_alive(pid):
            message = f"the process running it (pid {pid}) is gone: killed or crashed"
            instance.report_run_failed(run, message)
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            record_run_failure(
                store,
                run_id=run.run_id,
                job=run.job_name,
                partition=_run_partition_keys(run, instance),
                failures=[StepFailure(RUN_ASSET, "", "ProcessDied", message)],
                failed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
            echo(f"marked run {run.run_id} failed: its process {pid} died")


def _run_partition_keys(run, instance: DagsterInstance) -> str | list[str]:
    """A run's partition as the failure table writes it, and for a range run the list of its partitions
    (so that each row is resolved when its partition is redone or found current); the range
    "first..last" when its job has no partitions or the keys cannot be listed."""
    keys = range_partition_keys(run.tags, run_partitions_def(code_location().get_repository_def(), run), instance)
    return keys or run_partitions(run.tags)


def _report_failure(
    store: Lake, result, job_name: str, partition: str, echo: Callable[[str], None], *, record: bool = True
) -> None:
    """Print why a run failed and (``record``) record it in the lake's run status table, one row per
    failed step, as the failure sensor does for runs the daemon launches (a failed blocking check fails
    its step, whose error names the check: it is not recorded a second time)."""
    checks = [
        event.event_specific_data for event in result.all_events if event.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    for evaluation in checks:
        if not evaluation.passed and evaluation.severity.value == "WARN":
            echo(f"    check warned (does not block): {evaluation.asset_key.to_user_string()}:{evaluation.check_name}")
    for line in failed_check_details(checks):
        echo(printable(f"    check failed: {line}"))
    failed = []
    for event in result.all_events:
        if event.is_step_failure:
            failed += step_failures([event], "", checks)
            # the checks were printed above: the step's error names them again, with what they saw
            echo(printable(f"    {event.step_key}: {failed[-1].error_type}: {failed[-1].message.split(' | ')[0]}"))
    if not record:
        return
    record_run_failure(
        store,
        run_id=result.run_id,
        job=job_name,
        partition=partition,
        failures=failed or step_failures([], "run failed"),
        failed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _sync_partitions(instance: DagsterInstance, store: Lake, discovery, echo: Callable[[str], None]) -> None:
    for dimension, keys in sync_dynamic_partitions(instance, store, discovery).items():
        if keys:
            echo(
                f"{dimension}(s) no log or lake table holds any more, unregistered from the Dagster instance: "
                + ", ".join(printable(from_partition_key(k)) for k in keys)
            )
