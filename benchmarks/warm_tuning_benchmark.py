"""Warm suite refits with each chain's own tuning against the chains' pooled tuning (``[glm] warm_tuning``).

    .venv/bin/python benchmarks/warm_tuning_benchmark.py --keep DIR [--suites suite0,suite3] [--repeat 1]

``DIR`` is a folder that ``pipeline_benchmark.py scale --keep DIR`` left. For each suite, from the
``suite_binomial`` fit stored there and the warm-start state its provenance names, it refits the
suite's current samples warm (``fit_glm(warm=...)``: 150 burn-in iterations, mass matrices and step
sizes kept) twice, alternating ``--repeat`` times: with ``warm_tuning = "per_chain"`` (each chain its
own stored step size and inverse mass matrix, the behaviour before) and ``"pooled"`` (every chain the
chains' mean). Same data, same seeds, same compiled sampler; only the tuning differs. The stored
state is used whatever code version wrote it (this measures the sampler, not the lake's staleness).

It prints per suite and tuning: the refit's first-attempt seconds (log-likelihood, PSIS-LOO and
predictive draws included; the first refit of the run compiles and is not compared), each chain's
step size and mean leapfrog steps per kept draw, the smallest bulk ESS, and the ratio per_chain /
pooled of the seconds (above 1: pooling is faster). Then how far the two tunings' LLM-effect
posterior means are apart, in posterior SDs (Monte Carlo noise at these ESS is ~0.05-0.1).
Nothing in the lake is written: each refit works in a temporary folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", required=True, type=Path, help="a folder `pipeline_benchmark.py scale --keep` left")
    parser.add_argument("--suites", default=None, help="comma-separated suites (default: every suite with a stored state)")
    parser.add_argument("--repeat", type=int, default=1, help="refits per tuning and suite (alternating)")
    args = parser.parse_args()
    lake_root, config_path = args.keep / "lake", args.keep / "evalpipeline.toml"
    if not lake_root.is_dir() or not config_path.exists():
        raise SystemExit(f"{args.keep} is not a folder that `scale --keep` left: no lake/ or evalpipeline.toml")
    os.environ["EVALPIPELINE_CONFIG"] = str(config_path)
    from resources.executors import limit_step_threads

    limit_step_threads()  # one XLA thread, as the pipeline's steps run

    import numpy as np

    from evalpipeline.steps.fits import _glm_data, suite_fit_dir, suite_samples
    from evalpipeline.lake import Lake
    from evalpipeline.models import Fitter, configure_jax, fit_glm
    from evalpipeline.models.warm import WarmStart
    from evalpipeline.settings import load_glm_config

    configure_jax()
    lake, config = Lake(lake_root), load_glm_config()
    suites = args.suites.split(",") if args.suites else sorted(
        p.name.split("=", 1)[1] for p in (lake_root / "glm_suite_fits").glob("suite=*"))
    fitter = Fitter()
    print(f"{args.keep}: suites {', '.join(suites)}; {config.settings.num_chains} chains x "
          f"({config.settings.warm_burn_in} burn-in + {config.settings.num_samples} draws); load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    header = f"{'suite':8s} {'tuning':9s} {'seconds':>8s}  {'step size per chain':28s}  {'steps a draw per chain':28s}  {'min ESS':>7s}"
    print(header)
    ratios, compiled = [], False
    for suite in suites:
        directory = suite_fit_dir(lake, suite, "suite_binomial")
        provenance = json.loads((directory / "provenance.json").read_text())
        if not provenance.get("warm_state"):
            print(f"{suite}: no stored warm-start state in {directory}; skipped")
            continue
        state = WarmStart.from_json((directory / provenance["warm_state"]).read_bytes(), provenance["warm_state"])
        samples, _hashes = suite_samples(lake, suite)
        data = _glm_data(samples, config)
        seconds: dict[str, list[float]] = {"per_chain": [], "pooled": []}
        means = {}
        if not compiled:  # the warm sampler's compilation is not the tuning's cost
            fit_glm("suite_binomial", data, config.settings, config.thresholds, f"{suite}|suite_binomial", fitter,
                    priors=config.priors.get("suite_binomial"), warm=state)
            compiled = True
        for _ in range(args.repeat):
            for tuning in ("per_chain", "pooled"):
                settings = dataclasses.replace(config.settings, warm_tuning=tuning)
                fit = fit_glm("suite_binomial", data, settings, config.thresholds, f"{suite}|suite_binomial", fitter,
                              priors=config.priors.get("suite_binomial"), warm=state)
                first = fit.attempts[0]
                stats = fit.idata.sample_stats
                steps = stats["n_steps"].values.mean(axis=1)
                step_size = stats["step_size"].values[:, -1]
                ess = float(fit.diagnostics.set_index("diagnostic").loc["ess_bulk", "value"])
                seconds[tuning].append(first["seconds"])
                model = fit.idata.posterior["model"]
                means[tuning] = (model.mean(("chain", "draw")).values, model.std(("chain", "draw")).values)
                print(f"{suite:8s} {tuning:9s} {first['seconds']:8.2f}  {np.array2string(step_size, precision=3):28s}  "
                      f"{np.array2string(steps, precision=1):28s}  {ess:7.0f}"
                      + ("" if first["passed"] and first["start"].startswith("warm") else f"  ({first['start']}, failed {first['failed']})"))
        ratio = statistics.median(seconds["per_chain"]) / statistics.median(seconds["pooled"])
        ratios.append(ratio)
        shift = np.abs(means["per_chain"][0] - means["pooled"][0]) / means["pooled"][1]
        print(f"{suite:8s} per_chain / pooled seconds {ratio:.2f}x; LLM effects' posterior means apart by at most "
              f"{shift.max():.3f} posterior SDs")
    if ratios:
        print(f"all suites: per_chain / pooled seconds, median {statistics.median(ratios):.2f}x, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
