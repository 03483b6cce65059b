"""The scale benchmark on a smaller lake: this checkout against an earlier commit, alternating.

    .venv/bin/python benchmarks/scale_ab_benchmark.py --baseline-rev REV [--models 20] [--rounds 2] [--item-sd 1]
        [--suites 6] [--items 200] [--glm fast|paper] [--glm-models binomial,beta_binomial,...]

Runs ``pipeline_benchmark.py scale`` (a full rebuild, then one new model; fresh folder, fresh
processes, a cold compilation cache) in ``REV`` checked out in a temporary git worktree and in this
checkout, ``--rounds`` times each, the order alternating between rounds (the baseline first in odd
rounds). The generator gives every item one attempt, as LiveBench's per-question results have;
``--glm paper`` fits at the paper's defaults (2,000 warmup + 2,000 draws x 4 chains). Prints each
run's wall seconds, then the medians per tree and the ratio this / baseline of: the rebuild's and
the new model's wall time, the rebuild's seconds per stage (the main job's runs), every asset's
step seconds in both, and the peak memory of the benchmark's process tree.

For a change whose effect shows only when a real run's steps share the cores (the fits beside the
ingest and the reliability steps of the other worker), which a benchmark of one kind of step alone
does not see. The host's speed drifts over the day, so only the ratios of one sitting mean anything.
Run it in a clone: the worktree is made from this repository's history.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_ASSET_ROW = re.compile(r"^(\w+)\s+(\d+)\s+([\d.]+)$")
_STAGE_ROW = re.compile(r"^(\w+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+$")


def parse(output: str) -> dict[str, float]:
    """Wall seconds of the rebuild and the new model, the rebuild's seconds per stage, per asset and
    part its step seconds, and the peak memory."""
    # "...: 200.9 s to the last output, 203.7 s with the sampler ... prepared beside it", or "...: 59.2 s"
    rebuild = re.search(r"^full rebuild, .*?\): ([\d.]+) s", output, re.M)
    new_model = re.search(r"^one new model, .*?: ([\d.]+) s, \d+ run", output, re.M)
    if not (rebuild and new_model):
        raise ValueError("the scale benchmark printed no rebuild or new-model time:\n" + output[-3000:])
    found = {"rebuild wall s": float(rebuild.group(1)), "new model wall s": float(new_model.group(1))}
    peak = re.search(r"^peak memory \(MEASURED\): (\d+) MiB", output, re.M)
    if peak:
        found["peak memory MiB"] = float(peak.group(1))
    parts = {"rebuild": output[: new_model.start()], "new model": output[new_model.start() :]}
    for line in parts["rebuild"].splitlines():
        row = _STAGE_ROW.match(line.strip())
        if row:
            found[f"rebuild stage {row.group(1)} s"] = float(row.group(3))
    for part, text in parts.items():
        for line in text.splitlines():
            row = _ASSET_ROW.match(line.strip())
            if row:
                found.setdefault(f"{part} {row.group(1)} step s", float(row.group(3)))
        steps = re.search(r"^sum of steps\s+\d+\s+([\d.]+)$", text, re.M)
        if steps:
            found[f"{part} sum of steps s"] = float(steps.group(1))
    return found


def run_scale(tree: Path, folder: Path, args) -> dict[str, float]:
    command = [
        sys.executable,
        str(tree / "benchmarks" / "pipeline_benchmark.py"),
        "scale",
        "--models",
        str(args.models),
        "--item-sd",
        str(args.item_sd),
        "--glm",
        args.glm,
        "--keep",
        str(folder),
    ]
    for option in ("suites", "items", "glm_models"):
        if getattr(args, option) is not None:
            command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    # the tree's own packages first (the editable install points at this checkout)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    try:
        found = parse(done.stdout)
    except ValueError as exc:
        raise SystemExit(f"scale run in {tree} printed no times (exit {done.returncode}): {exc}\n{done.stderr[-3000:]}")
    # exit 1: a run failed (e.g. a fit that diverged on both attempts); its times still count, as in a night
    found["failed runs (exit status)"] = float(done.returncode != 0)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", required=True, help="the earlier commit")
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--item-sd", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--suites", type=int, default=None, help="default: the scale benchmark's")
    parser.add_argument("--items", type=int, default=None, help="default: the scale benchmark's")
    parser.add_argument("--glm", choices=["fast", "paper"], default="fast")
    parser.add_argument("--glm-models", default=None, help="comma-separated [glm] models (default: --glm's)")
    args = parser.parse_args(argv)

    results: dict[str, list[dict[str, float]]] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="scale-ab-") as work:
        work = Path(work)
        baseline = work / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
            check=True,
            capture_output=True,
        )
        trees = {f"baseline {args.baseline_rev}": baseline, "this checkout": REPO}
        try:
            for round_ in range(args.rounds):
                for name in list(trees) if round_ % 2 == 0 else list(trees)[::-1]:
                    result = run_scale(
                        trees[name], work / f"lake-{round_}-{len(results.get(name, []))}-{name[:4]}", args
                    )
                    results.setdefault(name, []).append(result)
                    print(
                        f"round {round_ + 1}, {name}: rebuild {result['rebuild wall s']:.1f} s, new model "
                        f"{result['new model wall s']:.1f} s"
                        + (" (a run failed)" if result["failed runs (exit status)"] else ""),
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)

    names = list(trees)
    keys = sorted(
        {k for runs in results.values() for run in runs for k in run} - {"failed runs (exit status)"},
        key=lambda k: (" step s" in k, " stage " in k, k),
    )
    print(
        f"\nscale --models {args.models} --suites {args.suites or 'default'} --items {args.items or 'default'} "
        f"--item-sd {args.item_sd} --glm {args.glm} {args.glm_models or ''}, {args.rounds} run(s) per tree, "
        f"alternating; {time.time() - started:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'(medians)':<46}" + "".join(f"{n:>22}" for n in names) + f"{'ratio this / baseline':>24}")
    for key in keys:
        values = [
            statistics.median(run[key] for run in results[n] if key in run)
            if any(key in run for run in results[n])
            else float("nan")
            for n in names
        ]
        ratio = values[1] / values[0] if values[0] else float("nan")
        print(f"{key:<46}" + "".join(f"{v:22.1f}" for v in values) + f"{ratio:24.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
