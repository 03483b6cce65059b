"""Model comparison by WAIC and PSIS-LOO (the HiBayES paper Section 2.3, Figure 8).

WAIC is what the paper uses; PSIS-LOO is added because it flags where its own
approximation fails (Pareto-k > 0.7 per unit). Both are on the elpd scale
(higher = better predictive accuracy; the paper's "closer to 0" WAIC), computed
by ArviZ from each fit's pointwise log-likelihood. The fits must share their
observational units (see data.py), which is checked.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import arviz as az
import numpy as np
import pandas as pd
import pyarrow as pa
import xarray as xr
from arviz import ELPDData

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


CRITERIA_COLUMNS = {
    "waic_i": "WAIC term of the unit (lppd_i - p_waic_i, log scale)",
    "p_waic_i": "posterior variance of the unit's log-likelihood",
    "loo_i": "PSIS-LOO elpd term of the unit",
    "lppd_i": "log of the unit's mean likelihood over the draws",
    "pareto_k": "PSIS Pareto shape of the unit's importance weights (high values: its LOO term is unreliable)",
}


@dataclass(frozen=True)
class PointwiseCriteria:
    """A fit's WAIC and PSIS-LOO terms per observational unit: everything the rankings need.

    Computed once when the fit is made (where the log-likelihood is in memory) and stored beside it
    (``criteria.parquet``), so ranking a lake's fits does not reread their posteriors. The totals,
    standard errors and warnings follow ``arviz.waic`` / ``arviz.loo`` on the log scale.
    """

    waic_i: np.ndarray  # lppd_i - p_waic_i
    p_waic_i: np.ndarray  # posterior variance of the log-likelihood (ddof 0, as arviz)
    loo_i: np.ndarray
    lppd_i: np.ndarray  # log of the mean likelihood over draws
    pareto_k: np.ndarray
    n_samples: int
    observed_total: float | None  # sum of the observed counts: with the unit count, what must match to compare

    @property
    def n_units(self) -> int:
        return int(self.waic_i.shape[0])

    @property
    def identity(self) -> tuple:
        return (self.n_units, self.observed_total)

    def waic(self) -> ELPDData:
        n = self.n_units
        return ELPDData(
            data=[
                float(self.waic_i.sum()),
                float((n * np.var(self.waic_i)) ** 0.5),
                float(self.p_waic_i.sum()),
                self.n_samples,
                n,
                bool(np.any(self.p_waic_i > 0.4)),
                xr.DataArray(self.waic_i, dims=["unit"], name="waic_i"),
                "log",
            ],
            index=["elpd_waic", "se", "p_waic", "n_samples", "n_data_points", "warning", "waic_i", "scale"],
        )

    def loo(self) -> ELPDData:
        n, good_k = self.n_units, min(1 - 1 / np.log10(self.n_samples), 0.7)
        elpd = float(self.loo_i.sum())
        return ELPDData(
            data=[
                elpd,
                float((n * np.var(self.loo_i)) ** 0.5),
                float(self.lppd_i.sum()) - elpd,
                self.n_samples,
                n,
                bool(np.any(self.pareto_k > good_k)),
                xr.DataArray(self.loo_i, dims=["unit"], name="loo_i"),
                xr.DataArray(self.pareto_k, dims=["unit"], name="pareto_k"),
                "log",
                good_k,
            ],
            index=[
                "elpd_loo",
                "se",
                "p_loo",
                "n_samples",
                "n_data_points",
                "warning",
                "loo_i",
                "pareto_k",
                "scale",
                "good_k",
            ],
        )

    def to_table(self) -> pa.Table:
        columns = {name: getattr(self, name) for name in CRITERIA_COLUMNS}
        meta = {"n_samples": self.n_samples, "observed_total": self.observed_total}
        return pa.table(
            {k: pa.array(np.asarray(v, dtype=np.float64)) for k, v in columns.items()},
            metadata={b"criteria": json.dumps(meta).encode()},
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> "PointwiseCriteria":
        meta = json.loads((table.schema.metadata or {})[b"criteria"])
        columns = {
            name: table.column(name).to_numpy() for name in ("waic_i", "p_waic_i", "loo_i", "lppd_i", "pareto_k")
        }
        return cls(**columns, n_samples=int(meta["n_samples"]), observed_total=meta["observed_total"])


def pointwise_criteria(idata: az.InferenceData, var_name: str = "obs") -> PointwiseCriteria:
    """WAIC and PSIS-LOO terms of ``idata``'s pointwise log-likelihood, as arviz computes them."""
    if "log_likelihood" not in idata.groups():
        raise ValueError("the fit has no log_likelihood group")
    values, reff = psis.log_likelihood_matrix(idata, var_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = psis.loo_from_log_likelihood(values, reff)
    p_waic_i = np.empty(values.shape[0])
    for start in range(0, values.shape[0], psis.CHUNK_UNITS):  # no second copy of the matrix
        p_waic_i[start : start + psis.CHUNK_UNITS] = values[start : start + psis.CHUNK_UNITS].var(axis=1)
    observed = idata.observed_data[var_name].values if "observed_data" in idata.groups() else None
    return criteria_from_terms(loo.loo_i, loo.pareto_k, loo.lppd_i, p_waic_i, values.shape[1], observed)


def criteria_from_terms(loo_i, pareto_k, lppd_i, p_waic_i, n_samples: int, observed) -> PointwiseCriteria:
    """The criteria of per-unit PSIS-LOO terms, lppd and log-likelihood variances (p_waic) and the
    observed counts (None: not known)."""
    return PointwiseCriteria(
        waic_i=lppd_i - p_waic_i,
        p_waic_i=p_waic_i,
        loo_i=loo_i,
        lppd_i=lppd_i,
        pareto_k=pareto_k,
        n_samples=n_samples,
        observed_total=None if observed is None else float(np.nansum(observed)),
    )


def compare_fits(fits: dict, *, pareto_k_threshold: float = 0.7) -> pd.DataFrame:
    """One row per candidate with WAIC and PSIS-LOO comparisons, sorted by WAIC rank.

    ``fits`` maps a name to a :class:`~evalpipeline.models.fit.GlmFit`, an ``InferenceData``
    with a ``log_likelihood`` group, or its :class:`PointwiseCriteria`. Raises ValueError with
    fewer than two fits or when their units differ.
    """
    if len(fits) < 2:
        raise ValueError(f"compare_fits needs at least two fits, got {len(fits)}")
    criteria = {name: _criteria(name, fit) for name, fit in fits.items()}
    shapes = {name: c.identity for name, c in criteria.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"fits are not on the same observational units: {shapes}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        waic = az.compare({name: c.waic() for name, c in criteria.items()}, ic="waic", scale="log")
        loo = az.compare({name: c.loo() for name, c in criteria.items()}, ic="loo", scale="log")
    rows = []
    for name, c in criteria.items():
        high = int(np.sum(c.pareto_k > pareto_k_threshold))
        rows.append(
            {
                "model": name,
                "waic_rank": int(waic.loc[name, "rank"]),
                "elpd_waic": float(waic.loc[name, "elpd_waic"]),
                "waic_se": float(waic.loc[name, "se"]),
                "p_waic": float(waic.loc[name, "p_waic"]),
                "d_waic": float(waic.loc[name, "elpd_diff"]),
                "waic_dse": float(waic.loc[name, "dse"]),
                "waic_weight": float(waic.loc[name, "weight"]),
                "waic_warning": bool(waic.loc[name, "warning"]),
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
                "n_units": c.n_units,
            }
        )
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    return table.sort_values(["waic_rank", "model"]).reset_index(drop=True)


def single_fit_criteria(name: str, fit, *, pareto_k_threshold: float = 0.7) -> pd.DataFrame:
    """The criteria of a lone candidate (nothing to compare it with: rank 0, weight 1), in
    :func:`compare_fits`' columns."""
    c = _criteria(name, fit)
    waic, loo = c.waic(), c.loo()
    high = int(np.sum(c.pareto_k > pareto_k_threshold))
    return pd.DataFrame(
        [
            {
                "model": name,
                "waic_rank": 0,
                "elpd_waic": float(waic["elpd_waic"]),
                "waic_se": float(waic["se"]),
                "p_waic": float(waic["p_waic"]),
                "d_waic": 0.0,
                "waic_dse": 0.0,
                "waic_weight": 1.0,
                "waic_warning": bool(waic["warning"]),
                "loo_rank": 0,
                "elpd_loo": float(loo["elpd_loo"]),
                "loo_se": float(loo["se"]),
                "p_loo": float(loo["p_loo"]),
                "d_loo": 0.0,
                "loo_dse": 0.0,
                "loo_weight": 1.0,
                "n_pareto_k_high": high,
                "pareto_k_threshold": pareto_k_threshold,
                "loo_warning": high > 0,
                "n_units": c.n_units,
            }
        ],
        columns=list(COMPARE_COLUMNS),
    )


def _criteria(name: str, fit) -> PointwiseCriteria:
    if isinstance(fit, PointwiseCriteria):
        return fit
    if getattr(fit, "criteria", None) is not None:  # a GlmFit's, computed when it was fitted or read
        return fit.criteria
    idata = getattr(fit, "idata", fit)
    if "log_likelihood" not in idata.groups():
        raise ValueError(f"fit {name!r} has no log_likelihood group")
    return pointwise_criteria(idata)
