"""Dagster metadata for lake tables: path, row count, preview, column schema."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from dagster import MetadataValue, TableColumn, TableSchema


def column_schema(columns: dict[str, str], types: dict[str, str] | None = None) -> TableSchema:
    types = types or {}
    return TableSchema(
        columns=[TableColumn(name, types.get(name, "string"), description=doc) for name, doc in columns.items()]
    )


def table_metadata(frame: pd.DataFrame, path: Path, *, preview_rows: int = 20, digits: int = 3) -> dict:
    preview = frame.head(preview_rows).round(digits) if len(frame) else frame
    return {
        "path": MetadataValue.path(str(path)),
        "dagster/row_count": len(frame),
        "preview": MetadataValue.md(preview.to_markdown(index=False) if len(frame) else "(empty)"),
    }


def png_markdown(path: Path, alt: str) -> MetadataValue:
    """A PNG from the lake shown inline in the Dagster UI (markdown with a data URI), as its
    palette preview (:func:`evalpipeline.plots.png_preview`): the event log keeps every one."""
    import base64

    from evalpipeline.plots import png_preview

    data = base64.b64encode(png_preview(Path(path).read_bytes())).decode()
    return MetadataValue.md(f"![{alt}](data:image/png;base64,{data})")
