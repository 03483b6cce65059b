"""The pipeline's steps as plain functions over a lake.

Each Dagster asset is a thin wrapper around one of these; a notebook user
or the CLI can call them directly with the same effect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa

from evalpipeline.ingest import (
    IngestReport,
    PartitionAccount,
    IngestOptions,
    Validator,
    already_ingested,
    consolidate_partition,
    find_log_files,
    ingest_paths,
    scan_sources,
)
from evalpipeline.keys import from_partition_key, to_partition_key
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.stats.posteriors import accuracy_posteriors, suite_leaderboard


class NoDataError(LookupError):
    """A partition asked for that has no data anywhere."""


def ingest_partition(
    lake: Lake,
    landing: Path,
    model: str,
    suite: str,
    options: IngestOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    validator: Validator | None = None,
) -> tuple[PartitionAccount, IngestReport]:
    """Ingest every source in ``landing`` that holds rows for ``model`` x ``suite``
    (:func:`ingest_partitions` for one pair)."""
    report = ingest_partitions(lake, landing, [(model, suite)], options, progress=progress, validator=validator)
    return report.partitions[(model, suite)], report


def ingest_partitions(
    lake: Lake,
    landing: Path,
    pairs,
    options: IngestOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    validator: Validator | None = None,
) -> IngestReport:
    """Bring the model x suite partitions ``pairs`` up to date with the sources in ``landing``.

    The landing folder is scanned once; each source holding rows for a requested
    pair is staged once, and only if the lake does not already hold its exact
    bytes (a source with several partitions is staged once for all of them).
    Every partition a staged source touches is consolidated (so none is left with
    new records but an old table), and so is every requested pair. Records of a
    partition ingested earlier from elsewhere (``evalpipeline ingest PATH``) stay
    part of it. Raises :class:`NoDataError` naming the pairs that have neither a
    source nor staged records.

    Runs side by side that were given partitions of one source (a long table of
    six suites split over two workers) stage it once: the first takes its lock
    (:meth:`Lake.source_lock`) and stages it; the others find it staged under the
    lock and consolidate only their own pairs, one process at a time per pair
    (:meth:`Lake.partition_lock`).
    """
    options = options or IngestOptions()
    wanted = {tuple(p) for p in pairs}
    files = find_log_files(landing) if Path(landing).exists() else []
    found, _unreadable = scan_sources(files, options)  # unreadable files belong to no partition
    to_stage, with_source, scanned = [], set(), {}
    for source, parts in found:
        mine = {(p.model, p.suite) for p in parts} & wanted
        if not mine:
            continue
        with_source |= mine
        if not already_ingested(lake, source, parts, options):
            to_stage.append(Path(source.path))
            scanned[Path(source.path)] = (source, parts)
    missing = sorted(pair for pair in wanted - with_source
                     if not any(lake.partition_dir("ingested", *pair).glob("*.parquet")))
    if missing:
        names = ", ".join(f"model {m!r} x suite {s!r}" for m, s in missing)
        raise NoDataError(f"no sources for {names} in {landing} or in the lake {lake.root}")
    # a run beside this one (given other partitions of the same source) may stage it first
    report = ingest_paths(to_stage, lake, options, progress=progress, validator=validator,
                          stage_if=lambda path: not already_ingested(lake, *scanned[path], options))
    for model, suite in sorted(wanted - set(report.partitions)):  # unchanged sources, or every one failed
        report.partitions[(model, suite)], reasons = consolidate_partition(lake, model, suite, validator)
        for reason, count in reasons.items():
            report.quarantine_reasons[reason] = report.quarantine_reasons.get(reason, 0) + count
    return report


def partition_validator(lake: Lake, settings=None, *, data_docs: bool = True) -> Validator:
    """A validator for :func:`evalpipeline.ingest.consolidate_partition`: the canonical GX suite,
    with Data Docs under ``<lake>/validation/data_docs/model=<key>/suite=<key>/``."""
    from evalpipeline.validate import ValidationSettings, validate_samples

    settings = settings or ValidationSettings()

    def validate(samples: pd.DataFrame, quarantine: pd.DataFrame, model: str, suite: str):
        docs = lake.partition_dir("validation/data_docs", model, suite) if data_docs else None
        return validate_samples(samples, settings, docs, quarantine=quarantine, label=validation_label(model, suite))

    return validate


#: Longest batch label (UTF-8 bytes) given to Great Expectations: it names folders of the Data Docs
#: after it, and two names of up to 200 characters each made one longer than a file name may be.
VALIDATION_LABEL_BYTES = 96


def validation_label(model: str, suite: str) -> str:
    """``"<model> x <suite>"``, or when that is too long for a file name, its start and a hash of the whole."""
    import hashlib

    label = f"{model} x {suite}"
    if len(label.encode()) <= VALIDATION_LABEL_BYTES:
        return label
    digest = hashlib.sha256(label.encode()).hexdigest()[:12]
    start = label.encode()[: VALIDATION_LABEL_BYTES - len(digest) - 4].decode(errors="ignore")
    return f"{start}... {digest}"


def read_samples(lake: Lake, model: str, suite: str) -> pd.DataFrame:
    """The canonical sample table of one partition (raises :class:`NoDataError` if absent)."""
    path = lake.table_path("samples", "samples.parquet", model, suite)
    if not path.exists():
        raise NoDataError(f"no sample table for {model!r} x {suite!r}: {path} does not exist")
    return lake.read_files([path], model=model, suite=suite)


def write_accuracy_posteriors(
    lake: Lake, model: str, suite: str, *, prior: tuple[float, float] = (1.0, 1.0), mass: float = 0.95
) -> tuple[pd.DataFrame, Path]:
    """Compute and store the conjugate posteriors of one partition."""
    table = accuracy_posteriors(read_samples(lake, model, suite), prior=prior, mass=mass)
    path = lake.table_path("accuracy_posteriors", "posteriors.parquet", model, suite)
    write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), path)
    return table, path


def leaderboard_path(lake: Lake, suite: str) -> Path:
    return lake.root / "suite_leaderboard" / f"suite={to_partition_key(suite)}" / "leaderboard.parquet"


def rejected_note(lake: Lake, *, model: str | None = None, suite: str | None = None) -> str:
    """For a 'no data' error: the sample tables of this model or suite that validation rejected."""
    rejected = [f"{m} x {s} ({', '.join(lake.failed_validation(m, s))})"
                for m, s, _path in lake.sample_tables(model=model, suite=suite, include_failed=True)
                if lake.failed_validation(m, s)]
    return f"; left out, failed validation: {'; '.join(rejected)}" if rejected else ""


def write_suite_leaderboard(lake: Lake, suite: str) -> tuple[pd.DataFrame, Path]:
    """Rank every model that has posteriors on ``suite``; skip combinations never evaluated."""
    suite_key = to_partition_key(suite)
    files = sorted(lake.root.glob(f"accuracy_posteriors/model=*/suite={suite_key}/posteriors.parquet"))
    # posteriors of a sample table that failed validation since (stale, and of rejected data) are left out
    files = [f for f in files if not lake.failed_validation(from_partition_key(f.parent.parent.name.split("=", 1)[1]), suite)]
    if not files:
        raise NoDataError(f"no accuracy posteriors for suite {suite!r} under {lake.root / 'accuracy_posteriors'}"
                          + rejected_note(lake, suite=suite))
    frames = []
    for file in files:
        model_key = file.parent.parent.name.split("=", 1)[1]
        frames.append(lake.read_files([file], model=from_partition_key(model_key)))
    board = suite_leaderboard(pd.concat(frames, ignore_index=True))
    path = leaderboard_path(lake, suite)
    write_parquet_atomic(pa.Table.from_pandas(board, preserve_index=False), path)
    return board, path
