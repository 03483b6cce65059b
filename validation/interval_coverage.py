"""Coverage of every interval method under the position paper's protocol (Section 3, IID setting).

    .venv/bin/python validation/interval_coverage.py [--thetas 100] [--datasets 200] [--resamples 10000] [--seed 0]

theta ~ Beta(1, 1) (``--thetas`` values), ``--datasets`` datasets per theta for N in {3, 10, 30, 100},
intervals at 80/90/95/99%. Prints the simulated coverage per method and N at each level, and the exact
average coverage at 95% (summed over the binomial). The tests hold the exact values to the paper's and a
reduced simulation to the exact values (tests/test_stats_conventional.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalpipeline.stats.coverage import exact_coverage_table, simulate_iid_coverage  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thetas", type=int, default=100, help="values of theta drawn from the prior (default 100)")
    parser.add_argument("--datasets", type=int, default=200, help="datasets per theta and N (default 200)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    simulated = simulate_iid_coverage(
        n_thetas=args.thetas, n_datasets=args.datasets, n_resamples=args.resamples, seed=args.seed
    )
    for level, part in simulated.groupby("level"):
        print(f"\nsimulated coverage at nominal {level:.0%} ({args.thetas} thetas x {args.datasets} datasets per N)")
        print(part.pivot(index="method", columns="n", values="coverage").to_string(float_format="%.3f"))
    exact = exact_coverage_table(level=0.95)
    print("\nexact average coverage at nominal 95% (theta ~ U(0, 1), summed over the binomial)")
    print(exact.pivot(index="method", columns="n", values="coverage").to_string(float_format="%.4f"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
