"""Per-item success-rate distribution, observed against the posterior predictive.

HiBayES Figure 7 is a histogram of per-task success rates
averaged over repeats; its point is the bimodal pile-up at 0 and 1 that a
Binomial GLM cannot reproduce and a Beta-Binomial GLM can. Here the observed
histogram is drawn as bars and, when given, the posterior predictive as the
median count per bin with a 90% band across draws, so the misfit is visible.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.lines import Line2D

from evalpipeline.plots._common import EMPIRICAL_COLOR, POSTERIOR_COLOR, new_figure


def success_rate_distribution(
    observed,
    predicted=None,
    *,
    n_trials: int | None = None,
    bins: int = 10,
    band: float = 0.9,
    title: str | None = None,
) -> Figure:
    """Histogram of per-item success rates with posterior predictive counts.

    ``observed``: 1-D array of per-item success rates in [0, 1] (mean score
    over an item's repeats). ``predicted``: optional 2-D array
    ``(n_draws, n_items)`` of the same rates replicated from the posterior
    predictive (same items, same repeats). ``n_trials``: repeats per item;
    when given, bins are centred on the attainable rates k / n_trials, else
    ``bins`` equal-width bins over [0, 1]. ``band``: mass of the predictive
    band (central interval of the per-bin counts across draws).
    """
    what = "success_rate_distribution"
    observed = _rates(observed, "observed", what)
    if observed.ndim != 1 or observed.size == 0:
        raise ValueError(f"{what}: observed must be a non-empty 1-D array of per-item rates")
    if predicted is not None:
        predicted = _rates(predicted, "predicted", what)
        if predicted.ndim != 2 or predicted.shape[1] != observed.size or predicted.shape[0] < 1:
            raise ValueError(
                f"{what}: predicted must have shape (n_draws, {observed.size}) to match observed, got {predicted.shape}"
            )
    if not 0 < band < 1:
        raise ValueError(f"{what}: band must be in (0, 1), got {band}")
    if n_trials is not None:
        if int(n_trials) != n_trials or n_trials < 1:
            raise ValueError(f"{what}: n_trials must be a positive integer, got {n_trials}")
        edges = (np.arange(int(n_trials) + 2) - 0.5) / int(n_trials)
    else:
        if bins < 1:
            raise ValueError(f"{what}: bins must be >= 1, got {bins}")
        edges = np.linspace(0.0, 1.0, bins + 1)

    figure = new_figure(6.5, 4.0)
    axes = figure.add_subplot()
    counts, _ = np.histogram(observed, bins=edges)
    axes.bar(
        edges[:-1], counts, width=np.diff(edges), align="edge", color=EMPIRICAL_COLOR, edgecolor="white", alpha=0.85
    )
    handles = [Patch(color=EMPIRICAL_COLOR, label=f"observed ({observed.size} items)")]
    if predicted is not None:
        replicated = np.stack([np.histogram(draw, bins=edges)[0] for draw in predicted])
        tail = (1.0 - band) / 2.0
        lower, median, upper = np.quantile(replicated, [tail, 0.5, 1.0 - tail], axis=0)
        centres = (edges[:-1] + edges[1:]) / 2.0
        axes.errorbar(centres, median, yerr=[median - lower, upper - median], fmt="o", color=POSTERIOR_COLOR, capsize=3)
        handles.append(
            Line2D(
                [],
                [],
                color=POSTERIOR_COLOR,
                marker="o",
                label=f"posterior predictive median, {band:.0%} band ({len(predicted)} draws)",
            )
        )
    axes.set_xlim(edges[0], edges[-1])
    axes.set_xlabel("success rate per item (mean over repeats)")
    axes.set_ylabel("number of items")
    axes.legend(handles=handles, fontsize=8, loc="upper center")
    if title:
        axes.set_title(title)
    return figure


def _rates(values, name, what) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what}: {name} must be numeric ({error})") from None
    if not np.isfinite(array).all():
        raise ValueError(f"{what}: {name} has missing or infinite values")
    if array.size and (array.min() < 0 or array.max() > 1):
        raise ValueError(f"{what}: {name} rates must lie in [0, 1] (found {array.min():.4g} to {array.max():.4g})")
    return array
