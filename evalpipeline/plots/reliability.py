"""Reliability plots after HIP-LLM.

- :func:`reliability_cdf_envelopes`: Figures 3-7. For each panel (a
  subdomain, a domain, the LLM level, or a hyperparameter / operational-weight
  setting) and each series (usually a model), the band between the lower and
  upper posterior CDF of the non-failure probability over the admissible
  prior set. A narrow band: the data dominate; a wide one: the prior set
  matters.
- :func:`expected_reliability_plot`: Figure 8. (a) the envelope of
  E[R(n)], the posterior expected probability of n failure-free future tasks,
  against n on a log axis; (b) the envelope width (upper - lower) against n.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure

from evalpipeline.plots._common import (
    new_figure,
    numeric_column,
    require_columns,
    require_frame,
    require_probabilities,
)

SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
CDF_REQUIRED = ("panel", "series", "x", "cdf_lower", "cdf_upper")
EXPECTED_REQUIRED = ("series", "n", "expected_lower", "expected_upper")


def reliability_cdf_envelopes(
    envelopes: pd.DataFrame,
    *,
    xlabel: str = "non-failure probability",
    ncols: int = 2,
    title: str | None = None,
    group_title: str = "group",
) -> Figure:
    """Posterior CDF envelopes, one panel per ``panel`` value, one band per ``series``.

    ``envelopes`` columns (long format, one row per grid point):
    ``panel`` (str: e.g. ``"subdomain: math / addition"``; panels in order of
    first appearance), ``series`` (str: e.g. the model), ``x`` (float in
    [0, 1]: the reliability grid), ``cdf_lower`` and ``cdf_upper`` (float in
    [0, 1]: the lower and upper CDF at ``x``, ``cdf_lower <= cdf_upper``).
    Rows are sorted on ``x`` within each (panel, series) before drawing.

    Optional ``group`` (str, e.g. the domain of a subdomain): used when the
    figure has more series than :data:`SERIES_COLORS` has colours. Eight
    colours cannot tell 24 subdomains apart, and a 24-entry legend overflows
    its panel; so then each band takes its group's colour, the same in every
    panel, and a legend titled ``group_title`` lists the groups. Legends with
    more entries than colours are drawn outside the panel.
    """
    what = "reliability_cdf_envelopes"
    envelopes = require_frame(envelopes, what)
    require_columns(envelopes, CDF_REQUIRED, what)
    x = numeric_column(envelopes, "x", what)
    lower = numeric_column(envelopes, "cdf_lower", what)
    upper = numeric_column(envelopes, "cdf_upper", what)
    for column, values in (("x", x), ("cdf_lower", lower), ("cdf_upper", upper)):
        require_probabilities(values, column, what)
    bad = np.flatnonzero(lower > upper + 1e-9)
    if bad.size:
        raise ValueError(f"{what}: cdf_lower exceeds cdf_upper at {bad.size} row(s), first at x = {x[bad[0]]:.4g}")
    if ncols < 1:
        raise ValueError(f"{what}: ncols must be >= 1")
    series = envelopes["series"].astype(str).to_numpy()
    frame = pd.DataFrame(
        {"panel": envelopes["panel"].astype(str).to_numpy(), "series": series, "x": x, "lower": lower, "upper": upper}
    )
    crowded = len(set(series)) > len(SERIES_COLORS) and "group" in envelopes.columns
    # the colour (and legend entry) of each row: its series, or its group when the series are too many
    frame["key"] = envelopes["group"].astype(str).to_numpy() if crowded else series
    panels = list(dict.fromkeys(frame["panel"]))
    colors = _palette(list(dict.fromkeys(frame["key"])))

    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    figure = new_figure(4.6 * ncols, 0.6 + 3.4 * nrows)
    grid = figure.subplots(nrows, ncols, squeeze=False)
    for index, (panel, part) in enumerate(frame.groupby("panel", sort=False)):
        axes = grid.flat[index]
        handles: dict[str, object] = {}
        for (_, key), curve in part.groupby(["series", "key"], sort=False):
            curve = curve.sort_values("x", kind="stable")
            # one polygon with the two CDFs as its edge (straight segments: the CDFs come on a grid)
            band = axes.fill_between(
                curve["x"],
                curve["lower"],
                curve["upper"],
                facecolor=to_rgba(colors[key], 0.3),
                edgecolor=colors[key],
                linewidth=0.8,
                label=key,
            )
            handles.setdefault(key, band)
        axes.set_title(panel, fontsize=9)
        axes.set_ylim(0.0, 1.02)
        axes.set_xlabel(xlabel)
        axes.set_ylabel("posterior CDF")
        axes.grid(color="#eeeeee")
        grouped = crowded and len(handles) < part["series"].nunique()
        legend = {"title": group_title, "title_fontsize": 7} if grouped else {}
        if len(handles) <= len(SERIES_COLORS):
            axes.legend(handles.values(), handles.keys(), fontsize=7, loc="upper left", **legend)
        else:
            axes.legend(
                handles.values(),
                handles.keys(),
                fontsize=6,
                loc="upper left",
                bbox_to_anchor=(1.02, 1.0),
                ncols=-(-len(handles) // 24),
                **legend,
            )
    for axes in grid.flat[len(panels) :]:
        axes.set_visible(False)
    if title:
        figure.suptitle(title)
    return figure


def _palette(keys: list[str]) -> dict[str, str]:
    """A colour per key: :data:`SERIES_COLORS` for up to eight, matplotlib's tab20 (then cycling) beyond."""
    colors = SERIES_COLORS if len(keys) <= len(SERIES_COLORS) else tuple(to_hex(c) for c in colormaps["tab20"].colors)
    return {key: colors[i % len(colors)] for i, key in enumerate(keys)}


def expected_reliability_plot(curves: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Envelope of E[R(n)] against n and its width, HIP-LLM Figure 8 (a) and (b).

    ``curves`` columns (one row per series and horizon): ``series`` (str,
    e.g. model), ``n`` (positive integer: number of consecutive failure-free
    future tasks), ``expected_lower`` and ``expected_upper`` (float in [0, 1]:
    lower and upper posterior expectation of R(n) over the prior set);
    optional ``expected`` (float: a point value, e.g. at the nominal prior,
    drawn as a line inside the band).
    """
    what = "expected_reliability_plot"
    curves = require_frame(curves, what)
    require_columns(curves, EXPECTED_REQUIRED, what)
    n = numeric_column(curves, "n", what)
    if (n < 1).any() or (n != np.round(n)).any():
        raise ValueError(f"{what}: column n must hold positive integers")
    lower = numeric_column(curves, "expected_lower", what)
    upper = numeric_column(curves, "expected_upper", what)
    require_probabilities(lower, "expected_lower", what)
    require_probabilities(upper, "expected_upper", what)
    bad = np.flatnonzero(lower > upper + 1e-9)
    if bad.size:
        raise ValueError(
            f"{what}: expected_lower exceeds expected_upper at {bad.size} row(s), first at n = {n[bad[0]]:.0f}"
        )
    point = None
    if "expected" in curves.columns:
        point = numeric_column(curves, "expected", what, allow_nan=True)
        require_probabilities(point, "expected", what)
    frame = pd.DataFrame(
        {
            "series": curves["series"].astype(str).to_numpy(),
            "n": n,
            "lower": lower,
            "upper": upper,
            "point": point if point is not None else np.nan,
        }
    )
    series_names = list(dict.fromkeys(frame["series"]))

    figure = new_figure(11.0, 4.2)
    band_axes, width_axes = figure.subplots(1, 2)
    for i, name in enumerate(series_names):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        curve = frame[frame["series"] == name].sort_values("n", kind="stable")
        band_axes.fill_between(curve["n"], curve["lower"], curve["upper"], color=color, alpha=0.3, label=name)
        if point is not None and curve["point"].notna().any():
            band_axes.plot(curve["n"], curve["point"], color=color, linewidth=1.0)
        width_axes.plot(curve["n"], curve["upper"] - curve["lower"], color=color, marker=".", label=name)
    for axes in (band_axes, width_axes):
        axes.set_xscale("log")
        axes.set_xlabel("n: consecutive failure-free future tasks")
        axes.grid(color="#eeeeee")
        axes.legend(fontsize=7)
    band_axes.set_ylabel("E[R(n)] (lower to upper)")
    band_axes.set_ylim(0.0, 1.02)
    band_axes.set_title("(a) expected reliability envelope", fontsize=9)
    width_axes.set_ylabel("envelope width (upper - lower)")
    width_axes.set_title("(b) envelope width", fontsize=9)
    if title:
        figure.suptitle(title)
    return figure
