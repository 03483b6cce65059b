"""The five plots every model x suite partition draws, rendered to PNG two ways, alternately.

    .venv/bin/python benchmarks/plot_render_benchmark.py [--repeat 9]

A partition's GLM fit writes a trace, a forest and a predictive plot, its reliability
assessment a CDF-envelope and an E[R(n)] plot. The inputs here have a partition's shape (4 chains x 500 draws, 4 subdomains, 200 items;
a reliability assessment of 4 subdomains at the default settings).

* ``savefig`` (the baseline): ``Figure.savefig``. Under a layout engine it draws the figure twice: once without rendering, to lay it
  out, then the picture.
* ``current``: :func:`evalpipeline.plots.figure_png_bytes`.

Each plot is built and rendered by both, alternately, ``--repeat`` times; the script prints
the median seconds of each, their ratio, and whether the two PNGs hold the same pixels, and
exits 1 if any do not.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def savefig_png_bytes(figure, *, dpi: int, text: dict | None = None) -> bytes:
    """The baseline: ``Figure.savefig`` to PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None, **(text or {})})
    return buffer.getvalue()


def partition_fit_idata(rng: np.random.Generator):
    import arviz as az

    chains, draws = 4, 500
    return az.from_dict(
        posterior={
            "overall": rng.normal(0.4, 0.1, (chains, draws)),
            "sigma_subdomain": np.abs(rng.normal(0.1, 0.05, (chains, draws))),
            "subdomain": rng.normal(0.0, 0.1, (chains, draws, 4)),
        }
    )


def forest_rows() -> pd.DataFrame:
    mean = np.array([0.55, 0.42, 0.61, 0.58, 0.49])
    return pd.DataFrame(
        {
            "label": ["overall", "math / algebra", "math / geometry", "code / python", "code / sql"],
            "level": ["overall", "subdomain", "subdomain", "subdomain", "subdomain"],
            "posterior_mean": mean,
            "hpdi_low": mean - 0.05,
            "hpdi_high": mean + 0.05,
            "outer_low": mean - 0.07,
            "outer_high": mean + 0.07,
            "empirical_mean": mean + 0.01,
            "empirical_sem": np.full(5, 0.03),
        }
    )


def reliability_figures():
    """The two figures :func:`evalpipeline.steps.reliability.write_reliability_plots` draws, built alike."""
    from evalpipeline.plots import expected_reliability_plot, reliability_cdf_envelopes
    from evalpipeline.reliability import assess_reliability

    counts = pd.DataFrame(
        {"domain": ["suite"] * 4, "subdomain": [f"suite/{i}" for i in range(4)], "n": [50] * 4, "k": [31, 27, 40, 22]}
    )
    result = assess_reliability(counts)
    cdf = result.cdf_envelopes.copy()
    cdf["panel"] = cdf["level"]
    cdf["series"] = cdf["subdomain"].where(cdf["level"] == "subdomain", cdf["domain"])
    cdf.loc[cdf["level"] == "llm", "series"] = "LLM"
    expected = result.expected_reliability
    curves = expected[expected["level"].isin(["domain", "llm"])].copy()
    curves["series"] = curves["domain"].where(curves["level"] == "domain", "LLM")
    curves = curves.rename(columns={"lower": "expected_lower", "upper": "expected_upper"})
    return {
        "cdf_envelopes": lambda: reliability_cdf_envelopes(
            cdf[["panel", "series", "x", "cdf_lower", "cdf_upper"]], title="model x suite: CDF envelopes"
        ),
        "expected_reliability": lambda: expected_reliability_plot(
            curves[["series", "n", "expected_lower", "expected_upper"]], title="model x suite: E[R(n)] envelopes"
        ),
    }


def plot_makers():
    from evalpipeline.plots import forest_plot, success_rate_distribution, trace_rank_plot

    rng = np.random.default_rng(0)
    idata = partition_fit_idata(rng)
    observed = rng.binomial(1, 0.55, 200).astype(float)
    simulated = rng.binomial(1, 0.55, (100, 200)).astype(float)
    return {
        "trace": lambda: trace_rank_plot(idata, title="binomial: traces"),
        "forest": lambda: forest_plot(forest_rows(), title="binomial: posterior success rates"),
        "predictive": lambda: success_rate_distribution(observed, simulated, n_trials=1, title="binomial: predictive"),
        **reliability_figures(),
    }


def pixels(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGBA"))


def main() -> int:
    from evalpipeline.plots import PNG_DPI, close_figure, figure_png_bytes

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    writers = {"savefig": savefig_png_bytes, "current": figure_png_bytes}
    same_everywhere, totals = True, {name: 0.0 for name in writers}
    print(
        f"{'plot':<22} {'savefig s':>10} {'current s':>10} {'ratio':>6} {'KiB before':>11} {'KiB now':>8}  same pixels"
    )
    for plot, make in plot_makers().items():
        seconds, outputs = {name: [] for name in writers}, {}
        for _ in range(args.repeat):
            for name, write in writers.items():
                started = time.perf_counter()
                figure = make()
                outputs[name] = write(figure, dpi=PNG_DPI, text={"evalpipeline-inputs": "benchmark"})
                close_figure(figure)
                seconds[name].append(time.perf_counter() - started)
        before, now = statistics.median(seconds["savefig"]), statistics.median(seconds["current"])
        totals["savefig"] += before
        totals["current"] += now
        same = np.array_equal(pixels(outputs["savefig"]), pixels(outputs["current"]))
        same_everywhere &= same
        print(
            f"{plot:<22} {before:>10.3f} {now:>10.3f} {now / before:>6.2f} {len(outputs['savefig']) / 1024:>11.0f} "
            f"{len(outputs['current']) / 1024:>8.0f}  {'yes' if same else 'NO'}"
        )
    print(
        f"{'a partition (all five)':<22} {totals['savefig']:>10.3f} {totals['current']:>10.3f} "
        f"{totals['current'] / totals['savefig']:>6.2f}"
    )
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
