"""The allocator settings of the step processes (evalpipeline.allocator) against glibc's defaults, alternately.

    .venv/bin/python benchmarks/allocator_benchmark.py [--rounds 3]

Each round starts two fresh child processes, one with ``EVALPIPELINE_MALLOC_TUNING=off`` (glibc's defaults,
the baseline) and one with it ``on`` (what the code location sets), in alternating order; each child has one
BLAS and XLA thread, as a step process does, calls :func:`evalpipeline.allocator.tune_allocator` and times,
best of two, three workloads of a 100-model night's numpy code:

* ``psis_loo``: PSIS-LOO of a 100-LLM suite fit's log-likelihood (20,200 units x 2,000 draws;
  benchmarks/psis_benchmark.py's synthetic matrix, as a fit hands it over),
* ``reliability``: a model's HIP-LLM assessment across 6 suites of 4 subdomains (benchmarks/reliability_benchmark.py's
  synthetic counts, default settings),
* ``pairwise``: the pairwise table of a 30-model suite on 200 items (benchmarks/warm_start_probe.py's frame;
  its grid caches cleared before each table).

It prints the median over rounds of each, the ratio default / tuned, each child's peak resident memory, and
checks that both settings give the same numbers to the last bit (exit 1 otherwise): the allocator moves
memory, not arithmetic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalpipeline.allocator import MALLOC_TUNING_ENV  # noqa: E402
from resources.executors import limit_step_threads  # noqa: E402

CHILD = r"""
import hashlib, json, resource, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]
from evalpipeline.allocator import tune_allocator
applied = tune_allocator()
import numpy as np
from evalpipeline.models import psis
from evalpipeline.reliability import ReliabilitySettings, assess_reliability
from evalpipeline.stats import compare
from psis_benchmark import log_likelihood
from reliability_benchmark import synthetic_counts
from warm_start_probe import suite_frame

matrix = log_likelihood(20200, 4, 500).reshape(2000, 20200).T
counts, frame = synthetic_counts(6, 4), suite_frame(30, 200, 0, 1.0)

def clear_grids():
    for name in ("_logit_grid", "_probit_theta_axis", "_probit_grid", "_prob_beta_greater"):
        getattr(compare, name).cache_clear()

workloads = {
    "psis_loo": lambda: psis.loo_from_log_likelihood(matrix, 1.0).loo_i,
    "reliability": lambda: assess_reliability(counts, ReliabilitySettings()).cdf_envelopes[["cdf_lower", "cdf_upper"]].to_numpy(),
    "pairwise": lambda: (clear_grids(), compare.pairwise_table(frame).select_dtypes("number").to_numpy())[1],
}
seconds, digests = {}, {}
for name, work in workloads.items():
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    seconds[name] = best
    digests[name] = hashlib.sha256(np.ascontiguousarray(result, dtype=float).tobytes()).hexdigest()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "digests": digests, "peak_mib": peak, "applied": applied}))
"""


def run_child(setting: str) -> dict:
    env = {**os.environ, MALLOC_TUNING_ENV: setting}
    limit_step_threads(env)  # one BLAS and XLA thread, as the pipeline's step processes
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child with {MALLOC_TUNING_ENV}={setting} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    started = time.time()
    results: dict[str, list[dict]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for setting in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
            results[setting].append(run_child(setting))
        print(f"round {round_ + 1} done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)

    print(f"{args.rounds} round(s) of two children, alternating; {time.time() - started:.0f} s; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"tuned: {results['on'][0]['applied'] or 'nothing set (not glibc)'}")
    print(f"{'workload':<12} {'glibc default':>14} {'tuned':>8} {'default/tuned':>14}")
    for name in results["off"][0]["seconds"]:
        off = statistics.median(r["seconds"][name] for r in results["off"])
        on = statistics.median(r["seconds"][name] for r in results["on"])
        print(f"{name:<12} {off:12.3f} s {on:6.3f} s {off / on:13.2f}x")
    for setting, label in (("off", "glibc default"), ("on", "tuned")):
        print(f"peak resident memory, {label}: " + ", ".join(f"{r['peak_mib']:.0f}" for r in results[setting]) + " MiB")
    digests = {json.dumps(r["digests"], sort_keys=True) for runs in results.values() for r in runs}
    print("same numbers under both settings: " + ("yes" if len(digests) == 1 else "NO"))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
