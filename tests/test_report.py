"""The static HTML report: escaping of hostile names, relative image paths, tables, atomic writes."""

from __future__ import annotations

import datetime as dt
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from evalpipeline.report.html import (
    Details,
    Image,
    Paragraph,
    Section,
    Table,
    relative_src,
    render_report,
    write_report,
)

HOSTILE = """<script>alert("x")</script> & 'q' <img src=x onerror=alert(1)>"""


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text content."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    parser.close()
    return parser


def hostile_page() -> str:
    frame = pd.DataFrame(
        {"model": [HOSTILE, "plain"], f"P({HOSTILE} > B)": [0.91234, np.nan], "n": [50, 40], "different": [True, False]}
    )
    section = Section(
        heading=f"Suite {HOSTILE}",
        blocks=[
            f"{HOSTILE} is likely better than plain (P = 0.91).",
            Table(frame, caption=f"Leaderboard for {HOSTILE}"),
            Image("plots/suite=x/forest.png", alt=f"forest plot for {HOSTILE}", caption=HOSTILE),
        ],
        subsections=[Section(f"Model {HOSTILE}", [Paragraph("per-model view")])],
    )
    return render_report(f"Run {HOSTILE}", [section], generated_at=dt.datetime(2025, 1, 2, 3, 4, 5))


def test_hostile_names_are_escaped_everywhere():
    page = hostile_page()
    assert HOSTILE not in page
    elements = parse(page)
    tags = [tag for tag, _ in elements.tags]
    # the only elements are the ones the renderer writes: no injected script, one image
    assert "script" not in tags
    assert tags.count("img") == 1
    (img,) = [attrs for tag, attrs in elements.tags if tag == "img"]
    assert set(img) == {"src", "alt"}
    assert img["alt"] == f"forest plot for {HOSTILE}"  # round-trips as text
    text = "".join(elements.text)
    assert text.count(HOSTILE) >= 6  # title x2, headings x2 (+ contents), paragraph, caption, cell, column, figcaption


def test_table_cells_formatted_and_numbers_right_aligned():
    page = hostile_page()
    assert '<td class="num">0.912</td>' in page  # 3 significant digits
    assert '<td class="num">—</td>' in page  # NaN shown as a dash
    assert '<td class="num">50</td>' in page
    assert "<td>yes</td>" in page and "<td>no</td>" in page  # booleans in words, not right-aligned


def test_contents_links_point_at_existing_sections():
    page = hostile_page()
    elements = parse(page)
    ids = {attrs["id"] for _, attrs in elements.tags if "id" in attrs}
    links = [attrs["href"][1:] for tag, attrs in elements.tags if tag == "a" and attrs.get("href", "").startswith("#")]
    assert links == ["s1", "s1-1"]
    assert set(links) <= ids


def test_page_needs_nothing_from_the_network():
    page = hostile_page()
    elements = parse(page)
    tags = {tag for tag, _ in elements.tags}
    assert not tags & {"script", "link", "iframe", "object", "embed"}
    assert "http://" not in page and "https://" not in page
    assert "<style>" in page  # CSS inline


def test_render_is_deterministic_and_stamped():
    assert hostile_page() == hostile_page()
    assert "Generated 2025-01-02T03:04:05" in hostile_page()
    page = render_report("t", [], generated_at="run 7")
    assert "Generated run 7" in page and "Contents" not in page


@pytest.mark.parametrize(
    "src",
    [
        "/lake/plots/a.png",
        "file:///lake/a.png",
        "https://cdn.example/a.png",
        "C:/lake/a.png",
        "plots\\a.png",
        "",
        "data:image/png;base64,AAAA",
    ],
)
def test_image_paths_must_be_relative(src):
    with pytest.raises(ValueError, match="must be relative to the report"):
        render_report("t", [Section("s", [Image(src, alt="a")])], generated_at="now")


def test_image_path_segments_are_percent_encoded():
    page = render_report("t", [Section("s", [Image("../plots/model=a b#1?/x&y.png", alt="a")])], generated_at="now")
    (img,) = [attrs for tag, attrs in parse(page).tags if tag == "img"]
    assert img["src"] == "../plots/model%3Da%20b%231%3F/x%26y.png"


def test_bad_structure_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown block type dict"):
        render_report("t", [Section("s", [{"text": "x"}])], generated_at="now")
    with pytest.raises(ValueError, match="not a single Section"):
        render_report("t", Section("s"), generated_at="now")
    with pytest.raises(ValueError, match="title must be a non-empty string"):
        render_report(" ", [], generated_at="now")
    with pytest.raises(ValueError, match="Table.frame must be a DataFrame"):
        render_report("t", [Section("s", [Table([1, 2])])], generated_at="now")


def test_relative_src_is_relative_to_the_report_folder(tmp_path):
    report = tmp_path / "lake" / "report" / "index.html"
    assert relative_src(tmp_path / "lake" / "report" / "plots" / "a.png", report) == "plots/a.png"
    assert relative_src(tmp_path / "lake" / "plots" / "suite=x" / "a.png", report) == "../plots/suite=x/a.png"


def test_write_report_is_atomic_and_skips_identical_rewrites(tmp_path):
    path = tmp_path / "report" / "index.html"
    page = hostile_page()
    assert write_report(page, path) is True
    assert path.read_text(encoding="utf-8") == page
    mtime = path.stat().st_mtime_ns
    assert write_report(page, path) is False
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]
    with pytest.raises(ValueError, match="expected the HTML as str"):
        write_report(page.encode(), path)


def test_details_and_collapsed_sections_escape_their_summaries_and_keep_contents_short():
    models = [
        Section(f"Model {HOSTILE} {i}", [Paragraph("profile")], collapsed=True, summary=f"pooled {HOSTILE}")
        for i in range(3)
    ]
    page = render_report(
        "t",
        [
            Section(
                "Suite a",
                [Details(f"All columns of {HOSTILE}", [Paragraph("wide")]), Details("Open one", ["shown"], open=True)],
            ),
            Section("Models", [Paragraph("index")], models, list_subsections=False),
        ],
        generated_at="now",
    )
    assert HOSTILE not in page
    elements = parse(page)
    assert "script" not in [tag for tag, _ in elements.tags]
    details = [attrs for tag, attrs in elements.tags if tag == "details"]
    # two blocks (one open) and three collapsed model sections, none of them open
    assert [("open" in attrs) for attrs in details] == [False, True, False, False, False]
    assert sum(attrs.get("class") == "section" for attrs in details) == 3
    text = "".join(elements.text)
    assert f"All columns of {HOSTILE}" in text and text.count(f"pooled {HOSTILE}") == 3
    # the contents list the two sections, not the models inside the second; the models keep their anchors
    links = [attrs["href"][1:] for tag, attrs in elements.tags if tag == "a" and attrs.get("href", "").startswith("#")]
    assert links == ["s1", "s2"]
    ids = {attrs["id"] for _, attrs in elements.tags if "id" in attrs}
    assert {"s2-1", "s2-2", "s2-3"} <= ids


def test_a_table_with_wrapping_columns_is_laid_out_to_the_page_width():
    frame = pd.DataFrame({"rank": [1], "model": [HOSTILE], "95% HPDI": ["0.1–0.2"]})
    page = render_report("t", [Section("s", [Table(frame, wrap=("model",)), Table(frame)])], generated_at="now")
    tables = [attrs for tag, attrs in parse(page).tags if tag == "table"]
    assert tables == [{"class": "fit"}, {}]
    cells = [attrs.get("class") for tag, attrs in parse(page).tags if tag == "td"]
    assert cells == ["num", "wrap", None, "num", None, None]


def test_intro_blocks_come_before_the_contents_and_decimals_line_up_a_column():
    frame = pd.DataFrame({"mean": [0.86, 0.9174, np.nan], "n": [1, 2, 3]})
    page = render_report(
        "t",
        [Section("s", [Table(frame, decimals=3)])],
        generated_at="now",
        intro=[Paragraph(f"What {HOSTILE} holds"), Details("How to read", ["guide"])],
    )
    assert HOSTILE not in page
    assert page.index("What &lt;script&gt;") < page.index("<summary>How to read</summary>") < page.index("<nav")
    assert ['<td class="num">0.860</td>', '<td class="num">0.917</td>', '<td class="num">—</td>'] == re.findall(
        r'<td class="num">[^<]*</td>', page
    )[::2]
    assert '<td class="num">2</td>' in page  # integers stay integers
