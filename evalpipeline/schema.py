"""The canonical sample table: one row per scored attempt.

Every log format is read into this table; everything downstream reads only
this table. The columns, in order:

=============== ================= ==========================================
column          type              meaning
=============== ================= ==========================================
model           string            the model's display name, as logged
                                  (partition dimension)
suite           string            the suite (Inspect task name) (partition
                                  dimension)
domain          string, nullable  domain of the item (sample metadata
                                  ``domain``)
subdomain       string, nullable  subdomain of the item (sample metadata
                                  ``subdomain``)
item_id         string            the question / task id (Inspect sample id)
epoch           int32             repeat index, 1-based
scorer          string, nullable  which scorer produced ``score``; null when
                                  the sample errored before scoring
score           float64, nullable normalised score in [0, 1]; null for
                                  errored samples
correct         bool, nullable    binary reading of ``score``: true for 1,
                                  false for 0, null otherwise
score_raw       string, nullable  the score value as logged (JSON), for audit
answer          string, nullable  the model's answer (predicted label) as the
                                  scorer extracted it (Inspect ``Score.answer``;
                                  lm-eval filtered response); several as a
                                  JSON list; cut at 1024 characters
target          string, nullable  the reference (true label): the sample's
                                  target; several as a JSON list
cluster         string, nullable  items whose outcomes move together (not
                                  filled by the Inspect reader yet)
error           string, nullable  the sample's error message; errored samples
                                  are kept and flagged, never scored
limit           string, nullable  the limit the sample hit (token, time, ...)
metadata_json   string, nullable  the sample's whole metadata as JSON, so that
                                  covariates can be mapped later without
                                  re-reading logs
scores_json     string, nullable  every score the sample has, by scorer, as
                                  logged (JSON): the scorers not chosen stay
                                  available
run_id          string, nullable  the run that produced the row (Inspect run
                                  id; lm-eval results file; table column)
eval_id         string, nullable  Inspect eval id, or the source's run key
log_path        string            the source file as ingested (provenance)
log_sha256      string            SHA-256 of the source file's bytes
log_format      string            how the source was read: ``eval``,
                                  ``json`` (Inspect), ``lm-eval``, ``long``,
                                  ``wide``
sample_index    int32             0-based position of the row in the source
source_line     int32, nullable   1-based line of the row in a text source
                                  (JSONL, CSV), for error messages
created_at      timestamp (UTC),  when the eval was run, where the source
                nullable          says
cov_<name>      any, nullable     declared covariates (difficulty,
                                  reasoning effort, ...), one column each
=============== ================= ==========================================

In the lake, ``model`` and ``suite`` live in the Hive-style path
(``samples/model=<key>/suite=<key>/``) and not in the Parquet files, so
that pyarrow, pandas, DuckDB and Spark read the folder without a column
clash; :mod:`evalpipeline.lake` adds them back when it reads a partition.

The quarantine table has the same columns, all nullable, plus ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    doc: str


PARTITION_COLUMNS = ("model", "suite")
COVARIATE_PREFIX = "cov_"

SAMPLE_COLUMNS: tuple[Column, ...] = (
    Column("model", pa.string(), False, "model display name (partition dimension)"),
    Column("suite", pa.string(), False, "suite / Inspect task name (partition dimension)"),
    Column("domain", pa.string(), True, "domain of the item"),
    Column("subdomain", pa.string(), True, "subdomain of the item"),
    Column("item_id", pa.string(), False, "question / task id"),
    Column("epoch", pa.int32(), False, "repeat index, 1-based"),
    Column("scorer", pa.string(), True, "scorer that produced score"),
    Column("score", pa.float64(), True, "normalised score in [0, 1]"),
    Column("correct", pa.bool_(), True, "binary reading of score where defined"),
    Column("score_raw", pa.string(), True, "score value as logged (JSON)"),
    Column("answer", pa.string(), True, "the model's answer (predicted label) as the scorer extracted it"),
    Column("target", pa.string(), True, "the reference answer (true label); several as a JSON list"),
    Column("cluster", pa.string(), True, "cluster of items whose outcomes move together"),
    Column("error", pa.string(), True, "sample error; errored samples are kept and flagged"),
    Column("limit", pa.string(), True, "limit the sample hit"),
    Column("metadata_json", pa.string(), True, "sample metadata as JSON"),
    Column("scores_json", pa.string(), True, "all scores of the sample by scorer, as logged (JSON)"),
    Column("run_id", pa.string(), True, "run that produced the row"),
    Column("eval_id", pa.string(), True, "Inspect eval id, or the source's run key"),
    Column("log_path", pa.string(), False, "source file path"),
    Column("log_sha256", pa.string(), False, "SHA-256 of the source file"),
    Column("log_format", pa.string(), False, "eval, json, lm-eval, long or wide"),
    Column("sample_index", pa.int32(), False, "0-based position of the row in the source"),
    Column("source_line", pa.int32(), True, "1-based line in a text source"),
    Column("created_at", pa.timestamp("us", tz="UTC"), True, "when the eval was run"),
)

REASON_COLUMN = Column("reason", pa.string(), False, "why the row was quarantined")

COLUMN_NAMES = tuple(c.name for c in SAMPLE_COLUMNS)


def samples_schema(*, with_partition_columns: bool = True) -> pa.Schema:
    """Arrow schema of the canonical sample table."""
    return pa.schema(
        [
            pa.field(c.name, c.type, nullable=c.nullable)
            for c in SAMPLE_COLUMNS
            if with_partition_columns or c.name not in PARTITION_COLUMNS
        ]
    )


def quarantine_schema(*, with_partition_columns: bool = True) -> pa.Schema:
    """Arrow schema of the quarantine table: sample columns (all nullable) plus ``reason``."""
    return _with_reason(with_partition_columns, reason_nullable=False)


def staged_schema(*, with_partition_columns: bool = True) -> pa.Schema:
    """Arrow schema of the per-log ingest record: every row, ``reason`` null where accepted."""
    return _with_reason(with_partition_columns, reason_nullable=True)


def _with_reason(with_partition_columns: bool, reason_nullable: bool) -> pa.Schema:
    fields = [
        pa.field(c.name, c.type, nullable=True)
        for c in SAMPLE_COLUMNS
        if with_partition_columns or c.name not in PARTITION_COLUMNS
    ]
    fields.append(pa.field(REASON_COLUMN.name, REASON_COLUMN.type, nullable=reason_nullable))
    return pa.schema(fields)


class SchemaError(ValueError):
    """A frame that does not fit the canonical schema."""


def to_arrow(frame: pd.DataFrame, schema: pa.Schema, *, extra: pa.Schema | None = None) -> pa.Table:
    """Conform ``frame`` to ``schema``: select and order columns, cast, and check non-nulls.

    Covariate columns (``cov_<name>``) are kept after the canonical ones:
    typed by ``extra`` where given, else inferred from their values. One
    that ``extra`` does not type and that holds no value is left out: it has
    no type to give, and a column typed null breaks readers of the lake's
    folders (a partition whose file has it next to one where it holds text)
    and, being missing in every row, would exclude every row from the GLMs.
    Raises :class:`SchemaError` naming the missing column or the first row
    that breaks a non-null constraint.
    """
    missing = [name for name in schema.names if name not in frame.columns]
    if missing:
        raise SchemaError(f"missing columns {missing}; present: {sorted(frame.columns)}")
    frame = frame.reset_index(drop=True)
    for field in schema:
        if not field.nullable and frame[field.name].isna().any():
            row = int(frame.index[frame[field.name].isna()][0])
            raise SchemaError(f"column {field.name!r} must not be null (row {row})")
    typed = list(extra.names) if extra is not None else []
    for name in typed:
        if name not in frame.columns:
            frame[name] = None
    covariates = typed + sorted(
        c for c in frame.columns if c.startswith(COVARIATE_PREFIX) and c not in typed and frame[c].notna().any()
    )
    full = schema
    for name in covariates:
        if name in typed:
            full = full.append(extra.field(name))
        else:
            try:
                full = full.append(pa.field(name, pa.Array.from_pandas(frame[name]).type, nullable=True))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise SchemaError(_mixed_covariate(frame, name, exc)) from exc
    try:
        return pa.Table.from_pandas(frame[list(full.names)], schema=full, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        for name in covariates:  # a covariate typed by an earlier chunk: say which, and what it holds now
            field = full.field(name)
            try:
                pa.Array.from_pandas(frame[name], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
                raise SchemaError(
                    f"covariate {name!r} was {field.type} in the source's earlier rows and cannot "
                    f"hold these: {exc}; give it one type (all numbers or all text)"
                ) from exc
        raise SchemaError(f"cannot cast to the canonical schema: {exc}") from exc


def _mixed_covariate(frame: pd.DataFrame, name: str, exc: Exception) -> str:
    """Name the covariate whose values have no common type, and where its first odd value is: a
    covariate column takes one type, from its values (a number in one row and text in another have none)."""
    values = frame[name]
    present = values[values.notna()]
    first_type = type(present.iloc[0]) if len(present) else None
    odd = present[[type(v) is not first_type for v in present]]
    if not len(odd):
        return f"covariate {name!r} cannot be stored: {exc}"
    first, index = present.index[0], odd.index[0]
    files = "log_path" in frame.columns and frame.at[first, "log_path"] != frame.at[index, "log_path"]

    def where(row) -> str:  # the file too when the two values come from two logs (a partition's consolidation)
        at = ""
        if "source_line" in frame.columns and pd.notna(frame.at[row, "source_line"]):
            at = f" at line {int(frame.at[row, 'source_line'])}"
        elif "sample_index" in frame.columns and pd.notna(frame.at[row, "sample_index"]):
            at = f" at row {int(frame.at[row, 'sample_index'])}"
        return f" in {frame.at[row, 'log_path']}{at}" if files else at

    return (
        f"covariate {name!r} mixes value types: {type(present.iloc[0]).__name__} {present.iloc[0]!r} first"
        f"{where(first) if files else ''}, then {type(odd.iloc[0]).__name__} {odd.iloc[0]!r}{where(index)}; "
        "give it one type (all numbers or all text)"
    )


def covariate_schema(table: pa.Schema) -> pa.Schema:
    """The ``cov_<name>`` fields of a schema (to keep later chunks of one source consistent)."""
    return pa.schema([f for f in table if f.name.startswith(COVARIATE_PREFIX)])


#: Covariate columns: as many as the ingest maps, each named cov_<name>.
COVARIATE_DOC = (
    "a covariate mapped from sample metadata or a table column (--metadata-map / --map "
    "cov_<name>=...), one column per covariate; absent when none is mapped"
)


def column_docs(*, quarantine: bool = False) -> dict[str, str]:
    """Column name -> one-line meaning of the sample table (``quarantine``: of the quarantine table,
    which adds ``reason``), as a reader of the lake sees it (for Dagster column schemas and docs).
    ``model`` and ``suite`` are Hive partition columns: in the folder names, not in the files."""
    docs = {}
    for c in SAMPLE_COLUMNS:
        docs[c.name] = c.doc + (
            " (in the folder name, not the file: read the folder to get it)" if c.name in PARTITION_COLUMNS else ""
        )
    docs[f"{COVARIATE_PREFIX}<name>"] = COVARIATE_DOC
    if quarantine:
        docs[REASON_COLUMN.name] = REASON_COLUMN.doc
    return docs
