"""A backfill of every model x suite partition from the CLI, and what automation does after it.

On 2 models x 2 suites of the demo logs, in a temporary lake, landing folder and Dagster home
(the repo's dagster.yaml): `dagster job backfill -j ingest_and_fit --all --noprompt` queues one
run per partition; after they ran, the automation conditions (what the ``refresh_downstream``
sensor evaluates) request each per-suite, per-model and lake-wide asset partition once, never
once per upstream partition, and no partition-level asset again. The nightly schedule then
requests nothing, and after a prior of the binomial GLM is edited it requests exactly the
partitions whose ``glm_binomial`` was fitted under the old prior.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter, SkipReason, build_schedule_context

from tests.conftest import DEMO_LOGS

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODELS = ("mockllm-atlas-large", "mockllm-borealis-v2")
SUITES = ("arith", "agentic-ops")
# One GLM: the test is about what runs when, not about sampling (the suite GLMs, fitted to only
# two models here, are left to tests/test_main_job.py; disabled ones still materialise, as "not applicable").
CONFIG = """
[glm]
models = ["binomial"]
num_warmup = 500
num_samples = 500
[glm.thresholds]
min_ess_bulk = 200
min_ess_tail = 200
"""
#: A run can only end in these statuses.
FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
#: Keeps a hung daemon from hanging the suite (opt-in test only).
DAEMON_DEADLINE_SECONDS = 3600


@pytest.fixture
def daemon_env(tmp_path, monkeypatch):
    """Landing (2 models x 2 suites of the demo logs), lake, config, Dagster home (the repo's
    dagster.yaml: run queue of 2, fit pool of 2) and a workspace that loads the definitions."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for log in DEMO_LOGS.iterdir():
        if any(f"_{suite}_{model}_" in log.name for model in MODELS for suite in SUITES):
            shutil.copy(log, landing / log.name)
    assert len(list(landing.iterdir())) == 4
    (tmp_path / "evalpipeline.toml").write_text(CONFIG)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: evalpipeline.definitions\n"
        f"      working_directory: {REPO}\n"
    )
    env = {
        "EVALPIPELINE_LANDING": str(landing),
        "EVALPIPELINE_LAKE": str(tmp_path / "lake"),
        "EVALPIPELINE_CONFIG": str(tmp_path / "evalpipeline.toml"),
        "DAGSTER_HOME": str(home),
        "EVALPIPELINE_LOG_LEVEL": "WARNING",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # EVALPIPELINE_JAX_CACHE (the session's shared compile cache, tests/conftest.py) is inherited.
    return tmp_path, workspace


def _dagster(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "dagster"), *args, "-w", str(workspace)],
        cwd=workspace.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"dagster {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def _targets(run) -> set[str]:
    """The assets a run materialises: its selection, or every asset of its job (a backfill's runs
    of ``ingest_and_fit`` select none: they run the whole job)."""
    if run.asset_selection:
        return {key.to_user_string() for key in run.asset_selection}
    from evalpipeline.definitions import defs

    return {key.to_user_string() for key in defs.resolve_job_def(run.job_name).asset_layer.selected_asset_keys}


def _runs_per_asset_partition(runs, instance: DagsterInstance | None = None) -> Counter:
    """(asset, partition) -> number of runs that targeted it; each partition of a range run (the
    daemon runs a backfill of model x suite or per-model partitions in ranges) when ``instance`` is
    given to list them."""
    from assets.status import range_partition_keys, run_partitions_def
    from evalpipeline.definitions import defs

    counts = Counter()
    for run in runs:
        keys = None
        if instance is not None:
            keys = range_partition_keys(run.tags, run_partitions_def(defs.get_repository_def(), run), instance)
        for asset in _targets(run):
            for key in keys or [run.tags.get("dagster/partition")]:
                counts[(asset, key)] += 1
    return counts


def _wait(instance: DagsterInstance, done, what: str, daemon_log: Path, timeout: float):
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        runs = instance.get_runs()
        failed = [r for r in runs if r.status == DagsterRunStatus.FAILURE]
        assert not failed, f"runs failed: {[(r.job_name, r.tags.get('dagster/partition')) for r in failed]}"
        if done(runs):
            return runs
        time.sleep(3)
    statuses = [(r.job_name, sorted(_targets(r)), r.tags.get("dagster/partition"), r.status.value) for r in runs]
    pytest.fail(f"timed out waiting for {what}; runs: {statuses}\ndaemon log:\n{daemon_log.read_text()[-4000:]}")


def _stop(process: subprocess.Popen) -> None:
    """End the daemon and everything it started (its code server, run and step processes)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # stragglers in the group
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def _register(instance: DagsterInstance, root: Path) -> tuple[list[str], list[str]]:
    """Register the landing folder's models and suites, as `evalpipeline run` and the nightly do."""
    from evalpipeline.lake.keys import to_partition_key
    from evalpipeline.lake import Lake
    from evalpipeline.steps.discovery import discover
    from evalpipeline.settings import load_ingest_options

    discovery = discover(Lake(root / "lake"), root / "landing", load_ingest_options())
    models = sorted(to_partition_key(m) for m in discovery.models)
    suites = sorted(to_partition_key(s) for s in discovery.suites)
    assert len(models) == 2 and len(suites) == 2
    instance.add_dynamic_partitions("model", models)
    instance.add_dynamic_partitions("suite", suites)
    return models, suites


def _nightly_requests(instance: DagsterInstance, partition_assets) -> dict[str, str]:
    """Evaluate the nightly schedule built for ``partition_assets`` now: partition key -> reason of its
    run (with ``[assets]`` appended when the run is limited to some of the job's assets); a range
    run's partitions each map to the range's reason."""
    from assets.jobs import ingest_and_fit_job
    from assets.schedules import build_nightly_schedule
    from resources import IngestSettings, LakeResource

    schedule = build_nightly_schedule(ingest_and_fit_job, partition_assets)
    # As a context manager: the context enters the instance into a context variable that only
    # its __exit__ resets; without it, later tests' Definitions resolve a dead instance.
    with build_schedule_context(
        instance=instance, resources={"lake": LakeResource(), "ingest_settings": IngestSettings()}
    ) as context:
        result = schedule(context)  # the evaluation function itself (evaluate_tick needs a repository)
    requests = [] if isinstance(result, SkipReason) else list(result)
    from assets.partitions import model_suite_partitions
    from assets.status import range_partition_keys

    requested = [
        (key, r)
        for r in requests
        for key in range_partition_keys(r.tags, model_suite_partitions, instance) or [str(r.partition_key)]
    ]
    assert len({key for key, _r in requested}) == len(requested), "a partition requested twice"
    return {
        key: r.tags["evalpipeline/reason"]
        + (f" {sorted(k.to_user_string() for k in r.asset_selection)}" if r.asset_selection else "")
        for key, r in requested
    }


def _execute_requests(defs, instance, result, requested: Counter) -> int:
    """Materialise what one automation evaluation requested, one run per partition (what the
    sensor launches), counting each asset partition requested; returns the number of runs."""
    from dagster import materialize

    by_partition: dict[tuple, list] = {}
    for assets_def in defs.assets:
        for key in assets_def.keys:
            for partition in result.get_requested_partitions(key):
                requested[(key.to_user_string(), partition)] += 1
                scope = assets_def.partitions_def.name if hasattr(assets_def.partitions_def, "name") else None
                by_partition.setdefault((scope, partition), []).append(key)
    for (_scope, partition), keys in sorted(by_partition.items(), key=str):
        done = materialize(
            list(defs.assets),
            instance=instance,
            partition_key=partition,
            selection=keys,
            resources=defs.resources,
            raise_on_error=False,
        )
        assert done.success, f"refresh of {keys} [{partition}] failed"
    return len(by_partition)


@pytest.mark.slow
def test_cli_backfill_queues_every_partition_then_one_refresh_per_suite_and_a_quiet_nightly(daemon_env):
    """The CLI queues the backfill; its partitions then run in this process (not through the
    daemon, whose run and step processes take ~5 min for the same backfill on 2 cores, see
    test_backfill_through_the_daemon), and the automation conditions are evaluated tick by tick
    as the ``refresh_downstream`` sensor does."""
    from dagster import evaluate_automation_conditions

    from evalpipeline.definitions import defs

    root, workspace = daemon_env
    instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    models, suites = _register(instance, root)
    partitions = {f"{m}|{s}" for m in models for s in suites}

    out = _dagster(workspace, "job", "backfill", "-j", "ingest_and_fit", "--all", "--noprompt")
    assert "Launching runs" in out
    queued = instance.get_runs(RunsFilter(job_name="ingest_and_fit"))
    assert sorted(r.tags["dagster/partition"] for r in queued) == sorted(partitions)
    assert all(r.status == DagsterRunStatus.QUEUED and r.tags.get("dagster/backfill") for r in queued)

    # While the backfill is queued, the automation sensor requests nothing (in progress).
    tick = evaluate_automation_conditions(defs, instance)
    assert tick.total_requested == 0

    job = defs.resolve_job_def("ingest_and_fit")
    for run in queued:
        partition = run.tags["dagster/partition"]
        model, suite = partition.split("|")
        from dagster import MultiPartitionKey

        result = job.execute_in_process(
            instance=instance,
            partition_key=MultiPartitionKey({"model": model, "suite": suite}),
            tags={"dagster/backfill": run.tags["dagster/backfill"]},
            raise_on_error=False,
        )
        failed = [
            (e.asset_key.to_user_string(), e.check_name) for e in result.get_asset_check_evaluations() if not e.passed
        ]
        assert result.success, (partition, failed)
        instance.report_run_canceled(run, "executed in the test process instead")

    lake = root / "lake"
    for m in models:
        for s in suites:
            assert (lake / "samples" / f"model={m}" / f"suite={s}" / "samples.parquet").exists()
            fit = lake / "glm_fits" / f"model={m}" / f"suite={s}" / "binomial"
            assert (fit / "posterior.nc").exists()
            assert json.loads((fit / "provenance.json").read_text())["status"] == "fitted"

    # The automation ticks: each downstream partition is requested once, whatever the number
    # of upstream partitions that changed, and no partition-level asset is requested again.
    requested: Counter = Counter()
    runs = []
    for _ in range(5):
        tick = evaluate_automation_conditions(defs, instance, cursor=tick.cursor)
        if tick.total_requested == 0:
            break
        runs.append(_execute_requests(defs, instance, tick, requested))
    assert tick.total_requested == 0, "the automation sensor still requests runs after the refresh"
    partition_level = {
        a.key.to_user_string()
        for a in defs.assets
        if a.partitions_def is not None and "model" in getattr(a.partitions_def, "partition_dimension_names", ())
    }
    assert not [k for k in requested if k[0] in partition_level], requested
    assert all(n == 1 for n in requested.values()), requested
    for asset in ("suite_leaderboard", "suite_glm_binomial"):
        assert {p for (a, p) in requested if a == asset} == set(suites), requested
    assert {p for (a, p) in requested if a == "model_reliability"} == set(models), requested
    assert ("ingest_accounting", None) in requested and ("waic_rankings", None) in requested, requested

    # Nothing new and nothing stale: the nightly schedule (built over the partition assets the nightly
    # materialises; partition_plots is drawn on request only) launches nothing.
    from assets.jobs import ON_REQUEST_ASSETS, PARTITION_ASSETS

    partitioned = {a.key for a in defs.assets if a.key.to_user_string() in partition_level}
    on_request = {
        a.key for a in ON_REQUEST_ASSETS if "model" in getattr(a.partitions_def, "partition_dimension_names", ())
    }
    assert on_request == {AssetKey("partition_plots")}
    assert partitioned == {a.key for a in PARTITION_ASSETS} | on_request
    partition_assets = list(PARTITION_ASSETS)
    assert _nightly_requests(instance, partition_assets) == {}
    # `evalpipeline run --only-changed` decides alike: no partition, suite or model to redo
    from resources.run.loop import _stale
    from evalpipeline.lake import Lake
    from evalpipeline.steps.discovery import discover
    from evalpipeline.settings import load_ingest_options

    discovery = discover(Lake(root / "lake"), root / "landing", load_ingest_options())
    assert _stale(instance, discovery) == {
        "pairs": set(),
        "pair_assets": {},
        "suites": set(),
        "models": set(),
        "rejected": {},
        "rejected_models": set(),
    }

    # A prior of the binomial GLM changes: every partition's glm_binomial was made with the old
    # one, so every partition is requested, for that asset alone (the run selects only it).
    from assets.fits import partition_glm_asset

    (root / "evalpipeline.toml").write_text(CONFIG + "[glm.priors.binomial]\nsigma_subdomain_scale = 0.2\n")
    edited = partition_glm_asset("binomial")
    partition_assets = [a for a in partition_assets if a.key != edited.key] + [edited]
    stale = "glm_binomial code changed ['glm_binomial']"
    assert _nightly_requests(instance, partition_assets) == {p: stale for p in partitions}
    assert _stale(instance, discovery, partition_assets) == {
        "pairs": discovery.partitions,
        "pair_assets": {pair: {edited.key} for pair in discovery.partitions},
        "suites": set(),
        "models": set(),
        "rejected": {},
        "rejected_models": set(),
    }

    # Once one partition is refitted with the new prior, only the other three remain stale.
    from dagster import materialize

    refitted = sorted(partitions)[0]
    model, suite = refitted.split("|")
    from dagster import MultiPartitionKey

    done = materialize(
        [edited],
        instance=instance,
        partition_key=MultiPartitionKey({"model": model, "suite": suite}),
        resources=defs.resources,
    )
    assert done.success
    assert _nightly_requests(instance, partition_assets) == {p: stale for p in partitions - {refitted}}


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("EVALPIPELINE_DAEMON_TESTS") != "1",
    reason="the live daemon takes ~5 min alone, 10+ on 2 shared cores; set EVALPIPELINE_DAEMON_TESTS=1",
)
def test_backfill_through_the_daemon(daemon_env):
    """The same backfill, launched and run by `dagster-daemon` (run queue, multiprocess executor,
    automation sensor), on a frozen copy of the code so that edits made while it runs do not
    change code versions under it."""
    root, workspace = daemon_env
    snapshot = root / "code"
    for package in ("evalpipeline", "assets", "resources"):
        shutil.copytree(REPO / package, snapshot / package, ignore=shutil.ignore_patterns("__pycache__"))
    workspace.write_text(workspace.read_text().replace(str(REPO), str(snapshot)))
    os.environ["PYTHONPATH"] = str(snapshot)  # run and step processes import the snapshot too
    try:
        _daemon_backfill(root, workspace)
    finally:
        os.environ.pop("PYTHONPATH", None)


def _daemon_backfill(root: Path, workspace: Path) -> None:
    instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    models, suites = _register(instance, root)
    partitions = {f"{m}|{s}" for m in models for s in suites}
    # The landing sensor (RUNNING by default) would request its own runs for these logs.
    _dagster(workspace, "sensor", "stop", "landing_sensor")
    _dagster(workspace, "job", "backfill", "-j", "ingest_and_fit", "--all", "--noprompt")

    daemon_log = root / "daemon.log"
    with open(daemon_log, "w") as log:
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        started = time.monotonic()
        budget = lambda: DAEMON_DEADLINE_SECONDS - (time.monotonic() - started)  # noqa: E731
        _wait(
            instance,
            lambda runs: all(r.status == DagsterRunStatus.SUCCESS for r in runs if r.job_name == "ingest_and_fit"),
            "the backfill",
            daemon_log,
            budget(),
        )
        downstream = {"suite_leaderboard", "model_reliability", "ingest_accounting", "waic_rankings"}

        def refreshed(runs):
            succeeded = [r for r in runs if r.status == DagsterRunStatus.SUCCESS]
            done = {a for (a, _p) in _runs_per_asset_partition(succeeded, instance)}
            return downstream <= done and all(r.status in FINISHED for r in runs)

        _wait(instance, refreshed, "the downstream refresh", daemon_log, budget())
        time.sleep(40)  # one more automation tick (every 30 s) must find nothing to do
        runs = _wait(instance, lambda rs: all(r.status in FINISHED for r in rs), "quiet", daemon_log, budget())
    finally:
        _stop(daemon)
    counts = _runs_per_asset_partition(runs, instance)
    for asset in ("eval_samples", "glm_binomial"):
        assert {p: counts[(asset, p)] for p in partitions} == {p: 1 for p in partitions}, counts
    for asset in ("suite_leaderboard", "suite_glm_binomial"):
        assert {p: counts[(asset, p)] for p in suites} == {p: 1 for p in suites}, counts
    assert {p: counts[("model_reliability", p)] for p in models} == {p: 1 for p in models}, counts


@pytest.mark.skipif(
    os.environ.get("EVALPIPELINE_DAEMON_TESTS") != "1",
    reason="the live daemon takes minutes; set EVALPIPELINE_DAEMON_TESTS=1",
)
def test_an_asset_backfill_of_a_sparse_grid_through_the_daemon(daemon_env):
    """A backfill of every model x suite partition of ``eval_samples`` and ``glm_binomial``, as the UI's
    "Materialize all" submits it, on a grid with a combination that has no log (2 models x 3 suites, one
    missing): the daemon runs it in ranges (a model's suites), the range that holds the empty combination
    fails naming it, and ``rerun_rest_of_failed_ranges`` reruns the rest of that range as one range run.
    Every combination with samples ends materialised and fitted once; the failure table holds one
    unresolved row, for the empty one."""
    from dagster import MultiPartitionKey
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.definitions.events import AssetKeyPartitionKey
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    from assets.partitions import model_suite_partitions
    from assets.redo import REST_OF_TAG
    from assets.status import range_partition_keys
    from evalpipeline.lake.keys import to_partition_key
    from evalpipeline.lake import Lake
    from evalpipeline.steps.discovery import discover
    from evalpipeline.settings import load_ingest_options
    from evalpipeline.steps.run_status import read_run_failures

    root, workspace = daemon_env
    landing = root / "landing"
    for log in DEMO_LOGS.iterdir():  # a third suite: each model's range of suites holds three
        if any(f"_reading_{model}_" in log.name for model in MODELS):
            shutil.copy(log, landing / log.name)
    (empty_log,) = [log for log in landing.iterdir() if f"_{SUITES[1]}_{MODELS[1]}_" in log.name]
    empty_log.unlink()  # the first of its model's suites in their order: the rest of its range is a range
    snapshot = root / "code"
    for package in ("evalpipeline", "assets", "resources"):
        shutil.copytree(REPO / package, snapshot / package, ignore=shutil.ignore_patterns("__pycache__"))
    workspace.write_text(workspace.read_text().replace(str(REPO), str(snapshot)))
    os.environ["PYTHONPATH"] = str(snapshot)
    try:
        from evalpipeline.definitions import defs

        instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
        discovery = discover(Lake(root / "lake"), landing, load_ingest_options())
        models = sorted(to_partition_key(m) for m in discovery.models)
        suites = sorted(to_partition_key(s) for s in discovery.suites)
        assert len(models) == 2 and len(suites) == 3 and len(discovery.partitions) == 5, discovery
        instance.add_dynamic_partitions("model", models)
        instance.add_dynamic_partitions("suite", suites)
        grid = [str(MultiPartitionKey({"model": m, "suite": s})) for m in models for s in suites]
        (empty,) = set(grid) - {
            str(MultiPartitionKey({"model": to_partition_key(m), "suite": to_partition_key(s)}))
            for m, s in discovery.partitions
        }
        for sensor in ("landing_sensor", "refresh_downstream"):  # the backfill alone, and what redoes it
            _dagster(workspace, "sensor", "stop", sensor)
        assets = [AssetKey("eval_samples"), AssetKey("glm_binomial")]
        subset = AssetGraphSubset.from_asset_partition_set(
            {AssetKeyPartitionKey(a, k) for a in assets for k in grid}, defs.get_repository_def().asset_graph
        )
        backfill_id = make_new_backfill_id()
        instance.add_backfill(
            PartitionBackfill.from_asset_graph_subset(
                backfill_id=backfill_id,
                backfill_timestamp=time.time(),
                tags={},
                dynamic_partitions_store=instance,
                asset_graph_subset=subset,
                title=None,
                description=None,
                run_config=None,
            )
        )

        daemon_log = root / "daemon.log"
        with open(daemon_log, "w") as log:
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                cwd=root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            started, quiet_since = time.monotonic(), None
            while True:  # until the backfill and every run ended, and the failure sensor had 90 s to act
                runs = instance.get_runs()
                if instance.get_backfill(backfill_id).status != BulkActionStatus.REQUESTED and all(
                    r.status in FINISHED for r in runs
                ):
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 90:
                        break
                else:
                    quiet_since = None
                if time.monotonic() - started > DAEMON_DEADLINE_SECONDS:
                    pytest.fail(
                        f"the backfill did not end; runs: {[(r.tags, r.status.value) for r in runs]}\n"
                        f"{daemon_log.read_text()[-4000:]}"
                    )
                time.sleep(3)
        finally:
            _stop(daemon)
    finally:
        os.environ.pop("PYTHONPATH", None)
    failed = [r for r in runs if r.status == DagsterRunStatus.FAILURE]
    assert len(failed) == 1 and REST_OF_TAG not in failed[0].tags, [(r.tags, r.status.value) for r in runs]
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs if r not in failed)
    (rest,) = [r for r in runs if REST_OF_TAG in r.tags]
    assert rest.tags[REST_OF_TAG] == failed[0].run_id
    assert range_partition_keys(rest.tags, model_suite_partitions, instance) == [
        k for k in grid if k.split("|")[0] == empty.split("|")[0] and k != empty
    ], rest.tags
    for asset in assets:
        done = set(instance.get_materialized_partitions(asset))
        assert done == set(grid) - {empty}, (asset, done)
    fitted = _runs_per_asset_partition([r for r in runs if r.status == DagsterRunStatus.SUCCESS], instance)
    assert {k: fitted[("glm_binomial", k)] for k in grid} == {k: int(k != empty) for k in grid}, fitted
    failures = read_run_failures(Lake(root / "lake"))
    unresolved = failures[failures["resolved_at"].isna()]
    assert list(zip(unresolved["partition"], unresolved["asset"], unresolved["error_type"])) == [
        (empty, "eval_samples", "NoDataError")
    ], failures
