"""r-hat and ESS of a fit's posterior: arviz's per-element loop vs evalpipeline.models.convergence.

    .venv/bin/python benchmarks/convergence_benchmark.py [--elements 623 23] [--chains 4] [--draws 500] [--repeat 3]

The posterior is synthetic: AR(1) chains (autocorrelation 0.3-0.9 per element) shaped like a fit's,
``--elements`` scalar elements in all (623: a 100-LLM x 200-task ``suite_binomial`` fit, helper
sites included; 23: a one-model partition's ``binomial`` fit). Per size it times, in this process,
arviz's way -- ``az.rhat(method="rank")``, ``az.ess(method="bulk")`` and ``az.ess(method="tail")``,
once for a fit's diagnostics and once for its summary -- against one ``convergence()`` call shared by both, prints the median of ``--repeat`` runs and the ratio, and
checks that the values agree (largest relative difference). It exits 1 if they differ by more than
1e-10.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def posterior(elements: int, chains: int, draws: int, seed: int = 7):
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(seed)
    phi = rng.uniform(0.3, 0.9, elements)
    x = np.zeros((chains, draws, elements))
    noise = rng.normal(size=x.shape)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return xr.Dataset({"effects": (("chain", "draw", "element"), x)})


def arviz_twice(dataset):
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):  # the diagnostics, then the summary
            found = (az.rhat(dataset, method="rank"), az.ess(dataset, method="bulk"), az.ess(dataset, method="tail"))
    return found


def main() -> int:
    import numpy as np

    from evalpipeline.models.convergence import convergence

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, nargs="+", default=[623, 23])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    worst = 0.0
    print(f"{'elements':>8} {'arviz x2 s':>11} {'ours x1 s':>10} {'ours/arviz':>10} {'max rel diff':>13}")
    for elements in args.elements:
        dataset = posterior(elements, args.chains, args.draws)
        theirs, ours = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            expected = arviz_twice(dataset)
            theirs.append(time.perf_counter() - started)
            started = time.perf_counter()
            found = convergence(dataset)
            ours.append(time.perf_counter() - started)
        diff = max(
            float(
                np.max(
                    np.abs(np.asarray(e["effects"].values) - getattr(found, name)["effects"])
                    / np.abs(np.asarray(e["effects"].values))
                )
            )
            for e, name in zip(expected, ("r_hat", "ess_bulk", "ess_tail"))
        )
        worst = max(worst, diff)
        a, b = statistics.median(theirs), statistics.median(ours)
        print(f"{elements:>8} {a:>11.3f} {b:>10.3f} {b / a:>10.2f} {diff:>13.1e}")
    return 0 if worst <= 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
