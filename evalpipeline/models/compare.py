"""Model comparison by WAIC and PSIS-LOO (hibayes-paper.txt Section 2.3, Figure 8).

WAIC is what the paper uses; PSIS-LOO is added because it flags where its own
approximation fails (Pareto-k > 0.7 per unit). Both are on the elpd scale
(higher = better predictive accuracy; the paper's "closer to 0" WAIC), computed
by ArviZ from each fit's pointwise log-likelihood. The fits must share their
observational units (see data.py), which is checked.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd

from evalpipeline.models import psis

COMPARE_COLUMNS = {
    "model": "candidate GLM",
    "waic_rank": "0 = best by WAIC",
    "elpd_waic": "expected log pointwise predictive density (WAIC)",
    "waic_se": "standard error of elpd_waic",
    "p_waic": "effective number of parameters (WAIC)",
    "d_waic": "elpd_waic of the best minus this one (>= 0)",
    "waic_dse": "standard error of d_waic (paired over units)",
    "waic_weight": "stacking weight (WAIC)",
    "waic_warning": "ArviZ warns the WAIC variance is unreliable (p_waic > 0.4 for some unit)",
    "loo_rank": "0 = best by PSIS-LOO",
    "elpd_loo": "expected log pointwise predictive density (PSIS-LOO)",
    "loo_se": "standard error of elpd_loo",
    "p_loo": "effective number of parameters (LOO)",
    "d_loo": "elpd_loo of the best minus this one (>= 0)",
    "loo_dse": "standard error of d_loo",
    "loo_weight": "stacking weight (LOO)",
    "n_pareto_k_high": "units with Pareto-k above the threshold",
    "pareto_k_threshold": "Pareto-k threshold",
    "loo_warning": "PSIS-LOO is unreliable for this model (some Pareto-k above the threshold)",
    "n_units": "pointwise log-likelihood terms",
}


def compare_fits(fits: dict, *, pareto_k_threshold: float = 0.7) -> pd.DataFrame:
    """One row per candidate with WAIC and PSIS-LOO comparisons, sorted by WAIC rank.

    ``fits`` maps a name to a :class:`~evalpipeline.models.fit.GlmFit` (or an
    ``InferenceData`` with a ``log_likelihood`` group). Raises ValueError with
    fewer than two fits or when their units differ.
    """
    if len(fits) < 2:
        raise ValueError(f"compare_fits needs at least two fits, got {len(fits)}")
    idatas = {name: getattr(fit, "idata", fit) for name, fit in fits.items()}
    shapes = {}
    for name, idata in idatas.items():
        if "log_likelihood" not in idata.groups():
            raise ValueError(f"fit {name!r} has no log_likelihood group")
        shapes[name] = tuple(idata.log_likelihood["obs"].shape[2:])
        observed = idata.observed_data["obs"].values if "observed_data" in idata.groups() else None
        shapes[name] += (None if observed is None else float(np.nansum(observed)),)
    if len(set(shapes.values())) > 1:
        raise ValueError(f"fits are not on the same observational units: {shapes}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        waic = az.compare(idatas, ic="waic", scale="log")
        waic_warned = {name: bool(waic.loc[name, "warning"]) for name in idatas}
        loo = az.compare(idatas, ic="loo", scale="log")
    del caught
    rows = []
    for name, idata in idatas.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pointwise = psis.loo(idata)
        high = int(np.sum(pointwise.pareto_k > pareto_k_threshold))
        rows.append({
            "model": name,
            "waic_rank": int(waic.loc[name, "rank"]),
            "elpd_waic": float(waic.loc[name, "elpd_waic"]),
            "waic_se": float(waic.loc[name, "se"]),
            "p_waic": float(waic.loc[name, "p_waic"]),
            "d_waic": float(waic.loc[name, "elpd_diff"]),
            "waic_dse": float(waic.loc[name, "dse"]),
            "waic_weight": float(waic.loc[name, "weight"]),
            "waic_warning": waic_warned[name],
            "loo_rank": int(loo.loc[name, "rank"]),
            "elpd_loo": float(loo.loc[name, "elpd_loo"]),
            "loo_se": float(loo.loc[name, "se"]),
            "p_loo": float(loo.loc[name, "p_loo"]),
            "d_loo": float(loo.loc[name, "elpd_diff"]),
            "loo_dse": float(loo.loc[name, "dse"]),
            "loo_weight": float(loo.loc[name, "weight"]),
            "n_pareto_k_high": high,
            "pareto_k_threshold": pareto_k_threshold,
            "loo_warning": high > 0,
            "n_units": int(idata.log_likelihood["obs"].shape[-1]),
        })
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    return table.sort_values(["waic_rank", "model"]).reset_index(drop=True)
