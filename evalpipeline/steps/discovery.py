"""What a refresh has to do: which model x suite partitions have new or changed sources.

Shared by the landing sensor, the nightly schedule and ``evalpipeline run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evalpipeline.config import LAKE_ENV, LANDING_ENV, landing_overlaps_lake
from evalpipeline.ingest import (
    FileError,
    IngestOptions,
    StagedRecords,
    already_ingested,
    clear_file_errors,
    find_log_files,
    record_file_error,
    scan_sources,
)
from evalpipeline.ingest.tables import UNKNOWN
from evalpipeline.lake import Lake


@dataclass
class Discovery:
    """The landing folder, and the lake's partitions, as a refresh sees them."""

    files: int = 0
    #: every (model, suite) some readable source names, and those only the lake holds (``lake_only``)
    partitions: set[tuple[str, str]] = field(default_factory=set)
    #: partitions whose logs left the landing folder (or that were ingested from elsewhere): the lake keeps
    #: their rows, so they stay partitions to keep fresh (a prior edit must reach them too)
    lake_only: set[tuple[str, str]] = field(default_factory=set)
    #: partitions a changed source held and names no more, with no other source: its ingest retires them
    retiring: set[tuple[str, str]] = field(default_factory=set)
    #: the (model, suite) pairs with at least one source whose exact bytes the lake does not hold yet
    changed: set[tuple[str, str]] = field(default_factory=set)
    #: content hashes of the changed sources per pair (a run key that is the same for the same input)
    changed_sources: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    unreadable: list[FileError] = field(default_factory=list)

    @property
    def models(self) -> set[str]:
        return {m for m, _ in self.partitions}

    @property
    def suites(self) -> set[str]:
        return {s for _, s in self.partitions}


def ingested_partitions(lake: Lake) -> list[tuple[str, str]]:
    """The (model, suite) pairs the lake holds ingest records for, without the pseudo-partition in which
    earlier versions quarantined rows that named no model or suite (``ingest.tables.UNKNOWN``; such
    rows are now kept under ``unplaced/``): it is no partition to fit, refresh or show in the UI."""
    return [pair for pair in lake.partitions("ingested") if UNKNOWN not in pair]


def discover(
    lake: Lake, landing: Path, options: IngestOptions | None = None, *, record_errors: bool = True
) -> Discovery:
    """Scan ``landing`` (headers only) and compare each source with the lake's ingest records.

    Unreadable files are recorded under ``file_errors/`` (so that they are
    accounted for) unless ``record_errors`` is False; so is the end of that: a file read
    again whose rows the lake already holds (its bytes restored) is not ingested again,
    and loses its record here.
    """
    landing = Path(landing)
    overlap = landing_overlaps_lake(landing, lake.root)
    if overlap:  # the sensor's and the schedule's ticks fail with it, as `evalpipeline run` refuses it
        raise ValueError(f"{overlap}; set {LANDING_ENV} (or {LAKE_ENV}) so that neither holds the other")
    files = find_log_files(landing) if landing.exists() else []
    options = options or IngestOptions()
    found, unreadable = scan_sources(files, options)
    if record_errors:
        for error in unreadable:
            record_file_error(lake, error)
    discovery = Discovery(files=len(files), unreadable=unreadable)
    staged = None  # the lake's ingest records, listed once on the first changed source
    for source, parts in found:
        pairs = {(p.model, p.suite) for p in parts}
        discovery.partitions |= pairs
        if not already_ingested(lake, source, parts, options):
            # a partition the source held before and names no more loses its rows, or is retired
            staged = staged or StagedRecords(lake)
            held = {
                pair: others
                for pair, others in staged.partitions_of(source.path).items()
                if pair not in pairs and UNKNOWN not in pair
            }  # an old lake's pseudo-partition: never run
            discovery.retiring |= {pair for pair, others in held.items() if not others}
            for pair in pairs | {pair for pair, others in held.items() if others}:
                discovery.changed.add(pair)
                discovery.changed_sources.setdefault(pair, []).append(source.sha256)
        elif record_errors:
            clear_file_errors(lake, source.path)
    discovery.lake_only = set(ingested_partitions(lake)) - discovery.partitions - discovery.retiring
    discovery.partitions |= discovery.lake_only
    for hashes in discovery.changed_sources.values():
        hashes.sort()
    return discovery
