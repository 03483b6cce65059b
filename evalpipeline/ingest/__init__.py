"""Ingest eval logs into the lake, accounting for every row.

``ingest_paths`` is the one code path used by the CLI (``evalpipeline
ingest PATH``) and by the Dagster asset ``eval_samples``:

1. each log is read into canonical rows (accepted or with a quarantine
   ``reason``) and staged as ``ingested/.../eval-<eval_id>.parquet``; a log
   that cannot be read at all is recorded under ``file_errors/`` with the
   message, and the other logs still ingest;
2. each touched model x suite partition is consolidated from all its staged
   logs into ``samples/`` and ``quarantine/``. Where two runs of the same
   model and suite hold the same ``(item_id, epoch)``, the newer run's row
   (by ``created_at``, then ``eval_id``) is kept and the older one is
   quarantined as superseded: nothing is dropped silently.

For every partition, rows read = rows ingested + rows quarantined; this is
checked, not assumed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd
import pyarrow.parquet as pq

from evalpipeline.ingest.inspect_logs import LogHeader, LogReadError, read_inspect_log, read_log_header, sample_label
from evalpipeline.ingest.scores import ScoreNormalisation
from evalpipeline.keys import to_partition_key
from evalpipeline.lake import Lake, sha256_file, write_parquet_atomic
from evalpipeline.schema import quarantine_schema, samples_schema, staged_schema, to_arrow

LOG_SUFFIXES = (".eval", ".json")

__all__ = [
    "IngestReport",
    "LogHeader",
    "LogReadError",
    "PartitionAccount",
    "ScoreNormalisation",
    "already_ingested",
    "record_file_error",
    "consolidate_partition",
    "find_log_files",
    "ingest_paths",
    "scan_headers",
]


@dataclass(frozen=True)
class FileError:
    path: str
    sha256: str | None
    error: str


@dataclass
class PartitionAccount:
    """Row accounting of one model x suite partition after consolidation."""

    model: str
    suite: str
    rows_read: int
    rows_ingested: int
    rows_quarantined: int
    rows_errored: int
    logs: int
    samples_written: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class IngestReport:
    """What one ingest did: files, file-level errors and per-partition row accounts."""

    files_seen: int = 0
    file_errors: list[FileError] = field(default_factory=list)
    partitions: dict[tuple[str, str], PartitionAccount] = field(default_factory=dict)
    quarantine_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def rows_read(self) -> int:
        return sum(p.rows_read for p in self.partitions.values())

    @property
    def rows_ingested(self) -> int:
        return sum(p.rows_ingested for p in self.partitions.values())

    @property
    def rows_quarantined(self) -> int:
        return sum(p.rows_quarantined for p in self.partitions.values())

    def summary_lines(self) -> list[str]:
        lines = [
            f"files: {self.files_seen} seen, {self.files_seen - len(self.file_errors)} read, "
            f"{len(self.file_errors)} unreadable",
            f"rows: {self.rows_read} read = {self.rows_ingested} ingested + {self.rows_quarantined} quarantined",
        ]
        for (model, suite), acc in sorted(self.partitions.items()):
            lines.append(
                f"  {model} x {suite}: {acc.rows_read} read = {acc.rows_ingested} ingested "
                f"({acc.rows_errored} errored, flagged) + {acc.rows_quarantined} quarantined, from {acc.logs} log(s)"
            )
        for reason, count in sorted(self.quarantine_reasons.items()):
            lines.append(f"  quarantined x{count}: {reason}")
        for err in self.file_errors:
            lines.append(f"  unreadable: {err.error}")
        return lines


def find_log_files(path: Path | str) -> list[Path]:
    """The ``.eval`` / ``.json`` files at ``path`` (a file, or a folder searched recursively)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in LOG_SUFFIXES and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )


def scan_headers(paths: Iterable[Path]) -> tuple[list[LogHeader], list[FileError]]:
    """Read only the headers of ``paths``; unreadable files are returned as errors."""
    headers, errors = [], []
    for path in paths:
        try:
            headers.append(read_log_header(path))
        except LogReadError as exc:
            errors.append(FileError(str(path), _sha_or_none(path), str(exc)))
    return headers, errors


def staged_path(lake: Lake, header: LogHeader) -> Path:
    """Where the ingest record of one log file is kept.

    Named by the eval id (encoded, so a hostile id cannot leave the folder)
    and a hash of the log's path: a log rewritten in place replaces its
    record, while a copy or conversion at another path (same eval id) keeps
    its own, and consolidation then accounts for the repeated rows.
    """
    path_hash = hashlib.sha256(str(header.path).encode()).hexdigest()[:12]
    return lake.table_path(
        "ingested", f"eval-{to_partition_key(header.eval_id)}-{path_hash}.parquet", header.model, header.suite
    )


def already_ingested(lake: Lake, header: LogHeader) -> bool:
    """True when the lake holds this log's ingest record for exactly these file contents."""
    path = staged_path(lake, header)
    if not path.exists():
        return False
    hashes = pq.read_table(path, columns=["log_sha256"]).column("log_sha256").unique().to_pylist()
    return hashes == [header.sha256]


def ingest_paths(
    paths: Iterable[Path],
    lake: Lake,
    normalisation: ScoreNormalisation | None = None,
    *,
    accept_incomplete_logs: bool = False,
    progress: Callable[[str], None] | None = None,
) -> IngestReport:
    """Ingest log files into ``lake`` and consolidate the partitions they touch."""
    say = progress or (lambda _msg: None)
    report = IngestReport()
    touched: set[tuple[str, str]] = set()
    paths = list(paths)
    for number, path in enumerate(paths, start=1):
        report.files_seen += 1
        try:
            header, rows = read_inspect_log(path, normalisation, accept_incomplete_logs=accept_incomplete_logs)
        except LogReadError as exc:
            error = FileError(str(path), _sha_or_none(path), str(exc))
            report.file_errors.append(error)
            record_file_error(lake, error)
            say(f"[{number}/{len(paths)}] {path}: NOT INGESTED: {exc.message}")
            continue
        write_parquet_atomic(to_arrow(rows, staged_schema(with_partition_columns=False)), staged_path(lake, header))
        touched.add((header.model, header.suite))
        say(f"[{number}/{len(paths)}] {path}: {len(rows)} samples, {header.model} x {header.suite}")
    for model, suite in sorted(touched):
        account, reasons = consolidate_partition(lake, model, suite)
        report.partitions[(model, suite)] = account
        for reason, count in reasons.items():
            report.quarantine_reasons[reason] = report.quarantine_reasons.get(reason, 0) + count
    if touched:
        lake.record_partition_names("model", {m for m, _ in touched})
        lake.record_partition_names("suite", {s for _, s in touched})
    return report


def consolidate_partition(lake: Lake, model: str, suite: str) -> tuple[PartitionAccount, dict[str, int]]:
    """Rebuild ``samples/`` and ``quarantine/`` of one partition from its staged logs.

    Returns the row account and a count of quarantine reasons (reasons are
    generalised by dropping the sample-specific prefix, for summaries).
    """
    staged_files = sorted(lake.partition_dir("ingested", model, suite).glob("*.parquet"))
    staged = lake.read_files(staged_files)
    if staged.empty:
        staged = staged_schema(with_partition_columns=False).empty_table().to_pandas()
    staged = staged.sort_values(["created_at", "eval_id", "log_path", "sample_index"], kind="stable").reset_index(
        drop=True
    )

    accepted = staged[staged["reason"].isna()]
    newest = accepted.drop_duplicates(["item_id", "epoch"], keep="last")
    superseded = accepted.drop(newest.index)
    if len(superseded):
        keeper = newest.set_index(["item_id", "epoch"])
        superseded = superseded.copy()
        superseded["reason"] = [
            f"superseded: (item_id {i!r}, epoch {e}) is also in eval_id {keeper.loc[(i, e), 'eval_id']} "
            f"({keeper.loc[(i, e), 'log_path']}), which is kept as the newer run (or the later copy of the same run)"
            for i, e in zip(superseded["item_id"], superseded["epoch"])
        ]
    quarantined = pd.concat([staged[staged["reason"].notna()], superseded], ignore_index=True)
    samples = newest.drop(columns=["reason"]).sort_values(["item_id", "epoch"], kind="stable")
    quarantined = quarantined.sort_values(["log_path", "sample_index"], kind="stable")

    if len(staged) != len(samples) + len(quarantined):  # the accounting invariant
        raise AssertionError(
            f"row accounting broken for {model} x {suite}: {len(staged)} read != "
            f"{len(samples)} ingested + {len(quarantined)} quarantined"
        )
    written = write_parquet_atomic(
        to_arrow(samples, samples_schema(with_partition_columns=False)),
        lake.table_path("samples", "samples.parquet", model, suite),
    )
    write_parquet_atomic(
        to_arrow(quarantined, quarantine_schema(with_partition_columns=False)),
        lake.table_path("quarantine", "quarantine.parquet", model, suite),
    )
    account = PartitionAccount(
        model=model,
        suite=suite,
        rows_read=len(staged),
        rows_ingested=len(samples),
        rows_quarantined=len(quarantined),
        rows_errored=int(samples["error"].notna().sum()),
        logs=len(staged_files),
        samples_written=written,
    )
    reasons: dict[str, int] = {}
    for reason, item_id, epoch in zip(quarantined["reason"], quarantined["item_id"], quarantined["epoch"]):
        general = _general_reason(reason, item_id, epoch)
        reasons[general] = reasons.get(general, 0) + 1
    return account, reasons


def _general_reason(reason: str, item_id: str, epoch: int) -> str:
    """The reason without the sample it names, so that summaries can count alike reasons."""
    if reason.startswith("superseded"):
        return "superseded by a newer run of the same (item_id, epoch)"
    if reason.startswith("duplicate (item_id"):
        return "duplicate (item_id, epoch) within one log"
    return reason.removeprefix(f"{sample_label(item_id, epoch)}: ")


def record_file_error(lake: Lake, error: FileError) -> None:
    """Keep a log that could not be read at all under ``file_errors/`` (one record per path and content)."""
    path_hash = hashlib.sha256(error.path.encode()).hexdigest()[:12]
    name = f"{(error.sha256 or 'missing')[:16]}-{path_hash}"
    lake.write_json_atomic(
        {"path": error.path, "sha256": error.sha256, "error": error.error},
        lake.root / "file_errors" / f"{name}.json",
    )


def _sha_or_none(path: Path) -> str | None:
    try:
        return sha256_file(Path(path))
    except OSError:
        return None

