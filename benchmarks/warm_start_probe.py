"""Probe: what would warm-starting a suite GLM refit save when one model joins the suite?

The new-model night is dominated by the suite GLM refits (benchmarks/README.md). This probe
measures the lever before anyone builds it into the pipeline. On a generated suite
(``pipeline_benchmark.model_table``: N models x I items, planted item difficulties) it

1. fits ``suite_binomial`` cold to the first N - 1 models (numpyro's windowed adaptation,
   the dense block over the collective directions, as the pipeline fits it),
2. refits cold to all N models (the baseline: what the pipeline does tonight), and
3. refits warm to all N models, ``--reps`` times with different seeds: each chain starts from
   the N - 1 fit's last state, the inverse mass matrix is the chains' mean of its adapted one
   (the joining model's slot, a padding slot before, takes the median of the real models'
   entries), the step size is the median of its chains' adapted ones and is kept fixed
   (``--adapt-step`` re-adapts it by dual averaging instead), and ``--warmup`` iterations
   run before the draws are kept, only as burn-in.

Cold fits start their mass matrix where the pipeline's do (``fit.curvature_inverse_mass``,
here from one start for all four chains rather than from each chain's own).

It prints the seconds of each fit, the ratio warm / cold, every fit's smallest bulk ESS,
largest r-hat and mean leapfrog steps per draw, and how far the warm posterior means of the
model effects are from the cold ones (in cold posterior SDs). Fits run through numpyro's
``MCMC`` with sequential chains in this process, not through the pipeline's compiled
runner, so the absolute seconds are this harness's; the ratio is the estimate of the lever. Each
sampler is compiled by an untimed first run (the N - 1 fit's time includes its compilation).

    .venv/bin/python benchmarks/warm_start_probe.py --models 100 --items 200 --warmup 150 --reps 3
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_benchmark import model_table  # noqa: E402

GLM = "suite_binomial"


def suite_frame(models: int, items: int, seed: int, item_sd: float) -> pd.DataFrame:
    frame = pd.concat([model_table(i, 1, items, seed, item_sd) for i in range(models)], ignore_index=True)
    return frame.assign(epoch=1, error=None, limit=None)


def model_and_arrays(frame: pd.DataFrame):
    """The model function and padded arrays ``fit_glm`` would sample for ``frame`` (default FitSettings)."""
    import jax.numpy as jnp

    from evalpipeline.models import GlmData, glm
    from evalpipeline.models.fit import FitSettings

    settings = FitSettings()
    data = GlmData.from_samples(frame)
    options = glm.structure_options(GLM, data)
    options["paper_form"] = settings.paper_form
    scales = dict(glm.MODELS[GLM].level_scales)
    centring = glm.choose_centring(data, scales, mode=settings.centring, threshold=settings.centring_threshold,
                                   shared_items=True)
    options["group_mean_basis"] = glm.use_group_mean_basis(settings.group_mean_basis, centring)
    grid = glm.unit_grid(data) if settings.unit_grid else None
    options["unit_grid"] = grid is not None
    layout = glm.layout_for(data, pad=settings.pad, grid=grid is not None)
    arrays = glm.build_arrays(data, layout, centring)
    if options["group_mean_basis"]:
        arrays.update(glm.crossed_arrays(data, layout))
    if grid is not None:
        arrays.update(glm.grid_arrays(data, layout, grid))
    return functools.partial(glm.MODELS[GLM].fn, **options), {k: jnp.asarray(v) for k, v in arrays.items()}, layout


def sampler(model, *, warmup: int, draws: int, dense_mass, **kernel):
    """One numpyro MCMC per configuration: its compiled program is reused by every later ``run``."""
    from numpyro.infer import MCMC, NUTS

    return MCMC(NUTS(model, target_accept_prob=0.8, dense_mass=dense_mass, **kernel), num_warmup=warmup,
                num_samples=draws, num_chains=4, chain_method="sequential", progress_bar=False)


def run(mcmc, arrays, seed: int, init=None) -> float:
    from jax import random

    started = time.perf_counter()
    mcmc.run(random.PRNGKey(seed), arrays, init_params=init, extra_fields=("num_steps",))
    return time.perf_counter() - started


def curvature_start(model, arrays, block: tuple[str, ...]):
    """The pipeline's starting inverse mass matrix for a cold fit (``fit.curvature_inverse_mass``), at one start."""
    from jax import random
    from numpyro.infer.util import initialize_model

    from evalpipeline.models.fit import curvature_inverse_mass

    info = initialize_model(random.PRNGKey(0), model, model_args=(arrays,), dynamic_args=True)
    return curvature_inverse_mass(info.potential_fn(arrays), info.param_info.z, random.PRNGKey(1), block)


def describe(mcmc) -> dict:
    import arviz as az

    posterior = az.from_numpyro(mcmc).posterior[["model", "sigma_model", "sigma_task", "overall"]]
    ess, rhat = az.ess(posterior, method="bulk"), az.rhat(posterior)
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"], dtype=float)
    return {"min_ess_bulk": min(float(ess[v].min()) for v in ess.data_vars),
            "max_r_hat": max(float(rhat[v].max()) for v in rhat.data_vars),
            "steps_per_draw": [round(float(x), 1) for x in steps.mean(axis=1)],
            "model_mean": posterior["model"].mean(("chain", "draw")).values,
            "model_sd": posterior["model"].std(("chain", "draw")).values}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--item-sd", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=150, help="warm fits' burn-in iterations (cold: 500)")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--adapt-step", action="store_true", help="re-adapt the step size during the warm burn-in")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import initialize_model

    from evalpipeline.models import configure_jax, glm

    configure_jax()
    frame = suite_frame(args.models, args.items, args.seed, args.item_sd)
    names = sorted(frame["model"].unique())
    joining = names[-1]
    model_old, arrays_old, layout_old = model_and_arrays(frame[frame["model"] != joining])
    model_new, arrays_new, layout_new = model_and_arrays(frame)
    if layout_old != layout_new:
        print(f"the joining model changes the padded layout ({layout_old} -> {layout_new}): a warm start would need "
              "its arrays re-laid out; choose another --models", file=sys.stderr)
        return 2
    sites = initialize_model(jax.random.PRNGKey(0), model_new, model_args=(arrays_new,)).param_info.z
    block = [tuple(s for s in glm.COLLECTIVE_SITES if s in sites)]
    print(f"{GLM}: {args.models} models x {args.items} items (model {joining} joins); dense block {block[0]}")

    cold_kernel = dict(inverse_mass_matrix=curvature_start(model_old, arrays_old, block[0]))
    old = sampler(model_old, warmup=500, draws=args.draws, dense_mass=block, **cold_kernel)
    seconds = run(old, arrays_old, seed=1)
    print(f"cold fit, {args.models - 1} models (compilation included): {seconds:.1f} s")
    state = old.last_state
    inverse_mass = {k: jnp.mean(v, axis=0) for k, v in state.adapt_state.inverse_mass_matrix.items()}
    diagonal = next(k for k in inverse_mass if "model_rest_raw" in k)  # model_rest_raw is the block's first site
    values = np.asarray(inverse_mass[diagonal]).copy()
    slot = names.index(joining)
    values[slot] = np.median(np.delete(values[:len(names)], slot))
    inverse_mass[diagonal] = jnp.asarray(values)
    step = float(jnp.median(state.adapt_state.step_size))
    warm_kernel = dict(inverse_mass_matrix=inverse_mass, adapt_mass_matrix=False, step_size=step,
                       adapt_step_size=args.adapt_step)

    cold = sampler(model_new, warmup=500, draws=args.draws, dense_mass=block,
                   inverse_mass_matrix=curvature_start(model_new, arrays_new, block[0]))
    run(cold, arrays_new, seed=2)  # compiles
    cold_seconds = run(cold, arrays_new, seed=3)
    reference = describe(cold)
    print(f"cold refit, {args.models} models: {cold_seconds:.1f} s, min bulk ESS {reference['min_ess_bulk']:.0f}, "
          f"max r-hat {reference['max_r_hat']:.4f}, steps/draw per chain {reference['steps_per_draw']}")
    warm = sampler(model_new, warmup=args.warmup, draws=args.draws, dense_mass=block, **warm_kernel)
    run(warm, arrays_new, seed=4, init=state.z)  # compiles
    ratios = []
    for rep in range(args.reps):
        seconds = run(warm, arrays_new, seed=10 + rep, init=state.z)
        found = describe(warm)
        shift = np.max(np.abs(found["model_mean"] - reference["model_mean"]) / reference["model_sd"])
        ratios.append(seconds / cold_seconds)
        print(f"warm refit {rep + 1} ({args.warmup} burn-in, step {'re-adapted' if args.adapt_step else f'{step:.3f} fixed'}): "
              f"{seconds:.1f} s (warm / cold {seconds / cold_seconds:.2f}), min bulk ESS {found['min_ess_bulk']:.0f}, "
              f"max r-hat {found['max_r_hat']:.4f}, steps/draw per chain {found['steps_per_draw']}, "
              f"largest model-effect mean shift {shift:.3f} cold SDs")
    print(f"warm / cold: median {np.median(ratios):.2f} over {len(ratios)} refits (this harness; see the docstring)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
