"""The run status table: failed runs recorded in the lake for people who read Parquet.

``<lake>/run_status/failures/<run_id>.parquet``, one file per failed run
(one row per failed step, or one row for the run when no step failed), so
that recording the same failure twice rewrites the same bytes. Read the
whole table with ``pd.read_parquet("<lake>/run_status/failures")``.

A later run that succeeds and materialises a row's asset for its partition
resolves the row, whichever job it belongs to (:func:`resolve_failures` fills
``resolved_by`` and ``resolved_at``; a row of a whole run, by a later success of
its job), and so
does the partition's retirement, when no log names it any more
(:func:`resolve_retired`, ``resolved_by = "(retired)"``): what still fails is the
rows whose ``resolved_at`` is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipeline.lake import Lake, write_parquet_atomic

FAILURE_COLUMNS = {
    "run_id": "Dagster run id",
    "job": "job name",
    "asset": "asset key of the failed step ((run) when the run failed outside a step)",
    "partition": "partition key of the run (model|suite, model or suite as the folders name them, percent-encoded: urllib.parse.unquote gives the display names), one row per partition of a range run whose process was killed; for a failed range run the daemon launched (a backfill's), one row per partition its failed checks or its error name (a model x suite without samples, the partition whose computation raised), else per partition of the range (a failed range of `evalpipeline run` is not recorded: it is rerun, its failing partitions one per run, and those runs are); empty when unpartitioned",
    "step": "step key",
    "error_type": "exception class the step raised (under Dagster's retry or Failure wrapper; ProcessDied for a killed run)",
    "error_summary": "first line of the error message, at most 500 characters",
    "failed_at": "UTC time the failure was recorded (ISO 8601)",
    "resolved_by": "run id of the later run that succeeded and materialised the asset for the partition (for a (run) row: "
    "a later success of the same job, or (up to date) when the nightly found the partition's outputs current); "
    "(retired) when no log names the partition any more (empty: it still fails)",
    "resolved_at": "UTC time that run's success (or the retirement) was recorded (ISO 8601; empty: it still fails)",
}

#: Every column is a string: a file with no resolved row would otherwise type ``resolved_by`` and
#: ``resolved_at`` as null, and pyarrow cannot read such files and resolved ones as one table.
FAILURE_SCHEMA = pa.schema([(name, pa.string()) for name in FAILURE_COLUMNS])

_SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class StepFailure:
    asset: str
    step: str
    error_type: str
    message: str
    #: the partitions of a range run that the step's error names (those it found no data for, or the one
    #: whose computation raised); empty when it names none. Not a column: the rows are per partition.
    partitions: tuple[str, ...] = ()


def summarise_error(message: str, limit: int = 500) -> str:
    """The first non-empty line of an error message, cut at ``limit`` characters."""
    for line in (message or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return "(no message)"


def record_run_failure(
    lake: Lake, *, run_id: str, job: str, partition: str | list[str], failures: list[StepFailure], failed_at: str
) -> pd.DataFrame:
    """Write the failure record of one run (idempotent: one file per run id): a row per failure, or per
    failure and partition when ``partition`` is a list (a killed range run: each partition is then
    resolved on its own)."""
    if not _SAFE_RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} is not a Dagster run id")
    rows = [
        {
            "run_id": run_id,
            "job": job,
            "asset": f.asset,
            "partition": key,
            "step": f.step,
            "error_type": f.error_type,
            "error_summary": summarise_error(f.message),
            "failed_at": failed_at,
            "resolved_by": None,
            "resolved_at": None,
        }
        for key in ([partition] if isinstance(partition, str) else partition)
        for f in failures
    ]
    frame = pd.DataFrame(rows, columns=list(FAILURE_COLUMNS))
    write_parquet_atomic(_table(frame), lake.root / "run_status" / "failures" / f"{run_id}.parquet")
    return frame


def _table(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(
        frame[list(FAILURE_COLUMNS)].astype(object), schema=FAILURE_SCHEMA, preserve_index=False
    )


def read_run_failures(lake: Lake) -> pd.DataFrame:
    """Every recorded failure, oldest first (an empty frame when none)."""
    folder = lake.root / "run_status" / "failures"
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    if not files:
        return pd.DataFrame(columns=list(FAILURE_COLUMNS))
    return lake.read_files(files).sort_values(["failed_at", "run_id"], kind="stable").reset_index(drop=True)


#: ``asset`` of the row of a run that failed outside any step (or whose process died)
RUN_ASSET = "(run)"

#: ``resolved_by`` of a whole-run row whose partition's outputs the nightly found current
UP_TO_DATE = "(up to date)"


def resolve_up_to_date(lake: Lake, *, partitions: set[str], resolved_at: str) -> int:
    """Mark resolved (``resolved_by = UP_TO_DATE``) the unresolved whole-run rows ((run): a killed
    process) of ``partitions``, which the nightly found current and does not rerun: the run was
    killed while redoing outputs that were already current (or that another run made since), so
    nothing is left to fail, and no later run would resolve them. Returns the number of rows marked."""
    return _mark(
        lake,
        lambda frame: (frame["asset"] == RUN_ASSET) & frame["partition"].fillna("").isin(partitions),
        UP_TO_DATE,
        resolved_at,
    )


#: ``resolved_by`` of the rows of a partition retired because no log names it any more
RETIRED = "(retired)"


def resolve_retired(lake: Lake, *, held_pairs: set[tuple[str, str]], held_keys: set[str], resolved_at: str) -> int:
    """Mark resolved (``resolved_by = RETIRED``) the unresolved rows of partitions that no longer exist:
    a model x suite key ``model|suite`` whose pair is not in ``held_pairs``, or a model or suite key not
    in ``held_keys`` (keys as the partitions write them). A retired partition cannot be rerun, so its
    rows would otherwise say forever that something still fails. Range (``first..last``) and
    unpartitioned rows are left as they are. Returns the number of rows marked."""

    def retired(partition: str) -> bool:
        if not partition or ".." in partition:
            return False
        if "|" in partition:
            return tuple(partition.split("|", 1)) not in held_pairs
        return partition not in held_keys

    return _mark(lake, lambda frame: frame["partition"].fillna("").map(retired).astype(bool), RETIRED, resolved_at)


def _mark(lake: Lake, select, resolved_by: str, resolved_at: str) -> int:
    """Fill ``resolved_by`` / ``resolved_at`` of the unresolved rows ``select(frame)`` picks in each file."""
    folder = lake.root / "run_status" / "failures"
    if not folder.exists():
        return 0
    marked = 0
    for path in sorted(folder.glob("*.parquet")):
        frame = pd.read_parquet(path)
        for column in ("resolved_by", "resolved_at"):  # files written before these columns existed
            if column not in frame:
                frame[column] = None
        rows = select(frame) & frame["resolved_at"].isna()
        # a file of an older release (resolved columns typed null) is rewritten with the string schema
        if not rows.any() and pq.read_schema(path).remove_metadata().equals(FAILURE_SCHEMA):
            continue
        marked += int(rows.sum())
        frame = frame.astype({"resolved_by": object, "resolved_at": object})
        frame.loc[rows, "resolved_by"], frame.loc[rows, "resolved_at"] = resolved_by, resolved_at
        write_parquet_atomic(_table(frame), path)
    return marked


def resolve_failures(
    lake: Lake, *, job: str, partitions: list[str], assets: set[str] | None, run_id: str, resolved_at: str
) -> int:
    """Mark resolved by ``run_id``, a run of ``job`` over ``partitions`` (keys as the table writes them: a
    partition key, "first..last" for a range, "" unpartitioned) that has just succeeded, the unresolved
    rows it redid: those of a failed step whose asset is among ``assets`` (what the run materialised,
    whichever job failed it: a UI materialisation redoes a nightly's failure), and those of a whole
    failed run ((run): it failed outside any step, or its process died) of the same ``job``. A run that
    materialised other assets of the partition resolves nothing of it. ``assets`` None: every row of
    ``job`` for the partitions. Returns the number of rows marked."""
    wanted = set(partitions)

    def redone(frame: pd.DataFrame) -> pd.Series:
        same_job = frame["job"] == job
        if assets is not None:
            same_job = (same_job & (frame["asset"] == RUN_ASSET)) | frame["asset"].isin(set(assets))
        return same_job & frame["partition"].fillna("").isin(wanted)

    return _mark(lake, redone, run_id, resolved_at)
