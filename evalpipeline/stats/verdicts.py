"""Verdicts in words: the HPDI overlap rule and a plain-language ladder for P(A > B).

* the HiBayES paper Section 3.1 and Figure 3: no overlap of the two
  95% HPDIs -> the models perform differently; the narrower HPDI fully
  inside the wider -> equivalent; partial overlap -> inconclusive.
* the measurement post "How do you say it in the room?":
  "A ladder -- too close to call / leaning / likely / confident /
  near-certain -- carries better than a number"; P = 0.72 reads "likely
  better"; 95% is the bar "we use to ship" and "I'd want before we are
  confident it's an upgrade".

Cut points (the post names the bands but not their edges; these are our
choice, anchored on its two examples), applied to ``max(p, 1 - p)`` so
that the ladder is symmetric in A and B:

==================  ==================
max(p, 1 - p)       band
==================  ==================
< 0.60              too close to call
[0.60, 0.70)        leaning
[0.70, 0.95)        likely   (the post's 0.72 is "likely")
[0.95, 0.99)        confident (the post's 95% shipping bar)
>= 0.99             near-certain
==================  ==================
"""

from __future__ import annotations

import math

LADDER = (
    (0.60, "too close to call"),
    (0.70, "leaning"),
    (0.95, "likely"),
    (0.99, "confident"),
    (math.inf, "near-certain"),
)
"""(upper bound, band): a probability ``q = max(p, 1 - p)`` gets the first band whose bound exceeds it."""

#: How a band reads in a verdict sentence ("A is <hedge> better than B"): the band names are labels,
#: "confident" and "near-certain" are not adverbs.
HEDGES = {"likely": "likely", "confident": "confidently", "near-certain": "almost certainly"}

DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"


def _check_interval(low: float, high: float, name: str) -> None:
    if any(math.isnan(x) for x in (low, high)):
        raise ValueError(f"{name} has a missing bound: [{low}, {high}]")
    if low > high:
        raise ValueError(f"{name} has low > high: [{low}, {high}]")


def hpdi_overlap_fraction(low_a: float, high_a: float, low_b: float, high_b: float) -> float:
    """Length of the overlap over the width of the narrower interval (1 when one holds the other).

    The figure's percentages (">99%", "88%", "0%") are not defined in the
    paper; this is one natural reading, reported beside the verdict.
    """
    _check_interval(low_a, high_a, "interval A")
    _check_interval(low_b, high_b, "interval B")
    overlap = max(0.0, min(high_a, high_b) - max(low_a, low_b))
    narrower = min(high_a - low_a, high_b - low_b)
    if narrower == 0:
        return 1.0 if overlap > 0 or (low_a <= low_b <= high_a or low_b <= low_a <= high_b) else 0.0
    return overlap / narrower


def hpdi_verdict(low_a: float, high_a: float, low_b: float, high_b: float) -> str:
    """HiBayES Figure 3: ``different`` (no overlap), ``equivalent`` (narrower inside wider), else ``inconclusive``.

    Touching intervals (one's upper bound equal to the other's lower
    bound) share a point and so are not "different".
    """
    _check_interval(low_a, high_a, "interval A")
    _check_interval(low_b, high_b, "interval B")
    if high_a < low_b or high_b < low_a:
        return DIFFERENT
    a_inside_b = low_b <= low_a and high_a <= high_b
    b_inside_a = low_a <= low_b and high_b <= high_a
    if a_inside_b or b_inside_a:
        return EQUIVALENT
    return INCONCLUSIVE


def probability_band(p_a_better: float) -> str:
    """The ladder band of ``max(p, 1 - p)`` (see the module docstring for the cut points)."""
    if not 0 <= p_a_better <= 1:
        raise ValueError(f"a probability must be in [0, 1], got {p_a_better}")
    q = max(p_a_better, 1 - p_a_better)
    for bound, band in LADDER:
        if q < bound:
            return band
    raise AssertionError("unreachable: the last bound is infinite")


def probability_verdict(p_a_better: float, name_a: str = "A", name_b: str = "B") -> str:
    """One sentence for the room, e.g. ``"A is likely better than B (72% probability)"``.

    The qualifier is part of the headline (the post's "mind the hedge").
    """
    band = probability_band(p_a_better)
    if band == "too close to call":
        return f"{name_a} vs {name_b}: too close to call (P({name_a} better) = {p_a_better:.0%})"
    leader, other, q = (name_a, name_b, p_a_better) if p_a_better >= 0.5 else (name_b, name_a, 1 - p_a_better)
    percent = f"{q:.1%}" if q >= 0.99 else f"{q:.0%}"
    if band == "leaning":
        return f"leaning {leader} over {other} ({percent} probability {leader} is better; not enough to act on)"
    return f"{leader} is {HEDGES[band]} better than {other} ({percent} probability)"
