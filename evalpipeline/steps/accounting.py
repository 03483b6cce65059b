"""Where every input row went: the lake-wide ingest accounting table.

Per model x suite partition: rows in the sample table, rows in quarantine
(by reason class); per log, its rows that no partition can hold (no model or
suite name, or one too long for a partition key); and the logs that could not
be read at all, so that a person can check "rows read = ingested +
quarantined" in one place.
"""

from __future__ import annotations

import json

import pandas as pd

from evalpipeline.lake import Lake, SummaryCache
from evalpipeline.lake.versions import code_version

#: The ``model`` of the rows for a log's rows that no partition can hold (``ingest.unplaced_path``).
UNPLACED_MODEL = "(rows in no partition)"
#: The lake folder of those rows (``ingest.UNPLACED_FOLDER``; not imported: this module stays light).
UNPLACED_FOLDER = "unplaced"

#: Where :func:`ingest_accounting` keeps each partition's counts between runs (:class:`SummaryCache`).
COUNTS_CACHE = "partition_counts.json"

#: The code the accounting's rows come from (the asset's code version and its cache's): the quarantine
#: reasons are classed by the ingest report's own rule (:func:`evalpipeline.ingest.general_reason`).
ACCOUNTING_CODE = ["evalpipeline.steps.accounting", "evalpipeline.ingest"]

ACCOUNTING_COLUMNS = {
    "model": "model display name; (unreadable file) for logs no partition could be read from, "
    "(rows in no partition) for a log's rows that name no model or suite, or a name too long for a partition key",
    "suite": "suite display name (the file path for those two)",
    "rows_ingested": "rows in the canonical sample table",
    "rows_errored": "of those, samples kept but flagged errored or limit-hit (not scored)",
    "rows_quarantined": "rows set aside in the quarantine table (for (rows in no partition): under unplaced/)",
    "rows_accounted": "rows_ingested + rows_quarantined: every row the sources yielded",
    "quarantine_reasons": "quarantine reasons by class (without the line, row or sample each names), with counts",
    "file_error": "why a log could not be read at all (unreadable files only)",
    "failed_validation": "blocking validation checks the sample table failed, comma-separated (empty when it passed): "
    "its rows are kept here but reach no comparison, profile, suite fit or reliability",
}


def reason_class(reason: str, item_id: str | None = None, epoch: int | None = None) -> str:
    """The class of a quarantine reason, as the ingest report counts it: the reason without the line,
    row or sample it names (reasons start with them), e.g. ``unknown score value 'X' (...)``."""
    from evalpipeline.ingest import general_reason

    return general_reason(str(reason), item_id, epoch).strip()


def ingest_accounting(lake: Lake) -> pd.DataFrame:
    """One row per partition of the lake, plus one per log with rows in no partition and one per
    unreadable log file.

    A partition's counts are read from its sample and quarantine tables only when those changed
    since the last run (``ingest_accounting/partition_counts.json``); the validation verdict is read
    every time (one small file)."""
    rows = []
    pairs = sorted(set(lake.partitions("samples")) | set(lake.partitions("quarantine")))
    cache = SummaryCache(lake.root / "ingest_accounting" / COUNTS_CACHE, code_version(ACCOUNTING_CODE))
    for model, suite in pairs:
        files = [*_files(lake, "samples", model, suite), *_files(lake, "quarantine", model, suite)]
        key = lake.partition_dir("samples", model, suite).relative_to(lake.root / "samples").as_posix()
        counts = cache.get(key, files, lambda: _partition_counts(lake, model, suite))
        rows.append(
            {
                "model": model,
                "suite": suite,
                **counts,
                "file_error": None,
                "failed_validation": ", ".join(lake.failed_validation(model, suite)),
            }
        )
    for path in sorted((lake.root / UNPLACED_FOLDER).glob("*.parquet")):  # ingest.unplaced_path
        unplaced = pd.read_parquet(path, columns=["log_path", "reason", "item_id", "epoch"])
        for log_path, records in unplaced.groupby("log_path", sort=True):
            reasons = _reason_classes(records)
            rows.append(
                {
                    "model": UNPLACED_MODEL,
                    "suite": log_path,
                    "rows_ingested": 0,
                    "rows_errored": 0,
                    "rows_quarantined": len(records),
                    "rows_accounted": len(records),
                    "quarantine_reasons": reasons,
                    "file_error": None,
                    "failed_validation": "",
                }
            )
    for path in sorted((lake.root / "file_errors").glob("*.json")):
        record = json.loads(path.read_text())
        rows.append(
            {
                "model": "(unreadable file)",
                "suite": record.get("path", path.name),
                "rows_ingested": 0,
                "rows_errored": 0,
                "rows_quarantined": 0,
                "rows_accounted": 0,
                "quarantine_reasons": "",
                "file_error": record.get("error", ""),
                "failed_validation": "",
            }
        )
    cache.save()
    return pd.DataFrame(rows, columns=list(ACCOUNTING_COLUMNS))


def _partition_counts(lake: Lake, model: str, suite: str) -> dict:
    samples = _read(lake, "samples", model, suite, ["error", "limit"])
    quarantine = _read(lake, "quarantine", model, suite, ["reason", "item_id", "epoch"])
    errored = int((samples["error"].notna() | samples["limit"].notna()).sum()) if len(samples) else 0
    return {
        "rows_ingested": len(samples),
        "rows_errored": errored,
        "rows_quarantined": len(quarantine),
        "rows_accounted": len(samples) + len(quarantine),
        "quarantine_reasons": _reason_classes(quarantine),
    }


def _reason_classes(quarantine: pd.DataFrame) -> str:
    """``"2 x <class>; 1 x <class>"`` for quarantined rows (columns reason, item_id, epoch)."""
    if not len(quarantine):
        return ""
    classes = (
        pd.Series(
            [
                reason_class(r, i, None if pd.isna(e) else int(e))
                for r, i, e in zip(quarantine["reason"], quarantine["item_id"], quarantine["epoch"])
            ]
        )
        .value_counts()
        .sort_index()
    )
    return "; ".join(f"{n} x {r}" for r, n in classes.items())


def _files(lake: Lake, table: str, model: str, suite: str) -> list:
    return sorted(lake.partition_dir(table, model, suite).glob("*.parquet"))


def _read(lake: Lake, table: str, model: str, suite: str, columns: list[str]) -> pd.DataFrame:
    files = _files(lake, table, model, suite)
    if not files:
        return pd.DataFrame(columns=columns)
    return pd.concat([pd.read_parquet(f, columns=columns) for f in files], ignore_index=True)
