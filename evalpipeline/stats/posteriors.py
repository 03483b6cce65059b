"""Conjugate accuracy posteriors per partition, and the per-suite leaderboard.

This is the closed-form baseline that later hierarchical fits are compared
with: each level (overall, domain, subdomain) gets its own independent
Beta posterior, with no pooling between levels.

Which rows count: samples with a score and no error or limit flag (errored
and limit-hit samples are kept in the table but not scored by default).
Every attempt (item x epoch) is one trial; repeats of an item are treated
as independent here, which understates uncertainty when epochs correlate:
``n_items`` is reported beside ``n`` so that readers can see it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalpipeline.stats.intervals import beta_hpdi, beta_posterior, clt_flags, clt_interval

ALL = "(all)"
NONE = "(none)"

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
    "posterior_a": "Beta posterior a = prior_a + k",
    "posterior_b": "Beta posterior b = prior_b + n - k",
    "posterior_mean": "posterior mean of the success rate",
    "hpdi_mass": "probability mass of the HPDI",
    "hpdi_low": "HPDI lower bound",
    "hpdi_high": "HPDI upper bound",
    "clt_low": "CLT interval mean -+ z SE, lower bound, unclipped: SE from p (1 - p) for 0/1 scores (Wald), from the "
               "scores' sample variance for graded ones",
    "clt_high": "CLT interval upper bound, unclipped",
    "clt_flag": "why the CLT interval is degenerate, if it is",
}


def countable(samples: pd.DataFrame) -> pd.Series:
    """Rows that count as scored attempts: a score, and no error or limit."""
    return samples["score"].notna() & samples["error"].isna() & samples["limit"].isna()


def accuracy_posteriors(
    samples: pd.DataFrame, *, prior: tuple[float, float] = (1.0, 1.0), mass: float = 0.95
) -> pd.DataFrame:
    """Beta posterior of the success rate per level of one model x suite partition."""
    frame = samples.copy()
    frame["domain"] = frame["domain"].fillna(NONE)
    frame["subdomain"] = frame["subdomain"].fillna(NONE)
    frame["_counts"] = countable(frame)
    groups: list[tuple[str, str, str, pd.DataFrame]] = [("overall", ALL, ALL, frame)]
    for domain, part in frame.groupby("domain", sort=True):
        groups.append(("domain", domain, ALL, part))
    for (domain, subdomain), part in frame.groupby(["domain", "subdomain"], sort=True):
        groups.append(("subdomain", domain, subdomain, part))
    rows = [_level_row(level, d, s, part, prior, mass) for level, d, s, part in groups]
    return pd.DataFrame(rows, columns=list(POSTERIOR_COLUMNS))


def _level_row(level, domain, subdomain, part, prior, mass) -> dict:
    scored = part[part["_counts"]]
    scores = scored["score"].to_numpy(dtype=float)
    n, k = int(scores.size), float(scores.sum())
    a, b = beta_posterior(k, n, prior)
    low, high = beta_hpdi(a, b, mass)
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
        "posterior_a": a,
        "posterior_b": b,
        "posterior_mean": a / (a + b),
        "hpdi_mass": mass,
        "hpdi_low": low,
        "hpdi_high": high,
        "clt_low": clt_low,
        "clt_high": clt_high,
        "clt_flag": clt_flags(clt_low, clt_high) if n else "no data",
    }


LEADERBOARD_COLUMNS = {
    "rank": "1 = highest posterior mean",
    "model": "model display name",
    "posterior_mean": "posterior mean of the overall success rate",
    "hpdi_low": "HPDI lower bound",
    "hpdi_high": "HPDI upper bound",
    "hpdi_mass": "probability mass of the HPDI",
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
