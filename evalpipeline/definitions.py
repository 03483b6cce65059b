"""The composition root: the one module of evalpipeline that imports Dagster.

``defs`` is what ``dagster dev -w workspace.yaml`` loads; ``run_main_job``
is what ``evalpipeline run`` calls: it materialises the whole graph for the
logs in the landing folder against a persistent local Dagster instance, so
that ``make ui`` shows the same runs and materialisations afterwards.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import socket
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd
from dagster import (
    AssetKey,
    AssetSelection,
    AutomationConditionSensorDefinition,
    DagsterInstance,
    DefaultSensorStatus,
    Definitions,
    MultiPartitionKey,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster._utils.warnings import BetaWarning

from assets.accounting import ingest_accounting
from assets.compare import model_profile, report, suite_comparison
from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS, waic_rankings
from assets.jobs import (
    JOB_STEPS,
    comparison_job,
    ingest_and_fit_job,
    lake_job,
    model_job,
    model_profile_job,
    suite_job,
)
from assets.partitions import PARTITIONS_PER_RUN, key_blocks, model_suite_key, model_suite_partitions, range_blocks
from assets.plots import partition_plots, suite_fit_plots
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.reliability import model_reliability, reliability
from assets.samples import eval_samples
from assets.schedules import (
    build_nightly_schedule,
    current_files_states,
    input_partitions,
    partition_run_selection,
    rejected_and_unchanged,
    stale_partitions,
    sync_dynamic_partitions,
)
from assets.redo import rerun_rest_of_failed_ranges
from assets.samplers import prepare_samplers, sampler_requests
from assets.sensors import landing_sensor
from assets.status import (  # HOST_TAG, PID_TAG: a later run tells that such a run's process died
    HOST_TAG,
    PID_TAG,
    failed_check_details,
    failing_partitions,
    materialised_assets,
    range_partition_keys,
    record_run_failures,
    resolve_run_failures,
    run_partitions,
    run_partitions_def,
    step_failures,
)
from evalpipeline.config import LAKE_ENV, LANDING_ENV, lake_root, landing_overlaps_lake
from evalpipeline.lake.keys import from_partition_key, printable, to_partition_key
from evalpipeline.lake import Lake, process_alive
from evalpipeline.models.fit import preparation_requests
from evalpipeline.steps.samples import leaderboard_path
from evalpipeline.report.terminal import format_leaderboard
from evalpipeline.steps.discovery import discover
from evalpipeline.settings import check_config
from evalpipeline.steps.run_status import RUN_ASSET, StepFailure, record_run_failure, resolve_failures, resolve_up_to_date
from resources import IngestSettings, LakeResource, PosteriorSettings
from resources.executors import EXECUTOR_ENV, STEP_PRELOAD_MODULES, configured_executor, limit_step_threads
from resources.fit import CACHE_DIR_ENV, GlmSettings

# before any step process starts (and before JAX initialises here): one core per fitting step
limit_step_threads()

DEFAULT_DAGSTER_HOME = "dagster_home"
LOG_LEVEL_ENV = "EVALPIPELINE_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    defs.resources["glm_settings"].cache_max_bytes()
    check_config()  # a misspelt table or prior fails here, not in every partition's step
    _check_folders()
    landing = defs.resources["lake"].landing_dir()
    if os.environ.get(LANDING_ENV, "").strip() and not landing.is_dir():
        raise ValueError(f"{LANDING_ENV}={os.environ[LANDING_ENV]!r}: {landing} is not a folder (a typo, or a "
                         "volume not mounted?); unset it for the default, data/inspect_logs")
    if not landing.is_dir():
        raise ValueError(f"the landing folder {landing} (the default, relative to {Path.cwd()}) is not a folder: run "
                         f"from the repository root or set {LANDING_ENV} (to an empty folder when every log comes "
                         "through `evalpipeline ingest`)")
    overlap = landing_overlaps_lake(landing, defs.resources["lake"].lake().root)
    if overlap:
        raise ValueError(f"{overlap}; set {LANDING_ENV} (or {LAKE_ENV}) so that neither holds the other")


def _check_folders() -> None:
    """The JAX compilation cache and the Dagster home must be folders, or ones that can be made: a file
    at the cache failed every fit step with a FileExistsError that named no setting (after its retries:
    an OSError looks transient), and one at DAGSTER_HOME the run with a traceback."""
    settings = defs.resources["glm_settings"]
    home = os.environ.get("DAGSTER_HOME")
    folders = [(Path(home or DEFAULT_DAGSTER_HOME),
                f"DAGSTER_HOME={home!r}" if home else "the Dagster home (the default; set DAGSTER_HOME)")]
    if settings.compilation_cache_dir or os.environ.get(CACHE_DIR_ENV):  # the default is under the lake, checked as it
        folders.append((settings.cache_dir(lake_root()), "compilation_cache_dir" if settings.compilation_cache_dir
                        else f"{CACHE_DIR_ENV}={os.environ[CACHE_DIR_ENV]!r}"))
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
    note = (f"note: {EXECUTOR_ENV}={value} selects the executor of runs that the daemon, the UI or `dagster job "
            "launch` start; `evalpipeline run` executes its runs in this process and its --workers")
    try:
        configured_executor({**os.environ, EXECUTOR_ENV: value})
    except ValueError as exc:
        note += f". As set, the code location will not load for those: {exc}"
    return note


#: model x suite assets: what one ingest-and-fit run materialises for one partition
PARTITION_ASSETS = [eval_samples, accuracy_posteriors, reliability, *PARTITION_GLM_ASSETS]
#: per-suite assets
SUITE_ASSETS = [suite_leaderboard, *SUITE_GLM_ASSETS, suite_comparison]
#: per-model assets
MODEL_ASSETS = [model_reliability, model_profile]
#: lake-wide assets
LAKE_ASSETS = [ingest_accounting, waic_rankings, report]
#: assets no job, schedule or automation materialises: drawn when somebody asks, from the UI
ON_REQUEST_ASSETS = [partition_plots, suite_fit_plots]

#: Evaluates the assets' automation conditions (downstream refreshes) every 30 s while the daemon runs,
#: on the code server: assets.automation.PassedValidation reads the lake (a beta parameter in Dagster 1.13,
#: which would warn in every command that loads the code location).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Parameter `use_user_code_server`", category=BetaWarning)
    automation_sensor = AutomationConditionSensorDefinition(
        "refresh_downstream",
        target=AssetSelection.all(),
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        use_user_code_server=True,
        description="Refreshes per-suite, per-model and lake-wide assets when the data they read changed.",
    )

# Dagster 1.13 passes owners=None when it binds a sensor to its job while resolving the repository, and
# warns that the (unused) parameter is beta in every command that loads the code location
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`",
                        category=BetaWarning)

# A misspelt table or key of the configuration file is the code location's load error under the daemon and
# the UI, as a bad cron or executor is: otherwise only `evalpipeline run` refused it, and the daemon's runs
# quietly used the defaults of the table it was meant for.
check_config()

defs = Definitions(
    assets=[*PARTITION_ASSETS, *SUITE_ASSETS, *MODEL_ASSETS, *LAKE_ASSETS, *ON_REQUEST_ASSETS],
    jobs=[ingest_and_fit_job, suite_job, comparison_job, model_job, model_profile_job, lake_job, prepare_samplers],
    schedules=[build_nightly_schedule(ingest_and_fit_job, PARTITION_ASSETS)],
    sensors=[landing_sensor, record_run_failures, resolve_run_failures, rerun_rest_of_failed_ranges, automation_sensor,
             sampler_requests],
    resources={
        "lake": LakeResource(),
        "ingest_settings": IngestSettings(),
        "posterior_settings": PosteriorSettings(),
        "glm_settings": GlmSettings(),
    },
    executor=configured_executor(),
)


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


#: Partitions a run of `evalpipeline run` covers at most (assets.partitions.PARTITIONS_PER_RUN).
DEFAULT_PARTITIONS_PER_RUN = PARTITIONS_PER_RUN

#: What a model's whole analysis (its reliability across suites, then its profile) costs in profiles
#: alone: a new-model night at 102 models took 2.0-2.4 s for the new model's run, 0.057-0.065 s a profile.
MODEL_ANALYSIS_IN_PROFILES = 35


def profile_shares(model_runs: list[int], profiles: int, workers: int,
                   weight: float = MODEL_ANALYSIS_IN_PROFILES) -> list[int]:
    """How many of ``profiles`` profile-only models each worker should take (largest share first, no
    zero shares) so that the workers end the model stage together: the pool hands the model runs
    (``model_runs``: their sizes in models, each costing ``weight`` profiles a model) out first, each to
    the first free worker, then the profile runs in this order. An even split left a new-model night's
    worker with the new model's run and half the profiles, its sibling idle for a third of the stage."""
    if profiles <= 0:
        return []
    loads = [0.0] * max(1, workers)
    for size in model_runs:
        loads[loads.index(min(loads))] += size * weight
    target = (sum(loads) + profiles) / len(loads)
    wants = sorted((max(0.0, target - load) for load in loads), reverse=True)
    shares = [int(profiles * want / sum(wants)) for want in wants]
    for i in range(profiles - sum(shares)):  # what rounding down left, to the largest shares first
        shares[i % len(shares)] += 1
    return [share for share in shares if share]


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
    model x suite partitions (ingest, conjugate posteriors, GLM fits, reliability), the suites
    (leaderboard, GLMs), the suites' comparisons (a run of their own, so that a suite GLM failing
    its blocking checks is excluded from them rather than skipping them), the models, then the
    lake-wide tables. When a suite fit asked for the warm sampler of one LLM more to be compiled
    ahead (evalpipeline.steps.fits.prepare_requested_samplers), ``prepare_samplers`` runs beside the
    lake-wide tables, after every other output is written. Returns 0 when every run succeeded (and,
    with ``only_changed``, no partition is left rejected by its blocking checks), 1 otherwise.

    Each stage runs its partitions in batches: one Dagster run per range of up to
    ``partitions_per_run`` adjacent partitions (see ``assets/batch.py``), so the cost of a
    run is paid once per batch, not once per partition. With ``workers`` > 1 (and a
    persistent instance), a stage's runs are split into at least ``workers`` batches and
    executed side by side in that many worker processes, one run each at a time: the stages
    stay in order, and a worker compiles samplers once. The workers fork from a server that
    imports the code location while this process discovers the landing folder (:class:`WorkerPool`).

    With ``only_changed`` (the nightly behaviour), partitions whose sources the lake already
    holds are not rerun unless one of their assets is stale as the nightly schedule judges it
    (no materialisation yet, or one under another code version: edited code, priors, score map),
    nor are the suites none of the rerun partitions feed and that are not stale themselves, nor
    the models evaluated on none of those suites and not stale. Of the models that are, those
    without a rerun partition refresh only their profile (their suites' ranks moved; their
    reliability has no new input), so a new model does not rematerialise every model's
    reliability. The lake-wide tables always refresh (cheaply: unchanged fits are reused).
    ``left``: suites and models that lost a partition since their outputs were made (``evalpipeline
    forget``), redone by an ``only_changed`` run as those a retired partition leaves are.
    """
    check_run_settings()
    instance = instance or local_instance()
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
    stale = (_stale(instance, discovery) if only_changed
             else {"pairs": set(), "suites": set(), "models": set(), "pair_assets": {}, "rejected": {},
                   "rejected_models": set()})
    pairs = sorted(discovery.changed | stale["pairs"] if only_changed else discovery.partitions)
    # only the suites the rerun partitions feed, and the models on those suites (a new model moves every
    # rank and P(best) on its suites); all of them on a full run
    # a partition the ingest retires (its log now names another model or suite) leaves its suite and
    # model, where they have other partitions, with one model or suite fewer to compare
    retired_from = (({s for _, s in discovery.retiring} | left[0]) & discovery.suites,
                    ({m for m, _ in discovery.retiring} | left[1]) & discovery.models)
    suites = sorted({s for _, s in pairs} | stale["suites"] | retired_from[0] if only_changed else discovery.suites)
    models = sorted(({m for m, s in discovery.partitions if s in suites} - stale["rejected_models"])
                    | stale["models"] | retired_from[1] if only_changed else discovery.models)
    # a model with a rerun partition gets the whole model stage; the others on those suites their profile only
    profile_only = (sorted(set(models) - {m for m, _ in pairs} - stale["models"] - retired_from[1])
                    if only_changed else [])
    models = [m for m in models if m not in profile_only]
    _sync_partitions(instance, store, discovery, echo)
    if only_changed:  # what a killed run was redoing and is current (not rerun): nothing is left to fail
        current = ({str(model_suite_key(m, s)) for m, s in discovery.partitions - set(pairs) - set(stale["rejected"])}
                   | {to_partition_key(s) for s in discovery.suites - set(suites)}
                   | {to_partition_key(m) for m in discovery.models - set(models) - set(profile_only)})
        resolve_up_to_date(store, partitions=current, resolved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    echo(
        f"{discovery.files} source file(s) in {landing}: {len(discovery.partitions)} model x suite partition(s) "
        f"({len(discovery.changed)} new or changed"
        + (f", {len(discovery.lake_only)} held only by the lake" if discovery.lake_only else "")
        + (f", {len(discovery.retiring)} to retire" if discovery.retiring else "") + f"), {len(suites)} suite(s)"
    )
    labels = {"pairs": "model x suite partition(s)", "suites": "suite(s)", "models": "model(s)"}
    if any(stale[k] for k in labels):
        echo("to redo as well (an output missing, or made by other code or settings): "
             + ", ".join(f"{len(stale[k])} {label}" for k, label in labels.items() if stale[k]))
    if stale["rejected"]:
        shown = [printable(f"{m} x {s} ({', '.join(checks)})") for (m, s), checks in sorted(stale["rejected"].items())]
        echo(f"not rerun: {len(shown)} model x suite partition(s) whose sample table failed blocking checks, with "
             f"logs unchanged since (fix or replace the log, or `evalpipeline forget` one you removed; the failure "
             f"stays in run_status/): "
             + ", ".join(shown[:10]) + (", ..." if len(shown) > 10 else ""))

    model_order, suite_order = instance.get_dynamic_partitions("model"), instance.get_dynamic_partitions("suite")
    def per_run(count: int) -> int:
        # with several workers, split a stage so that each has a share to run
        return max(1, min(partitions_per_run, -(-count // workers)))

    pair_name = lambda p: printable(f"{from_partition_key(p[0])} x {from_partition_key(p[1])}")  # noqa: E731
    suite_name = lambda k: printable(f"suite {from_partition_key(k)}")  # noqa: E731
    model_name = lambda k: printable(f"model {from_partition_key(k)}")  # noqa: E731
    names_of = {job.name: name for job, name in ((suite_job, suite_name), (comparison_job, suite_name),
                                                 (model_job, model_name), (model_profile_job, model_name))}
    orders = {suite_job.name: suite_order, comparison_job.name: suite_order,
              model_job.name: model_order, model_profile_job.name: model_order}

    def keyed_runs(job_name: str, keys: list[str], per: int, selection: tuple[str, ...] | None = None) -> list[tuple]:
        name = names_of[job_name]
        return [(job_name, block, _label(block, name) + _selected(selection), [name(k) for k in block], selection)
                for block in key_blocks(keys, orders[job_name], per)]

    def pair_runs(pairs_: list[tuple[str, str]], selection: tuple[str, ...] | None, per: int) -> list[tuple]:
        return [(ingest_and_fit_job.name, [str(MultiPartitionKey({"model": m, "suite": s})) for m, s in block],
                 _label(block, pair_name) + _selected(selection), [pair_name(p) for p in block], selection)
                for block in range_blocks(pairs_, model_order, suite_order, per)]

    def runs_of(job_name: str, keys: list[str], selection: tuple[str, ...] | None, per: int) -> list[tuple]:
        """Runs of ``job_name`` covering partition ``keys`` in ranges of at most ``per`` partitions."""
        if job_name == ingest_and_fit_job.name:
            dimensions = [model_suite_partitions.get_partition_key_from_str(k).keys_by_dimension for k in keys]
            return pair_runs([(d["model"], d["suite"]) for d in dimensions], selection, per)
        return keyed_runs(job_name, keys, per, selection)

    # A partition whose logs are unchanged reruns only its stale assets (edited GLM code refits the
    # GLMs without reading and validating the logs again): one group of range runs per selection.
    selections: dict[tuple[str, ...] | None, list[tuple[str, str]]] = {}
    for pair in pairs:
        selection = partition_run_selection(pair in discovery.changed, stale["pair_assets"].get(pair, set()),
                                            store.failed_validation(*pair))
        key = None if selection is None else tuple(k.to_user_string() for k in selection)
        selections.setdefault(key, []).append((to_partition_key(pair[0]), to_partition_key(pair[1])))
    partition_runs = []
    for selection, keys in sorted(selections.items(), key=lambda item: item[0] or ()):
        partition_runs += pair_runs(keys, selection, per_run(len(pairs)))
    suite_keys, model_keys = [to_partition_key(s) for s in suites], [to_partition_key(m) for m in models]
    profile_keys = [to_partition_key(m) for m in profile_only]

    model_runs = keyed_runs(model_job.name, model_keys, per_run(len(model_keys)))
    if workers > 1 and model_runs and profile_keys:  # sized so that the workers end the stage together
        ordered = [key for key in model_order if key in set(profile_keys)]
        shares = profile_shares([len(run[1]) for run in model_runs], len(ordered), workers)
        starts = [sum(shares[:i]) for i in range(len(shares))]
        # a share above the run size in equal runs (60 + 3 left a run's cost for 3 profiles), the largest first
        profile_runs = sorted((run for start, share in zip(starts, shares)
                               for run in keyed_runs(model_profile_job.name, ordered[start:start + share],
                                                     -(-share // -(-share // partitions_per_run)))),
                              key=lambda run: -len(run[1]))
    else:
        profile_runs = keyed_runs(model_profile_job.name, profile_keys, per_run(len(profile_keys)))
    stages = [
        partition_runs,
        keyed_runs(suite_job.name, suite_keys, per_run(len(suite_keys))),
        keyed_runs(comparison_job.name, suite_keys, per_run(len(suite_keys))),
        model_runs + profile_runs,
        [(lake_job.name, None, "lake-wide tables", [], None)],
    ]
    total = sum(len(stage) for stage in stages)
    failures = 0
    numbers = itertools.count(1)

    def execute(steps: list, count: int) -> list[StepOutcome]:
        return _run_steps(steps, count, echo, pool=pool if workers > 1 else None, instance=instance,
                          on_lost_workers=lambda: _fail_orphaned_runs(instance, echo, store))

    def single(job_name: str, key: str, name: str, assets) -> tuple:
        return (job_name, [key], name + _selected(assets), [name], assets)

    def redo(step: tuple, outcome: StepOutcome) -> tuple[list, list]:
        """The runs that redo a failed range run, for the steps that did not succeed (a step that did
        succeeded for every partition): (the partitions its failures are pinned to, one run each; the
        others in ranges again), or every partition one run each when the failures are not pinned to
        partitions (an error in a step's code, say)."""
        job_name, keys, _label_, names, assets = step
        unfinished = tuple(a for a in (assets or JOB_STEPS[job_name]) if a not in outcome.succeeded_steps)
        if not unfinished or set(unfinished) == set(JOB_STEPS[job_name]):
            unfinished = assets
        failing = outcome.failing_partitions
        if not failing or not set(failing) <= set(keys):
            return [single(job_name, key, name, unfinished) for key, name in zip(keys, names)], []
        rest = [key for key in keys if key not in failing]
        return ([single(job_name, key, name, unfinished) for key, name in zip(keys, names) if key in failing],
                runs_of(job_name, rest, unfinished, per_run(len(rest))) if rest else [])

    def with_data(stage: list) -> list:
        """``stage`` without the suites and models none of whose partitions has a sample table that
        passed validation (a new model whose only log was cancelled, say): their steps would fail
        with 'no sample tables' beside the partition's own failure, which says what is wrong. One with
        outputs of an earlier night is run all the same: its step fails, so that those outputs (made
        from rows a rejected table has since superseded) are not shown as current."""
        accepted = [(m, s) for m, s, _path in store.sample_tables()]  # the rule automation follows (PassedValidation)
        made = lambda table, dimension: {p.name.split("=", 1)[1] for p in (store.root / table).glob(f"{dimension}=*")}  # noqa: E731
        suites_held = {to_partition_key(s) for _, s in accepted} | made("suite_leaderboard", "suite")
        models_held = {to_partition_key(m) for m, _ in accepted} | made("model_profile", "model")
        held_by_job = {suite_job.name: suites_held, comparison_job.name: suites_held,
                       model_job.name: models_held, model_profile_job.name: models_held}
        kept, left_out = [], []
        for job_name, keys, label, names, assets in stage:
            held = held_by_job.get(job_name)
            if held is None or set(keys) <= held:
                kept.append((job_name, keys, label, names, assets))
                continue
            block = [(k, n) for k, n in zip(keys, names) if k in held]
            left_out += [n for k, n in zip(keys, names) if k not in held]
            if block:
                kept.append((job_name, [k for k, _ in block], _label([k for k, _ in block], names_of[job_name])
                             + _selected(assets), [n for _, n in block], assets))
        fresh = sorted(set(left_out) - reported_not_run)  # a suite is in two stages: said once
        reported_not_run.update(fresh)
        if fresh:
            echo(f"not run: {', '.join(fresh)} (no partition's sample table passed validation)")
        return kept

    reported_not_run: set[str] = set()

    lake_stage = stages[-1]
    try:
        for stage in stages:
            if stage is not stages[0] and stage is not lake_stage:
                stage = with_data(stage)
            if stage is lake_stage and preparation_requests(defs.resources["glm_settings"].program_cache(store.root),
                                                            store.root):
                # a suite fit asked for the sampler of one LLM more (evalpipeline.steps.fits.prepare_requested_samplers):
                # beside the lake-wide tables, the night's last outputs, so that it delays none of them
                stage = [*stage, (prepare_samplers.name, None, "warm samplers the suite fits asked for", [], None)]
                total += 1
            numbered = [(next(numbers), job_name, keys, label, assets) for job_name, keys, label, _names, assets in stage]
            outcomes = execute(numbered, total)
            # Dagster gates per run: a blocking check or error in one partition of a range run stops the
            # downstream steps of every partition in it. A failed range is rerun so that the failure is
            # confined to its partition: the partitions its failed checks or errors name one run each, the others
            # in ranges again for the steps that did not succeed (stored fits and tables are reused); every
            # partition one run each when nothing names the partitions. A range that fails again is split again.
            while True:
                failed = [(step, outcome) for step, outcome in zip(stage, outcomes)
                          if not outcome.ok and step[1] and len(step[1]) > 1]
                failures += sum(not outcome.ok for outcome in outcomes) - len(failed)
                if not failed:
                    break
                alone, ranges = [], []
                for step, outcome in failed:
                    singles, rest = redo(step, outcome)
                    alone += singles
                    ranges += rest
                echo(f"{len(failed)} range run(s) failed: " + (
                    f"rerunning their {len(alone)} partition(s) one run each, so that a failing partition does "
                    "not hold back the others" if not ranges else
                    f"rerunning the {len(alone)} partition(s) their checks or errors failed for one run each "
                    f"({', '.join(names[0] for *_s, names, _a in alone[:5])}{', ...' if len(alone) > 5 else ''}) and "
                    f"the other {sum(len(r[1]) for r in ranges)} in {len(ranges)} range run(s)"))
                stage = ranges + alone  # the ranges first: the longer runs start first
                outcomes = execute([(i, job_name, keys, label, assets)
                                    for i, (job_name, keys, label, _names, assets) in enumerate(stage, 1)], len(stage))
    finally:
        pool.shutdown()
    _sync_partitions(instance, store, discovery, echo)  # what this run's ingest retired
    for suite in suites:
        path = leaderboard_path(store, suite)
        if path.exists():
            echo(f"\nsuite {printable(suite)}: models ranked by posterior mean success rate")
            echo(format_leaderboard(pd.read_parquet(path), LEADERBOARD_LINES, rest=f"every model in {path}"))
    folders = ["samples", "quarantine", "accuracy_posteriors", "glm_fits", "glm_suite_fits", "reliability",
               "model_reliability", "suite_leaderboard", "suite_comparison", "model_profile", "waic_rankings",
               "ingest_accounting", "run_status"]
    echo(f"\noutputs in {store.root.resolve()}: "
         + ", ".join(f"{name}/" for name in folders if (store.root / name).exists()))
    report_page = store.root / "report" / "index.html"
    if report_page.exists():
        echo(f"report: {report_page.resolve()}")
    echo(f"Dagster instance: {instance.root_directory} (browse with `make ui`)")
    if stale["rejected"]:
        echo(f"exit 1: {len(stale['rejected'])} model x suite partition(s) not rerun, their sample tables rejected "
             "(the not rerun line above)")
    if discovery.unreadable:  # as a rejected partition: data held back, every night until the file is fixed
        echo(f"exit 1: {len(discovery.unreadable)} unreadable log(s) in {landing} (the skipped lines above; "
             "recorded under file_errors/): fix, replace or remove them")
    return 1 if failures or stale["rejected"] or discovery.unreadable else 0


class StepOutcome(NamedTuple):
    """What one run of a stage did. ``failing_partitions``: for a failed range run whose every failed
    step names its partitions (a blocking check, an error in one partition's computation), those
    partitions (assets.status.failing_partitions); else None. ``succeeded_steps``:
    the steps (asset keys) of a failed run that succeeded, for every partition of its range."""

    ok: bool
    seconds: float
    lines: list[str]
    failing_partitions: tuple[str, ...] | None = None
    succeeded_steps: tuple[str, ...] = ()


def _run_steps(steps: list, count: int, echo: Callable[[str], None], *, pool: WorkerPool | None,
               instance: DagsterInstance, on_lost_workers: Callable[[], None],
               block: Callable[..., tuple] | None = None) -> list[StepOutcome]:
    """Run ``steps`` ((number, job, keys, label, assets)) and return each one's :class:`StepOutcome`, in
    order: side by side in ``pool`` when there is one and more than one step, else one after another here.

    A worker that dies (killed, out of memory) breaks the pool, and the pool ends the runs of its
    healthy siblings with it. Those runs would stay STARTED in Dagster: ``on_lost_workers`` marks
    them failed (and records them) once the broken pool's processes are gone. A step the break
    failed whose worker had finished it all the same (its result not collected yet: the outcome each
    worker also keeps on disk, :func:`_keep_outcome`) is reported as it ended; every other step the
    break ended is run once more, one at a time in fresh workers, so a sibling's run does not fail
    for another's death. A step whose worker dies again is reported failed."""
    import tempfile

    block = block or _execute_block
    if pool is None or len(steps) < 2:
        in_order = []
        for number, job_name, keys, label, assets in steps:
            echo(f"[{number}/{count}] {job_name} {label} ...")
            outcome = StepOutcome(*block(job_name, keys, assets=assets, instance=instance))
            _echo_outcome(echo, count, number, job_name, label, outcome)
            in_order.append(outcome)
        return in_order
    outcomes: dict[int, StepOutcome] = {}
    with tempfile.TemporaryDirectory(prefix="evalpipeline-outcomes-") as kept:
        lost = _submit_and_collect(pool, steps, count, echo, instance, block, outcomes, kept)
        if lost:
            pool.reset()  # joins the broken pool's processes: their runs are now orphans
            on_lost_workers()
            lost = _finished_anyway(lost, count, echo, outcomes, kept)
        if lost:
            echo(f"a worker process died: running the {len(lost)} run(s) the break ended once more, one at a "
                 "time in fresh workers (a run that kills its worker again then ends no other)")
            for step in lost:
                if _submit_and_collect(pool, [step], count, echo, instance, block, outcomes, kept):
                    pool.reset()
                    on_lost_workers()
                    if not _finished_anyway([step], count, echo, outcomes, kept):
                        continue
                    number, job_name, _keys, label, _assets = step
                    outcomes[number] = StepOutcome(False, 0.0, ["    worker process lost twice: not run again"])
                    _echo_outcome(echo, count, number, job_name, label, outcomes[number])
    return [outcomes[number] for number, *_rest in steps]  # in the order of ``steps``


def _keep_outcome(path: str, block: Callable[..., tuple], *args) -> tuple:
    """Run ``block(*args)`` in a worker and also keep its outcome at ``path`` (JSON, written atomically).
    A pool that breaks fails the futures of every step whose result it had not collected, including
    steps whose worker went on to finish them; what is kept here tells those from the lost ones."""
    import json

    from evalpipeline.lake import write_bytes_atomic

    outcome = tuple(block(*args))
    write_bytes_atomic(json.dumps(list(outcome)).encode(), Path(path))
    return outcome


def _finished_anyway(lost: list, count: int, echo: Callable[[str], None], outcomes: dict[int, StepOutcome],
                     kept: str) -> list:
    """Of the steps a broken pool ended (once its processes are gone), report those whose worker kept
    an outcome (:func:`_keep_outcome`) as they ended, into ``outcomes``; return the others."""
    import json

    still_lost = []
    for step in lost:
        number, job_name, _keys, label, _assets = step
        path = Path(kept) / f"{number}.json"
        if not path.exists():
            still_lost.append(step)
            continue
        ok, seconds, lines, *rest = json.loads(path.read_text())
        failing = tuple(rest[0]) if rest and rest[0] is not None else None
        outcome = StepOutcome(ok, seconds, [*lines, "    (finished before a sibling worker's death broke the pool)"],
                              failing, tuple(rest[1]) if len(rest) > 1 else ())
        _echo_outcome(echo, count, number, job_name, label, outcome)
        outcomes[number] = outcome
    return still_lost


def _submit_and_collect(pool: WorkerPool, steps: list, count: int, echo: Callable[[str], None], instance, block,
                        outcomes: dict[int, StepOutcome], kept: str) -> list:
    """Submit ``steps`` to ``pool``, print each outcome as it arrives into ``outcomes`` (by step
    number), and return the steps a broken pool ended (in step order), neither printed nor in
    ``outcomes``: whether each finished is known only once the pool's processes are gone."""
    futures = {}
    for step in steps:
        number, job_name, keys, label, assets = step
        echo(f"[{number}/{count}] {job_name} {label} ... (worker process)")
        futures[pool.submit(_keep_outcome, str(Path(kept) / f"{number}.json"), block, job_name, keys,
                            instance.root_directory, assets)] = step
    lost = []
    for future in as_completed(futures):
        number, job_name, _keys, label, _assets = futures[future]
        try:
            outcome = StepOutcome(*future.result())
        except BrokenProcessPool:
            lost.append(futures[future])
            continue
        except Exception as error:  # the step's function itself failed outside Dagster
            outcome = StepOutcome(False, 0.0, [f"    worker process failed: {error!r}"])
        _echo_outcome(echo, count, number, job_name, label, outcome)
        outcomes[number] = outcome
    return sorted(lost)


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
    store = defs.resources["lake"].lake()
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
    pair_assets = {pair: keys for pair, keys in stale_assets(
        partition_assets, pairs, files_states=current_files_states(store, discovery.partitions)).items()
        if pair not in discovery.changed}
    rejected = {pair: store.failed_validation(*pair) for pair in pair_assets}
    rejected = {pair: checks for pair, checks in rejected.items()
                if rejected_and_unchanged(False, pair_assets[pair], checks)}
    pair_assets = {pair: keys for pair, keys in pair_assets.items() if pair not in rejected}
    # a model or suite whose every partition is so has no data: its outputs stay missing, not failing nightly
    only_rejected = [{p[i] for p in rejected} - {p[i] for p in discovery.partitions - set(rejected)} for i in (0, 1)]
    return {
        "pairs": set(pair_assets),
        "pair_assets": pair_assets,
        "rejected": rejected,
        "rejected_models": only_rejected[0],
        "suites": stale_names(SUITE_ASSETS, {to_partition_key(s): s for s in discovery.suites})
        - {s for _, s in discovery.changed} - only_rejected[1],
        "models": stale_names(MODEL_ASSETS, {to_partition_key(m): m for m in discovery.models})
        - {m for m, _ in discovery.changed} - only_rejected[0],
    }


def _start_every_worker(pool: ProcessPoolExecutor, workers: int) -> None:
    """Start all ``workers`` of ``pool`` now, and have its manager thread watch every one.

    The pool starts a worker in ``submit`` only when none is idle, and after waking its manager thread,
    which then waits on the workers that exist: it only notices the death of those (CPython 3.11's
    ``submit``), so a worker started by a later submit could die unnoticed until another run ended (a
    sibling's run then finished and was reported as finished, instead of being ended by the death and
    run again). One task per worker that holds its worker until every worker has checked in
    (:func:`_check_in`) makes each submit start a worker, however late the previous one is scheduled;
    a submit after the last start wakes the manager thread again, so its next wait includes every worker."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="evalpipeline-workers-") as folder:
        for started in [pool.submit(_check_in, folder, workers) for _ in range(workers)]:
            started.result()
    pool.submit(os.getpid).result()


def _check_in(folder: str, workers: int, timeout: float = 60.0) -> int:
    """A worker's first task (:func:`_start_every_worker`): leave its pid in ``folder`` and wait until
    ``workers`` workers have (at most ``timeout`` seconds)."""
    (Path(folder) / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while len(os.listdir(folder)) < workers and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def _exit_with_parent(parent: int, interval: float = 0.5) -> None:
    """Worker initialiser: end this worker when the process that started it is gone (killed, say).
    Otherwise an orphaned worker finishes its run (minutes of a range) while the rerun that follows
    the kill fits the same partitions; what it had not written atomically yet is simply not written.
    A worker forked by the forkserver (:func:`_worker_context`) is the server's child, and the server
    ends with ``parent``: then this worker's parent process changes, which ends it too."""
    forked_by = os.getppid()

    def watch() -> None:
        while os.getppid() == forked_by and process_alive(parent):
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


#: The environment this process's forkserver was started with (None: not started yet).
_server_environment: dict[str, str] | None = None


def _worker_context():
    """Where :class:`WorkerPool` starts its workers: forked from a forkserver that has imported the code
    location and Great Expectations (:data:`resources.executors.STEP_PRELOAD_MODULES`, as the local
    executor's steps are), started here on first use without waiting for it; else spawned.

    Importing nothing that starts a thread or an XLA backend, the server is safe to fork. A forked
    worker has the server's environment, not the caller's (``os.environ`` is where the lake, the
    landing folder and the configuration file are named): when this process's environment is no
    longer the one the server started with (a second job here for another lake, say), the workers
    are spawned, as they are on a platform without forkserver."""
    global _server_environment
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    environment = dict(os.environ)
    if _server_environment is None:
        from multiprocessing import forkserver

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(STEP_PRELOAD_MODULES))
        forkserver.ensure_running()
        _server_environment = environment
    elif environment != _server_environment:
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("forkserver")


class WorkerPool:
    """Worker processes, started on first use and forked from a forkserver that imported the code
    location once (:func:`_worker_context`). A worker that dies (killed, out of memory) breaks a
    ``ProcessPoolExecutor`` for good, ending the work of the other workers too; here the next
    ``submit`` (or :meth:`reset`) starts fresh workers instead, so the job goes on (:func:`_run_steps`
    reruns what the break ended). Workers end when the process that started them does
    (:func:`_exit_with_parent`)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, fn: Callable, *args):
        if self._pool is not None:
            try:
                return self._pool.submit(fn, *args)
            except BrokenProcessPool:
                self._pool.shutdown(cancel_futures=True)
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=_worker_context(),
                                         initializer=_exit_with_parent, initargs=(os.getpid(),))
        _start_every_worker(self._pool, self.workers)
        return self._pool.submit(fn, *args)

    def prepare(self) -> None:
        """Start the forkserver now (:func:`_worker_context`): it imports the code location (~3 s of one
        core) while the job discovers its logs and judges staleness on the other, so the first ``submit``
        forks ready workers. Nothing to do with one worker (no pool)."""
        if self.workers > 1:
            _worker_context()

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def reset(self) -> None:
        """Shut the current workers down and wait for them to exit; the next ``submit`` starts new ones."""
        self.shutdown()


_worker_instances: dict[str, DagsterInstance] = {}


def _execute_block(job_name: str, keys: list[str] | None, instance_root: str | None = None,
                   assets: tuple[str, ...] | None = None, *,
                   instance: DagsterInstance | None = None) -> StepOutcome:
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
    result = defs.resolve_job_def(job_name).execute_in_process(
        instance=instance, partition_key=partition_key, raise_on_error=False, run_config=_console_config(), tags=tags,
        asset_selection=[AssetKey.from_user_string(a) for a in assets] if assets else None,
    )
    lines: list[str] = []
    failing, succeeded_steps = None, ()
    if not result.success:
        if keys and len(keys) > 1:
            failing = failing_partitions(
                step_failures([e for e in result.all_events if e.is_step_failure], ""),
                [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"])
        succeeded_steps = tuple(sorted({e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}))
        # A failed range run is rerun one partition per run (run_main_job), and those runs record what
        # still fails: a record of the range would list partitions that then refreshed as failed.
        _report_failure(defs.resources["lake"].lake(), result, job_name, ",".join(keys or []), lines.append,
                        record=not (keys and len(keys) > 1))
    else:  # what failed before for these partitions has refreshed: the failure table says so
        resolved = [*(keys or [""]), *([f"{keys[0]}..{keys[-1]}"] if keys and len(keys) > 1 else [])]
        resolve_failures(defs.resources["lake"].lake(), job=job_name, partitions=resolved,
                         assets=materialised_assets(result.all_events), run_id=result.run_id,
                         resolved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return StepOutcome(result.success, time.perf_counter() - started, lines, failing, succeeded_steps)


def _echo_outcome(echo: Callable[[str], None], total: int, number: int, job_name: str, label: str,
                  outcome: StepOutcome) -> None:
    echo(f"[{number}/{total}] {job_name} {label}: {'ok' if outcome.ok else 'FAILED'} ({outcome.seconds:.1f}s)")
    for line in outcome.lines:
        echo(line)


def _selected(assets: tuple[str, ...] | None) -> str:
    """How a run's asset selection is named in the progress lines (nothing: every asset of its job)."""
    return f" [{', '.join(assets)}]" if assets else ""


def _label(block: list, name: Callable) -> str:
    """How a run's partitions are named in the progress lines."""
    if len(block) == 1:
        return name(block[0])
    return f"{len(block)} partitions ({name(block[0])} .. {name(block[-1])})"


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
                store, run_id=run.run_id, job=run.job_name, partition=_run_partition_keys(run, instance),
                failures=[StepFailure(RUN_ASSET, "", "ProcessDied", message)],
                failed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
            echo(f"marked run {run.run_id} failed: its process {pid} died")


def _run_partition_keys(run, instance: DagsterInstance) -> str | list[str]:
    """A run's partition as the failure table writes it, and for a range run the list of its partitions
    (so that each row is resolved when its partition is redone or found current); the range
    "first..last" when its job has no partitions or the keys cannot be listed."""
    keys = range_partition_keys(run.tags, run_partitions_def(defs.get_repository_def(), run), instance)
    return keys or run_partitions(run.tags)


def _report_failure(store: Lake, result, job_name: str, partition: str, echo: Callable[[str], None], *,
                    record: bool = True) -> None:
    """Print why a run failed and (``record``) record it in the lake's run status table, one row per
    failed step, as the failure sensor does for runs the daemon launches (a failed blocking check fails
    its step, whose error names the check: it is not recorded a second time)."""
    checks = [event.event_specific_data for event in result.all_events
              if event.event_type_value == "ASSET_CHECK_EVALUATION"]
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
        store, run_id=result.run_id, job=job_name, partition=partition,
        failures=failed or step_failures([], "run failed"),
        failed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _sync_partitions(instance: DagsterInstance, store: Lake, discovery, echo: Callable[[str], None]) -> None:
    for dimension, keys in sync_dynamic_partitions(instance, store, discovery).items():
        if keys:
            echo(f"{dimension}(s) no log or lake table holds any more, unregistered from the Dagster instance: "
                 + ", ".join(printable(from_partition_key(k)) for k in keys))
