"""The main job end to end: the demo graph, a no-op rerun, and a leaderboard-sized lake.

    .venv/bin/python benchmarks/pipeline_benchmark.py demo  [--glm fast|paper] [--jax-cache DIR] [--keep DIR]
    .venv/bin/python benchmarks/pipeline_benchmark.py scale [--models 100] [--suites 6] [--items 200]
                                                            [--glm fast|paper] [--glm-models binomial,...]
    .venv/bin/python benchmarks/pipeline_benchmark.py suite-steps [--models 100] [--pair-models 25] [--glm fast|paper]
    .venv/bin/python benchmarks/pipeline_benchmark.py suite-grid [--models 100] [--item-sd 0] [--repeats 2]
    .venv/bin/python benchmarks/pipeline_benchmark.py add-model --keep DIR
    .venv/bin/python benchmarks/pipeline_benchmark.py rerun --keep DIR

``demo`` copies data/inspect_logs into a temporary landing folder and runs
``run_main_job`` (the five stages: ``ingest_and_fit`` runs over the model x suite
partitions, ``suite_analysis`` and then ``suite_comparisons`` over the suites,
``model_analysis`` (or ``model_profiles``) over the models, ``lake_reports``)
against a fresh lake and Dagster instance (a copy of dagster_home/dagster.yaml).
It prints the wall time of each stage (as `run_main_job` reports it per run) and
of each asset (step start to end, summed over runs, from
``instance.get_run_step_stats``). Then, over the same unchanged logs, it reruns
the job plainly and with ``only_changed=True`` and prints their wall time, the
ratio to the first run and how many GLM materialisations say ``status: fitted``
vs ``reused`` (a no-op rerun must fit nothing).

``scale`` writes a long-table landing folder (one Parquet file per model; rows
model, suite, domain, subdomain, item_id, score; planted accuracies
``logit p = ability(model) - hardness(suite)``), runs the full rebuild, then adds
one model's file and runs ``only_changed=True``. It prints both wall times, the
per-stage and per-asset cost, and peak RSS. A night whose suite fits asked for a sampler to be
prepared for a later night (``prepare_samplers``, run beside the lake-wide tables) prints two
times: to its last output, on which the targets are judged, and to the end of the preparation.
When ``--models`` is below the
leaderboard size (100) the 100-model numbers are extrapolated per asset (linear
in the models, quadratic for the pairwise comparison) and labelled EXTRAPOLATED;
everything else is MEASURED. ``add-model`` and ``rerun`` work in the folder a
``scale --keep DIR`` left: one more model, or the nightly over the unchanged logs
(it must fit nothing: exit 1 otherwise).

``--glm fast`` is the end-to-end test's setting (tests/test_main_job.py): candidate
GLMs binomial + suite_binomial, 4 chains x (500 warmup + 500 draws), thresholds
relaxed to what 2000 draws can show. ``--glm paper`` is the defaults (every
candidate, 2000 + 2000). The JAX compilation cache lives in the temporary work
folder (cold start, compilation counted) unless ``--jax-cache`` names one.
Everything runs in this process (``execute_in_process``), so this process's peak
resident memory (VmHWM) is the pipeline's peak.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd


REPO = Path(__file__).resolve().parents[1]
DEMO_LOGS = REPO / "data" / "inspect_logs"
STAGES = (
    "ingest_and_fit",
    "suite_analysis",
    "suite_comparisons",
    "model_analysis",
    "model_profiles",
    "lake_reports",
    "prepare_samplers",
)
#: The job that writes no output: it compiles the sampler a later night will need (evalpipeline.steps.fits.
#: prepare_requested_samplers), beside the last outputs. A night's outputs are complete without it.
PREPARE_JOB = "prepare_samplers"
LEADERBOARD = {"models": 100, "suites": 6, "items": 200}
TARGET_FULL_S, TARGET_NEW_MODEL_S = 600.0, 60.0

FAST_GLM = """
[glm]
models = {models}
num_warmup = 500
num_samples = 500
[glm.thresholds]
min_ess_bulk = 200
min_ess_tail = 200
max_r_hat = 1.05
"""
#: `run_main_job` prints "[3/12] ingest_and_fit m x s: ok (12.3s)" after each run
RUN_LINE = re.compile(r"^\[(\d+)/(\d+)\] (\S+) (.*): (ok|FAILED) \(([\d.]+)s\)$")


def setup_environment(
    work: Path, glm: str, glm_models: list[str] | None, jax_cache: Path | None, reuse: bool = False
) -> None:
    """Point the pipeline at temporary folders; must run before evalpipeline.definitions is imported.
    ``reuse``: ``work`` is a folder an earlier ``scale --keep`` left; its instance and configuration stay."""
    home = work / "dagster_home"
    config = work / "evalpipeline.toml"
    if reuse:
        missing = [str(p) for p in (home / "dagster.yaml", config, work / "landing", work / "lake") if not p.exists()]
        if missing:
            raise SystemExit(f"{work} is not a folder that `scale --keep` left: missing {', '.join(missing)}")
    else:
        home.mkdir(parents=True)
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        if glm == "fast":
            models = glm_models or ["binomial", "suite_binomial"]
            config.write_text(FAST_GLM.format(models="[" + ", ".join(f'"{m}"' for m in models) + "]"))
        elif glm_models:
            config.write_text("[glm]\nmodels = [" + ", ".join(f'"{m}"' for m in glm_models) + "]\n")
        else:
            config.write_text("")
    os.environ.update(
        EVALPIPELINE_LANDING=str(work / "landing"),
        EVALPIPELINE_LAKE=str(work / "lake"),
        EVALPIPELINE_CONFIG=str(config),
        DAGSTER_HOME=str(home),
        EVALPIPELINE_JAX_CACHE=str(jax_cache or work / "jax_cache"),
    )
    os.environ.pop("EVALPIPELINE_EXECUTOR", None)  # run_main_job executes in process anyway


class TreeMemory:
    """Peak resident memory of this process and every process under it together (summed RSS,
    sampled every 0.2 s): with --workers the job runs in several processes, forked from a
    forkserver that is counted too (~200-300 MiB; pages the workers share with it count twice)."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak_mib = interval, 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:  # ended between listing and reading
                    pass
            self.peak_mib = max(self.peak_mib, total / 2**20)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Timed:
    """One `run_main_job` call: wall time, per-run lines it printed, the runs it created."""

    def __init__(self, label: str, instance, only_changed: bool = False, verbose: bool = False, workers: int = 1):
        from resources.run.loop import run_main_job

        self.label = label
        before = {r.run_id for r in instance.get_runs()}
        self.runs: list[tuple[str, str, float, bool]] = []  # (job, label, seconds, ok)
        self.lines: list[str] = []

        #: seconds until the last run that writes outputs ended (all of them but PREPARE_JOB's)
        self.outputs_seconds = 0.0

        def echo(line: str) -> None:
            self.lines.append(line)
            match = RUN_LINE.match(line)
            if match:
                self.runs.append((match[3], match[4], float(match[6]), match[5] == "ok"))
                if match[3] != PREPARE_JOB:
                    self.outputs_seconds = time.perf_counter() - started
            if verbose:  # every line, with the seconds since the call began: the gaps between runs show
                print(f"   {time.perf_counter() - started:7.1f}s {line}", flush=True)

        started = time.perf_counter()
        with TreeMemory() as memory:
            self.returncode = run_main_job(instance=instance, echo=echo, only_changed=only_changed, workers=workers)
        self.seconds = time.perf_counter() - started
        self.outputs_seconds = self.outputs_seconds or self.seconds
        self.peak_tree_mib = memory.peak_mib
        self.run_ids = [r.run_id for r in instance.get_runs() if r.run_id not in before]
        failed = [r for r in self.runs if not r[3]]
        if self.returncode or failed:
            print(f"!! {label}: run_main_job returned {self.returncode}; failed runs: {failed}")
            print("\n".join(self.lines[-40:]))

    def took(self) -> str:
        """The wall time; when the run also prepared a sampler, first the time to its last output."""
        if any(job == PREPARE_JOB for job, *_rest in self.runs):
            return (
                f"{self.outputs_seconds:.1f} s to the last output, {self.seconds:.1f} s with the sampler the "
                "suite fits asked for prepared beside it"
            )
        return f"{self.seconds:.1f} s"

    def per_stage(self) -> dict[str, list[float]]:
        stages: dict[str, list[float]] = defaultdict(list)
        for job, _label, seconds, _ok in self.runs:
            stages[job].append(seconds)
        return stages


def per_asset(instance, run_ids) -> dict[str, tuple[float, int]]:
    """Step key -> (summed step wall seconds, number of steps) over the given runs."""
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for run_id in run_ids:
        for step in instance.get_run_step_stats(run_id):
            if step.start_time and step.end_time:
                totals[step.step_key][0] += step.end_time - step.start_time
                totals[step.step_key][1] += 1
    return {k: (v[0], v[1]) for k, v in totals.items()}


def glm_statuses(instance, run_ids) -> dict[str, int]:
    """Counts of the `status` metadata of every GLM materialisation made by the given runs."""
    from dagster import AssetRecordsFilter

    from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS

    wanted = set(run_ids)
    counts: dict[str, int] = defaultdict(int)
    for assets_def in PARTITION_GLM_ASSETS + SUITE_GLM_ASSETS:
        for key in assets_def.keys:
            cursor = None
            while True:
                page = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1000, cursor=cursor)
                for record in page.records:
                    if record.run_id in wanted:
                        status = record.asset_materialization.metadata.get("status")
                        counts[status.value if status is not None else "(no status)"] += 1
                if not page.has_more:
                    break
                cursor = page.cursor
    return dict(counts)


def print_stages(timed: Timed) -> None:
    stages = timed.per_stage()
    print(f"{'stage':<16} {'runs':>5} {'seconds':>9} {'per run':>9} {'median':>8}")
    for stage in STAGES:
        times = stages.get(stage, [])
        if times:
            print(
                f"{stage:<16} {len(times):5d} {sum(times):9.1f} {sum(times) / len(times):9.2f} {statistics.median(times):8.2f}"
            )
        else:
            print(f"{stage:<16} {0:5d} {0.0:9.1f}")
    overhead = timed.seconds - sum(sum(t) for t in stages.values())
    if overhead >= 0:
        print(f"{'(discovery etc.)':<16} {'':>5} {overhead:9.1f}")
    else:  # runs of a stage overlapped (--workers): their seconds add up to more than the wall time
        print(f"{'(runs overlapped)':<16} {'':>5} {'':>9}")
    print(f"{'total (wall)':<16} {len(timed.runs):5d} {timed.seconds:9.1f}")


def print_assets(instance, run_ids) -> None:
    steps = per_asset(instance, run_ids)
    print(f"{'asset (step)':<28} {'steps':>5} {'seconds':>9}")
    for key, (seconds, count) in sorted(steps.items(), key=lambda kv: -kv[1][0]):
        print(f"{key:<28} {count:5d} {seconds:9.1f}")
    print(f"{'sum of steps':<28} {sum(c for _s, c in steps.values()):5d} {sum(s for s, _c in steps.values()):9.1f}")


def peak_rss_mib() -> float:
    """Peak resident memory of this process (VmHWM), MiB: everything runs in it (execute_in_process).
    Not ru_maxrss of the children: Linux carries ru_maxrss over fork+exec, so a child reports at
    least its parent's peak."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def source_version() -> str:
    """Hash of the model and fit code: what the fits' provenance records (assets.fits.glm_version)."""
    from evalpipeline.lake.versions import code_version

    return code_version(["evalpipeline.models", "evalpipeline.steps.fits"])


def warn_if_code_changed(started_version: str) -> bool:
    """A fit's provenance hashes the source files as they are on disk when it runs, so another
    edit to them mid-benchmark makes reruns refit; say so rather than report it as a cost."""
    if source_version() != started_version:
        print(
            "WARNING: evalpipeline/models or evalpipeline/steps/fits.py changed on disk during the benchmark: "
            "fits after the change refit by design; rerun from a frozen checkout (e.g. `git worktree add`)"
        )
        return True
    return False


def timed_nightly(heading: str, instance, verbose: bool, workers: int) -> tuple[Timed, dict[str, int]]:
    """Run the nightly (`only_changed=True`) and print its wall time, GLM statuses, stages and assets."""
    run = Timed(heading, instance, only_changed=True, verbose=verbose, workers=workers)
    counts = glm_statuses(instance, run.run_ids)
    print(f"\n{heading} (MEASURED; {load()}): {run.took()}, {len(run.run_ids)} run(s); GLM materialisations {counts}")
    print_stages(run)
    print()
    print_assets(instance, run.run_ids)
    return run, counts


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# -- demo + no-op -----------------------------------------------------------------------------


def run_demo(args, work: Path) -> int:
    from resources.run.loop import local_instance

    shutil.copytree(DEMO_LOGS, work / "landing")
    instance = local_instance()
    version = source_version()
    print(
        f"demo: {len(list((work / 'landing').iterdir()))} logs, --glm {args.glm}; {load()}, {os.cpu_count()} cores",
        flush=True,
    )

    first = Timed("demo", instance, verbose=args.verbose, workers=args.workers)
    print(f"\n(a) full demo job, fresh lake and instance (MEASURED; {load()})")
    print_stages(first)
    print()
    print_assets(instance, first.run_ids)
    print(f"GLM materialisations: {glm_statuses(instance, first.run_ids)}")

    plain = Timed("rerun", instance, verbose=args.verbose, workers=args.workers)
    changed = Timed("only_changed", instance, only_changed=True, verbose=args.verbose, workers=args.workers)
    print(f"\n(b) no-op reruns over unchanged logs (MEASURED; {load()})")
    print(f"{'rerun':<24} {'runs':>5} {'seconds':>9} {'/ (a)':>7} {'fitted':>7} {'reused':>7} {'n/a':>5}")
    fitted_total = 0
    for timed in (plain, changed):
        counts = glm_statuses(instance, timed.run_ids)
        fitted_total += counts.get("fitted", 0)
        label = "plain" if timed is plain else "only_changed=True"
        print(
            f"{label:<24} {len(timed.runs):5d} {timed.seconds:9.1f} {timed.seconds / first.seconds:7.3f} "
            f"{counts.get('fitted', 0):7d} {counts.get('reused', 0):7d} {counts.get('not applicable', 0):5d}"
        )
    for timed in (plain, changed):
        print(f"\nstages of the {timed.label} rerun:")
        print_stages(timed)
    print(
        f"\npeak memory: {max(t.peak_tree_mib for t in (first, plain, changed)):.0f} MiB, this process and its "
        f"{args.workers} worker(s) (and their forkserver) together (this process alone: {peak_rss_mib():.0f} MiB); {load()}"
    )
    warn_if_code_changed(version)
    ok = fitted_total == 0 and not (first.returncode or plain.returncode or changed.returncode)
    print("no-op reruns fitted nothing: " + ("yes" if fitted_total == 0 else f"NO ({fitted_total} fits)"))
    return 0 if ok else 1


# -- scale ------------------------------------------------------------------------------------


def write_model_table(landing: Path, index: int, suites: int, items: int, seed: int, item_sd: float = 0.0) -> Path:
    """One model's long table: every suite x item, one attempt each, with planted accuracies."""
    path = landing / f"model-{index:03d}.parquet"
    model_table(index, suites, items, seed, item_sd).to_parquet(path, index=False)
    return path


def model_table(index: int, suites: int, items: int, seed: int, item_sd: float = 0.0) -> pd.DataFrame:
    """The rows of :func:`write_model_table`: logit accuracy = ability - suite hardness - item difficulty,
    item difficulty ~ N(0, item_sd) per suite (0: every item of a suite equally hard)."""
    rng = np.random.default_rng([seed, index])
    ability = np.random.default_rng([seed, 10_000 + index]).normal(0.0, 1.0)
    frames = []
    for s in range(suites):
        hardness = np.random.default_rng([seed, 20_000 + s]).normal(0.0, 0.7)
        difficulty = np.random.default_rng([seed, 30_000 + s]).normal(0.0, item_sd, items) if item_sd else 0.0
        accuracy = 1.0 / (1.0 + np.exp(-(ability - hardness - difficulty)))
        frames.append(
            pd.DataFrame(
                {
                    "model": f"bench/model-{index:03d}",
                    "suite": f"suite{s}",
                    "domain": f"domain{s % 3}",
                    "subdomain": [f"sub{s}-{i % 4}" for i in range(items)],
                    "item_id": [f"s{s}-q{i:03d}" for i in range(items)],
                    "score": (rng.random(items) < accuracy).astype(float),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def suite_frame(models: int, items: int, seed: int, item_sd: float) -> pd.DataFrame:
    """One suite's samples of ``models`` models (:func:`model_table`), one attempt each, as the ingest leaves them."""
    frame = pd.concat([model_table(i, 1, items, seed, item_sd) for i in range(models)], ignore_index=True)
    return frame.assign(epoch=1, error=None, limit=None)


# -- suite steps at the leaderboard size --------------------------------------------------------


def run_suite_steps(args) -> int:
    """Measure, at the full size and without extrapolating, the two suite-level steps whose cost
    grows with the models: one suite's multi-LLM GLM on every model, and the pairwise rows."""
    from evalpipeline.settings import load_glm_config
    from evalpipeline.models import GlmData
    from evalpipeline.models.fit import configure_jax, fit_glm
    from evalpipeline.stats.compare import pairwise_table

    suite = pd.concat(
        [model_table(i, 1, args.items, args.seed, args.item_sd) for i in range(args.models)], ignore_index=True
    )
    suite = suite.assign(epoch=1, error=None, limit=None)
    print(
        f"suite steps: one suite, {args.models} models x {args.items} items = {len(suite)} rows; --glm {args.glm}; "
        f"item sd {args.item_sd}; "
        f"{load()}",
        flush=True,
    )
    subset = sorted(suite["model"].unique())[: args.pair_models]
    pairs = len(subset) * (len(subset) - 1) // 2
    started = time.perf_counter()
    table = pairwise_table(suite[suite["model"].isin(subset)])
    seconds = time.perf_counter() - started
    all_pairs = args.models * (args.models - 1) // 2
    print(
        f"pairwise rows (MEASURED): {pairs} pairs of {len(subset)} models in {seconds:.1f} s = "
        f"{seconds / len(table) * 1000:.0f} ms a pair; a full table of {args.models} models is {all_pairs} pairs "
        f"= {seconds / len(table) * all_pairs:.0f} s per suite (per-pair cost times pairs)",
        flush=True,
    )
    config = load_glm_config()
    # the pipeline's persistent compilation cache, cold: the first fit compiles, the refit with one more
    # model (what a nightly does when a model joins) reuses it when the padded shape is unchanged
    configure_jax(compilation_cache_dir=args.jax_cache or Path(tempfile.mkdtemp(prefix="jax-cache-")))
    joined = pd.concat(
        [
            suite,
            model_table(args.models, 1, args.items, args.seed, args.item_sd).assign(epoch=1, error=None, limit=None),
        ],
        ignore_index=True,
    )
    for label, rows in (
        (f"{args.models} models, compilation included", suite),
        (f"{args.models + 1} models (one joined), compiled sampler reused if the shape is", joined),
    ):
        data = GlmData.from_samples(rows, graded=config.graded, graded_threshold=config.graded_threshold)
        started = time.perf_counter()
        fit = fit_glm(
            "suite_binomial",
            data,
            config.settings,
            config.thresholds,
            "suite0|suite_binomial",
            priors=config.priors.get("suite_binomial"),
        )
        seconds = time.perf_counter() - started
        attempts = ", ".join(
            f"attempt {a['attempt']} at target accept {a['target_accept']}: {a['seconds']:.1f} s "
            f"({'passed' if a['passed'] else 'failed ' + '/'.join(a['failed'])})"
            for a in fit.attempts
        )
        print(
            f"suite_binomial GLM (MEASURED, {label}): {data.n_units} units in {seconds:.1f} s; "
            f"centring {fit.metadata['parameterisation']}; {attempts}",
            flush=True,
        )
    return 0


def run_suite_grid(args) -> int:
    """The suite GLM on one leaderboard suite with the linear predictor as an LLM x task outer sum
    (``[glm] unit_grid``, the default) and with per-unit gathers, alternately in one process after a
    warm-up fit of each (compilation), so that both meet the same machine; prints the ratio."""
    import dataclasses

    from evalpipeline.settings import load_glm_config
    from evalpipeline.models import Fitter, GlmData
    from evalpipeline.models.fit import configure_jax, fit_glm

    suite = pd.concat(
        [model_table(i, 1, args.items, args.seed, args.item_sd) for i in range(args.models)], ignore_index=True
    )
    config = load_glm_config()
    data = GlmData.from_samples(
        suite.assign(epoch=1, error=None, limit=None), graded=config.graded, graded_threshold=config.graded_threshold
    )
    print(
        f"suite grid: one suite, {args.models} models x {args.items} items = {data.n_units} units; --glm {args.glm}; "
        f"item sd {args.item_sd}; {args.repeats} timed fit(s) of each layout after a warm-up fit; {load()}",
        flush=True,
    )
    configure_jax(compilation_cache_dir=args.jax_cache or Path(tempfile.mkdtemp(prefix="jax-cache-")))
    fitter, seconds, last = Fitter(), {True: [], False: []}, {}
    for round_ in range(args.repeats + 1):
        for grid in (True, False):
            settings = dataclasses.replace(config.settings, unit_grid=grid)
            started = time.perf_counter()
            fit = fit_glm(
                "suite_binomial",
                data,
                settings,
                config.thresholds,
                "suite0|suite_binomial",
                fitter=fitter,
                priors=config.priors.get("suite_binomial"),
            )
            took = time.perf_counter() - started
            label = "grid" if grid else "per-unit"
            attempts = ", ".join(
                f"{a['seconds']:.1f} s ({'passed' if a['passed'] else 'failed'})" for a in fit.attempts
            )
            print(
                f"  {'warm-up' if round_ == 0 else f'fit {round_}'} {label:>8}: {took:6.1f} s; attempts {attempts}; "
                f"{fit.metadata['layout']['units']} padded units",
                flush=True,
            )
            if round_:
                seconds[grid].append(fit.attempts[0]["seconds"])
            last[grid] = fit.summary[fit.summary.parameter == "model"].set_index("model")
    grid_s, unit_s = np.mean(seconds[True]), np.mean(seconds[False])
    print(
        f"first attempt, mean of {args.repeats} (MEASURED): grid {grid_s:.1f} s, per-unit {unit_s:.1f} s; "
        f"ratio grid / per-unit {grid_s / unit_s:.2f}"
    )
    gap = (last[True]["mean"] - last[False]["mean"]).abs()
    se = np.sqrt(last[True]["sd"] ** 2 / last[True]["ess_bulk"] + last[False]["sd"] ** 2 / last[False]["ess_bulk"])
    print(
        f"model effects, last fits: largest |difference| / its Monte Carlo standard error = {float((gap / se).max()):.2f} "
        f"over {len(gap)} models (same posterior: mostly below 2, rarely above 4)"
    )
    return 0


def run_scale(args, work: Path) -> int:
    from resources.run.loop import local_instance

    landing = work / "landing"
    landing.mkdir()
    for index in range(args.models):
        write_model_table(landing, index, args.suites, args.items, args.seed, args.item_sd)
    partitions = args.models * args.suites
    instance = local_instance()
    version = source_version()
    print(
        f"scale: {args.models} models x {args.suites} suites x {args.items} items = {partitions * args.items} rows, "
        f"{partitions} partitions; --glm {args.glm} {args.glm_models or ''}; {load()}",
        flush=True,
    )

    full = Timed("full", instance, verbose=args.verbose, workers=args.workers)
    print(f"\nfull rebuild, {args.models} models (MEASURED; {load()}): {full.took()}")
    print_stages(full)
    print()
    print_assets(instance, full.run_ids)
    print(f"GLM materialisations: {glm_statuses(instance, full.run_ids)}")

    write_model_table(landing, args.models, args.suites, args.items, args.seed, args.item_sd)
    new = timed_nightly(
        f"one new model, only_changed=True, {args.models + 1} models", instance, args.verbose, args.workers
    )[0]
    warn_if_code_changed(version)
    print(
        f"\npeak memory (MEASURED): {max(full.peak_tree_mib, new.peak_tree_mib):.0f} MiB, this process and its "
        f"{args.workers} worker(s) (and their forkserver) together (this process alone: {peak_rss_mib():.0f} MiB)"
    )

    if (args.models, args.suites) != (LEADERBOARD["models"], LEADERBOARD["suites"]) or args.items != LEADERBOARD[
        "items"
    ]:
        extrapolate(args, full, new, instance)
    else:
        # judged on the time to the last output: a sampler prepared beside it is for a later night's model
        print(
            f"\ntargets (MEASURED, to the last output): full rebuild {full.outputs_seconds:.0f} s vs {TARGET_FULL_S:.0f} s "
            f"({'met' if full.outputs_seconds < TARGET_FULL_S else 'MISSED'}); one new model {new.outputs_seconds:.0f} s "
            f"vs {TARGET_NEW_MODEL_S:.0f} s ({'met' if new.outputs_seconds < TARGET_NEW_MODEL_S else 'MISSED'})"
        )
    return 1 if (full.returncode or new.returncode) else 0


def run_add_model(args, work: Path) -> int:
    """One more model into a lake that `scale --keep DIR` left (the nightly that follows a rebuild),
    measured without rebuilding: the next model's table is written with the generator settings the
    lake was built with (checked against its first model's file), then `only_changed=True` runs."""
    from resources.run.loop import local_instance

    landing = work / "landing"
    present = sorted(landing.glob("model-*.parquet"))
    if not present:
        raise SystemExit(f"{landing} holds no model-*.parquet tables")
    first = pd.read_parquet(present[0])
    if not first.equals(
        model_table(int(present[0].stem.split("-")[1]), args.suites, args.items, args.seed, args.item_sd)
    ):
        raise SystemExit(
            f"{present[0]} was not generated with --suites {args.suites} --items {args.items} "
            f"--seed {args.seed} --item-sd {args.item_sd}: pass the settings the lake was built with"
        )
    index = max(int(path.stem.split("-")[1]) for path in present) + 1
    instance = local_instance()
    version = source_version()
    print(
        f"add-model: model {index} joins {len(present)} models x {args.suites} suites x {args.items} items in "
        f"{work}; {load()}",
        flush=True,
    )
    write_model_table(landing, index, args.suites, args.items, args.seed, args.item_sd)
    new = timed_nightly(
        f"one new model, only_changed=True, {len(present) + 1} models", instance, args.verbose, args.workers
    )[0]
    warn_if_code_changed(version)
    print(
        f"\npeak memory (MEASURED): {new.peak_tree_mib:.0f} MiB, this process and its {args.workers} worker(s) "
        f"(and their forkserver) together; target for one new model {TARGET_NEW_MODEL_S:.0f} s "
        f"({'met' if new.outputs_seconds < TARGET_NEW_MODEL_S else 'MISSED'}, {new.outputs_seconds:.1f} s to the last output)"
    )
    return 1 if new.returncode else 0


def run_rerun(work: Path, verbose: bool, workers: int) -> int:
    """The nightly over unchanged logs on a lake that `scale --keep DIR` left: it must fit nothing
    (exit 1 otherwise) and should take seconds, at the leaderboard's size as on the demo."""
    from resources.run.loop import local_instance

    instance = local_instance()
    version = source_version()
    print(f"rerun: the nightly over the unchanged logs in {work / 'landing'}; {load()}", flush=True)
    rerun, counts = timed_nightly("no-op rerun, only_changed=True", instance, verbose, workers)
    warn_if_code_changed(version)
    fitted = counts.get("fitted", 0)
    print("no-op rerun fitted nothing: " + ("yes" if fitted == 0 else f"NO ({fitted} fits)"))
    return 1 if rerun.returncode or fitted else 0


#: How each asset's cost grows with the number of models on a fixed set of suites: partition-level
#: work and per-model work linearly; a suite GLM with its units (models x items), linearly; the
#: pairwise comparison with the pairs, quadratically; lake-wide tables with the fits they read.
SCALING = {
    "eval_samples": 1,
    "accuracy_posteriors": 1,
    "reliability": 1,
    "glm_binomial": 1,
    "glm_beta_binomial": 1,
    "glm_null": 1,
    "glm_item_difficulty": 1,
    "suite_leaderboard": 1,
    "suite_glm_binomial": 1,
    "suite_glm_beta_binomial": 1,
    "suite_glm_nested": 1,
    "suite_glm_null": 1,
    "suite_comparison": 2,
    "model_reliability": 1,
    "model_profile": 1,
    "ingest_accounting": 1,
    "waic_rankings": 1,
    "report": 1,
}


#: For one new model: the pairwise comparison computes only the new model's pairs (the others are
#: reused), so it grows linearly too.
SCALING_NEW_MODEL = {**SCALING, "suite_comparison": 1}


def extrapolate(args, full: Timed, new: Timed, instance) -> None:
    """Per-asset extrapolation to 100 models on the measured suites, from the measured step times.

    Every run is a batch, so the summed step time of an asset is its cost for all the measured
    partitions; it is scaled by (100 / measured models) ** exponent (SCALING for the full rebuild,
    SCALING_NEW_MODEL for one new model; one-off costs such as JAX compilation are scaled too: an
    upper bound where they dominate). For one new model the per-partition steps cost what they
    cost for one model (measured). The wall-clock estimate scales the measured wall time by the
    growth of the summed step time, so it keeps the measured parallelism (--workers) and overhead.
    """
    factor = LEADERBOARD["models"] / args.models
    grow = (LEADERBOARD["models"] + 1) / (args.models + 1)
    full_steps, new_steps = per_asset(instance, full.run_ids), per_asset(instance, new.run_ids)
    partition_level = {
        "eval_samples",
        "accuracy_posteriors",
        "reliability",
        "glm_binomial",
        "glm_beta_binomial",
        "glm_null",
        "glm_item_difficulty",
    }
    print(
        f"\nEXTRAPOLATED to {LEADERBOARD['models']} models x {args.suites} suites x {args.items} items, per asset "
        f"(measured step seconds, summed over workers, x (models ratio) ** exponent; not measured):"
    )
    print(f"{'asset':<26} {'exp':>7} {'full s':>7} {'new s':>7} {'full s':>9} {'new-model s':>11}")
    print(f"{'':<26} {'':>7} {'measured':>15} {'extrapolated':>21}")
    full_total = new_total = 0.0
    for name in sorted(set(full_steps) | set(new_steps), key=lambda n: -full_steps.get(n, (0, 0))[0]):
        exponent, exponent_new = SCALING.get(name, 1), SCALING_NEW_MODEL.get(name, 1)
        measured = full_steps.get(name, (0.0, 0))[0]
        full_s = measured * factor**exponent
        added = new_steps.get(name, (0.0, 0))[0]
        new_s = added if name in partition_level else added * grow**exponent_new
        full_total += full_s
        new_total += new_s
        print(f"{name:<26} {exponent:3d}/{exponent_new:<3d} {measured:7.1f} {added:7.1f} {full_s:9.0f} {new_s:11.1f}")
    measured_full = sum(v[0] for v in full_steps.values())
    measured_new = sum(v[0] for v in new_steps.values())
    print(f"{'sum of steps':<26} {'':>7} {measured_full:7.1f} {measured_new:7.1f} {full_total:9.0f} {new_total:11.1f}")
    full_wall = full.seconds * full_total / measured_full
    new_wall = new.seconds * new_total / measured_new
    print(f"{'wall clock':<26} {'':>7} {full.seconds:7.1f} {new.seconds:7.1f} {full_wall:9.0f} {new_wall:11.1f}")
    print(
        f"targets (EXTRAPOLATED, wall clock with {args.workers} worker(s)): full rebuild {full_wall:.0f} s vs "
        f"{TARGET_FULL_S:.0f} s ({'met' if full_wall < TARGET_FULL_S else 'MISSED'}); one new model {new_wall:.0f} s "
        f"vs {TARGET_NEW_MODEL_S:.0f} s ({'met' if new_wall < TARGET_NEW_MODEL_S else 'MISSED'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "mode",
        choices=["demo", "scale", "suite-steps", "suite-grid", "add-model", "rerun"],
        help="demo: full demo job + no-op reruns; scale: generated lake; suite-steps: one suite's GLM "
        "and pairwise rows measured at the full size; suite-grid: that GLM with and without the "
        "LLM x task grid layout; add-model: one more model into the lake "
        "`scale --keep DIR` left (pass its --suites/--items/--seed/--item-sd); rerun: the nightly over "
        "that lake's unchanged logs (must fit nothing)",
    )
    parser.add_argument("--glm", choices=["fast", "paper"], default="fast")
    parser.add_argument(
        "--glm-models", default=None, help="comma-separated [glm] models (default: fast's binomial,suite_binomial)"
    )
    parser.add_argument("--models", type=int, default=LEADERBOARD["models"])
    parser.add_argument("--suites", type=int, default=LEADERBOARD["suites"])
    parser.add_argument("--items", type=int, default=LEADERBOARD["items"])
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--item-sd", type=float, default=0.0, help="sd of planted item difficulties (logit); 0 = none")
    parser.add_argument(
        "--pair-models", type=int, default=25, help="suite-steps: time the pairwise rows of this many models"
    )
    parser.add_argument("--repeats", type=int, default=2, help="suite-grid: timed fits of each layout")
    parser.add_argument(
        "--jax-cache", type=Path, default=None, help="JAX compilation cache (default: cold, in the work folder)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="work in this (new) folder and keep it; add-model, rerun: the folder `scale --keep` left",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print each line run_main_job prints, with the seconds since it began"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help=f"run_main_job's worker processes (default: the cores available, {len(os.sched_getaffinity(0))})",
    )
    args = parser.parse_args()
    glm_models = args.glm_models.split(",") if args.glm_models else None
    args.glm_models = glm_models

    if args.mode == "add-model":
        if args.keep is None:
            parser.error("add-model needs --keep DIR: the folder an earlier `scale --keep DIR` left")
        setup_environment(args.keep, args.glm, glm_models, args.jax_cache, reuse=True)
        return run_add_model(args, args.keep)
    if args.mode == "rerun":
        if args.keep is None:
            parser.error("rerun needs --keep DIR: the folder an earlier `scale --keep DIR` left")
        setup_environment(args.keep, args.glm, glm_models, args.jax_cache, reuse=True)
        return run_rerun(args.keep, args.verbose, args.workers)
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        work = args.keep or Path(tmp)
        setup_environment(work, args.glm, glm_models, args.jax_cache)
        if args.mode == "suite-steps":
            return run_suite_steps(args)
        if args.mode == "suite-grid":
            return run_suite_grid(args)
        return run_demo(args, work) if args.mode == "demo" else run_scale(args, work)


if __name__ == "__main__":
    sys.exit(main())
