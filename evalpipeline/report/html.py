"""The run report: one static HTML page with tables, plots and verdicts in words.

The page is self-contained apart from its images: CSS inline, no JavaScript,
no fonts or scripts from a CDN. Images are referenced by *relative* paths so
the lake folder can be copied or opened offline (``file://``) and the page
still finds its PNGs. Every piece of text that comes from data (model, suite,
domain names, table cells, captions) is HTML-escaped: names may contain
``<``, ``&`` or quotes.

A page is a title plus a list of :class:`Section`; a section holds a heading
and an ordered list of blocks (:class:`Paragraph`, :class:`Table`,
:class:`Image`, :class:`Details`; a bare ``str`` counts as a paragraph) and
may nest subsections. A section can be collapsed (a closed ``<details>``
whose summary is its heading), and a section can keep its subsections out of
the page's contents (a list of 100 models' sections would bury the suites).
A table of contents with in-page links is generated. Collapsing uses the
``<details>`` element, so it needs no script.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import numpy as np
import pandas as pd

from evalpipeline.lake import write_bytes_atomic


@dataclass(frozen=True)
class Paragraph:
    """Plain text (escaped); blank lines are not special."""

    text: str


@dataclass(frozen=True)
class Table:
    """A DataFrame shown as an HTML table.

    ``digits``: significant digits for floats. ``index``: also show the
    index. Missing values (None, NaN, NA) show as an em dash. ``wrap``: the
    columns whose text may break anywhere (long model names); when given,
    every other cell stays on one line and those columns take the width
    left, so the table fits the page rather than scrolling sideways.
    ``decimals``: when set, floats show this many decimals instead of
    ``digits`` significant digits (a column of rates lines up).
    """

    frame: pd.DataFrame
    caption: str = ""
    digits: int = 3
    index: bool = False
    wrap: tuple[str, ...] = ()
    decimals: int | None = None


@dataclass(frozen=True)
class Image:
    """A picture by path relative to the report file (POSIX separators)."""

    src: str
    alt: str
    caption: str = ""


@dataclass(frozen=True)
class Details:
    """Blocks behind a one-line summary the reader clicks to open (``<details>``); ``open``: shown open."""

    summary: str
    blocks: Sequence["Block"] = ()
    open: bool = False


Block = Paragraph | Table | Image | Details | str


@dataclass(frozen=True)
class Section:
    """A heading with its blocks and subsections.

    ``collapsed``: shown closed, as its heading (followed by ``summary``, a
    line of text) that opens it. ``list_subsections``: whether the page's
    contents list the subsections (off for a long list of collapsed ones).
    """

    heading: str
    blocks: Sequence[Block] = ()
    subsections: Sequence["Section"] = field(default_factory=tuple)
    collapsed: bool = False
    summary: str = ""
    list_subsections: bool = True


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 0 auto; max-width: 1100px; padding: 1em 2em 3em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #1f77b4; padding-bottom: .2em; margin: .4em 0 .2em; }
h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
h3, h4 { margin-top: 1.5em; }
p.generated { color: #666; font-size: .9em; margin: .2em 0 .8em; }
nav { display: flex; gap: 1.2em; align-items: baseline; border-top: 1px solid #ccc; border-bottom: 1px solid #ccc;
      padding: .3em 0; margin: .8em 0; }
nav .label { font-weight: 600; }
nav ul { padding-left: 0; margin: 0; list-style: none; display: flex; flex-wrap: wrap; gap: .2em 1.2em; }
nav ul ul { display: inline-flex; margin: 0 0 0 .6em; font-size: .92em; }
details { margin: .6em 0; }
details > summary { cursor: pointer; color: #1f4f7a; }
details[open] > summary { margin-bottom: .4em; }
details.section { margin: 0; border-bottom: 1px solid #eee; }
details.section > summary { color: inherit; padding: .15em 0; }
details.section > summary h3, details.section > summary h4 { display: inline; margin: 0; font-size: 1em; }
details.section > summary .summary { color: #555; font-size: .92em; margin-left: .6em; }
table { border-collapse: collapse; margin: .8em 0 1.2em; font-size: .88em; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: .3em; }
th, td { border: 1px solid #d0d0d0; padding: .25em .55em; vertical-align: top; }
th { background: #f1f4f8; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafa; }
.table-wrap { overflow-x: auto; }
table.fit td { white-space: nowrap; }
table.fit td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 8em; }
figure { margin: 1em 0 1.5em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; }
"""

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def render_report(
    title: str, sections: Sequence[Section], *, generated_at: dt.datetime | str, intro: Sequence[Block] = ()
) -> str:
    """The HTML page as a string (deterministic for equal inputs).

    ``intro``: blocks shown under the title, before the contents (what the
    page holds, in a few lines).

    ``generated_at`` is printed as given (a datetime is shown in ISO 8601);
    it is a parameter, not ``now()``, so a rerun on the same inputs renders
    the same bytes. Raises ValueError for an image path that is not relative
    or a block of an unknown type.
    """
    if not isinstance(title, str) or not title.strip():
        raise ValueError("render_report: title must be a non-empty string")
    if isinstance(sections, Section):
        raise ValueError("render_report: sections must be a sequence of Section, not a single Section")
    for section in sections:
        if not isinstance(section, Section):
            raise ValueError(f"render_report: expected Section objects, got {type(section).__name__}")
    stamp = generated_at.isoformat() if isinstance(generated_at, dt.datetime | dt.date) else str(generated_at)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{_text(title)}</h1>",
        f'<p class="generated">Generated {_text(stamp)}</p>',
        *(_block(block) for block in intro),
    ]
    if sections:
        parts += [
            '<nav aria-label="Contents"><span class="label">Contents</span>',
            _contents(sections, prefix="s"),
            "</nav>",
        ]
    for number, section in enumerate(sections, start=1):
        parts.append(_section(section, anchor=f"s{number}", depth=2))
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def write_report(html_text: str, path: Path | str) -> bool:
    """Write the page atomically as UTF-8; False when the file was already identical."""
    if not isinstance(html_text, str):
        raise ValueError(f"write_report: expected the HTML as str, got {type(html_text).__name__}")
    return write_bytes_atomic(html_text.encode("utf-8"), Path(path))


def relative_src(image_path: Path | str, report_path: Path | str) -> str:
    """The path of ``image_path`` relative to the folder of ``report_path``, POSIX style.

    Use it to build :class:`Image` sources so the page works wherever the
    lake folder is moved.
    """
    relative = os.path.relpath(Path(image_path).resolve(), Path(report_path).resolve().parent)
    return PurePosixPath(*Path(relative).parts).as_posix()


def _contents(sections: Sequence[Section], prefix: str) -> str:
    items = []
    for number, section in enumerate(sections, start=1):
        anchor = f"{prefix}{number}" if prefix == "s" else f"{prefix}-{number}"
        nested = _contents(section.subsections, anchor) if section.subsections and section.list_subsections else ""
        items.append(f'<li><a href="#{anchor}">{_text(section.heading)}</a>{nested}</li>')
    return "<ul>" + "".join(items) + "</ul>"


def _section(section: Section, anchor: str, depth: int) -> str:
    level = min(depth, 6)
    heading = f"<h{level}>{_text(section.heading)}</h{level}>"
    if section.collapsed:
        note = f' <span class="summary">{_text(section.summary)}</span>' if section.summary else ""
        parts = [f'<section id="{anchor}">', f'<details class="section"><summary>{heading}{note}</summary>']
    else:
        parts = [f'<section id="{anchor}">', heading]
        if section.summary:
            parts.append(f"<p>{_text(section.summary)}</p>")
    for block in section.blocks:
        parts.append(_block(block))
    for number, subsection in enumerate(section.subsections, start=1):
        parts.append(_section(subsection, anchor=f"{anchor}-{number}", depth=depth + 1))
    if section.collapsed:
        parts.append("</details>")
    parts.append("</section>")
    return "\n".join(parts)


def _block(block: Block) -> str:
    if isinstance(block, str):
        block = Paragraph(block)
    if isinstance(block, Paragraph):
        return f"<p>{_text(block.text)}</p>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return _image(block)
    if isinstance(block, Details):
        opened = " open" if block.open else ""
        inner = "\n".join(_block(inner) for inner in block.blocks)
        return f"<details{opened}><summary>{_text(block.summary)}</summary>\n{inner}\n</details>"
    raise ValueError(
        f"render_report: unknown block type {type(block).__name__} (use Paragraph, Table, Image, Details or str)"
    )


def _table(table: Table) -> str:
    frame = table.frame
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"render_report: Table.frame must be a DataFrame, got {type(frame).__name__}")
    if table.index:
        frame = frame.reset_index()
    numeric = [pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype) for dtype in frame.dtypes]
    classes = [
        ' class="num"' if is_numeric else ' class="wrap"' if column in table.wrap else ""
        for column, is_numeric in zip(frame.columns, numeric)
    ]
    head = "".join(f'<th scope="col">{_text(column)}</th>' for column in frame.columns)
    body = []
    for row in frame.itertuples(index=False, name=None):
        cells = [
            f"<td{css}>{_text(_format_cell(value, table.digits, table.decimals))}</td>"
            for value, css in zip(row, classes)
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = f"<caption>{_text(table.caption)}</caption>" if table.caption else ""
    fit = ' class="fit"' if table.wrap else ""
    return (
        f'<div class="table-wrap"><table{fit}>{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _format_cell(value, digits: int, decimals: int | None = None) -> str:
    if value is None or value is pd.NA or value is pd.NaT:
        return "—"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return "—"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        return f"{float(value):.{decimals}f}" if decimals is not None else f"{float(value):.{digits}g}"
    return str(value)


def _image(image: Image) -> str:
    src = str(image.src)
    if not src or _SCHEME.match(src) or src.startswith(("/", "\\")) or "\\" in src or PurePosixPath(src).is_absolute():
        raise ValueError(
            f"render_report: image path {src!r} must be relative to the report (POSIX separators, "
            "no scheme), so the page works offline from the lake folder"
        )
    # Percent-encode each segment so spaces, '#' or '?' in partition names stay part of the path.
    encoded = "/".join(quote(segment, safe="") for segment in src.split("/"))
    caption = f"<figcaption>{_text(image.caption)}</figcaption>" if image.caption else ""
    return f'<figure><img src="{_attribute(encoded)}" alt="{_attribute(image.alt)}">{caption}</figure>'


def _text(value) -> str:
    return html.escape(str(value), quote=True)


def _attribute(value) -> str:
    return html.escape(str(value), quote=True)
