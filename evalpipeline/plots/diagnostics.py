"""MCMC convergence plots: per-chain densities, traces and rank plots.

HiBayES Figure 4: one row per parameter, the left column
the sampling distribution of each chain, the right column the trace; vector
parameters (e.g. ``domain_effects``) draw one colour per component. A third
column adds the rank plot (ranks of all draws pooled over chains, histogrammed
per chain): under convergence every chain's ranks are uniform, so its bars
stay near the dashed uniform line. Plain matplotlib and numpy; no arviz
plotting backend is involved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from scipy.stats import rankdata

from evalpipeline.plots._common import new_figure

COMPONENT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
CHAIN_STYLES = ("-", "--", ":", "-.")


def trace_rank_plot(
    idata,
    var_names: Sequence[str] | None = None,
    *,
    max_components: int = 8,
    rank_bins: int = 20,
    title: str | None = None,
) -> Figure:
    """Density, trace and rank plots, one row per posterior variable.

    ``idata`` is an ArviZ ``InferenceData`` with a ``posterior`` group (or an
    ``xarray.Dataset`` of posterior draws) whose variables have leading
    dimensions ``(chain, draw)``. ``var_names`` picks variables (default: all,
    in the dataset's order). A vector or matrix variable is flattened; at
    most ``max_components`` components are drawn (the first ones), noted in
    the row title. Ranks for the rank column are computed per component over
    all chains and pooled across the drawn components (each is uniform under
    convergence, so is their pool).
    """
    what = "trace_rank_plot"
    posterior = _posterior_dataset(idata, what)
    available = list(posterior.data_vars)
    if var_names is None:
        var_names = available
    else:
        var_names = [str(name) for name in var_names]
        missing = [name for name in var_names if name not in available]
        if missing:
            raise ValueError(
                f"{what}: variable(s) {', '.join(missing)} not in the posterior (has {', '.join(available)})"
            )
    if not var_names:
        raise ValueError(f"{what}: the posterior has no variables")
    if max_components < 1 or rank_bins < 2:
        raise ValueError(f"{what}: max_components must be >= 1 and rank_bins >= 2")

    figure = new_figure(11.0, 0.6 + 2.0 * len(var_names))
    grid = figure.subplots(len(var_names), 3, squeeze=False)
    for row, name in enumerate(var_names):
        draws, total = _draws(posterior[name], name, what, max_components)
        n_chains, n_draws, n_components = draws.shape
        density_axes, trace_axes, rank_axes = grid[row]
        pooled_ranks = np.empty((n_chains, 0))
        for component in range(n_components):
            color = COMPONENT_COLORS[component % len(COMPONENT_COLORS)]
            values = draws[:, :, component]
            edges = _edges(values)
            for chain in range(n_chains):
                style = CHAIN_STYLES[chain % len(CHAIN_STYLES)]
                density, _ = np.histogram(values[chain], bins=edges, density=True)
                density_axes.stairs(density, edges, color=color, linestyle=style, linewidth=1.0)
                trace_axes.plot(np.arange(n_draws), values[chain], color=color, linewidth=0.5, alpha=0.7)
            ranks = rankdata(values.ravel()).reshape(values.shape)
            pooled_ranks = np.concatenate([pooled_ranks, ranks], axis=1)
        rank_edges = np.linspace(0.5, n_chains * n_draws + 0.5, rank_bins + 1)
        for chain in range(n_chains):
            counts, _ = np.histogram(pooled_ranks[chain], bins=rank_edges)
            rank_axes.stairs(
                counts,
                rank_edges,
                color=COMPONENT_COLORS[chain % len(COMPONENT_COLORS)],
                linewidth=1.2,
                label=f"chain {chain}",
            )
        rank_axes.axhline(n_draws * n_components / rank_bins, color="#888888", linestyle="--", linewidth=0.8)
        shown = f"{name} (first {n_components} of {total})" if n_components < total else name
        density_axes.set_title(shown, fontsize=9, loc="left")
        trace_axes.set_title(f"{name}: trace", fontsize=9, loc="left")
        rank_axes.set_title(f"{name}: rank plot", fontsize=9, loc="left")
        density_axes.set_yticks([])
        rank_axes.set_yticks([])
        if row == len(var_names) - 1:
            trace_axes.set_xlabel("draw")
            rank_axes.set_xlabel("rank (all chains)")
    if title:
        figure.suptitle(title)
    return figure


def _posterior_dataset(idata, what):
    posterior = getattr(idata, "posterior", None)
    if posterior is None:
        if hasattr(idata, "data_vars"):
            posterior = idata
        else:
            raise ValueError(
                f"{what}: expected an InferenceData with a posterior group or an xarray Dataset, "
                f"got {type(idata).__name__}"
            )
    missing = [dim for dim in ("chain", "draw") if dim not in posterior.dims]
    if missing:
        raise ValueError(f"{what}: the posterior lacks dimension(s) {', '.join(missing)}")
    return posterior


def _draws(variable, name, what, max_components):
    """(chain, draw, component) float array, trimmed to ``max_components``."""
    other = [dim for dim in variable.dims if dim not in ("chain", "draw")]
    values = np.asarray(variable.transpose("chain", "draw", *other).values, dtype=float)
    n_chains, n_draws = values.shape[:2]
    values = values.reshape(n_chains, n_draws, -1)
    if n_draws < 2:
        raise ValueError(f"{what}: variable {name} has fewer than 2 draws per chain")
    if not np.isfinite(values).all():
        raise ValueError(f"{what}: variable {name} has non-finite draws")
    total = values.shape[2]
    return values[:, :, :max_components], total


def _edges(values: np.ndarray) -> np.ndarray:
    low, high = float(values.min()), float(values.max())
    if high <= low:  # a constant parameter still gets a visible bar
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, 31)
