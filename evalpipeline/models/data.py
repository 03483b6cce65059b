"""Item-level count data for the hierarchical GLMs (HiBayES Sections 2-3).

The GLMs of the paper (Eq. 2-6) are binomial in counts ``Correct ~ Binomial(n, p)``.
Here the observational unit is one *item* of one model (and, when covariates
vary between attempts of the same item, one item x covariate combination):

    k = successes over the item's countable attempts (epochs),
    n = countable attempts (score present, no error, no limit).

Every candidate model of a partition (or a suite) is fitted to the same
:class:`GlmData`, so their pointwise log-likelihoods are over the *same units*
(one term per row of :attr:`GlmData.units`). That is what makes their WAIC and
PSIS-LOO comparable (the HiBayES paper Section 2.3, Figure 8): the binomial
likelihood of a coarser cell (a domain's total count) differs from the product of
its items' binomial likelihoods by a constant that depends on the grouping, so
two models must never be compared on differently aggregated counts.

Choices where the sources are silent:

* Binary scores use ``correct`` (or ``score`` when ``correct`` is null but the
  score is exactly 0 or 1).
* Graded scores (``correct`` null, score strictly between 0 and 1, e.g. the
  reading suite's 0.18, 0.36, ...) need integer counts for the binomial and
  beta-binomial likelihoods. Default ``graded="threshold"``: an attempt is a
  success when ``score >= graded_threshold`` (0.5). ``graded="fractional"``
  keeps ``k = sum of scores`` (a quasi-binomial likelihood: the log density is
  evaluated at non-integer k through the gamma function; WAIC/LOO then rank
  models on a pseudo-likelihood and predictive checks simulate integer counts).
  ``meta["n_graded"]`` says how many attempts were affected.
* A missing domain or subdomain becomes one ``(none)`` group.
* Covariates ``cov_<name>``: a numeric column enters as a linear slope on the
  value minus its mean (centred so the intercept stays the average item; the
  unit is kept so a slope reads "logit change per unit", as the paper's
  gamma_reasoning, Eq. 4); a non-numeric column, or one named in
  ``categorical``, enters as a group effect per level (the paper's
  diff_difficulty, Eq. 4-6). Attempts with a missing covariate value are not
  counted (``meta["n_missing_covariate"]``).
* A covariate with one value throughout the data is not a covariate of the
  models: a slope on a centred constant is absent from the likelihood (its
  posterior is its prior) and a one-level group effect is only identified in
  sum with the intercept. It stays a column of the units and is named in
  ``meta["constant_covariates"]`` (as levels with one group are dropped by
  :func:`evalpipeline.models.glm.structure_options`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

NONE = "(none)"
COUNT_COLUMNS = ("k", "n")


@dataclass(frozen=True)
class GlmData:
    """Per-unit counts with integer indices into the label lists.

    ``units`` has one row per observational unit with columns ``model``,
    ``domain``, ``subdomain``, ``item_id``, covariate columns (``cov_*``), ``k``,
    ``n`` and the integer codes ``model_idx``, ``domain_idx``, ``subdomain_idx``,
    ``item_idx`` (and ``<cov>_idx`` for categorical covariates). ``subdomain_parent[s]``
    is the domain index of subdomain ``s`` (subdomain labels are
    ``(domain, subdomain)`` pairs, so equal subdomain names under two domains are
    two groups).
    """

    units: pd.DataFrame
    models: tuple[str, ...]
    domains: tuple[str, ...]
    subdomains: tuple[tuple[str, str], ...]
    items: tuple[str, ...]
    subdomain_parent: np.ndarray
    numeric_covariates: tuple[str, ...] = ()
    categorical_covariates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    # -- sizes -------------------------------------------------------------
    @property
    def n_units(self) -> int:
        return len(self.units)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_domains(self) -> int:
        return len(self.domains)

    @property
    def n_subdomains(self) -> int:
        return len(self.subdomains)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @property
    def has_subdomain_structure(self) -> bool:
        """Some domain has two or more subdomains (otherwise the level carries no information)."""
        return self.n_subdomains > self.n_domains

    @property
    def has_repeats(self) -> bool:
        """Most items were attempted more than once (per model): what an item-level effect needs."""
        attempts = self.units.groupby(["model_idx", "item_idx"])["n"].sum()
        return bool(len(attempts)) and float(np.median(attempts)) >= 2

    # -- construction ------------------------------------------------------
    @classmethod
    def from_samples(
        cls,
        samples: pd.DataFrame,
        *,
        graded: str = "threshold",
        graded_threshold: float = 0.5,
        categorical: tuple[str, ...] | list[str] = (),
    ) -> "GlmData":
        """Aggregate canonical samples (one partition, or a suite with a ``model`` column) to unit counts."""
        required = {"item_id", "score", "error", "limit"}
        missing = sorted(required - set(samples.columns))
        if missing:
            raise ValueError(f"samples lack required column(s) {missing}")
        if graded not in ("threshold", "fractional"):
            raise ValueError(f"graded must be 'threshold' or 'fractional', not {graded!r}")
        if not 0.0 < graded_threshold <= 1.0:
            raise ValueError(f"graded_threshold must be in (0, 1], got {graded_threshold!r}")
        frame = samples.copy()
        counts = frame["score"].notna() & frame["error"].isna() & frame["limit"].isna()
        cov_columns = sorted(c for c in frame.columns if c.startswith("cov_"))
        missing_cov = frame[cov_columns].isna().any(axis=1) if cov_columns else pd.Series(False, index=frame.index)
        n_missing_cov = int((counts & missing_cov).sum())
        frame = frame[counts & ~missing_cov]
        if frame.empty:
            raise ValueError("no countable attempts (every row is unscored, errored, limit-hit or lacks a covariate)")
        score = frame["score"].astype(float)
        if ((score < 0) | (score > 1)).any():
            raise ValueError("scores must lie in [0, 1]")
        correct = frame["correct"] if "correct" in frame.columns else pd.Series(pd.NA, index=frame.index)
        binary = score.isin([0.0, 1.0])
        known = correct.notna()
        success = pd.Series(np.nan, index=frame.index)
        success[known] = correct[known].astype(bool).astype(float)
        success[~known & binary] = score[~known & binary]
        graded_rows = ~known & ~binary
        if graded == "threshold":
            success[graded_rows] = (score[graded_rows] >= graded_threshold).astype(float)
        else:
            success[graded_rows] = score[graded_rows]
        frame = frame.assign(_success=success.to_numpy(), _attempt=1.0)
        if "model" not in frame.columns:
            frame["model"] = NONE
        for column in ("domain", "subdomain"):
            frame[column] = frame[column].astype(object).where(frame[column].notna(), NONE) if column in frame else NONE
        frame["model"] = frame["model"].astype(object).where(frame["model"].notna(), NONE)
        keys = ["model", "domain", "subdomain", "item_id", *cov_columns]
        # an item's domain/subdomain is part of its key: items are nested in subdomains
        units = (
            frame.groupby(keys, sort=True, dropna=False).agg(k=("_success", "sum"), n=("_attempt", "sum")).reset_index()
        )
        meta = {
            "graded": graded,
            "graded_threshold": graded_threshold,
            "n_graded": int(graded_rows.sum()),
            "n_attempts": int(len(frame)),
            "n_not_counted": int((~counts).sum()),
            "n_missing_covariate": n_missing_cov,
        }
        return cls.from_counts(units, categorical=categorical, meta=meta)

    @classmethod
    def from_counts(
        cls,
        units: pd.DataFrame,
        *,
        categorical: tuple[str, ...] | list[str] = (),
        meta: dict | None = None,
    ) -> "GlmData":
        """Build from a table of unit counts (columns ``k``, ``n`` and optional labels/covariates)."""
        missing = [c for c in COUNT_COLUMNS if c not in units.columns]
        if missing:
            raise ValueError(f"count table lacks column(s) {missing}")
        frame = units.copy().reset_index(drop=True)
        if frame.empty:
            raise ValueError("count table is empty")
        k = frame["k"].astype(float)
        n = frame["n"].astype(float)
        if (n <= 0).any() or n.isna().any():
            raise ValueError("every unit needs n > 0 countable attempts")
        if (k < 0).any() or (k > n).any() or k.isna().any():
            raise ValueError("k must satisfy 0 <= k <= n for every unit")
        frame["k"], frame["n"] = k, n
        for column in ("model", "domain", "subdomain"):
            if column not in frame.columns:
                frame[column] = NONE
            frame[column] = frame[column].astype(object).where(frame[column].notna(), NONE).astype(str)
        if "item_id" not in frame.columns:
            frame["item_id"] = [f"unit-{i}" for i in range(len(frame))]
        frame["item_id"] = frame["item_id"].astype(str)
        models = tuple(sorted(frame["model"].unique()))
        domains = tuple(sorted(frame["domain"].unique()))
        pairs = sorted(set(zip(frame["domain"], frame["subdomain"])))
        items = tuple(sorted(frame["item_id"].unique()))
        frame["model_idx"] = frame["model"].map({m: i for i, m in enumerate(models)}).astype(np.int32)
        frame["domain_idx"] = frame["domain"].map({d: i for i, d in enumerate(domains)}).astype(np.int32)
        pair_index = {p: i for i, p in enumerate(pairs)}
        frame["subdomain_idx"] = np.array(
            [pair_index[p] for p in zip(frame["domain"], frame["subdomain"])], dtype=np.int32
        )
        frame["item_idx"] = frame["item_id"].map({it: i for i, it in enumerate(items)}).astype(np.int32)
        domain_of_item = frame.groupby("item_id")["subdomain_idx"].nunique()
        if (domain_of_item > 1).any():
            bad = list(domain_of_item[domain_of_item > 1].index[:3])
            raise ValueError(f"item(s) {bad} appear under more than one domain/subdomain")
        numeric, cats, constant = [], {}, []
        categorical = {c if c.startswith("cov_") else f"cov_{c}" for c in categorical}
        unknown = categorical - set(frame.columns)
        if unknown:
            raise ValueError(f"categorical covariate(s) {sorted(unknown)} not in the data")
        for column in sorted(c for c in frame.columns if c.startswith("cov_")):
            if frame[column].nunique() < 2:  # its slope or effect would not be identified
                constant.append(column)
            elif column in categorical or not pd.api.types.is_numeric_dtype(frame[column]):
                levels = tuple(sorted(frame[column].astype(str).unique()))
                cats[column] = levels
                frame[f"{column}_idx"] = (
                    frame[column].astype(str).map({v: i for i, v in enumerate(levels)}).astype(np.int32)
                )
            else:
                numeric.append(column)
        parent = np.array([domains.index(d) for d, _ in pairs], dtype=np.int32)
        return cls(
            units=frame,
            models=models,
            domains=domains,
            subdomains=tuple(pairs),
            items=items,
            subdomain_parent=parent,
            numeric_covariates=tuple(numeric),
            categorical_covariates=cats,
            meta={**(meta or {}), **({"constant_covariates": constant} if constant else {})},
        )

    def observed_rates(self) -> np.ndarray:
        """Per-unit observed success rate k / n (the quantity of the HiBayES paper Figure 7)."""
        return (self.units["k"] / self.units["n"]).to_numpy(dtype=float)
