"""GLM fits with XLA's default intra-op thread pool against one thread, alone and side by side.

    .venv/bin/python benchmarks/xla_pool_benchmark.py [--partitions 20] [--num-warmup 500] [--num-samples 500]
                                                      [--side-by-side 2] [--repeat 2] [--model binomial]

XLA gives its CPU backend an intra-op thread pool of one thread per CPU the process may use when the
backend starts, whatever ``--xla_cpu_multi_thread_eigen=false`` says; a fitting step is one process
per core (the ``fit`` pool, ``evalpipeline run``'s workers). The fits now start the backend with
``EVALPIPELINE_STEP_THREADS`` threads (``configure_jax(intra_op_threads=...)``, default 1).

Each measurement is fresh processes of this script, started at once: one process alone, then
``--side-by-side`` processes, each fitting the same synthetic partitions
(``glm_fit_benchmark.make_partitions``) with one ``Fitter`` as the pipeline does (chains one after
another, the pipeline's thread variables set, one untimed fit first so that compilation is not
timed). The two pools alternate in order between rounds. Printed: per pool and process count, the
median seconds a fit (each round: the slowest process's mean), the threads of XLA's pool, whether
every process drew the same posterior draws, and the ratio default / one thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POOLS = ("default", "one thread")


def worker(pool: str, partitions: int, warmup: int, draws: int, model: str) -> None:
    """Fit the partitions in this process with the given pool; print one JSON line."""
    from evalpipeline.models import FitSettings, Fitter, configure_jax, fit_glm

    if pool == "one thread":
        configure_jax(intra_op_threads=1)
    from glm_fit_benchmark import make_partitions

    data = make_partitions(partitions + 1)
    settings = FitSettings(num_warmup=warmup, num_samples=draws, chain_method="sequential")
    fitter = Fitter()
    fit_glm(model, data[0], settings, seed_key="bench|warm-up", fitter=fitter)  # compiles
    digest = hashlib.sha256()
    started = time.perf_counter()
    for index, partition in enumerate(data[1:]):
        fit = fit_glm(model, partition, settings, seed_key=f"bench|{index}|{model}", fitter=fitter)
        for name in sorted(fit.idata.posterior.data_vars):
            digest.update(fit.idata.posterior[name].values.tobytes())
    seconds = time.perf_counter() - started
    tasks = Path("/proc/self/task")
    pool_threads = (sum((t / "comm").read_text().strip() == "tf_XLAEigen" for t in tasks.iterdir())
                    if tasks.is_dir() else None)
    print(json.dumps({"per_fit": seconds / partitions, "pool_threads": pool_threads, "draws": digest.hexdigest()}))


def measure(pool: str, processes: int, args) -> list[dict]:
    from host_check import run_workers

    command = [sys.executable, __file__, "--worker", pool, "--partitions", str(args.partitions),
               "--num-warmup", str(args.num_warmup), "--num-samples", str(args.num_samples), "--model", args.model]
    return run_workers(command, processes, {"PYTHONPATH": str(Path(__file__).resolve().parent)})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--num-warmup", type=int, default=500)
    parser.add_argument("--num-samples", type=int, default=500)
    parser.add_argument("--side-by-side", type=int, default=2, help="processes at once in the second measurement")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", default="binomial")
    parser.add_argument("--worker", choices=POOLS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.partitions, args.num_warmup, args.num_samples, args.model)
        return 0

    print(f"{args.partitions} {args.model} fits a process ({args.num_warmup} warmup / {args.num_samples} draws, "
          f"4 chains one after another); {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    seconds: dict[tuple[str, int], list[float]] = {}
    threads: dict[tuple[str, int], set] = {}
    digests: set[str] = set()
    for round_ in range(args.repeat):
        for processes in (1, args.side_by_side):
            for pool in (POOLS if round_ % 2 == 0 else POOLS[::-1]):
                results = measure(pool, processes, args)
                seconds.setdefault((pool, processes), []).append(max(r["per_fit"] for r in results))
                threads.setdefault((pool, processes), set()).update(r["pool_threads"] for r in results)
                digests.update(r["draws"] for r in results)
                print(f"  round {round_ + 1}: {pool:>10}, {processes} process(es): "
                      + ", ".join(f"{r['per_fit']:.3f}" for r in results) + " s a fit", flush=True)
    print(f"\n{'pool':>10} {'processes':>9} {'pool threads':>12} {'s a fit (median)':>17}")
    for processes in (1, args.side_by_side):
        for pool in POOLS:
            key = (pool, processes)
            shown = ",".join(str(t) for t in sorted(threads[key], key=str))
            print(f"{pool:>10} {processes:9d} {shown:>12} {statistics.median(seconds[key]):17.3f}")
    for processes in (1, args.side_by_side):
        ratio = statistics.median(seconds[("default", processes)]) / statistics.median(seconds[("one thread", processes)])
        print(f"ratio default / one thread, {processes} process(es): {ratio:.2f}")
    print(f"posterior draws identical in every process and pool: {'yes' if len(digests) == 1 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
