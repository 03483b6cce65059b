"""Explicit, configurable score normalisation.

A logged score value becomes a float in [0, 1] only by a declared rule:

* strings by ``value_map`` (default Inspect's letter grades: ``C`` = 1,
  ``I`` = 0, ``P`` = 0.5 partial credit, ``N`` = 0 no answer); any other
  string is *unknown* and quarantined, never read as 0;
* booleans as 1 / 0;
* numbers by the linear map of ``numeric_range`` onto [0, 1]; values outside
  the range, NaN and infinities are quarantined;
* dict-valued scores by ``score_key`` (which key to read), else quarantined;
* lists and nulls are quarantined.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

#: Inspect's letter grades (inspect_ai.scorer: CORRECT, INCORRECT, PARTIAL, NOANSWER).
DEFAULT_VALUE_MAP: Mapping[str, float] = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


@dataclass(frozen=True)
class Normalised:
    """Outcome of normalising one value: ``score`` or a quarantine ``reason``."""

    score: float | None
    raw: str
    reason: str | None = None


@dataclass(frozen=True)
class ScoreNormalisation:
    """How logged score values map to [0, 1], and which scorer to read.

    ``scorer``: the scorer to read when a log has several; ``None`` reads the
    first scorer the log declares (Inspect's primary scorer).
    """

    value_map: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_VALUE_MAP))
    scorer: str | None = None
    score_key: str | None = None
    numeric_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self):
        low, high = self.numeric_range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"numeric_range must be finite with low < high, got {self.numeric_range}")
        for key, value in self.value_map.items():
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"value_map[{key!r}] = {value} is outside [0, 1]")

    def normalise(self, value: Any) -> Normalised:
        raw = _raw(value)
        if isinstance(value, dict):
            if self.score_key is None:
                return Normalised(None, raw, f"dict-valued score (keys {sorted(value)}); set score_key to choose one")
            if self.score_key not in value:
                return Normalised(None, raw, f"dict-valued score has no key {self.score_key!r} (keys {sorted(value)})")
            inner = self.normalise(value[self.score_key])
            return Normalised(inner.score, raw, inner.reason)
        if value is None:
            return Normalised(None, raw, "score value is null")
        if isinstance(value, bool):
            return Normalised(1.0 if value else 0.0, raw)
        if isinstance(value, str):
            if value in self.value_map:
                return Normalised(float(self.value_map[value]), raw)
            return Normalised(None, raw, f"unknown score value {value!r} (value_map knows {sorted(self.value_map)})")
        if isinstance(value, (int, float)):
            try:
                number = float(value)
            except OverflowError:  # a JSON integer beyond float's range: as out of range as inf
                shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
                return Normalised(None, raw, f"score {shown} is not finite as a number (beyond 1.8e308)")
            low, high = self.numeric_range
            if not math.isfinite(number):
                return Normalised(None, raw, f"score {value!r} is not finite")
            if not low <= number <= high:
                return Normalised(None, raw, f"score {value!r} outside numeric_range [{low:g}, {high:g}]")
            return Normalised((number - low) / (high - low), raw)
        return Normalised(None, raw, f"unsupported score type {type(value).__name__}")


def _raw(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def binary_reading(score: float | None) -> bool | None:
    """``correct``: True for 1, False for 0, None for partial or missing scores."""
    if score is None:
        return None
    if score == 1.0:
        return True
    if score == 0.0:
        return False
    return None
