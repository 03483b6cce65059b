"""Design-aware accuracy posteriors per partition, and the per-suite leaderboard.

This is the closed-form baseline that later hierarchical fits are compared
with: each level (overall, domain, subdomain) gets its own posterior, with no
pooling between levels.

Which rows count: samples with a score and no error or limit flag (errored
and limit-hit samples are kept in the table but not scored by default).

The unit of evidence is the item with its repeats (epochs), or the declared
cluster of items (:func:`attempt_units`); attempts count as independent only
when every unit has one attempt. The headline posterior
(:func:`success_rate_posterior`) is a Beta whose counts are the attempts
divided by the design effect: the clustered Beta-Binomial posterior's variance
over the independent-attempts posterior's (position paper Section 3.2, Eq. 8;
the post's "How many questions do you actually have?"), so that ``n_effective``
says how many independent attempts the data were worth. Where every unit has
one attempt the design effect is 1 and the posterior is the conjugate
Beta(prior + k, prior + n - k) exactly. The independent-attempts interval is
kept beside it and flagged when it is too narrow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalpipeline.stats.clustered import clustered_beta_binomial_posterior
from evalpipeline.stats.intervals import beta_hpdi, beta_posterior, clt_flags, clt_interval

ALL = "(all)"
NONE = "(none)"

#: The Gamma(shape, rate) prior on the clusters' concentration d (position paper Eq. 8, its default).
CONCENTRATION_PRIOR = (1.0, 1.0)

#: The independent-attempts interval is flagged when it is narrower than the headline one by more than this
#: share of the headline's width.
NARROWER_MARGIN = 0.10

#: What the design columns mean: added to every table that carries a headline posterior.
DESIGN_COLUMNS = {
    "unit": "the unit of evidence: attempt (every item one attempt, no cluster declared), item (an item with its "
    "repeats) or cluster (the declared cluster of items; an attempt without one is its item's unit)",
    "n_units": "units counted",
    "design_effect": "clustered Beta-Binomial posterior variance over the independent-attempts posterior's (1 when "
    "every unit has one attempt; never below 1)",
    "n_effective": "n / design_effect: the independent attempts the data were worth",
    "independent_hpdi_low": "HPDI of the independent-attempts reading Beta(prior + k, prior + n - k), lower: every "
    "attempt an independent trial",
    "independent_hpdi_high": "its upper bound",
    "independent_flag": f"why the independent-attempts interval is not to be read: narrower than the headline HPDI "
    f"by more than {NARROWER_MARGIN:.0%} of its width; null otherwise",
    "design_note": "what the design leaves uncertain (a single cluster, ...), else null",
}

_HEADLINE_DOCS = {
    "posterior_a": "headline Beta a = prior_a + k / design_effect",
    "posterior_b": "headline Beta b = prior_b + (n - k) / design_effect",
    "posterior_mean": "posterior mean of the success rate (headline)",
    "hpdi_low": "headline HPDI lower bound: design-aware (see unit, design_effect)",
    "hpdi_high": "headline HPDI upper bound",
}

POSTERIOR_COLUMNS = {
    "level": "overall, domain or subdomain",
    "domain": "domain label ((all) at the overall level, (none) where not logged)",
    "subdomain": "subdomain label ((all) above the subdomain level)",
    "n": "scored attempts (items x epochs) counted",
    "n_items": "distinct items among them",
    "k": "sum of scores (successes; fractional for graded scores)",
    "n_excluded": "attempts not counted: errored, limit-hit or unscored",
    "observed_mean": "k / n",
    "prior_a": "Beta prior a",
    "prior_b": "Beta prior b",
    **_HEADLINE_DOCS,
    "hpdi_mass": "probability mass of the HPDI",
    **DESIGN_COLUMNS,
    "clt_low": "CLT interval mean -+ z SE, lower bound, unclipped: SE from p (1 - p) for 0/1 scores (Wald), from the "
    "scores' sample variance for graded ones",
    "clt_high": "CLT interval upper bound, unclipped",
    "clt_flag": "why the CLT interval is degenerate, if it is",
}


def attempt_units(attempts: pd.DataFrame) -> tuple[np.ndarray, str]:
    """The unit of evidence of each attempt, and its kind: ``cluster`` where a cluster is declared (an attempt
    without one is its own item's unit), else ``item``. Labels of clusters and items cannot collide."""
    items = "item\x1f" + attempts["item_id"].astype(str)
    if "cluster" in attempts.columns and attempts["cluster"].notna().any():
        clusters = attempts["cluster"]
        return np.where(clusters.notna(), "cluster\x1f" + clusters.astype(str), items).astype(object), "cluster"
    return items.to_numpy(dtype=object), "item"


def success_rate_posterior(
    scores,
    units,
    unit_kind: str = "item",
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    concentration_prior: tuple[float, float] = CONCENTRATION_PRIOR,
    mass: float = 0.95,
) -> dict:
    """The design-aware posterior of one success rate from counted ``scores`` and each score's unit.

    Units with one attempt each: the conjugate Beta(prior + k, prior + n - k), design effect 1. Otherwise
    the clustered Beta-Binomial posterior over the units (Eq. 8, ``concentration_prior`` on d) gives the
    design effect ``D`` (its variance over the independent reading's, at least 1), and the headline is
    Beta(prior + k / D, prior + (n - k) / D): the data read as ``n / D`` independent attempts. Returns
    the columns of :data:`DESIGN_COLUMNS` and the headline's (``posterior_a`` ... ``hpdi_high``).
    """
    scores = np.asarray(scores, dtype=float)
    units = np.asarray(units, dtype=object)
    n, k = int(scores.size), float(scores.sum())
    a, b = beta_posterior(k, n, prior)
    independent = beta_hpdi(a, b, mass)
    codes, unit_index = np.unique(units, return_inverse=True) if n else (np.array([]), np.array([], dtype=int))
    trials = np.bincount(unit_index, minlength=len(codes)).astype(float)
    design_effect, note = 1.0, None
    if n and trials.max() > 1:
        successes = np.bincount(unit_index, weights=scores, minlength=len(codes))
        clustered = clustered_beta_binomial_posterior(
            successes, trials, mean_prior=prior, concentration_prior=concentration_prior
        )
        naive_variance = a * b / ((a + b) ** 2 * (a + b + 1))
        design_effect = max(1.0, clustered.sd**2 / naive_variance)
        if len(codes) == 1:
            note = (
                f"one {unit_kind}: the interval rests on a single independent unit, so it is about as wide as "
                "the prior allows"
            )
    else:
        unit_kind = "attempt"
    post_a, post_b = prior[0] + k / design_effect, prior[1] + (n - k) / design_effect
    low, high = (float(x) for x in beta_hpdi(post_a, post_b, mass)) if design_effect > 1 else independent
    flag = None
    narrower = 1 - (independent[1] - independent[0]) / (high - low) if high > low else 0.0
    if narrower > NARROWER_MARGIN:
        flag = (
            f"{narrower:.0%} narrower than the headline: it counts {n} attempts as independent, which "
            f"{len(codes)} {unit_kind}{'s' if len(codes) != 1 else ''} are worth about {n / design_effect:.0f} of"
        )
    return {
        "posterior_a": float(post_a),
        "posterior_b": float(post_b),
        "posterior_mean": float(post_a / (post_a + post_b)),
        "hpdi_low": float(low),
        "hpdi_high": float(high),
        "unit": unit_kind,
        "n_units": int(len(codes)),
        "design_effect": float(design_effect),
        "n_effective": float(n / design_effect),
        "independent_hpdi_low": float(independent[0]),
        "independent_hpdi_high": float(independent[1]),
        "independent_flag": flag,
        "design_note": note,
    }


def countable(samples: pd.DataFrame) -> pd.Series:
    """Rows that count as scored attempts: a score, and no error or limit."""
    return samples["score"].notna() & samples["error"].isna() & samples["limit"].isna()


def accuracy_posteriors(
    samples: pd.DataFrame,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    mass: float = 0.95,
    concentration_prior: tuple[float, float] = CONCENTRATION_PRIOR,
) -> pd.DataFrame:
    """The design-aware posterior of the success rate per level of one model x suite partition."""
    frame = samples.copy()
    frame["domain"] = frame["domain"].fillna(NONE)
    frame["subdomain"] = frame["subdomain"].fillna(NONE)
    frame["_counts"] = countable(frame)
    frame["_unit"], unit_kind = attempt_units(frame)
    groups: list[tuple[str, str, str, pd.DataFrame]] = [("overall", ALL, ALL, frame)]
    for domain, part in frame.groupby("domain", sort=True):
        groups.append(("domain", domain, ALL, part))
    for (domain, subdomain), part in frame.groupby(["domain", "subdomain"], sort=True):
        groups.append(("subdomain", domain, subdomain, part))
    rows = [_level_row(level, d, s, part, prior, mass, concentration_prior, unit_kind) for level, d, s, part in groups]
    return pd.DataFrame(rows, columns=list(POSTERIOR_COLUMNS))


def _level_row(level, domain, subdomain, part, prior, mass, concentration_prior, unit_kind) -> dict:
    scored = part[part["_counts"]]
    scores = scored["score"].to_numpy(dtype=float)
    n, k = int(scores.size), float(scores.sum())
    headline = success_rate_posterior(
        scores, scored["_unit"].to_numpy(), unit_kind, prior=prior, concentration_prior=concentration_prior, mass=mass
    )
    mean, clt_low, clt_high = clt_interval(scores, mass)
    return {
        "level": level,
        "domain": domain,
        "subdomain": subdomain,
        "n": n,
        "n_items": int(scored["item_id"].nunique()),
        "k": k,
        "n_excluded": int(len(part) - n),
        "observed_mean": mean,
        "prior_a": float(prior[0]),
        "prior_b": float(prior[1]),
        **headline,
        "hpdi_mass": mass,
        "clt_low": clt_low,
        "clt_high": clt_high,
        "clt_flag": clt_flags(clt_low, clt_high) if n else "no data",
    }


LEADERBOARD_COLUMNS = {
    "rank": "1 = highest posterior mean",
    "model": "model display name",
    "posterior_mean": "posterior mean of the overall success rate (headline, design-aware)",
    "hpdi_low": "headline HPDI lower bound (design-aware)",
    "hpdi_high": "headline HPDI upper bound",
    "hpdi_mass": "probability mass of the HPDI",
    "unit": DESIGN_COLUMNS["unit"],
    "n_effective": DESIGN_COLUMNS["n_effective"],
    "design_effect": DESIGN_COLUMNS["design_effect"],
    "independent_hpdi_low": DESIGN_COLUMNS["independent_hpdi_low"],
    "independent_hpdi_high": DESIGN_COLUMNS["independent_hpdi_high"],
    "independent_flag": DESIGN_COLUMNS["independent_flag"],
    "clt_low": "CLT interval lower bound (the conventional reading)",
    "clt_high": "CLT interval upper bound",
    "clt_flag": "why the CLT interval is degenerate, if it is",
    "n": "scored attempts",
    "n_items": "distinct items",
    "k": "sum of scores",
    "observed_mean": "k / n",
    "prior_a": "Beta prior a",
    "prior_b": "Beta prior b",
    "overlaps_leader": "the model's HPDI overlaps the leader's (no clear separation)",
}


def suite_leaderboard(posteriors: pd.DataFrame) -> pd.DataFrame:
    """Rank models on one suite by the overall posterior mean.

    ``posteriors``: the :func:`accuracy_posteriors` rows of every evaluated
    model on the suite, with a ``model`` column. Models never evaluated on
    the suite simply have no rows.
    """
    overall = posteriors[posteriors["level"] == "overall"].copy()
    overall = overall.sort_values(["posterior_mean", "model"], ascending=[False, True], kind="stable")
    overall["rank"] = np.arange(1, len(overall) + 1)
    if len(overall):
        leader = overall.iloc[0]
        overall["overlaps_leader"] = (overall["hpdi_high"] >= leader["hpdi_low"]) & (
            overall["hpdi_low"] <= leader["hpdi_high"]
        )
    else:
        overall["overlaps_leader"] = pd.Series(dtype=bool)
    return overall[list(LEADERBOARD_COLUMNS)].reset_index(drop=True)
