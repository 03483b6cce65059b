"""Power curve for planning (the measurement post, section 6).

Power (the probability that the decision rule declares the better model
better) against the number of questions n, one line per true gap, with the
target power as a dashed line and the smallest simulated n reaching it marked.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from evalpipeline.plots._common import (
    TARGET_COLOR,
    new_figure,
    numeric_column,
    require_columns,
    require_frame,
    require_probabilities,
    require_ordered,
)

SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
POWER_REQUIRED = ("gap", "n", "power")


def power_curve(
    curves: pd.DataFrame,
    *,
    target_power: float = 0.8,
    title: str | None = None,
    xlabel: str = "questions per model (n)",
    log_x: bool = False,
) -> Figure:
    """Power against n for one or several gaps.

    ``curves`` columns (one row per gap and n): ``gap`` (the true accuracy
    difference, a number or a label; one line each, labelled "gap <value>"),
    ``n`` (positive number of questions), ``power`` (in [0, 1]); optional
    ``power_low`` and ``power_high`` (both or neither: a Monte Carlo interval
    for the simulated power, drawn as a band). ``target_power`` in (0, 1) is
    drawn dashed; the first n whose power reaches it is marked per gap.
    """
    what = "power_curve"
    curves = require_frame(curves, what)
    require_columns(curves, POWER_REQUIRED, what)
    if not 0 < target_power < 1:
        raise ValueError(f"{what}: target_power must be in (0, 1), got {target_power}")
    n = numeric_column(curves, "n", what)
    if (n <= 0).any():
        raise ValueError(f"{what}: column n must be positive")
    power = numeric_column(curves, "power", what)
    require_probabilities(power, "power", what)
    has_band = "power_low" in curves.columns or "power_high" in curves.columns
    if has_band:
        require_columns(curves, ("power_low", "power_high"), what + " (power band)")
        power_low = numeric_column(curves, "power_low", what)
        power_high = numeric_column(curves, "power_high", what)
        labels = [f"gap {g}, n {v:g}" for g, v in zip(curves["gap"], n)]
        require_ordered(power_low, power_high, labels, "power_low", "power_high", what)
    frame = pd.DataFrame(
        {
            "gap": curves["gap"].to_numpy(),
            "n": n,
            "power": power,
            "low": power_low if has_band else np.nan,
            "high": power_high if has_band else np.nan,
        }
    )

    figure = new_figure(6.5, 4.2)
    axes = figure.add_subplot()
    for i, gap in enumerate(dict.fromkeys(frame["gap"])):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        curve = frame[frame["gap"] == gap].sort_values("n", kind="stable")
        axes.plot(curve["n"], curve["power"], marker="o", markersize=3, color=color, label=f"gap {gap}")
        if has_band:
            axes.fill_between(curve["n"], curve["low"], curve["high"], color=color, alpha=0.2)
        reached = curve[curve["power"] >= target_power]
        if not reached.empty:
            first = float(reached["n"].iloc[0])
            axes.axvline(first, color=color, linestyle=":", linewidth=1.0)
            axes.annotate(
                f"n = {first:g}",
                (first, target_power),
                xytext=(3, -12),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
    axes.axhline(
        target_power, color=TARGET_COLOR, linestyle="--", linewidth=1.0, label=f"target power {target_power:g}"
    )
    if log_x:
        axes.set_xscale("log")
    axes.set_ylim(0.0, 1.02)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("power")
    axes.grid(color="#eeeeee")
    axes.legend(fontsize=8, loc="lower right")
    if title:
        axes.set_title(title)
    return figure
