"""A prior edit, or a new model's log landing, under the real Dagster daemon: this checkout against an
earlier commit.

    .venv/bin/python benchmarks/daemon_benchmark.py --keep DIR [--baseline-rev REV] [--quiet 120] [--only baseline|this]
                                                    [--change prior|new-model] [--item-sd 0]

``DIR`` is a folder ``pipeline_benchmark.py scale --keep DIR`` left (its Dagster instance, lake, landing
folder and configuration). For each code tree, ``--baseline-rev`` first (checked out in a temporary git
worktree), then this checkout: DIR is restored to the state it was in when the benchmark started, a
``dagster-daemon`` is started on it with that tree's code (the repository's dagster.yaml: two runs at a
time, a fit pool of two; the nightly cron moved to 1 January so that only automation acts), and once it
has been idle for ``--quiet`` seconds a prior of the binomial GLM is edited
(``[glm.priors.binomial] sigma_subdomain_scale = 0.2``). Every ``glm_binomial`` fit is then stale;
automation refits them (the daemon reloads the code location, with the configuration, every 60 s) and
refreshes what reads them. The benchmark waits until no run or backfill is in flight for ``--quiet``
seconds, stops the daemon, and prints per tree: the seconds from the edit to the end of the last run,
from the first run's creation to that end, the runs by asset selection (a range run or one partition),
the failed runs, and how many ``glm_binomial`` partitions were refitted; then the ratio of the two trees'
seconds (``--only``: one tree, no ratio). DIR is left as it was found; do not open its instance while the
benchmark restores it between the trees.

``--change new-model``: instead of the edit, the next model's long table (all suites, as ``pipeline_benchmark.py
add-model`` writes it; pass the lake's ``--item-sd``) is written into the landing folder. The landing sensor
requests its partitions, automation refreshes the suites, models and report it feeds, and the same times are
printed from the moment the table landed. The lake's tables record their logs' absolute paths, so the trees run
in DIR itself, one after the other, never side by side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PRIOR_EDIT = "\n[glm.priors.binomial]\nsigma_subdomain_scale = 0.2\n"
NEVER = "0 0 1 1 *"  # the nightly's cron: 1 January, so that automation alone reacts to the edit
RANGE_START = "dagster/asset_partition_range_start"


def instance_state(home: Path):
    """(runs, backfills) of the instance at ``home``: a fresh handle each time, so that it sees what
    the daemon wrote since."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        return instance.get_run_records(), instance.get_backfills()


def in_flight(runs, backfills) -> bool:
    from dagster import DagsterRunStatus as S

    # a backfill's status by its value: Dagster does not export its BulkActionStatus enum
    return any(r.dagster_run.status in (S.NOT_STARTED, S.QUEUED, S.STARTING, S.STARTED) for r in runs) or any(
        b.status.value == "REQUESTED" for b in backfills
    )


def wait_quiet(home: Path, since: float | None, quiet: float, deadline: float) -> list:
    """Wait until nothing is in flight for ``quiet`` seconds (and, with ``since``, a run was created
    after it); return the runs created after ``since`` (all runs without it)."""
    calm = None
    while time.time() < deadline:
        runs, backfills = instance_state(home)
        recent = [r for r in runs if since is None or r.create_timestamp.timestamp() > since]
        if in_flight(runs, backfills) or (since is not None and not recent):
            calm = None
        elif calm is None:
            calm = time.time()
        elif time.time() - calm >= quiet:
            return recent
        time.sleep(5)
    raise SystemExit("the daemon did not become idle in time")


def glm_refits(home: Path, since: float) -> Counter:
    """glm_binomial materialisations after ``since``: their count per fit status, and the partitions."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        new = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("glm_binomial"), after_timestamp=float(since)), limit=10_000
        ).records
    counts = Counter(str(getattr(r.asset_materialization.metadata.get("status"), "value", "?")) for r in new)
    counts["partitions"] = len({r.partition_key for r in new})
    return counts


def write_next_model(keep: Path, item_sd: float) -> Path:
    """The next model's table in DIR's landing folder, generated as `pipeline_benchmark.py add-model` does
    (its default suites, items and seed; the first model's table must match them)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import pandas as pd
    from pipeline_benchmark import LEADERBOARD, model_table, write_model_table

    landing = keep / "landing"
    present = sorted(landing.glob("model-*.parquet"))
    settings = (LEADERBOARD["suites"], LEADERBOARD["items"], 20261122, item_sd)
    if not present or not pd.read_parquet(present[0]).equals(
        model_table(int(present[0].stem.split("-")[1]), *settings)
    ):
        raise SystemExit(
            f"{landing}: no model-*.parquet table generated with the default settings and --item-sd {item_sd}"
        )
    return write_model_table(landing, max(int(p.stem.split("-")[1]) for p in present) + 1, *settings)


def run_tree(code: Path, keep: Path, quiet: float, log: Path, change: str = "prior", item_sd: float = 0.0) -> dict:
    home = keep / "dagster_home"
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "DAGSTER_HOME": str(home),
        "EVALPIPELINE_LAKE": str(keep / "lake"),
        "EVALPIPELINE_LANDING": str(keep / "landing"),
        "EVALPIPELINE_CONFIG": str(keep / "evalpipeline.toml"),
        "EVALPIPELINE_JAX_CACHE": str(keep / "jax_cache"),
        "EVALPIPELINE_NIGHTLY_CRON": NEVER,
    }
    env.pop("EVALPIPELINE_EXECUTOR", None)
    deadline = time.time() + 4 * 3600
    with open(log, "w") as out:
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(code / "workspace.yaml")],
            cwd=code,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        time.sleep(90)  # its first ticks: whatever they do on the kept lake happens before the edit
        before = len(wait_quiet(home, None, quiet, deadline))
        edited = time.time()
        if change == "new-model":
            write_next_model(keep, item_sd)
        else:
            with open(keep / "evalpipeline.toml", "a") as config:
                config.write(PRIOR_EDIT)
        runs = wait_quiet(home, edited, quiet, deadline)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
    first = min(r.create_timestamp.timestamp() for r in runs)
    last = max(r.end_time or 0 for r in runs)
    kinds = Counter()
    for r in runs:
        selection = (
            ",".join(sorted(k.to_user_string() for k in (r.dagster_run.asset_selection or [])))
            or r.dagster_run.job_name
        )
        kind = (
            "range"
            if RANGE_START in r.dagster_run.tags
            else ("one" if "dagster/partition" in r.dagster_run.tags else "-")
        )
        kinds[f"{selection} ({kind})"] += 1
    return {
        "runs_before": before,
        "runs": len(runs),
        "from_edit": last - edited,
        "from_first_run": last - first,
        "failed": sum(r.dagster_run.status.value == "FAILURE" for r in runs),
        "kinds": kinds,
        "glm": glm_refits(home, edited),
    }


def restore(pristine: Path, keep: Path) -> None:
    shutil.rmtree(keep)
    shutil.copytree(pristine, keep, symlinks=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, required=True, help="a folder `pipeline_benchmark.py scale --keep` left")
    parser.add_argument(
        "--baseline-rev", default="cfa9bed", help="the earlier commit (default: before backfill ranges)"
    )
    parser.add_argument("--quiet", type=float, default=120, help="seconds without work in flight that mean idle")
    parser.add_argument("--only", choices=("baseline", "this"), help="measure one tree (no ratio)")
    parser.add_argument(
        "--change",
        choices=("prior", "new-model"),
        default="prior",
        help="what happens once the daemon is idle: a prior edit, or the next model's table landing",
    )
    parser.add_argument("--item-sd", type=float, default=0.0, help="with --change new-model: the lake's --item-sd")
    args = parser.parse_args()
    keep = args.keep.resolve()
    missing = [
        p.name
        for p in (keep / "dagster_home" / "dagster.yaml", keep / "lake", keep / "landing", keep / "evalpipeline.toml")
        if not p.exists()
    ]
    if missing:
        raise SystemExit(
            f"{keep} is not a folder that `pipeline_benchmark.py scale --keep` left: missing {', '.join(missing)}"
        )
    work = Path(tempfile.mkdtemp(prefix="daemon-bench-", dir=keep.parent))  # beside DIR: same file system
    pristine, baseline = work / "pristine", work / "baseline"
    shutil.copytree(keep, pristine, symlinks=True)
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
        check=True,
        capture_output=True,
    )
    results = {}
    try:
        trees = [(f"baseline {args.baseline_rev}", baseline), ("this checkout", REPO)]
        for name, code in [t for t, key in zip(trees, ("baseline", "this")) if args.only in (None, key)]:
            restore(pristine, keep)
            started = time.time()
            print(f"{name}: daemon on {keep} ...", flush=True)
            results[name] = run_tree(
                code, keep, args.quiet, work / f"daemon-{code.name}.log", args.change, args.item_sd
            )
            print(
                f"{name}: done in {time.time() - started:.0f} s (daemon log {work / f'daemon-{code.name}.log'}): "
                f"{results[name]}",
                flush=True,
            )
    finally:
        restore(pristine, keep)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)
        shutil.rmtree(pristine, ignore_errors=True)
    report(results, keep.name, args.change)
    return 0


def report(results: dict, lake_name: str, change: str = "prior") -> None:
    what, event = ("a new model's table landing", "landing") if change == "new-model" else ("prior edit", "edit")
    print(f"\n{what} under the daemon on {lake_name} (MEASURED, seconds of wall clock):")
    for name, r in results.items():
        print(
            f"  {name}: {r['runs']} runs ({r['failed']} failed; {r['runs_before']} before the {event}), "
            f"{r['from_edit']:.0f} s from the {event} to the last run's end, {r['from_first_run']:.0f} s from the "
            f"first run; glm_binomial fits {dict(r['glm'])}"
        )
        for kind, n in sorted(r["kinds"].items()):
            print(f"      {n:4d} x {kind}")
    if len(results) < 2:
        return
    base, this = results.values()
    print(
        f"  ratio this/baseline: {this['from_edit'] / base['from_edit']:.2f} from the {event}, "
        f"{this['from_first_run'] / base['from_first_run']:.2f} from the first run"
    )


if __name__ == "__main__":
    sys.exit(main())
