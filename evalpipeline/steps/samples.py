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
    prepare_validation,
    scan_sources,
)
from evalpipeline.lake.keys import from_partition_key, to_partition_key
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.stats.posteriors import CONCENTRATION_PRIOR, accuracy_posteriors, suite_leaderboard


class NoDataError(LookupError):
    """A partition asked for that has no data anywhere. ``pairs``: the (model, suite) pairs it names
    when it lacks several at once (:func:`ingest_partitions`), so that a caller can tell which."""

    def __init__(self, message: str, pairs: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.pairs = tuple(pairs)


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
    missing = sorted(
        pair for pair in wanted - with_source if not any(lake.partition_dir("ingested", *pair).glob("*.parquet"))
    )
    if missing:
        names = ", ".join(f"model {m!r} x suite {s!r}" for m, s in missing)
        raise NoDataError(f"no sources for {names} in {landing} or in the lake {lake.root}", pairs=tuple(missing))
    # a run beside this one (given other partitions of the same source) may stage it first
    report = ingest_paths(
        to_stage,
        lake,
        options,
        progress=progress,
        validator=validator,
        stage_if=lambda path: not already_ingested(lake, *scanned[path], options),
    )
    rest = sorted(wanted - set(report.partitions))  # unchanged sources, or every one failed
    prepare_validation(lake, rest, validator)
    for model, suite in rest:
        report.partitions[(model, suite)], reasons = consolidate_partition(lake, model, suite, validator)
        for reason, count in reasons.items():
            report.quarantine_reasons[reason] = report.quarantine_reasons.get(reason, 0) + count
    return report


def partition_validator(lake: Lake, settings=None, *, data_docs: bool = True) -> Validator:
    """A validator for :func:`evalpipeline.ingest.consolidate_partition`: the canonical GX suite,
    with Data Docs under ``<lake>/validation/data_docs/model=<key>/suite=<key>/``
    (:class:`PartitionValidator`)."""
    from evalpipeline.validate import ValidationSettings

    return PartitionValidator(lake, settings or ValidationSettings(), data_docs=data_docs)


#: Data Docs sites of partitions validated together (:class:`PartitionValidator`), by batch digest.
BATCH_SITES = "validation/data_docs/batches"
#: The first bytes of a partition's Data Docs page that links its batch's site.
_BATCH_LINK_MARK = "<!-- evalpipeline validated in batch "
#: A batch site is kept this long even when no partition links it yet (a run beside this one may
#: have built it and not yet written its partitions' pages).
BATCH_SITE_GRACE_SECONDS = 3600.0


class PartitionValidator:
    """Validates each partition's table with the canonical GX suite, and many at once when asked.

    ``prepare(candidates)`` (called by consolidation with the tables it is about to write, see
    :func:`evalpipeline.ingest.prepare_validation`) runs the suite once over the partitions that
    share columns and dtypes (:func:`evalpipeline.validate.batch.validate_batch`): GX costs ~0.2 s
    a run whatever the rows, ~90% of a 60-partition ingest step one partition at a time. Calling
    the validator for a partition then returns the report prepared for it when its table and
    quarantine are the ones prepared (keyed by content), and validates it alone otherwise: a
    partition that fails any check always is, so its report has GX's own failing rows and examples.
    A batch whose GX run raises prepares nothing (``batch_error`` says why): each partition is then
    validated alone, as before, and an error there names its partition.

    Data Docs: a partition validated alone gets its own GX site in its folder, as before. One
    validated in a batch gets, in that folder, a page linking the batch's site under
    :data:`BATCH_SITES` (which names every partition it validated); batch sites no partition links
    any more are removed (after :data:`BATCH_SITE_GRACE_SECONDS`).
    """

    def __init__(self, lake: Lake, settings, *, data_docs: bool = True):
        self.lake, self.settings, self.data_docs = lake, settings, data_docs
        self._prepared: dict[tuple[str, str], tuple[tuple, object]] = {}
        #: Why the last ``prepare`` validated nothing (its GX run raised), or None.
        self.batch_error: str | None = None

    def prepare(self, candidates) -> None:
        """``candidates``: ``(samples, quarantine, model, suite)`` of the tables about to be written."""
        from evalpipeline.validate.batch import BatchItem, validate_batch

        root = self.lake.root / BATCH_SITES if self.data_docs else None
        if root is not None:
            self.sweep_batch_sites()
        items = [
            BatchItem(samples, quarantine, validation_label(model, suite), key=[model, suite])
            for samples, quarantine, model, suite in candidates
        ]
        try:
            reports = validate_batch(items, self.settings, root)
        except Exception as exc:  # noqa: BLE001 - the single path validates each partition, and raises for the culprit
            self.batch_error = f"{type(exc).__name__}: {exc}"
            return
        for (samples, quarantine, model, suite), report in zip(candidates, reports):
            if report is not None:
                self._prepared[(model, suite)] = (_content_key(samples, quarantine), report)

    def __call__(self, samples: pd.DataFrame, quarantine: pd.DataFrame, model: str, suite: str):
        from evalpipeline.validate import validate_samples

        prepared = self._prepared.pop((model, suite), None)
        if prepared is not None and prepared[0] == _content_key(samples, quarantine):
            report = prepared[1]
            if self.data_docs and report.data_docs_index is not None:
                report.data_docs_index = self._link_batch_site(
                    model, suite, report.data_docs_index.parent, report.data_docs_page
                )
            return report
        docs = self.lake.partition_dir("validation/data_docs", model, suite) if self.data_docs else None
        return validate_samples(
            samples, self.settings, docs, quarantine=quarantine, label=validation_label(model, suite)
        )

    def _link_batch_site(self, model: str, suite: str, site: Path, page: Path) -> Path:
        """Replace the partition's Data Docs folder by one page that links its batch's site."""
        import html
        import os

        from evalpipeline.validate.run import _replace_dir, _site_dirs

        folder, build = _site_dirs(self.lake.partition_dir("validation/data_docs", model, suite))
        build.mkdir()
        from urllib.parse import quote

        target = html.escape(quote(Path(os.path.relpath(page, folder)).as_posix()))
        label = html.escape(f"{model} x {suite}")
        (build / "index.html").write_text(
            f'{_BATCH_LINK_MARK}{site.name} -->\n<!doctype html>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="refresh" content="0; url={target}">\n<title>{label}: validation</title>\n'
            f"<p>{label} passed every check of the canonical suite. It was validated in one Great Expectations "
            f'run with other partitions of the same columns and dtypes: <a href="{target}">that run\'s Data Docs</a>'
            f" (its <code>partitions.json</code> lists them).</p>\n"
        )
        try:
            _replace_dir(build, folder)
        finally:
            if build.exists():
                import shutil

                shutil.rmtree(build, ignore_errors=True)
        return folder / "index.html"

    def sweep_batch_sites(self) -> list[Path]:
        """Remove the batch sites older than the grace period that no partition's page links."""
        import shutil
        import time

        root = self.lake.root / BATCH_SITES
        old = []
        for site in root.iterdir() if root.is_dir() else ():
            try:
                if not site.name.startswith(".") and time.time() - site.stat().st_mtime >= BATCH_SITE_GRACE_SECONDS:
                    old.append(site)
            except FileNotFoundError:
                continue  # swept meanwhile
        if not old:
            return []  # no lock taken: a rerun within the hour adds no lock file to the lake
        removed = []
        with self.lake.lock("validation-batch-sites"):
            for site in old:
                if site.is_dir() and not any(
                    self._links(model, suite, site.name) for model, suite in _site_pairs(site)
                ):
                    shutil.rmtree(site, ignore_errors=True)
                    removed.append(site)
        return removed

    def _links(self, model: str, suite: str, digest: str) -> bool:
        page = self.lake.partition_dir("validation/data_docs", model, suite) / "index.html"
        try:
            with open(page, encoding="utf-8", errors="replace") as handle:
                return handle.read(len(_BATCH_LINK_MARK) + 64).startswith(f"{_BATCH_LINK_MARK}{digest} ")
        except OSError:
            return False


def _site_pairs(site: Path) -> list[tuple[str, str]]:
    import json

    from evalpipeline.validate.batch import BATCH_MANIFEST

    try:
        return [tuple(entry["key"]) for entry in json.loads((site / BATCH_MANIFEST).read_text())]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # not a batch site of ours: none links it


def _content_key(samples: pd.DataFrame, quarantine: pd.DataFrame | None) -> tuple:
    """What a validation report depends on: the tables' columns, dtypes, index and values."""
    import hashlib

    key = []
    for frame in (samples, quarantine):
        if frame is None:
            key.append(None)
            continue
        digest = hashlib.sha256(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes()).hexdigest()
        key.append((tuple(frame.columns), tuple(map(repr, frame.dtypes)), len(frame), digest))
    return tuple(key)


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
    lake: Lake,
    model: str,
    suite: str,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    mass: float = 0.95,
    concentration_prior: tuple[float, float] = CONCENTRATION_PRIOR,
) -> tuple[pd.DataFrame, Path]:
    """Compute and store the design-aware posteriors of one partition."""
    table = accuracy_posteriors(
        read_samples(lake, model, suite), prior=prior, mass=mass, concentration_prior=concentration_prior
    )
    path = lake.table_path("accuracy_posteriors", "posteriors.parquet", model, suite)
    write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), path)
    return table, path


def leaderboard_path(lake: Lake, suite: str) -> Path:
    return lake.root / "suite_leaderboard" / f"suite={to_partition_key(suite)}" / "leaderboard.parquet"


def rejected_note(lake: Lake, *, model: str | None = None, suite: str | None = None) -> str:
    """For a 'no data' error: the sample tables of this model or suite that validation rejected."""
    rejected = [
        f"{m} x {s} ({', '.join(lake.failed_validation(m, s))})"
        for m, s, _path in lake.sample_tables(model=model, suite=suite, include_failed=True)
        if lake.failed_validation(m, s)
    ]
    return f"; left out, failed validation: {'; '.join(rejected)}" if rejected else ""


def write_suite_leaderboard(lake: Lake, suite: str) -> tuple[pd.DataFrame, Path]:
    """Rank every model that has posteriors on ``suite``; skip combinations never evaluated."""
    suite_key = to_partition_key(suite)
    files = sorted(lake.root.glob(f"accuracy_posteriors/model=*/suite={suite_key}/posteriors.parquet"))
    # posteriors of a sample table that failed validation since (stale, and of rejected data) are left out
    files = [
        f for f in files if not lake.failed_validation(from_partition_key(f.parent.parent.name.split("=", 1)[1]), suite)
    ]
    if not files:
        raise NoDataError(
            f"no accuracy posteriors for suite {suite!r} under {lake.root / 'accuracy_posteriors'}"
            + rejected_note(lake, suite=suite)
        )
    frames = []
    for file in files:
        model_key = file.parent.parent.name.split("=", 1)[1]
        frames.append(lake.read_files([file], model=from_partition_key(model_key)))
    board = suite_leaderboard(pd.concat(frames, ignore_index=True))
    path = leaderboard_path(lake, suite)
    write_parquet_atomic(pa.Table.from_pandas(board, preserve_index=False), path)
    return board, path
