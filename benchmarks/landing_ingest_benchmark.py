"""An ingest step on a leaderboard-sized landing folder: this checkout against an earlier commit.

    .venv/bin/python benchmarks/landing_ingest_benchmark.py [--baseline-rev a4790a0] [--models 100]
                                                            [--measured 6] [--repeat 2] [--models-per-step 1]

The landing folder is ``pipeline_benchmark.py scale``'s: one long Parquet table per model, six
suites x 200 items each (``--models`` of them). What is timed is what one ``eval_samples`` step
does for ``--models-per-step`` models' six partitions each (10: a 60-partition range run): ``ingest_partitions`` (scan the landing folder for the files
holding them, stage the model's file, consolidate and validate each partition with Great
Expectations, Data Docs on) into a fresh lake, for ``--measured`` steps one after another, after
one untimed step that pays the imports and first-use costs. The step's own scan of the landing
folder (``find_log_files`` + ``scan_sources``) is also timed alone.

Each code tree runs in its own child process: this checkout, and ``--baseline-rev`` checked out in a
temporary git worktree (run it in a clone). The two alternate ``--repeat`` times; the script prints
the medians and their ratio (baseline / this checkout: above 1 is faster), and exits 1 if the sample
tables the two trees wrote differ (compared by their rows, see ``fits.samples_content_hash``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path
from evalpipeline.steps.fits import samples_content_hash
from evalpipeline.ingest import find_log_files, scan_sources
from evalpipeline.lake import Lake
from evalpipeline.steps.samples import ingest_partitions, partition_validator
from evalpipeline.validate import ValidationSettings

landing, lake_dir, suites = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
steps_models = json.loads(sys.argv[4])
lake = Lake(lake_dir)
validator = partition_validator(lake, ValidationSettings())
steps, hashes = [], {}
for i, models in enumerate(steps_models):
    pairs = [(model, f"suite{s}") for model in models for s in range(suites)]
    t = time.perf_counter()
    ingest_partitions(lake, landing, pairs, validator=validator)
    if i:  # the first pays imports, GX's start and the first compilations
        steps.append(time.perf_counter() - t)
    for pair in pairs:
        hashes["|".join(pair)] = samples_content_hash(lake.table_path("samples", "samples.parquet", *pair))
scans = []
for _ in range(3):
    t = time.perf_counter()
    scan_sources(find_log_files(landing))
    scans.append(time.perf_counter() - t)
print(json.dumps({"steps": steps, "scan": min(scans), "hashes": hashes}))
"""


def run_child(tree: Path, landing: Path, suites: int, models: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="ingest-bench-lake-") as lake:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(landing), lake, str(suites), json.dumps(models)],
            cwd=tree,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="a4790a0")
    parser.add_argument("--models", type=int, default=100, help="model tables in the landing folder")
    parser.add_argument("--suites", type=int, default=6)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--measured", type=int, default=6, help="steps timed, each ingesting --models-per-step models")
    parser.add_argument(
        "--models-per-step",
        type=int,
        default=1,
        help="models (x --suites partitions) one step ingests: 10 is a range run of 60 partitions",
    )
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "benchmarks"))
    from pipeline_benchmark import write_model_table

    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as work:
        work = Path(work)
        landing = work / "landing"
        landing.mkdir()
        for index in range(args.models):
            write_model_table(landing, index, args.suites, args.items, seed=0, item_sd=1.0)
        baseline = work / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
            check=True,
            capture_output=True,
        )
        try:
            trees = {f"baseline {args.baseline_rev}": baseline, "this checkout": REPO}
            per = args.models_per_step
            models = [[f"bench/model-{i:03d}" for i in range(k * per, (k + 1) * per)] for k in range(args.measured + 1)]
            results: dict[str, list[dict]] = {name: [] for name in trees}
            started = time.time()
            for _ in range(args.repeat):
                for name, tree in trees.items():
                    results[name].append(run_child(tree, landing, args.suites, models))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)

    print(
        f"landing: {args.models} model tables x {args.suites} suites x {args.items} items; {args.measured} "
        f"ingest steps of {args.models_per_step} model(s) timed per child, {args.repeat} children per tree, alternating; "
        f"{time.time() - started:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'tree':<28} {'step s (median)':>16} {'per partition s':>16} {'landing scan s':>15}")
    medians = {}
    for name, runs in results.items():
        step = statistics.median(s for run in runs for s in run["steps"])
        scan = statistics.median(run["scan"] for run in runs)
        medians[name] = (step, scan)
        print(f"{name:<28} {step:>16.2f} {step / (args.suites * args.models_per_step):>16.3f} {scan:>15.3f}")
    (base_step, base_scan), (step, scan) = medians.values()
    print(f"ratio baseline / this checkout: step {base_step / step:.2f}x, landing scan {base_scan / scan:.2f}x")
    hashes = [run["hashes"] for runs in results.values() for run in runs]
    same = all(h == hashes[0] for h in hashes)
    print(f"sample tables identical across trees and runs: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
