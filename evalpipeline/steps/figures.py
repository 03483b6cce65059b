"""The figures of one model x suite partition, and of a suite's GLM fits, drawn when somebody asks.

A partition's GLM fits draw a trace, a forest and a predictive plot each (HiBayES Figures 4-7)
and its HIP-LLM assessment two (CDF envelopes and E[R(n)], Figures 3-8). On 2 cores they cost
~1.3 s a partition, about a third of the partition's nightly work and ~800 step seconds of a
600-partition rebuild (docs/performance.md), for pictures of fits that passed their numeric
checks and that few people open. A suite GLM's three figures cost ~6 s a suite at 100 models,
each night a model joins. So ``[plots]`` decides when they are drawn, ``partitions`` for the
partitions' figures and ``suite_fits`` for the suite GLMs':

* ``"on_request"`` (default): the nightly stores the numbers and draws the figures only of a GLM
  fit that failed a gating diagnostic (the one somebody will look at). The ``partition_plots``
  and ``suite_fit_plots`` assets -- materialised from the Dagster UI for the partitions wanted,
  or :func:`draw_partition_plots` and :func:`draw_suite_fit_plots` in a notebook -- draw them
  from the stored draws and tables: the same pictures as drawn at fit time. A refit removes the
  figures of the fit it replaces.
* ``"always"``: every fit and assessment draws them as it is computed, and a stored one that has
  none draws them at the next run.

The suites' comparison figures (leaderboard, pairwise heatmap, GLM forest of the model effects),
the WAIC rankings, the model profiles and the model-level reliability figures are drawn every
time in either mode: they are what people read in the morning. The setting is in no code version:
switching it refits nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from evalpipeline.steps.fits import (
    draw_fit_plots,
    partition_fit_dir,
    samples_content_hash,
    suite_fit_dir,
    suite_samples,
)
from evalpipeline.lake import Lake
from evalpipeline.steps.samples import NoDataError, read_samples

PLOT_MODES = ("on_request", "always")
DEFAULT_PLOT_MODE = "on_request"
#: the keys of ``[plots]``: what each mode applies to
PLOT_SCOPES = ("partitions", "suite_fits")


def draw_partition_plots(
    lake: Lake, model: str, suite: str, reliability_config, reliability_code: str = ""
) -> dict[str, Path]:
    """Draw the figures of every stored GLM fit of ``model`` x ``suite`` and of its reliability
    assessment, into their folders; returns ``{"<glm>/<plot>" or "reliability/<plot>": path}``.

    Each fit's figures use the reading of graded scores it was fitted with (its provenance).
    ``reliability_code`` is the code version the assessment was stored under (the ``reliability``
    asset's; "" for assessments made by :func:`evalpipeline.steps.reliability.assess_partition`
    without one). Raises :class:`evalpipeline.steps.samples.NoDataError` naming what to materialise
    first when a fit or the assessment is missing or was made from another sample table: figures
    of anything else than the current data would mislead.
    """
    from evalpipeline.models import GlmData, PARTITION_MODELS
    from evalpipeline.steps.reliability import draw_partition_reliability_plots

    samples_path = lake.table_path("samples", "samples.parquet", model, suite)
    if not samples_path.exists():
        raise NoDataError(f"no sample table for {model!r} x {suite!r}: {samples_path} does not exist")
    current = samples_content_hash(samples_path)
    drawn: dict[str, Path] = {}
    samples = None
    for glm in PARTITION_MODELS:
        directory = partition_fit_dir(lake, model, suite, glm)
        record = _provenance(directory)
        if record is None or record.get("status") != "fitted":
            continue  # not fitted (disabled, not applicable, never run): nothing to draw
        if (record.get("inputs") or {}).get("samples") != current:
            raise NoDataError(
                f"the stored fit of glm_{glm} for {model!r} x {suite!r} ({directory}) was made from an "
                f"earlier sample table: materialise glm_{glm} for the partition first"
            )
        if samples is None:
            samples = read_samples(lake, model, suite)
        graded, threshold = record["config"]["graded"]
        data = GlmData.from_samples(samples, graded=graded, graded_threshold=threshold)
        drawn.update({f"{glm}/{name}": path for name, path in draw_fit_plots(directory, data).items()})
    plots = draw_partition_reliability_plots(lake, model, suite, reliability_config, reliability_code)
    drawn.update({f"reliability/{name}": path for name, path in plots.items()})
    return drawn


def draw_suite_fit_plots(lake: Lake, suite: str) -> dict[str, Path]:
    """Draw the figures of every stored suite GLM fit of ``suite`` into its folder; returns
    ``{"<glm>/<plot>": path}``.

    As :func:`draw_partition_plots`: each fit is drawn with its own reading of graded scores, and a
    fit made from other sample tables than the suite's current ones (a model joined, a table
    changed) raises :class:`evalpipeline.steps.samples.NoDataError` naming the asset to materialise, as
    does a suite with no fitted suite GLM while one has not run yet for its current tables.
    Returns ``{}`` when every suite GLM is recorded as not applicable (left out of ``[glm] models``,
    or not applicable to these tables): there is nothing to draw, and nothing to do first;
    :func:`suite_fits_not_applicable` says why.
    """
    from evalpipeline.models import GlmData, SUITE_MODELS

    samples, hashes = suite_samples(lake, suite)  # raises the NoDataError of a suite without tables
    drawn: dict[str, Path] = {}
    for glm in SUITE_MODELS:
        directory = suite_fit_dir(lake, suite, glm)
        record = _provenance(directory)
        if record is None or record.get("status") != "fitted":
            continue
        if record.get("inputs") != hashes:
            raise NoDataError(
                f"the stored fit of suite_glm_{glm.removeprefix('suite_')} for suite {suite!r} "
                f"({directory}) was made from other sample tables than the suite's current ones: "
                f"materialise suite_glm_{glm.removeprefix('suite_')} for the suite first"
            )
        graded, threshold = record["config"]["graded"]
        data = GlmData.from_samples(samples, graded=graded, graded_threshold=threshold)
        drawn.update({f"{glm}/{name}": path for name, path in draw_fit_plots(directory, data).items()})
    # an empty success would read as "nothing to show" when nothing was fitted yet, so it is only
    # returned when every suite GLM says, for the current tables, that it does not apply
    if not drawn and len(_not_applicable(lake, suite, hashes)) < len(SUITE_MODELS):
        raise NoDataError(
            f"no stored suite GLM fit of suite {suite!r} under {suite_fit_dir(lake, suite, '')}: "
            "materialise the suite_glm_* assets for the suite first (those in [glm] models)"
        )
    return drawn


def suite_fits_not_applicable(lake: Lake, suite: str) -> dict[str, str]:
    """``{glm: reason}`` of the suite GLMs of ``suite`` recorded as not applicable to its current
    tables (a GLM left out of ``[glm] models`` is, whatever the tables)."""
    return _not_applicable(lake, suite, suite_samples(lake, suite)[1])


def _not_applicable(lake: Lake, suite: str, hashes) -> dict[str, str]:
    from evalpipeline.models import SUITE_MODELS

    reasons = {}
    for glm in SUITE_MODELS:
        record = _provenance(suite_fit_dir(lake, suite, glm))
        # a disabled GLM's record holds no inputs (it does not read the data); any other holds the
        # tables it judged, and is of no use once they changed
        if record and record.get("status") == "not applicable" and record.get("inputs") in (None, hashes):
            reasons[glm] = record.get("reason") or "not applicable"
    return reasons


def _provenance(directory: Path) -> dict | None:
    try:
        return json.loads((directory / "provenance.json").read_text())
    except (OSError, ValueError):
        return None
