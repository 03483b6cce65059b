"""HIP-LLM reliability over the lake: per model x suite and per model across suites.

Layout::

    <lake>/reliability/model=<key>/suite=<key>/        the suite's subdomains pooled in its domain
    <lake>/model_reliability/model=<key>/              suites mapped to domains by the taxonomy
        cdf_envelopes.parquet, quantile_envelopes.parquet, expected_reliability.parquet,
        target_probability.parquet, configurations.parquet, weights.parquet, counts.parquet,
        metadata.json

Seeds derive from the partition (same data, same settings -> same bytes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from evalpipeline.keys import from_partition_key, to_partition_key
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.pipeline import NoDataError, read_samples
from evalpipeline.reliability.core import ReliabilityResult, assess_reliability
from evalpipeline.reliability.pipeline import COUNTS_COLUMNS, Taxonomy, counts_from_samples, load_taxonomy, model_counts, write_reliability
from evalpipeline.reliability.settings import HyperBox, ReliabilitySettings

_WHERE = {
    "level": "subdomain, domain or llm (the operational-profile aggregate)",
    "domain": "HIP-LLM domain ((all) at the LLM level)",
    "subdomain": "subdomain ((all) above the subdomain level)",
}
#: Every table a reliability folder holds, column by column (README "Output tables").
RELIABILITY_COLUMNS = {
    "expected_reliability": {
        **_WHERE,
        "n": "number of future tasks n of R(n) = p^n",
        "lower": "lower envelope of E[R(n)] over the credal set of priors",
        "upper": "upper envelope of E[R(n)] over the credal set of priors",
        "method": "exact: Beta moments, combined across subdomains and domains by the binomial expansion",
    },
    "cdf_envelopes": {
        **_WHERE,
        "x": "value of the non-failure probability (theta_ij, p_i or p_L)",
        "cdf_lower": "min over the credal set of Pr(p <= x | data)",
        "cdf_upper": "max over the credal set of Pr(p <= x | data)",
    },
    "quantile_envelopes": {
        **_WHERE,
        "quantile": "probability q of the posterior quantile (0.05, 0.5, 0.95)",
        "lower": "min over the credal set of the q-quantile of p",
        "upper": "max over the credal set of the q-quantile of p",
        "method": "exact (grid mixture of Beta CDFs) or monte_carlo (draws, above the subdomain level)",
    },
    "target_probability": {
        **_WHERE,
        "n": "number of future tasks",
        "r": "target reliability r of P(R(n) >= r)",
        "lower": "min over the credal set of Pr(p^n >= r | data)",
        "upper": "max over the credal set of Pr(p^n >= r | data)",
        "method": "exact or monte_carlo, as for the quantiles",
    },
    "configurations": {
        "domain": "HIP-LLM domain",
        "config": "index of the hyperparameter configuration in the domain's credal set",
        "a": "mu ~ Beta(a, b): a",
        "b": "mu ~ Beta(a, b): b",
        "c": "nu ~ Gamma(c, rate d): shape c",
        "d": "nu ~ Gamma(c, rate d): rate d",
        "is_corner": "the configuration is a corner of the box (always included)",
        "posterior_mean": "posterior mean of the domain's p_i under this configuration",
        "posterior_median": "posterior median of p_i under this configuration",
    },
    "weights": {
        "domain": "HIP-LLM domain",
        "subdomain": "subdomain",
        "n": "trials N_ij",
        "k": "successes C_ij",
        "omega": "Omega_ij: the subdomain's weight within its domain (operational profile)",
        "domain_weight": "W_i: the domain's weight at the LLM level",
        "op": "W_i * Omega_ij: the flat operational profile",
    },
    "counts": COUNTS_COLUMNS,
}
EXPECTED_RELIABILITY_COLUMNS = RELIABILITY_COLUMNS["expected_reliability"]

TAXONOMY_ENV = "EVALPIPELINE_TAXONOMY"
DEFAULT_TAXONOMY = "taxonomy.toml"


@dataclass
class ReliabilityConfig:
    """``[reliability]`` of the project configuration::

        [reliability]
        n_configurations = 160        # K per domain (paper default)
        n_draws = 3000                # S
        grid_size = 2000              # G
        horizons = [1, 2, 5, 10, 20, 60]
        target = 0.9                  # r of P(R(n) >= r)
        success_threshold = 1.0       # graded scores: success = full marks (when `correct` is not logged)
        taxonomy = "taxonomy.toml"    # suite -> domain and the operational profile (default: one domain per suite)
        [reliability.box]             # the credal box (paper default)
        a = [1, 12]
        b = [1, 12]
        c = [1, 25]
        d = [1, 25]                   # nu ~ Gamma(c, RATE d)
    """

    settings: ReliabilitySettings = field(default_factory=ReliabilitySettings)
    success_threshold: float = 1.0
    taxonomy_path: str | None = None

    def taxonomy(self) -> Taxonomy:
        return load_taxonomy(self.taxonomy_path)

    def describe(self) -> dict:
        return {"settings": self.settings.to_dict(), "success_threshold": self.success_threshold,
                "taxonomy": self.taxonomy_path}


def load_reliability_config(path: Path | None = None) -> ReliabilityConfig:
    from evalpipeline.settings import ConfigError, config_path

    path = path or config_path()
    data: dict = {}
    if path is not None:
        try:
            data = dict(tomllib.loads(Path(path).read_text()).get("reliability", {}))
        except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    taxonomy = data.pop("taxonomy", None) or os.environ.get(TAXONOMY_ENV) or DEFAULT_TAXONOMY
    if path is not None and not Path(taxonomy).is_absolute() and not Path(taxonomy).exists():
        taxonomy = str(Path(path).parent / taxonomy)
    threshold = float(data.pop("success_threshold", 1.0))
    box = data.pop("box", None)
    try:
        if box is not None:
            data["box"] = HyperBox(**{k: tuple(v) for k, v in box.items()})
        if "horizons" in data:
            data["horizons"] = tuple(data["horizons"])
        return ReliabilityConfig(ReliabilitySettings(**data), threshold, taxonomy)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [reliability]: {exc}") from exc


def _seed(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def partition_reliability(lake: Lake, model: str, suite: str, config: ReliabilityConfig) -> tuple[ReliabilityResult, Path]:
    """Envelopes for one model on one suite: the suite's subdomains pooled within its domain."""
    samples = read_samples(lake, model, suite)
    domain = config.taxonomy().domain_of(suite)
    counts = counts_from_samples(samples, success_threshold=config.success_threshold, domain=domain)
    counts = counts[counts["n"] > 0]
    if counts.empty:
        raise NoDataError(f"{model!r} x {suite!r}: no countable attempts for the reliability assessment")
    settings = config.settings.replace(seed=_seed(f"{model}|{suite}|reliability"))
    result = assess_reliability(counts, settings)
    directory = lake.partition_dir("reliability", model, suite)
    write_reliability(result, directory)
    write_parquet_atomic(pa.Table.from_pandas(counts, preserve_index=False), directory / "counts.parquet")
    return result, directory


def model_reliability(lake: Lake, model: str, config: ReliabilityConfig) -> tuple[ReliabilityResult, Path]:
    """Envelopes for one model across every suite it was evaluated on, with the configured profile."""
    key = to_partition_key(model)
    files = sorted(lake.root.glob(f"samples/model={key}/suite=*/samples.parquet"))
    if not files:
        raise NoDataError(f"no sample tables for model {model!r} under {lake.root / 'samples'}")
    by_suite = {}
    for path in files:
        suite = from_partition_key(path.parent.name.split("=", 1)[1])
        by_suite[suite] = read_samples(lake, model, suite)
    taxonomy = config.taxonomy()
    counts = model_counts(by_suite, taxonomy, success_threshold=config.success_threshold)
    counts = counts[counts["n"] > 0]
    settings = config.settings.replace(seed=_seed(f"{model}|reliability"))
    if taxonomy.profile.domain_weights is not None or taxonomy.profile.subdomain_weights:
        settings = settings.replace(profile=taxonomy.profile)
    result = assess_reliability(counts, settings)
    directory = lake.root / "model_reliability" / f"model={key}"
    write_reliability(result, directory)
    write_parquet_atomic(pa.Table.from_pandas(counts, preserve_index=False), directory / "counts.parquet")
    return result, directory


def write_reliability_plots(result: ReliabilityResult, directory: Path, title: str) -> dict[str, Path]:
    """CDF envelopes by level (HIP-LLM Figures 3-7) and E[R(n)] against n (Figure 8) as PNGs."""
    from evalpipeline.plots import expected_reliability_plot, reliability_cdf_envelopes, save_png

    cdf = result.cdf_envelopes.copy()
    cdf["panel"] = cdf["level"]
    cdf["series"] = cdf["subdomain"].where(cdf["level"] == "subdomain", cdf["domain"])
    cdf.loc[cdf["level"] == "llm", "series"] = "LLM"
    # one panel per level, levels that merely repeat another (one subdomain, one domain) included
    paths = {"cdf_envelopes": directory / "plots" / "cdf_envelopes.png",
             "expected_reliability": directory / "plots" / "expected_reliability.png"}
    save_png(reliability_cdf_envelopes(cdf[["panel", "series", "x", "cdf_lower", "cdf_upper"]],
                                       title=f"{title}: CDF envelopes of the success probability"),
             paths["cdf_envelopes"])
    expected = result.expected_reliability
    top = expected[expected["level"] == expected["level"].iloc[-1]] if len(expected) else expected
    levels = expected[expected["level"].isin(["domain", "llm"])]
    curves = (levels if len(levels) else top).copy()
    curves["series"] = curves["domain"].where(curves["level"] == "domain", "LLM")
    curves = curves.rename(columns={"lower": "expected_lower", "upper": "expected_upper"})
    save_png(expected_reliability_plot(curves[["series", "n", "expected_lower", "expected_upper"]],
                                       title=f"{title}: E[R(n)] envelopes"), paths["expected_reliability"])
    return paths
