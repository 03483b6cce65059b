"""Plots: each function on small synthetic input draws what its inputs say, refuses bad input by name,
and save_png writes deterministic PNG bytes atomically."""

from __future__ import annotations

import io
import subprocess
import sys

import arviz as az
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle, StepPatch
from PIL import Image as PILImage
from scipy import stats

from evalpipeline import plots


# ---------------------------------------------------------------- synthetic inputs (also used by the report tests)


def forest_rows() -> pd.DataFrame:
    rows = pd.DataFrame(
        {
            "label": [
                "math / addition",
                "overall",
                "math",
                "language",
                "math / division",
                "language / <poetry & 'prose'>",
            ],
            "level": ["subdomain", "overall", "domain", "domain", "subdomain", "subdomain"],
            "posterior_mean": [0.80, 0.62, 0.70, 0.50, 0.55, 0.45],
        }
    )
    rows["hpdi_low"] = rows["posterior_mean"] - 0.05
    rows["hpdi_high"] = rows["posterior_mean"] + 0.05
    rows["outer_low"] = rows["posterior_mean"] - 0.08
    rows["outer_high"] = rows["posterior_mean"] + 0.08
    rows["empirical_mean"] = rows["posterior_mean"] + 0.02
    rows.loc[4, "empirical_mean"] = np.nan  # a row without data: no empirical marker
    rows["empirical_sem"] = 0.03
    return rows


def posterior_idata(shift_chain: float = 0.0, n_chains: int = 4, n_draws: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(n_chains, n_draws))
    mu[0] += shift_chain  # a chain stuck elsewhere when shift_chain != 0
    effects = rng.normal(size=(n_chains, n_draws, 2)) + np.array([0.0, 1.0])
    return az.from_dict(posterior={"mu": mu, "domain_effects": effects})


def waic_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": [0, 1, 2],
            "elpd_waic": [-100.0, -110.0, -130.0],
            "p_waic": [3.0, 2.0, 1.0],
            "elpd_diff": [0.0, 10.0, 30.0],
            "weight": [0.9, 0.1, 0.0],
            "se": [5.0, 5.0, 6.0],
            "dse": [0.0, 3.0, 5.0],
            "warning": False,
            "scale": "log",
        },
        index=["beta-binomial", "binomial", "null"],
    )


def pairwise_long() -> pd.DataFrame:
    return pd.DataFrame(
        {"model_a": ["a<1>", "a<1>", "b&2"], "model_b": ["b&2", "c", "c"], "p_a_better": [0.9, 0.6, 0.2]}
    )


def leaderboard_rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["a", "b", "c"],
            "posterior_mean": [0.9, 0.8, 0.7],
            "hpdi_low": [0.85, 0.72, 0.6],
            "hpdi_high": [0.95, 0.87, 0.8],
            "observed_mean": [0.92, 0.8, 0.7],
            "conventional_low": [0.87, 0.73, 0.6],
            "conventional_high": [1.01, 0.87, 0.8],
            "p_best": [0.8, 0.15, 0.05],
        }
    )


def cdf_envelopes() -> pd.DataFrame:
    grid = np.linspace(0.0, 1.0, 51)
    parts = []
    for panel in ("overall", "domain: math", "domain: language"):
        for model, (a, b) in {"a": (80, 20), "b": (60, 40)}.items():
            parts.append(
                pd.DataFrame(
                    {
                        "panel": panel,
                        "series": model,
                        "x": grid,
                        "cdf_lower": stats.beta.cdf(grid, a + 5, b),
                        "cdf_upper": stats.beta.cdf(grid, a, b + 5),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


def expected_reliability_curves() -> pd.DataFrame:
    horizons = np.array([1, 2, 5, 10, 20, 50, 100, 200])
    parts = []
    for model, (low, high) in {"a": (0.90, 0.95), "b": (0.80, 0.85)}.items():
        parts.append(
            pd.DataFrame(
                {"series": model, "n": horizons, "expected_lower": low**horizons, "expected_upper": high**horizons}
            )
        )
    return pd.concat(parts, ignore_index=True)


def power_rows() -> pd.DataFrame:
    sizes = np.arange(10, 510, 50)
    parts = []
    for gap in (0.05, 0.10):
        power = 1 - np.exp(-sizes * gap**2 * 10)
        parts.append(pd.DataFrame({"gap": gap, "n": sizes, "power": power}))
    return pd.concat(parts, ignore_index=True)


def all_figures() -> dict[str, Figure]:
    """One figure per plot function, for the PNG and browser tests."""
    rng = np.random.default_rng(3)
    observed = rng.choice([0.0, 0.3, 1.0], size=40)
    return {
        "forest": plots.forest_plot(forest_rows(), title="Forest"),
        "trace": plots.trace_rank_plot(posterior_idata()),
        "waic": plots.waic_comparison_plot(waic_table()),
        "success_rates": plots.success_rate_distribution(observed, rng.beta(0.5, 0.5, size=(50, 40)), n_trials=10),
        "pairwise": plots.pairwise_heatmap(plots.pairwise_matrix(pairwise_long())),
        "leaderboard": plots.leaderboard_plot(leaderboard_rows()),
        "cdf_envelopes": plots.reliability_cdf_envelopes(cdf_envelopes()),
        "expected_reliability": plots.expected_reliability_plot(expected_reliability_curves()),
        "power": plots.power_curve(power_rows()),
    }


def tick_labels(axes, axis="y") -> list[str]:
    ticks = axes.get_yticklabels() if axis == "y" else axes.get_xticklabels()
    return [tick.get_text() for tick in ticks]


def texts(axes) -> list[str]:
    return [text.get_text() for text in axes.texts]


# ---------------------------------------------------------------- forest plot


def test_forest_groups_rows_overall_domain_subdomain_and_draws_each_interval():
    rows = forest_rows()
    figure = plots.forest_plot(rows)
    (axes,) = figure.axes
    assert tick_labels(axes) == [
        "overall",
        "math",
        "language",
        "math / addition",
        "math / division",
        "language / <poetry & 'prose'>",
    ]
    assert {"overall", "domain", "subdomain"} <= set(texts(axes))
    (thick,) = [c for c in axes.collections if c.get_label() == "95% HPDI"]
    (thin,) = [c for c in axes.collections if c.get_label() == "99% HPDI"]
    assert len(thin.get_segments()) == len(rows) and len(thick.get_segments()) == len(rows)
    # every HPDI segment spans exactly its row's bounds, at its row's height
    heights = dict(zip(tick_labels(axes), axes.get_yticks()))
    for segment in thick.get_segments():
        (x0, y0), (x1, _) = segment
        label = [name for name, y in heights.items() if y == y0][0]
        row = rows[rows["label"] == label].iloc[0]
        assert (x0, x1) == pytest.approx((row["hpdi_low"], row["hpdi_high"]))
    # the empirical mean +/- SEM: a square per row with data, just below the row, red for overall
    from evalpipeline.plots._common import EMPIRICAL_COLOR, OVERALL_EMPIRICAL_COLOR

    drawn = []
    for container in (c for c in axes.containers if isinstance(c, ErrorbarContainer)):
        marker_line, _caps, (bars,) = container
        for x, y, segment in zip(marker_line.get_xdata(), marker_line.get_ydata(), bars.get_segments()):
            drawn.append((float(y), float(x), marker_line.get_color(), tuple(segment[:, 0])))
    with_data = rows[rows["empirical_mean"].notna()]
    assert len(drawn) == len(with_data)
    below = {
        round(y - heights[label], 9)
        for y, _x, _c, _s in drawn
        for label in [min(heights, key=lambda name: abs(heights[name] - y))]
    }
    assert len(below) == 1 and -0.5 < below.pop() < 0  # every marker the same distance below its row
    for y, x, color, (left, right) in drawn:
        label = min(heights, key=lambda name: abs(heights[name] - y))
        row = rows[rows["label"] == label].iloc[0]
        assert x == pytest.approx(row["empirical_mean"])
        assert (left, right) == pytest.approx((row["empirical_mean"] - 0.03, row["empirical_mean"] + 0.03))
        assert color == (OVERALL_EMPIRICAL_COLOR if row["level"] == "overall" else EMPIRICAL_COLOR)


def test_forest_without_optional_columns_draws_posterior_only():
    rows = forest_rows()[["label", "posterior_mean", "hpdi_low", "hpdi_high"]]
    (axes,) = plots.forest_plot(rows).axes
    assert len(tick_labels(axes)) == len(rows)
    assert not [c for c in axes.containers if isinstance(c, ErrorbarContainer)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.drop(columns=["hpdi_low", "label"]), "missing column(s) label, hpdi_low"),
        (lambda r: r.drop(columns=["outer_high"]), "missing column(s) outer_high"),
        (lambda r: r.drop(columns=["empirical_mean"]), "missing column(s) empirical_mean"),
        (lambda r: r.assign(hpdi_low=r["posterior_mean"] + 0.01), "hpdi_low exceeds posterior_mean"),
        (lambda r: r.assign(posterior_mean="high"), "posterior_mean must be numeric"),
        (lambda r: r.assign(hpdi_high=np.nan), "hpdi_high has missing values"),
        (lambda r: r.assign(empirical_sem=-0.1), "empirical_sem must be non-negative"),
        (lambda r: r.iloc[0:0], "no rows"),
    ],
)
def test_forest_rejects_bad_input_by_name(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plots.forest_plot(change(forest_rows()))


# ---------------------------------------------------------------- trace and rank plots


def test_trace_rank_plot_has_density_trace_and_rank_per_variable():
    figure = plots.trace_rank_plot(posterior_idata())
    assert len(figure.axes) == 2 * 3
    density, trace, rank = figure.axes[3:6]  # domain_effects row: 2 components x 4 chains
    assert len(trace.lines) == 2 * 4
    assert len([p for p in density.patches if isinstance(p, StepPatch)]) == 2 * 4
    steps = [p for p in rank.patches if isinstance(p, StepPatch)]
    assert len(steps) == 4
    # each chain's rank histogram counts all of its draws, pooled over the 2 components
    assert all(step.get_data().values.sum() == 200 * 2 for step in steps)


def test_rank_plot_separates_a_stuck_chain_from_mixed_ones():
    """Ranks are uniform per chain when chains mix; a shifted chain piles up in the top bins."""

    def top_share(idata):
        rank = plots.trace_rank_plot(idata, ["mu"], rank_bins=10).axes[2]
        counts = [p.get_data().values for p in rank.patches if isinstance(p, StepPatch)]
        return counts[0][-5:].sum() / counts[0].sum()  # chain 0's share of the upper half of ranks

    assert abs(top_share(posterior_idata()) - 0.5) < 0.1
    assert top_share(posterior_idata(shift_chain=3.0)) > 0.95


def test_trace_rank_plot_caps_components_and_accepts_a_dataset():
    rng = np.random.default_rng(1)
    idata = az.from_dict(posterior={"theta": rng.normal(size=(2, 50, 12))})
    figure = plots.trace_rank_plot(idata.posterior, max_components=3)
    assert figure.axes[0].get_title(loc="left") == "theta (first 3 of 12)"
    assert len(figure.axes[1].lines) == 3 * 2


def test_trace_rank_plot_rejects_bad_input():
    with pytest.raises(ValueError, match="variable.s. sigma not in the posterior"):
        plots.trace_rank_plot(posterior_idata(), ["mu", "sigma"])
    with pytest.raises(ValueError, match="expected an InferenceData"):
        plots.trace_rank_plot(np.zeros((2, 10)))
    with pytest.raises(ValueError, match="fewer than 2 draws"):
        plots.trace_rank_plot(az.from_dict(posterior={"mu": np.zeros((2, 1))}))
    bad = np.ones((2, 10))
    bad[0, 3] = np.nan
    with pytest.raises(ValueError, match="mu has non-finite draws"):
        plots.trace_rank_plot(az.from_dict(posterior={"mu": bad}))


# ---------------------------------------------------------------- WAIC comparison


def test_waic_plot_lists_best_first_and_draws_differences_for_the_others():
    table = waic_table().iloc[::-1]  # order on input must not matter
    (axes,) = plots.waic_comparison_plot(table).axes
    assert tick_labels(axes) == ["beta-binomial", "binomial", "null"]
    elpd_bars, diff_bars = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert list(elpd_bars.lines[0].get_xdata()) == [-100.0, -110.0, -130.0]
    # differences are drawn at best ELPD - elpd_diff
    assert list(diff_bars.lines[0].get_xdata()) == [-110.0, -130.0]
    assert "higher is better" in axes.get_xlabel()


def test_waic_plot_reads_arviz_compare_output():
    rng = np.random.default_rng(0)
    fits = {
        name: az.from_dict(
            posterior={"mu": rng.normal(size=(2, 50))}, log_likelihood={"y": rng.normal(mean, 0.1, size=(2, 50, 20))}
        )
        for name, mean in {"good <m>": -1.0, "worse & co": -1.3}.items()
    }
    comparison = az.compare(fits, ic="waic")
    (axes,) = plots.waic_comparison_plot(comparison).axes
    assert tick_labels(axes) == ["good <m>", "worse & co"]


def test_waic_plot_rejects_missing_columns():
    with pytest.raises(ValueError, match=r"missing column\(s\) elpd_diff \(or d_waic/d_loo\), dse"):
        plots.waic_comparison_plot(waic_table().drop(columns=["elpd_diff", "dse"]))
    with pytest.raises(ValueError, match="unknown scale"):
        plots.waic_comparison_plot(waic_table().assign(scale="natural"))


# ---------------------------------------------------------------- success-rate distribution


def test_success_rate_bars_count_items_per_attainable_rate():
    observed = np.array([0.0, 0.0, 0.0, 0.2, 1.0, 1.0])
    predicted = np.tile(observed, (30, 1))
    (axes,) = plots.success_rate_distribution(observed, predicted, n_trials=5).axes
    bars = [p for p in axes.patches if isinstance(p, Rectangle)]
    assert [bar.get_height() for bar in bars] == [3, 1, 0, 0, 0, 2]
    # bins are centred on k / n_trials
    assert [bar.get_x() + bar.get_width() / 2 for bar in bars] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    (predictive,) = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert list(predictive.lines[0].get_ydata()) == [3, 1, 0, 0, 0, 2]  # identical draws: median = observed


def test_success_rate_distribution_rejects_bad_input():
    with pytest.raises(ValueError, match=r"shape \(n_draws, 3\)"):
        plots.success_rate_distribution([0.1, 0.2, 0.3], np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        plots.success_rate_distribution([0.1, 1.2])
    with pytest.raises(ValueError, match="missing or infinite"):
        plots.success_rate_distribution([0.1, np.nan])
    with pytest.raises(ValueError, match="n_trials must be a positive integer"):
        plots.success_rate_distribution([0.1], n_trials=2.5)


# ---------------------------------------------------------------- pairwise heatmap


def test_pairwise_matrix_fills_complements_and_heatmap_labels_every_cell():
    matrix = plots.pairwise_matrix(pairwise_long())
    assert list(matrix.index) == ["a<1>", "b&2", "c"]
    assert matrix.loc["b&2", "a<1>"] == pytest.approx(0.1)
    assert matrix.loc["c", "b&2"] == pytest.approx(0.8)
    assert np.isnan(np.diag(matrix.to_numpy())).all()
    axes = plots.pairwise_heatmap(matrix).axes[0]
    assert sorted(texts(axes)) == sorted(f"{v:.2f}" for v in [0.9, 0.6, 0.2, 0.1, 0.4, 0.8])
    assert tick_labels(axes, "x") == ["a<1>", "b&2", "c"]


def test_a_large_pairwise_heatmap_drops_cell_text_and_stays_a_bounded_picture():
    models = [f"org/model-{i:03d}" for i in range(100)]
    strength = np.linspace(2, -2, 100)
    values = 1 / (1 + np.exp(-(strength[:, None] - strength[None, :])))
    np.fill_diagonal(values, np.nan)
    matrix = pd.DataFrame(values, index=models, columns=models)
    figure = plots.pairwise_heatmap(matrix)
    axes = figure.axes[0]
    assert texts(axes) == []  # 9,900 numbers are the table's job
    assert tick_labels(axes, "x") == models and tick_labels(axes, "y") == models
    width, height = figure.get_size_inches()
    assert width * plots.PNG_DPI <= 2500 and height * plots.PNG_DPI <= 2200
    # at the limit every cell is still labelled
    small = matrix.iloc[: plots.HEATMAP_LABEL_LIMIT, : plots.HEATMAP_LABEL_LIMIT]
    assert len(texts(plots.pairwise_heatmap(small).axes[0])) == plots.HEATMAP_LABEL_LIMIT**2 - plots.HEATMAP_LABEL_LIMIT


def test_pairwise_heatmap_rejects_non_square_or_out_of_range():
    matrix = plots.pairwise_matrix(pairwise_long())
    with pytest.raises(ValueError, match="must be square"):
        plots.pairwise_heatmap(matrix.iloc[:, :2])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        plots.pairwise_heatmap(matrix * 2)
    with pytest.raises(ValueError, match="compared with itself"):
        plots.pairwise_matrix(pd.DataFrame({"model_a": ["a"], "model_b": ["a"], "p_a_better": [0.5]}))
    with pytest.raises(ValueError, match=r"missing column\(s\) p_a_better"):
        plots.pairwise_matrix(pairwise_long().drop(columns=["p_a_better"]))


# ---------------------------------------------------------------- leaderboard


def test_leaderboard_draws_both_intervals_per_model_and_marks_leaving_the_unit_interval():
    board = leaderboard_rows()
    (axes,) = plots.leaderboard_plot(board).axes
    assert tick_labels(axes) == ["a", "b", "c"]
    bayesian, conventional = [c for c in axes.collections if isinstance(c, LineCollection)]
    assert [s[1][0] for s in conventional.get_segments()] == [1.01, 0.87, 0.8]  # unclipped
    assert [s[0][0] for s in bayesian.get_segments()] == [0.85, 0.72, 0.6]
    assert [t for t in texts(axes) if t.startswith("P(best)")] == ["P(best) 0.80", "P(best) 0.15", "P(best) 0.05"]
    assert [line.get_xdata()[0] for line in axes.lines if line.get_linestyle() == ":"] == [1.0]


def test_leaderboard_draws_a_model_without_data_with_its_posterior_only():
    board = leaderboard_rows()
    board.loc[2, ["observed_mean", "conventional_low", "conventional_high"]] = np.nan
    (axes,) = plots.leaderboard_plot(board).axes
    bayesian, conventional = [c for c in axes.collections if isinstance(c, LineCollection)]
    assert np.isfinite(np.asarray(bayesian.get_segments())).all()
    assert np.isnan(conventional.get_segments()[2]).all()


def test_leaderboard_rejects_missing_columns_all_named():
    with pytest.raises(ValueError, match=r"missing column\(s\) observed_mean, conventional_low, conventional_high"):
        plots.leaderboard_plot(leaderboard_rows()[["model", "posterior_mean", "hpdi_low", "hpdi_high"]])
    with pytest.raises(ValueError, match="conventional_low exceeds conventional_high for 'b'"):
        plots.leaderboard_plot(leaderboard_rows().assign(conventional_low=[0.8, 0.9, 0.6]))


# ---------------------------------------------------------------- reliability


def test_cdf_envelopes_one_panel_per_level_one_band_per_model():
    envelopes = cdf_envelopes()
    figure = plots.reliability_cdf_envelopes(envelopes)
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert [axes.get_title() for axes in visible] == ["overall", "domain: math", "domain: language"]
    assert len(figure.axes) == 4  # 2 x 2 grid, the spare panel hidden
    for axes in visible:
        bands = [c for c in axes.collections if isinstance(c, PolyCollection)]
        assert len(bands) == 2
        assert [t.get_text() for t in axes.get_legend().get_texts()] == ["a", "b"]


def test_cdf_envelopes_colour_crowded_panels_by_group_with_one_legend_entry_each():
    """24 subdomains in 6 domains (a model on six suites): eight colours cannot tell the bands apart
    and a 24-entry legend overflowed its panel, so each band takes its domain's colour, the same in
    the subdomain and the domain panel, and the legend lists the domains."""
    grid = np.linspace(0.0, 1.0, 21)
    parts = []
    for d in range(6):
        for s in range(4):
            parts.append(
                pd.DataFrame(
                    {
                        "panel": "subdomain",
                        "series": f"d{d}/s{s}",
                        "group": f"d{d}",
                        "x": grid,
                        "cdf_lower": stats.beta.cdf(grid, 12 + d + s, 8),
                        "cdf_upper": stats.beta.cdf(grid, 10 + d + s, 10),
                    }
                )
            )
        parts.append(
            pd.DataFrame(
                {
                    "panel": "domain",
                    "series": f"d{d}",
                    "group": f"d{d}",
                    "x": grid,
                    "cdf_lower": stats.beta.cdf(grid, 12 + d, 8),
                    "cdf_upper": stats.beta.cdf(grid, 10 + d, 10),
                }
            )
        )
    envelopes = pd.concat(parts, ignore_index=True)
    sub_axes, domain_axes = [
        a for a in plots.reliability_cdf_envelopes(envelopes, group_title="domain").axes if a.get_visible()
    ]
    sub_bands = [c for c in sub_axes.collections if isinstance(c, PolyCollection)]
    domain_bands = [c for c in domain_axes.collections if isinstance(c, PolyCollection)]
    assert len(sub_bands) == 24 and len(domain_bands) == 6
    legend = sub_axes.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [f"d{d}" for d in range(6)]
    assert legend.get_title().get_text() == "domain"
    for d in range(6):  # a domain's four subdomain bands and its own band share one colour
        edges = {tuple(band.get_edgecolor()[0]) for band in sub_bands[4 * d : 4 * d + 4]}
        assert edges == {tuple(domain_bands[d].get_edgecolor()[0])}
    assert len({tuple(band.get_edgecolor()[0]) for band in domain_bands}) == 6
    assert domain_axes.get_legend().get_title().get_text() == ""  # one band per entry: no grouping to explain
    # without the group column every series keeps its own entry (drawn outside the panel)
    plain = plots.reliability_cdf_envelopes(envelopes.drop(columns=["group"]))
    assert len(plain.axes[0].get_legend().get_texts()) == 24
    # few series: coloured by series even when groups are given
    few = envelopes[envelopes["series"].isin(["d0/s0", "d0/s1", "d0"])]
    few_axes = plots.reliability_cdf_envelopes(few).axes[0]
    assert [t.get_text() for t in few_axes.get_legend().get_texts()] == ["d0/s0", "d0/s1"]


def test_cdf_envelopes_reject_crossed_bounds_and_missing_columns():
    crossed = cdf_envelopes()
    crossed.loc[10, "cdf_lower"] = crossed.loc[10, "cdf_upper"] + 0.1
    with pytest.raises(ValueError, match="cdf_lower exceeds cdf_upper at 1 row"):
        plots.reliability_cdf_envelopes(crossed)
    with pytest.raises(ValueError, match=r"missing column\(s\) panel"):
        plots.reliability_cdf_envelopes(cdf_envelopes().drop(columns=["panel"]))


def test_expected_reliability_plot_draws_band_and_width_on_log_n():
    curves = expected_reliability_curves()
    band_axes, width_axes = plots.expected_reliability_plot(curves).axes
    assert band_axes.get_xscale() == "log" and width_axes.get_xscale() == "log"
    assert len([c for c in band_axes.collections if isinstance(c, PolyCollection)]) == 2
    width_a = width_axes.lines[0].get_ydata()
    part = curves[curves["series"] == "a"]
    assert np.asarray(width_a) == pytest.approx((part["expected_upper"] - part["expected_lower"]).to_numpy())


def test_expected_reliability_plot_rejects_bad_horizons():
    with pytest.raises(ValueError, match="column n must hold positive integers"):
        plots.expected_reliability_plot(expected_reliability_curves().assign(n=0))
    with pytest.raises(ValueError, match="expected_lower exceeds expected_upper"):
        curves = expected_reliability_curves()
        plots.expected_reliability_plot(
            curves.assign(expected_lower=curves["expected_upper"], expected_upper=curves["expected_upper"] * 0.5)
        )


# ---------------------------------------------------------------- power curve


def test_power_curve_marks_the_first_n_reaching_the_target():
    rows = power_rows()
    (axes,) = plots.power_curve(rows, target_power=0.8).axes
    curves = [line for line in axes.lines if line.get_marker() == "o"]
    assert len(curves) == 2
    marks = [line.get_xdata()[0] for line in axes.lines if line.get_linestyle() == ":"]
    expected = [rows[(rows["gap"] == gap) & (rows["power"] >= 0.8)]["n"].min() for gap in (0.05, 0.10)]
    assert marks == expected
    targets = [line for line in axes.lines if line.get_linestyle() == "--"]
    assert [line.get_ydata()[0] for line in targets] == [0.8]


def test_power_curve_rejects_bad_input():
    with pytest.raises(ValueError, match=r"target_power must be in \(0, 1\)"):
        plots.power_curve(power_rows(), target_power=1.0)
    with pytest.raises(ValueError, match=r"column power must lie in \[0, 1\]"):
        plots.power_curve(power_rows().assign(power=1.5))
    with pytest.raises(ValueError, match=r"missing column\(s\) power_high"):
        plots.power_curve(power_rows().assign(power_low=0.1))


# ---------------------------------------------------------------- PNG output


def test_save_png_writes_identical_png_bytes_on_rerun_and_closes(tmp_path):
    first, second = tmp_path / "a" / "forest.png", tmp_path / "b" / "forest.png"
    figure = plots.forest_plot(forest_rows())
    width, height = figure.get_size_inches() * plots.PNG_DPI
    assert plots.save_png(figure, first) is True
    assert figure.axes == []  # closed: cleared after writing
    assert plots.save_png(plots.forest_plot(forest_rows()), second) is True
    data = first.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data == second.read_bytes()
    assert b"Software" not in data  # no matplotlib version stamp
    image = PILImage.open(io.BytesIO(data))
    image.verify()
    assert image.size == (round(width), round(height))
    # an unchanged rerun leaves the file alone (lake rule: no rewrite, mtime kept)
    mtime = first.stat().st_mtime_ns
    assert plots.save_png(plots.forest_plot(forest_rows()), first) is False
    assert first.stat().st_mtime_ns == mtime
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".tmp-")]


def test_every_plot_renders_to_a_png(tmp_path):
    for name, figure in all_figures().items():
        path = tmp_path / f"{name}.png"
        plots.save_png(figure, path)
        with PILImage.open(path) as image:
            pixels = np.asarray(image.convert("L"))
        assert pixels.std() > 5, f"{name} rendered blank"


def test_png_bytes_hold_the_pixels_savefig_draws_in_one_draw():
    """figure_png_bytes draws once on the Agg canvas instead of savefig's two passes; the picture must
    not change: every plot's pixels equal savefig's, opaque ones as RGB, with the text chunks asked for."""
    for name, figure in all_figures().items():
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=plots.PNG_DPI)
        with PILImage.open(buffer) as image:
            expected = np.asarray(image.convert("RGBA"))
        data = plots.figure_png_bytes(all_figures()[name], text={"evalpipeline-inputs": "abc"})
        with PILImage.open(io.BytesIO(data)) as image:
            assert image.mode == "RGB", name  # white figures: no alpha channel to write
            assert image.info.get("evalpipeline-inputs") == "abc", name
            assert np.array_equal(np.asarray(image.convert("RGBA")), expected), name
        assert draws_once(all_figures()[name]) == 1, name


def draws_once(figure) -> int:
    calls = []
    draw = type(figure).draw

    def counted(self, renderer):
        calls.append(renderer)
        return draw(self, renderer)

    figure.draw = counted.__get__(figure)
    plots.figure_png_bytes(figure)
    return len(calls)


def test_a_transparent_figure_keeps_its_alpha_channel():
    from evalpipeline.plots._common import new_figure

    figure = new_figure(2.0, 1.5)
    figure.patch.set_alpha(0.0)
    figure.add_subplot().plot([0, 1], [0, 1])
    with PILImage.open(io.BytesIO(plots.figure_png_bytes(figure))) as image:
        assert image.mode == "RGBA"
        alpha = np.asarray(image)[..., 3]
    assert alpha.min() == 0 and alpha.max() == 255


def _pixels(data: bytes) -> np.ndarray:
    with PILImage.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGBA"), dtype=float)


def test_png_preview_is_a_smaller_palette_png_of_the_same_picture():
    for name, figure in all_figures().items():
        data = plots.figure_png_bytes(figure)
        preview = plots.png_preview(data)
        assert preview == plots.png_preview(data), name  # deterministic: reruns embed equal bytes
        assert len(preview) < 0.7 * len(data), (name, len(preview), len(data))
        full, small = _pixels(data), _pixels(preview)
        assert small.shape == full.shape, name  # same size, not a thumbnail
        difference = np.abs(full - small).max(axis=2)  # per pixel, 0-255
        assert difference.mean() < 3 and np.percentile(difference, 99) < 40, (name, difference.mean())
    # a picture a palette cannot shrink comes back as it was
    buffer = io.BytesIO()
    PILImage.fromarray(np.zeros((2, 2, 3), dtype=np.uint8)).save(buffer, format="PNG")
    assert plots.png_preview(buffer.getvalue()) == buffer.getvalue()


def test_metadata_plots_embed_the_preview_not_the_lake_file(tmp_path):
    import base64

    from assets.metadata import png_markdown

    path = tmp_path / "forest.png"
    plots.save_png(plots.forest_plot(forest_rows()), path)
    text = png_markdown(path, "forest").value
    assert text.startswith("![forest](data:image/png;base64,")
    assert base64.b64decode(text.split(",", 1)[1].rstrip(")")) == plots.png_preview(path.read_bytes())


def test_save_png_closes_a_pyplot_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    figure.add_subplot().plot([0, 1], [0, 1])
    plots.save_png(figure, tmp_path / "line.png")
    assert figure.number not in plt.get_fignums()
    with pytest.raises(ValueError, match="expected a matplotlib Figure"):
        plots.save_png("not a figure", tmp_path / "x.png")


def test_plots_import_neither_pyplot_nor_dagster():
    code = (
        "import sys, evalpipeline.plots, evalpipeline.report.html; "
        "bad = [m for m in ('matplotlib.pyplot', 'dagster') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nest_inside_clips_a_sampled_inner_hpdi_into_the_outer_one():
    """HPDIs of 89% and 95% from the same draws can cross by Monte Carlo error; forest_plot refuses
    crossed intervals, so they are nested before drawing (the upper edge here, as in a real fit)."""
    from evalpipeline.plots import forest_plot, nest_inside

    low, high = nest_inside([0.40, 0.10], [0.61, 0.30], [0.38, 0.05], [0.60, 0.35])
    assert low.tolist() == [0.40, 0.10] and high.tolist() == [0.60, 0.30]
    rows = pd.DataFrame(
        {
            "label": ["a", "b"],
            "posterior_mean": [0.5, 0.2],
            "hpdi_low": low,
            "hpdi_high": high,
            "outer_low": [0.38, 0.05],
            "outer_high": [0.60, 0.35],
        }
    )
    forest_plot(rows)  # renders
    with pytest.raises(ValueError, match="exceeds outer_high"):
        forest_plot(rows.assign(hpdi_high=[0.61, 0.30]))


def test_save_png_of_renders_only_when_what_the_plot_shows_changed(tmp_path, monkeypatch):
    from evalpipeline.plots import _common

    path = tmp_path / "plots" / "p.png"
    rendered = []

    def figure(value):
        def make():
            rendered.append(value)
            fig = _common.new_figure(2, 2)
            fig.add_subplot().plot([0, 1], [0, value])
            return fig

        return make

    path.parent.mkdir()
    path.with_name("p.png.inputs").write_text("a record an earlier version kept beside the PNG")
    assert plots.save_png_of({"v": 1.0}, path, figure(1.0)) and rendered == [1.0]
    first = path.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.png"]  # the record is inside the PNG
    assert not plots.save_png_of({"v": 1.0}, path, figure(1.0)) and rendered == [1.0]  # same inputs: not rendered
    assert plots.save_png_of({"v": 2.0}, path, figure(2.0)) and rendered == [1.0, 2.0]  # new inputs
    assert path.read_bytes() != first
    # back to the first inputs: drawn again, the picture equal to the first one's
    assert (
        plots.save_png_of({"v": 1.0}, path, figure(1.0)) and rendered == [1.0, 2.0, 1.0] and path.read_bytes() == first
    )
    path.unlink()  # the PNG gone: rendered again
    plots.save_png_of({"v": 2.0}, path, figure(2.0))
    assert rendered == [1.0, 2.0, 1.0, 2.0] and path.exists()
    # a PNG that another writer replaced (no record, or another one) is drawn again
    plots.save_png(figure(9.0)(), path)
    plots.save_png_of({"v": 2.0}, path, figure(2.0))
    assert rendered == [1.0, 2.0, 1.0, 2.0, 9.0, 2.0]
    # other code renders again: the plotting package (or matplotlib), the modules that build the figure,
    # and another resolution
    plots.save_png_of({"v": 2.0}, path, figure(2.0), code=["evalpipeline.steps.comparison"])
    assert not plots.save_png_of({"v": 2.0}, path, figure(2.0), code=["evalpipeline.steps.comparison"])
    monkeypatch.setattr(_common, "_source_of", lambda modules: "edited " + ",".join(modules))
    plots.save_png_of({"v": 2.0}, path, figure(2.0), code=["evalpipeline.steps.comparison"])
    monkeypatch.setattr(_common, "_plotting_code", lambda: "edited")
    plots.save_png_of({"v": 2.0}, path, figure(2.0), code=["evalpipeline.steps.comparison"])
    plots.save_png_of({"v": 2.0}, path, figure(2.0), code=["evalpipeline.steps.comparison"], dpi=50)
    assert rendered == [1.0, 2.0, 1.0, 2.0, 9.0, 2.0, 2.0, 2.0, 2.0, 2.0]
