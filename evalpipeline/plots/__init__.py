"""Plots as pure functions: documented tables or arrays in, a matplotlib Figure out.

No pyplot state, no Dagster; :func:`save_png` writes a figure to the lake
atomically with deterministic bytes. Each function's docstring lists its
input columns; bad input raises a ValueError naming what is wrong.
"""

from evalpipeline.plots._common import (
    PNG_DPI,
    PREVIEW_COLORS,
    close_figure,
    figure_png_bytes,
    png_preview,
    save_png,
    save_png_of,
)
from evalpipeline.plots.comparison import (
    HEATMAP_LABEL_LIMIT,
    leaderboard_plot,
    pairwise_heatmap,
    pairwise_matrix,
    waic_comparison_plot,
)
from evalpipeline.plots.diagnostics import trace_rank_plot
from evalpipeline.plots.forest import forest_plot, nest_inside
from evalpipeline.plots.planning import power_curve
from evalpipeline.plots.predictive import success_rate_distribution
from evalpipeline.plots.reliability import expected_reliability_plot, reliability_cdf_envelopes

__all__ = [
    "HEATMAP_LABEL_LIMIT",
    "PNG_DPI",
    "PREVIEW_COLORS",
    "close_figure",
    "expected_reliability_plot",
    "figure_png_bytes",
    "forest_plot",
    "nest_inside",
    "leaderboard_plot",
    "pairwise_heatmap",
    "pairwise_matrix",
    "png_preview",
    "power_curve",
    "reliability_cdf_envelopes",
    "save_png",
    "save_png_of",
    "success_rate_distribution",
    "trace_rank_plot",
    "waic_comparison_plot",
]
