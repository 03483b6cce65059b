"""The report read the way a person reads it: opened from disk in headless Chromium.

Chromium (Debian's ``chromium`` package) is installed by the session fixture
when missing. The page is checked with a copy of it carrying a small checker
script (the report itself has no JavaScript): after the load event every
``<img>`` must be complete with a natural width, i.e. no broken image. A
screenshot of the unmodified page is kept in tests/artefacts/ (git-ignored
by the .gitignore the test writes there): ``report_screenshot.png`` of the report
``build_report`` writes over a lake, ``every_plot_screenshot.png`` of a page with
every plot the package draws.
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
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
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
            pytest.fail(f"{CHROMIUM} is missing and the tests are not running as root, so "
                        "`apt-get install -y chromium` cannot run; install the chromium package first")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        result = subprocess.run(install, capture_output=True, text=True, env=env)
        if result.returncode != 0:  # stale or empty package lists on a fresh machine
            subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env)
            result = subprocess.run(install, capture_output=True, text=True, env=env)
        if result.returncode != 0 or not Path(CHROMIUM).exists():
            pytest.fail("could not install Chromium with `apt-get install -y chromium` "
                        f"(exit {result.returncode}):\n{result.stderr[-2000:]}")
    return CHROMIUM


def run_chromium(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


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
    board = pd.DataFrame({"model": [HOSTILE_MODEL, "b"], "posterior_mean": [0.91, 0.8],
                          "hpdi_low": [0.85, 0.7], "hpdi_high": [0.95, np.nan]})
    sections = [
        Section("Suite arith", [f"{HOSTILE_MODEL} is likely better than b (P(A > B) = 0.93).",
                                Table(board, caption="Leaderboard")] + blocks[:5]),
        Section(f"Model {HOSTILE_MODEL}", blocks[5:]),
    ]
    write_report(render_report("Evaluation report", sections, generated_at=dt.datetime(2025, 1, 1)), report)
    return report, len(blocks)


def screenshot_to_artefacts(chromium: str, page: Path, tmp_path: Path, name: str) -> None:
    """Render ``page`` to a PNG, check it is not blank, and keep it in tests/artefacts/ as ``name``."""
    screenshot = tmp_path / name
    run_chromium(chromium, tmp_path, f"--screenshot={screenshot}", "--window-size=1280,2400", page.as_uri())
    with PILImage.open(screenshot) as shot:
        assert shot.size == (1280, 2400)
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
