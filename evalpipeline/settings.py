"""Project configuration: ``evalpipeline.toml`` (or ``$EVALPIPELINE_CONFIG``).

One file holds the ingest rules that the CLI, the sensor and the assets
share, so a mapping declared once applies everywhere::

    [ingest]
    format = "auto"                 # or inspect | lm-eval | long | wide
    accept_incomplete_logs = false

    [ingest.scores]
    scorer = "match"                # which scorer / metric to read
    score_key = "acc"               # key of dict-valued scores
    value_map = { C = 1.0, I = 0.0, P = 0.5, N = 0.0 }
    numeric_range = [0, 1]

    [ingest.columns]                # long tables: canonical column = source column
    model = "model_name"
    item_id = "question"
    score = "is_correct"
    cov_difficulty = "level"

    [ingest.metadata]               # Inspect: canonical column = sample metadata key
    domain = "category"
    cov_difficulty = "difficulty"

    [ingest.wide]                   # wide tables (rows = items, columns = models)
    suite = "my_suite"              # default: the file name's stem

    [validate]                      # bounds of the canonical expectation suite
    epoch_min = 1
    epoch_max = 1000
    max_error_share = 0.2           # share of errored samples a partition may have

    [posterior]                     # the conjugate baseline (accuracy_posteriors, suite_comparison, model_profile)
    prior_a = 1.0                   # Beta(prior_a, prior_b) prior on each success rate
    prior_b = 1.0
    hpdi_mass = 0.95

Command-line options override the file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from evalpipeline.ingest.base import DEFAULT_METADATA_MAP, IngestOptions
from evalpipeline.ingest.scores import DEFAULT_VALUE_MAP, ScoreNormalisation

CONFIG_ENV = "EVALPIPELINE_CONFIG"
DEFAULT_CONFIG = "evalpipeline.toml"


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""


def config_path() -> Path | None:
    """``$EVALPIPELINE_CONFIG``, else ``evalpipeline.toml`` here if it exists, else None."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    path = Path(DEFAULT_CONFIG)
    return path if path.exists() else None


def read_config(path: Path) -> dict:
    """Every table of the configuration file at ``path``; ConfigError naming the file if it is missing
    or not valid TOML."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: configuration file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def load_ingest_options(path: Path | None = None, **overrides: Any) -> IngestOptions:
    """Ingest options from the project configuration, with ``overrides`` (None values ignored)."""
    path = path or config_path()
    data: dict = read_config(path).get("ingest", {}) if path is not None else {}
    scores = data.get("scores", {})
    wide = data.get("wide", {})
    known = {"format", "accept_incomplete_logs", "chunk_rows", "scores", "columns", "metadata", "wide"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [ingest]: {unknown}; known: {sorted(known)}")
    for table, table_known in (("scores", {"value_map", "scorer", "score_key", "numeric_range"}), ("wide", {"suite", "model"})):
        unknown = sorted(set(data.get(table, {})) - table_known)
        if unknown:
            raise ConfigError(f"{path}: unknown keys in [ingest.{table}]: {unknown}; known: {sorted(table_known)}")
    try:
        normalisation = ScoreNormalisation(
            value_map=dict(overrides.pop("value_map", None) or scores.get("value_map", DEFAULT_VALUE_MAP)),
            scorer=_first(overrides.pop("scorer", None), scores.get("scorer")),
            score_key=_first(overrides.pop("score_key", None), scores.get("score_key")),
            numeric_range=tuple(_first(overrides.pop("numeric_range", None), scores.get("numeric_range"), (0.0, 1.0))),
        )
        values = {
            "normalisation": normalisation,
            "format": _first(overrides.pop("format", None), data.get("format"), "auto"),
            "accept_incomplete_logs": bool(
                _first(overrides.pop("accept_incomplete_logs", None), data.get("accept_incomplete_logs"), False)
            ),
            "column_map": {**data.get("columns", {}), **(overrides.pop("column_map", None) or {})},
            "metadata_map": {**DEFAULT_METADATA_MAP, **data.get("metadata", {}), **(overrides.pop("metadata_map", None) or {})},
            "suite": _first(overrides.pop("suite", None), wide.get("suite")),
            "model": _first(overrides.pop("model", None), wide.get("model")),
            "chunk_rows": int(_first(overrides.pop("chunk_rows", None), data.get("chunk_rows"), 50_000)),
        }
        if overrides:
            raise ConfigError(f"unknown ingest overrides {sorted(overrides)}")
        return IngestOptions(**values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path or 'ingest options'}: {exc}") from exc


def _check_priors(path, priors: dict) -> None:
    """A misspelt model or argument under ``[glm.priors]`` would silently leave the default prior in place."""
    from evalpipeline.models import MODELS
    from evalpipeline.models.fit import prior_arguments

    for name, values in priors.items():
        if name not in MODELS:
            raise ConfigError(f"{path}: [glm.priors.{name}]: unknown model {name!r}; known: {sorted(MODELS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [glm.priors.{name}] must be a table of prior arguments")
        unknown = sorted(set(values) - prior_arguments(name))
        if unknown:
            known = sorted(a for a in prior_arguments(name) if a.endswith(("_scale", "_prior", "_loc", "_sd", "_rate")))
            raise ConfigError(f"{path}: [glm.priors.{name}]: unknown prior argument(s) {unknown}; e.g. {known}")


#: The tables of the project configuration; another one is a typo that would silently be ignored.
CONFIG_SECTIONS = ("ingest", "validate", "posterior", "glm", "reliability")


def check_config(path: Path | None = None) -> None:
    """Read every table of the project configuration as the runs will, and refuse unknown tables:
    a misspelt setting fails here, naming the file and the key, before any work."""
    from evalpipeline.reliability.lake import load_reliability_config

    path = path or config_path()
    if path is not None:
        unknown = sorted(set(read_config(path)) - set(CONFIG_SECTIONS))
        if unknown:
            raise ConfigError(f"{path}: unknown table(s) {unknown}; known: {list(CONFIG_SECTIONS)}")
    load_ingest_options(path)
    load_validation_settings(path)
    load_posterior_settings(path)
    load_glm_config(path)
    load_reliability_config(path)


def _first(*values):
    return next((v for v in values if v is not None), None)


def load_validation_settings(path: Path | None = None):
    """Validation bounds from ``[validate]`` of the project configuration (defaults otherwise)."""
    from evalpipeline.validate import ValidationSettings

    path = path or config_path()
    if path is None:
        return ValidationSettings()
    data = read_config(path).get("validate", {})
    try:
        return ValidationSettings(**data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [validate]: {exc}") from exc


#: ``[posterior]`` defaults: the uniform Beta(1, 1) prior and a 95% HPDI.
POSTERIOR_DEFAULTS = {"prior_a": 1.0, "prior_b": 1.0, "hpdi_mass": 0.95}


def load_posterior_settings(path: Path | None = None) -> dict[str, float]:
    """The conjugate baseline's prior and HPDI mass from ``[posterior]`` (defaults otherwise).

    They are part of the code versions of ``accuracy_posteriors``, ``suite_comparison`` and
    ``model_profile`` (see :func:`load_comparison_settings`), so editing them marks exactly those
    tables stale.
    """
    path = path or config_path()
    data: dict = read_config(path).get("posterior", {}) if path is not None else {}
    unknown = sorted(set(data) - set(POSTERIOR_DEFAULTS))
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [posterior]: {unknown}; known: {sorted(POSTERIOR_DEFAULTS)}")
    values = {**POSTERIOR_DEFAULTS, **data}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: [posterior] {name} must be a number, got {value!r}")
        values[name] = float(value)
    if min(values["prior_a"], values["prior_b"]) <= 0:
        raise ConfigError(f"{path}: [posterior] prior_a and prior_b must be positive, got "
                          f"{values['prior_a']} and {values['prior_b']}")
    if not 0.0 < values["hpdi_mass"] < 1.0:
        raise ConfigError(f"{path}: [posterior] hpdi_mass must be in (0, 1), got {values['hpdi_mass']}")
    return values


def load_comparison_settings(path: Path | None = None):
    """Settings of the suite comparisons and model profiles: the Beta prior and interval mass of
    ``[posterior]``, so that their leaderboards state the same conjugate posterior as
    ``accuracy_posteriors`` (until now they always used Beta(1, 1) and 0.95); the rest default."""
    from evalpipeline.comparison import ComparisonSettings

    values = load_posterior_settings(path)
    return ComparisonSettings(prior=(values["prior_a"], values["prior_b"]), mass=values["hpdi_mass"])


def load_glm_config(path: Path | None = None):
    """HiBayES fit settings from ``[glm]`` of the project configuration::

        [glm]                        # sampler (hibayes-paper.txt Section 3.1 defaults)
        num_warmup = 2000
        num_samples = 2000
        num_chains = 4
        target_accept = 0.8
        retry_target_accept = 0.95   # the one retry of a fit failing its diagnostics
        hpdi2_mass = 0.89            # second HPDI mass in the summaries
        graded = "threshold"         # graded scores: "threshold" (success = score >= graded_threshold) or "fractional"
        graded_threshold = 0.5
        models = ["binomial", "beta_binomial", "null", "item_difficulty", "suite_binomial"]  # default: all

        [glm.thresholds]             # what a fit must pass to be used downstream
        max_r_hat = 1.01
        min_ess_bulk = 400
        min_ess_tail = 400
        max_divergences = 0
        min_bfmi = 0.3
        max_pareto_k = 0.7           # warns; gates too with gate_pareto_k = true
        gate_pareto_k = false

        [glm.priors.binomial]        # keyword arguments of the model function (evalpipeline.models.glm)
        sigma_subdomain_scale = 0.1

    Editing a model's priors changes that model's code version only, so the
    Dagster UI marks exactly its fits stale.
    """
    import dataclasses

    from evalpipeline.fits import GlmConfig
    from evalpipeline.models import DiagnosticThresholds, FitSettings

    path = path or config_path()
    data: dict = read_config(path).get("glm", {}) if path is not None else {}
    data = dict(data)
    thresholds = data.pop("thresholds", {})
    priors = data.pop("priors", {})
    graded = data.pop("graded", "threshold")
    graded_threshold = float(data.pop("graded_threshold", 0.5))
    models = data.pop("models", None)
    if models is not None:
        from evalpipeline.models import MODELS

        unknown_models = sorted(set(models) - set(MODELS))
        if unknown_models:
            raise ConfigError(f"{path}: [glm] models: unknown {unknown_models}; known: {sorted(MODELS)}")
        models = tuple(models)
    known = {f.name for f in dataclasses.fields(FitSettings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [glm]: {unknown}; known: {sorted(known | {'thresholds', 'priors', 'graded', 'graded_threshold', 'models'})}")
    _check_priors(path, priors)
    try:
        if "retry_on" in data:
            data["retry_on"] = tuple(data["retry_on"])
        return GlmConfig(
            FitSettings(**data), DiagnosticThresholds(**thresholds), dict(priors), graded, graded_threshold, models
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [glm]: {exc}") from exc
