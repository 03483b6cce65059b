"""What every log-format reader shares: options, errors, the chunks it yields.

A reader turns one source file into :class:`Chunk` s: canonical rows of one
model x suite (without the ``model`` / ``suite`` columns, which become the
partition) plus a ``reason`` column, null for rows to ingest. A large file
may yield several chunks for the same partition: the orchestrator appends
them to one staged Parquet file, so no reader has to hold a whole file.

Provenance columns (``log_path``, ``log_sha256``, ``log_format``) name the
source file whatever its format.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

import numpy as np
import pandas as pd

from evalpipeline.ingest.scores import ScoreNormalisation
from evalpipeline.lake.keys import PartitionKeyError, to_partition_key
from evalpipeline.schema import COVARIATE_PREFIX

#: Raised when the readers give other rows or reasons for the same bytes and options (a fix), so that
#: every source is read again once: a staged record is otherwise kept while its source's bytes and the
#: options are unchanged (see ``ingest.already_ingested``). 2: rows that no partition can hold go to
#: ``unplaced/`` (no "(unknown)" pseudo-partition), table duplicates name where the first copy was read,
#: and a ``.json`` log is read to its end. 3: a table row of a second scorer for a sample already read is a
#: duplicate (the first is kept); JSONL columns come from every line; CSV reasons name the record's real line;
#: model and suite cells are stripped; huge numbers are row reasons. 4: a table's whole-number ids and names
#: stay whole where a row lacks one (item 7 was "7.0"); a list, object or boolean is no item, model or suite
#: name; created_at "now" or "today" is no time. 5: rows carry the answer and the target (true label).
READERS_VERSION = 5

#: Canonical columns a declared mapping may fill, besides ``cov_<name>`` covariates.
MAPPABLE_COLUMNS = (
    "model",
    "suite",
    "item_id",
    "score",
    "epoch",
    "domain",
    "subdomain",
    "answer",
    "target",
    "scorer",
    "cluster",
    "error",
    "limit",
    "run_id",
    "created_at",
)

#: Where the Inspect reader finds domain/subdomain/cluster in sample metadata by default. ``answer`` and
#: ``target`` come from the scorer's answer and the sample's target unless a metadata key is mapped to them.
DEFAULT_METADATA_MAP: Mapping[str, str] = {"domain": "domain", "subdomain": "subdomain", "cluster": "cluster"}
#: Canonical columns a ``metadata_map`` may fill, besides ``cov_<name>`` covariates.
METADATA_COLUMNS = ("domain", "subdomain", "cluster", "answer", "target")
#: Longest answer or target kept, in characters: labels are short, and a long generation would swell the lake.
MAX_LABEL_CHARS = 1024


class SourceReadError(Exception):
    """A source file that cannot be ingested at all; the message names the file."""

    def __init__(self, path: Path | str, message: str):
        self.path = str(path)
        self.message = message
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class Source:
    """One input file: where it is, what its bytes hash to, which format it is read as."""

    path: str
    sha256: str
    format: str


@dataclass(frozen=True)
class IngestOptions:
    """How sources are read.

    ``column_map``: canonical column -> source column, for table formats
    (``long``) and lm-eval metric choice (``score`` -> metric name);
    ``cov_<name>`` keys declare covariates.
    ``metadata_map``: canonical column (:data:`METADATA_COLUMNS`) or
    ``cov_<name>`` -> Inspect sample metadata key; a mapped ``answer`` or
    ``target`` replaces the scorer's answer or the sample's target.
    ``suite`` / ``model``: fixed values where the source has no column for
    them (``wide`` tables: suite defaults to the file name's stem).
    ``chunk_rows``: rows per chunk for streaming readers.
    """

    normalisation: ScoreNormalisation = field(default_factory=ScoreNormalisation)
    accept_incomplete_logs: bool = False
    format: str = "auto"
    column_map: Mapping[str, str] = field(default_factory=dict)
    metadata_map: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_METADATA_MAP))
    suite: str | None = None
    model: str | None = None
    chunk_rows: int = 50_000

    def describe(self) -> dict:
        """What decides the rows a source gives (``chunk_rows`` only sets how they are streamed).

        Staged records carry its :meth:`fingerprint`, so a source read under other options is
        read again, and the ``eval_samples`` code version hashes it, so the UI marks the sample
        tables stale when the ``[ingest]`` configuration changes.
        """
        n = self.normalisation
        return {
            "value_map": dict(sorted((str(k), float(v)) for k, v in n.value_map.items())),
            "scorer": n.scorer,
            "score_key": n.score_key,
            "numeric_range": [float(x) for x in n.numeric_range],
            "accept_incomplete_logs": self.accept_incomplete_logs,
            "format": self.format,
            "column_map": dict(sorted(self.column_map.items())),
            "metadata_map": dict(sorted(self.metadata_map.items())),
            "suite": self.suite,
            "model": self.model,
        }

    def fingerprint(self) -> str:
        """A short hash of :meth:`describe` and :data:`READERS_VERSION`."""
        described = {**self.describe(), "readers_version": READERS_VERSION}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]

    def __post_init__(self):
        for key in self.column_map:
            if key not in MAPPABLE_COLUMNS and not key.startswith(COVARIATE_PREFIX):
                raise ValueError(
                    f"cannot map column {key!r}: mappable columns are {', '.join(MAPPABLE_COLUMNS)} "
                    f"and {COVARIATE_PREFIX}<name> covariates"
                )
        for key in self.metadata_map:
            if key not in METADATA_COLUMNS and not key.startswith(COVARIATE_PREFIX):
                raise ValueError(
                    f"metadata_map key {key!r}: use {', '.join(METADATA_COLUMNS)} or {COVARIATE_PREFIX}<name>"
                )


def label_text(value: Any) -> str | None:
    """An answer or target as the ``answer`` / ``target`` columns hold it: text as it is, a list of one
    as its element, a longer list as a JSON list, other values as text; null for a missing value or an
    empty list. Cut at :data:`MAX_LABEL_CHARS` (with ``...``)."""
    if isinstance(value, np.ndarray):  # a Parquet list cell
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return label_text(value[0])
        text = json.dumps(list(value), ensure_ascii=False, default=str) if value else None
    elif value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        text = None
    elif isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    else:
        text = str(value)
    if text is not None and len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS] + "..."
    return text


def canonical_name(name: str | None) -> str | None:
    """A model or suite name as the lake keys it: without surrounding spaces, in Unicode NFC. Two logs
    naming ``café`` in its two Unicode spellings, or one with a trailing space, made two partitions
    that every listing shows alike ("X is confidently better than X")."""
    return unicodedata.normalize("NFC", name).strip() if isinstance(name, str) else name


@dataclass(frozen=True)
class SourcePartition:
    """A (model, suite) a source holds rows for, and the run id naming them in the lake."""

    model: str
    suite: str
    source_id: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", canonical_name(self.model))
        object.__setattr__(self, "suite", canonical_name(self.suite))


@dataclass
class Chunk:
    #: None when the rows name no model (or suite): they are kept as unplaced rows (see
    #: :func:`placement_problem`), never in a partition of a made-up name
    model: str | None
    suite: str | None
    source_id: str
    rows: pd.DataFrame

    def __post_init__(self) -> None:
        self.model, self.suite = canonical_name(self.model), canonical_name(self.suite)


def placement_problem(model: str | None, suite: str | None) -> str | None:
    """Why rows of ``model`` x ``suite`` cannot be placed in a partition (None: they can): a blank
    name, or one too long for a partition key (:func:`evalpipeline.lake.keys.to_partition_key`)."""
    for kind, name in (("model", model), ("suite", suite)):
        if name is None or not name.strip():  # a name of spaces shows as none in every listing
            return f"no {kind} value"
        try:
            to_partition_key(name)
        except PartitionKeyError as exc:
            return f"{kind} {exc}"
    return None


class Reader(Protocol):
    """A log format: cheap discovery of partitions, and streaming reading of rows."""

    name: str

    def partitions(self, source: Source, options: IngestOptions) -> list[SourcePartition]: ...

    def read(self, source: Source, options: IngestOptions) -> Iterator[Chunk]: ...


#: The largest epoch the canonical table's int32 column holds.
MAX_EPOCH = 2**31 - 1


def sample_label(item_id: str, epoch: int) -> str:
    """How quarantine reasons name a sample."""
    return f"sample {item_id!r} epoch {epoch}"


def short_error(exc: BaseException, limit: int = 300) -> str:
    """The message of ``exc`` and of its innermost cause (libraries wrap parse errors)."""
    root = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__
    text = " ".join(str(exc).split())
    if root is not exc:
        text += f" <- {type(root).__name__}: {' '.join(str(root).split())}"
    return text if len(text) <= limit else text[:limit] + "..."
