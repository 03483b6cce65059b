"""HIP-LLM reliability (evalpipeline.reliability): seconds and peak memory vs the paper's RQ8.

    .venv/bin/python benchmarks/reliability_benchmark.py [--quick] [--repeat 3]
    .venv/bin/python benchmarks/reliability_benchmark.py --cdf-ab [--repeat 5]

Sweeps, one parameter at a time around the paper's baseline (m = 2 domains,
2 subdomains per domain, K = 160 configurations, S = 3000 draws, G = 2000 grid
points, T = 201, <= 512 LLM pairings; Section 4.2 / Fig. 11):
domains m in 1..12, subdomains per domain in 2..40, configurations K in 40..320.
Counts are synthetic: N = 80 tasks per subdomain (the paper's settings.yaml)
with fixed accuracies.

Runs on one core (BLAS/OpenMP threads pinned to 1 before numpy loads).
``seconds`` is the best wall time of ``--repeat`` runs of assess_reliability
(after one warm-up call) and ``cpu s`` the best process CPU time (less
sensitive to other load on a shared machine; the exponents use it); ``peak MiB`` is tracemalloc's peak during a separate run
(numpy reports its buffers to tracemalloc), i.e. memory the computation
allocates, imports excluded. Table 6 gives only each sweep's end points; the
"paper MB" column interpolates linearly between them (the paper reports
approximately linear memory growth) and is marked ~ where interpolated.
The scaling exponent is the least-squares slope of log(seconds) (and of
log(memory)) on log(parameter), as in the paper's power-law fits.

``--cdf-ab`` times ``assess_reliability`` as it is against the same code with the
subdomain level computed without ``beta_mixture_cdf`` and ``beta_survival`` (``weights @ betainc``
over the whole G x T table, ``betaincc`` at the thresholds), alternately, best of ``--repeat`` each, on a
leaderboard partition (one domain of 4 subdomains x 50 items, the pipeline's default
numerics) and on the paper's baseline; it prints both, their ratio, and the largest
difference between the two assessments' CDF and quantile envelopes.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS"):
    os.environ.setdefault(_var, "1" if _var != "XLA_FLAGS" else "--xla_cpu_multi_thread_eigen=false")

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from evalpipeline.reliability import ReliabilitySettings, assess_reliability  # noqa: E402

BASELINE = {"domains": 2, "subdomains": 2, "configurations": 160}
# Table 6 (peak memory, MB): (first point, value), (last point, value) of each sweep
TABLE6 = {
    "domains": ((1, 24.6), (12, 146.7)),
    "subdomains": ((2, 35.8), (40, 314.2)),
    "configurations": ((40, 19.1), (320, 57.8)),
}
BASELINE_TARGET_SECONDS = 2.0


def synthetic_counts(domains: int, subdomains: int, n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(2024)
    rows = []
    for i in range(domains):
        level = rng.uniform(0.4, 0.9)
        for j in range(subdomains):
            acc = float(np.clip(level + rng.normal(0, 0.05), 0.02, 0.98))
            rows.append((f"D{i + 1}", f"S{i + 1}.{j + 1}", n, int(round(acc * n))))
    return pd.DataFrame(rows, columns=["domain", "subdomain", "n", "k"])


def paper_memory(sweep: str, x: int) -> tuple[float, bool]:
    (x0, m0), (x1, m1) = TABLE6[sweep]
    exact = x in (x0, x1)
    return m0 + (m1 - m0) * (x - x0) / (x1 - x0), not exact


def measure(domains: int, subdomains: int, configurations: int, repeat: int) -> tuple[float, float, float]:
    counts = synthetic_counts(domains, subdomains)
    settings = ReliabilitySettings(n_configurations=configurations)
    assess_reliability(counts, settings)  # warm-up (first-call imports and caches)
    seconds, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        assess_reliability(counts, settings)
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    tracemalloc.start()
    tracemalloc.reset_peak()
    assess_reliability(counts, settings)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return min(seconds), min(cpu), peak / 2**20


def _betainc_mixture_cdf(weights, alpha, beta, x):
    """The tabulation ``beta_mixture_cdf`` replaced: the regularized incomplete Beta at every (G, T) pair."""
    from scipy import special

    return weights @ special.betainc(np.asarray(alpha)[:, None], np.asarray(beta)[:, None], np.asarray(x)[None, :])


def _betaincc_survival(alpha, beta, x):
    """The survival function ``beta_survival`` replaced."""
    from scipy import special

    return special.betaincc(alpha, beta, x)


def cdf_ab(repeat: int) -> None:
    from evalpipeline.reliability import core

    quadrature, survival = core.beta_mixture_cdf, core.beta_survival
    rng = np.random.default_rng(5)
    partition = pd.DataFrame(
        {"domain": "suite0", "subdomain": [f"sub{j}" for j in range(4)], "n": 50, "k": rng.binomial(50, 0.6, 4)}
    )
    cases = {
        "partition (1 domain x 4 subdomains x 50 items)": partition,
        "paper baseline (2 x 2 x 80)": synthetic_counts(2, 2),
    }
    print(
        "subdomain level: betainc table and betaincc (before) vs quadrature and beta_survival (now); "
        f"one core, CPU s, best of {repeat}"
    )
    print(f"{'case':>48} {'before s':>9} {'now s':>8} {'ratio':>6} {'max |diff|':>11}")
    for name, counts in cases.items():
        settings = ReliabilitySettings(seed=3)
        seconds = {"before": [], "now": []}
        results = {}
        for run in range(repeat + 1):  # the first round warms up
            for label, tabulate, tail in (
                ("before", _betainc_mixture_cdf, _betaincc_survival),
                ("now", quadrature, survival),
            ):
                core.beta_mixture_cdf, core.beta_survival = tabulate, tail
                try:
                    start = time.process_time()
                    results[label] = assess_reliability(counts, settings)
                    if run:
                        seconds[label].append(time.process_time() - start)
                finally:
                    core.beta_mixture_cdf, core.beta_survival = quadrature, survival
        diff = 0.0
        for table in ("cdf_envelopes", "quantile_envelopes", "target_probability"):
            old, new = getattr(results["before"], table), getattr(results["now"], table)
            for column in [c for c in old.columns if c.endswith(("_lower", "_upper")) or c in ("lower", "upper")]:
                diff = max(diff, float(np.nanmax(np.abs(old[column].to_numpy(float) - new[column].to_numpy(float)))))
        before, now = min(seconds["before"]), min(seconds["now"])
        print(f"{name:>48} {before:>9.3f} {now:>8.3f} {before / now:>6.2f} {diff:>11.2e}", flush=True)


def slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer points per sweep, one repeat")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per point (best is reported)")
    parser.add_argument(
        "--cdf-ab",
        action="store_true",
        help="only the subdomain level's A/B (betainc table and betaincc vs quadrature and beta_survival)",
    )
    args = parser.parse_args()
    if args.cdf_ab:
        cdf_ab(max(1, args.repeat))
        return
    repeat = 1 if args.quick else args.repeat
    sweeps = {
        "domains": [1, 2, 12] if args.quick else [1, 2, 4, 8, 12],
        "subdomains": [2, 10, 40] if args.quick else [2, 5, 10, 20, 40],
        "configurations": [40, 160, 320] if args.quick else [40, 80, 160, 320],
    }
    print(
        f"HIP-LLM reliability benchmark (one core; best of {repeat}; baseline m=2, n=2, K=160, S=3000, G=2000, T=201)"
    )
    header = f"{'sweep':>15} {'value':>6} {'seconds':>8} {'cpu s':>7} {'peak MiB':>9} {'paper MB':>9} {'mem ratio':>9}"
    print(header)
    print("-" * len(header))
    fits = {}
    worst_ratio = 0.0
    baseline_seconds = None
    for sweep, values in sweeps.items():
        secs, mems = [], []
        for value in values:
            point = {**BASELINE, sweep: value}
            seconds, cpu, peak = measure(point["domains"], point["subdomains"], point["configurations"], repeat)
            paper, interpolated = paper_memory(sweep, value)
            ratio = peak / paper
            worst_ratio = max(worst_ratio, ratio)
            if point == BASELINE and baseline_seconds is None:
                baseline_seconds, baseline_cpu = seconds, cpu
            secs.append(cpu)
            mems.append(peak)
            mark = "~" if interpolated else " "
            print(
                f"{sweep:>15} {value:>6} {seconds:>8.3f} {cpu:>7.3f} {peak:>9.1f} {mark}{paper:>8.1f} {ratio:>9.2f}",
                flush=True,
            )
        fits[sweep] = (slope(values, secs), slope(values, mems))
    print()
    print("scaling exponents (log-log slope):   cpu    memory   (paper: time ~linear in m, K, G; sub-quadratic in n)")
    for sweep, (t, m) in fits.items():
        print(f"{sweep:>34} {t:6.2f} {m:8.2f}")
    print()
    verdict = "meets" if baseline_seconds is not None and baseline_seconds < BASELINE_TARGET_SECONDS else "MISSES"
    print(
        f"baseline: {baseline_seconds:.3f} s wall, {baseline_cpu:.3f} s cpu ({verdict} the < {BASELINE_TARGET_SECONDS:.0f} s target on wall time)"
    )
    print(
        f"memory: largest ratio ours / Table 6 = {worst_ratio:.2f} ({'below' if worst_ratio < 1 else 'NOT below'} the paper at every point)"
    )


if __name__ == "__main__":
    main()
