"""Coverage of every interval method under the position paper's protocol (Section 3, IID setting).

    .venv/bin/python benchmarks/coverage_benchmark.py [--thetas 100] [--datasets 200] [--resamples 10000] [--seed 0]

theta ~ Beta(1, 1) (100 values), 200 datasets per theta for N in {3, 10, 30, 100}
(80,000 datasets), intervals at 80/90/95/99%. Prints the simulated coverage per
method and N at each level, the exact average coverage (summed over the
binomial) beside the 95% column, and the time against the exact computation.
"""

from __future__ import annotations

import argparse
import time

from evalpipeline.stats.coverage import exact_coverage_table, simulate_iid_coverage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--thetas", type=int, default=100)
    parser.add_argument("--datasets", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    exact = exact_coverage_table(level=0.95)
    exact_seconds = time.perf_counter() - start
    start = time.perf_counter()
    simulated = simulate_iid_coverage(n_thetas=args.thetas, n_datasets=args.datasets, n_resamples=args.resamples, seed=args.seed)
    simulated_seconds = time.perf_counter() - start
    for level, part in simulated.groupby("level"):
        print(f"\nsimulated coverage at nominal {level:.0%} ({args.thetas} thetas x {args.datasets} datasets per N)")
        print(part.pivot(index="method", columns="n", values="coverage").to_string(float_format="%.3f"))
    print("\nexact average coverage at nominal 95% (theta ~ U(0, 1), summed over the binomial)")
    print(exact.pivot(index="method", columns="n", values="coverage").to_string(float_format="%.4f"))
    print(f"\nsimulation {simulated_seconds:.2f} s, exact {exact_seconds:.2f} s, ratio {simulated_seconds / exact_seconds:.1f}x")


if __name__ == "__main__":
    main()
