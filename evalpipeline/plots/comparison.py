"""Comparison plots: WAIC model comparison, pairwise P(A > B), leaderboard.

- :func:`waic_comparison_plot` follows HiBayES Figure 8,
  which is ArviZ's compare plot: one row per GLM, an open circle at its ELPD
  with a +/- SE bar, and for every model but the best a grey triangle at
  (best ELPD - difference) with the +/- SE of the difference; a dashed line
  marks the best model.
- :func:`pairwise_heatmap` shows a square table of P(row model > column model).
- :func:`leaderboard_plot` puts each model's Bayesian interval and a
  conventional interval side by side, as the issue's leaderboard asks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from evalpipeline.plots._common import (
    EMPIRICAL_COLOR,
    POSTERIOR_COLOR,
    new_figure,
    numeric_column,
    require_columns,
    require_frame,
    require_ordered,
    require_probabilities,
)

ELPD_COLUMNS = ("elpd_waic", "elpd_loo", "elpd")
DIFF_COLUMNS = ("elpd_diff", "d_waic", "d_loo")


def waic_comparison_plot(comparison: pd.DataFrame, *, title: str | None = None) -> Figure:
    """WAIC (or LOO) comparison of fitted models, HiBayES Figure 8 layout.

    ``comparison`` is shaped like ``arviz.compare`` output: model names in a
    ``model`` column or else the index; the ELPD in ``elpd_waic`` (or
    ``elpd_loo``/``elpd``); its standard error ``se``; the difference from the
    best model in ``elpd_diff`` (or ``d_waic``/``d_loo``) with standard error
    ``dse``; optional ``scale`` ("log", "negative_log" or "deviance"; default
    log). Rows are drawn best first in the order given by sorting on the
    difference. On the log scale higher is better; on the others lower is.
    """
    what = "waic_comparison_plot"
    comparison = require_frame(comparison, what)
    elpd_column = next((c for c in ELPD_COLUMNS if c in comparison.columns), None)
    diff_column = next((c for c in DIFF_COLUMNS if c in comparison.columns), None)
    missing = []
    if elpd_column is None:
        missing.append("elpd_waic (or elpd_loo/elpd)")
    if diff_column is None:
        missing.append("elpd_diff (or d_waic/d_loo)")
    missing += [c for c in ("se", "dse") if c not in comparison.columns]
    if missing:
        raise ValueError(
            f"{what}: missing column(s) {', '.join(missing)}; the table has {', '.join(map(str, comparison.columns))}"
        )
    names = [str(n) for n in (comparison["model"] if "model" in comparison.columns else comparison.index)]
    elpd = numeric_column(comparison, elpd_column, what)
    se = numeric_column(comparison, "se", what)
    diff = numeric_column(comparison, diff_column, what)
    dse = numeric_column(comparison, "dse", what)
    if (se < 0).any() or (dse < 0).any():
        raise ValueError(f"{what}: se and dse must be non-negative")
    scale = str(comparison["scale"].iloc[0]) if "scale" in comparison.columns else "log"
    if scale not in ("log", "negative_log", "deviance"):
        raise ValueError(f"{what}: unknown scale {scale!r} (expected log, negative_log or deviance)")

    order = np.argsort(np.abs(diff), kind="stable")  # best model (difference 0) first
    best = order[0]
    figure = new_figure(7.0, 1.3 + 0.55 * len(names))
    axes = figure.add_subplot()
    y = -np.arange(len(names), dtype=float)
    axes.errorbar(elpd[order], y, xerr=se[order], fmt="o", mfc="white", color="black", capsize=3, label="ELPD ± SE")
    others = order[1:]
    if others.size:
        # ArviZ draws the difference relative to the best model's ELPD.
        sign = 1.0 if scale == "log" else -1.0
        position = elpd[best] - sign * np.abs(diff[others])
        axes.errorbar(
            position,
            y[1:] + 0.25,
            xerr=dse[others],
            fmt="^",
            color="#777777",
            capsize=3,
            label="difference from best ± SE",
        )
    axes.axvline(elpd[best], color="#777777", linestyle="--", linewidth=1.0)
    axes.set_yticks(y, [names[i] for i in order])
    axes.set_ylim(y[-1] - 0.6, 0.8)
    metric = "WAIC" if elpd_column != "elpd_loo" and diff_column != "d_loo" else "LOO"
    better = "higher is better" if scale == "log" else "lower is better"
    axes.set_xlabel(f"ELPD ({metric}, {scale} scale; {better})")
    axes.grid(axis="x", color="#eeeeee")
    figure.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    if title:
        axes.set_title(title)
    return figure


def pairwise_matrix(
    pairs: pd.DataFrame, *, row: str = "model_a", column: str = "model_b", value: str = "p_a_better"
) -> pd.DataFrame:
    """Pivot a long pairwise table (one row per ordered pair) into a square matrix.

    Models missing a pair get NaN; both orders are filled when only one is
    given, using P(B > A) = 1 - P(A > B) (ties have probability zero for
    continuous posteriors).
    """
    what = "pairwise_matrix"
    pairs = require_frame(pairs, what)
    require_columns(pairs, (row, column, value), what)
    probability = numeric_column(pairs, value, what)
    require_probabilities(probability, value, what)
    models = list(dict.fromkeys([str(m) for m in pairs[row]] + [str(m) for m in pairs[column]]))
    position = {m: i for i, m in enumerate(models)}
    first = np.array([position[str(m)] for m in pairs[row]], dtype=np.intp)
    second = np.array([position[str(m)] for m in pairs[column]], dtype=np.intp)
    same = np.flatnonzero(first == second)
    if same.size:
        raise ValueError(f"{what}: model {models[first[same[0]]]!r} is compared with itself")
    values = np.full((len(models), len(models)), np.nan)
    values[first, second] = probability
    complement = np.full_like(values, np.nan)
    complement[second, first] = 1.0 - probability
    values = np.where(np.isnan(values), complement, values)  # a given order wins over a filled complement
    return pd.DataFrame(values, index=models, columns=models)


#: Above this many models a pairwise heatmap has no per-cell text and smaller cells: at 100 models the
#: labelled version was a 7,800 x 6,200 px PNG with 9,900 numbers that took ~14 s to draw and nobody
#: can read; the table has the numbers.
HEATMAP_LABEL_LIMIT = 25


def pairwise_heatmap(
    matrix: pd.DataFrame,
    *,
    title: str | None = None,
    value_label: str = "P(row model > column model)",
    label_limit: int = HEATMAP_LABEL_LIMIT,
) -> Figure:
    """Heatmap of a square table of P(A > B): rows A, columns B, diagonal NaN.

    ``matrix`` index and columns are the same model names in the same order
    (see :func:`pairwise_matrix`); values in [0, 1] or NaN (not compared).
    Colours diverge around 0.5. With at most ``label_limit`` models every cell
    carries its value as text; above it the cells shrink (0.6 inch down to 0.12)
    so that the figure stays a few thousand pixels wide and readable as a picture.
    """
    what = "pairwise_heatmap"
    matrix = require_frame(matrix, what)
    rows = [str(m) for m in matrix.index]
    columns = [str(m) for m in matrix.columns]
    if rows != columns:
        raise ValueError(
            f"{what}: the table must be square with the same models as rows and columns "
            f"in the same order (rows {rows}, columns {columns})"
        )
    try:
        values = matrix.to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what}: values must be numeric ({error})") from None
    require_probabilities(values, "P(A > B)", what)

    size = len(rows)
    labelled = size <= label_limit
    # room for the tick labels and the colourbar, so two models' labels and the title are not clipped
    label = max(len(r) for r in rows)
    cell = 0.6 if labelled else max(0.12, min(0.6, 14.0 / size))
    tick_size = None if labelled else max(5.0, min(8.0, 72 * cell * 0.8))
    # tick labels take ~0.07 inch per character at the default size
    label_inches = 0.07 * label * (1.0 if tick_size is None else tick_size / 10.0)
    figure = new_figure(max(5.5, 3.0 + 1.25 * cell * size + label_inches), 2.0 + cell * size + 0.8 * label_inches)
    axes = figure.add_subplot()
    image = axes.imshow(np.ma.masked_invalid(values), cmap="RdBu", vmin=0.0, vmax=1.0)
    if labelled:
        for i in range(size):
            for j in range(size):
                if not np.isnan(values[i, j]):
                    dark = abs(values[i, j] - 0.5) > 0.3
                    axes.text(
                        j,
                        i,
                        f"{values[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if dark else "black",
                    )
    axes.set_xticks(
        range(size), columns, rotation=30 if labelled else 90, ha="right" if labelled else "center", fontsize=tick_size
    )
    axes.set_yticks(range(size), rows, fontsize=tick_size)
    axes.set_xlabel("model B")
    axes.set_ylabel("model A")
    figure.colorbar(image, ax=axes, label=value_label, shrink=0.8)
    if title:
        axes.set_title(title, wrap=True)
    return figure


LEADERBOARD_REQUIRED = (
    "model",
    "posterior_mean",
    "hpdi_low",
    "hpdi_high",
    "observed_mean",
    "conventional_low",
    "conventional_high",
)


def leaderboard_plot(
    board: pd.DataFrame,
    *,
    bayesian_label: str = "posterior mean, 95% HPDI",
    conventional_label: str = "observed mean, 95% CLT interval",
    title: str | None = None,
    xlabel: str = "success rate",
) -> Figure:
    """Leaderboard: per model, the Bayesian interval and a conventional one side by side.

    ``board`` columns (one row per model, drawn top to bottom in the given
    order, so pass it ranked): ``model``; ``posterior_mean``, ``hpdi_low``,
    ``hpdi_high`` (drawn blue); ``observed_mean``, ``conventional_low``,
    ``conventional_high`` (drawn orange, unclipped so a CLT interval leaving
    [0, 1] shows as such; NaN: not drawn, e.g. no data); optional ``p_best`` (annotated at the right).
    """
    what = "leaderboard_plot"
    board = require_frame(board, what)
    require_columns(board, LEADERBOARD_REQUIRED, what)
    models = [str(m) for m in board["model"]]
    mean = numeric_column(board, "posterior_mean", what)
    low = numeric_column(board, "hpdi_low", what)
    high = numeric_column(board, "hpdi_high", what)
    # A model with no counted attempts has a posterior (the prior) but no conventional interval.
    observed = numeric_column(board, "observed_mean", what, allow_nan=True)
    conv_low = numeric_column(board, "conventional_low", what, allow_nan=True)
    conv_high = numeric_column(board, "conventional_high", what, allow_nan=True)
    require_ordered(low, high, models, "hpdi_low", "hpdi_high", what)
    require_ordered(conv_low, conv_high, models, "conventional_low", "conventional_high", what)
    p_best = None
    if "p_best" in board.columns:
        p_best = numeric_column(board, "p_best", what, allow_nan=True)
        require_probabilities(p_best, "p_best", what)

    figure = new_figure(7.5, 1.3 + 0.6 * len(models))
    axes = figure.add_subplot()
    y = -np.arange(len(models), dtype=float)
    axes.hlines(y + 0.15, low, high, color=POSTERIOR_COLOR, linewidth=3.0)
    axes.plot(mean, y + 0.15, "o", color=POSTERIOR_COLOR)
    axes.hlines(y - 0.15, conv_low, conv_high, color=EMPIRICAL_COLOR, linewidth=3.0)
    axes.plot(observed, y - 0.15, "s", color=EMPIRICAL_COLOR)
    # Mark [0, 1] only when an interval leaves it, so the scale stays readable otherwise.
    if np.nanmin(np.append(conv_low, low)) < 0.0:
        axes.axvline(0.0, color="#999999", linewidth=0.8, linestyle=":")
    if np.nanmax(np.append(conv_high, high)) > 1.0:
        axes.axvline(1.0, color="#999999", linewidth=0.8, linestyle=":")
    if p_best is not None:
        for yi, p in zip(y, p_best):
            if not np.isnan(p):
                axes.text(1.01, yi, f"P(best) {p:.2f}", transform=axes.get_yaxis_transform(), va="center", fontsize=8)
    axes.set_yticks(y, models)
    axes.set_ylim(y[-1] - 0.6, 0.6)
    axes.set_xlabel(xlabel)
    axes.grid(axis="x", color="#eeeeee")
    handles = [
        Line2D([], [], color=POSTERIOR_COLOR, marker="o", linewidth=3.0, label=bayesian_label),
        Line2D([], [], color=EMPIRICAL_COLOR, marker="s", linewidth=3.0, label=conventional_label),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    if title:
        axes.set_title(title)
    return figure
