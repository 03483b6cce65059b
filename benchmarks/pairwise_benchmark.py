"""A suite's pairwise table with this checkout's code against an earlier commit's.

    .venv/bin/python benchmarks/pairwise_benchmark.py [--baseline-rev c66ef6f] [--models 30] [--items 200]
                                                      [--repeat 2]

``suite_comparison`` computes one row per pair of models (``stats.compare.pairwise_table``): the
independent Beta comparison (exact P(A > B), intervals from posterior draws), the paired logit model
with item effects and the bivariate probit, on grids, and two t-tests. At 100 models that is 4,950
rows a suite and most of the step. Each code tree runs in its own child process, the two alternating
``--repeat`` times: this checkout, and ``--baseline-rev`` checked out in a temporary git worktree
(run it in a clone). A child, on one BLAS thread as the pipeline's steps run, computes the table of
one generated suite (``pipeline_benchmark.suite_frame``: ``--models`` models with planted abilities x
``--items`` items with planted difficulties, one 0/1 attempt each) three times, with the per-process
grid caches emptied before each, and reports the best CPU seconds.

It prints the milliseconds per pair of each tree (median over its children), the ratio baseline /
this checkout (above 1: this checkout is faster), and how far the two tables are apart: the largest
absolute difference of the paired-logit and probit columns (the same computation up to rounding
when only speed changed), of the independent difference intervals and the largest relative one of
the independent odds-ratio quantiles (Monte Carlo quantiles: they move by Monte Carlo error when the
draws change), and whether the exact, HPDI, verdict and t-test columns are equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from child import run_json_child  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
models, items, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
from evalpipeline.stats import compare
from pipeline_benchmark import suite_frame

frame = suite_frame(models, items, 0, 1.0)
compare.pairwise_table(frame[frame["model"].isin(sorted(frame["model"].unique())[:3])])  # the fixed coarse grids
seconds = []
for _ in range(3):
    for name in ("_logit_grid", "_probit_theta_axis", "_probit_grid", "_prob_beta_greater"):  # those a commit has
        if hasattr(compare, name):
            getattr(compare, name).cache_clear()
    start = time.process_time()
    table = compare.pairwise_table(frame)
    seconds.append(time.process_time() - start)
table.to_parquet(out_path)
print(json.dumps({"seconds": min(seconds), "pairs": len(table)}))
"""

PAIRED = [
    "p_a_better_paired",
    "diff_mean_paired",
    "diff_low_paired",
    "diff_high_paired",
    "odds_ratio_median_paired",
    "odds_ratio_low_paired",
    "odds_ratio_high_paired",
    "p_a_better_probit",
    "diff_low_probit",
    "diff_high_probit",
]
INDEPENDENT = ["diff_low_independent", "diff_high_independent"]
ODDS_RATIOS = ["odds_ratio_median_independent", "odds_ratio_low_independent", "odds_ratio_high_independent"]
EQUAL = [
    "model_a",
    "model_b",
    "p_a_better_independent",
    "hpdi_low_a",
    "hpdi_high_b",
    "hpdi_verdict",
    "verdict",
    "t_unpaired_p",
    "t_paired_p",
]


def run_child(tree: Path, args, out_path: Path) -> dict:
    return run_json_child(
        tree, [sys.executable, "-c", CHILD, str(args.models), str(args.items), str(out_path), str(REPO / "benchmarks")]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="c66ef6f")
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.models < 2 or args.items < 2 or args.repeat < 1:
        parser.error("need --models and --items of at least 2 and --repeat of at least 1")

    import numpy as np
    import pandas as pd

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="pairwise-bench-") as work:
        baseline = Path(work) / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
            check=True,
            capture_output=True,
        )
        try:
            trees = {f"baseline {args.baseline_rev}": baseline, "this checkout": REPO}
            results: dict[str, list[dict]] = {name: [] for name in trees}
            tables = {name: Path(work) / f"table-{i}.parquet" for i, name in enumerate(trees)}
            for round_ in range(args.repeat):
                for name, tree in trees.items():
                    results[name].append(run_child(tree, args, tables[name]))
                    print(
                        f"round {round_ + 1}, {name}: done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True
                    )
            base_table, this_table = (pd.read_parquet(tables[name]) for name in trees)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)

    pairs = results["this checkout"][0]["pairs"]
    print(
        f"{args.models} models x {args.items} items, {pairs} pairs; {args.repeat} children per tree, alternating, "
        f"best of 3 tables each; {time.time() - started:.0f} s; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    medians = {}
    for name, runs in results.items():
        medians[name] = statistics.median(run["seconds"] for run in runs)
        each = ", ".join(f"{run['seconds']:.2f}" for run in runs)
        print(f"{name:<26} {1e3 * medians[name] / pairs:8.2f} ms a pair  (CPU s of each child: {each})")
    base, this = medians.values()
    print(f"{'ratio baseline/this':<26} {base / this:8.2f}x")
    for label, columns in (("paired logit and probit", PAIRED), ("independent intervals", INDEPENDENT)):
        diff = np.nanmax(np.abs(base_table[columns].to_numpy(float) - this_table[columns].to_numpy(float)))
        print(f"largest difference, {label}: {diff:.3g}")
    ratio = base_table[ODDS_RATIOS].to_numpy(float) / this_table[ODDS_RATIOS].to_numpy(float)
    print(f"largest relative difference, independent odds-ratio quantiles: {np.nanmax(np.abs(ratio - 1)):.3g}")
    same = [c for c in EQUAL if base_table[c].equals(this_table[c])]
    print(
        f"equal columns: {len(same)} of {len(EQUAL)}"
        + ("" if len(same) == len(EQUAL) else f" (differ: {sorted(set(EQUAL) - set(same))})")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
