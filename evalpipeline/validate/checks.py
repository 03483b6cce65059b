"""Check outcomes, and the suite-level checks GX has no natural expectation for (plain pandas).

"Every item scored" needs a group-by over item_id (at least one usable row per
item) and knowledge of the rows about to be quarantined, which no GX
expectation expresses, so it is computed here. The errored-share bound, by
contrast, is a GX expectation (proportion of non-null ``error`` values).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

#: Columns of a check's example rows (those the frame has), before the columns the check is about.
EXAMPLE_COLUMNS = ("item_id", "epoch", "log_path", "sample_index", "source_line")
#: How many offending rows a check outcome shows.
MAX_EXAMPLES = 5

#: The checks computed here, (name, description), in report order.
SUITE_LEVEL_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "every_item_scored",
        "every item_id has at least one row with a score or an error, not counting rows that "
        "fail a row-level check or sit in quarantine",
    ),
)


@dataclass
class CheckOutcome:
    """One expectation or suite-level check, as a Dagster asset check result would show it."""

    name: str
    passed: bool
    description: str
    observed: Any = None
    examples: pd.DataFrame = field(default_factory=pd.DataFrame)
    source: str = "great_expectations"  # or "pandas"
    expectation_type: str | None = None

    def __repr__(self) -> str:
        state = "passed" if self.passed else "FAILED"
        return f"CheckOutcome({self.name}: {state}, observed={self.observed!r}, {len(self.examples)} example(s))"


def example_rows(frame: pd.DataFrame, index: Iterable[Hashable], extra: Iterable[str] = ()) -> pd.DataFrame:
    """Up to :data:`MAX_EXAMPLES` rows of ``frame`` (by index label) with the provenance columns and ``extra``."""
    columns = [c for c in (*EXAMPLE_COLUMNS, *extra) if c in frame.columns]
    columns = list(dict.fromkeys(columns))
    labels = []
    for label in index:
        labels.append(label)
        if len(labels) == MAX_EXAMPLES:
            break
    return frame.loc[labels, columns]


def first_example_line(examples: pd.DataFrame, limit: int = 300) -> str:
    """The first of a check's example rows on one line (``column=value``, empty values left out): for a
    failure record or a terminal, where the examples table does not fit, it names the file and sample
    that made the check fail."""
    if not len(examples):
        return ""
    row = examples.iloc[0]
    return "; ".join(
        f"{column}={value}"
        for column, value in row.items()
        if not (value is None or (isinstance(value, float) and pd.isna(value)) or value == "")
    )[:limit]


def every_item_scored(
    samples: pd.DataFrame, failing_rows: Iterable[Hashable], quarantine: pd.DataFrame | None
) -> CheckOutcome:
    """Each item_id has a row with a non-null score or a non-null error among the rows that stay.

    Rows in ``failing_rows`` (about to be quarantined) do not count, and item_ids found only
    in ``quarantine`` count as not scored. Examples are the items' rows, marked by ``table``.
    """
    name, description = SUITE_LEVEL_CHECKS[0]
    needed = {"item_id", "score", "error"}
    if not needed <= set(samples.columns):
        return CheckOutcome(
            name,
            False,
            description,
            observed=f"missing columns {sorted(needed - set(samples.columns))}",
            source="pandas",
        )
    failing = samples.index.isin(list(failing_rows))
    usable = ~failing & (samples["score"].notna() | samples["error"].notna())
    scored = pd.Index(samples.loc[usable, "item_id"].dropna().unique())
    items = pd.Index(samples["item_id"].dropna().unique())
    if quarantine is not None and len(quarantine) and "item_id" in quarantine.columns:
        items = items.union(pd.Index(quarantine["item_id"].dropna().unique()), sort=False)
    missing = sorted(items.difference(scored, sort=False), key=str)
    examples = pd.DataFrame()
    if missing:
        wanted = set(missing[:MAX_EXAMPLES])
        parts = [example_rows(samples, samples.index[samples["item_id"].isin(wanted)], ["score", "error"])]
        parts[0] = parts[0].assign(table="samples")
        if quarantine is not None and len(parts[0]) < MAX_EXAMPLES and "item_id" in quarantine.columns:
            more = example_rows(quarantine, quarantine.index[quarantine["item_id"].isin(wanted)], ["reason"])
            parts.append(more.head(MAX_EXAMPLES - len(parts[0])).assign(table="quarantine"))
        examples = pd.concat([p for p in parts if len(p)]) if any(len(p) for p in parts) else parts[0]
    observed = {
        "items": len(items),
        "items_not_scored": len(missing),
        "first_items_not_scored": [str(i) for i in missing[:MAX_EXAMPLES]],
    }
    return CheckOutcome(name, not missing, description, observed=observed, examples=examples, source="pandas")
