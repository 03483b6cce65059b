"""Inspect (``inspect_ai``) logs, ``.eval`` and ``.json``, into canonical rows.

Reads through inspect_ai's own API: the header reader
(``read_eval_log(header_only=True)``) for model, task and provenance, and
the sample-summary reader (``read_eval_log_sample_summaries``), which
carries ids, epochs, metadata, scores, errors and limits without loading
messages and events.

Decisions (configurable where marked):

* Logs whose status is ``error`` or ``cancelled`` did not finish: their
  samples are kept but quarantined with that reason, unless
  ``accept_incomplete_logs`` (then completed samples are ingested).
  A log still ``started`` is not ingested yet (file-level error).
* Errored samples are ingested and flagged (``error`` set, ``score`` null).
* A sample without a score from the chosen scorer, or with a value the
  :class:`~evalpipeline.ingest.scores.ScoreNormalisation` does not know,
  is quarantined with the reason.
* Duplicate ``(item_id, epoch)`` within one log: the first is kept, the
  others are quarantined naming the first one's sample index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd

from evalpipeline.ingest.base import (
    COVARIATE_PREFIX,
    Chunk,
    IngestOptions,
    Source,
    SourcePartition,
    SourceReadError,
    sample_label,
    short_error,
)
from evalpipeline.ingest.scores import ScoreNormalisation, binary_reading
from evalpipeline.keys import PartitionKeyError, to_partition_key
from evalpipeline.lake import sha256_file

INCOMPLETE_STATUSES = ("error", "cancelled")

#: Kept for callers of the foundation API: an unreadable Inspect log.
LogReadError = SourceReadError


@dataclass(frozen=True)
class LogHeader:
    """What the header of one log says, plus the file's content hash."""

    path: str
    sha256: str
    log_format: str
    model: str
    suite: str
    status: str
    eval_id: str
    run_id: str
    created_at: datetime
    scorers: tuple[str, ...]


def log_format_of(path: Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".eval":
        return "eval"
    if suffix == ".json":
        return "json"
    raise LogReadError(path, f"not an Inspect log: expected a .eval or .json file, got {suffix!r}")


def read_log_header(path: Path | str, sha256: str | None = None) -> LogHeader:
    """Read only the header of an Inspect log (cheap: no samples are loaded)."""
    from inspect_ai.log import read_eval_log

    path = Path(path)
    fmt = log_format_of(path)
    if not path.is_file():
        raise LogReadError(path, "file not found")
    digest = sha256 or sha256_file(path)
    try:
        log = read_eval_log(str(path), header_only=True, format=fmt)
    except Exception as exc:  # inspect_ai raises many types for bad files; name the file
        raise LogReadError(path, f"cannot read Inspect log header ({type(exc).__name__}: {short_error(exc)})") from exc
    spec = log.eval
    for what, name in (("model", spec.model), ("suite (task)", spec.task), ("eval_id", spec.eval_id)):
        try:
            to_partition_key(name)
        except PartitionKeyError as exc:
            raise LogReadError(path, f"{what} cannot be used as a partition key: {exc}") from exc
    return LogHeader(
        path=str(path),
        sha256=digest,
        log_format=fmt,
        model=spec.model,
        suite=spec.task,
        status=log.status,
        eval_id=spec.eval_id,
        run_id=spec.run_id,
        created_at=_parse_time(spec.created),
        scorers=tuple(s.name for s in (spec.scorers or [])),
    )


class InspectReader:
    """Inspect ``.eval`` / ``.json`` logs (see the module docstring)."""

    name = "inspect"

    def partitions(self, source: Source, options: IngestOptions) -> list[SourcePartition]:
        header = read_log_header(source.path, source.sha256)
        return [SourcePartition(header.model, header.suite, f"eval-{to_partition_key(header.eval_id)}")]

    def read(self, source: Source, options: IngestOptions) -> Iterator[Chunk]:
        header, rows = read_inspect_log(
            source.path, options.normalisation, accept_incomplete_logs=options.accept_incomplete_logs,
            metadata_map=options.metadata_map, sha256=source.sha256,
        )
        yield Chunk(header.model, header.suite, f"eval-{to_partition_key(header.eval_id)}", rows)


def read_inspect_log(
    path: Path | str,
    normalisation: ScoreNormalisation | None = None,
    *,
    accept_incomplete_logs: bool = False,
    metadata_map: Mapping[str, str] | None = None,
    sha256: str | None = None,
) -> tuple[LogHeader, pd.DataFrame]:
    """Read one Inspect log into canonical rows plus a ``reason`` column.

    Returns the header and a frame with every sample of the log: ``reason``
    is null for rows to ingest and says why for rows to quarantine.
    ``metadata_map`` (canonical column or ``cov_<name>`` -> metadata key)
    says where domain, subdomain, cluster and covariates are found.
    Raises :class:`SourceReadError` when the file cannot be read at all.
    """
    from inspect_ai.log import read_eval_log_sample_summaries

    normalisation = normalisation or ScoreNormalisation()
    metadata_map = dict(IngestOptions().metadata_map if metadata_map is None else metadata_map)
    header = read_log_header(path, sha256)
    if header.status == "started":
        raise LogReadError(path, "log status is 'started': the eval is still running; it is ingested once it ends")
    try:
        summaries = read_eval_log_sample_summaries(str(path), format=header.log_format)
    except Exception as exc:
        raise LogReadError(path, f"cannot read samples ({type(exc).__name__}: {short_error(exc)})") from exc
    if not summaries:
        raise LogReadError(path, f"log has no samples (status {header.status!r})")

    scorer = _choose_scorer(header, summaries, normalisation)
    log_reason = None
    if header.status in INCOMPLETE_STATUSES and not accept_incomplete_logs:
        log_reason = f"log status is {header.status!r}: the eval did not finish (set accept_incomplete_logs to ingest)"
    rows = [
        _sample_row(index, sample, header, scorer, normalisation, metadata_map, log_reason)
        for index, sample in enumerate(summaries)
    ]
    _quarantine_duplicates(rows)
    return header, pd.DataFrame(rows)


def _sample_row(index, sample, header: LogHeader, scorer, normalisation, metadata_map, log_reason) -> dict:
    item_id = str(sample.id)
    epoch = int(sample.epoch)
    metadata = sample.metadata or {}
    scores = sample.scores or {}
    row: dict[str, Any] = {
        "domain": None,
        "subdomain": None,
        "item_id": item_id,
        "epoch": epoch,
        "scorer": None,
        "score": None,
        "correct": None,
        "score_raw": None,
        "cluster": None,
        "error": _text_or_none(sample.error),
        "limit": _text_or_none(sample.limit),
        "metadata_json": json.dumps(metadata, sort_keys=True, default=str) if metadata else None,
        "scores_json": json.dumps({k: v.value for k, v in scores.items()}, sort_keys=True, default=str)
        if scores
        else None,
        "run_id": header.run_id,
        "eval_id": header.eval_id,
        "log_path": header.path,
        "log_sha256": header.sha256,
        "log_format": header.log_format,
        "sample_index": index,
        "source_line": None,
        "created_at": header.created_at,
        "reason": log_reason,
    }
    for column, key in metadata_map.items():
        value = metadata.get(key)
        row[column] = value if column.startswith(COVARIATE_PREFIX) and not isinstance(value, (dict, list)) else _text_or_none(value)
    if scorer in scores and row["error"] is not None:
        row["score_raw"] = normalisation.normalise(scores[scorer].value).raw  # audit only: errored
    elif scorer in scores:
        outcome = normalisation.normalise(scores[scorer].value)
        row.update(scorer=scorer, score=outcome.score, score_raw=outcome.raw)
        row["correct"] = binary_reading(outcome.score)
        if outcome.reason and row["reason"] is None:
            row["reason"] = f"{sample_label(item_id, epoch)}: {outcome.reason}"
    elif row["error"] is None and row["reason"] is None:
        available = sorted(scores) or "none"
        row["reason"] = f"{sample_label(item_id, epoch)}: no score from scorer {scorer!r} (scores: {available})"
    return row


def _quarantine_duplicates(rows: list[dict]) -> None:
    """Keep the first (item_id, epoch); quarantine later ones naming the first's position."""
    first_index: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row["item_id"], row["epoch"])
        if key in first_index:
            row["reason"] = (
                f"duplicate (item_id {key[0]!r}, epoch {key[1]}) in the log; "
                f"first seen at sample index {first_index[key]}"
            )
        else:
            first_index[key] = row["sample_index"]


def _choose_scorer(header: LogHeader, summaries, normalisation: ScoreNormalisation) -> str:
    if normalisation.scorer is not None:
        return normalisation.scorer
    if header.scorers:
        return header.scorers[0]
    for sample in summaries:  # headers of hand-made logs may omit the scorers
        if sample.scores:
            return next(iter(sample.scores))
    raise LogReadError(header.path, "no scorer declared in the header and no sample has a score")


def _parse_time(value: str | datetime | None) -> datetime:
    if isinstance(value, datetime):
        stamp = value
    elif value:
        stamp = datetime.fromisoformat(str(value))
    else:
        return datetime(1970, 1, 1, tzinfo=timezone.utc)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.astimezone(timezone.utc)


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
