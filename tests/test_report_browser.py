"""The report read the way a person reads it: opened from disk in headless Chromium.

Chromium (Debian's ``chromium`` package) is installed by the session fixture
when missing. The page is checked with a copy of it carrying a small checker
script (the report itself has no JavaScript): after the load event every
``<img>`` must be complete with a natural width, i.e. no broken image. A
screenshot of the unmodified page is kept in tests/artefacts/ (git-ignored
by the .gitignore the test writes there): ``report_screenshot.png`` of the report
``build_report`` writes over a lake, ``every_plot_screenshot.png`` of a page with
every plot the package draws, ``report_100_models_screenshot.png`` (the whole page) and
``report_100_models_first_screen.png`` (its first 1280 x 800 screen) of the report of a lake of 100
models on three suites.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image as PILImage

from evalpipeline import plots
from evalpipeline.report.html import Image, Section, Table, relative_src, render_report, write_report
from tests.test_plots import all_figures

ARTEFACTS = Path(__file__).resolve().parent / "artefacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
CHECKER = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (img) {
    return {src: img.getAttribute("src"), complete: img.complete, width: img.naturalWidth};
  });
  document.getElementById("image-check").textContent = JSON.stringify(images);
});
</script><pre id="image-check"></pre>"""
HOSTILE_MODEL = """m<1> & "q" 'x'"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a Chromium binary, installing Debian's package when absent."""
    if not Path(CHROMIUM).exists():
        if os.geteuid() != 0:
            pytest.fail(
                f"{CHROMIUM} is missing and the tests are not running as root, so "
                "`apt-get install -y chromium` cannot run; install the chromium package first"
            )
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        result = subprocess.run(install, capture_output=True, text=True, env=env)
        if result.returncode != 0:  # stale or empty package lists on a fresh machine
            subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env)
            result = subprocess.run(install, capture_output=True, text=True, env=env)
        if result.returncode != 0 or not Path(CHROMIUM).exists():
            pytest.fail(
                "could not install Chromium with `apt-get install -y chromium` "
                f"(exit {result.returncode}):\n{result.stderr[-2000:]}"
            )
    return CHROMIUM


def run_chromium(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def image_check(chromium: str, page: Path, tmp_path: Path) -> list[dict]:
    """Load ``page`` (via a sibling copy with the checker) and return each image's load state."""
    probe = page.with_name(".probe-" + page.name)
    source = page.read_text(encoding="utf-8")
    probe.write_text(source.replace("</body>", CHECKER + "</body>"), encoding="utf-8")
    try:
        dom = run_chromium(chromium, tmp_path, "--dump-dom", probe.as_uri()).stdout
    finally:
        probe.unlink()
    found = re.search(r'<pre id="image-check">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), f"the checker did not run; DOM was:\n{dom[:2000]}"
    return json.loads(html.unescape(found.group(1)))


LAYOUT_CHECK = """<script>
window.addEventListener("load", function () {
  var board = document.querySelector("section table.fit");
  var row = board && board.querySelector("tbody tr");
  var fits = Array.prototype.map.call(document.querySelectorAll("table.fit"), function (table) {
    return {scroll: table.parentElement.scrollWidth, client: table.parentElement.clientWidth};
  });
  var models = document.querySelectorAll("details.section");
  document.getElementById("layout-check").textContent = JSON.stringify({
    viewport: [window.innerWidth, window.innerHeight],
    first_row_bottom: row ? row.getBoundingClientRect().bottom + window.scrollY : null,
    first_row_text: row ? row.textContent : null,
    fit_tables: fits,
    page_scroll_width: document.documentElement.scrollWidth,
    models: models.length,
    models_open: Array.prototype.filter.call(models, function (d) { return d.open; }).length,
    models_content_shown: Array.prototype.filter.call(models, function (d) {
      var table = d.querySelector("table");
      return table && table.checkVisibility();
    }).length,
    height: document.documentElement.scrollHeight
  });
});
</script><pre id="layout-check"></pre>"""


def layout_check(chromium: str, page: Path, tmp_path: Path, width: int = 1280, height: int = 800) -> dict:
    """Load ``page`` at ``width`` x ``height`` (via a sibling copy with the checker) and measure its layout:
    where the first leaderboard's first row ends, each page-width table's scroll and client widths, the
    collapsed model sections, the page's height."""
    probe = page.with_name(".layout-" + page.name)
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", LAYOUT_CHECK + "</body>"), encoding="utf-8")
    try:
        dom = run_chromium(chromium, tmp_path, f"--window-size={width},{height}", "--dump-dom", probe.as_uri()).stdout
    finally:
        probe.unlink()
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), f"the checker did not run; DOM was:\n{dom[:2000]}"
    return json.loads(html.unescape(found.group(1)))


def build_lake_report(lake: Path, *, missing_image: bool = False) -> tuple[Path, int]:
    """A report under ``lake/report/`` whose plots live in ``lake/plots/``, as the pipeline lays them out."""
    report = lake / "report" / "index.html"
    blocks = []
    for name, figure in all_figures().items():
        path = lake / "plots" / f"model={HOSTILE_MODEL}" / "suite=arith" / f"{name}.png"
        plots.save_png(figure, path)
        blocks.append(Image(relative_src(path, report), alt=f"{name} for {HOSTILE_MODEL}", caption=name))
    if missing_image:
        blocks.append(Image("../plots/never-written.png", alt="missing"))
    board = pd.DataFrame(
        {
            "model": [HOSTILE_MODEL, "b"],
            "posterior_mean": [0.91, 0.8],
            "hpdi_low": [0.85, 0.7],
            "hpdi_high": [0.95, np.nan],
        }
    )
    sections = [
        Section(
            "Suite arith",
            [f"{HOSTILE_MODEL} is likely better than b (P(A > B) = 0.93).", Table(board, caption="Leaderboard")]
            + blocks[:5],
        ),
        Section(f"Model {HOSTILE_MODEL}", blocks[5:]),
    ]
    write_report(render_report("Evaluation report", sections, generated_at=dt.datetime(2025, 1, 1)), report)
    return report, len(blocks)


def screenshot_to_artefacts(chromium: str, page: Path, tmp_path: Path, name: str, height: int = 2400) -> None:
    """Render ``page`` 1280 px wide and ``height`` px tall to a PNG, check it is not blank, and keep it in
    tests/artefacts/ as ``name``."""
    screenshot = tmp_path / name
    run_chromium(chromium, tmp_path, f"--screenshot={screenshot}", f"--window-size=1280,{height}", page.as_uri())
    with PILImage.open(screenshot) as shot:
        assert shot.size == (1280, height)
        pixels = np.asarray(shot.convert("L"))
    assert pixels.std() > 20, "the screenshot is blank"
    ARTEFACTS.mkdir(exist_ok=True)
    (ARTEFACTS / ".gitignore").write_text("*\n")
    shutil.copyfile(screenshot, ARTEFACTS / name)


def test_the_lake_report_renders_with_every_image_in_chromium(chromium, tmp_path):
    """The report the ``report`` asset writes (build_report over a lake of comparisons and reliability)."""
    from evalpipeline.report.build import build_report
    from tests.test_report_builder import make_report_lake

    report = build_report(make_report_lake(tmp_path / "lake"), "2026-01-02T03:04:05")
    expected = re.findall(r'<img src="([^"]+)"', report.read_text(encoding="utf-8"))
    images = image_check(chromium, report, tmp_path)
    assert len(images) == len(expected) >= 7
    broken = [image["src"] for image in images if not image["complete"] or image["width"] <= 0]
    assert not broken, f"broken images: {broken}"
    screenshot_to_artefacts(chromium, report, tmp_path, "report_screenshot.png")


def test_report_shows_every_plot_in_chromium_and_keep_a_screenshot(chromium, tmp_path):
    report, n_images = build_lake_report(tmp_path / "lake")
    images = image_check(chromium, report, tmp_path)
    assert len(images) == n_images
    broken = [image["src"] for image in images if not image["complete"] or image["width"] <= 0]
    assert not broken, f"broken images: {broken}"
    # the browser decoded the very PNGs the plot functions wrote
    widths = sorted(image["width"] for image in images)
    png_widths = sorted(PILImage.open(p).width for p in (tmp_path / "lake" / "plots").rglob("*.png"))
    assert widths == png_widths

    screenshot_to_artefacts(chromium, report, tmp_path, "every_plot_screenshot.png")


def test_image_check_catches_a_broken_image(chromium, tmp_path):
    """The harness can fail: a report pointing at a PNG that was never written is caught."""
    report, n_images = build_lake_report(tmp_path / "lake", missing_image=True)
    images = image_check(chromium, report, tmp_path)
    assert len(images) == n_images
    broken = [image["src"] for image in images if not image["complete"] or image["width"] <= 0]
    assert broken == ["../plots/never-written.png"]


def test_a_report_of_a_hundred_models_leads_with_a_leaderboard_that_fits_the_page(chromium, tmp_path):
    """At leaderboard scale (100 models, 3 suites) in a 1280 x 800 window: the first suite's leaderboard
    starts on the first screen, no leaderboard scrolls sideways, every model's section is closed."""
    from evalpipeline.report.build import build_report
    from tests.test_report_builder import make_leaderboard_scale_lake

    report = build_report(make_leaderboard_scale_lake(tmp_path / "lake", n_models=100), "2026-01-02T03:04:05")
    layout = layout_check(chromium, report, tmp_path)
    assert layout["first_row_text"].startswith("1vendor-")  # rank 1 of the first suite's leaderboard
    assert layout["first_row_bottom"] <= min(800, layout["viewport"][1]), layout
    # the summary's table of each suite's leader and the three leaderboards, each within its container
    assert len(layout["fit_tables"]) == 4
    assert all(table["scroll"] <= table["client"] for table in layout["fit_tables"]), layout["fit_tables"]
    assert layout["page_scroll_width"] <= 1280
    assert (layout["models"], layout["models_open"], layout["models_content_shown"]) == (100, 0, 0)
    height = layout["height"]
    assert height < 20_000  # 100 models x 3 suites: the leaderboards and one line per model
    screenshot_to_artefacts(chromium, report, tmp_path, "report_100_models_screenshot.png", height=height)
    screenshot_to_artefacts(chromium, report, tmp_path, "report_100_models_first_screen.png", height=800)


def test_layout_check_catches_links_first_and_a_leaderboard_that_scrolls_sideways(chromium, tmp_path):
    """The harness can fail: 100 model sections listed before the suite, three of them open, and a
    leaderboard of every column, whose cells may not wrap, wider than the page."""
    from evalpipeline.report.build import LEADERBOARD_SHOWN

    wide = pd.DataFrame({column: [f"{column} of model {i}" for i in range(100)] for column in LEADERBOARD_SHOWN})
    profile = Table(pd.DataFrame({"suite": ["a"], "mean": [0.5]}))
    models = [Section(f"Model {i}", [profile], collapsed=True) for i in range(100)]
    report = tmp_path / "report" / "index.html"
    page = render_report(
        "Evaluation report", [*models, Section("Suite a", [Table(wide, wrap=("model",))])], generated_at="t"
    )
    write_report(page.replace('<details class="section">', '<details class="section" open>', 3), report)
    layout = layout_check(chromium, report, tmp_path)
    assert layout["first_row_bottom"] > 800
    assert [table["scroll"] > table["client"] for table in layout["fit_tables"]] == [True]
    assert (layout["models"], layout["models_open"], layout["models_content_shown"]) == (100, 3, 3)
