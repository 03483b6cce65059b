"""Sensitivity of the HIP-LLM envelopes to the credal box (RQ2) and to the operational profile (RQ3).

Source: the HIP-LLM paper, Section 4.3.2
(Fig. 6: the box of one hyperparameter narrowed by raising its lower bound,
e.g. b in [1, 12], [4, 12], [8, 12] and c, d in [1, 25], [9, 25], [18, 25])
and Section 4.3.3 (Fig. 7: alternative within-domain weights).

Each row of a sweep is the :meth:`ReliabilityResult.summary` of one run: the
5-95% envelope, the median interval and the E[R(1)] interval per unit. Runs
share the seed, so with equal K the Monte Carlo draws of theta are the same
across operational profiles (common random numbers: differences are the
profile's, not noise).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from evalpipeline.reliability.core import assess_reliability, validate_counts
from evalpipeline.reliability.settings import HyperBox, OperationalProfile, ReliabilitySettings

PARAMETERS = ("a", "b", "c", "d")


def narrowed_boxes(
    box: HyperBox, fractions: Iterable[float] = (0.0, 1 / 3, 2 / 3)
) -> list[tuple[str, float, HyperBox]]:
    """Sub-boxes that raise one parameter's lower bound: [low + f (high - low), high] for each f.

    Returns (parameter, fraction, sub-box) for a, b, c, d in turn.
    """
    out = []
    for name in PARAMETERS:
        low, high = getattr(box, name)
        for f in fractions:
            if not 0.0 <= f < 1.0 or (f > 0 and low == high):
                continue
            out.append((name, float(f), box.replace(**{name: (low + f * (high - low), high)})))
    return out


def hyperparameter_sensitivity(
    counts: pd.DataFrame,
    settings: ReliabilitySettings | None = None,
    sub_boxes: Iterable[tuple[str, float, HyperBox]] | None = None,
    domains: Iterable[str] | None = None,
) -> pd.DataFrame:
    """RQ2: rerun the assessment with each sub-box applied to ``domains`` (default: every domain).

    ``sub_boxes``: (parameter, fraction, box) triples as from :func:`narrowed_boxes`
    (default: that of ``settings.box``). Columns: parameter, fraction, the
    four intervals used, then the summary columns per unit.
    """
    settings = settings or ReliabilitySettings()
    frame = validate_counts(counts)
    targets = sorted(frame["domain"].unique()) if domains is None else list(domains)
    unknown = sorted(set(targets) - set(frame["domain"]))
    if unknown:
        raise ValueError(f"hyperparameter_sensitivity: unknown domain(s) {unknown}")
    sweep = list(sub_boxes) if sub_boxes is not None else narrowed_boxes(settings.box)
    rows = []
    for parameter, fraction, box in sweep:
        boxes = {**settings.domain_boxes, **{d: box for d in targets}}
        summary = assess_reliability(frame, settings.replace(domain_boxes=boxes)).summary()
        summary.insert(0, "parameter", parameter)
        summary.insert(1, "fraction", fraction)
        for i, name in enumerate(PARAMETERS):
            summary.insert(2 + 2 * i, f"{name}_low", getattr(box, name)[0])
            summary.insert(3 + 2 * i, f"{name}_high", getattr(box, name)[1])
        rows.append(summary)
    return pd.concat(rows, ignore_index=True)


def profile_sensitivity(
    counts: pd.DataFrame, profiles: Mapping[str, OperationalProfile], settings: ReliabilitySettings | None = None
) -> pd.DataFrame:
    """RQ3: rerun the assessment under each labelled operational profile; one summary per label."""
    settings = settings or ReliabilitySettings()
    if not profiles:
        raise ValueError("profile_sensitivity: no profiles given")
    rows = []
    for label, profile in profiles.items():
        summary = assess_reliability(counts, settings.replace(profile=profile)).summary()
        summary.insert(0, "profile", label)
        rows.append(summary)
    return pd.concat(rows, ignore_index=True)


def within_domain_profiles(
    domain: str, subdomain: str, shares: Iterable[float], subdomains: Iterable[str]
) -> dict[str, OperationalProfile]:
    """Fig. 7's sweep: ``subdomain`` gets each share of its domain, the others split the rest evenly."""
    others = [s for s in subdomains if s != subdomain]
    out = {}
    for share in shares:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must lie in [0, 1], got {share}")
        weights = {subdomain: share, **{s: (1.0 - share) / len(others) for s in others}} if others else {subdomain: 1.0}
        out[f"{domain}/{subdomain}={share:g}"] = OperationalProfile(subdomain_weights={domain: weights})
    return out
