"""The forest plot at a suite's size: this checkout's forest_plot against the one of an earlier commit.

    .venv/bin/python benchmarks/forest_plot_benchmark.py [--baseline-rev ddc7b6f] [--rows 104 8 3] [--repeat 9]

The baseline is ``evalpipeline/plots/forest.py`` as it was at ``--baseline-rev`` (read with ``git show``,
so run it in a clone), loaded beside the current module. Each of ``--rows`` (104: the forest of a
100-LLM suite GLM; 3-8: a partition's) is drawn and rendered to PNG by both, alternately,
``--repeat`` times; the script prints the medians, their ratio, and whether the PNG bytes are
identical, and exits 1 if they are not. ddc7b6f drew the empirical mean +/- SEM with one errorbar
call per row; the current code makes one per colour.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def baseline_module(rev: str):
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:evalpipeline/plots/forest.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "forest_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("evalpipeline.plots.forest_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(n: int, seed: int = 0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    mean = rng.uniform(0.2, 0.8, n)
    empirical = np.where(np.arange(n) % 17 == 5, np.nan, mean + 0.01)  # some rows without data
    return pd.DataFrame(
        {
            "label": [f"bench/model-{i:03d}" for i in range(n)],
            "level": ["overall"] + ["model"] * (n - 1),
            "posterior_mean": mean,
            "hpdi_low": mean - 0.05,
            "hpdi_high": mean + 0.05,
            "outer_low": mean - 0.07,
            "outer_high": mean + 0.07,
            "empirical_mean": empirical,
            "empirical_sem": np.full(n, 0.03),
        }
    )


def main() -> int:
    from evalpipeline.plots import figure_png_bytes, forest

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-rev", default="ddc7b6f")
    parser.add_argument("--rows", type=int, nargs="+", default=[104, 8, 3])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    baseline = baseline_module(args.baseline_rev)
    identical = True
    print(f"{'rows':>5} {args.baseline_rev + ' s':>12} {'current s':>10} {'ratio':>6}  same PNG bytes")
    for n in args.rows:
        frame, seconds, digests = rows(n), {"baseline": [], "current": []}, {}
        for _ in range(args.repeat):
            for name, module in (("baseline", baseline), ("current", forest)):
                started = time.perf_counter()
                data = figure_png_bytes(module.forest_plot(frame, title="forest"))
                seconds[name].append(time.perf_counter() - started)
                digests[name] = hashlib.sha256(data).hexdigest()
        a, b = statistics.median(seconds["baseline"]), statistics.median(seconds["current"])
        same = digests["baseline"] == digests["current"]
        identical &= same
        print(f"{n:>5} {a:>12.3f} {b:>10.3f} {b / a:>6.2f}  {'yes' if same else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
