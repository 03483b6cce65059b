"""How fast this host fits a partition today: one fitting process alone, and two side by side.

    .venv/bin/python benchmarks/host_check.py [--fits 8] [--processes 2]

This machine's speed drifts: the scale benchmark's rebuild of the same code took 559.6 s in the
thirty-ninth session and 669-737 s in the forty-second to forty-fourth. In the forty-second session
twenty fits of the scale lake's partitions ran 1.2-1.3x slower beside a second fitting process; in
the forty-fourth this check found 1.00-1.03x (0.29-0.32 s a fit), on a day whose rebuild took 669 s.
So the check does not explain a slow rebuild; it records the host's speed for the pipeline's most
frequent step at one moment: a snapshot of a minute, not a forecast. It read 0.29-0.32 s a fit, and
twenty minutes later 0.43 s, before rebuilds of 669 and 696 s. ``pipeline_benchmark.py scale``
prints it before its rebuild and beside its targets.

Each measurement is fresh processes, started at once, each fitting ``--fits`` partitions the shape
of the scale benchmark's (one model, 200 items in 4 subdomains, one 0/1 attempt each, planted
item difficulties; ``pipeline_benchmark.model_table``) with the ``binomial`` GLM, 4 chains one
after another x (500 warmup + 500 draws), one ``Fitter`` and one XLA intra-op thread as the
pipeline's fitting steps have, and the pipeline's thread variables. One untimed fit first
compiles the sampler; every partition has the same shape, so nothing else compiles. Printed: the
seconds a fit alone, and in the slowest of the processes side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: partitions each process times (after one untimed fit that compiles)
FITS = 8


def worker(fits: int) -> None:
    """Fit ``fits`` partitions in this process; print one JSON line with the seconds a fit."""
    from evalpipeline.models import FitSettings, Fitter, GlmData, configure_jax, fit_glm
    from pipeline_benchmark import model_table

    configure_jax(intra_op_threads=1)
    # the scale lake's rows of one model on one suite, as the ingest leaves them (nothing errored or limit-hit)
    partitions = [GlmData.from_samples(model_table(index, 1, 200, 20261122, 1.0).assign(error=None, limit=None))
                  for index in range(fits + 1)]
    settings = FitSettings(num_warmup=500, num_samples=500, chain_method="sequential")
    fitter = Fitter()
    fit_glm("binomial", partitions[0], settings, seed_key="host-check|compile", fitter=fitter)
    compiled = fitter.compilations
    started = time.perf_counter()
    for index, partition in enumerate(partitions[1:]):
        fit_glm("binomial", partition, settings, seed_key=f"host-check|{index}", fitter=fitter)
    seconds = time.perf_counter() - started
    print(json.dumps({"per_fit": seconds / fits, "compiled_while_timed": fitter.compilations - compiled}))


def run_workers(command: list[str], processes: int, extra_env: dict[str, str] | None = None) -> list[dict]:
    """Start ``processes`` copies of ``command`` at once, with the thread variables the pipeline's step
    processes start with; the JSON object each printed last, in start order."""
    from resources.executors import limit_step_threads

    env = {**os.environ, **(extra_env or {})}
    limit_step_threads(env)
    started = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(processes)]
    results = []
    for process in started:
        out, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"benchmark worker {' '.join(command[1:])} failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def measure(processes: int, fits: int = FITS) -> list[float]:
    """Seconds a fit in each of ``processes`` fresh processes started at once."""
    results = run_workers([sys.executable, __file__, "--worker", "--fits", str(fits)], processes)
    for result in results:
        if result["compiled_while_timed"]:
            raise SystemExit(f"host check worker compiled {result['compiled_while_timed']} sampler(s) while timed")
    return [result["per_fit"] for result in results]


def host_check(fits: int = FITS, processes: int = 2) -> tuple[float, float]:
    """(seconds a fit in one process alone, in the slowest of ``processes`` side by side)."""
    alone = measure(1, fits)[0]
    return alone, max(measure(processes, fits))


def host_line(measured: tuple[float, float] | None, processes: int = 2) -> str:
    if measured is None:
        return "host check skipped (--no-host-check)"
    alone, side_by_side = measured
    return (f"host check (MEASURED): a partition fit {alone:.3f} s in one process alone, {side_by_side:.3f} s in each "
            f"of {processes} side by side ({side_by_side / alone:.2f}x)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=FITS, help="partitions each process times")
    parser.add_argument("--processes", type=int, default=2, help="processes side by side in the second measurement")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fits < 1 or args.processes < 1:
        parser.error("--fits and --processes must be at least 1")
    if args.worker:
        worker(args.fits)
        return 0
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    print(host_line(host_check(args.fits, args.processes), args.processes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
