"""Plain tables: long (one row per model x item [x epoch]) and wide (items x models).

Long tables (CSV, Parquet, JSONL) name their columns through a declared
mapping ``canonical column = source column`` (``IngestOptions.column_map``,
``--map`` or ``[ingest.columns]``); unmapped canonical columns are looked up
under their own name. Required: ``model`` (or a fixed ``--model``),
``suite`` (or a fixed ``--suite``), ``item_id`` and ``score``; optional:
``epoch`` (default 1), ``domain``, ``subdomain``, ``answer`` (the model's
answer, predicted label), ``target`` (the reference, true label),
``scorer``, ``cluster``, ``error``, ``limit``, ``run_id``, ``created_at``
and ``cov_<name>`` covariates. Answers and targets are kept as
:func:`~evalpipeline.ingest.base.label_text` gives them (a whole number stays
``7``, a list of several is a JSON list). A mapping that names a missing
column is an error that lists the columns the file has.

Wide tables (CSV, Parquet), as used by the bayes_evals library: one row per
item, one column per model, 0/1 cells. The item column is the mapped
``item_id``, else a column named ``item_id``, ``question_id``, ``id`` or
``item``; a table without one numbers its items ``row-<n>``. ``domain`` /
``subdomain`` / ``cluster`` columns may be mapped too; every other column is
a model. (A mapped column that a file lacks falls back to the canonical name
when the file has that, so one folder-wide mapping can serve mixed files.) The suite is ``--suite``, else the file name's stem. An empty cell
is "not evaluated" and is not a row; a cell that is not a valid score is
quarantined.

Scores in text files are read as: a value-map key (``C``, ``I``, ...), else
a number (through ``numeric_range``), else quarantined as unknown.
Rows are read in chunks of ``chunk_rows``. A CSV reason names the line its
record starts on (blank lines and newlines inside quoted fields counted). A
header that names a column twice makes the file unreadable, as does a JSONL
file whose object lines name no columns; a JSONL file's columns are the keys
of all its lines. Model and suite names are stripped of surrounding
whitespace (a name of spaces is no name).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipeline.ingest.base import (
    MAX_EPOCH,
    COVARIATE_PREFIX,
    Chunk,
    IngestOptions,
    Source,
    SourcePartition,
    SourceReadError,
    canonical_name,
    label_text,
    placement_problem,
    sample_label,
    short_error,
)
from evalpipeline.ingest.scores import Normalised, ScoreNormalisation, binary_reading

REQUIRED_LONG = ("model", "suite", "item_id", "score")
OPTIONAL_LONG = (
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
#: Long-table columns whose whole numbers stay whole (see :func:`iter_table`): names, ids and labels.
EXACT_LONG = ("model", "suite", "item_id", "answer", "target")
ITEM_COLUMN_NAMES = ("item_id", "question_id", "id", "item")
WIDE_LABEL_COLUMNS = ("domain", "subdomain", "cluster")
TABLE_SOURCE_ID = "table"
#: The pseudo-partition in which versions before unplaced rows (see ``ingest``) quarantined rows that
#: named no model or suite; a lake written then may still hold it until its logs are read again.
UNKNOWN = "(unknown)"

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # pandas read cells of any size; keep reading them


# -- reading raw chunks ---------------------------------------------------------------


def table_columns(path: Path) -> list[str]:
    """Column names of a CSV / Parquet / JSONL file without reading its rows (a JSONL file's: every key
    of its object lines, in order of first appearance, since its lines need not share their keys)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            columns = list(pq.ParquetFile(path).schema_arrow.names)
        elif suffix == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as handle:
                columns = _csv_header(csv.reader(handle), path)
        elif suffix == ".jsonl":
            keys: dict[str, None] = {}
            for record, _ in _jsonl_records(path):
                keys.update(dict.fromkeys(k for k in record if k != "__error__"))
            columns = list(keys)
        else:
            raise SourceReadError(path, f"not a table file: {suffix!r}")
    except SourceReadError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SourceReadError(
            path, f"cannot read the table's columns ({type(exc).__name__}: {short_error(exc)})"
        ) from exc
    _refuse_repeated_columns(path, columns)
    return columns


def _refuse_repeated_columns(path: Path, columns: list[str]) -> None:
    """Two columns of one name would be read as one, silently (which one differs by format)."""
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise SourceReadError(path, f"the header names column(s) {repeated} more than once; rename them")


def _blank_record(record: list[str]) -> bool:
    """An empty line, or one of spaces only: pandas skipped both."""
    return not record or (len(record) == 1 and not record[0].strip())


def _csv_header(reader, path: Path) -> list[str]:
    for row in reader:
        if not _blank_record(row):  # blank lines before the header are skipped, as pandas did
            # an empty name gets pandas' positional one, so that spreadsheet exports' trailing empty
            # columns are neither one repeated column nor a change of name from what pandas read
            return [name if name != "" else f"Unnamed: {i}" for i, name in enumerate(row)]
    raise SourceReadError(path, "no header row: the file is empty")


class _RecordLines:
    """The lines the csv reader takes, kept per record: the last record's text is checked for a quote
    left open, which the csv module (not strict, as pandas is not about stray quotes) reads to the end
    of the file as one cell, silently."""

    def __init__(self, handle):
        self.handle, self.taken = handle, []

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = next(self.handle)
        self.taken.append(line)
        return line


def _check_closed_quotes(path: Path, start: int, text: str) -> None:
    try:
        for _ in csv.reader(text.splitlines(keepends=True), strict=True):
            pass
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise SourceReadError(
                path, f"line {start}: a quoted field is not closed before the end of the file"
            ) from None


def iter_table(
    path: Path, chunk_rows: int, columns: list[str] | None = None, exact: tuple[str, ...] = ()
) -> Iterator[tuple[pd.DataFrame, pd.Series]]:
    """Yield (frame, 1-based source line or null) chunks; CSV/JSONL cells come as strings/JSON values.
    ``columns`` limits a Parquet file's frames to those columns (a text file is parsed whole anyway).
    ``exact``: columns whose whole numbers must stay whole numbers (names and ids): pandas makes a
    column of integers with one missing value float, so item 7 was named "7.0", and two ids above
    2**53 one id."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows, columns=columns):
                frame = batch.to_pandas()
                for name in exact:
                    if name in batch.schema.names and pa.types.is_integer(batch.schema.field(name).type):
                        frame[name] = batch.column(name).to_pandas(integer_object_nulls=True).to_numpy()
                yield frame, pd.Series([None] * len(frame), dtype="Int32")
        elif suffix == ".csv":
            yield from _iter_csv(path, chunk_rows)
        elif suffix == ".jsonl":
            yield from _iter_jsonl(path, chunk_rows, exact)
        else:
            raise SourceReadError(path, f"not a table file: {suffix!r}")
    except SourceReadError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SourceReadError(path, f"cannot read the table ({type(exc).__name__}: {short_error(exc)})") from exc


def _iter_csv(path: Path, chunk_rows: int) -> Iterator[tuple[pd.DataFrame, pd.Series]]:
    """CSV records with the line each starts on (csv counts the lines of quoted newlines, which a
    record-per-line count got wrong). Cells are strings, an empty cell null; a short record's missing
    cells are null and a long one makes the file unreadable, as with pandas."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        source_lines = _RecordLines(handle)
        reader = csv.reader(source_lines)
        header = _csv_header(reader, path)
        _refuse_repeated_columns(path, header)
        width = len(header)
        rows, lines = [], []
        last: tuple[int, list[str]] | None = None  # the last record's first line and text
        while True:
            start = reader.line_num + 1
            source_lines.taken = []
            try:
                record = next(reader)
            except StopIteration:
                break
            last = (start, source_lines.taken)
            if _blank_record(record):
                continue
            if len(record) > width:
                raise SourceReadError(path, f"line {start}: {len(record)} fields where the header has {width}")
            rows.append([cell if cell != "" else None for cell in record] + [None] * (width - len(record)))
            lines.append(start)
            if len(rows) >= chunk_rows:
                yield pd.DataFrame(rows, columns=header, dtype=object), pd.Series(lines, dtype="Int32")
                rows, lines = [], []
        if last is not None:  # only the last record can run into the end of the file
            _check_closed_quotes(path, last[0], "".join(last[1]))
        if rows:
            yield pd.DataFrame(rows, columns=header, dtype=object), pd.Series(lines, dtype="Int32")


def _jsonl_records(path: Path) -> Iterator[tuple[dict, int]]:
    """Each non-blank line as an object and its number; a line that is not one gives ``__error__``."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, or an integer of more digits than Python converts
                record = {"__error__": f"line {number}: not valid JSON ({getattr(exc, 'msg', short_error(exc))})"}
            if not isinstance(record, dict):
                record = {"__error__": f"line {number}: a JSON {type(record).__name__}, not an object"}
            yield record, number


def _iter_jsonl(path: Path, chunk_rows: int, exact: tuple[str, ...] = ()) -> Iterator[tuple[pd.DataFrame, pd.Series]]:
    def frame_of(records: list) -> pd.DataFrame:
        frame = pd.DataFrame.from_records(records)
        for name in exact:  # the JSON values themselves where pandas made a column float (see iter_table)
            if name in frame.columns and frame[name].dtype.kind == "f":
                frame[name] = pd.Series(
                    [r.get(name) if isinstance(r, dict) else None for r in records], index=frame.index, dtype=object
                )
        return frame

    records, lines = [], []
    for record, number in _jsonl_records(path):
        records.append(record)
        lines.append(number)
        if len(records) >= chunk_rows:
            yield frame_of(records), pd.Series(lines, dtype="Int32")
            records, lines = [], []
    if records:
        yield frame_of(records), pd.Series(lines, dtype="Int32")


# -- detection -------------------------------------------------------------------------


def detect_table_kind(path: Path, options: IngestOptions) -> str:
    """``long`` when the mapped long columns exist, ``wide`` when the table looks like items x models."""
    columns = table_columns(path)
    mapping = long_mapping(options)
    # as the readers resolve a mapping: a mapped column the file lacks falls back to the canonical name
    has = lambda canonical: mapping.get(canonical, canonical) in columns or canonical in columns  # noqa: E731
    if has("item_id") and has("score") and (has("model") or options.model):
        return "long"
    if not has("model") and not has("score") and len(columns) >= 2:
        return "wide"
    absent = [f"{k}={v!r}" for k, v in mapping.items() if v not in columns and k not in columns]
    if absent:  # a misspelt --map column, more likely than a table of unknown shape
        raise SourceReadError(path, f"column mapping {', '.join(absent)}: no such column; the file has {columns}")
    raise SourceReadError(
        path,
        f"cannot tell whether this table is long or wide (columns {columns}); "
        "pass --format long with --map model=COL,suite=COL,item_id=COL,score=COL, or --format wide",
    )


def long_mapping(options: IngestOptions) -> dict[str, str]:
    return dict(options.column_map)


# -- row building ---------------------------------------------------------------------


def normalise_cell(value: Any, normalisation: ScoreNormalisation) -> Normalised:
    """A table cell as a score: value-map key, else a number, else unknown."""
    if isinstance(value, str):
        text = value.strip()
        if text in normalisation.value_map:
            return normalisation.normalise(text)
        try:
            number = float(text)
        except ValueError:
            return normalisation.normalise(text)  # unknown string: quarantined with the reason
        outcome = normalisation.normalise(number)
        return Normalised(outcome.score, json.dumps(text), outcome.reason)
    return normalisation.normalise(value)


def _base_row(source: Source, index: int, line) -> dict[str, Any]:
    return {
        "domain": None,
        "subdomain": None,
        "item_id": None,
        "epoch": 1,
        "scorer": None,
        "score": None,
        "correct": None,
        "score_raw": None,
        "answer": None,
        "target": None,
        "cluster": None,
        "error": None,
        "limit": None,
        "metadata_json": None,
        "scores_json": None,
        "run_id": None,
        "eval_id": None,
        "log_path": source.path,
        "log_sha256": source.sha256,
        "log_format": source.format,
        "sample_index": index,
        "source_line": None if pd.isna(line) else int(line),
        "created_at": None,
        "reason": None,
    }


def _where(source: Source, index: int, line) -> str:
    return f"line {int(line)}" if not pd.isna(line) else f"row {index}"


def _text(value) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return str(value)


def _json_covariate(value):
    """A JSONL covariate value as the Inspect reader keeps metadata ones: numbers as float, so that
    ``1`` on one line and ``1.5`` on another (or in the next chunk) share a type, except integers beyond
    2**53, which a float would round; objects as JSON text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 2**53):
        return float(value)
    return value  # an integer a float would round (an id) stays exact, as an int


def _model_name(column) -> str:
    """A wide table's model, from its column header, as the lake keys every model name
    (:func:`canonical_name`: stripped of spaces, in Unicode NFC form)."""
    return canonical_name(str(column))


def _clip(value, limit: int = 40) -> str:
    """``repr`` of a cell, shortened: a reason quoting a 400-digit number need not hold all of it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSONL column of integers with gaps comes as floats
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


#: What ``pd.Timestamp`` reads as the moment of reading: a log's rows would beat every real run's
_RELATIVE_TIMES = frozenset({"now", "today", "tomorrow", "yesterday"})


def _is_name(value) -> bool:
    """Whether a cell can name a model, suite or item: not a list, an object or a boolean, which ``str``
    would turn into ``"['m1']"`` or ``"True"`` (text, numbers, decimals and dates name as before)."""
    return not isinstance(value, (bool, np.bool_, list, tuple, dict, set, np.ndarray))


def _name(value) -> str | None:
    """A model or suite name without the surrounding whitespace a table cell picks up (``m1 `` and
    ``m1`` are one model); a name of spaces is no name, nor is a list, an object or a boolean, so its
    rows go to unplaced/."""
    if value is not None and value is not pd.NA and not _is_name(value):
        return None
    text = _text(value)
    return text.strip() or None if text is not None else None


def _placed_pairs(models: pd.Series, suites: pd.Series) -> set[tuple[str, str]]:
    """The (model, suite) partitions a chunk's rows name (rows naming no partition left out).

    A table repeats each pair on hundreds of rows, so when both columns hold only text the distinct
    pairs are found first (vectorised) and named once: at 100 models this scan ran on every ingest
    step and took a second. Other cells are named row by row, since ``1``, ``1.0`` and ``True`` are
    one value to a hash but three names (``"1"``, ``"1.0"``, ``"True"``).
    """
    if all(pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty") for column in (models, suites)):
        distinct = pd.DataFrame({"model": models.to_numpy(object), "suite": suites.to_numpy(object)}).drop_duplicates()
        models, suites = distinct["model"], distinct["suite"]
    named = ((_name(m), _name(s)) for m, s in zip(models, suites))
    return {(m, s) for m, s in named if m and s}


def _column(frame: pd.DataFrame, column: str | None, fixed: str | None) -> pd.Series:
    """A mapped column's cells, the fixed value (``--model``) for an unmapped one, or nulls for a chunk
    without the column (JSONL lines that are not objects)."""
    if column is None:
        return pd.Series([fixed] * len(frame), dtype=object)
    return frame[column] if column in frame else pd.Series([None] * len(frame), dtype=object)


class LongTableReader:
    """Long tables: one row per model x item [x epoch] (see the module docstring)."""

    name = "long"

    def _mapping(self, path: Path, options: IngestOptions) -> dict[str, str]:
        columns = table_columns(path)
        mapping = long_mapping(options)
        resolved: dict[str, str] = {}
        for canonical in (*REQUIRED_LONG, *OPTIONAL_LONG, *mapping):
            if canonical in resolved:
                continue
            column = mapping.get(canonical, canonical)
            if column in columns:
                resolved[canonical] = column
            elif canonical in columns:  # a folder-wide mapping meets a file that already uses the name
                resolved[canonical] = canonical
            elif canonical in mapping:
                raise SourceReadError(
                    path, f"column mapping {canonical}={column!r}: no column {column!r}; the file has {columns}"
                )
        for canonical in REQUIRED_LONG:
            fixed = {"model": options.model, "suite": options.suite}.get(canonical)
            if canonical not in resolved and fixed is None:
                raise SourceReadError(
                    path,
                    f"no column for {canonical!r} (map one with --map {canonical}=COL); the file has {columns}",
                )
        return resolved

    def partitions(self, source: Source, options: IngestOptions) -> list[SourcePartition]:
        path = Path(source.path)
        mapping = self._mapping(path, options)
        pairs: set[tuple[str, str]] = set()
        rows = 0
        # Every scan reads each landing file's partitions, so only the two naming columns are read.
        naming = [mapping[c] for c in ("model", "suite") if c in mapping]
        for frame, _ in iter_table(path, options.chunk_rows, columns=naming or None, exact=tuple(naming)):
            models = _column(frame, mapping.get("model"), options.model)
            suites = _column(frame, mapping.get("suite"), options.suite)
            pairs |= _placed_pairs(models, suites)
            rows += len(frame)
        if rows and not pairs:  # no partition would ever read the file: it is reported as unreadable
            raise SourceReadError(
                path,
                f"no row can be placed in a model x suite partition ({rows} rows; none names both a model and a suite)",
            )
        return [SourcePartition(m, s, TABLE_SOURCE_ID) for m, s in sorted(pairs)]

    def read(self, source: Source, options: IngestOptions) -> Iterator[Chunk]:
        path = Path(source.path)
        mapping = self._mapping(path, options)
        # where each sample was first read ("line 4", or "row 3" of a Parquet file), by which scorer, and
        # whether that row was usable: the lake keeps one score per (item_id, epoch), so a second scorer's
        # row is a duplicate too (the first is kept, as for Inspect logs; --scorer chooses another), even
        # when the first row was quarantined, lest one table mix scorers; a same-scorer row may replace a
        # quarantined first one, as before
        seen: dict[tuple, tuple[str, str | None, bool]] = {}
        index = 0
        exact = tuple(mapping[c] for c in EXACT_LONG if c in mapping)
        for frame, lines in iter_table(path, options.chunk_rows, exact=exact):
            groups: dict[tuple[str | None, str | None], list[dict]] = {}
            records = frame.to_dict("records")
            for record, line in zip(records, lines):
                row = _base_row(source, index, line)
                model = _name(record.get(mapping["model"]) if "model" in mapping else options.model)
                suite = _name(record.get(mapping["suite"]) if "suite" in mapping else options.suite)
                is_sample = self._fill(row, record, mapping, options, source, index, line)
                # a row without a model or suite is yielded under None: ingest keeps it as unplaced
                key = (model, suite, row["item_id"], row["epoch"])
                if is_sample and model is not None and suite is not None:
                    where = _where(source, index, line)
                    first = seen.get(key)
                    if first is None or (row["reason"] is None and not first[2] and first[1] == row["scorer"]):
                        seen[key] = (where, row["scorer"], row["reason"] is None)
                    elif row["reason"] is None:
                        first_at, first_scorer, first_usable = first
                        row["reason"] = (
                            f"{where}: duplicate (model, suite, item_id {row['item_id']!r}, "
                            f"epoch {row['epoch']}) in the file; first at {first_at}"
                        )
                        if row["scorer"] != first_scorer:
                            fate = "kept" if first_usable else "quarantined there"
                            row["reason"] += (
                                f" (scorer {first_scorer!r}, {fate}; this row's scorer is "
                                f"{row['scorer']!r}: choose one with --scorer)"
                            )
                groups.setdefault((model, suite), []).append(row)
                index += 1
            for (model, suite), rows in groups.items():
                yield Chunk(model, suite, TABLE_SOURCE_ID, pd.DataFrame(rows))

    def _fill(self, row, record, mapping, options, source, index, line) -> bool:
        """Fill ``row`` from ``record``; True when the row stands for its (item_id, epoch) sample (a
        readable key and a chosen scorer, whether or not its score is usable), which the duplicate
        check then compares."""
        where = _where(source, index, line)
        if isinstance(record.get("__error__"), str):  # a JSONL line that is not an object
            row["item_id"] = f"line-{int(line)}" if not pd.isna(line) else f"row-{index}"
            row["reason"] = record["__error__"]
            return False
        for canonical, column in mapping.items():
            if canonical in ("model", "suite", "score", "epoch", "created_at"):
                continue
            value = record.get(column)
            if canonical.startswith(COVARIATE_PREFIX):
                row[canonical] = _json_covariate(value) if source.path.lower().endswith(".jsonl") else value
            elif canonical in ("answer", "target"):
                row[canonical] = label_text(value)
            else:
                row[canonical] = _text(value)
        item = _text(record.get(mapping["item_id"]))
        row["item_id"] = item if item is not None else f"row-{index}"
        if item is None:
            row["reason"] = f"{where}: no item_id value"
            return False
        if not _is_name(record.get(mapping["item_id"])):  # [1], {"x": 1}, true: not an item's name
            row["item_id"] = f"row-{index}"
            row["reason"] = f"{where}: item_id {_clip(record.get(mapping['item_id']))} is not a name or a number"
            return False
        if "epoch" in mapping:
            raw_epoch = record.get(mapping["epoch"])
            if _text(raw_epoch) is None:  # an empty cell, or a JSONL line without the key: the default
                raw_epoch = 1
            try:
                epoch = float(raw_epoch)
                if not epoch.is_integer() or not 1 <= epoch <= MAX_EPOCH:
                    raise ValueError
                row["epoch"] = int(epoch)
            except (TypeError, ValueError, OverflowError):
                row["epoch"] = 1
                row["reason"] = f"{where}: epoch {_clip(raw_epoch)} is not a whole number from 1 to {MAX_EPOCH}"
                return False
        if "created_at" in mapping and _text(record.get(mapping["created_at"])):
            try:
                if str(record[mapping["created_at"]]).strip().lower() in _RELATIVE_TIMES:
                    raise ValueError("a word for the time of reading, not a time")  # pandas reads it as now
                stamp = pd.Timestamp(record[mapping["created_at"]])
                row["created_at"] = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
            except (TypeError, ValueError) as exc:
                row["reason"] = f"{where}: created_at {record[mapping['created_at']]!r} is not a time ({exc})"
                return True
        row["scorer"] = row["scorer"] or options.normalisation.scorer or mapping["score"]
        if row["error"] is not None:
            row["score_raw"] = json.dumps(_text(record.get(mapping["score"])))
            return True
        chosen = options.normalisation.scorer
        if chosen is not None and "scorer" in mapping and row["scorer"] != chosen:
            row["reason"] = (
                f"{sample_label(row['item_id'], row['epoch'])}: scorer {row['scorer']!r} not chosen (--scorer {chosen})"
            )
            return False
        value = record.get(mapping["score"])
        if value is None or (isinstance(value, float) and math.isnan(value)):
            row["reason"] = f"{where}: {sample_label(row['item_id'], row['epoch'])}: no score"
            return True
        outcome = normalise_cell(value, options.normalisation)
        row.update(score=outcome.score, score_raw=outcome.raw, correct=binary_reading(outcome.score))
        if outcome.reason:
            row["reason"] = f"{where}: {sample_label(row['item_id'], row['epoch'])}: {outcome.reason}"
        return True


class WideTableReader:
    """Wide tables: rows = items, columns = models, 0/1 cells (see the module docstring)."""

    name = "wide"

    def _layout(self, path: Path, options: IngestOptions) -> tuple[str | None, dict[str, str], list[str]]:
        columns = table_columns(path)
        relevant = ("item_id", *WIDE_LABEL_COLUMNS)  # the rest of a folder-wide mapping is for long tables
        mapping = {
            k: (v if v in columns or k not in columns else k) for k, v in options.column_map.items() if k in relevant
        }
        for canonical, column in mapping.items():
            if column not in columns:
                raise SourceReadError(
                    path, f"column mapping {canonical}={column!r}: no column {column!r}; the file has {columns}"
                )
        item = mapping.get("item_id") or next((c for c in ITEM_COLUMN_NAMES if c in columns), None)
        labels = {c: mapping.get(c, c) for c in WIDE_LABEL_COLUMNS if mapping.get(c, c) in columns}
        models = [c for c in columns if c != item and c not in labels.values()]
        if not models:
            raise SourceReadError(path, f"a wide table needs at least one model column; the file has {columns}")
        by_name: dict[str, list[str]] = {}
        for column in models:
            by_name.setdefault(_model_name(column), []).append(column)
        clashing = [columns for name, columns in by_name.items() if name and len(columns) > 1]
        if clashing:
            raise SourceReadError(
                path,
                f"model columns {clashing[0]} name one model once stripped of spaces and in Unicode NFC "
                "form; rename them",
            )
        return item, labels, models

    def _suite(self, path: Path, options: IngestOptions) -> str:
        return options.suite or path.stem

    def partitions(self, source: Source, options: IngestOptions) -> list[SourcePartition]:
        path = Path(source.path)
        _, _, models = self._layout(path, options)
        # every model column, a blank one included: scan_sources sets aside what no partition can hold
        return [SourcePartition(_model_name(m), self._suite(path, options), TABLE_SOURCE_ID) for m in models]

    def read(self, source: Source, options: IngestOptions) -> Iterator[Chunk]:
        path = Path(source.path)
        item_column, labels, models = self._layout(path, options)
        suite = self._suite(path, options)
        problems = {model: placement_problem(_model_name(model), suite) for model in models}  # see ingest.unplaced_path
        seen: dict[str, str] = {}  # where each item was first read
        row_number = 0
        index = 0
        for frame, lines in iter_table(path, options.chunk_rows, exact=(item_column,) if item_column else ()):
            per_model: dict[str, list[dict]] = {m: [] for m in models}
            for record, line in zip(frame.to_dict("records"), lines):
                item = _text(record.get(item_column)) if item_column else f"row-{row_number}"
                duplicate_of = seen.get(item) if item is not None else None
                if item is not None and duplicate_of is None:
                    seen[item] = _where(source, row_number, line)
                for model in models:
                    value = record.get(model)
                    if _text(value) is None:  # not evaluated: not an attempt
                        continue
                    row = _base_row(source, index, line)
                    index += 1
                    row.update({canonical: _text(record.get(column)) for canonical, column in labels.items()})
                    row["item_id"] = item if item is not None else f"row-{row_number}"
                    row["scorer"] = options.normalisation.scorer or "wide"
                    where = _where(source, row_number, line)
                    if item is None:
                        row["reason"] = f"{where}: no item id"
                    elif duplicate_of is not None:
                        row["reason"] = f"{where}: duplicate item {item!r}; first at {duplicate_of}"
                    else:
                        outcome = normalise_cell(value, options.normalisation)
                        row.update(score=outcome.score, score_raw=outcome.raw, correct=binary_reading(outcome.score))
                        if outcome.reason:
                            row["reason"] = f"{where}: {sample_label(item, 1)} model {model!r}: {outcome.reason}"
                    if problems[model]:  # named here, where the table's row is known
                        row["reason"] = (
                            f"{where}: {problems[model]}"
                            if row["reason"] is None
                            else f"{row['reason']}; {problems[model]}"
                        )
                    per_model[model].append(row)
                row_number += 1
            for model, rows in per_model.items():
                if rows:
                    yield Chunk(_model_name(model) or None, suite, TABLE_SOURCE_ID, pd.DataFrame(rows))
