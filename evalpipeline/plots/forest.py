"""Forest plot: posterior mean with HPDI beside the empirical mean +/- SEM.

Layout of HiBayES Figures 5, 6 and 9: one row per
parameter, a dot at the posterior mean, a thick line for the 95% HPDI and a
thin line for a wider interval ("width of the posterior"), and for comparison
the empirical (arithmetic) mean with its standard error drawn just below in
orange (red for the overall row, as in Figure 5). Rows are grouped by level
(overall, then domain, then subdomain, then any other level in order of first
appearance) with a labelled separator between groups.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from evalpipeline.plots._common import (
    EMPIRICAL_COLOR,
    OVERALL_EMPIRICAL_COLOR,
    POSTERIOR_COLOR,
    new_figure,
    numeric_column,
    require_columns,
    require_frame,
    require_ordered,
)

FOREST_REQUIRED = ("label", "posterior_mean", "hpdi_low", "hpdi_high")
FOREST_OPTIONAL = {
    "level": "group of the row: overall, domain, subdomain or any other name (default: one group)",
    "outer_low": "lower bound of a wider interval drawn as a thin line (e.g. 99% HPDI)",
    "outer_high": "upper bound of that wider interval",
    "empirical_mean": "arithmetic mean of the scores (NaN: not drawn for that row)",
    "empirical_sem": "standard error of that mean (NaN: drawn without a bar)",
}
LEVEL_ORDER = ("overall", "domain", "subdomain")


def nest_inside(low, high, outer_low, outer_high) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` clipped into ``(outer_low, outer_high)``: two HPDIs estimated from the same
    finite draws need not nest exactly (Monte Carlo error at the edges), which forest_plot refuses."""
    outer_low, outer_high = np.asarray(outer_low, dtype=float), np.asarray(outer_high, dtype=float)
    return np.maximum(np.asarray(low, dtype=float), outer_low), np.minimum(np.asarray(high, dtype=float), outer_high)


def forest_plot(
    rows: pd.DataFrame,
    *,
    title: str | None = None,
    xlabel: str = "success rate",
    hpdi_label: str = "95% HPDI",
    outer_label: str = "99% HPDI",
    reference: float | None = None,
) -> Figure:
    """Forest plot of posterior intervals with the empirical mean +/- SEM beside them.

    ``rows`` columns (one row per parameter, drawn top to bottom in order
    within its level group):

    - ``label`` (str): row label, e.g. ``"math / addition"``;
    - ``posterior_mean``, ``hpdi_low``, ``hpdi_high`` (float): posterior mean
      and the interval drawn thick (``hpdi_label``);
    - optional ``level`` (str): grouping, see module docstring;
    - optional ``outer_low``/``outer_high`` (float, both or neither): a wider
      interval drawn thin (``outer_label``), HiBayES's "width of the posterior";
    - optional ``empirical_mean`` and ``empirical_sem`` (float, NaN allowed):
      the conventional reading, drawn as a square with a +/- 1 SEM bar.

    ``reference`` draws a dashed vertical line (e.g. 0 on the logit scale of
    Figure 9). Raises ValueError naming missing or inconsistent columns.
    """
    what = "forest_plot"
    rows = require_frame(rows, what)
    require_columns(rows, FOREST_REQUIRED, what)
    has_outer = "outer_low" in rows.columns or "outer_high" in rows.columns
    if has_outer:
        require_columns(rows, ("outer_low", "outer_high"), what + " (outer interval)")
    if "empirical_sem" in rows.columns:
        require_columns(rows, ("empirical_mean",), what + " (empirical_sem given)")
    labels = [str(label) for label in rows["label"]]
    mean = numeric_column(rows, "posterior_mean", what)
    low = numeric_column(rows, "hpdi_low", what)
    high = numeric_column(rows, "hpdi_high", what)
    require_ordered(low, mean, labels, "hpdi_low", "posterior_mean", what)
    require_ordered(mean, high, labels, "posterior_mean", "hpdi_high", what)
    if has_outer:
        outer_low = numeric_column(rows, "outer_low", what)
        outer_high = numeric_column(rows, "outer_high", what)
        require_ordered(outer_low, low, labels, "outer_low", "hpdi_low", what)
        require_ordered(high, outer_high, labels, "hpdi_high", "outer_high", what)
    emp_mean = numeric_column(rows, "empirical_mean", what, allow_nan=True) if "empirical_mean" in rows else None
    emp_sem = numeric_column(rows, "empirical_sem", what, allow_nan=True) if "empirical_sem" in rows else None
    if emp_sem is not None and (emp_sem[~np.isnan(emp_sem)] < 0).any():
        raise ValueError(f"{what}: column empirical_sem must be non-negative")

    levels = rows["level"].astype("string").fillna("(none)").tolist() if "level" in rows else [""] * len(rows)
    order = _group_order(levels)

    # y positions top to bottom; one blank slot between groups for the group title.
    positions = np.empty(len(rows))
    group_titles: list[tuple[float, str]] = []
    y = 0.0
    for group in order:
        members = [i for i, level in enumerate(levels) if level == group]
        if group:
            group_titles.append((y, group))
            y += 1.0
        for i in members:
            positions[i] = y
            y += 1.0
    positions = -positions  # first row at the top
    offset = 0.22 if emp_mean is not None else 0.0

    figure = new_figure(7.0, 1.2 + 0.38 * y)
    axes = figure.add_subplot()
    if has_outer:
        axes.hlines(positions, outer_low, outer_high, color=POSTERIOR_COLOR, linewidth=1.0, label=outer_label)
    axes.hlines(positions, low, high, color=POSTERIOR_COLOR, linewidth=3.5, label=hpdi_label)
    axes.plot(mean, positions, "o", color=POSTERIOR_COLOR, markersize=6, label="posterior mean", zorder=3)

    handles = [
        Line2D([], [], color=POSTERIOR_COLOR, marker="o", linewidth=3.5, label=f"posterior mean, {hpdi_label}"),
    ]
    if has_outer:
        handles.append(Line2D([], [], color=POSTERIOR_COLOR, linewidth=1.0, label=outer_label))
    if emp_mean is not None:
        shown = ~np.isnan(emp_mean)
        sem = np.where(np.isnan(emp_sem), 0.0, emp_sem) if emp_sem is not None else np.zeros(len(rows))
        overall = np.array([level == "overall" for level in levels], dtype=bool)
        # one errorbar call per colour, not per row: a 100-LLM suite's forest drew ~100 containers
        for color, rows in ((OVERALL_EMPIRICAL_COLOR, shown & overall), (EMPIRICAL_COLOR, shown & ~overall)):
            if rows.any():
                axes.errorbar(
                    emp_mean[rows],
                    positions[rows] - offset,
                    xerr=sem[rows],
                    fmt="s",
                    color=color,
                    markersize=5,
                    capsize=3,
                    linewidth=1.5,
                )
        handles.append(Line2D([], [], color=EMPIRICAL_COLOR, marker="s", label="empirical mean ± SEM"))

    for title_y, group in group_titles:
        axes.text(
            0.005,
            -title_y,
            group,
            transform=axes.get_yaxis_transform(),
            fontweight="bold",
            va="center",
            ha="left",
            fontsize=9,
        )
        if title_y > 0:
            axes.axhline(-title_y + 0.5, color="#cccccc", linewidth=0.8)
    if reference is not None:
        axes.axvline(reference, color="#888888", linestyle="--", linewidth=1.0)

    top_down = np.argsort(-positions, kind="stable")
    axes.set_yticks(positions[top_down], [labels[i] for i in top_down])
    axes.set_ylim(-(y - 0.4), 0.6)
    axes.set_xlabel(xlabel)
    axes.grid(axis="x", color="#eeeeee")
    figure.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    if title:
        axes.set_title(title)
    return figure


def _group_order(levels: list[str]) -> list[str]:
    seen = list(dict.fromkeys(levels))
    known = [level for level in LEVEL_ORDER if level in seen]
    return known + [level for level in seen if level not in LEVEL_ORDER]
