"""Peak memory of one large suite GLM fit: this checkout against an earlier commit.

    .venv/bin/python benchmarks/pointwise_memory_benchmark.py [--baseline-rev 854e834] [--models 93]
        [--items 1136] [--warmup 2000] [--draws 2000] [--this-draws 500 2000]

LiveBench as a single suite: ``--models`` models x ``--items`` questions, one 0/1 attempt each
(``pipeline_benchmark.suite_frame``, planted abilities and difficulties), fitted with
``suite_binomial`` alone at 4 chains x ``--draws`` draws, in a fresh child process per fit (one XLA
and BLAS thread, as the pipeline's steps run). A fit's pointwise log-likelihood is draws x units
(4 x 2,000 x 106,000 here) and WAIC / PSIS-LOO need every draw of every unit; the child reports its
peak resident memory (``ru_maxrss``), its wall seconds, WAIC and PSIS-LOO and the LLM effects' means.

Runs the baseline (``--baseline-rev`` in a temporary git worktree: run it in a clone) at ``--draws``
and this checkout at each of ``--this-draws`` (default: ``--draws``), and prints the peaks, the ratio
baseline / this checkout, and how far the two fits at ``--draws`` are apart (largest LLM-effect
difference in posterior SDs; WAIC and PSIS-LOO differences).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from child import run_json_child  # noqa: E402

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[5])
models, items, warmup, draws = (int(x) for x in sys.argv[1:5])
from pipeline_benchmark import suite_frame
from evalpipeline.models import FitSettings, GlmData, fit_glm

data = GlmData.from_samples(suite_frame(models, items, 0, 1.0))
started = time.perf_counter()
fit = fit_glm("suite_binomial", data, FitSettings(num_warmup=warmup, num_samples=draws), seed_key="memory")
seconds = time.perf_counter() - started
effects = fit.summary[fit.summary["parameter"] == "model"]
criteria = fit.criteria
print(json.dumps({
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "seconds": seconds,
    "units": data.n_units,
    "passed": bool(fit.passed),
    "elpd_waic": float(criteria.waic_i.sum()),
    "elpd_loo": float(criteria.loo_i.sum()),
    "effect_mean": effects["mean"].tolist(),
    "effect_sd": effects["sd"].tolist(),
}))
"""


def run_child(tree: Path, args, draws: int) -> dict:
    command = [sys.executable, "-c", CHILD, str(args.models), str(args.items), str(args.warmup), str(draws)]
    return run_json_child(tree, command + [str(REPO / "benchmarks")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="854e834")
    parser.add_argument("--models", type=int, default=93)
    parser.add_argument("--items", type=int, default=1136)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=2000, help="draws per chain of both trees' fits")
    parser.add_argument(
        "--this-draws", type=int, nargs="*", default=None, help="this checkout's draws (default --draws)"
    )
    args = parser.parse_args()
    this_draws = sorted(set(args.this_draws or []) | {args.draws})

    import numpy as np

    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as work:
        baseline = Path(work) / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
            check=True,
            capture_output=True,
        )
        try:
            runs = [(f"baseline {args.baseline_rev}", baseline, args.draws)]
            runs += [("this checkout", REPO, draws) for draws in this_draws]
            for name, tree, draws in runs:
                rows.append((name, draws, run_child(tree, args, draws)))
                print(f"{name}, {draws} draws: done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)

    units = rows[0][2]["units"]
    print(
        f"suite_binomial, {args.models} models x {args.items} items = {units} units, one attempt each; "
        f"4 chains x ({args.warmup} warmup + draws); {time.time() - started:.0f} s; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'tree':<24}{'draws':>7}{'draws x units':>16}{'peak MiB':>10}{'wall s':>9}  gates")
    for name, draws, result in rows:
        print(
            f"{name:<24}{draws:>7}{4 * draws * units:>16,}{result['peak_mib']:>10,.0f}{result['seconds']:>9.1f}  "
            + ("passed" if result["passed"] else "failed")
        )
    base = rows[0][2]
    this = next(result for name, draws, result in rows[1:] if draws == args.draws)
    print(f"peak memory baseline / this checkout at {args.draws} draws: {base['peak_mib'] / this['peak_mib']:.2f}x")
    gap = np.abs(np.subtract(base["effect_mean"], this["effect_mean"])) / np.asarray(base["effect_sd"])
    print(
        f"LLM effects: largest difference {gap.max():.3g} posterior SDs; WAIC {base['elpd_waic']:.3f} against "
        f"{this['elpd_waic']:.3f}, PSIS-LOO {base['elpd_loo']:.3f} against {this['elpd_loo']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
