"""Dagster metadata for lake tables: path, row count, preview, column schema."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from dagster import MetadataValue, TableColumn, TableSchema

from evalpipeline.lake.keys import printable


#: Arrow types of the lake tables' columns other than text, by column name: a name means the same in
#: every table that has it (tests/test_main_job.py compares each declared schema with the files).
COLUMN_TYPES: dict[str, str] = {
    **dict.fromkeys(
        [
            "n",
            "n_items",
            "n_excluded",
            "rank",
            "rank_low",
            "rank_high",
            "n_suites",
            "n_models",
            "rows_ingested",
            "rows_errored",
            "rows_quarantined",
            "rows_accounted",
            "waic_rank",
            "loo_rank",
            "n_pareto_k_high",
            "n_units",
            "n_suite_items",
        ],
        "int64",
    ),
    **dict.fromkeys(["overlaps_leader", "waic_warning", "loo_warning"], "bool"),
    **dict.fromkeys(
        [
            "k",
            "observed_mean",
            "prior_a",
            "prior_b",
            "posterior_a",
            "posterior_b",
            "posterior_mean",
            "hpdi_mass",
            "hpdi_low",
            "hpdi_high",
            "clt_low",
            "clt_high",
            "wilson_low",
            "wilson_high",
            "clopper_pearson_low",
            "clopper_pearson_high",
            "p_best",
            "expected_rank",
            "glm_mean",
            "glm_hpdi_low",
            "glm_hpdi_high",
            "glm_hpdi_mass",
            "glm_p_best",
            "elpd_waic",
            "waic_se",
            "p_waic",
            "d_waic",
            "waic_dse",
            "waic_weight",
            "elpd_loo",
            "loo_se",
            "p_loo",
            "d_loo",
            "loo_dse",
            "loo_weight",
            "pareto_k_threshold",
            "lower",
            "upper",
            "mean",
            "sd",
            "hpdi2_mass",
            "hpdi2_low",
            "hpdi2_high",
            "prob_mean",
            "prob_hpdi_low",
            "prob_hpdi_high",
            "prob_hpdi2_low",
            "prob_hpdi2_high",
            "r_hat",
            "ess_bulk",
            "ess_tail",
            "design_effect",
            "n_effective",
            "independent_hpdi_low",
            "independent_hpdi_high",
            "judge_mean",
            "judge_low",
            "judge_high",
            "dispersion_paired",
        ],
        "double",
    ),
}


def column_type(name: str) -> str:
    """The arrow type of a lake table's column ``name`` (:data:`COLUMN_TYPES`; ``p_above_<t>``: a
    probability; text otherwise)."""
    return "double" if name.startswith("p_above_") else COLUMN_TYPES.get(name, "string")


def column_schema(columns: dict[str, str], types: dict[str, str] | None = None) -> TableSchema:
    """The table schema the UI shows: ``columns`` (name -> description) with ``types`` where given,
    else :func:`column_type`."""
    types = types or {}
    return TableSchema(
        columns=[
            TableColumn(name, types.get(name) or column_type(name), description=doc) for name, doc in columns.items()
        ]
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
    """``frame.to_markdown(index=False)`` with every text cell and column name taken literally and
    missing values (NaN, None, NA) as empty cells, not ``nan`` or ``<NA>``."""
    literal = frame.copy()
    for column in literal.columns:
        if literal[column].dtype == object or isinstance(literal[column].dtype, pd.StringDtype):
            literal[column] = literal[column].map(lambda v: markdown_text(v) if isinstance(v, str) else v)
    literal.columns = [markdown_text(c) for c in literal.columns]
    return literal.astype(object).where(literal.notna(), None).to_markdown(index=False)


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
