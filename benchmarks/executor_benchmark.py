"""The demo job under the local multiprocess executor and under Dask, on the same input.

    .venv/bin/python benchmarks/executor_benchmark.py [--workers 2] [--concurrent-runs 2]
        [--landing data/inspect_logs] [--only MODEL SUITE]... [--partitions-only | --asset NAME...]

Starts a Dask scheduler and --workers worker processes on loopback, then runs the whole
demo job twice -- ingest_and_fit for every landing partition, then suite_analysis and
suite_comparisons per suite, model_analysis per model and lake_reports, in the order of
`evalpipeline run` (--partitions-only or --asset: ingest_and_fit alone) -- each time from a fresh driver process
(`python -m resources.executors`) with its own temporary lake and Dagster instance: once with
EVALPIPELINE_EXECUTOR unset (local multiprocess executor) and once with
EVALPIPELINE_EXECUTOR=dask. Both use the same number of concurrent runs. Prints, per asset,
the summed step wall time (STEP_START to STEP_SUCCESS in the event log) under each executor,
the driver's total wall time, the ratios local / dask (> 1: Dask faster), and whether every Parquet
table of the two lakes is equal (exit status 1 if one differs or a run failed). Worker start-up
is not counted: a Dask cluster is long-lived. The JAX compilation cache lives in each lake,
so both executors start cold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from resources.executors import DASK_SCHEDULER_ENV, EXECUTOR_ENV, start_dask_cluster

REPO = Path(__file__).resolve().parents[1]


def run_driver(work: Path, name: str, executor_env: dict[str, str], args) -> dict:
    home = work / f"home-{name}"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k not in (EXECUTOR_ENV, DASK_SCHEDULER_ENV)}
    env.update(executor_env, DAGSTER_HOME=str(home))
    report = work / f"{name}.json"
    cmd = [
        sys.executable,
        "-m",
        "resources.executors",
        "--lake",
        str(work / f"lake-{name}"),
        "--landing",
        str(args.landing),
        "--concurrent-runs",
        str(args.concurrent_runs),
        "--json",
        str(report),
    ]
    for model, suite in args.only or []:
        cmd += ["--only", model, suite]
    for asset in args.asset or []:
        cmd += ["--asset", asset]
    if not (args.asset or args.partitions_only):
        cmd.append("--all-stages")
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} driver failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    return json.loads(report.read_text())


def per_asset(report: dict) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for run in report["runs"]:
        for step, seconds in run["step_seconds"].items():
            totals[step] += seconds
    return totals


def compare_lakes(local: Path, dask: Path) -> tuple[int, list[str]]:
    """Every Parquet table of the two lakes, compared exactly: (tables compared, those that differ or
    exist in one lake only)."""
    import pandas as pd

    tables = {lake: {str(p.relative_to(lake)) for p in lake.rglob("*.parquet")} for lake in (local, dask)}
    differ = sorted(tables[local] ^ tables[dask])
    for name in sorted(tables[local] & tables[dask]):
        try:
            pd.testing.assert_frame_equal(pd.read_parquet(local / name), pd.read_parquet(dask / name), check_exact=True)
        except AssertionError:
            differ.append(name)
    return len(tables[local] | tables[dask]), differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrent-runs", type=int, default=2)
    parser.add_argument("--landing", type=Path, default=REPO / "data" / "inspect_logs")
    parser.add_argument("--only", nargs=2, action="append", metavar=("MODEL", "SUITE"))
    parser.add_argument("--asset", action="append", help="ingest_and_fit only, these assets of it (repeatable)")
    parser.add_argument("--partitions-only", action="store_true", help="ingest_and_fit only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="executor-bench-") as tmp:
        work = Path(tmp)
        local = run_driver(work, "local", {}, args)
        with start_dask_cluster(args.workers, log_dir=work / "dask") as cluster:
            dask = run_driver(work, "dask", {EXECUTOR_ENV: "dask", DASK_SCHEDULER_ENV: cluster.address}, args)
        compared, differ = compare_lakes(work / "lake-local", work / "lake-dask")
    local_steps, dask_steps = per_asset(local), per_asset(dask)
    stages = "ingest_and_fit" if args.asset or args.partitions_only else "every stage of the demo job"
    print(
        f"{len(local['runs'])} runs ({stages}), {args.concurrent_runs} at a time; Dask: {args.workers} workers x 1 thread"
    )
    print(f"{'asset':<24} {'local s':>9} {'dask s':>9} {'local/dask':>10}")
    for asset in sorted(set(local_steps) | set(dask_steps)):
        l, d = local_steps.get(asset, 0.0), dask_steps.get(asset, 0.0)
        print(f"{asset:<24} {l:9.1f} {d:9.1f} {l / d if d else float('nan'):10.2f}")
    lw, dw = local["wall_seconds"], dask["wall_seconds"]
    failed = [
        f"{name}: {r['partition_key'] or 'lake'}"
        for name, report in (("local", local), ("dask", dask))
        for r in report["runs"]
        if not r["success"]
    ]
    print(
        f"{'whole job (wall)':<24} {lw:9.1f} {dw:9.1f} {lw / dw:10.2f}"
        + (f"   FAILED runs: {failed}" if failed else "")
    )
    print(f"Parquet tables of the two lakes, compared exactly: {compared}; differing: {differ or 'none'}")
    return 1 if failed or differ else 0


if __name__ == "__main__":
    sys.exit(main())
