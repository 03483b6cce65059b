"""Hierarchical binomial / beta-binomial GLMs of HiBayES (the HiBayES paper Eq. 2-6) in numpyro.

Every model is a function ``model(arrays, **priors)`` over the padded arrays
built by :func:`build_arrays` from a :class:`~evalpipeline.models.data.GlmData`.
The observation site is always ``obs``: one binomial (or beta-binomial) term per
unit (item, or model x item, see data.py), so all candidates of one data set
have their pointwise log-likelihood on the same units.

Per partition (one LLM x one suite):

* :func:`binomial` -- Eq. 2 (overall -> domain) extended by Eq. 3's subdomain
  level, for one LLM; covariate effects (Eq. 4-6 style) when ``cov_*`` exist.
* :func:`beta_binomial` -- the same linear predictor with per-unit success
  probabilities theta ~ Beta(p phi, (1-p) phi), phi ~ Gamma(1, 0.1) (Eq. 4).
  theta is integrated out analytically (``BetaBinomial``): same model, no per-item
  latent variables, and the pointwise likelihood WAIC/LOO need is the marginal one.
  Applicable only when some unit has two or more attempts: with one, the marginal is a
  Bernoulli with mean p whatever phi is (:func:`applicability`).
* :func:`null` -- overall (-> domain) only: no subdomain structure, no covariates
  (the role of Eq. 6 in Figure 8).
* :func:`item_difficulty` -- :func:`binomial` minus a per-item difficulty
  ``b_q ~ Normal(0, sd_q)``, ``sd_q ~ Gamma(2, 2)`` (the Bayesian Evals slides,
  Model 3, "questionDifficulty"); applicable only when items have repeats,
  otherwise b_q is informed by its prior alone.

Per suite (all LLMs on one suite; the ``model`` column has two or more values):

* :func:`suite_nested` -- Eq. 3 exactly: model_i -> domain_{i,j} -> subdomain_{i,j,k}.
* :func:`suite_binomial` -- Eq. 5: mod_model_i + shared (domain ->) subdomain
  deviations + task (item) effects eta_j + covariates (categorical group effects
  like diff_difficulty, numeric slopes gamma per LLM x first categorical level
  like gamma_reasoning_{i,d}).
* :func:`suite_beta_binomial` -- Eq. 4: the same with the beta-binomial likelihood (applicable,
  as :func:`beta_binomial`, only when some LLM's item has two or more attempts).
* :func:`suite_null` -- Eq. 6: mod_model_i + eta_j, without the difficulty term by default
  (the paper's text) or with it (``use_difficulty``, the paper's equation).

Parameterisation (recorded per fit, see fit.py):

* ``paper_form=False`` (default) drops the paper's scalar
  ``mu_bar = mu_overall + sigma_overall * z_overall``: only the sum is identified,
  and the ridge costs NUTS an order of magnitude more leapfrog steps. The
  identified intercept gets the same prior mean and variance,
  ``Normal(0, sqrt(mu_overall_sd^2 + sigma_overall_scale^2 [+ 1 for Eq. 4-6's
  mu_model_overall ~ Normal(mu_bar, 1)]))`` (the paper's is a scale mixture of
  normals with that variance, a little heavier in the tails).
  ``paper_form=True`` samples mu_overall, sigma_overall, z_overall as written.
* Each varying-effect level is centred or non-centred per group through a
  ``centred`` array of 0/1 (0 = non-centred, ``x = loc + scale * z``; 1 = centred,
  ``x ~ Normal(loc, scale)``); :func:`choose_centring` picks it per level from how
  much information the level's groups carry. Because it is data, not code, the
  choice does not trigger a recompilation.
* Identified-form deviations (shared subdomain and task effects of the suite
  models, categorical covariate effects) have mean zero: the paper's
  ``mu_difficulty_overall``, ``mu_task_overall`` and per-cell
  ``mu_reasoning_{i,d}`` are, like mu_bar, only identified in sum with the
  intercept. ``paper_form`` does not restore those (it restores mu_bar only).
* The crossed suite models (:data:`CROSSED_MODELS`) are sampled in the
  group-mean basis (``FitSettings.group_mean_basis``, default on): the LLM and
  task effects in coordinates where their (per-subdomain) means are coordinates
  of their own, tasks centred on their subdomain, and one dense block of the
  mass matrix over those few collective coordinates. Same priors and
  likelihood; see :func:`_grouped_effects` and :func:`suite_binomial`.
* When every LLM of a suite answered every task once (a complete grid,
  :func:`unit_grid`), the crossed suite models lay their units out as an
  LLM x task grid (``FitSettings.unit_grid``, default on) and form the linear
  predictor as an outer sum instead of gathering one LLM and one task effect per
  unit. Same model and log density (tested); its gradient has axis sums where the
  gathers' had scatter-adds. A 100-LLM x 200-task fit is ~12% faster
  (docs/performance.md, suite-grid).
* Models whose linear predictor is the same for every unit of a cell (the same
  LLM, domain, subdomain and covariate values) and whose likelihood is binomial
  (:func:`samples_on_cells`: :func:`binomial` without item effects,
  :func:`null`, :func:`suite_nested`) are sampled on the cells' sufficient
  statistics (``FitSettings.sufficient_cells``, default on): the sum of a cell's
  unit terms ``k_u eta - n_u log(1 + e^eta) + log C(n_u, k_u)`` is
  ``K eta - N log(1 + e^eta) + sum_u log C(n_u, k_u)`` with ``K``, ``N`` the
  cell's totals, so the log density is the same (tested). The pointwise
  log-likelihood, ``p`` and the predictive checks stay per unit. A partition's
  200 items in 4 subdomains: 4 terms a gradient instead of 512 padded units, its
  NUTS run ~0.9 -> ~0.35 s (docs/performance.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats
import numpyro
import numpyro.distributions as dist
import pandas as pd

from evalpipeline.models.data import GlmData

# ---------------------------------------------------------------------------
# padded arrays


@dataclass(frozen=True)
class Layout:
    """Padded sizes: unit, domain, subdomain, item and category axes rounded up to buckets.

    Padding lets one compiled sampler serve every data set of the same bucket.
    Padded units are masked out of the likelihood; padded groups are never
    observed and always non-centred, so their z ~ Normal(0, 1) independently of
    everything else and the posterior of the real parameters is unchanged.
    """

    units: int
    domains: int
    subdomains: int
    items: int
    models: int
    numeric: int
    categorical: int
    levels: int
    slope_groups: int


def bucket(size: int, minimum: int = 4, growth: int = 4) -> int:
    """Smallest ``minimum * growth**j`` >= size (few distinct shapes -> few compilations)."""
    value = minimum
    while value < size:
        value *= growth
    return value


def padded_units(size: int) -> int:
    """Units padded for a compiled sampler: 512, 2048, then the next multiple of 1/8 of a power of two.

    Small layouts share a few 4x buckets (a compilation costs 10-60 s, a padded
    unit a few ns per leapfrog step). Past 2,048 units (suite-level fits with many
    LLMs) a 4x bucket would waste up to 75% of every gradient -- a 20,000-unit
    suite padded to 32,768 sampled ~40% slower -- so the size is rounded up by at
    most 1/8 instead; one more LLM on a 100-LLM suite (20,000 -> 20,200 units)
    then stays in the same shape (20,480) and reuses the cached compilation.
    """
    if size <= 2048:
        return bucket(size, 512)
    step = 1 << max((size - 1).bit_length() - 4, 0)
    return -(-size // step) * step


def padded_models(size: int) -> int:
    """LLMs padded for a compiled sampler: exact up to 8 (a handful of LLMs rarely changes), then a multiple of 8.

    On a leaderboard-sized suite the count grows by one with every new LLM; the
    padded slots (unobserved N(0, 1) effects, dropped from the posterior) keep
    the shape, so the nightly refit reuses the compiled sampler.
    """
    return size if size <= 8 else -(-size // 8) * 8


def layout_for(data: GlmData, *, pad: bool = True, grid: bool = False) -> Layout:
    """Padded sizes for ``data``. ``grid``: units laid out as padded LLMs x real tasks (see
    :func:`unit_grid`), so the padding is whole LLMs at the end, as the LLM axis is padded."""
    cats = data.categorical_covariates
    levels = max((len(v) for v in cats.values()), default=1)
    first_levels = len(next(iter(cats.values()))) if cats else 1
    if not pad:
        return Layout(
            data.n_units,
            data.n_domains,
            data.n_subdomains,
            data.n_items,
            data.n_models,
            len(data.numeric_covariates),
            len(cats),
            levels,
            data.n_models * first_levels,
        )
    # coarse buckets: a compilation costs 10-60 s (once: kept on disk), a padded unit a few ns per leapfrog
    # step; the first bucket holds a typical partition (<= 512 items), so most share one sampler. A padded
    # subdomain costs more: it is a prior-only coordinate NUTS samples, and more coordinates shrink the step
    # size (a partition's 4 subdomains padded to 32: 11.9 against 8.5 leapfrog steps a draw), so subdomains
    # take doubling buckets (4, 8, 16, ...)
    models = padded_models(data.n_models)
    return Layout(
        units=models * data.n_items if grid else padded_units(data.n_units),
        domains=bucket(data.n_domains, 4),
        subdomains=bucket(data.n_subdomains, 4, 2),
        items=bucket(data.n_items, 512),
        models=models,
        numeric=len(data.numeric_covariates),
        categorical=len(cats),
        levels=bucket(levels, 2) if cats else 1,
        slope_groups=models * first_levels,
    )


def room_for_another_llm(data: GlmData, layout: Layout, *, grid: bool = False) -> bool:
    """Whether ``layout`` (of ``data``) would also hold the data with one LLM more, evaluated on as many
    units as the average LLM here: the nightly refit after a new LLM joins then keeps the compiled shape."""
    if data.n_models == 0 or padded_models(data.n_models + 1) != layout.models:
        return False
    return grid or padded_units(data.n_units + -(-data.n_units // data.n_models)) == layout.units


def _pad(values: np.ndarray, size: int, fill=0) -> np.ndarray:
    values = np.asarray(values)
    out = np.full((size,) + values.shape[1:], fill, dtype=values.dtype)
    out[: len(values)] = values
    return out


CENTRING_LEVELS = ("model", "domain", "subdomain", "item")


def _group_keys(level: str, shared_items: bool) -> tuple[list[str], list[str]]:
    """(columns identifying a level's groups, columns identifying their parents). ``shared_items``:
    the suite models' task effects are common to all LLMs (crossed with them), so a task's group
    pools every LLM's units and deviates from its subdomain."""
    column = {"model": "model_idx", "domain": "domain_idx", "subdomain": "subdomain_idx", "item": "item_idx"}[level]
    if level == "model":
        return [column], []
    if level == "item" and shared_items:
        return ["subdomain_idx", column], ["subdomain_idx"]
    parents = _PARENTS[level]
    return list(dict.fromkeys(parents + ["model_idx", column])), parents


def group_information(data: GlmData, level: str, *, shared_items: bool = False) -> np.ndarray:
    """Fisher information about each group's logit, sum of n * r * (1 - r) over its units.

    r is the group's smoothed rate (k + 1) / (n + 2), so a group with all
    successes still counts as weakly informative rather than uninformative.
    """
    keys, _ = _group_keys(level, shared_items)
    grouped = data.units.groupby(keys)[["k", "n"]].sum()
    rate = (grouped["k"] + 1.0) / (grouped["n"] + 2.0)
    return (grouped["n"] * rate * (1.0 - rate)).to_numpy(dtype=float)


#: Which groups a level's groups deviate from (Eq. 2/3 nesting; items sit in subdomains).
_PARENTS = {
    "model": [],
    "domain": ["model_idx"],
    "subdomain": ["model_idx", "domain_idx"],
    "item": ["model_idx", "subdomain_idx"],
}


def group_spread(data: GlmData, level: str, *, shared_items: bool = False) -> float:
    """A cautious (lower 95%) estimate of the sd of a level's group logits around their parents'.

    The groups' empirical logits (smoothed rates, as in :func:`group_information`)
    about their parent's mean have mean square ``ms`` on ``dof`` degrees of
    freedom; its lower 95% confidence bound ``ms * dof / chi2_0.975(dof)`` less
    the average sampling variance 1 / information estimates the between-group
    variance from below (0 when negative or when no parent has two groups). From
    below, because with few groups -- two or three LLMs -- the data cannot rule
    out a small sigma, and a small sigma is where the centred form has its funnel.
    """
    keys, parents = _group_keys(level, shared_items)
    grouped = data.units.groupby(keys)[["k", "n"]].sum().reset_index()
    rate = (grouped["k"] + 1.0) / (grouped["n"] + 2.0)
    logit = np.log(rate / (1.0 - rate))
    info = grouped["n"] * rate * (1.0 - rate)
    deviation = logit - (logit.groupby([grouped[k] for k in parents]).transform("mean") if parents else logit.mean())
    dof = len(grouped) - (grouped[parents].drop_duplicates().shape[0] if parents else 1)
    if dof < 1:
        return 0.0
    total_low = float(np.sum(deviation**2)) / stats.chi2.ppf(0.975, dof)
    return float(np.sqrt(max(total_low - float(np.mean(1.0 / info)), 0.0)))


def choose_centring(
    data: GlmData, scales: dict[str, float], *, mode: str = "auto", threshold: float = 1.0, shared_items: bool = False
) -> dict[str, str]:
    """Centred or non-centred per level.

    Centred when the median group's data information about its logit, times the
    variance of the groups around their parents, is at least ``threshold``: then
    the likelihood, not the hierarchical prior, pins each group and the centred
    form has no funnel; otherwise non-centred (Betancourt & Girolami's rule of
    thumb, as numbers). The group sd is the smaller of the level's prior scale
    (``scales[level]``) and its spread in the data (:func:`group_spread`): groups
    that are each well measured but barely differ -- two LLMs of similar skill --
    put the posterior of the level's sigma near 0, where the centred form has its
    funnel (seen as thousands of divergences on a planted-truth suite study).
    ``mode`` forces one form. ``shared_items`` (the suite models' task effects,
    common to all LLMs): a task's information is summed over the LLMs that
    answered it -- 100 LLMs pin a task with 100 attempts, not one. (Only the
    tasks: the shared subdomain deviations are pinned by their tasks' prior, not
    by the data, so their own information does not measure what pins them.)
    """
    if mode not in ("auto", "centred", "non_centred"):
        raise ValueError(f"centring must be 'auto', 'centred' or 'non_centred', not {mode!r}")
    choice = {}
    for level, scale in scales.items():
        if mode != "auto":
            choice[level] = mode
            continue
        info = group_information(data, level, shared_items=shared_items)
        sd = min(scale, group_spread(data, level, shared_items=shared_items)) if len(info) else 0.0
        choice[level] = "centred" if len(info) and np.median(info) * sd**2 >= threshold else "non_centred"
    return choice


def build_arrays(data: GlmData, layout: Layout, centring: dict[str, str]) -> dict[str, np.ndarray]:
    """The model's inputs, padded to ``layout``."""
    u = data.units
    m_idx = u["model_idx"].to_numpy(np.int32)
    cats = list(data.categorical_covariates)
    arrays: dict[str, np.ndarray] = {
        "k_obs": _pad(u["k"].to_numpy(np.float32), layout.units),
        "n": _pad(u["n"].to_numpy(np.int32), layout.units, 1),
        "unit_mask": _pad(np.ones(len(u), bool), layout.units, False),
        "model_idx": _pad(m_idx, layout.units),
        "domain_idx": _pad(u["domain_idx"].to_numpy(np.int32), layout.units),
        "subdomain_idx": _pad(u["subdomain_idx"].to_numpy(np.int32), layout.units),
        "item_idx": _pad(u["item_idx"].to_numpy(np.int32), layout.units),
        "subdomain_parent": _pad(data.subdomain_parent.astype(np.int32), layout.subdomains),
    }
    numeric = np.zeros((len(u), layout.numeric), np.float32)
    for j, column in enumerate(data.numeric_covariates):
        values = u[column].to_numpy(float)
        numeric[:, j] = values - values.mean()
    arrays["cov_numeric"] = _pad(numeric, layout.units)
    k, n = u["k"].to_numpy(float), u["n"].to_numpy(float)
    log_choose = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    arrays["log_choose"] = _pad(log_choose.astype(np.float32), layout.units, 0.0)
    categorical = np.zeros((len(u), layout.categorical), np.int32)
    for j, column in enumerate(cats):
        categorical[:, j] = u[f"{column}_idx"].to_numpy(np.int32)
    arrays["cov_categorical"] = _pad(categorical, layout.units)
    first_level = u[f"{cats[0]}_idx"].to_numpy(np.int32) if cats else np.zeros(len(u), np.int32)
    n_first = len(data.categorical_covariates[cats[0]]) if cats else 1
    arrays["slope_group"] = _pad(m_idx * n_first + first_level, layout.units)

    def flags(level: str, real: int, size: int) -> np.ndarray:
        return _pad(np.full(real, 1.0 if centring.get(level) == "centred" else 0.0, np.float32), size, 0.0)

    arrays["c_model"] = flags("model", data.n_models, layout.models)
    arrays["c_domain"] = np.tile(flags("domain", data.n_domains, layout.domains), (layout.models, 1))
    arrays["c_subdomain"] = np.tile(flags("subdomain", data.n_subdomains, layout.subdomains), (layout.models, 1))
    arrays["c_item"] = flags("item", data.n_items, layout.items)
    # 0..G-1 for the beta-binomial's rising factorials (empty: fractional counts or n > 256)
    max_n = int(u["n"].max())
    integral = bool(np.all(np.equal(np.mod(u["k"].to_numpy(float), 1.0), 0.0)))
    arrays["count_grid"] = (
        np.arange(bucket(max_n, 4), dtype=np.float32) if integral and max_n <= 256 else np.zeros(0, np.float32)
    )
    # shape carriers for the covariate blocks (always non-centred: slopes and effects are few)
    arrays["c_slope"] = np.zeros(layout.slope_groups, np.float32)
    arrays["c_category"] = np.zeros((layout.categorical, layout.levels), np.float32)
    return arrays


#: What the likelihood cells' arrays are called in the arrays a sampler takes (:func:`cell_arrays`).
CELL_PREFIX = "cell_"
#: The per-unit arrays a cell model's linear predictor reads: units agreeing in all of them share eta.
#: ``item_idx`` is not among them and gets no cell array: a model that read it would fail on the shape.
CELL_KEY_ARRAYS = ("model_idx", "domain_idx", "subdomain_idx", "slope_group", "cov_categorical", "cov_numeric")
#: The per-unit arrays summed over a cell: the binomial term is linear in k and n, log C(n, k) is a constant.
CELL_SUMMED_ARRAYS = ("k_obs", "n", "log_choose")


def samples_on_cells(name: str, options: dict) -> bool:
    """Whether model ``name`` with ``options`` may be sampled on likelihood cells (:func:`cell_arrays`):
    a binomial likelihood whose linear predictor has no per-item term."""
    return (
        name in ("binomial", "null", "suite_nested")
        and options.get("likelihood", "binomial") == "binomial"
        and options.get("item_sd_concentration") is None
    )


def padded_cells(size: int) -> int:
    """Cells padded for a compiled sampler: 32, 128, 512, then as :func:`padded_units`."""
    return bucket(size, 32) if size <= 512 else padded_units(size)


def cell_arrays(arrays: dict[str, np.ndarray], n_units: int) -> dict[str, np.ndarray] | None:
    """The likelihood's cells: the real units grouped by every array their linear predictor reads
    (:data:`CELL_KEY_ARRAYS`), with ``k``, ``n`` and ``log C(n, k)`` summed per cell, padded as units
    are (``n`` 1, ``k`` 0, masked). Named ``cell_<array>`` (:data:`CELL_PREFIX`); the sampler's
    potential reads them in place of the unit arrays (fit.py). None when the padded cells would be no
    fewer than the padded units (nothing to gain)."""
    units = len(arrays["k_obs"])
    columns = []
    for name in CELL_KEY_ARRAYS:
        values = np.asarray(arrays[name])[:n_units]
        values = values.reshape(n_units, int(np.prod(values.shape[1:])))
        if values.dtype.kind == "f":  # equal values have equal bits (covariates are finite)
            values = np.ascontiguousarray(values, np.float32).view(np.int32)
        columns.append(values.astype(np.int64))
    key = np.concatenate(columns, axis=1) if columns else np.zeros((n_units, 0), np.int64)
    _, first, cell_of_unit = np.unique(key, axis=0, return_index=True, return_inverse=True)
    cell_of_unit = cell_of_unit.reshape(-1)
    cells = len(first)
    size = padded_cells(cells)
    if size >= units:
        return None
    out = {}
    for name in CELL_KEY_ARRAYS:
        out[CELL_PREFIX + name] = _pad(np.asarray(arrays[name])[first], size)
    for name in CELL_SUMMED_ARRAYS:
        unit_values = np.asarray(arrays[name])[:n_units]
        totals = np.zeros(cells, np.float64)
        np.add.at(totals, cell_of_unit, unit_values.astype(np.float64))
        out[CELL_PREFIX + name] = _pad(totals.astype(unit_values.dtype), size, 1 if name == "n" else 0)
    out[CELL_PREFIX + "unit_mask"] = _pad(np.ones(cells, bool), size, False)
    return out


def potential_arrays(arrays: dict) -> dict:
    """The arrays a sampler's potential reads: ``arrays`` with the cells' arrays (:func:`cell_arrays`)
    in place of the units' when it has them. (The pointwise log-likelihood, ``p`` and the predictive
    draws read the unit arrays.)"""
    cells = {name[len(CELL_PREFIX) :]: values for name, values in arrays.items() if name.startswith(CELL_PREFIX)}
    return {**arrays, **cells} if cells else arrays


# ---------------------------------------------------------------------------
# building blocks


def _varying(name: str, loc, scale, centred):
    """Normal(loc, scale) varying effects, centred where ``centred`` is 1 and non-centred where 0.

    The same algebra as numpyro's LocScaleReparam with a per-element centredness:
    raw ~ Normal(c loc, scale^c), value = loc + scale^(1-c) (raw - c loc).
    """
    shape = jnp.shape(centred)
    loc = jnp.broadcast_to(loc, shape)
    raw = numpyro.sample(f"{name}_raw", dist.Normal(centred * loc, scale**centred))
    return numpyro.deterministic(name, loc + scale ** (1.0 - centred) * (raw - centred * loc))


def crossed_arrays(data: GlmData, layout: Layout) -> dict[str, np.ndarray]:
    """The crossed suite models' extra inputs for the group-mean basis (see :func:`_grouped_effects`):
    which LLM and item slots are real, each item's subdomain, and per subdomain its first item slot
    and item count. The per-subdomain arrays have the real subdomains' length, not the padded one: a
    padded subdomain would put a prior-only coordinate into the dense mass block, whose adaptation
    from short warmup windows it degrades (at 100 LLMs, 28 padded subdomains cost warmup ~3x its
    leapfrog steps). Only the crossed models take these, so the other models' shapes do not vary."""
    parent = item_subdomains(data)
    if parent is None:
        parent, groups = np.zeros(data.n_items, np.int32), 1
    else:
        groups = data.n_subdomains
    firsts = np.full(groups, layout.items, np.int64)
    np.minimum.at(firsts, parent, np.arange(data.n_items))
    return {
        "model_real": _pad(np.ones(data.n_models, np.float32), layout.models, 0.0),
        "item_real": _pad(np.ones(data.n_items, np.float32), layout.items, 0.0),
        "item_group": _pad(parent, layout.items),
        "group_first": firsts.astype(np.int32),
        "group_size": np.bincount(parent, minlength=groups).astype(np.float32),
    }


def unit_grid(data: GlmData) -> np.ndarray | None:
    """The task order of each LLM's units when the units form a complete LLM x task grid, else None.

    Complete: every LLM has exactly one unit per task (no covariate splits a cell) and the
    units run LLM by LLM (GlmData sorts them so), each LLM's tasks in the same order. That
    order is returned (task indices, one per grid column): unit ``m * n_items + j`` is LLM
    ``m`` on task ``order[j]``. A suite where some LLM skipped a task is not a grid and keeps
    the per-unit gathers.
    """
    u = data.units
    n_models, n_items = data.n_models, data.n_items
    if n_models < 2 or len(u) != n_models * n_items:
        return None
    models = u["model_idx"].to_numpy(np.int64).reshape(n_models, n_items)
    items = u["item_idx"].to_numpy(np.int64).reshape(n_models, n_items)
    if not (models == np.arange(n_models)[:, None]).all() or not (items == items[0]).all():
        return None
    if len(np.unique(items[0])) != n_items:
        return None
    return items[0].astype(np.int32)


def grid_arrays(data: GlmData, layout: Layout, order: np.ndarray) -> dict[str, np.ndarray]:
    """The grid layout's extra inputs (:func:`unit_grid`): the task of each grid column and each
    task's subdomain and domain (padded task slots point at slot 0; they are never in the grid)."""
    u = data.units.drop_duplicates("item_idx")
    subdomain = np.zeros(layout.items, np.int32)
    subdomain[u["item_idx"].to_numpy()] = u["subdomain_idx"].to_numpy(np.int32)
    domain = np.zeros(layout.items, np.int32)
    domain[u["item_idx"].to_numpy()] = u["domain_idx"].to_numpy(np.int32)
    return {"grid_item": np.asarray(order, np.int32), "item_subdomain": subdomain, "item_domain": domain}


def _unit_predictor(arrays, model, item_terms, unit_grid: bool):
    """Each unit's model[its LLM] + the per-task terms at its task.

    ``item_terms``: (values, level) pairs; ``values`` indexed by the task's ``level`` group
    ("subdomain", "domain") or, for level None, by the task itself. On the grid the per-task
    terms are summed per task, taken in the grid's column order and added to the LLM effects
    as an outer sum (no per-unit gather); otherwise each is gathered per unit, as before."""
    if unit_grid:
        columns = jnp.zeros(arrays["grid_item"].shape)
        if item_terms:
            per_task = sum(values[arrays[f"item_{level}"]] if level else values for values, level in item_terms)
            columns = per_task[arrays["grid_item"]]
        return (model[:, None] + columns[None, :]).reshape(-1)
    eta = model[arrays["model_idx"]]
    for values, level in item_terms:
        eta = eta + values[arrays[f"{level}_idx" if level else "item_idx"]]
    return eta


def item_subdomains(data: GlmData) -> np.ndarray | None:
    """Each item's subdomain index when every item sits in exactly one subdomain and every
    subdomain holds an item (items nested in subdomains), else None."""
    pairs = data.units[["item_idx", "subdomain_idx"]].drop_duplicates()
    if len(pairs) != data.n_items or pairs["subdomain_idx"].nunique() != data.n_subdomains:
        return None
    return pairs.sort_values("item_idx")["subdomain_idx"].to_numpy(np.int32)


#: Sites of the suite models' collective directions (grand intercept, the LLMs' mean, the tasks' group
#: means): one dense block of the NUTS mass matrix. The subdomain deviations stay out: their padded slots
#: are prior-only coordinates, and with them in the block warmup took ~25% more leapfrog steps.
COLLECTIVE_SITES = ("overall", "model_mean_raw", "task_mean_raw", "task_all_mean_raw")


def use_group_mean_basis(enabled: bool, centring: dict[str, str]) -> bool:
    """Whether a crossed suite model is sampled in the group-mean basis: when enabled and its tasks are
    centred (the data pin each task, so the shift the basis isolates is the posterior's long direction).

    At 100 LLMs x 200 tasks: with task difficulties spread (sd 1, centred
    tasks) the basis passes the gate on its first attempt where the plain basis failed both; with every
    task equally hard (non-centred tasks, sigma_task near 0) it failed r-hat/ESS on both attempts where
    the plain basis passed on its retry, so non-centred tasks keep the plain basis.
    """
    return bool(enabled) and centring.get("item") == "centred"


def _grouped_effects(name: str, loc, scale, centred, real, group, first, size):
    """Normal(loc[group], scale) effects on the real slots, sampled in a basis where each group's mean
    is a coordinate of its own.

    Crossed effects (every LLM answers every task) are identified only up to a common shift between
    the LLMs' mean and the tasks' mean, which the data leave to the priors. In the plain basis that
    shift moves hundreds of coordinates at once and a diagonal mass matrix samples it badly (trees of
    31-63 leapfrog steps, divergences and ESS failures at 100 LLMs x 200 tasks). Here a Householder
    reflection per group maps coordinate ``first[g]`` to the group's normalised mean direction, so
    ``{name}_mean_raw[g]`` (= sqrt(n_g) x the group mean, centred at sqrt(n_g) loc[g]) carries the
    shift and the dense block over :data:`COLLECTIVE_SITES` adapts to it. The reflection is
    orthogonal with unit Jacobian, so the effects have exactly the plain basis's prior; each
    ``first[g]`` slot of ``{name}_rest_raw`` is then unused (prior-only, like the padding slots).
    Centring follows ``centred`` per slot (the group's first slot decides for its mean).
    """
    root = jnp.sqrt(jnp.maximum(size, 1.0))
    loc = loc[: size.shape[0]]
    c_mean = centred[jnp.minimum(first, centred.shape[0] - 1)]
    mean = _raw_normal(f"{name}_mean", loc * root, scale, c_mean)
    rest = _raw_normal(f"{name}_rest", jnp.zeros_like(centred), scale, centred)
    v = rest.at[first].set(mean, mode="drop")
    unit = jnp.zeros_like(real).at[first].set(1.0, mode="drop")
    w = (unit - real / root[group]) * real
    groups = size.shape[0]
    norm2 = jax.ops.segment_sum(w * w, group, num_segments=groups)
    coef = jnp.where(
        norm2 > 1e-6, 2.0 * jax.ops.segment_sum(w * v, group, num_segments=groups) / jnp.maximum(norm2, 1e-6), 0.0
    )
    return v - w * coef[group]


def _raw_normal(name: str, loc, scale, centred):
    """:func:`_varying` without its deterministic site (an internal coordinate, not a reported effect)."""
    raw = numpyro.sample(f"{name}_raw", dist.Normal(centred * loc, scale**centred))
    return loc + scale ** (1.0 - centred) * (raw - centred * loc)


def _intercept(paper_form: bool, mu_overall_sd: float, sigma_overall_scale: float, extra_var: float = 0.0):
    if paper_form:
        mu = numpyro.sample("mu_overall", dist.Normal(0.0, mu_overall_sd))
        sigma = numpyro.sample("sigma_overall", dist.HalfNormal(sigma_overall_scale))
        z = numpyro.sample("z_overall", dist.Normal(0.0, 1.0))
        mu_bar = mu + sigma * z
        if extra_var:  # Eq. 4-6: mu_model_overall ~ Normal(mu_bar, 1)
            return numpyro.sample("overall", dist.Normal(mu_bar, math.sqrt(extra_var)))
        return numpyro.deterministic("overall", mu_bar)
    sd = math.sqrt(mu_overall_sd**2 + sigma_overall_scale**2 + extra_var)
    return numpyro.sample("overall", dist.Normal(0.0, sd))


def _covariates(
    arrays, eta, slope_sd, slope_sigma_scale, category_sigma_scale, paper_form: bool = False, slopes: bool = True
):
    """Numeric slopes per slope group (LLM x level of the first categorical covariate) and categorical effects.

    Eq. 4's gamma_{i,d} = mu_reasoning_{i,d} + sigma_reasoning z_{i,d} with a
    separate mu_{i,d} ~ N(0, 1) per cell: the sum is identified, not its parts,
    so the identified form samples gamma_{i,d} ~ N(0, sqrt(1 + sigma_scale^2))
    independently per cell (same mean and variance); ``paper_form`` samples the
    parts as written. ``slopes=False`` keeps the categorical effects only.
    """
    numeric = arrays["cov_numeric"]
    n_numeric = numeric.shape[1]
    if n_numeric and slopes:
        n_groups = int(arrays["c_slope"].shape[0])
        if paper_form:
            mean = numpyro.sample("slope_mu", dist.Normal(0.0, slope_sd).expand([n_groups, n_numeric]).to_event(2))
            sigma = numpyro.sample("slope_sigma", dist.HalfNormal(slope_sigma_scale))
            z = numpyro.sample("slope_raw", dist.Normal(0.0, 1.0).expand([n_groups, n_numeric]).to_event(2))
            slope = numpyro.deterministic("slope", mean + sigma * z)
        else:
            sd = math.sqrt(slope_sd**2 + slope_sigma_scale**2)
            slope = numpyro.sample("slope", dist.Normal(0.0, sd).expand([n_groups, n_numeric]).to_event(2))
        eta = eta + jnp.sum(slope[arrays["slope_group"]] * numeric, axis=-1)
    categorical = arrays["cov_categorical"]
    n_cat = categorical.shape[1]
    if n_cat:
        n_levels = int(arrays["c_category"].shape[1])
        sigma = numpyro.sample("category_sigma", dist.HalfNormal(category_sigma_scale).expand([n_cat]).to_event(1))
        z = numpyro.sample("category_effect_raw", dist.Normal(0.0, 1.0).expand([n_cat, n_levels]).to_event(2))
        effect = numpyro.deterministic("category_effect", sigma[:, None] * z)
        eta = eta + jnp.sum(effect[jnp.arange(n_cat)[None, :], categorical], axis=-1)
    return eta


class _BetaBinomial(dist.BetaBinomial):
    """BetaBinomial whose log-pmf avoids digamma-heavy gradients.

    log C(n, k) + log B(k + a, n - k + b) - log B(a, b) equals
    log C(n, k) + sum_{j<k} log(a + j) + sum_{j<n-k} log(b + j) - sum_{j<n} log(a + b + j)
    (rising factorials) for integer k and n. With ``grid = 0, 1, ..., G-1``
    (G >= max n) this costs a few logs per unit, against numpyro's betaln, whose
    gradient (digamma on XLA CPU) made beta-binomial fits ~10x slower than
    binomial ones. Without a grid (fractional k or large n) the gammaln form is used.
    """

    def __init__(self, concentration1, concentration0, total_count, grid, *, validate_args=None):
        self.grid = grid
        super().__init__(concentration1, concentration0, total_count=total_count, validate_args=validate_args)

    def log_prob(self, value):
        n, a, b = self.total_count, self.concentration1, self.concentration0
        lg = jax.scipy.special.gammaln
        log_choose = lg(n + 1.0) - lg(value + 1.0) - lg(n - value + 1.0)
        if self.grid.shape[0] == 0:
            return log_choose + lg(value + a) + lg(n - value + b) - lg(n + a + b) + lg(a + b) - lg(a) - lg(b)
        j = self.grid
        a_, b_, k_, n_ = a[..., None], b[..., None], jnp.asarray(value)[..., None], jnp.asarray(n)[..., None]
        rising_a = jnp.sum(jnp.where(j < k_, jnp.log(a_ + j), 0.0), axis=-1)
        rising_b = jnp.sum(jnp.where(j < n_ - k_, jnp.log(b_ + j), 0.0), axis=-1)
        rising_ab = jnp.sum(jnp.where(j < n_, jnp.log(a_ + b_ + j), 0.0), axis=-1)
        return log_choose + rising_a + rising_b - rising_ab


#: From this many units on, :func:`binomial_logit_kernel`'s gradient reuses the value's exp(-|eta|)
#: for the sigmoid; below it, XLA's logistic. Measured in the whole potential (one thread): a
#: 100-LLM suite (20,800 units) 71 us with the shared exponential against 97 us with the logistic
#: (189 us through softplus); a one-LLM partition (512 padded units) 6.2 us against 5.0 us (5.2 us).
#: The choice is made when the program is traced (shapes are static), not per evaluation.
SHARED_EXP_MIN_UNITS = 4096


@jax.custom_jvp
def binomial_logit_kernel(eta, k, n):
    """``k eta - n softplus(eta)``: the binomial log-pmf in the logit ``eta`` less log C(n, k).

    Its derivative in ``eta`` is ``k - n sigmoid(eta)``, and the custom JVP below computes it
    from the same ``exp(-|eta|)`` as the value (from :data:`SHARED_EXP_MIN_UNITS` units on).
    Through ``jax.nn.softplus`` (``logaddexp``'s own JVP) a gradient costs several more
    transcendental passes over the units, and a suite GLM's leapfrog step is mostly this
    gradient: at 100 LLMs x 200 tasks (20,800 units, float32, one XLA CPU thread) the
    potential's value and gradient took 206 us with softplus against 91 us with this kernel
    (benchmarks/likelihood_benchmark.py). Same function: the values agree to rounding
    (tests/test_glm_likelihood.py), and the JVP rule is itself differentiable (Hessians for
    the mass matrix). ``k`` and ``n`` are data: their tangents are ignored.
    """
    return k * eta - n * _softplus_from(eta, jnp.exp(-jnp.abs(eta)))


def _softplus_from(eta, e):
    """softplus(eta) = max(eta, 0) + log1p(exp(-|eta|)), given ``e = exp(-|eta|)``."""
    return jnp.maximum(eta, 0.0) + jnp.log1p(e)


@binomial_logit_kernel.defjvp
def _binomial_logit_kernel_jvp(primals, tangents):
    eta, k, n = primals
    d_eta = tangents[0]
    e = jnp.exp(-jnp.abs(eta))
    value = k * eta - n * _softplus_from(eta, e)
    if jnp.size(eta) >= SHARED_EXP_MIN_UNITS:
        sigmoid = jnp.where(eta >= 0, 1.0, e) / (1.0 + e)  # no overflow on either side
    else:
        sigmoid = jax.nn.sigmoid(eta)
    return value, (k - n * sigmoid) * d_eta


class _BinomialLogits(dist.BinomialLogits):
    """Binomial(n, sigmoid(eta)) whose log-pmf takes log C(n, k) precomputed.

    ``k eta - n softplus(eta) + log C(n, k)`` equals numpyro's log-pmf; its
    three gammaln calls per unit are constant in the parameters but were
    re-evaluated at every leapfrog step (about 45% of a suite GLM's gradient
    time at 20,000 units on XLA CPU). ``log_choose`` comes from
    :func:`build_arrays` (computed once, in float64). The rest is
    :func:`binomial_logit_kernel`, whose gradient shares the value's exponential.
    """

    def __init__(self, logits, total_count, log_choose, *, validate_args=None):
        self.log_choose = log_choose
        super().__init__(logits, total_count=total_count, validate_args=validate_args)

    def log_prob(self, value):
        return binomial_logit_kernel(self.logits, value, self.total_count) + self.log_choose


def _observe(arrays, eta, likelihood: str, phi_concentration: float, phi_rate: float):
    p = numpyro.deterministic("p", jnp.clip(jnp.exp(-jnp.logaddexp(0.0, -eta)), 1e-6, 1 - 1e-6))
    n = arrays["n"]
    k = arrays.get("k_obs")
    if likelihood == "binomial":
        fn = (
            _BinomialLogits(eta, n, arrays["log_choose"])
            if "log_choose" in arrays
            else dist.Binomial(total_count=n, logits=eta)
        )
    else:
        phi = numpyro.sample("phi", dist.Gamma(phi_concentration, phi_rate))
        fn = _BetaBinomial(p * phi, (1.0 - p) * phi, n, arrays["count_grid"])
    if k is None:  # predictive use: p (and phi) are what simulate_counts needs
        return
    with numpyro.handlers.mask(mask=arrays["unit_mask"]):
        numpyro.sample("obs", fn, obs=k)


def simulate_counts(
    rng: np.random.Generator, n: np.ndarray, p: np.ndarray, phi: np.ndarray | None = None
) -> np.ndarray:
    """Replicated counts (draws, units) from per-draw success probabilities p (draws, units).

    With ``phi`` (draws,) each unit first draws theta ~ Beta(p phi, (1 - p) phi)
    (Eq. 4's per-task success probability). Done in numpy: it runs once per
    fit and needs no compilation. When every unit has one trial (one epoch, the
    usual case) a count is a uniform draw below p: the same Bernoulli law as
    ``rng.binomial(1, p)``, ~10x cheaper (a 100-LLM suite's 400 x 20,800 draws:
    0.56 -> 0.05 s, twice per fit).

    The counts come in the smallest unsigned integer type that holds the largest ``n`` (uint8 up to
    255 trials a unit): they are stored in ``posterior.nc`` as they are, and a 100-LLM suite fit's
    two groups of float64 0/1 counts (130 MB) took 0.5 s of the 0.8 s that writing the file took.
    """
    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    if phi is not None:
        phi = np.asarray(phi, dtype=float)[:, None]
        p = np.clip(rng.beta(p * phi, (1.0 - p) * phi), 0.0, 1.0)
    n = np.asarray(n, dtype=np.int64)
    counts = np.min_scalar_type(max(int(n.max()), 1) if n.size else 1)
    if n.size and (n == 1).all():
        return (rng.random(p.shape) < p).astype(counts)
    return rng.binomial(np.broadcast_to(n, p.shape), p).astype(counts)


def _nested(
    arrays, overall, sigma_model_scale, sigma_domain_scale, sigma_subdomain_scale, use_model, use_domain, use_subdomain
):
    """Eq. 3's chain model_i -> domain_{i,j} -> subdomain_{i,j,k}; returns subdomain logits (M, S)."""
    n_models = arrays["c_model"].shape[0]
    if use_model:
        sigma_model = numpyro.sample("sigma_model", dist.HalfNormal(sigma_model_scale))
        model = _varying("model", overall, sigma_model, arrays["c_model"])
    else:
        model = jnp.broadcast_to(overall, (n_models,))
    if use_domain:
        sigma_domain = numpyro.sample("sigma_domain", dist.HalfNormal(sigma_domain_scale))
        domain = _varying("domain", model[:, None], sigma_domain, arrays["c_domain"])
    else:
        domain = jnp.broadcast_to(model[:, None], arrays["c_domain"].shape)
    parent = arrays["subdomain_parent"]
    if use_subdomain:
        sigma_subdomain = numpyro.sample("sigma_subdomain", dist.HalfNormal(sigma_subdomain_scale))
        return _varying("subdomain", domain[:, parent], sigma_subdomain, arrays["c_subdomain"])
    return domain[:, parent]


# ---------------------------------------------------------------------------
# per-partition models


def binomial(
    arrays,
    *,
    mu_overall_sd: float = 1.0,
    sigma_overall_scale: float = 0.5,
    sigma_domain_scale: float = 0.1,
    sigma_subdomain_scale: float = 0.1,
    slope_sd: float = 1.0,
    slope_sigma_scale: float = 0.1,
    category_sigma_scale: float = 0.1,
    use_domain: bool = True,
    use_subdomain: bool = True,
    use_covariates: bool = True,
    use_slopes: bool = True,
    paper_form: bool = False,
    likelihood: str = "binomial",
    phi_concentration: float = 1.0,
    phi_rate: float = 0.1,
    item_sd_concentration: float | None = None,
    item_sd_rate: float = 2.0,
):
    """Binomial logit GLM with partial pooling overall -> domain -> subdomain, one LLM.

    the HiBayES paper Eq. 2 (priors of the overall and domain level: mu_overall ~
    N(0, 1), sigma_overall ~ HalfNormal(0.5), sigma_domain ~ HalfNormal(0.1))
    with Eq. 3's subdomain level (sigma_subdomain ~ HalfNormal(0.1)) below it.
    ``use_domain``/``use_subdomain`` drop a level that has one group per parent
    (no information to pool; fit.py decides from the data). Covariates (when the
    arrays carry them): numeric slopes per level of the first categorical
    covariate (Eq. 4's gamma, see :func:`_covariates`), categorical effects with
    sigma ~ HalfNormal(0.1) as diff_difficulty (Eq. 4-6).
    """
    overall = _intercept(paper_form, mu_overall_sd, sigma_overall_scale)
    subdomain = _nested(
        arrays, overall, 0.0, sigma_domain_scale, sigma_subdomain_scale, False, use_domain, use_subdomain
    )
    eta = subdomain[arrays["model_idx"], arrays["subdomain_idx"]]
    if item_sd_concentration is not None:
        sd = numpyro.sample("sigma_item", dist.Gamma(item_sd_concentration, item_sd_rate))
        difficulty = _varying("item_difficulty", 0.0, sd, arrays["c_item"])
        eta = eta - difficulty[arrays["item_idx"]]
    if use_covariates:
        eta = _covariates(arrays, eta, slope_sd, slope_sigma_scale, category_sigma_scale, paper_form, use_slopes)
    _observe(arrays, eta, likelihood, phi_concentration, phi_rate)


def beta_binomial(arrays, *, phi_concentration: float = 1.0, phi_rate: float = 0.1, **priors):
    """Beta-binomial variant of :func:`binomial`: per-unit theta ~ Beta(p phi, (1-p) phi), phi ~ Gamma(1, 0.1).

    the HiBayES paper Eq. 4's likelihood (theta_{i,j,k,d}, alpha = p phi,
    beta = (1 - p) phi) on :func:`binomial`'s linear predictor; theta is
    marginalised (BetaBinomial), which is the same model.
    """
    binomial(arrays, likelihood="beta_binomial", phi_concentration=phi_concentration, phi_rate=phi_rate, **priors)


def null(
    arrays,
    *,
    mu_overall_sd: float = 1.0,
    sigma_overall_scale: float = 0.5,
    sigma_domain_scale: float = 0.1,
    use_domain: bool = True,
    paper_form: bool = False,
):
    """Null GLM: overall (-> domain) only, no subdomain structure and no covariates.

    Plays the role of the HiBayES paper Eq. 6 in the comparison of Figure 8
    (the hypothesis that the finer structure does not matter); priors of Eq. 2.
    """
    binomial(
        arrays,
        mu_overall_sd=mu_overall_sd,
        sigma_overall_scale=sigma_overall_scale,
        sigma_domain_scale=sigma_domain_scale,
        use_domain=use_domain,
        use_subdomain=False,
        use_covariates=False,
        paper_form=paper_form,
    )


def item_difficulty(arrays, *, item_sd_concentration: float = 2.0, item_sd_rate: float = 2.0, **priors):
    """IRT-style GLM: :func:`binomial` minus a per-item difficulty b_q ~ N(0, sd), sd ~ Gamma(2, 2).

    the Bayesian Evals slides Model 3 (questionDifficulty_q ~ N(0,
    questionDifficultyStd), questionDifficultyStd ~ Gamma(2, 2), subtracted inside
    the sigmoid); the task/subdomain terms are the HiBayES hierarchy above.
    Needs repeats: with one attempt per item b_q is not identified beyond its prior.
    """
    binomial(arrays, item_sd_concentration=item_sd_concentration, item_sd_rate=item_sd_rate, **priors)


# ---------------------------------------------------------------------------
# per-suite models


def suite_nested(
    arrays,
    *,
    mu_overall_sd: float = 1.0,
    sigma_model_scale: float = 0.1,
    sigma_domain_scale: float = 0.1,
    sigma_subdomain_scale: float = 0.1,
    use_domain: bool = True,
    use_subdomain: bool = True,
    paper_form: bool = False,
):
    """The HiBayES paper Eq. 3: model_i = mu_overall + sigma_model z_i, domain_{i,j} = model_i + sigma_domain z,
    subdomain_{i,j,k} = domain_{i,j} + sigma_subdomain z; all sigmas HalfNormal(0.1), mu_overall ~ N(0, 1).

    (Eq. 3 has no mu_bar; ``paper_form`` is accepted for a uniform interface and ignored.)
    """
    overall = numpyro.sample("overall", dist.Normal(0.0, mu_overall_sd))
    subdomain = _nested(
        arrays, overall, sigma_model_scale, sigma_domain_scale, sigma_subdomain_scale, True, use_domain, use_subdomain
    )
    _observe(arrays, subdomain[arrays["model_idx"], arrays["subdomain_idx"]], "binomial", 1.0, 0.1)


def suite_binomial(
    arrays,
    *,
    mu_overall_sd: float = 1.0,
    sigma_overall_scale: float = 1.0,
    sigma_model_scale: float = 0.5,
    sigma_domain_scale: float = 0.1,
    sigma_subdomain_scale: float = 0.1,
    sigma_task_scale: float = 0.5,
    slope_sd: float = 1.0,
    slope_sigma_scale: float = 0.1,
    category_sigma_scale: float = 0.1,
    use_domain: bool = True,
    use_subdomain: bool = True,
    use_task: bool = True,
    use_covariates: bool = True,
    use_slopes: bool = True,
    paper_form: bool = False,
    likelihood: str = "binomial",
    phi_concentration: float = 1.0,
    phi_rate: float = 0.1,
    group_mean_basis: bool = False,
    tasks_nested: bool = False,
    unit_grid: bool = False,
):
    """The HiBayES paper Eq. 5: logit p = mod_model_i + diff + gamma_{i,d} * covariate + eta_task_j.

    mod_model_i = mu_model_overall + sigma_model z_i (sigma_model ~ HalfNormal(0.5),
    mu_model_overall ~ N(mu_bar, 1), mu_bar from mu_overall ~ N(0, 1), sigma_overall
    ~ HalfNormal(1)); eta_task_j = sigma_task z_j (HalfNormal(0.5)); categorical
    covariates as diff_difficulty (sigma HalfNormal(0.1)); numeric covariates as
    gamma per LLM x level of the first categorical covariate, gamma = mu + sigma z
    (mu ~ N(0, 1), sigma ~ HalfNormal(0.1)). Added to the paper's Eq. 5: shared
    domain -> subdomain deviations (sigma HalfNormal(0.1) each), so the model
    effects are estimated jointly with shared subdomain and task effects.

    ``group_mean_basis`` (``FitSettings.group_mean_basis``, on by default) samples
    the same model in better coordinates: the LLM effects and the task effects in
    a basis where their (per-subdomain) means are coordinates of their own (see
    :func:`_grouped_effects`), and, when the tasks are nested in subdomains
    (``tasks_nested``, from the data), each task's logit centred on its subdomain
    rather than subdomain and task added. The priors and likelihood are unchanged
    (a linear change of variables with unit Jacobian; tests check the log density
    at matched points); the reported ``model``, ``subdomain_dev`` and ``task``
    effects mean what they meant.

    ``unit_grid`` (``FitSettings.unit_grid``, when :func:`unit_grid` finds a complete
    LLM x task grid): the same linear predictor as an outer sum over the grid
    (:func:`_unit_predictor`); :func:`grid_arrays` supplies its inputs.
    """
    overall = _intercept(paper_form, mu_overall_sd, sigma_overall_scale, extra_var=1.0)
    sigma_model = numpyro.sample("sigma_model", dist.HalfNormal(sigma_model_scale))
    if group_mean_basis:
        one = jnp.zeros(1, jnp.int32)
        model = numpyro.deterministic(
            "model",
            _grouped_effects(
                "model",
                jnp.reshape(overall, (1,)),
                sigma_model,
                arrays["c_model"],
                arrays["model_real"],
                jnp.zeros(arrays["c_model"].shape, jnp.int32),
                one,
                jnp.sum(arrays["model_real"], keepdims=True),
            ),
        )
    else:
        model = _varying("model", overall, sigma_model, arrays["c_model"])
    item_terms = []  # (values, level): per-task terms, indexed by the task's level group (None: the task)
    n_domains = arrays["c_domain"].shape[1]
    domain = jnp.zeros(n_domains)
    if use_domain:
        sigma_domain = numpyro.sample("sigma_domain", dist.HalfNormal(sigma_domain_scale))
        domain = _varying("domain_dev", 0.0, sigma_domain, arrays["c_domain"][0])
    # tasks nested in subdomains: the task logits are centred on their subdomain (same model, the sum
    # subdomain + task as one coordinate), else the subdomain shift and its tasks' mean form a ridge
    nest = group_mean_basis and tasks_nested and use_subdomain and use_task
    subdomain = None
    if use_subdomain:
        sigma_subdomain = numpyro.sample("sigma_subdomain", dist.HalfNormal(sigma_subdomain_scale))
        subdomain = _varying(
            "subdomain_dev", domain[arrays["subdomain_parent"]], sigma_subdomain, arrays["c_subdomain"][0]
        )
        if not nest:
            item_terms.append((subdomain, "subdomain"))
    elif use_domain:
        item_terms.append((domain, "domain"))
    if use_task:
        sigma_task = numpyro.sample("sigma_task", dist.HalfNormal(sigma_task_scale))
        if nest:
            logit = _grouped_effects(
                "task",
                subdomain,
                sigma_task,
                arrays["c_item"],
                arrays["item_real"],
                arrays["item_group"],
                arrays["group_first"],
                arrays["group_size"],
            )
            numpyro.deterministic("task", logit - subdomain[arrays["item_group"]])
            item_terms.append((logit, None))
        elif group_mean_basis:
            task = numpyro.deterministic(
                "task",
                _grouped_effects(
                    "task_all",
                    jnp.zeros(1),
                    sigma_task,
                    arrays["c_item"],
                    arrays["item_real"],
                    jnp.zeros(arrays["c_item"].shape, jnp.int32),
                    jnp.zeros(1, jnp.int32),
                    jnp.sum(arrays["item_real"], keepdims=True),
                ),
            )
            item_terms.append((task, None))
        else:
            task = _varying("task", 0.0, sigma_task, arrays["c_item"])
            item_terms.append((task, None))
    eta = _unit_predictor(arrays, model, item_terms, unit_grid)
    if use_covariates:
        eta = _covariates(arrays, eta, slope_sd, slope_sigma_scale, category_sigma_scale, paper_form, use_slopes)
    _observe(arrays, eta, likelihood, phi_concentration, phi_rate)


def suite_beta_binomial(arrays, *, phi_concentration: float = 1.0, phi_rate: float = 0.1, **priors):
    """The HiBayES paper Eq. 4: :func:`suite_binomial`'s predictor with theta ~ Beta(p phi, (1-p) phi), phi ~ Gamma(1, 0.1)."""
    suite_binomial(arrays, likelihood="beta_binomial", phi_concentration=phi_concentration, phi_rate=phi_rate, **priors)


def suite_null(
    arrays, *, sigma_model_scale: float = 1.0, use_difficulty: bool = False, paper_form: bool = False, **priors
):
    """The HiBayES paper Eq. 6: mod_model_i [+ diff_difficulty_d] + eta_task_j (sigma_model ~ HalfNormal(1)).

    The paper contradicts itself here: its text calls the null GLM one "that does
    not feature information on reasoning efforts and task difficulty levels"
    (Section 3.5), while Eq. 6 keeps diff_difficulty_d and drops only the reasoning
    slopes. The default follows the text -- the null hypothesis that neither
    subdomains nor covariates matter beyond which LLM and which task -- and
    ``use_difficulty=True`` (``[glm.priors.suite_null] use_difficulty = true``)
    is Eq. 6 as printed: categorical covariate effects kept, numeric slopes dropped.
    """
    suite_binomial(
        arrays,
        sigma_model_scale=sigma_model_scale,
        use_domain=False,
        use_subdomain=False,
        use_covariates=use_difficulty,
        use_slopes=False,
        paper_form=paper_form,
        **priors,
    )


# ---------------------------------------------------------------------------
# registry


@dataclass(frozen=True)
class ModelEntry:
    name: str
    fn: Callable
    scope: str  # "partition" or "suite"
    description: str
    # prior scale per centring level (for choose_centring)
    level_scales: tuple[tuple[str, float], ...]


def _per_partition(data: GlmData) -> str | None:
    if data.n_models != 1:
        return f"a per-partition model needs one LLM, the data hold {data.n_models}"
    return None


def _per_suite(data: GlmData) -> str | None:
    if data.n_models < 2:
        return "a per-suite model needs two or more LLMs in the model column"
    return None


def _needs_repeats(data: GlmData) -> str | None:
    reason = _per_partition(data)
    if reason:
        return reason
    if not data.has_repeats:
        return "item_difficulty needs repeats: most items have a single countable attempt, so per-item difficulty is not identified"
    return None


def _unidentified_overdispersion(data: GlmData) -> str | None:
    """Why the beta-binomial's overdispersion ``phi`` cannot be learnt from ``data``, or None.

    The unit of the likelihood is a row of ``data.units``: one LLM's item (split further by
    covariate values that vary between its attempts), with ``k`` successes in ``n`` countable
    attempts. Its theta ~ Beta(p phi, (1 - p) phi) is integrated out, and with ``n = 1`` that leaves
    P(k = 1) = E[theta] = p whatever phi is: a Bernoulli with mean p. When every unit has one trial
    the likelihood does not involve phi at all, its posterior is its prior, and the model's
    likelihood is the binomial's (WAIC and PSIS-LOO would compare a model with itself). One unit with
    two or more trials informs phi. Fractional counts (``graded = "fractional"``) are left to be
    fitted: the quasi-likelihood's continuation to fractional k does depend on phi.
    """
    units = data.units
    n, k = units["n"].to_numpy(float), units["k"].to_numpy(float)
    if not (n == 1).all() or not np.isin(k, (0.0, 1.0)).all():
        return None
    one_llm = data.n_models == 1
    unit = "item" if one_llm else "LLM's item"
    attempts = units.groupby(["model_idx", "item_idx"])["n"].sum()
    if (attempts > 1).any():  # covariates that vary between an item's attempts split it into units
        unit += " at one set of covariate values"
    return (
        f"every {unit} has one countable attempt: the beta-binomial's overdispersion phi is not identified "
        "(its posterior would be its prior) and its likelihood equals the binomial's"
    )


MODELS: dict[str, ModelEntry] = {
    "binomial": ModelEntry(
        "binomial", binomial, "partition", "Eq. 2/3 for one LLM", (("domain", 0.1), ("subdomain", 0.1))
    ),
    "beta_binomial": ModelEntry(
        "beta_binomial",
        beta_binomial,
        "partition",
        "Eq. 4 likelihood, per-item theta",
        (("domain", 0.1), ("subdomain", 0.1)),
    ),
    "null": ModelEntry("null", null, "partition", "no subdomain structure, no covariates", (("domain", 0.1),)),
    "item_difficulty": ModelEntry(
        "item_difficulty",
        item_difficulty,
        "partition",
        "slides Model 3 (IRT)",
        (("domain", 0.1), ("subdomain", 0.1), ("item", 1.0)),
    ),
    "suite_nested": ModelEntry(
        "suite_nested", suite_nested, "suite", "Eq. 3", (("model", 0.1), ("domain", 0.1), ("subdomain", 0.1))
    ),
    "suite_binomial": ModelEntry(
        "suite_binomial",
        suite_binomial,
        "suite",
        "Eq. 5 + shared subdomains",
        (("model", 0.5), ("domain", 0.1), ("subdomain", 0.1), ("item", 0.5)),
    ),
    "suite_beta_binomial": ModelEntry(
        "suite_beta_binomial",
        suite_beta_binomial,
        "suite",
        "Eq. 4 + shared subdomains",
        (("model", 0.5), ("domain", 0.1), ("subdomain", 0.1), ("item", 0.5)),
    ),
    "suite_null": ModelEntry(
        "suite_null", suite_null, "suite", "Eq. 6: LLM + task effects only", (("model", 1.0), ("item", 0.5))
    ),
}
#: Models with LLM x task crossed effects: tasks shared by all LLMs, sampled in the group-mean basis.
CROSSED_MODELS = ("suite_binomial", "suite_beta_binomial", "suite_null")
PARTITION_MODELS = tuple(n for n, e in MODELS.items() if e.scope == "partition")
SUITE_MODELS = tuple(n for n, e in MODELS.items() if e.scope == "suite")


def applicability(name: str, data: GlmData) -> str | None:
    """None when model ``name`` can be fitted to ``data``, else the reason it cannot: the data have
    the wrong number of LLMs for its scope, or cannot identify it (item difficulty without repeats,
    the beta-binomial's overdispersion with one attempt per unit)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    if name == "item_difficulty":
        return _needs_repeats(data)
    if name == "beta_binomial":
        return _per_partition(data) or _unidentified_overdispersion(data)
    if name == "suite_beta_binomial":
        return _per_suite(data) or _unidentified_overdispersion(data)
    return _per_partition(data) if MODELS[name].scope == "partition" else _per_suite(data)


def structure_options(name: str, data: GlmData) -> dict:
    """Data-dependent static switches: drop levels with one group per parent, covariates when absent."""
    options: dict = {}
    if name != "null" and name != "suite_null":
        options["use_subdomain"] = data.has_subdomain_structure
    if name not in ("suite_null",):
        options["use_domain"] = data.n_domains >= 2
    if name in ("binomial", "beta_binomial", "item_difficulty", "suite_binomial", "suite_beta_binomial"):
        options["use_covariates"] = bool(data.numeric_covariates or data.categorical_covariates)
    if name in ("suite_binomial", "suite_beta_binomial"):
        options["tasks_nested"] = item_subdomains(data) is not None
    return options


# ---------------------------------------------------------------------------
# sites -> labelled axes (for unpadding and the tidy summary)

LOCATION_SITES = ("overall", "model", "domain", "subdomain", "mu_overall")


def site_axes(site: str) -> tuple[str, ...]:
    """Axis kinds of a posterior site, by name (scalars -> ())."""
    base = site[:-4] if site.endswith("_raw") else site
    return {
        "model": ("model",),
        "domain": ("model", "domain"),
        "subdomain": ("model", "subdomain"),
        "domain_dev": ("domain",),
        "subdomain_dev": ("subdomain",),
        "task": ("item",),
        "model_rest": ("model",),
        "task_rest": ("item",),
        "task_all_rest": ("item",),
        "task_mean": ("subdomain",),
        "item_difficulty": ("item",),
        "slope": ("slope_group", "numeric"),
        "slope_mu": ("slope_group", "numeric"),
        "category_effect": ("categorical", "level"),
        "category_sigma": ("categorical",),
        "p": ("unit",),
    }.get(base, ())


def axis_labels(data: GlmData, axis: str) -> list:
    """Labels of the real (unpadded) entries of an axis."""
    cats = data.categorical_covariates
    if axis == "model":
        return list(data.models)
    if axis == "domain":
        return list(data.domains)
    if axis == "subdomain":
        return [f"{d}/{s}" for d, s in data.subdomains]
    if axis == "item":
        return list(data.items)
    if axis == "unit":
        return list(range(data.n_units))
    if axis == "numeric":
        return [c[4:] for c in data.numeric_covariates]
    if axis == "categorical":
        return [c[4:] for c in cats]
    if axis == "level":
        return [str(i) for i in range(max((len(v) for v in cats.values()), default=1))]
    if axis == "slope_group":
        first = next(iter(cats.values())) if cats else ("(all)",)
        return [f"{m}|{lvl}" for m in data.models for lvl in first]
    raise ValueError(f"unknown axis {axis!r}")


# ---------------------------------------------------------------------------
# predictive checks (Figure 7)


PREDICTIVE_COLUMNS = {
    "stat": "bin_share (share of units whose success rate k/n falls in the bin), share_at_0_or_1 or sd_rate",
    "bin_low": "lower edge of the success-rate bin (NaN for the other stats)",
    "bin_high": "upper edge of the bin (the last bin is closed)",
    "observed": "the statistic of the observed data",
    "simulated_mean": "its mean over the predictive draws",
    "simulated_low": "lower end of the central 95% interval of the draws",
    "simulated_high": "upper end of that interval",
    "inside": "observed lies in the interval",
    "p_value": "predictive p-value P(simulated >= observed)",
    "check": "prior or posterior: which predictive distribution the draws come from",
}


def _count_bins(counts: np.ndarray, trials: np.ndarray, bin_of) -> np.ndarray:
    """``bin_of(counts / trials)`` for integer counts (draws, units), by table lookup: a unit with n trials
    has n + 1 possible rates, binned once each (the same division, so the same bins). Searching the
    bin of each of a 100-LLM suite's 400 x 20,800 simulated rates took 0.1-0.35 s, twice a fit.
    None when the table would be large (units of many different, large numbers of trials)."""
    sizes, unit_size = np.unique(np.asarray(trials, dtype=np.int64), return_inverse=True)
    if sizes.size * (int(sizes.max()) + 1) > counts.size:
        return None
    table = np.zeros((sizes.size, int(sizes.max()) + 1), dtype=np.uint8)
    for row, size in enumerate(sizes):
        table[row, : size + 1] = bin_of(np.arange(size + 1) / float(size))
    return table[unit_size, counts]


def success_rate_check(data: GlmData, simulated_k: np.ndarray, *, bins: int = 10, mass: float = 0.95) -> pd.DataFrame:
    """Distribution of per-unit success rates k/n: observed vs simulated (the HiBayES paper Figure 7).

    ``simulated_k`` has shape (draws, units). Returns one row per bin of [0, 1]
    (the last bin closed) with the observed share of units, the simulated
    share's mean and central ``mass`` interval, and whether the observed share
    lies inside it; plus rows ``stat == "share_at_0_or_1"`` (the bimodality a
    binomial GLM cannot reproduce) and ``"sd_rate"``, with the posterior
    predictive p-value P(simulated >= observed).
    """
    simulated_k = np.asarray(simulated_k)
    if simulated_k.ndim != 2 or simulated_k.shape[1] != data.n_units:
        raise ValueError(f"simulated_k must have shape (draws, {data.n_units}), got {simulated_k.shape}")
    if not np.issubdtype(simulated_k.dtype, np.integer):
        simulated_k = simulated_k.astype(float)
    n = data.units["n"].to_numpy(float)
    observed = data.observed_rates()
    simulated = simulated_k / n
    edges = np.linspace(0.0, 1.0, bins + 1)

    def bin_of(rates: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(edges, rates, side="right") - 1, 0, bins - 1)

    def shares(bin_index: np.ndarray) -> np.ndarray:
        return np.stack([(bin_index == b).mean(axis=-1) for b in range(bins)], axis=-1)

    looked_up = (
        _count_bins(simulated_k, data.units["n"].to_numpy(), bin_of)
        if np.issubdtype(simulated_k.dtype, np.integer)
        else None
    )
    obs_share = shares(bin_of(observed))
    sim_share = shares(bin_of(simulated) if looked_up is None else looked_up)
    low_q, high_q = (1 - mass) / 2, 1 - (1 - mass) / 2
    rows = []
    for b in range(bins):
        lo, hi = np.quantile(sim_share[:, b], [low_q, high_q])
        rows.append(
            {
                "stat": "bin_share",
                "bin_low": edges[b],
                "bin_high": edges[b + 1],
                "observed": obs_share[b],
                "simulated_mean": sim_share[:, b].mean(),
                "simulated_low": lo,
                "simulated_high": hi,
                "inside": bool(lo <= obs_share[b] <= hi),
                "p_value": float((sim_share[:, b] >= obs_share[b]).mean()),
            }
        )
    for stat, obs_value, sim_values in (
        (
            "share_at_0_or_1",
            np.mean((observed == 0) | (observed == 1)),
            np.mean((simulated == 0) | (simulated == 1), axis=1),
        ),
        ("sd_rate", observed.std(), simulated.std(axis=1)),
    ):
        lo, hi = np.quantile(sim_values, [low_q, high_q])
        rows.append(
            {
                "stat": stat,
                "bin_low": np.nan,
                "bin_high": np.nan,
                "observed": float(obs_value),
                "simulated_mean": float(sim_values.mean()),
                "simulated_low": lo,
                "simulated_high": hi,
                "inside": bool(lo <= obs_value <= hi),
                "p_value": float((sim_values >= obs_value).mean()),
            }
        )
    return pd.DataFrame(rows)
