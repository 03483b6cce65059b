"""Coverage of the headline success-rate interval and calibration of the paired P(A > B), with planted truth.

    .venv/bin/python validation/headline_coverage.py [--datasets 2000] [--pairs 4000]

Prints the two Markdown tables of docs/statistics.md ("Does the headline interval cover?" and "Is P(A > B)
calibrated?"). The protocol is the position paper's: the truth is drawn from the prior, many datasets are
generated from it, and the share of intervals holding it is counted (stats.coverage). The tests run the same
studies at the size whose Monte Carlo error the tests need (tests/test_design_aware.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalpipeline.stats.coverage import DESIGNS, simulate_design_coverage, simulate_pair_calibration  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=2000, help="datasets per design (default 2000)")
    parser.add_argument(
        "--pairs",
        type=int,
        default=10000,
        help="planted pairs per interaction level (default 10000; ~15 min each on one core)",
    )
    args = parser.parse_args(argv)
    table = simulate_design_coverage(DESIGNS, n_datasets=args.datasets, seed=1)
    print(
        f"| design | headline 95% HPDI | independent-attempts HPDI | mean design effect | ({args.datasets:,} "
        "datasets each) |\n| --- | ---: | ---: | ---: | --- |"
    )
    for row in table.itertuples():
        print(
            f"| {row.design} | {row.coverage:.3f} | {row.coverage_independent:.3f} | {row.mean_design_effect:.2f} "
            f"| MC se {row.mc_se:.3f} |"
        )
    print()
    for interaction in (0.0, 0.7):
        calibration = simulate_pair_calibration(
            n_pairs=args.pairs, n_items=30, epochs=5, interaction=interaction, seed=2
        )
        print(f"Interaction sd {interaction:g} (logit scale), {args.pairs:,} pairs of 30 items x 5 epochs:\n")
        print(
            "| reported P(A > B) | pairs | mean reported | share truly better | difference |\n"
            "| --- | ---: | ---: | ---: | ---: |"
        )
        for row in calibration.itertuples():
            print(
                f"| {row.bin} | {row.pairs} | {row.mean_reported:.3f} | {row.share_better:.3f} | "
                f"{row.share_better - row.mean_reported:+.3f} (MC se {row.mc_se:.3f}) |"
            )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
