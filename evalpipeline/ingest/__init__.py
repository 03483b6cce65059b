"""Ingest eval logs into the lake, accounting for every row.

``ingest_paths`` is the one code path used by the CLI (``evalpipeline
ingest PATH``) and by the Dagster asset ``eval_samples``:

1. each log is read into canonical rows (accepted or with a quarantine
   ``reason``) and staged as ``ingested/.../eval-<eval_id>.parquet``; a log
   that cannot be read at all is recorded under ``file_errors/`` with the
   message, and the other logs still ingest. Rows that no partition can
   hold (no model or suite name, or one too long for a partition key) are
   kept under ``unplaced/`` with the reason (see :func:`_stage_source`);
2. each touched model x suite partition is consolidated from all its staged
   logs into ``samples/`` and ``quarantine/``. Where two runs of the same
   model and suite hold the same ``(item_id, epoch)``, the newer run's row
   (by ``created_at``, then ``eval_id``) is kept and the older one is
   quarantined as superseded: nothing is dropped silently. A partition no log
   holds any more (its only log was rewritten in place under another model or
   suite name) is retired: its tables and the outputs made from them are
   removed, so the old name does not linger as a model that no longer exists.

For every partition, rows read = rows ingested + rows quarantined; this is
checked, not assumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
import pyarrow.parquet as pq

from evalpipeline.ingest.base import (
    DEFAULT_METADATA_MAP,
    Chunk,
    IngestOptions,
    Source,
    SourcePartition,
    SourceReadError,
    canonical_name,
    placement_problem,
    sample_label,
    short_error,
)
from evalpipeline.ingest.detect import SOURCE_SUFFIXES, claimed_by_results_file, open_source, reader_for
from evalpipeline.ingest.inspect_logs import LogHeader, LogReadError
from evalpipeline.ingest.scores import ScoreNormalisation
from evalpipeline.lake.keys import PartitionKeyError, from_partition_key, to_partition_key
from evalpipeline.lake import AtomicParquetWriter, Lake, sha256_file, temp_prefix, write_parquet_atomic
from evalpipeline.schema import (
    SchemaError,
    covariate_schema,
    quarantine_schema,
    samples_schema,
    staged_schema,
    to_arrow,
)

__all__ = [
    "IngestOptions",
    "IngestReport",
    "Source",
    "SourcePartition",
    "SourceReadError",
    "scan_sources",
    "LogHeader",
    "Validator",
    "prepare_validation",
    "LogReadError",
    "PartitionAccount",
    "ScoreNormalisation",
    "already_ingested",
    "record_file_error",
    "consolidate_partition",
    "partition_files_state",
    "retire_partition",
    "staged_partitions",
    "StagedRecords",
    "find_log_files",
    "ingest_paths",
]


#: Partitions an ingest's summary lists one by one; the others are counted (``--verbose`` lists all).
PARTITIONS_SHOWN = 20
#: Partitions a file's progress line names; a table holding more is described by its counts.
PARTITIONS_NAMED = 3


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
    #: What the validator said of the partition's final sample table (None: not validated).
    validation: Any = None
    #: Rows moved to quarantine because they failed a row-level validation check.
    rows_failed_validation: int = 0
    #: The partition's quarantine reasons, generalised (without the sample each names), with counts.
    quarantine_reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestReport:
    """What one ingest did: files, file-level errors and per-partition row accounts."""

    files_seen: int = 0
    file_errors: list[FileError] = field(default_factory=list)
    partitions: dict[tuple[str, str], PartitionAccount] = field(default_factory=dict)
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    #: partitions no log holds any more (see retire_partition) -> table folders removed
    retired: dict[tuple[str, str], int] = field(default_factory=dict)
    #: source path -> its rows that no partition can hold (no model or suite, or a name too long for a
    #: partition key), kept under ``unplaced/`` (see :func:`unplaced_path`): reason class -> count
    unplaced: dict[str, dict[str, int]] = field(default_factory=dict)
    #: things a person should know that are no row's fault ("<path>: metadata_map domain='x': no sample ...")
    notes: list[str] = field(default_factory=list)
    #: partitions whose staged records could not be consolidated into one table (a covariate that is a
    #: number in one log and text in another) -> (their staged rows, why): nothing of them is ingested
    not_consolidated: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)

    @property
    def rows_unplaced(self) -> int:
        return sum(sum(reasons.values()) for reasons in self.unplaced.values())

    @property
    def rows_read(self) -> int:
        return sum(p.rows_read for p in self.partitions.values()) + self.rows_unplaced

    @property
    def rows_ingested(self) -> int:
        return sum(p.rows_ingested for p in self.partitions.values())

    @property
    def rows_quarantined(self) -> int:
        """Rows set aside with a reason: in partitions' quarantine tables, or unplaced."""
        return sum(p.rows_quarantined for p in self.partitions.values()) + self.rows_unplaced

    def summary_lines(self, partitions_shown: int | None = PARTITIONS_SHOWN) -> list[str]:
        """What the ingest did, in lines: files, rows, then each partition's accounting (the first
        ``partitions_shown`` of them, and a count of the rest; None: all)."""
        lines = [
            f"files: {self.files_seen} seen, {self.files_seen - len(self.file_errors)} read, "
            f"{len(self.file_errors)} unreadable",
            f"rows: {self.rows_read} read = {self.rows_ingested} ingested + {self.rows_quarantined} quarantined"
            + (f" ({self.rows_unplaced} of them in no partition)" if self.unplaced else "")
            + (
                f"; and {sum(rows for rows, _ in self.not_consolidated.values())} staged in partitions NOT "
                "CONSOLIDATED (below)"
                if self.not_consolidated
                else ""
            ),
        ]
        for (model, suite), (rows, why) in sorted(self.not_consolidated.items()):
            lines.append(
                f"  {model} x {suite}: NOT CONSOLIDATED, {rows} staged rows, its tables left as they were "
                f"(or absent): {why}"
            )
        accounts = sorted(self.partitions.items())
        hidden = accounts[partitions_shown:] if partitions_shown is not None else []
        for (model, suite), acc in accounts[:partitions_shown] if partitions_shown is not None else accounts:
            lines.append(
                f"  {model} x {suite}: {acc.rows_read} read = {acc.rows_ingested} ingested "
                f"({acc.rows_errored} errored, flagged) + {acc.rows_quarantined} quarantined, from {acc.logs} log(s)"
            )
            if acc.validation is not None:
                failed = [c.name for c in acc.validation.failed_checks]
                lines.append(
                    f"    validation: {'FAILED ' + ', '.join(failed) if failed else 'all checks passed'}"
                    + (
                        f"; {acc.rows_failed_validation} row(s) moved to quarantine"
                        if acc.rows_failed_validation
                        else ""
                    )
                )
        if hidden:
            failed = sum(bool(acc.validation is not None and acc.validation.failed_checks) for _, acc in hidden)
            lines.append(
                f"  ... and {len(hidden)} more partition(s) ({failed} failing validation): --verbose lists every one"
            )
        for path, reasons in sorted(self.unplaced.items()):
            lines.append(
                f"  {path}: {sum(reasons.values())} rows in no partition (kept in the lake's "
                f"{UNPLACED_FOLDER}/ folder): " + "; ".join(f"{n} x {r}" for r, n in sorted(reasons.items()))
            )
        for (model, suite), folders in sorted(self.retired.items()):
            lines.append(f"  {model} x {suite}: retired, no log holds it any more ({folders} table folder(s) removed)")
        for reason, count in sorted(self.quarantine_reasons.items()):
            lines.append(f"  quarantined x{count}: {reason}")
        for err in self.file_errors:
            lines.append(f"  unreadable: {err.error}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return lines


def _written_summary(written: dict[tuple[str, str], int]) -> str:
    """One file's progress: each partition's rows when it holds a few, else the counts (a table of 532
    partitions made one 50 KB line)."""
    if len(written) <= PARTITIONS_NAMED:
        return ", ".join(f"{m} x {s}: {n} rows" for (m, s), n in sorted(written.items()))
    models, suites = {m for m, _ in written}, {s for _, s in written}
    return (
        f"{sum(written.values())} rows in {len(written)} partitions ({len(models)} model(s) x {len(suites)} suite(s))"
    )


def find_log_files(path: Path | str) -> list[Path]:
    """The source files at ``path`` (a file, or a folder searched recursively; hidden ones skipped).

    lm-evaluation-harness ``samples_*.jsonl`` files are read through the
    ``results_*.json`` beside them, so they are not listed where one exists.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix.lower() in SOURCE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    return [f for f in files if not claimed_by_results_file(f)]


def scan_sources(
    paths: Iterable[Path], options: IngestOptions | None = None
) -> tuple[list[tuple[Source, list[SourcePartition]]], list[FileError]]:
    """Hash each file, detect its format and read only what names its partitions (those a partition
    can hold: see :func:`evalpipeline.ingest.base.placement_problem`; a file naming none is an error)."""
    options = options or IngestOptions()
    found, errors = [], []
    for path in paths:
        try:
            source = open_source(path, options)
            parts = reader_for(source.format).partitions(source, options)
            problems = [placement_problem(p.model, p.suite) for p in parts]
            if parts and all(problems):
                raise SourceReadError(path, f"no row can be placed in a model x suite partition ({problems[0]})")
            found.append((source, [p for p, problem in zip(parts, problems) if problem is None]))
        except SourceReadError as exc:
            errors.append(FileError(str(path), _sha_or_none(path), str(exc)))
    return found, errors


def staged_path(lake: Lake, source: Source, part: SourcePartition) -> Path:
    """Where the ingest record of one source file's rows for one partition is kept.

    Named by the source's run id (encoded, so a hostile id cannot leave the
    folder) and a hash of the file's path: a file rewritten in place
    replaces its record, while a copy or conversion at another path keeps
    its own, and consolidation then accounts for the repeated rows.
    """
    return lake.table_path(
        "ingested", f"{_source_id_stem(part.source_id)}-{_path_hash(source.path)}.parquet", part.model, part.suite
    )


def _source_id_stem(source_id: str) -> str:
    """The source id as a file-name part: encoded, or, when that is too long (an lm-eval run id holds
    its task's name), a hash of it."""
    try:
        return to_partition_key(source_id)
    except PartitionKeyError:
        return "id-" + hashlib.sha256(source_id.encode()).hexdigest()[:32]


#: Lake folder of the rows no partition can hold, one record per source path (:func:`unplaced_path`).
UNPLACED_FOLDER = "unplaced"

#: Parquet schema metadata of a staged record: the fingerprint of the options it was read with.
OPTIONS_METADATA_KEY = b"evalpipeline.ingest_options"


def already_ingested(lake: Lake, source: Source, parts: list[SourcePartition], options: IngestOptions) -> bool:
    """True when the lake holds this source's ingest records, read with ``options`` (see
    :meth:`IngestOptions.describe`), and every file they were read from (a source may read
    several: lm-eval's samples files) still has the recorded bytes. A record read under other
    options, or one that predates the fingerprint, is read again: a changed score map must reach
    the lake even though the log did not change."""
    fingerprint = options.fingerprint().encode()
    for part in parts:
        path = staged_path(lake, source, part)
        if not path.exists():
            return False
        if (pq.read_schema(path).metadata or {}).get(OPTIONS_METADATA_KEY) != fingerprint:
            return False
        recorded = pq.read_table(path, columns=["log_path", "log_sha256"]).to_pylist()
        for log_path, log_sha256 in {(r["log_path"], r["log_sha256"]) for r in recorded}:
            if _sha_or_none(Path(log_path)) != log_sha256:
                return False
    return bool(parts)


def ingest_paths(
    paths: Iterable[Path],
    lake: Lake,
    options: IngestOptions | ScoreNormalisation | None = None,
    *,
    accept_incomplete_logs: bool | None = None,
    progress: Callable[[str], None] | None = None,
    validator: Validator | None = None,
    stage_if: Callable[[Path], bool] | None = None,
) -> IngestReport:
    """Ingest source files into ``lake`` and consolidate the partitions they touch.

    ``options`` may be a bare :class:`ScoreNormalisation` (everything else
    default); ``accept_incomplete_logs`` overrides the options' value.
    ``validator`` (see :func:`consolidate_partition`) validates each
    consolidated partition. ``stage_if``: asked under the source's lock
    (:meth:`Lake.source_lock`) whether to stage a path still; False skips it
    (another process staged it since the caller looked) and its partitions are
    not consolidated here.
    """
    options = _as_options(options, accept_incomplete_logs)
    say = progress or (lambda _msg: None)
    report = IngestReport()
    touched: set[tuple[str, str]] = set()
    paths = list(paths)
    for number, path in enumerate(paths, start=1):
        # one process at a time stages a source: two runs given partitions of one log must not
        # rewrite its records under each other (the second finds them staged, with ``stage_if``)
        with lake.source_lock(path):
            if stage_if is not None and not stage_if(Path(path)):
                say(f"[{number}/{len(paths)}] {path}: staged meanwhile by a run beside this one; not read again")
                continue
            report.files_seen += 1
            try:
                source = open_source(path, options)
                staged = _stage_source(lake, source, options)
            except SourceReadError as exc:
                error = FileError(str(path), _sha_or_none(path), str(exc))
                report.file_errors.append(error)
                record_file_error(lake, error)
                say(f"[{number}/{len(paths)}] {path}: NOT INGESTED: {exc.message}")
                continue
            clear_file_errors(lake, path)  # a file fixed since it was found unreadable
            written, unplaced = staged.written, staged.unplaced
            stale = _remove_stale_records(lake, source, set(written))
        touched.update(written)
        touched.update(stale)
        summary = _written_summary(written)
        if unplaced:
            report.unplaced[str(path)] = _reason_counts(
                pd.read_parquet(unplaced_path(lake, source.path), columns=["reason", "item_id", "epoch"])
            )
            for reason, count in report.unplaced[str(path)].items():
                report.quarantine_reasons[reason] = report.quarantine_reasons.get(reason, 0) + count
            summary += f"{'; ' if summary else ''}{unplaced} rows in no partition"
        say(f"[{number}/{len(paths)}] {path} ({source.format}): {summary or 'no rows'}")
        for note in staged.notes:
            report.notes.append(f"{path}: {note}")
            say(f"[{number}/{len(paths)}] {path}: note: {note}")
    prepare_validation(
        lake, [pair for pair in touched if any(lake.partition_dir("ingested", *pair).glob("*.parquet"))], validator
    )
    for model, suite in sorted(touched):
        if not any(lake.partition_dir("ingested", model, suite).glob("*.parquet")):
            with lake.partition_lock(model, suite):
                removed = retire_partition(lake, model, suite)
            report.retired[(model, suite)] = len(removed)
            say(
                f"{model} x {suite}: no log holds it any more (rewritten under another model or suite name): "
                f"removed its {len(removed)} table folder(s)"
            )
            continue
        try:
            account, reasons = consolidate_partition(lake, model, suite, validator)
        except SchemaError as exc:  # rows of several logs that fit no one table: the others go on
            staged = sum(
                pq.read_metadata(f).num_rows for f in lake.partition_dir("ingested", model, suite).glob("*.parquet")
            )
            report.not_consolidated[(model, suite)] = (staged, str(exc))
            say(f"{model} x {suite}: NOT CONSOLIDATED: {exc}")
            continue
        report.partitions[(model, suite)] = account
        for reason, count in reasons.items():
            report.quarantine_reasons[reason] = report.quarantine_reasons.get(reason, 0) + count
    kept = touched - set(report.retired)
    if kept:
        lake.record_partition_names("model", {m for m, _ in kept})
        lake.record_partition_names("suite", {s for _, s in kept})
    return report


def unplaced_path(lake: Lake, source_path: str | Path) -> Path:
    """Where the rows of one source path that no partition can hold are kept (see :func:`_stage_source`)."""
    return lake.root / UNPLACED_FOLDER / f"{_path_hash(source_path)}.parquet"


def _unplaced_rows(chunk: Chunk, problem: str) -> pd.DataFrame:
    """``chunk``'s rows with their model and suite names, and ``problem`` in each reason: after the
    reader's own reason where there is one (it names the line and the first cause; the reason classes
    then stay few), else after the row's line (or row) as reasons start."""

    def reason(existing, line, index) -> str:
        if not isinstance(existing, str) or not existing:
            return f"line {int(line)}: {problem}" if pd.notna(line) else f"row {index}: {problem}"
        return existing if problem in existing else f"{existing}; {problem}"

    rows = chunk.rows.copy()
    rows["reason"] = [
        reason(r, line, index) for r, line, index in zip(rows["reason"], rows["source_line"], rows["sample_index"])
    ]
    return rows.assign(model=chunk.model, suite=chunk.suite)


@dataclass
class _Staged:
    """What staging one source gave: rows per partition, rows in no partition, notes for the reader."""

    written: dict[tuple[str, str], int]
    unplaced: int
    notes: list[str]


def _metadata_notes(options: IngestOptions, found: dict[str, bool]) -> list[str]:
    return [
        f"metadata_map {column}={options.metadata_map[column]!r}: no sample has a value for that metadata key, "
        f"so {column} is empty"
        for column, seen in found.items()
        if not seen
    ]


def _stage_source(lake: Lake, source: Source, options: IngestOptions) -> _Staged:
    """Stream one source's chunks into its staged records; all or nothing per source.

    Rows that name no model or suite, or a name too long for a partition key, cannot be placed in a
    partition: they go to the source's unplaced record (:func:`unplaced_path`), reason first, and
    count as quarantined. A source none of whose rows can be placed is an unreadable file.

    A ``metadata_map`` entry set by the user (not the default ``domain=domain`` ...) whose key no
    sample of an Inspect log has gives a note: a misspelt key would otherwise leave the column
    silently empty."""
    writers: dict[tuple[str, str, str], AtomicParquetWriter] = {}
    unplaced = AtomicParquetWriter(unplaced_path(lake, source.path))
    reader = reader_for(source.format)
    fingerprint = {OPTIONS_METADATA_KEY: options.fingerprint().encode()}
    first_problem = None
    metadata_found = {
        column: False
        for column, key in options.metadata_map.items()
        if source.format == "inspect" and DEFAULT_METADATA_MAP.get(column) != key
    }
    try:
        for chunk in reader.read(source, options):
            problem = placement_problem(chunk.model, chunk.suite)
            if problem is not None:
                first_problem = first_problem or problem
                extra = covariate_schema(unplaced.schema) if unplaced.schema is not None else None
                try:
                    table = to_arrow(_unplaced_rows(chunk, problem), quarantine_schema(), extra=extra)
                except SchemaError as exc:
                    raise SourceReadError(source.path, f"rows do not fit the canonical table: {exc}") from exc
                unplaced.write(table)
                continue
            for column, seen in metadata_found.items():
                metadata_found[column] = seen or bool(column in chunk.rows and chunk.rows[column].notna().any())
            key = (chunk.model, chunk.suite, chunk.source_id)
            part = SourcePartition(*key)
            writer = writers.setdefault(key, AtomicParquetWriter(staged_path(lake, source, part)))
            extra = covariate_schema(writer.schema) if writer.schema is not None else None
            try:
                table = to_arrow(chunk.rows, staged_schema(with_partition_columns=False), extra=extra)
            except SchemaError as exc:
                raise SourceReadError(source.path, f"rows do not fit the canonical table: {exc}") from exc
            writer.write(table.replace_schema_metadata({**(table.schema.metadata or {}), **fingerprint}))
        if unplaced.rows and not writers:
            raise SourceReadError(
                source.path,
                f"no row can be placed in a model x suite partition ({unplaced.rows} rows; {first_problem})",
            )
    except SourceReadError:
        for writer in [*writers.values(), unplaced]:
            writer.abort()
        raise
    except Exception as exc:  # a reader bug or a library error on hostile bytes: name the file, go on
        for writer in [*writers.values(), unplaced]:
            writer.abort()
        raise SourceReadError(source.path, f"cannot read ({type(exc).__name__}: {short_error(exc)})") from exc
    written: dict[tuple[str, str], int] = {}
    for (model, suite, _), writer in writers.items():
        writer.commit()
        written[(model, suite)] = written.get((model, suite), 0) + writer.rows
    if unplaced.rows:
        unplaced.commit()
    else:  # none (any more): the record of an earlier content of the path goes
        unplaced.abort()
        unplaced_path(lake, source.path).unlink(missing_ok=True)
    return _Staged(written, unplaced.rows, _metadata_notes(options, metadata_found))


def partition_files_state(lake: Lake, model: str, suite: str) -> str:
    """A digest of the files one partition's sample table is built from and made of: the name,
    size and modification time of its staged records, ``samples.parquet`` and ``quarantine.parquet``.

    Ingestion changes it whenever it writes or removes one of them (unchanged tables are not
    rewritten, so a rerun leaves it alone). A materialisation that records it tells whether the lake
    changed since: a run killed between staging a changed log and recording the new table, or an
    ``evalpipeline ingest`` outside Dagster. File times are compared with file times of the same
    file system, never with a clock of another machine."""
    entries = []
    files = sorted(lake.partition_dir("ingested", model, suite).glob("*.parquet"))
    files += [lake.table_path(table, f"{table}.parquet", model, suite) for table in ("samples", "quarantine")]
    for path in files:
        try:
            stat = path.stat()
        except FileNotFoundError:
            entries.append(f"{path.parent.parent.parent.name}/{path.name}:missing")
            continue
        entries.append(f"{path.parent.parent.parent.name}/{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def retire_partition(lake: Lake, model: str, suite: str) -> list[Path]:
    """Remove the tables of a model x suite partition none of whose sources is left (a log rewritten
    in place under another model or suite name, see :func:`_remove_stale_records`): its samples,
    quarantine and every output made from them, and the model's (or the suite's) own outputs and
    registered name once no partition of it is left. Otherwise the old name's fits, posteriors and leaderboard rows stay in
    the lake as a model that no longer exists. Returns the folders removed.

    Each folder is first renamed to a temporary name of this process, then deleted: a reader sees
    the whole folder or none of it, and what a kill leaves is swept by the next write beside it."""
    model_key, suite_key = to_partition_key(model), to_partition_key(suite)
    folders = [
        *lake.root.glob(f"*/model={model_key}/suite={suite_key}"),
        *lake.root.glob(f"*/*/model={model_key}/suite={suite_key}"),
    ]
    names = []
    if not any(lake.root.glob(f"ingested/model={model_key}/suite=*/*.parquet")):
        folders += [*lake.root.glob(f"*/model={model_key}"), *lake.root.glob(f"*/*/model={model_key}")]
        names.append(lake.root / "partition_names" / "model" / f"name-{model_key}.parquet")
    if not any(lake.root.glob(f"ingested/model=*/suite={suite_key}/*.parquet")):
        folders += [*lake.root.glob(f"*/suite={suite_key}"), *lake.root.glob(f"*/*/suite={suite_key}")]
        names.append(lake.root / "partition_names" / "suite" / f"name-{suite_key}.parquet")
    removed = []
    for folder in sorted(set(folders), key=lambda f: len(f.parts), reverse=True):  # inner folders first
        if not folder.is_dir():
            continue
        doomed = folder.with_name(f"{temp_prefix()}retired-{folder.name}")
        os.replace(folder, doomed)
        shutil.rmtree(doomed)
        removed.append(folder)
    for name in names:  # the name registry lists what the lake holds
        name.unlink(missing_ok=True)
    return removed


def _remove_stale_records(lake: Lake, source: Source, written: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Drop records this path wrote earlier for partitions it no longer holds, and the records of the
    partitions it writes that this very file made under another name; return the partitions touched.

    Another name is the same file spelled otherwise (a relative path, a symlink: ``os.path.samefile``)
    or the path it was moved from (gone now, same bytes). Records are named by a hash of the path, so
    these would otherwise stay as a second copy of the rows, and which copy consolidation keeps would
    follow the paths' order rather than the newer content. A copy at a path that still exists is
    another file and keeps its record; so do the rows of a log deleted from the landing folder."""
    stale = set()
    own = _path_hash(source.path)
    for record in lake.root.glob(f"ingested/model=*/suite=*/*-{own}.parquet"):
        model = from_partition_key(record.parent.parent.name.split("=", 1)[1])
        suite = from_partition_key(record.parent.name.split("=", 1)[1])
        if (model, suite) in written:
            continue
        record.unlink(missing_ok=True)  # missing: another run handling the same file got there first
        stale.add((model, suite))
    for model, suite in written:
        for record in lake.partition_dir("ingested", model, suite).glob("*.parquet"):
            if record.stem.endswith(f"-{own}"):
                continue
            if _made_by(record, source):
                record.unlink(missing_ok=True)
                stale.add((model, suite))
    for record in (lake.root / UNPLACED_FOLDER).glob("*.parquet"):  # the rows in no partition, likewise
        if record.stem != own and _made_by(record, source):
            record.unlink(missing_ok=True)
    return stale


def _made_by(record: Path, source: Source) -> bool:
    """Whether every row of ``record`` came from ``source`` under another name: the same file spelled
    otherwise, or the path it was moved from (gone now, same bytes)."""
    origins = {
        (r["log_path"], r["log_sha256"]) for r in pq.read_table(record, columns=["log_path", "log_sha256"]).to_pylist()
    }
    return bool(origins) and all(
        _same_file(Path(path), Path(source.path)) or (not Path(path).exists() and sha == source.sha256)
        for path, sha in origins
    )


def staged_partitions(lake: Lake, path: str | Path) -> dict[tuple[str, str], bool]:
    """The partitions the lake holds records of the file at ``path`` for, each with whether records
    of other files are there too (without them, the partition is retired when the file stops naming it)."""
    return StagedRecords(lake).partitions_of(path)


class StagedRecords:
    """The lake's ingest records (``ingested/model=*/suite=*/<source>-<path hash>.parquet``), read from
    one listing of ``ingested/`` and indexed by the path hash of the file each came from.

    A discovery with many changed files asks :meth:`partitions_of` once per file: one listing for all
    of them, rather than a glob over every partition folder per file (quadratic in the lake's logs).
    The answers are :func:`staged_partitions`' as of the listing.
    """

    def __init__(self, lake: Lake):
        self._partitions: dict[str, list[tuple[str, str]]] = {}
        self._sources: dict[tuple[str, str], list[str | None]] = {}
        for folder in sorted(lake.root.glob("ingested/model=*/suite=*")):
            # None: a record named without a path hash, which is never a given file's own
            owners = [r.stem.rsplit("-", 1)[1] if "-" in r.stem else None for r in folder.glob("*.parquet")]
            if not owners:
                continue
            pair = (
                from_partition_key(folder.parent.name.split("=", 1)[1]),
                from_partition_key(folder.name.split("=", 1)[1]),
            )
            self._sources[pair] = owners
            for own in set(owners) - {None}:
                self._partitions.setdefault(own, []).append(pair)

    def partitions_of(self, path: str | Path) -> dict[tuple[str, str], bool]:
        """:func:`staged_partitions` of the file at ``path``."""
        own = _path_hash(str(path))
        return {pair: any(other != own for other in self._sources[pair]) for pair in self._partitions.get(own, [])}


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (any more)
        return False


def _as_options(options, accept_incomplete_logs: bool | None) -> IngestOptions:
    if options is None:
        options = IngestOptions()
    elif isinstance(options, ScoreNormalisation):
        options = IngestOptions(normalisation=options)
    if accept_incomplete_logs is not None:
        options = replace(options, accept_incomplete_logs=accept_incomplete_logs)
    return options


def _path_hash(path: str | Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:12]


#: ``validator(samples, quarantine, model, suite)`` -> a report with ``row_failures``
#: (index -> reasons), ``split(samples)`` and check outcomes; see evalpipeline.validate.
Validator = Callable[[pd.DataFrame, pd.DataFrame, str, str], Any]


def _run_label(row: pd.Series) -> str:
    """``eval_id X (path)`` for a log with an eval id; just the path for a table, which has none."""
    return f"eval_id {row['eval_id']} ({row['log_path']})" if pd.notna(row["eval_id"]) else str(row["log_path"])


def _why_kept(kept: pd.Series, superseded_at, superseded_eval_id) -> str:
    """Why consolidation's order (created_at, then eval_id, path and position) kept the other row, said
    as what it is: a row without a created_at (a table without that column) is not known to be newer, and
    of two runs created at the same time (Inspect records whole seconds) neither is."""
    kept_at = kept["created_at"]
    if pd.isna(kept_at) or pd.isna(superseded_at):
        return (
            "by path order, not as newer: a row without a created_at sorts last, then eval_id and path "
            "decide (map a created_at column to keep the newer)"
        )
    if kept_at > superseded_at:
        return "as the newer run"
    if pd.notna(kept["eval_id"]) and kept["eval_id"] == superseded_eval_id:
        return "as the later copy of the same run"
    return (
        f"by eval_id and path order, not as newer: both runs were created at {kept_at.isoformat()} "
        "(Inspect records whole seconds); to keep this row instead, take the kept log out of the landing "
        "folder and `evalpipeline forget` it"
    )


def consolidate_partition(
    lake: Lake, model: str, suite: str, validator: Validator | None = None
) -> tuple[PartitionAccount, dict[str, int]]:
    """Rebuild ``samples/`` and ``quarantine/`` of one partition from its staged logs.

    With a ``validator``, rows failing a row-level check move to quarantine
    (reason prefixed ``validation:``) and the checks are rerun on the table
    that is kept, so the reported outcomes describe what downstream reads.
    Returns the row account and a count of quarantine reasons (reasons are
    generalised by dropping the sample-specific prefix, for summaries).
    Holds the partition's lock (:meth:`Lake.partition_lock`) throughout: a run
    beside this one rebuilding the same partition waits, then rebuilds it from
    the same records (its Data Docs site and tables are not swapped under ours).
    """
    with lake.partition_lock(model, suite):
        return _consolidate_partition(lake, model, suite, validator)


#: Tables validated together are read and held at once: up to this many rows (staged) a batch. GX's
#: ~0.2 s a run is then small beside its per-row cost (~26 us a row, MEASURED), and a step's memory
#: stays that of a few partitions. A partition larger than this is validated alone.
BATCH_VALIDATION_ROWS = 50_000


def prepare_validation(lake: Lake, pairs, validator: Validator | None) -> None:
    """Let a validator that can (one with ``prepare``, see evalpipeline.steps.samples.partition_validator)
    validate the tables ``pairs`` are about to be consolidated into, several at once (batches of up to
    :data:`BATCH_VALIDATION_ROWS` rows); consolidation then asks it for each as before. Read without
    the partitions' locks: the validator keys what it prepared by the tables' content, so a table that
    changes meanwhile is validated again."""
    prepare = getattr(validator, "prepare", None)
    pairs = sorted(set(pairs))
    if prepare is None or len(pairs) < 2:
        return
    batch, rows = [], 0
    for model, suite in pairs:
        staged_rows = sum(
            pq.read_metadata(f).num_rows for f in lake.partition_dir("ingested", model, suite).glob("*.parquet")
        )
        if staged_rows > BATCH_VALIDATION_ROWS:
            continue  # alone: its rows cost more than a GX run does
        if batch and rows + staged_rows > BATCH_VALIDATION_ROWS:
            if len(batch) > 1:
                prepare(batch)
            batch, rows = [], 0
        _files, _staged, samples, quarantined = _candidate_tables(lake, model, suite)
        batch.append((samples, quarantined, model, suite))
        rows += staged_rows
    if len(batch) > 1:
        prepare(batch)


def _candidate_tables(lake: Lake, model: str, suite: str):
    """The partition's staged files and records, and the sample table and quarantine they consolidate
    into before validation: the newest row of each (item_id, epoch) is kept, the others superseded."""
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
            f"superseded: (item_id {i!r}, epoch {e}) is also in {_run_label(keeper.loc[(i, e)])}, "
            f"which is kept {_why_kept(keeper.loc[(i, e)], created, eval_id)}"
            for i, e, created, eval_id in zip(
                superseded["item_id"], superseded["epoch"], superseded["created_at"], superseded["eval_id"]
            )
        ]
    quarantined = pd.concat([staged[staged["reason"].notna()], superseded], ignore_index=True)
    samples = newest.drop(columns=["reason"]).sort_values(["item_id", "epoch"], kind="stable").reset_index(drop=True)
    return staged_files, staged, samples, quarantined


def _consolidate_partition(lake: Lake, model: str, suite: str, validator: Validator | None):
    staged_files, staged, samples, quarantined = _candidate_tables(lake, model, suite)
    validation, failed = None, 0
    if validator is not None:
        validation = validator(samples, quarantined, model, suite)
        if validation.row_failures:
            samples, moved = validation.split(samples)
            failed = len(moved)
            moved["reason"] = "validation: " + moved["reason"]
            quarantined = pd.concat([quarantined, moved], ignore_index=True)
            samples = samples.reset_index(drop=True)
            validation = validator(samples, quarantined, model, suite)
    quarantined = quarantined.sort_values(["log_path", "sample_index"], kind="stable")

    if len(staged) != len(samples) + len(quarantined):  # the accounting invariant
        raise AssertionError(
            f"row accounting broken for {model} x {suite}: {len(staged)} read != "
            f"{len(samples)} ingested + {len(quarantined)} quarantined"
        )
    # The verdict first: a reader never pairs the new table with an older verdict (a kill in
    # between leaves a new verdict on the old table, and a changed partition state the nightly redoes).
    verdict = lake.validation_path(model, suite)
    if validation is None:
        verdict.unlink(missing_ok=True)
    else:
        lake.write_json_atomic({"failed_checks": [c.name for c in validation.failed_checks]}, verdict)
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
        validation=validation,
        rows_failed_validation=failed,
    )
    reasons = _reason_counts(quarantined)
    account.quarantine_reasons = dict(reasons)
    return account, reasons


def _reason_counts(quarantined: pd.DataFrame) -> dict[str, int]:
    """Quarantine reasons by class (:func:`general_reason`), with counts."""
    reasons: dict[str, int] = {}
    for reason, item_id, epoch in zip(quarantined["reason"], quarantined["item_id"], quarantined["epoch"]):
        general = general_reason(reason, item_id, epoch)
        reasons[general] = reasons.get(general, 0) + 1
    return reasons


_WHERE_PREFIX = re.compile(r"^(line|row) \d+: ")


def general_reason(reason: str, item_id: str | None = None, epoch: int | None = None) -> str:
    """The reason without the line, row or sample it names, so that summaries (the ingest report, the
    accounting table) count alike reasons together."""
    reason = _WHERE_PREFIX.sub("", reason)
    if reason.startswith("superseded"):
        return "superseded by a newer run of the same (item_id, epoch)"
    if reason.startswith("duplicate (item_id"):
        return "duplicate (item_id, epoch) within one log"
    if reason.startswith("duplicate (model, suite, item_id"):
        return "duplicate (model, suite, item_id, epoch) within one table file"
    if reason.startswith("duplicate item "):
        return "duplicate item within one wide table file"
    return reason.removeprefix(f"{sample_label(item_id, epoch)}: ")


@dataclass
class Forgotten:
    """What :func:`forget` removed from the lake."""

    #: (model, suite) -> the ingest records removed there, and the rows they held
    records: dict[tuple[str, str], list[Path]] = field(default_factory=dict)
    rows: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the logs named, as the lake's records spell them
    logs: set[str] = field(default_factory=set)
    #: partitions no record is left for: removed with every output made from them (folders removed)
    retired: dict[tuple[str, str], int] = field(default_factory=dict)
    #: records of rows in no partition, and of unreadable files, removed
    other_records: int = 0


def _logs_of(record: Path) -> set[str]:
    return set(pq.read_table(record, columns=["log_path"]).column("log_path").to_pylist())


def _same_path(a: str | Path, b: str | Path) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b)) or _same_file(Path(a), Path(b))


def forget(
    lake: Lake,
    paths: Iterable[str | Path] = (),
    *,
    model: str | None = None,
    suite: str | None = None,
    keep_if: Callable[[str], str | None] | None = None,
) -> Forgotten:
    """Remove from ``lake`` what the logs at ``paths`` gave it, or every log of ``model`` (x ``suite``):
    their ingest records, rows in no partition and unreadable-file records. A partition left with no
    record is retired (:func:`retire_partition`); one that keeps records of other logs is consolidated
    again by its next materialisation (its files state changed). The log files are not touched.

    The lake keeps the rows of a log deleted from the landing folder (it may be an inbox that is
    emptied); this is how a model is taken out of a suite, or a bad rerun undone. ``keep_if(log_path)``
    may refuse a log with a reason (one still in the landing folder would be ingested again): then
    ValueError, and nothing is removed. A path or name that matches nothing is a ValueError too."""
    paths = [str(p) for p in paths]
    model, suite = canonical_name(model), canonical_name(suite)  # as the lake keys names
    if not paths and model is None:
        raise ValueError("name the logs to forget, or a model (and a suite)")
    chosen: dict[tuple[str, str], list[tuple[Path, set[str], int]]] = {}
    matched: set[str] = set()
    for record in sorted(lake.root.glob("ingested/model=*/suite=*/*.parquet")):
        pair = (
            from_partition_key(record.parent.parent.name.split("=", 1)[1]),
            from_partition_key(record.parent.name.split("=", 1)[1]),
        )
        logs = _logs_of(record)
        if model is not None and (pair[0] != model or (suite is not None and pair[1] != suite)):
            continue
        named = {p for p in paths if any(_same_path(log, p) for log in logs)}
        if paths and not named:
            continue
        matched |= named
        chosen.setdefault(pair, []).append((record, logs, pq.read_metadata(record).num_rows))
    other, errors = [], []
    for found_at, logs in [
        *((f, _logs_of(f)) for f in (lake.root / UNPLACED_FOLDER).glob("*.parquet")),
        *((f, {json.loads(f.read_text())["path"]}) for f in (lake.root / "file_errors").glob("*.json")),
    ]:
        named = {p for p in paths if any(_same_path(log, p) for log in logs)}
        if named:
            matched |= named
            (errors if found_at.suffix == ".json" else other).append((found_at, logs))
    unknown = [p for p in paths if p not in matched]
    if unknown or not (chosen or other or errors):
        what = ", ".join(unknown) if unknown else f"model {model!r}" + (f" x suite {suite!r}" if suite else "")
        raise ValueError(
            f"the lake holds nothing of {what} (the log_path column of samples/ and quarantine/ "
            "names each row's log; file_errors/ the unreadable ones)"
        )
    found = Forgotten(
        logs={log for entries in chosen.values() for _r, logs, _n in entries for log in logs}
        | {log for _f, logs in [*other, *errors] for log in logs}
    )
    refusals = [f"{log}: {why}" for log in sorted(found.logs) if keep_if and (why := keep_if(log))]
    if refusals:
        raise ValueError("; ".join(refusals))
    for pair, entries in sorted(chosen.items()):
        with lake.partition_lock(*pair):
            for record, _logs, rows in entries:
                record.unlink(missing_ok=True)
                found.records.setdefault(pair, []).append(record)
                found.rows[pair] = found.rows.get(pair, 0) + rows
            if not any(lake.partition_dir("ingested", *pair).glob("*.parquet")):
                found.retired[pair] = len(retire_partition(lake, *pair))
    for path, _logs in [*other, *errors]:
        path.unlink(missing_ok=True)
        found.other_records += 1
    return found


def record_file_error(lake: Lake, error: FileError) -> None:
    """Keep a log that could not be read at all under ``file_errors/``: one record per path, for its
    latest content (the record of an earlier, also unreadable content of the path goes)."""
    name = f"{(error.sha256 or 'missing')[:16]}-{_path_hash(error.path)}.json"
    lake.write_json_atomic(
        {"path": error.path, "sha256": error.sha256, "error": error.error},
        lake.root / "file_errors" / name,
    )
    for record in (lake.root / "file_errors").glob(f"*-{_path_hash(error.path)}.json"):
        if record.name != name:
            record.unlink(missing_ok=True)


def clear_file_errors(lake: Lake, path: str | Path) -> int:
    """Drop the unreadable-file records of ``path`` (as given, absolute or resolved): it has just been
    read. Returns how many went."""
    folder = lake.root / "file_errors"
    if not folder.is_dir():
        return 0
    removed = 0
    for spelling in {str(path), str(Path(path).absolute()), str(Path(path).resolve())}:
        for record in folder.glob(f"*-{_path_hash(spelling)}.json"):
            record.unlink(missing_ok=True)
            removed += 1
    return removed


def _sha_or_none(path: Path) -> str | None:
    try:
        return sha256_file(Path(path))
    except OSError:
        return None
