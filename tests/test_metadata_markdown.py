"""Markdown the assets put into Dagster metadata shows user-given names as written.

Model, suite and item names come from the logs. Rendered as CommonMark with GFM tables (what the
Dagster UI renders; markdown-it-py, a dependency of inspect_ai and rich, here), ``a|b`` used to
split a table cell, ``*x*`` turned italic, ``<script>`` passed through as HTML, and ``]`` in a suite
name broke its plot's image.
"""

from __future__ import annotations

import html
import re

import matplotlib

matplotlib.use("Agg")
import pandas as pd
import pytest

from assets.metadata import markdown_table, markdown_text, png_markdown, table_metadata

markdown_it = pytest.importorskip("markdown_it")

HOSTILE = [
    "a|b",
    "*x*",
    "<script>alert(1)</script>",
    "[x](javascript:1)",
    "`tick`",
    "s]x",
    "_u_",
    "#h",
    "~~s~~",
    "back\\slash",
    "&amp;",
    "fake\n  1. winner",
    "\x1bred",
    "café",
]


def _render(text: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").render(text)


def _cells(rendered: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, flags=re.S)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, flags=re.S)
        ]
        for r in rows
    ]


def _shown(name: str) -> str:
    """How a name is shown: as written, with control characters as escapes."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in name)


def test_a_preview_table_keeps_its_columns_and_shows_names_as_written(tmp_path):
    board = pd.DataFrame({"rank": range(1, len(HOSTILE) + 1), "model": HOSTILE, "posterior_mean": 0.5})
    rendered = _render(table_metadata(board, tmp_path / "t.parquet")["preview"].value)
    cells = _cells(rendered)
    assert cells[0] == ["rank", "model", "posterior_mean"]
    assert [row[1] for row in cells[1:]] == [_shown(name) for name in HOSTILE]
    assert all(len(row) == 3 and row[2] == "0.5" for row in cells[1:])
    for tag in ("<script", "<em>", "<a ", "<code>", "<del>", "<h1>"):
        assert tag not in rendered


def test_markdown_text_is_literal_in_running_text():
    for name in HOSTILE:
        rendered = _render(f"- {markdown_text(name)} vs other")
        assert html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip() == f"{_shown(name)} vs other", name
        assert "<script" not in rendered and "<a " not in rendered


def test_a_plot_whose_caption_holds_brackets_is_still_an_image(tmp_path):
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(1, 1))
    figure.savefig(tmp_path / "p.png")
    plt.close(figure)
    rendered = _render(png_markdown(tmp_path / "p.png", "WAIC comparison on s]x [y] <z>").value)
    assert "<img " in rendered and 'alt="WAIC comparison on s]x [y] &lt;z&gt;"' in rendered


def test_numbers_are_left_as_they_are_and_missing_values_are_empty_cells():
    frame = pd.DataFrame({"name": ["a", "b"], "value": [0.25, 3.0], "count": [1, 2]})
    assert markdown_table(frame) == frame.to_markdown(index=False)
    missing = pd.DataFrame(
        {
            "name": ["a", None, float("nan")],
            "value": [0.25, float("nan"), None],
            "flag": pd.array([True, None, False], dtype="boolean"),
        }
    )
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in markdown_table(missing).splitlines()[2:]]
    assert rows == [["a", "0.25", "True"], ["", "", ""], ["", "", "False"]]
