"""HIP-LLM reliability over the lake: per model x suite and per model across suites.

Layout::

    <lake>/reliability/model=<key>/suite=<key>/        the suite's subdomains pooled in its domain
    <lake>/model_reliability/model=<key>/              suites mapped to domains by the taxonomy
        cdf_envelopes.parquet, quantile_envelopes.parquet, expected_reliability.parquet,
        target_probability.parquet, configurations.parquet, weights.parquet, counts.parquet,
        metadata.json, plots/*.png, inputs.json (hash of the counts, settings and code)

A model x suite folder draws its plots only when asked (``plots=False`` here, the default
``[plots] partitions = "on_request"``; :func:`draw_partition_reliability_plots`); a model's always.

Seeds derive from the partition (same data, same settings -> same bytes), so a folder whose
inputs.json matches is reused as it is. A model's one-suite domain gets the suite's seed, so
its subdomain rows are the suite's, and are taken over from the suite's folder when current.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import Lake, write_bytes_atomic, write_parquet_atomic
from evalpipeline.steps.samples import NoDataError, rejected_note, read_samples
from evalpipeline.reliability.core import ReliabilityResult, SubdomainEnvelopes, assess_reliability
from evalpipeline.reliability.pipeline import (
    COUNTS_COLUMNS,
    DOMAIN_LABEL,
    SUBDOMAIN_LABEL,
    SUCCESSES,
    Taxonomy,
    counts_from_samples,
    load_taxonomy,
    model_counts,
    write_reliability,
)
from evalpipeline.reliability.settings import HyperBox, ReliabilitySettings

_WHERE = {
    "level": "subdomain, domain or llm (the operational-profile aggregate)",
    "domain": f"{DOMAIN_LABEL}; (all) at the LLM level",
    "subdomain": f"{SUBDOMAIN_LABEL}; (all) above the subdomain level",
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
        "domain": DOMAIN_LABEL,
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
        "domain": DOMAIN_LABEL,
        "subdomain": SUBDOMAIN_LABEL,
        "n": "trials N_ij",
        "k": f"C_ij, {SUCCESSES}",
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
        """What decides the outputs, for the code versions and inputs hashes. The taxonomy's location
        is left out: it is an absolute path, so a project or lake copied to another folder recomputed
        every table (1,111 step s at 100 models). Its contents are covered where they matter: a suite's
        domain is in its partitions' counts, the operational profile in the model level's version."""
        return {"settings": self.settings.to_dict(), "success_threshold": self.success_threshold}


def load_reliability_config(path: Path | None = None) -> ReliabilityConfig:
    from evalpipeline.config import ConfigError, config_path

    path = path or config_path()
    data: dict = {}
    if path is not None:
        try:
            data = dict(tomllib.loads(Path(path).read_text()).get("reliability", {}))
        except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    # the configuration's key, else the environment, else the default, which alone may be absent
    # (one domain per suite): a named file that is missing is a typo, not a wish for the default
    named, source = data.pop("taxonomy", None), f"{path}: [reliability] taxonomy"
    if not named:
        named, source = os.environ.get(TAXONOMY_ENV, "").strip(), f"${TAXONOMY_ENV}"
    taxonomy = named or DEFAULT_TAXONOMY
    if path is not None and not Path(taxonomy).is_absolute() and not Path(taxonomy).exists():
        taxonomy = str(Path(path).parent / taxonomy)
    if named and not Path(taxonomy).exists():
        raise ConfigError(f"{source} = {named!r}: no such taxonomy file ({Path(taxonomy).resolve()})")
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


def _partition_seed(model: str, suite: str) -> int:
    return _seed(f"{model}|{suite}|reliability")


def _partition_inputs(
    lake: Lake, model: str, suite: str, config: ReliabilityConfig, samples: pd.DataFrame | None = None
):
    samples = read_samples(lake, model, suite) if samples is None else samples
    domain = config.taxonomy().domain_of(suite)
    counts = counts_from_samples(samples, success_threshold=config.success_threshold, domain=domain)
    counts = counts[counts["n"] > 0]
    if counts.empty:
        raise NoDataError(f"{model!r} x {suite!r}: no countable attempts for the reliability assessment")
    settings = config.settings.replace(seed=_partition_seed(model, suite))
    return counts, settings, lake.partition_dir("reliability", model, suite)


def _model_inputs(lake: Lake, model: str, config: ReliabilityConfig):
    """The model's counts, settings and folder, and each one-suite domain's suite.

    A domain that holds one suite (every domain, with the default taxonomy) is given that
    suite's own seed (``domain_seeds``), so its configurations, grid and subdomain results
    are those of the suite's assessment: the model's view and the suite's agree, and the
    suite's stored subdomain rows can stand in for recomputing them (:func:`assess_model`).
    """
    key = to_partition_key(model)
    tables = lake.sample_tables(model=model)  # without those that failed validation
    if not tables:
        raise NoDataError(
            f"no sample tables for model {model!r} under {lake.root / 'samples'}" + rejected_note(lake, model=model)
        )
    by_suite = {}
    for _model, suite, _path in tables:
        by_suite[suite] = read_samples(lake, model, suite)
    taxonomy = config.taxonomy()
    counts = model_counts(by_suite, taxonomy, success_threshold=config.success_threshold)
    counts = counts[counts["n"] > 0]
    suites_of: dict[str, list[str]] = {}
    for suite in sorted(by_suite):
        suites_of.setdefault(taxonomy.domain_of(suite), []).append(suite)
    only_suite = {
        domain: suites[0]
        for domain, suites in suites_of.items()
        if len(suites) == 1 and domain in set(counts["domain"])
    }
    settings = config.settings.replace(
        seed=_seed(f"{model}|reliability"),
        domain_seeds={d: _partition_seed(model, s) for d, s in sorted(only_suite.items())},
    )
    if taxonomy.profile.domain_weights is not None or taxonomy.profile.subdomain_weights:
        settings = settings.replace(profile=taxonomy.profile)
    inputs = {"by_suite": by_suite, "only_suite": only_suite}
    return counts, settings, lake.root / "model_reliability" / f"model={key}", inputs


def _stored_subdomains(
    lake: Lake, model: str, config: ReliabilityConfig, code: str, counts: pd.DataFrame, inputs: dict
) -> dict[str, list[SubdomainEnvelopes]]:
    """Per one-suite domain, the subdomain rows the suite's stored assessment holds, when it is current
    (its inputs hash is that of the suite's samples now, these settings and ``code``) and counted the
    same cells (n, k in order) as the model's domain. :func:`assess_reliability` checks them again."""
    known = {}
    for domain, suite in inputs["only_suite"].items():
        cells = counts[counts["domain"] == domain].sort_values("subdomain", kind="stable")
        try:
            suite_counts, settings, directory = _partition_inputs(lake, model, suite, config, inputs["by_suite"][suite])
            recorded = json.loads((directory / INPUTS_FILE).read_text()).get("inputs_hash")
        except (NoDataError, OSError, ValueError):
            continue
        suite_counts = suite_counts.sort_values("subdomain", kind="stable")
        same_cells = (
            len(cells) > 1
            and len(cells) == len(suite_counts)
            and (cells[["n", "k"]].to_numpy() == suite_counts[["n", "k"]].to_numpy()).all()
        )
        if not same_cells or recorded != _inputs_hash(suite_counts, settings, code):
            continue
        try:
            known[domain] = _subdomain_rows(directory, suite_counts["subdomain"].tolist(), settings)
        except (OSError, ValueError, KeyError):
            continue
    return known


def _subdomain_rows(directory: Path, subdomains: list[str], settings: ReliabilitySettings) -> list[SubdomainEnvelopes]:
    tables = {
        name: pd.read_parquet(directory / f"{name}.parquet", filters=[("level", "==", "subdomain")])
        for name in ("cdf_envelopes", "quantile_envelopes", "expected_reliability", "target_probability")
    }
    groups = {name: dict(tuple(table.groupby("subdomain", sort=False))) for name, table in tables.items()}
    rows = []
    for subdomain in subdomains:
        cdf, quantile = groups["cdf_envelopes"][subdomain], groups["quantile_envelopes"][subdomain]
        expected, target = groups["expected_reliability"][subdomain], groups["target_probability"][subdomain]
        if (
            list(quantile["quantile"]) != list(settings.quantiles)
            or list(expected["n"]) != list(settings.horizons)
            or list(target["n"]) != list(settings.horizons)
            or len(cdf) != settings.cdf_points
        ):
            raise ValueError(f"{directory}: the subdomain rows of {subdomain!r} do not match the settings")
        rows.append(
            SubdomainEnvelopes(
                x=cdf["x"].to_numpy(float),
                cdf_lower=cdf["cdf_lower"].to_numpy(float),
                cdf_upper=cdf["cdf_upper"].to_numpy(float),
                quantile_lower=quantile["lower"].to_numpy(float),
                quantile_upper=quantile["upper"].to_numpy(float),
                expected_lower=expected["lower"].to_numpy(float),
                expected_upper=expected["upper"].to_numpy(float),
                target_lower=target["lower"].to_numpy(float),
                target_upper=target["upper"].to_numpy(float),
            )
        )
    return rows


# -- reuse: a rerun over unchanged counts and settings reads the stored outputs back -----------

#: Written last into an output folder: the hash of what produced it (counts, settings with the
#: seed, the reliability code). Removed first when the folder is rewritten.
INPUTS_FILE = "inputs.json"
PLOT_FILES = {"cdf_envelopes": "plots/cdf_envelopes.png", "expected_reliability": "plots/expected_reliability.png"}


@dataclass
class ReliabilityOutput:
    """An assessment in the lake: its tables (computed now or read back), folder, plots, status."""

    result: ReliabilityResult
    directory: Path
    plots: dict[str, Path]
    status: str  # "computed" or "reused"

    @property
    def subdomains_taken_over(self) -> int:
        """Subdomains whose rows came from a suite's stored assessment (:func:`assess_model`)."""
        return self.result.subdomains_taken_over


def assess_partition(
    lake: Lake, model: str, suite: str, config: ReliabilityConfig, code: str = "", *, plots: bool = True
) -> ReliabilityOutput:
    """Envelopes for one model on one suite (the suite's subdomains pooled within its domain),
    written with their plots; the stored outputs are reused when the counts, the settings (seed
    included) and ``code`` (the reliability code version) are those that produced them.

    ``plots=False``: the plots are not drawn and earlier ones are removed when the tables are
    computed (:func:`draw_partition_reliability_plots` draws them from the stored tables).
    ``True``: drawn too for stored tables that have none. The plots are no input of the tables."""
    counts, settings, directory = _partition_inputs(lake, model, suite, config)
    return _assess_or_reuse(counts, settings, directory, f"{model} x {suite}", code, plots=plots)


def draw_partition_reliability_plots(
    lake: Lake, model: str, suite: str, config: ReliabilityConfig, code: str = ""
) -> dict[str, Path]:
    """Draw the plots of the partition's stored assessment (the ones :func:`assess_partition` draws).

    Raises :class:`evalpipeline.steps.samples.NoDataError` when no assessment of the current counts,
    settings and ``code`` is stored: the ``reliability`` asset of the partition must run first."""
    counts, settings, directory = _partition_inputs(lake, model, suite, config)
    stored = _stored_result(directory, _inputs_hash(counts, settings, code), settings)
    if stored is None:
        raise NoDataError(
            f"no current reliability assessment of {model!r} x {suite!r} in {directory}: "
            "materialise the partition's `reliability` first"
        )
    return write_reliability_plots(stored, directory, f"{model} x {suite}")


def assess_model(lake: Lake, model: str, config: ReliabilityConfig, code: str = "") -> ReliabilityOutput:
    """Envelopes for one model across every suite it was evaluated on, with the configured
    operational profile; plots and reuse as :func:`assess_partition`.

    A domain holding one suite is assessed under that suite's seed, and when the suite's
    stored assessment is current its subdomain rows are taken over rather than recomputed
    (the exact subdomain CDFs are most of the cost); the tables are the same either way.
    """
    counts, settings, directory, inputs = _model_inputs(lake, model, config)
    return _assess_or_reuse(
        counts,
        settings,
        directory,
        model,
        code,
        known=lambda: _stored_subdomains(lake, model, config, code, counts, inputs),
    )


def _inputs_hash(counts: pd.DataFrame, settings: ReliabilitySettings, code: str) -> str:
    digest = hashlib.sha256(pd.util.hash_pandas_object(counts.reset_index(drop=True), index=True).to_numpy().tobytes())
    digest.update(repr(list(counts.columns)).encode())
    digest.update(json.dumps(settings.to_dict(), sort_keys=True, default=str).encode())
    digest.update(code.encode())
    return digest.hexdigest()[:32]


def _stored_result(directory: Path, inputs_hash: str, settings: ReliabilitySettings) -> ReliabilityResult | None:
    """The tables stored in ``directory`` when they were made from ``inputs_hash``, else None."""
    try:
        recorded = json.loads((directory / INPUTS_FILE).read_text()).get("inputs_hash")
    except (OSError, ValueError):
        recorded = None
    tables = [directory / f"{name}.parquet" for name in RELIABILITY_COLUMNS]
    if recorded != inputs_hash or not all(p.exists() for p in [*tables, directory / "metadata.json"]):
        return None
    frames = {name: pd.read_parquet(directory / f"{name}.parquet") for name in RELIABILITY_COLUMNS if name != "counts"}
    metadata = json.loads((directory / "metadata.json").read_text())
    return ReliabilityResult(**frames, settings=settings, metadata=metadata)


def _assess_or_reuse(
    counts, settings, directory: Path, title: str, code: str, known=None, *, plots: bool = True
) -> ReliabilityOutput:
    """``known``: a callable giving :func:`assess_reliability`'s ``known_subdomains``, called only
    when the assessment is computed. ``plots``: draw the plots (see :func:`assess_partition`)."""
    inputs_hash = _inputs_hash(counts, settings, code)
    paths = {name: directory / path for name, path in PLOT_FILES.items()}
    stored = _stored_result(directory, inputs_hash, settings)
    if stored is not None:
        if plots and not all(p.exists() for p in paths.values()):
            write_reliability_plots(stored, directory, title)
        return ReliabilityOutput(stored, directory, paths, "reused")
    marker = directory / INPUTS_FILE
    marker.unlink(missing_ok=True)  # a crash while rewriting must not leave a matching marker behind
    result = assess_reliability(counts, settings, known_subdomains=known() if known else None)
    write_reliability(result, directory)
    write_parquet_atomic(pa.Table.from_pandas(counts, preserve_index=False), directory / "counts.parquet")
    if plots:
        write_reliability_plots(result, directory, title)
    else:  # none may show an earlier assessment
        for path in paths.values():
            path.unlink(missing_ok=True)
    write_bytes_atomic(json.dumps({"inputs_hash": inputs_hash}).encode(), marker)
    return ReliabilityOutput(result, directory, paths, "computed")


def write_reliability_plots(result: ReliabilityResult, directory: Path, title: str) -> dict[str, Path]:
    """CDF envelopes by level (HIP-LLM Figures 3-7) and E[R(n)] against n (Figure 8) as PNGs."""
    from evalpipeline.plots import expected_reliability_plot, reliability_cdf_envelopes, save_png

    cdf = result.cdf_envelopes.copy()
    cdf["panel"] = cdf["level"]
    cdf["series"] = cdf["subdomain"].where(cdf["level"] == "subdomain", cdf["domain"])
    cdf.loc[cdf["level"] == "llm", "series"] = "LLM"
    # a model's many subdomains (6 suites x 4 = 24) are coloured by their domain (see the plot's ``group``)
    cdf["group"] = cdf["domain"].where(cdf["level"] != "llm", "LLM")
    # one panel per level, levels that merely repeat another (one subdomain, one domain) included
    paths = {name: directory / path for name, path in PLOT_FILES.items()}
    save_png(
        reliability_cdf_envelopes(
            cdf[["panel", "series", "group", "x", "cdf_lower", "cdf_upper"]],
            title=f"{title}: CDF envelopes of the success probability",
            group_title="domain",
        ),
        paths["cdf_envelopes"],
    )
    expected = result.expected_reliability
    top = expected[expected["level"] == expected["level"].iloc[-1]] if len(expected) else expected
    levels = expected[expected["level"].isin(["domain", "llm"])]
    curves = (levels if len(levels) else top).copy()
    curves["series"] = curves["domain"].where(curves["level"] == "domain", "LLM")
    curves = curves.rename(columns={"lower": "expected_lower", "upper": "expected_upper"})
    save_png(
        expected_reliability_plot(
            curves[["series", "n", "expected_lower", "expected_upper"]], title=f"{title}: E[R(n)] envelopes"
        ),
        paths["expected_reliability"],
    )
    return paths
