"""Inspect (``inspect_ai``) logs, ``.eval`` and ``.json``, into canonical rows, streamed.

:meth:`InspectReader.read` yields a :class:`~evalpipeline.ingest.base.Chunk`
every ``IngestOptions.chunk_rows`` samples and never holds every sample:
peak memory does not grow with the size of the log (``benchmarks/`` measures
it). inspect_ai stays the authority on the format: every sample summary is
validated with inspect_ai's own ``EvalSampleSummary`` model, and the header
with its ``EvalLog`` model. What is read, and how:

``.eval`` (a zip archive)
    The central directory is scanned entry by entry (never held: stdlib
    ``zipfile`` and inspect_ai's reader build an object per member, hundreds
    of MB for a 200k-sample log). ``header.json`` is validated with
    inspect_ai's ``EvalLog`` model as its ``_read_header`` does, except for
    ``eval.dataset.sample_ids`` (every sample id: unused, and the one part
    that grows with the log), which is parsed id by id and dropped.
    ``summaries.json``, the consolidated list inspect_ai's
    ``read_eval_log_sample_summaries`` reads, is decompressed in bounded
    pieces and parsed one list item at a time (:class:`_JsonStream`); each
    item is validated as an ``EvalSampleSummary`` (see :func:`_summary`),
    turned into a row and dropped. The ``samples/*.json`` members (messages,
    events) are never read, only counted by name: a ``summaries.json`` that
    lists fewer samples than there are ``samples/*.json`` files (cut short,
    or a later duplicate member hiding the full one) is a file-level error,
    since the unlisted samples would otherwise be lost without a word.

    Fallback: a log without ``summaries.json`` (unfinished, or written by
    something else) is read by inspect_ai's own ``read_eval_log_sample_summaries``,
    which then reads the ``_journal/summaries/`` files and resolves re-run
    samples its own way. That path holds every summary; it is only taken for
    such odd logs. A log without ``header.json`` is likewise left to
    inspect_ai's header reader (its status is ``started``: not ingested yet).

``.json`` (one JSON document)
    The header is read by inspect_ai (``read_eval_log(header_only=True)``,
    which itself stops at ``samples``). The ``samples`` list is then parsed
    one sample at a time; only ``id``, ``epoch``, ``target``, ``metadata``,
    ``scores``, ``error`` and ``limit`` are kept, validated as the ``EvalSampleSummary``
    that inspect_ai's ``EvalSample.summary()`` would give (metadata thinned
    the same way), and the full sample is dropped. The rest of the document
    (``reductions``) is skipped value by value but read to its end: a log cut
    anywhere, even after its last sample (a copy still running), is not
    read (file-level error). Logs of an older schema
    version than inspect_ai's (which it migrates while reading) fall back to
    inspect_ai's own reader.

Items are parsed with the standard library's C JSON scanner
(``json.JSONDecoder.raw_decode``) over a bounded text buffer, not with ijson:
it is about twice as fast here, and it reads ``NaN`` / ``Infinity``, which
inspect_ai writes for non-finite scores and ijson's C backend rejects.

Zip safety (a hostile ``.eval``): nothing is ever extracted, and members are
only read by their exact names, so a member named ``../../x`` or ``/etc/x`` is
never written anywhere nor read (the log ingests as if it were not there). A
member declaring more than
:data:`MAX_MEMBER_BYTES` (``header.json``: :data:`MAX_HEADER_BYTES`)
uncompressed is refused before it is read; a member is decompressed in pieces
of at most :data:`READ_SIZE` bytes, and one that inflates past its declared
size (a zip bomb lying about its size) or fails its CRC is an error. Those
errors name the file and the member.

Decisions (configurable where marked):

* Logs whose status is ``error`` or ``cancelled`` did not finish: their
  samples are kept but quarantined with that reason, unless
  ``accept_incomplete_logs`` (then completed samples are ingested).
  A log still ``started`` is not ingested yet (file-level error).
* Errored samples are ingested and flagged (``error`` set, ``score`` null).
* A sample without a score from the chosen scorer, or with a value the
  :class:`~evalpipeline.ingest.scores.ScoreNormalisation` does not know,
  is quarantined with the reason.
* Duplicate ``(item_id, epoch)`` within one log, across chunks too: the
  first is kept, the others are quarantined naming the first one's sample
  index. This holds for ``.eval`` summaries too, which inspect_ai's own
  reader would collapse silently (keeping the last; old inspect_ai versions
  wrote a requeued sample's summary twice): doing so while streaming would
  need a second pass, and here nothing is dropped unaccounted.
* Numeric covariates (``cov_<name>`` from metadata ints and floats) are
  float64, so that every chunk of a log has the same column type.
* ``target`` is the sample's target (null for Inspect's default, the empty
  target; a list of several as a JSON list) and ``answer`` the chosen
  scorer's ``Score.answer`` (null when it has none), both through
  :func:`~evalpipeline.ingest.base.label_text`; a ``metadata_map`` entry for
  either replaces it with that metadata value.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import io
import json
import re
import struct
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping
from zipfile import BadZipFile

import numpy as np
import pandas as pd

from evalpipeline.ingest.base import (
    MAX_EPOCH,
    COVARIATE_PREFIX,
    Chunk,
    IngestOptions,
    Source,
    SourcePartition,
    SourceReadError,
    label_text,
    sample_label,
    short_error,
)
from evalpipeline.ingest.scores import ScoreNormalisation, binary_reading
from evalpipeline.lake.keys import PartitionKeyError, to_partition_key
from evalpipeline.lake import sha256_file

INCOMPLETE_STATUSES = ("error", "cancelled")

#: Kept for callers of the foundation API: an unreadable Inspect log.
LogReadError = SourceReadError

#: Largest uncompressed size a streamed ``.eval`` member (``summaries.json``) may declare.
#: Streaming keeps memory flat whatever the size; this bounds the time a hostile
#: archive can cost. inspect_ai writes well under 1 KiB per sample summary, so this
#: is tens of millions of samples.
MAX_MEMBER_BYTES = 16 * 1024**3
#: Largest uncompressed size ``header.json`` may declare (it lists every sample id,
#: ~20 bytes a sample, which are skipped as they are parsed).
MAX_HEADER_BYTES = 512 * 1024**2
#: Largest single JSON value (one sample of a ``.json`` log, one summary) held while parsing.
MAX_VALUE_CHARS = 1024**3
#: Bytes read (and, for a zip member, decompressed) at a time.
READ_SIZE = 1024**2

HEADER_JSON = "header.json"
SUMMARIES_JSON = "summaries.json"


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
    """Read only the header of an Inspect log (cheap: no samples are loaded).

    ``.eval``: ``header.json`` through the bounded zip reader (inspect_ai's
    header-only read also parses every central-directory entry and validates
    ``reductions.json``: seconds and hundreds of MB for a 200k-sample log);
    ``.json``: inspect_ai's streaming header reader.
    """
    with _open_log(Path(path), sha256) as (header, _):
        return header


@contextlib.contextmanager
def _open_log(path: Path, sha256: str | None) -> Iterator[tuple[LogHeader, Callable[[], Iterator]]]:
    """The log's header, and a function that streams its sample summaries (from the start, each call)."""
    fmt = log_format_of(path)
    if not path.is_file():
        raise LogReadError(path, "file not found")
    digest = sha256 or sha256_file(path)
    if fmt == "eval":
        with _EvalArchive(path) as archive:
            yield archive.header(digest), archive.summaries
    else:
        yield _json_header(path, digest), lambda: _json_log_summaries(path)


def _json_header(path: Path, digest: str) -> LogHeader:
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path), header_only=True, format="json")
    except Exception as exc:  # inspect_ai raises many types for bad files; name the file
        raise LogReadError(path, f"cannot read Inspect log header ({type(exc).__name__}: {short_error(exc)})") from exc
    return _header_of(path, digest, "json", log)


def _header_of(path: Path, digest: str, fmt: str, log) -> LogHeader:
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
        """Yield the log's rows, ``options.chunk_rows`` samples at a time."""
        with _open_log(Path(source.path), source.sha256) as (header, summaries):
            yield from _chunks(header, summaries, options)


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
    The frame holds the whole log: ingest streams with :class:`InspectReader`.
    """
    defaults = IngestOptions()
    options = IngestOptions(
        normalisation=normalisation or defaults.normalisation,
        accept_incomplete_logs=accept_incomplete_logs,
        metadata_map=dict(defaults.metadata_map if metadata_map is None else metadata_map),
    )
    with _open_log(Path(path), sha256) as (header, summaries):
        frames = [chunk.rows for chunk in _chunks(header, summaries, options)]
    return header, pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


# -- rows, chunk by chunk ------------------------------------------------------------


def _chunks(header: LogHeader, open_summaries: Callable[[], Iterable], options: IngestOptions) -> Iterator[Chunk]:
    """Canonical rows of the summaries ``open_summaries()`` yields, ``options.chunk_rows`` at a time."""
    path = header.path
    if header.status == "started":
        raise LogReadError(path, "log status is 'started': the eval is still running; it is ingested once it ends")
    normalisation = options.normalisation
    metadata_map = dict(options.metadata_map)
    scorer = normalisation.scorer
    if scorer is None and header.scorers:
        scorer = header.scorers[0]
    if scorer is None:  # headers of hand-made logs may omit the scorers: a first pass finds one
        with contextlib.closing(_guarded(open_summaries(), path)) as summaries:
            scorer = _first_scorer(header, summaries)
    log_reason = None
    if header.status in INCOMPLETE_STATUSES and not options.accept_incomplete_logs:
        log_reason = f"log status is {header.status!r}: the eval did not finish (set accept_incomplete_logs to ingest)"
    source_id = f"eval-{to_partition_key(header.eval_id)}"
    chunk_rows = max(1, int(options.chunk_rows))
    seen = _SeenKeys()
    columns: dict[str, list] = {}  # the chunk's rows, column by column (a dict a row would take twice the memory)
    index = 0
    for summary in _guarded(open_summaries(), path):
        row = _sample_row(index, summary, header, scorer, normalisation, metadata_map, log_reason)
        if not columns:
            columns = {name: [] for name in row}
        for name, value in row.items():  # every row has the same keys, in the same order
            columns[name].append(value)
        index += 1
        if len(columns["item_id"]) == chunk_rows:
            yield Chunk(header.model, header.suite, source_id, _frame(columns, seen, metadata_map))
            columns = {}
    if columns:
        yield Chunk(header.model, header.suite, source_id, _frame(columns, seen, metadata_map))
    elif index == 0:
        raise LogReadError(path, f"log has no samples (status {header.status!r})")


def _guarded(summaries: Iterable, path: str) -> Iterator:
    """``summaries``, with any failure while reading them named as a file-level error, with where in the
    log it happened (inspect_ai validates every summary; one bad one ends its reader)."""
    iterator = iter(summaries)
    read, last = 0, None
    while True:
        try:
            summary = next(iterator)
        except StopIteration:
            return
        except SourceReadError:
            raise
        except Exception as exc:  # parse and validation errors of many types: name the file and the sample
            after = f", after sample {last!r}" if last is not None else ""
            raise LogReadError(
                path, f"cannot read samples: summary {read + 1}{after} ({type(exc).__name__}: {short_error(exc)})"
            ) from exc
        read, last = read + 1, getattr(summary, "id", None)
        yield summary


def _first_scorer(header: LogHeader, summaries: Iterator) -> str:
    any_sample = False
    for sample in summaries:
        any_sample = True
        if sample.scores:
            return next(iter(sample.scores))
    if not any_sample:
        raise LogReadError(header.path, f"log has no samples (status {header.status!r})")
    raise LogReadError(header.path, "no scorer declared in the header and no sample has a score")


def _frame(columns: dict[str, list], seen: "_SeenKeys", metadata_map: Mapping[str, str]) -> pd.DataFrame:
    """One chunk's rows as a frame, duplicates (against every earlier chunk too) quarantined."""
    item_ids, epochs, indices = columns["item_id"], columns["epoch"], columns["sample_index"]
    first = seen.first_indices(item_ids, epochs, indices[0])
    for i in (first != np.asarray(indices)).nonzero()[0].tolist():
        columns["reason"][i] = (
            f"duplicate (item_id {item_ids[i]!r}, epoch {epochs[i]}) in the log; "
            f"first seen at sample index {int(first[i])}"
        )
    frame = pd.DataFrame(columns)
    for column in metadata_map:
        if column.startswith(COVARIATE_PREFIX) and frame[column].isna().all():
            frame[column] = frame[column].astype("float64")  # same type as a numeric covariate
    return frame


class _SeenKeys:
    """The first sample index of every ``(item_id, epoch)`` seen so far, in 24 bytes a key.

    A key is kept as two independent 64-bit SipHashes of ``"<epoch>\\0<item_id>"``
    (pandas' ``hash_array`` with two hash keys), sorted, next to its first
    index: a dict of 200k string keys would take ~30 MB, these arrays 5 MB.
    Two different keys are taken for one only if both hashes collide (odds
    ~2^-128 a pair).
    """

    _HASH_KEYS = ("evalpipeline-k1!", "evalpipeline-k2!")  # 16 characters each, as pandas requires

    def __init__(self):
        self.h1 = np.empty(0, dtype=np.uint64)
        self.h2 = np.empty(0, dtype=np.uint64)
        self.first = np.empty(0, dtype=np.int64)

    def first_indices(self, item_ids: list[str], epochs: list[int], start: int) -> np.ndarray:
        """For rows ``start, start + 1, ...``: the index of the first row with the same key (or their own)."""
        keys = np.array([f"{epoch}\0{item}" for item, epoch in zip(item_ids, epochs)], dtype=object)
        h1, h2 = (pd.util.hash_array(keys, hash_key=k) for k in self._HASH_KEYS)
        indices = np.arange(start, start + len(keys), dtype=np.int64)
        order = np.lexsort((h2, h1))  # stable: equal keys stay in row order, the first one first
        s1, s2 = h1[order], h2[order]
        opens = np.ones(len(keys), dtype=bool)
        opens[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
        u1, u2, u_first = s1[opens], s2[opens], indices[order[opens]]  # this chunk's keys, sorted
        left = np.searchsorted(self.h1, u1, side="left")
        right = np.searchsorted(self.h1, u1, side="right")
        for i in np.flatnonzero(right > left):  # first hash seen before (rare): is the second too?
            for j in range(left[i], right[i]):
                if self.h2[j] == u2[i]:
                    u_first[i] = self.first[j]
                    break
        result = np.empty(len(keys), dtype=np.int64)
        result[order] = u_first[np.cumsum(opens) - 1]
        new = u_first >= start  # keys not seen in an earlier chunk
        if new.any():
            at = np.searchsorted(self.h1, u1[new], side="right")
            self.h1 = np.insert(self.h1, at, u1[new])
            self.h2 = np.insert(self.h2, at, u2[new])
            self.first = np.insert(self.first, at, u_first[new])
        return result


#: ``json.dumps(value, sort_keys=True, default=str)``, without building an encoder per call
_SORTED_JSON = json.JSONEncoder(sort_keys=True, default=str)


def _sample_row(index, sample, header: LogHeader, scorer, normalisation, metadata_map, log_reason) -> dict:
    item_id = str(sample.id)
    epoch = int(sample.epoch)
    if not 1 <= epoch <= MAX_EPOCH:  # a row of its own in quarantine, not the whole log lost at the table's cast
        log_reason = log_reason or f"sample {item_id!r}: epoch {epoch} is not a whole number from 1 to {MAX_EPOCH}"
        epoch = 0
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
        "answer": label_text(scores[scorer].answer) if scorer in scores else None,
        "target": label_text(sample.target) or None,  # "" is Inspect's default: no target
        "cluster": None,
        "error": _text_or_none(sample.error),
        "limit": _text_or_none(sample.limit),
        "metadata_json": _SORTED_JSON.encode(metadata) if metadata else None,
        "scores_json": _SORTED_JSON.encode({k: v.value for k, v in scores.items()}) if scores else None,
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
        if column in ("answer", "target"):
            row[column] = label_text(value)
        elif not column.startswith(COVARIATE_PREFIX):
            row[column] = _text_or_none(value)
        elif isinstance(value, (dict, list)):
            row[column] = _text_or_none(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            row[column] = float(value)  # one type in every chunk (ints would be int64 in one, float64 in the next)
        else:
            row[column] = value
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


# -- summaries, one at a time, validated by inspect_ai's models ---------------------------


@functools.cache
def _inspect_api():
    from inspect_ai._util.constants import get_deserializing_context
    from inspect_ai.log import EvalError, EvalSampleLimit, EvalSampleSummary
    from inspect_ai.log._util import thin_metadata, thin_text

    return EvalSampleSummary, get_deserializing_context, thin_metadata, thin_text, EvalError, EvalSampleLimit


def _summary(item: Any):
    """One summary, validated by inspect_ai's ``EvalSampleSummary`` for the fields rows use.

    As inspect_ai's ``_parse_summaries`` (a fresh deserialising context per
    item), restricted to id, epoch, target, metadata, score values and
    answers, error and limit: validating the fields never read (input
    messages, model usage, times, score explanations and metadata) costs most
    of the time and changes no row. Metadata and score answers are thinned by
    inspect_ai's own ``thin_metadata`` / ``thin_text``, as the model's
    validator does (short strings memoised: domain names and answer letters
    repeat on every sample, and ``textwrap.shorten`` is slow).
    """
    summary_model, context, _, _, _, _ = _inspect_api()
    if not isinstance(item, dict):
        raise ValueError(f"a sample summary is a JSON {type(item).__name__}, not an object")
    metadata = item.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError(f"sample metadata is a JSON {type(metadata).__name__}, not an object")
    scores = item.get("scores")
    answers = {}
    if isinstance(scores, dict):
        answers = {
            name: score["answer"]
            for name, score in scores.items()
            if isinstance(score, dict) and score.get("answer") is not None
        }
        scores = {
            name: {"value": score["value"]} if isinstance(score, dict) and "value" in score else score
            for name, score in scores.items()
        }
    summary = summary_model.model_validate(
        {
            "id": item.get("id"),
            "epoch": item.get("epoch"),
            "input": "",
            "target": item.get("target", ""),
            "scores": scores,
            "error": item.get("error"),
            "limit": item.get("limit"),
        },
        context=context(),
    )
    summary.metadata = _thin_metadata(metadata)
    for name, answer in answers.items():  # Score.answer is text or null, as inspect_ai's model has it
        if not isinstance(answer, str):
            raise ValueError(f"the answer of score {name!r} is a JSON {type(answer).__name__}, not a string")
        summary.scores[name].answer = _thin_short_text(answer) if len(answer) <= 256 else _inspect_api()[3](answer)
    return summary


def _thin_metadata(metadata: dict) -> dict:
    """inspect_ai's ``thin_metadata``, value by value (which is how it works), short strings memoised."""
    if not metadata:
        return {}
    _, _, thin_metadata, _, _, _ = _inspect_api()
    thinned = {}
    for key, value in metadata.items():
        if type(value) is str and len(value) <= 256:
            thinned[key] = _thin_short_text(value)
        else:
            thinned.update(thin_metadata({key: value}))
    return thinned


@functools.lru_cache(maxsize=4096)
def _thin_short_text(text: str) -> str:
    return _inspect_api()[3](text)


def _summary_of_sample(sample: Any, legacy_scorer: str):
    """The summary inspect_ai's ``EvalSample.summary()`` gives, for the fields rows use.

    ``sample`` is one parsed item of a ``.json`` log's ``samples``. Its error
    and limit are validated as inspect_ai's ``EvalError`` / ``EvalSampleLimit``
    and summarised as ``summary()`` does (message; limit type). A legacy
    ``score`` field becomes the scores of ``legacy_scorer``, as inspect_ai's
    ``EvalSample`` / ``EvalLog`` migration does.
    """
    _, _, _, _, eval_error, sample_limit = _inspect_api()
    if not isinstance(sample, dict):
        raise ValueError(f"a sample is a JSON {type(sample).__name__}, not an object")
    scores = sample.get("scores")
    if "score" in sample and scores is None:
        scores = {legacy_scorer: sample["score"]}
    error, limit = sample.get("error"), sample.get("limit")
    return _summary(
        {
            "id": sample.get("id"),
            "epoch": sample.get("epoch"),
            "target": sample.get("target", ""),
            "metadata": sample.get("metadata", {}),
            "scores": scores,
            "error": None if error is None else eval_error.model_validate(error).message,
            "limit": None if limit is None else f"{sample_limit.model_validate(limit).type}",
        }
    )


def _json_log_summaries(path: Path) -> Iterator:
    """Summaries of the samples of a ``.json`` log, one sample parsed at a time."""
    from inspect_ai._util.constants import LOG_SCHEMA_VERSION
    from inspect_ai.log._log import SCORER_PLACEHOLDER

    with open(path, "rb") as handle:
        stream = _JsonStream(handle, what="the log")
        version: Any = None
        legacy_scorer = SCORER_PLACEHOLDER
        for key, value in stream.object_items():
            if key == "version":
                version = stream.value()
                if isinstance(version, int) and version < LOG_SCHEMA_VERSION:
                    # an older schema, which inspect_ai migrates as it reads: its reader
                    # holds the whole log, but such logs predate large-scale use
                    yield from _inspect_summaries(path, "json")
                    return
            elif key == "results":
                results = stream.value_without(("sample_reductions",))  # per-item, in old logs
                scores = (results or {}).get("scores") if isinstance(results, dict) else None
                if scores and isinstance(scores[0], dict) and scores[0].get("name"):
                    legacy_scorer = scores[0]["name"]
            elif key == "samples":
                if stream.peek() != "[":
                    if stream.value() is None:  # "samples": null
                        return
                    raise ValueError("'samples' is not a list")
                for sample in stream.array_items():
                    yield _summary_of_sample(sample, legacy_scorer)
            else:
                stream.skip()  # eval (with every sample id), plan, stats, reductions, ...
        # What follows the samples (reductions) is not needed, but it is read to its end: a log cut
        # after its last sample (a copy still running) must not pass as complete.
        stream.expect_end()


def _inspect_summaries(path: Path, fmt: str) -> list:
    """inspect_ai's own summary reader: the whole list at once (the fallback for odd logs)."""
    from inspect_ai.log import read_eval_log_sample_summaries

    return read_eval_log_sample_summaries(str(path), format=fmt)


# -- JSON, one value at a time ----------------------------------------------------------------

_WHITESPACE = " \t\r\n"
_NON_WHITESPACE = re.compile(r"[^ \t\r\n]")
#: What may follow the part of a number parsed so far when the buffer ends: the number may go on.
_NUMBER_GOES_ON = re.compile(r"[0-9.eE+-]*")
_DECODER = json.JSONDecoder()  # the C scanner; reads NaN, Infinity and big integers like json.loads


class _JsonStream:
    """A JSON text read from a binary stream one value at a time, with a bounded buffer.

    ``value()`` parses the next value with ``json.JSONDecoder.raw_decode`` on
    the buffered text; when the value runs past the buffer, more text is read
    (doubling, so a large value costs a linear amount of parsing) and the
    value parsed again. Only the value being parsed and up to
    :data:`READ_SIZE` more bytes are held.
    """

    def __init__(self, binary: BinaryIO, what: str):
        self._binary = binary
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._what = what
        self.buf = ""
        self.pos = 0
        self.eof = False

    def _more(self, size: int | None = None) -> bool:
        if self.eof:
            return False
        data = self._binary.read(size or READ_SIZE)
        text = self._decoder.decode(data, final=not data)
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        if not data:
            self.eof = True
        return bool(data) or bool(text)

    def peek(self) -> str:
        """The next non-whitespace character ('' at the end)."""
        while True:
            buf, pos = self.buf, self.pos
            if pos < len(buf) and buf[pos] in _WHITESPACE:
                found = _NON_WHITESPACE.search(buf, pos)  # a C-speed skip: padding can be huge (a bomb)
                pos = found.start() if found else len(buf)
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self._more():
                return ""

    def _expect(self, chars: str) -> str:
        char = self.peek()
        if not char or char not in chars:
            seen = repr(char) if char else "the end of the data (premature EOF)"
            raise ValueError(f"expected {' or '.join(map(repr, chars))} in {self._what}, found {seen}")
        self.pos += 1
        return char

    def expect_end(self) -> None:
        """Only whitespace may follow the value just read."""
        char = self.peek()
        if char:
            raise ValueError(f"{self._what} goes on after its end: found {char!r}")

    def value(self) -> Any:
        """Parse the next value."""
        if not self.peek():
            raise ValueError(f"unexpected end of the data in {self._what} (premature EOF)")
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buf) - 10 or exc.msg.startswith("Unterminated string")
                if not cut or self.eof:
                    if self.eof and cut:
                        raise ValueError(f"{self._what} ends early (premature EOF): {exc}") from exc
                    raise
                self._grow(exc)
                continue
            if not self.eof and not isinstance(value, (dict, list, str)) and _NUMBER_GOES_ON.fullmatch(self.buf, end):
                # a number or literal may go on in the next piece: "1" of "1.5" cut after "1" or "1."
                self._grow(None)
                continue
            self.pos = end
            return value

    def _grow(self, exc) -> None:
        pending = len(self.buf) - self.pos
        if pending > MAX_VALUE_CHARS:
            raise ValueError(f"a single value in {self._what} is over {MAX_VALUE_CHARS} characters") from exc
        self._more(max(READ_SIZE, pending))

    def value_without(self, path: tuple[str, ...]) -> Any:
        """The next value, except the member at ``path`` (keys of nested objects), skipped item by item."""
        if not path or self.peek() != "{":
            return self.value()
        result = {}
        for key, _ in self.object_items():
            if key != path[0]:
                result[key] = self.value()
            elif len(path) > 1:
                result[key] = self.value_without(path[1:])
            else:
                self.skip()
        return result

    def skip(self) -> None:
        """Consume the next value without holding it: objects and arrays member by member."""
        char = self.peek()
        if char == "{":
            for _ in self.object_items():
                self.skip()
        elif char == "[":
            self._expect("[")
            if self.peek() == "]":
                self.pos += 1
                return
            while True:
                self.skip()
                if self._expect(",]") == "]":
                    return
        else:
            self.value()

    def object_items(self) -> Iterator[tuple[str, None]]:
        """The keys of an object; after each, the caller must consume its value (``value()`` or more)."""
        self._expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise ValueError(f"expected an object key in {self._what}, found {key!r}")
            self._expect(":")
            yield key, None
            if self._expect(",}") == "}":
                return

    def array_items(self) -> Iterator[Any]:
        """The items of an array, parsed one at a time."""
        self._expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self._expect(",]") == "]":
                return


# -- .eval archives, read member by member ------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    name: str
    method: int
    flags: int
    crc: int
    compress_size: int
    file_size: int
    header_offset: int


_SAMPLE_MEMBER = re.compile(r"samples/.+_epoch_[0-9]+\.json")


def _is_sample_member(name: str) -> bool:
    """A ``samples/<id>_epoch_<n>.json`` member, where inspect_ai keeps each whole sample (an id may hold
    a ``/``); a name with a ``..`` or empty segment is none (such names are never read: hostile)."""
    parts = name.split("/")
    return bool(_SAMPLE_MEMBER.fullmatch(name)) and ".." not in parts and "" not in parts


_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_STORED, _DEFLATED, _ZSTD = 0, 8, 93


class _EvalArchive:
    """An ``.eval`` zip: its central directory scanned once, entry by entry, keeping only what is read.

    Keeps the entries of ``header.json`` and ``summaries.json`` (the last
    entry of a name wins, as for every zip reader). Members are looked up by
    these exact names and never extracted, so a hostile name (``../x``,
    ``/etc/x``, ``samples/../summaries.json``) is never written anywhere and
    never read: it is ignored, like the ``samples/`` members.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.members: dict[str, _Member] = {}
        self.sample_entries = 0  # entries under samples/ in the central directory, repeated names included
        self._handle = open(self.path, "rb")
        try:
            self._scan()
        except SourceReadError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise LogReadError(
                path, f"cannot read Inspect log header ({type(exc).__name__}: {short_error(exc)})"
            ) from exc

    def __enter__(self) -> "_EvalArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._handle.close()

    def _scan(self) -> None:
        handle = self._handle
        size = handle.seek(0, io.SEEK_END)
        tail_size = min(size, _EOCD.size + 0xFFFF)
        handle.seek(size - tail_size)
        tail = handle.read(tail_size)
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or at + _EOCD.size > len(tail):
            # worded as inspect_ai's own zip reader says it
            raise ValueError("EOCD not found: not a zip archive, or a truncated one (no end of central directory)")
        eocd_pos = size - tail_size + at
        _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
        zip64 = 0
        if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
            if eocd_pos < _EOCD64_LOCATOR.size:
                raise BadZipFile("zip64 end of central directory locator missing")
            handle.seek(eocd_pos - _EOCD64_LOCATOR.size)
            sig, _, eocd64_pos, _ = _EOCD64_LOCATOR.unpack(handle.read(_EOCD64_LOCATOR.size))
            if sig != b"PK\x06\x07":
                raise BadZipFile("zip64 end of central directory locator missing")
            record_pos = eocd_pos - _EOCD64_LOCATOR.size - _EOCD64.size
            handle.seek(record_pos)
            record = handle.read(_EOCD64.size)
            if len(record) != _EOCD64.size or record[:4] != b"PK\x06\x06":
                raise BadZipFile("zip64 end of central directory record missing")
            _, _, _, _, _, _, _, count, cd_size, cd_offset = _EOCD64.unpack(record)
            zip64 = _EOCD64.size + _EOCD64_LOCATOR.size
        concat = eocd_pos - zip64 - cd_size - cd_offset  # bytes prepended to the archive, as zipfile allows
        if concat < 0:
            raise BadZipFile("central directory offset or size is out of range")
        self._directory = (cd_offset + concat, cd_size, count)
        for name, fields, extra in self._entries():
            if name.startswith("samples/"):  # the cheap test; sample_files() counts exactly, when needed
                self.sample_entries += 1
            if name not in (HEADER_JSON, SUMMARIES_JSON):
                continue
            flags, method, crc, compress_size, file_size = fields[5], fields[6], fields[9], fields[10], fields[11]
            header_offset = fields[18]
            if 0xFFFFFFFF in (compress_size, file_size, header_offset):
                file_size, compress_size, header_offset = _zip64_sizes(extra, file_size, compress_size, header_offset)
            self.members[name] = _Member(name, method, flags, crc, compress_size, file_size, header_offset + concat)

    def _entries(self) -> Iterator[tuple[str, tuple, bytes]]:
        """The central directory's entries, one at a time: name, fixed fields, extra field."""
        start, size, count = self._directory
        self._handle.seek(start)
        reader = io.BufferedReader(_Window(self._handle, start, size), READ_SIZE)
        for _ in range(count):
            fixed = reader.read(_CENTRAL.size)
            if len(fixed) != _CENTRAL.size or fixed[:4] != b"PK\x01\x02":
                raise BadZipFile("bad central directory entry (the archive is corrupt)")
            fields = _CENTRAL.unpack(fixed)
            flags, name_len, extra_len, comment_len = fields[5], fields[12], fields[13], fields[14]
            raw_name = reader.read(name_len)
            extra = reader.read(extra_len)
            reader.read(comment_len)
            yield raw_name.decode("utf-8" if flags & 0x800 else "cp437", "replace"), fields, extra

    def sample_files(self) -> int:
        """How many distinct ``samples/*.json`` members the archive holds (a sample logged again is
        appended under its name again: counted once)."""
        if not self.sample_entries:
            return 0
        return len({name for name, _fields, _extra in self._entries() if _is_sample_member(name)})

    def open(self, name: str, limit: int) -> "_MemberStream":
        return _MemberStream(self._handle, self.members[name], self.path, limit)

    def header(self, digest: str) -> LogHeader:
        """The header, from ``header.json`` validated as inspect_ai's ``_read_header`` does."""
        if HEADER_JSON not in self.members:
            # no consolidated header: a log still being written (or crashed); inspect_ai
            # rebuilds its header from the journal, with status 'started'
            return _inspect_eval_header(self.path, digest)
        from inspect_ai._util.constants import get_deserializing_context
        from inspect_ai.log import EvalLog

        try:
            with self.open(HEADER_JSON, MAX_HEADER_BYTES) as stream:
                # eval.dataset.sample_ids lists every sample id: the one part of the header
                # that grows with the log, and unused here; it is parsed id by id and dropped
                text = _JsonStream(io.BufferedReader(stream, READ_SIZE), what=f"zip member {HEADER_JSON!r}")
                data = text.value_without(("eval", "dataset", "sample_ids"))
            log = EvalLog.model_validate(data, context=get_deserializing_context())
        except SourceReadError:
            raise
        except Exception as exc:
            raise LogReadError(
                self.path, f"cannot read Inspect log header ({type(exc).__name__}: {short_error(exc)})"
            ) from exc
        return _header_of(self.path, digest, "eval", log)

    def summaries(self) -> Iterator:
        """Every sample summary, streamed from ``summaries.json``."""
        if SUMMARIES_JSON not in self.members:
            # no consolidated summaries: inspect_ai's own reader reads the journal
            # (and resolves re-run samples its way); it holds them all, but only odd
            # logs (unfinished, or written by other tools) lack summaries.json
            yield from _inspect_summaries(self.path, "eval")
            return
        listed = 0
        with self.open(SUMMARIES_JSON, MAX_MEMBER_BYTES) as stream:
            text = _JsonStream(io.BufferedReader(stream, READ_SIZE), what=f"zip member {SUMMARIES_JSON!r}")
            for item in text.array_items():
                listed += 1
                yield _summary(item)
        # Rows come from summaries.json alone: a sample file it does not list would be lost unseen
        # (a summaries list cut short, or a duplicate summaries.json member hiding the full one).
        if self.sample_entries > listed and (files := self.sample_files()) > listed:
            raise LogReadError(
                self.path,
                f"{SUMMARIES_JSON} lists {listed} sample(s) but the archive holds {files} "
                f"sample files (samples/*.json): the log is inconsistent, and its "
                f"{files - listed} unlisted sample(s) would be lost, so none is ingested; "
                "re-run the eval or rewrite the log with inspect_ai",
            )


def _inspect_eval_header(path: Path, digest: str) -> LogHeader:
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path), header_only=True, format="eval")
    except Exception as exc:
        raise LogReadError(path, f"cannot read Inspect log header ({type(exc).__name__}: {short_error(exc)})") from exc
    return _header_of(path, digest, "eval", log)


def _zip64_sizes(extra: bytes, file_size: int, compress_size: int, offset: int) -> tuple[int, int, int]:
    """Sizes and offset from a zip64 extra field, where the 32-bit fields say 0xFFFFFFFF."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if kind == 0x0001:
            data, values = extra[at + 4 : at + 4 + length], []
            for i in range(0, len(data) - 7, 8):
                values.append(struct.unpack_from("<Q", data, i)[0])
            if file_size == 0xFFFFFFFF:
                file_size = values.pop(0)
            if compress_size == 0xFFFFFFFF:
                compress_size = values.pop(0)
            if offset == 0xFFFFFFFF:
                offset = values.pop(0)
            return file_size, compress_size, offset
        at += 4 + length
    raise BadZipFile("zip64 sizes missing")


class _Window(io.RawIOBase):
    """``length`` bytes of ``handle`` from ``start``, read with seeks (the handle is shared)."""

    def __init__(self, handle: BinaryIO, start: int, length: int):
        self._handle, self._pos, self._left = handle, start, length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self._left)
        if size <= 0:
            return 0
        self._handle.seek(self._pos)
        data = self._handle.read(size)
        if not data:
            raise BadZipFile("the archive ends inside a member (truncated)")
        buffer[: len(data)] = data
        self._pos += len(data)
        self._left -= len(data)
        return len(data)


class _MemberStream(io.RawIOBase):
    """One zip member's uncompressed bytes, decompressed :data:`READ_SIZE` at most at a time.

    Refuses a member that declares more than ``limit`` bytes, and fails as
    soon as it inflates past its declared size; checks the CRC at the end.
    Stored, deflate and zstd (what inspect_ai writes) members are read.
    """

    def __init__(self, handle: BinaryIO, member: _Member, path: Path, limit: int):
        self.member, self.path = member, path
        if member.file_size > limit:
            raise LogReadError(
                path,
                f"zip member {member.name!r} declares {member.file_size} bytes uncompressed, over the "
                f"{limit}-byte limit for it (a zip bomb?); not read",
            )
        if member.flags & 0x1:
            raise LogReadError(path, f"zip member {member.name!r} is encrypted")
        handle.seek(member.header_offset)
        local = handle.read(_LOCAL.size)
        if len(local) != _LOCAL.size or local[:4] != b"PK\x03\x04":
            raise BadZipFile(f"bad local header for zip member {member.name!r}")
        name_len, extra_len = _LOCAL.unpack(local)[-2:]
        raw = _Window(handle, member.header_offset + _LOCAL.size + name_len + extra_len, member.compress_size)
        if member.method == _STORED:
            self._source: Any = raw
        elif member.method == _DEFLATED:
            self._source = _Inflater(raw)
        elif member.method == _ZSTD:
            import zstandard  # inspect_ai's own dependency (its zip logs are zstd-compressed)

            self._source = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        else:
            raise LogReadError(path, f"zip member {member.name!r} uses compression method {member.method}, not read")
        self._produced = 0
        self._crc = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), READ_SIZE)
        data = self._source.read(want)
        if data:
            self._produced += len(data)
            if self._produced > self.member.file_size:
                raise LogReadError(
                    self.path,
                    f"zip member {self.member.name!r} inflates past its declared size of "
                    f"{self.member.file_size} bytes (a zip bomb?); not read further",
                )
            self._crc = zlib.crc32(data, self._crc)
            buffer[: len(data)] = data
            return len(data)
        if self._produced != self.member.file_size:
            raise BadZipFile(
                f"zip member {self.member.name!r} holds {self._produced} bytes, not the {self.member.file_size} declared"
            )
        if self._crc != self.member.crc:
            raise BadZipFile(f"CRC mismatch in zip member {self.member.name!r} (the archive is corrupt)")
        return 0

    def read(self, size: int = -1) -> bytes:  # read() without a size: the whole member (bounded by limit)
        if size is None or size < 0:
            return self.readall()
        return super().read(size)


class _Inflater:
    """A raw deflate stream, inflated at most ``size`` bytes per ``read``."""

    def __init__(self, raw: io.RawIOBase):
        self._raw = raw
        self._inflate = zlib.decompressobj(-15)
        self._pending = b""

    def read(self, size: int) -> bytes:
        while True:
            data = self._inflate.decompress(self._pending, size)
            self._pending = self._inflate.unconsumed_tail
            if data or self._inflate.eof:
                return data
            if not self._pending:
                self._pending = self._raw.read(READ_SIZE)
                if not self._pending:
                    return self._inflate.flush()
