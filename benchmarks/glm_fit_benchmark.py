"""GLM fits over many partitions: a fresh numpyro MCMC per partition vs one reused Fitter.

    .venv/bin/python benchmarks/glm_fit_benchmark.py [--quick] [--partitions 50]
        [--num-warmup 1000] [--num-samples 1000] [--chains 4] [--chain-method vectorized|sequential|parallel]
        [--model binomial] [--skip-naive] [--retry] [--cells-ab [--repeat 3]]

The same synthetic partitions (one LLM, one domain, 3-20 subdomains, 20-500
items, one attempt per item; true subdomain logits around a random overall
level) are fitted twice in one run:

* naive: for each partition a new ``numpyro.infer.MCMC(NUTS(model))`` on the
  unpadded arrays (same model function, same identified parameterisation and
  centring, same warmup/draws/chains and chain method): every partition pays
  tracing and XLA compilation;
* fitter: ``fit_glm(..., fitter=Fitter())`` for every partition: shapes padded
  to buckets, one compiled program per bucket, and the full pipeline work per
  fit (diagnostics incl. PSIS-LOO, tidy summary, prior and posterior predictive
  draws), which the naive path does not do. Retries are off unless ``--retry``
  (the naive path has none, so with them the draws would not be equal).

Printed: wall time, total and median minimum bulk ESS (over all parameters) per
partition, ESS per second, and the speed ratio naive / fitter. ``--quick``
fits 12 partitions with 300 warmup / 300 draws.

``--cells-ab [--repeat 3]`` instead fits the partitions with the fitter twice per
round, ``[glm] sufficient_cells`` on and off (the order alternating between
rounds, one Fitter each, its compilation in an untimed first fit), and prints
the median seconds a partition, ESS per second and the ratio off / on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_partitions(count: int, seed: int = 2024):
    import numpy as np
    import pandas as pd

    from evalpipeline.models import GlmData

    rng = np.random.default_rng(seed)
    partitions = []
    for _ in range(count):
        n_sub = int(rng.integers(3, 21))
        n_items = int(rng.integers(20, 501))
        overall = rng.normal(0.5, 1.0)
        effects = overall + rng.normal(0, 0.3, size=n_sub)
        which = np.sort(rng.integers(0, n_sub, size=n_items))
        which[:n_sub] = np.arange(n_sub)  # every subdomain has an item
        p = 1 / (1 + np.exp(-effects[which]))
        frame = pd.DataFrame(
            {
                "domain": "d",
                "subdomain": [f"s{s}" for s in which],
                "item_id": [f"i{i}" for i in range(n_items)],
                "k": rng.binomial(1, p),
                "n": 1,
            }
        )
        partitions.append(GlmData.from_counts(frame))
    return partitions


def min_bulk_ess(samples_by_chain: dict) -> float:
    import arviz as az
    import numpy as np

    dataset = az.from_dict(posterior={k: np.asarray(v) for k, v in samples_by_chain.items()}).posterior
    values = az.ess(dataset, method="bulk")
    return float(min(np.nanmin(v.values) for v in values.data_vars.values()))


def run_naive(partitions, model_name, settings):
    import functools

    import jax
    from numpyro.infer import MCMC, NUTS

    from evalpipeline.models import glm
    from evalpipeline.models.fit import _level_used

    ess = []
    started = time.perf_counter()
    for index, data in enumerate(partitions):
        entry = glm.MODELS[model_name]
        options = dict(glm.structure_options(model_name, data), paper_form=False)
        used = {lvl: s for lvl, s in entry.level_scales if _level_used(lvl, options, model_name)}
        centring = glm.choose_centring(data, used)
        arrays = glm.build_arrays(data, glm.layout_for(data, pad=False), centring)
        mcmc = MCMC(
            NUTS(functools.partial(entry.fn, **options), target_accept_prob=settings.target_accept),
            num_warmup=settings.num_warmup,
            num_samples=settings.num_samples,
            num_chains=settings.num_chains,
            chain_method=settings.chain_method,
            progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(index), arrays)
        samples = mcmc.get_samples(group_by_chain=True)
        ess.append(min_bulk_ess({k: v for k, v in samples.items() if k != "p"}))
    return time.perf_counter() - started, ess


def run_fitter(partitions, model_name, settings):
    from evalpipeline.models import Fitter, fit_glm

    fitter = Fitter()
    ess, retries, failed = [], 0, 0
    started = time.perf_counter()
    for index, data in enumerate(partitions):
        fit = fit_glm(model_name, data, settings, seed_key=f"bench|{index}|{model_name}", fitter=fitter)
        diagnostics = fit.diagnostics.set_index("diagnostic")
        ess.append(float(diagnostics.loc["ess_bulk", "value"]))
        retries += len(fit.attempts) - 1
        failed += not fit.passed
    return time.perf_counter() - started, ess, retries, failed, fitter.stats()


def run_cells_ab(partitions, model_name, settings, repeat: int) -> None:
    """``sufficient_cells`` on against off, alternating, after one untimed (compiling) fit each."""
    import dataclasses

    import numpy as np

    from evalpipeline.models import Fitter, fit_glm

    fitters = {cells: Fitter() for cells in (True, False)}
    variants = {cells: dataclasses.replace(settings, sufficient_cells=cells) for cells in (True, False)}
    for cells, fitter in fitters.items():
        fit_glm(model_name, partitions[0], variants[cells], seed_key="bench|warm-up", fitter=fitter)
    seconds, ess, cell_counts = {True: [], False: []}, {True: [], False: []}, []
    for round_ in range(repeat):
        for cells in (True, False) if round_ % 2 == 0 else (False, True):
            started, round_ess = time.perf_counter(), []
            for index, data in enumerate(partitions):
                fit = fit_glm(
                    model_name, data, variants[cells], seed_key=f"bench|{index}|{model_name}", fitter=fitters[cells]
                )
                round_ess.append(float(fit.diagnostics.set_index("diagnostic").loc["ess_bulk", "value"]))
                if cells and round_ == 0:
                    cell_counts.append(fit.metadata["likelihood_cells"])
            seconds[cells].append(time.perf_counter() - started)
            ess[cells].append(float(np.sum(round_ess)))
    n = len(partitions)
    print(f"likelihood cells a partition: {min(cell_counts)}-{max(cell_counts)} (None: per unit)")
    print(f"{'sufficient_cells':>16} {'s/partition (median)':>21} {'ESS/s':>8}   rounds: s/partition")
    for cells in (False, True):
        per = [s / n for s in seconds[cells]]
        rate = [e / s for e, s in zip(ess[cells], seconds[cells])]
        print(
            f"{str(cells).lower():>16} {np.median(per):21.3f} {np.median(rate):8.0f}   "
            + ", ".join(f"{x:.3f}" for x in per)
        )
    print(
        f"ratio off / on: {np.median(seconds[False]) / np.median(seconds[True]):.2f}x seconds, "
        f"{np.median(ess[True]) / np.median(seconds[True]) / (np.median(ess[False]) / np.median(seconds[False])):.2f}x ESS/s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="12 partitions, 300 warmup / 300 draws")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--num-warmup", type=int, default=None)
    parser.add_argument("--num-samples", type=int, default=None)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--chain-method", default="vectorized", choices=["vectorized", "parallel", "sequential"])
    parser.add_argument("--model", default="binomial")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument(
        "--retry", action="store_true", help="let the fitter retry failing fits (the naive path never does)"
    )
    parser.add_argument("--cells-ab", action="store_true", help="the fitter with [glm] sufficient_cells on against off")
    parser.add_argument("--repeat", type=int, default=3, help="--cells-ab rounds")
    args = parser.parse_args(argv)
    partitions_n = args.partitions or (12 if args.quick else 50)
    warmup = args.num_warmup or (300 if args.quick else 1000)
    draws = args.num_samples or (300 if args.quick else 1000)

    from evalpipeline.models import configure_jax

    if args.chain_method == "parallel":
        print("configure_jax:", configure_jax(host_devices=2))
    import jax

    from evalpipeline.models import FitSettings

    # like for like: no retries (the naive path has none); --retry restores the pipeline's retry
    retry_on = FitSettings().retry_on if args.retry else ()
    settings = FitSettings(
        num_warmup=warmup, num_samples=draws, num_chains=args.chains, chain_method=args.chain_method, retry_on=retry_on
    )
    partitions = make_partitions(partitions_n)
    items = [d.n_items for d in partitions]
    subs = [d.n_subdomains for d in partitions]
    print(
        f"{partitions_n} partitions ({min(subs)}-{max(subs)} subdomains, {min(items)}-{max(items)} items), "
        f"model {args.model}, {warmup} warmup + {draws} draws x {args.chains} chains ({args.chain_method}), "
        f"{jax.local_device_count()} JAX device(s)"
    )
    import numpy as np

    if args.cells_ab:
        run_cells_ab(partitions, args.model, settings, args.repeat)
        return 0
    fit_seconds, fit_ess, retries, failed, stats = run_fitter(partitions, args.model, settings)
    rows = [("fitter", fit_seconds, fit_ess)]
    if not args.skip_naive:
        naive_seconds, naive_ess = run_naive(partitions, args.model, settings)
        rows.insert(0, ("naive", naive_seconds, naive_ess))
    print(f"{'method':>8} {'seconds':>9} {'s/partition':>11} {'median min-ESS':>15} {'total min-ESS':>14} {'ESS/s':>8}")
    for name, seconds, ess in rows:
        print(
            f"{name:>8} {seconds:9.1f} {seconds / partitions_n:11.2f} {np.median(ess):15.0f} {np.sum(ess):14.0f} "
            f"{np.sum(ess) / seconds:8.1f}"
        )
    print(
        f"fitter: {stats['compilations']} compiled sampler(s) for {partitions_n} partitions "
        f"({stats['compile_seconds']} s building), {retries} retr{'y' if retries == 1 else 'ies'}, "
        f"{failed} fit(s) failing a diagnostic after the retry"
    )
    if not args.skip_naive:
        print(
            f"speed ratio naive/fitter: {naive_seconds / fit_seconds:.2f}x wall time, "
            f"{(np.sum(fit_ess) / fit_seconds) / (np.sum(naive_ess) / naive_seconds):.2f}x ESS/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
