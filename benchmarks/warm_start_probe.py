"""Probe: what would warm-starting a suite GLM refit save when one model joins the suite?

The new-model night is dominated by the suite GLM refits (benchmarks/README.md). This probe
measured the lever before it was built into the pipeline (``[glm] warm_start``,
evalpipeline/models/warm.py). The pipeline first kept each chain's own mass matrix and step size where
this probe averages them over the chains; since the twenty-ninth session it pools them too
(``[glm] warm_tuning = "pooled"``: the mean inverse mass matrix and the mean step size, where this
probe takes the median step size; benchmarks/warm_tuning_benchmark.py). On a generated suite
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

Cold fits start as the pipeline's do: each chain uniformly in (-2, 2) on the unconstrained
scale, its mass matrix from ``fit.curvature_inverse_mass`` there.

It prints the seconds and the leapfrog steps (warmup included) of each fit and their ratios warm /
cold, every fit's smallest bulk ESS, largest r-hat and mean leapfrog steps per kept draw, and how
far the warm posterior means of the model effects are from the cold ones (in cold posterior SDs).
The samplers are built like the pipeline's (``fit._build_runner``: numpyro's ``hmc`` kernel in one
``lax.scan`` per chain, four chains one after another in one compiled program), without its
log-likelihood, predictive draws and files; each is compiled by an untimed first run (the N - 1
fit's time includes its compilation).

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


def chain_runner(model, arrays, *, warmup: int, draws: int, block: tuple[str, ...], warm: bool, adapt_step: bool = False):
    """A compiled sampler of four chains, one after another, as the pipeline's runner (``fit._build_runner``).

    Cold: each chain starts uniformly in (-2, 2) on the unconstrained scale with the pipeline's
    curvature-based inverse mass matrix (``fit.curvature_inverse_mass``) and numpyro's windowed adaptation.
    Warm: each chain starts from a given state, with a given inverse mass matrix (kept) and step size
    (kept, or re-adapted with ``adapt_step``). Returns ``run(keys, data, starts, inverse_mass, step_size)``
    (``starts``: per-chain positions, ignored when cold) giving the kept draws of the constrained sites,
    every iteration's leapfrog steps, the kept draws' divergences and each chain's final position, inverse mass matrix and step size.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax, random
    from numpyro.infer.hmc import hmc
    from numpyro.infer.util import initialize_model

    from evalpipeline.models.fit import curvature_inverse_mass

    found = {}

    def initialise(data):
        found["info"] = initialize_model(random.PRNGKey(0), model, model_args=(data,), dynamic_args=True)
        return found["info"].param_info.z

    prototype = jax.eval_shape(initialise, arrays)
    potential_gen, postprocess_gen = found["info"].potential_fn, found["info"].postprocess_fn
    sites = tuple(sorted(prototype))

    def one_chain(key, data, start, inverse_mass, step_size):
        init_key, run_key = random.split(key)
        if not warm:
            keys = random.split(init_key, len(sites))
            start = {s: random.uniform(k, jnp.shape(prototype[s]), minval=-2.0, maxval=2.0) for s, k in zip(sites, keys)}
            inverse_mass = curvature_inverse_mass(potential_gen(data), start, random.fold_in(init_key, 1), block)
        init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")
        state = init_kernel(start, warmup, step_size=step_size if warm else 1.0, inverse_mass_matrix=inverse_mass,
                            adapt_step_size=adapt_step or not warm, adapt_mass_matrix=not warm, dense_mass=[block],
                            target_accept_prob=0.8, max_tree_depth=10, model_args=(data,), rng_key=run_key)

        def step(state, _):
            state = sample_kernel(state, model_args=(data,))
            return state, (state.z, state.num_steps, state.diverging)

        last, (z, steps, diverging) = lax.scan(step, state, None, length=warmup + draws)
        kept = jax.vmap(postprocess_gen(data))(jax.tree.map(lambda x: x[warmup:], z))
        return ({k: kept[k] for k in ("model", "sigma_model", "sigma_task", "overall")}, steps, diverging[warmup:],
                last.z, last.adapt_state.inverse_mass_matrix, last.adapt_state.step_size)

    return jax.jit(lambda keys, data, starts, inverse_mass, step_size: lax.map(
        lambda ks: one_chain(ks[0], data, ks[1], inverse_mass, step_size), (keys, starts)))


def run(runner, arrays, seed: int, starts, inverse_mass, step_size) -> tuple[dict, float]:
    import jax
    from jax import random

    started = time.perf_counter()
    draws, steps, diverging, last, final_mass, final_step = jax.block_until_ready(
        runner(random.split(random.PRNGKey(seed), 4), arrays, starts, inverse_mass, step_size))
    seconds = time.perf_counter() - started
    return {"draws": jax.device_get(draws), "steps": np.asarray(steps), "divergences": int(np.asarray(diverging).sum()),
            "last": last, "inverse_mass": final_mass,
            "step_size": np.asarray(final_step)}, seconds


def describe(result: dict, warmup: int) -> dict:
    import arviz as az

    posterior = az.from_dict(posterior=result["draws"]).posterior
    ess, rhat = az.ess(posterior, method="bulk"), az.rhat(posterior)
    steps = result["steps"].astype(float)
    return {"min_ess_bulk": min(float(ess[v].min()) for v in ess.data_vars),
            "max_r_hat": max(float(rhat[v].max()) for v in rhat.data_vars),
            "steps_per_draw": [round(float(x), 1) for x in steps[:, warmup:].mean(axis=1)],
            "leapfrogs": int(steps.sum()), "divergences": result["divergences"],
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
    block = tuple(s for s in glm.COLLECTIVE_SITES if s in sites)
    print(f"{GLM}: {args.models} models x {args.items} items (model {joining} joins); dense block {block}")

    cold_old = chain_runner(model_old, arrays_old, warmup=500, draws=args.draws, block=block, warm=False)
    dummy = {k: jnp.zeros((4,) + v.shape, v.dtype) for k, v in sites.items()}  # cold chains draw their own starts
    old, seconds = run(cold_old, arrays_old, 1, dummy, None, 1.0)
    print(f"cold fit, {args.models - 1} models (compilation included): {seconds:.1f} s")
    inverse_mass = {k: jnp.mean(v, axis=0) for k, v in old["inverse_mass"].items()}
    diagonal = next(k for k in inverse_mass if "model_rest_raw" in k)  # model_rest_raw is the block's first site
    values = np.asarray(inverse_mass[diagonal]).copy()
    slot = names.index(joining)
    values[slot] = np.median(np.delete(values[:len(names)], slot))
    inverse_mass[diagonal] = jnp.asarray(values)
    step = float(np.median(old["step_size"]))

    cold = chain_runner(model_new, arrays_new, warmup=500, draws=args.draws, block=block, warm=False)
    run(cold, arrays_new, 2, dummy, None, 1.0)  # compiles
    result, cold_seconds = run(cold, arrays_new, 3, dummy, None, 1.0)
    reference = describe(result, 500)
    print(f"cold refit, {args.models} models: {cold_seconds:.1f} s, {reference['leapfrogs']:,} leapfrog steps, "
          f"{reference['divergences']} divergences, min bulk ESS {reference['min_ess_bulk']:.0f}, max r-hat {reference['max_r_hat']:.4f}, "
          f"steps/draw per chain {reference['steps_per_draw']}")
    warm = chain_runner(model_new, arrays_new, warmup=args.warmup, draws=args.draws, block=block, warm=True,
                        adapt_step=args.adapt_step)
    run(warm, arrays_new, 4, old["last"], inverse_mass, step)  # compiles
    ratios, leapfrog_ratios = [], []
    for rep in range(args.reps):
        result, seconds = run(warm, arrays_new, 10 + rep, old["last"], inverse_mass, step)
        found = describe(result, args.warmup)
        shift = np.max(np.abs(found["model_mean"] - reference["model_mean"]) / reference["model_sd"])
        ratios.append(seconds / cold_seconds)
        leapfrog_ratios.append(found["leapfrogs"] / reference["leapfrogs"])
        print(f"warm refit {rep + 1} ({args.warmup} burn-in, step {'re-adapted' if args.adapt_step else f'{step:.3f} fixed'}): "
              f"{seconds:.1f} s (warm / cold {seconds / cold_seconds:.2f}), {found['leapfrogs']:,} leapfrog steps "
              f"({leapfrog_ratios[-1]:.2f}), {found['divergences']} divergences, min bulk ESS {found['min_ess_bulk']:.0f}, max r-hat {found['max_r_hat']:.4f}, "
              f"steps/draw per chain {found['steps_per_draw']}, largest model-effect mean shift {shift:.3f} cold SDs")
    print(f"warm / cold leapfrog steps: median {np.median(leapfrog_ratios):.2f}")
    print(f"warm / cold: median {np.median(ratios):.2f} over {len(ratios)} refits (this harness; see the docstring)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
