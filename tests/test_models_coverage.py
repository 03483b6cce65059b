"""Planted truth: 95% HPDIs of the subdomain effects cover the truth in 90-99% of 120-200 simulated data sets.

Per-partition models (binomial, beta-binomial, item difficulty) and per-suite models (Eq. 3's
nested subdomain effects per LLM, Eq. 5's shared subdomain deviations beside LLM and task
effects); the null models have no subdomain effects to cover.

Parameters are drawn from each model's own prior and data from the model, so
the 95% posterior interval covers the truth with probability exactly 0.95
averaged over the prior (any credible region of mass 0.95 does). Cells are small
on purpose: 3-25 items x 3 attempts (9-75 observations; two cells under 20).

Monte Carlo error. A data set's subdomain intervals share its overall level and
its sampler run, so they are covered or missed together: the standard error of
the observed coverage is that of the mean of the per-data-set coverages, not the
binomial one of all intervals (design effect 1.4-3.9 at these seeds). At 200 data
sets it is 0.010 (binomial) and 0.013 (beta-binomial, item difficulty); suite_nested
(10 intervals a data set) reaches 0.012 with 120 data sets, and suite_binomial (whose
shared deviations vary less together, design effect 1.4) 0.012 with 100. A failure
message states it. The band [0.90, 0.99] then lies 3.8-4.8 standard errors below
0.95 and 3.1-3.8 above, so a correct sampler fails it about once in a thousand runs
per model, while one whose intervals cover 0.86 or less fails it almost surely.
Fewer data sets would bring the error close to the band's width: the per-partition
models keep 200.

The 200 fits run as one compiled program (``Fitter.sample_batch``; chains one after
another, the default: 183 s for the five models against 288 s in lockstep): each data
set has its own chains and warmup adaptation, so each result is the fit it
would get alone. (Putting the data sets in one joint model under a plate would
factorise exactly too, but would share one step size and mass matrix.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from evalpipeline.models import FitSettings, Fitter, GlmData
from evalpipeline.models.fit import hpdi

ITEMS_PER_SUBDOMAIN = (3, 6, 10, 15, 25)
REPEATS = 3
N_DATASETS = 200
#: the suite models reach the per-partition models' standard error with fewer data sets (above)
DATASETS = {"suite_nested": 120, "suite_binomial": 100}
# affordable: 2 chains x 250 draws give each 95% HPDI from 500 draws; one design, so no padding
SETTINGS = FitSettings(num_warmup=250, num_samples=250, num_chains=2, pad=False)
# Eq. 5's LLM + subdomain + task effects leave ~20% of these short fits with a divergence or two at
# target accept 0.8, with 250 or 500 warmup alike; the pipeline's retry (0.95) is what removes them
TARGET_ACCEPT = {"suite_binomial": 0.95}


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


SUITE_MODELS = ("m1", "m2")  # two LLMs on the same items
SUITE_ITEMS = (2, 4, 6, 8, 10)  # per subdomain: 6-30 observations per LLM x subdomain cell


def _simulate_suite(model: str, rng: np.random.Generator):
    """One two-LLM data set and the true subdomain effects, from the suite model's prior (glm.py defaults).

    suite_nested (Eq. 3): subdomain_{i,k} = model_i + sigma_subdomain z (one domain, so no domain level;
    the truth is the (LLM, subdomain) logit). suite_binomial (Eq. 5 + shared subdomains): logit =
    model_i + subdomain_dev_k + eta_item (the truth is the shared deviation subdomain_dev_k).
    """
    rows = []
    if model == "suite_nested":
        overall = rng.normal(0.0, 1.0)
        llm = overall + abs(rng.normal(0.0, 0.1)) * rng.normal(size=len(SUITE_MODELS))
        truth = llm[:, None] + abs(rng.normal(0.0, 0.1)) * rng.normal(size=(len(SUITE_MODELS), len(SUITE_ITEMS)))
        logit = lambda m, s, i: truth[m, s]  # noqa: E731
    else:  # suite_binomial: identified intercept sd sqrt(1 + 1 + 1) (Eq. 5's mu_overall, sigma_overall, mu_model)
        llm = rng.normal(0.0, np.sqrt(3.0)) + abs(rng.normal(0.0, 0.5)) * rng.normal(size=len(SUITE_MODELS))
        truth = abs(rng.normal(0.0, 0.1)) * rng.normal(size=len(SUITE_ITEMS))
        task = {(s, i): abs(rng.normal(0.0, 0.5)) * rng.normal() for s, n in enumerate(SUITE_ITEMS) for i in range(n)}
        logit = lambda m, s, i: llm[m] + truth[s] + task[(s, i)]  # noqa: E731
    for m, name in enumerate(SUITE_MODELS):
        for s, n_items in enumerate(SUITE_ITEMS):
            for i in range(n_items):
                rows.append(
                    {
                        "model": name,
                        "domain": "d",
                        "subdomain": f"s{s}",
                        "item_id": f"s{s}-{i}",
                        "k": rng.binomial(REPEATS, _expit(logit(m, s, i))),
                        "n": REPEATS,
                    }
                )
    return GlmData.from_counts(pd.DataFrame(rows)), truth


def _simulate(model: str, rng: np.random.Generator):
    """One data set and its true subdomain logits, parameters drawn from the model's prior (glm.py defaults)."""
    if model.startswith("suite_"):
        return _simulate_suite(model, rng)
    overall = rng.normal(0.0, np.sqrt(1.0 + 0.5**2))  # identified intercept: Var = 1 + 0.5^2 (Eq. 2)
    sigma_subdomain = abs(rng.normal(0.0, 0.1))
    subdomain = overall + sigma_subdomain * rng.normal(size=len(ITEMS_PER_SUBDOMAIN))
    phi = rng.gamma(1.0, 1 / 0.1)
    item_sd = rng.gamma(2.0, 1 / 2.0)
    rows = []
    for s, n_items in enumerate(ITEMS_PER_SUBDOMAIN):
        for i in range(n_items):
            logit = subdomain[s]
            if model == "item_difficulty":
                logit = logit - item_sd * rng.normal()
            p = _expit(logit)
            if model == "beta_binomial":
                p = rng.beta(max(p * phi, 1e-3), max((1 - p) * phi, 1e-3))
            rows.append(
                {
                    "domain": "d",
                    "subdomain": f"s{s}",
                    "item_id": f"s{s}-{i}",
                    "k": rng.binomial(REPEATS, p),
                    "n": REPEATS,
                }
            )
    return GlmData.from_counts(pd.DataFrame(rows)), subdomain


@pytest.mark.slow
@pytest.mark.parametrize("model", ["binomial", "beta_binomial", "item_difficulty", "suite_nested", "suite_binomial"])
def test_subdomain_hpdi_coverage(model):
    seeds = {"binomial": 101, "beta_binomial": 202, "item_difficulty": 303, "suite_nested": 404, "suite_binomial": 505}
    rng = np.random.default_rng(seeds[model])
    n_datasets = DATASETS.get(model, N_DATASETS)
    simulated = [_simulate(model, rng) for _ in range(n_datasets)]
    settings = dataclasses.replace(SETTINGS, target_accept=TARGET_ACCEPT.get(model, SETTINGS.target_accept))
    results = Fitter().sample_batch(model, [d for d, _ in simulated], settings, seed_key=f"coverage|{model}")
    covered, per_dataset, divergent = [], [], 0
    for (data, truth), result in zip(simulated, results):
        # (chains, draws, LLMs, subdomains), or (chains, draws, subdomains) for the shared deviations
        draws = result["posterior"]["subdomain_dev" if model == "suite_binomial" else "subdomain"]
        flat = draws.reshape((-1,) + np.shape(truth)[-1:] if np.ndim(truth) == 1 else (-1, np.size(truth)))
        low, high = hpdi(flat, 0.95)
        truth = np.ravel(truth)
        hits = (low <= truth) & (truth <= high)
        covered.extend(hits)
        per_dataset.append(np.mean(hits))
        divergent += result["divergences"] > 0
    coverage = float(np.mean(covered))
    mc_se = float(np.std(per_dataset, ddof=1) / np.sqrt(n_datasets))  # data sets are the independent units
    assert 0.90 <= coverage <= 0.99, f"{model}: coverage {coverage:.3f} (Monte Carlo standard error {mc_se:.4f})"
    # a sanity bound, not a diagnostic gate: short warmup (250) leaves a few fits with a divergence or two
    assert divergent <= 0.15 * n_datasets, f"{model}: {divergent} of {n_datasets} fits diverged"
