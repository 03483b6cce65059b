"""PSIS-LOO of a suite fit's log-likelihood: evalpipeline.models.psis against arviz.loo, and the layout it gets.

    .venv/bin/python benchmarks/psis_benchmark.py [--units 20200] [--chains 4] [--draws 500] [--arviz-units 2000] [--repeat 3]

The log-likelihood is synthetic, Bernoulli outcomes under a logistic model with a per-unit posterior
spread, shaped like a 100-LLM x 200-task ``suite_binomial`` fit's (20,200 units, 4 x 500 draws). A fit
hands :func:`psis.loo_from_log_likelihood` a transposed view of its ``(chain, draw, unit)`` array
(:func:`psis.log_likelihood_matrix`), so each unit's draws are strided in memory. Per run it times, in
this process (median of ``--repeat``):

* ``psis.loo`` on that transposed view (what a fit does),
* ``psis.loo`` on a row-major copy (the floor the layout allows; the copy not timed),
* ``arviz.loo`` on the first ``--arviz-units`` units, scaled to all of them (its per-unit loop is linear),

prints the ratios, and checks that the three agree on those units (loo_i and Pareto k within 1e-12;
exits 1 otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def log_likelihood(units: int, chains: int, draws: int, seed: int = 11):
    import numpy as np

    rng = np.random.default_rng(seed)
    mean, spread = rng.normal(0.8, 1.5, units), rng.uniform(0.2, 0.6, units)
    outcome = rng.random(units) < 1 / (1 + np.exp(-mean))
    eta = mean + spread * rng.normal(size=(chains, draws, 1))
    return np.where(outcome, -np.logaddexp(0, -eta), -np.logaddexp(0, eta))  # (chain, draw, unit)


def median_seconds(call, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    import arviz as az
    import numpy as np

    from evalpipeline.models import psis

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=20200)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--arviz-units", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    values = log_likelihood(args.units, args.chains, args.draws)
    view = values.reshape(args.chains * args.draws, args.units).T  # as psis.log_likelihood_matrix gives it
    rows = np.ascontiguousarray(view)
    reff = 1.0
    on_view, ours = median_seconds(lambda: psis.loo_from_log_likelihood(view, reff), args.repeat)
    on_rows, ours_rows = median_seconds(lambda: psis.loo_from_log_likelihood(rows, reff), args.repeat)
    part = min(args.arviz_units, args.units)
    subset = az.from_dict(log_likelihood={"obs": values[..., :part]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_arviz, expected = median_seconds(lambda: az.loo(subset, pointwise=True, reff=reff), 1)
    arviz_all = on_arviz * args.units / part

    print(f"PSIS-LOO, {args.units} units x {args.chains * args.draws} draws (median of {args.repeat}):")
    print(f"  psis.loo on the fit's transposed view  {on_view:7.3f} s")
    print(f"  psis.loo on a row-major copy           {on_rows:7.3f} s   view / copy {on_view / on_rows:.2f}x")
    print(f"  arviz.loo, {part} units scaled to all   {arviz_all:7.3f} s   arviz / psis.loo {arviz_all / on_view:.1f}x")
    worst = max(
        float(np.nanmax(np.abs(ours.loo_i[:part] - expected.loo_i.values))),
        float(np.nanmax(np.abs(ours.pareto_k[:part] - expected.pareto_k.values))),
        float(np.nanmax(np.abs(ours.loo_i - ours_rows.loo_i))),
    )
    print(f"  largest difference (loo_i, Pareto k; view, copy and arviz): {worst:.2e}")
    return 0 if worst <= 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
