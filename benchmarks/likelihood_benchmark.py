"""Binomial GLM fits with this checkout's log-likelihood against an earlier commit's.

    .venv/bin/python benchmarks/likelihood_benchmark.py [--baseline-rev 0737d69] [--models 100] [--items 200]
                                                        [--partitions 12] [--repeat 2]

A NUTS leapfrog step of the binomial GLMs is one evaluation of the potential and its gradient, and at
a suite's size most of it is the binomial log-pmf over the units (``glm.binomial_logit_kernel``).
Each code tree runs in its own child process, the two alternating ``--repeat`` times: this checkout,
and ``--baseline-rev`` checked out in a temporary git worktree (run it in a clone). A child, on one
BLAS/XLA thread as the pipeline's steps run (``EVALPIPELINE_STEP_THREADS`` default 1), measures with
its tree's own code, ``--glm fast``'s sampler settings (500 + 500 iterations x 4 chains):

1. the ``suite_binomial`` potential's value and gradient at ``--models`` LLMs x ``--items`` tasks
   (microseconds per evaluation, 2,000 evaluations in one compiled loop, best of three);
2. ``--partitions`` one-LLM ``binomial`` partition fits (``fit_glm`` with one ``Fitter``, after an
   untimed fit that compiles): seconds of each first attempt;
3. ``suite_binomial`` fitted cold to ``--models`` - 1 LLMs (compilation included, not compared), then
   refitted warm twice to ``--models`` LLMs (what a nightly does when a model joins; the first warm
   refit compiles, the second is compared): the second refit's first-attempt seconds.

It prints the medians per tree and the ratios baseline / this checkout (above 1: this checkout is
faster). The draws differ between trees in the last bits (the gradient is computed in another
order), so the posteriors are compared as Monte Carlo samples: the largest difference of an LLM
effect's posterior mean between the trees' last warm refits, in posterior SDs, is printed too.
Generated data: ``pipeline_benchmark.suite_frame`` (planted abilities, item difficulty sd 1).
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
sys.path.insert(0, "benchmarks")
models, items, partitions = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import numpy as np, pandas as pd, jax
from jax import lax, random
from numpyro.infer.util import initialize_model
from evalpipeline.models import Fitter, GlmData, configure_jax
from evalpipeline.models.fit import DiagnosticThresholds, FitSettings, fit_glm
from pipeline_benchmark import model_table
try:
    from likelihood_benchmark import model_and_arrays
    from pipeline_benchmark import suite_frame
except ImportError:  # a baseline commit whose benchmarks/ keeps them in warm_start_probe.py
    from warm_start_probe import model_and_arrays, suite_frame

configure_jax()
out = {}
frame = suite_frame(models, items, 0, 1.0)
model, arrays, _ = model_and_arrays(frame)
info = initialize_model(random.PRNGKey(0), model, model_args=(arrays,), dynamic_args=True)
value_and_grad = jax.value_and_grad(info.potential_fn(arrays))
N = 2000

@jax.jit
def loop(z):
    def body(i, carry):
        z, total = carry
        value, grad = value_and_grad(z)
        return jax.tree.map(lambda a, b: a + 1e-6 * b, z, grad), total + value
    return lax.fori_loop(0, N, body, (z, 0.0))

jax.block_until_ready(loop(info.param_info.z))
times = []
for _ in range(3):
    t = time.perf_counter()
    jax.block_until_ready(loop(info.param_info.z))
    times.append(time.perf_counter() - t)
out["gradient_us"] = min(times) / N * 1e6

settings = FitSettings(num_warmup=500, num_samples=500)
thresholds = DiagnosticThresholds(min_ess_bulk=200, min_ess_tail=200, max_r_hat=1.05)
fitter = Fitter()
out["partition_s"], out["partition_attempts"] = [], 0
for i in range(partitions + 1):
    rows = model_table(1000 + i, 1, items, 0, 1.0).assign(epoch=1, error=None, limit=None)
    fit = fit_glm("binomial", GlmData.from_samples(rows), settings, thresholds, f"bench|{i}", fitter=fitter)
    if i:
        out["partition_s"].append(fit.attempts[0]["seconds"])
        out["partition_attempts"] += len(fit.attempts)

names = sorted(frame["model"].unique())
cold = fit_glm("suite_binomial", GlmData.from_samples(frame[frame["model"] != names[-1]]), settings, thresholds,
               "bench|suite", fitter=fitter)
out["cold_s"] = cold.attempts[0]["seconds"]
data = GlmData.from_samples(frame)
for key in ("warm1", "warm2"):
    fit = fit_glm("suite_binomial", data, settings, thresholds, f"bench|suite|{key}", fitter=fitter, warm=cold.warm_state)
    out[key + "_s"] = fit.attempts[0]["seconds"]
    out[key + "_start"] = fit.attempts[0]["start"]
model_draws = fit.idata.posterior["model"]
out["model_mean"] = model_draws.mean(("chain", "draw")).values.tolist()
out["model_sd"] = model_draws.std(("chain", "draw")).values.tolist()
print(json.dumps(out))
"""


def model_and_arrays(frame):
    """The ``suite_binomial`` model function and padded arrays ``fit_glm`` samples for ``frame`` (default
    ``FitSettings``), and its layout."""
    import functools

    import jax.numpy as jnp

    from evalpipeline.models import GlmData, glm
    from evalpipeline.models.fit import FitSettings

    name = "suite_binomial"
    settings = FitSettings()
    data = GlmData.from_samples(frame)
    options = glm.structure_options(name, data)
    options["paper_form"] = settings.paper_form
    scales = dict(glm.MODELS[name].level_scales)
    centring = glm.choose_centring(
        data, scales, mode=settings.centring, threshold=settings.centring_threshold, shared_items=True
    )
    options["group_mean_basis"] = glm.use_group_mean_basis(settings.group_mean_basis, centring)
    grid = glm.unit_grid(data) if settings.unit_grid else None
    options["unit_grid"] = grid is not None
    layout = glm.layout_for(data, pad=settings.pad, grid=grid is not None)
    arrays = glm.build_arrays(data, layout, centring)
    if options["group_mean_basis"]:
        arrays.update(glm.crossed_arrays(data, layout))
    if grid is not None:
        arrays.update(glm.grid_arrays(data, layout, grid))
    return functools.partial(glm.MODELS[name].fn, **options), {k: jnp.asarray(v) for k, v in arrays.items()}, layout


def run_child(tree: Path, args) -> dict:
    return run_json_child(tree, [sys.executable, "-c", CHILD, str(args.models), str(args.items), str(args.partitions)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="0737d69")
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=12, help="timed one-LLM partition fits per child")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="likelihood-bench-") as work:
        baseline = Path(work) / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline_rev],
            check=True,
            capture_output=True,
        )
        try:
            trees = {f"baseline {args.baseline_rev}": baseline, "this checkout": REPO}
            results: dict[str, list[dict]] = {name: [] for name in trees}
            for round_ in range(args.repeat):
                for name, tree in trees.items():
                    results[name].append(run_child(tree, args))
                    print(
                        f"round {round_ + 1}, {name}: done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True
                    )
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)

    print(
        f"{args.models} LLMs x {args.items} tasks (suite), {args.partitions} partitions of {args.items} tasks; "
        f"{args.repeat} children per tree, alternating; {time.time() - started:.0f} s; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    columns = {
        "gradient_us": "suite gradient us",
        "partition_s": "partition fit s",
        "cold_s": "cold suite fit s",
        "warm2_s": "warm suite refit s",
    }
    print(f"{'tree':<22}" + "".join(f"{label:>20}" for label in columns.values()) + f"{'retried partitions':>20}")
    medians = {}
    for name, runs in results.items():
        row = {}
        for key in columns:
            values = [v for run in runs for v in (run[key] if isinstance(run[key], list) else [run[key]])]
            row[key] = statistics.median(values)
        medians[name] = row
        retried = sum(run["partition_attempts"] - len(run["partition_s"]) for run in runs)
        print(f"{name:<22}" + "".join(f"{row[key]:>20.2f}" for key in columns) + f"{retried:>20}")
    base, this = medians.values()
    print(f"{'ratio baseline/this':<22}" + "".join(f"{base[key] / this[key]:>19.2f}x" for key in columns))
    starts = {run["warm2_start"] for runs in results.values() for run in runs}
    print(f"warm refits started: {', '.join(sorted(starts))}")
    last = {name: runs[-1] for name, runs in results.items()}
    (a, b) = last.values()
    import numpy as np

    shift = np.abs(np.subtract(a["model_mean"], b["model_mean"])) / np.asarray(b["model_sd"])
    print(f"largest difference of an LLM effect's posterior mean between the trees: {shift.max():.3f} posterior SDs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
