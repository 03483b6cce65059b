"""Dagster metadata for lake tables: path, row count, preview, column schema."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from dagster import MetadataValue, TableColumn, TableSchema

from evalpipeline.keys import printable


def column_schema(columns: dict[str, str], types: dict[str, str] | None = None) -> TableSchema:
    types = types or {}
    return TableSchema(
        columns=[TableColumn(name, types.get(name, "string"), description=doc) for name, doc in columns.items()]
    )


#: Characters that Markdown (CommonMark + GFM tables) would read as syntax or HTML; a backslash makes
#: each a literal. Model, suite and item names are user data: ``a|b`` split a table cell, ``*x*`` was
#: italic, ``<script>`` went through as HTML.
_MARKDOWN_ACTIVE = re.compile(r"([\\`*_\[\]<>|#!~&])")


def markdown_text(value) -> str:
    """``value`` as literal Markdown text on one line: syntax characters escaped, line breaks and other
    control characters shown as escapes (``\\n``, ``\\x1b``) instead of acting."""
    return _MARKDOWN_ACTIVE.sub(r"\\\1", printable(value))


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame.to_markdown(index=False)`` with every text cell and column name taken literally."""
    literal = frame.copy()
    for column in literal.columns:
        if literal[column].dtype == object or isinstance(literal[column].dtype, pd.StringDtype):
            literal[column] = literal[column].map(lambda v: markdown_text(v) if isinstance(v, str) else v)
    literal.columns = [markdown_text(c) for c in literal.columns]
    return literal.to_markdown(index=False)


def table_metadata(frame: pd.DataFrame, path: Path, *, preview_rows: int = 20, digits: int = 3) -> dict:
    preview = frame.head(preview_rows).round(digits) if len(frame) else frame
    return {
        "path": MetadataValue.path(str(path)),
        "dagster/row_count": len(frame),
        "preview": MetadataValue.md(markdown_table(preview) if len(frame) else "(empty)"),
    }


def png_markdown(path: Path, alt: str) -> MetadataValue:
    """A PNG from the lake shown inline in the Dagster UI (markdown with a data URI), as its
    palette preview (:func:`evalpipeline.plots.png_preview`): the event log keeps every one."""
    import base64

    from evalpipeline.plots import png_preview

    data = base64.b64encode(png_preview(Path(path).read_bytes())).decode()
    return MetadataValue.md(f"![{markdown_text(alt)}](data:image/png;base64,{data})")
