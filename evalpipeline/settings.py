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

    [posterior]                     # the headline posteriors (accuracy_posteriors, suite_comparison, model_profile)
    prior_a = 1.0                   # Beta(prior_a, prior_b) prior on each success rate
    prior_b = 1.0
    hpdi_mass = 0.95
    concentration_shape = 1.0       # Gamma(shape, rate) prior on how alike an item's repeats (a cluster's
    concentration_rate = 1.0        # items) are, for the design effect (position paper Eq. 8's default)

    [judge.model_graded_qa]         # an LLM judge's calibration, per scorer (see load_judge_settings)
    good_passed = 72                # passed 72 of 80 answers humans marked correct,
    n_good = 80
    bad_failed = 51                 # failed 51 of 60 marked wrong
    n_bad = 60

    [plots]                         # a model x suite partition's GLM and reliability figures:
    partitions = "on_request"       # drawn by the partition_plots asset when asked for, or "always"

Command-line options override the file.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

from evalpipeline.config import ConfigError, config_path, read_config
from evalpipeline.ingest.base import DEFAULT_METADATA_MAP, IngestOptions
from evalpipeline.ingest.scores import DEFAULT_VALUE_MAP, ScoreNormalisation


def _table(path, data: dict, name: str, label: str | None = None) -> dict:
    """``data[name]`` when it is a TOML table ({} when absent); ConfigError naming it otherwise
    (``glm = 3`` would otherwise fail as an AttributeError in whichever reader met it first)."""
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{label or name}] must be a table, got {value!r}")
    return value


def _kind(default) -> tuple[str, Any] | None:
    """What a setting whose default is ``default`` must be: (name for the message, check)."""
    if isinstance(default, bool):
        return "true or false", lambda v: isinstance(v, bool)
    if isinstance(default, int):
        return "a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(default, float):
        return "a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if isinstance(default, str):
        return "a string", lambda v: isinstance(v, str)
    if isinstance(default, (tuple, list)):
        return "an array", lambda v: isinstance(v, list)
    return None


def check_types(path, table: str, values: dict, defaults: dict) -> None:
    """Refuse a value whose type is not its default's, naming the file and key: TOML hands on
    ``"false"`` or ``"200"`` as strings, which Python would read as true or fail on deep in a step."""
    for key, value in values.items():
        kind = _kind(defaults.get(key))
        if kind is not None and not kind[1](value):
            raise ConfigError(f"{path}: [{table}] {key} must be {kind[0]}, got {value!r}")
        # TOML's inf and nan: nan passes every range check written as `if value < low`, inf an open upper end
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: [{table}] {key} must be a finite number, got {value!r}")


def _refuse_unknown_keys(path, table: str, data: dict, known) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [{table}]: {unknown}; known: {sorted(known)}")


def _dataclass_defaults(cls) -> dict:
    import dataclasses

    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


#: ``[glm] graded``: how a graded score (strictly between 0 and 1) counts in a GLM (evalpipeline.models.data)
GRADED_MODES = ("threshold", "fractional")

#: ``[ingest]`` scalars and their defaults (the types a value must have)
INGEST_DEFAULTS = {"format": "auto", "accept_incomplete_logs": False, "chunk_rows": 50_000}


def load_ingest_options(path: Path | None = None, **overrides: Any) -> IngestOptions:
    """Ingest options from the project configuration, with ``overrides`` (None values ignored).

    A bad value in the file is reported against the file and key; one that only the overrides
    (command-line options) bring is reported as theirs.
    """
    from evalpipeline.ingest.detect import FORMATS

    path = path or config_path()
    data: dict = _table(path, read_config(path), "ingest") if path is not None else {}
    known = {"format", "accept_incomplete_logs", "chunk_rows", "scores", "columns", "metadata", "wide"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [ingest]: {unknown}; known: {sorted(known)}")
    tables = {name: _table(path, data, name, f"ingest.{name}") for name in ("scores", "wide", "columns", "metadata")}
    for table, table_known in (
        ("scores", {"value_map", "scorer", "score_key", "numeric_range"}),
        ("wide", {"suite", "model"}),
    ):
        unknown = sorted(set(tables[table]) - table_known)
        if unknown:
            raise ConfigError(f"{path}: unknown keys in [ingest.{table}]: {unknown}; known: {sorted(table_known)}")
    check_types(path, "ingest", data, INGEST_DEFAULTS)
    if data.get("chunk_rows", 1) < 1:  # the readers would stream chunks of 0 rows, or of -1 (all at once)
        raise ConfigError(f"{path}: [ingest] chunk_rows must be a whole number >= 1, got {data['chunk_rows']!r}")
    check_types(
        path,
        "ingest.scores",
        tables["scores"],
        {"value_map": None, "scorer": "", "score_key": "", "numeric_range": (0.0, 1.0)},
    )
    check_types(path, "ingest.wide", tables["wide"], {"suite": "", "model": ""})
    for name in ("columns", "metadata"):
        check_types(path, f"ingest.{name}", tables[name], dict.fromkeys(tables[name], ""))
    if "value_map" in tables["scores"] and not isinstance(tables["scores"]["value_map"], dict):
        raise ConfigError(f"{path}: [ingest.scores] value_map must be a table, got {tables['scores']['value_map']!r}")
    for label, value in tables["scores"].get("value_map", {}).items():  # "1" or true would be read as numbers
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: [ingest.scores] value_map {label} must be a number, got {value!r}")
    span = tables["scores"].get("numeric_range", [0.0, 1.0])
    if len(span) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in span):
        raise ConfigError(
            f"{path}: [ingest.scores] numeric_range must be an array of two numbers [low, high], got {span!r}"
        )
    if data.get("format", "auto") not in ("auto", *FORMATS):
        raise ConfigError(f"{path}: [ingest] format must be one of {['auto', *FORMATS]}, got {data['format']!r}")
    source = str(path) if path is not None else "ingest options"
    options = _ingest_options(data, tables, {}, source)  # the file alone: its own mistakes are named as its
    if not any(v is not None for v in overrides.values()):
        return options
    return _ingest_options(data, tables, overrides, "command-line options")


def _ingest_options(data: dict, tables: dict, overrides: dict, source: str) -> IngestOptions:
    overrides = dict(overrides)
    scores, wide = tables["scores"], tables["wide"]
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
            "column_map": {**tables["columns"], **(overrides.pop("column_map", None) or {})},
            "metadata_map": {
                **DEFAULT_METADATA_MAP,
                **tables["metadata"],
                **(overrides.pop("metadata_map", None) or {}),
            },
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
        raise ConfigError(f"{source}: {exc}") from exc


def _check_priors(path, priors: dict) -> None:
    """A misspelt model or argument under ``[glm.priors]`` would silently leave the default prior in place."""
    from evalpipeline.models import MODELS
    from evalpipeline.models.fit import prior_arguments

    for name, values in priors.items():
        if name not in MODELS:
            raise ConfigError(f"{path}: [glm.priors.{name}]: unknown model {name!r}; known: {sorted(MODELS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [glm.priors.{name}] must be a table of prior arguments")
        fixed = sorted(set(values) & NOT_PRIOR_ARGUMENTS)
        if fixed:
            raise ConfigError(
                f"{path}: [glm.priors.{name}] {fixed[0]} is not a prior: the fit sets it (the data, or "
                f"the [glm] setting of that name where there is one)"
            )
        unknown = sorted(set(values) - prior_arguments(name))
        if unknown:
            known = sorted(a for a in prior_arguments(name) if a.endswith(("_scale", "_prior", "_loc", "_sd", "_rate")))
            raise ConfigError(f"{path}: [glm.priors.{name}]: unknown prior argument(s) {unknown}; e.g. {known}")
        defaults = _prior_defaults(name)
        # a scale that is off by default (None, e.g. item_sd_concentration) is a number when given
        defaults = {k: 1.0 if v is None and k.endswith(_POSITIVE_PRIOR_ARGUMENTS) else v for k, v in defaults.items()}
        check_types(path, f"glm.priors.{name}", values, defaults)
        for argument, value in values.items():
            if (
                argument.endswith(_POSITIVE_PRIOR_ARGUMENTS)
                and isinstance(defaults.get(argument), float)
                and not value > 0
            ):
                raise ConfigError(
                    f"{path}: [glm.priors.{name}] {argument} is a scale, rate or concentration and "
                    f"must be positive, got {value!r}"
                )
            if argument in _PRIOR_CHOICES and value not in _PRIOR_CHOICES[argument]:
                raise ConfigError(
                    f"{path}: [glm.priors.{name}] {argument} must be one of "
                    f"{list(_PRIOR_CHOICES[argument])}, got {value!r}"
                )


#: Model-function arguments that are not priors (evalpipeline.models.fit.prior_arguments offers the whole
#: signature): the data, and switches the fit sets from ``[glm]`` (paper_form, group_mean_basis, unit_grid)
#: or from the data's layout (tasks_nested). ``arrays`` failed every fit; ``paper_form`` overrode ``[glm]``'s.
NOT_PRIOR_ARGUMENTS = frozenset({"arrays", "paper_form", "group_mean_basis", "unit_grid", "tasks_nested"})

#: Prior arguments that are scales, standard deviations, rates or concentrations (> 0)
_POSITIVE_PRIOR_ARGUMENTS = ("_scale", "_sd", "_rate", "_concentration")
#: Prior arguments with a fixed set of values (glm._observe reads any likelihood but "binomial" as beta-binomial)
_PRIOR_CHOICES = {"likelihood": ("binomial", "beta_binomial")}


def _prior_defaults(name: str) -> dict:
    """The default of every argument ``[glm.priors.<name>]`` may set (see ``prior_arguments``)."""
    import inspect

    from evalpipeline.models import glm

    defaults = {}
    for function in (glm.suite_binomial, glm.binomial, glm.MODELS[name].fn):  # the model's own last: it wins
        for parameter in inspect.signature(function).parameters.values():
            if parameter.default is not inspect.Parameter.empty:
                defaults[parameter.name] = parameter.default
    return defaults


#: The tables of the project configuration; another one is a typo that would silently be ignored.
CONFIG_SECTIONS = ("ingest", "validate", "posterior", "judge", "glm", "reliability", "plots")


def check_config(path: Path | None = None) -> None:
    """Read every table of the project configuration as the runs will, and refuse unknown tables:
    a misspelt setting fails here, naming the file and the key, before any work."""
    path = path or config_path()
    if path is not None:
        unknown = sorted(set(read_config(path)) - set(CONFIG_SECTIONS))
        if unknown:
            raise ConfigError(f"{path}: unknown table(s) {unknown}; known: {list(CONFIG_SECTIONS)}")
    load_ingest_options(path)
    load_validation_settings(path)
    load_posterior_settings(path)
    load_judge_settings(path)
    load_glm_config(path)
    load_reliability_settings(path)
    load_plot_settings(path)


def load_plot_settings(path: Path | None = None, scope: str = "partitions") -> str:
    """When fits draw their figures, from ``[plots]``: ``partitions`` for a model x suite partition's
    GLM and reliability figures, ``suite_fits`` for a suite GLM fit's trace, forest and predictive
    plots; each ``"on_request"`` (default) or ``"always"`` (:mod:`evalpipeline.steps.figures`).
    Both keys are checked whichever ``scope`` is asked for. Not part of any code version: the figures
    are no input of a fit or a table, so switching refits nothing."""
    from evalpipeline.steps.figures import DEFAULT_PLOT_MODE, PLOT_MODES, PLOT_SCOPES

    if scope not in PLOT_SCOPES:
        raise ValueError(f"unknown plot scope {scope!r}; known: {list(PLOT_SCOPES)}")
    path = path or config_path()
    data: dict = _table(path, read_config(path), "plots") if path is not None else {}
    unknown = sorted(set(data) - set(PLOT_SCOPES))
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [plots]: {unknown}; known: {list(PLOT_SCOPES)}")
    for key in PLOT_SCOPES:
        if data.get(key, DEFAULT_PLOT_MODE) not in PLOT_MODES:
            raise ConfigError(f"{path}: [plots] {key} must be one of {list(PLOT_MODES)}, got {data[key]!r}")
    return data.get(scope, DEFAULT_PLOT_MODE)


def load_reliability_settings(path: Path | None = None):
    """:func:`evalpipeline.steps.reliability.load_reliability_config`, with the types and ranges of
    ``[reliability]`` checked first (that reader takes them as they come)."""
    from evalpipeline.steps.reliability import load_reliability_config

    path = path or config_path()
    if path is not None:
        _check_reliability_values(path, _table(path, read_config(path), "reliability"))
    config = load_reliability_config(path)
    _check_configurations_cover_corners(path, config.settings)
    _check_taxonomy_file(path, config.taxonomy_path)
    return config


def _check_taxonomy_file(path, taxonomy: str | None) -> None:
    """A taxonomy that exists must be a UTF-8 file: a folder was an IsADirectoryError from deep in the code
    location's loading, and bytes not in UTF-8 the codec's message without the file's name. (Its contents
    are the taxonomy reader's to check.)"""

    from evalpipeline.steps.reliability import TAXONOMY_ENV

    if taxonomy is None or not Path(taxonomy).exists():
        return
    data = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("reliability", {}) if path is not None else {}
    source = (
        f"{path}: [reliability] taxonomy"
        if data.get("taxonomy")
        else f"${TAXONOMY_ENV}"
        if os.environ.get(TAXONOMY_ENV, "").strip()
        else "the default taxonomy"
    )
    where = f"{source} = {taxonomy!r}"
    if not Path(taxonomy).is_file():
        raise ConfigError(f"{where}: {Path(taxonomy).resolve()} is not a file")
    try:
        Path(taxonomy).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where}: not UTF-8 text (TOML must be): byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
        ) from None


def _check_configurations_cover_corners(path, settings) -> None:
    """Every corner of a box is one of its configurations (reliability.core.hyperparameter_configurations
    refuses fewer): checked here, or every reliability step would fail on it."""
    boxes = {
        "[reliability.box]": settings.box,
        **{f"the box of domain {d!r}": b for d, b in settings.domain_boxes.items()},
    }
    for name, box in boxes.items():
        corners = len(box.corners())
        if settings.n_configurations < corners:
            raise ConfigError(
                f"{path}: [reliability] n_configurations must be at least the {corners} distinct "
                f"corners of {name} (each corner is always a configuration), got "
                f"{settings.n_configurations}"
            )


def _check_reliability_values(path, data: dict) -> None:
    """Types and ranges of ``[reliability]`` that its reader (evalpipeline.steps.reliability) would
    otherwise take as they come: ``success_threshold = 7`` counted every graded score as a failure."""
    from evalpipeline.reliability.core import ReliabilitySettings

    for key, why in _RELIABILITY_NOT_SETTINGS.items():
        if key in data:
            raise ConfigError(f"{path}: [reliability] {key} is not a setting: {why}")
    defaults = {**_dataclass_defaults(ReliabilitySettings), "taxonomy": "", "success_threshold": 1.0, "box": {}}
    defaults = {k: v for k, v in defaults.items() if k not in _RELIABILITY_NOT_SETTINGS}
    defaults = {k: ({} if isinstance(v, dict) or k == "box" else v) for k, v in defaults.items()}
    _refuse_unknown_keys(path, "reliability", data, defaults)
    for key, value in data.items():
        if isinstance(defaults.get(key), dict) and not isinstance(value, dict):
            raise ConfigError(f"{path}: [reliability] {key} must be a table, got {value!r}")
    check_types(path, "reliability", {k: v for k, v in data.items() if not isinstance(defaults.get(k), dict)}, defaults)
    for key in ("horizons", "quantiles"):  # true would be read as 1 (whole numbers are the settings' own check)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in data.get(key, ())):
            raise ConfigError(f"{path}: [reliability] {key} must be an array of numbers, got {data[key]!r}")
    _check_box(path, "reliability.box", data.get("box", {}))
    threshold = data.get("success_threshold", 1.0)
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(
            f"{path}: [reliability] success_threshold must be in (0, 1] (a graded score counts as a "
            f"success when it is at least this), got {threshold!r}"
        )


#: Fields of ReliabilitySettings that the configuration cannot set, and why: the lake sets them itself
_RELIABILITY_NOT_SETTINGS = {
    "seed": "each partition's and model's assessment is seeded from its names (evalpipeline.steps.reliability), "
    "so that reruns and the model's and suites' views agree; remove it",
    "domain_seeds": "a one-suite domain of a model takes its suite's seed (evalpipeline.steps.reliability); remove it",
    "profile": "the operational profile is the taxonomy file's [profile] table ([reliability] taxonomy)",
    "domain_boxes": "the configuration sets one credal box for every domain, [reliability.box]",
}


def _check_box(path, table: str, box: dict) -> None:
    """A credal box's intervals, each an array of two numbers: ``a = "12"`` was read as the interval (1, 2)."""
    unknown = sorted(set(box) - {"a", "b", "c", "d"})
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [{table}]: {unknown}; known: ['a', 'b', 'c', 'd']")
    for key, value in box.items():
        if (
            not isinstance(value, list)
            or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
        ):
            raise ConfigError(f"{path}: [{table}] {key} must be an array of two numbers [low, high], got {value!r}")


#: ``[glm.thresholds]``: the least value each may take, whether it may equal it, and why
_THRESHOLD_MINIMA = {
    "max_r_hat": (1, True, "r-hat is 1 at convergence"),
    "min_ess_bulk": (0, True, "an effective sample size is not negative"),
    "min_ess_tail": (0, True, "an effective sample size is not negative"),
    "max_divergences": (0, True, "a count of divergent transitions"),
    "min_bfmi": (0, True, "BFMI is not negative"),
    "max_pareto_k": (0, False, "PSIS-LOO is reliable up to about 0.7"),
}


def _check_threshold_ranges(path, thresholds: dict) -> None:
    """Thresholds no fit can meet (max_r_hat = -1) or that every fit meets by mistake (min_ess_bulk = -1)
    would only show as every GLM excluded, or none, after the fits; their types are checked already."""
    for key, (least, inclusive, why) in _THRESHOLD_MINIMA.items():
        value = thresholds.get(key)
        if value is not None and (value < least if inclusive else value <= least):
            bound = f"at least {least}" if inclusive else f"greater than {least}"
            raise ConfigError(f"{path}: [glm.thresholds] {key} must be {bound} ({why}), got {value!r}")


def _first(*values):
    return next((v for v in values if v is not None), None)


def load_validation_settings(path: Path | None = None):
    """Validation bounds from ``[validate]`` of the project configuration (defaults otherwise)."""
    from evalpipeline.validate import ValidationSettings

    path = path or config_path()
    if path is None:
        return ValidationSettings()
    data = _table(path, read_config(path), "validate")
    _refuse_unknown_keys(path, "validate", data, _dataclass_defaults(ValidationSettings))
    check_types(path, "validate", data, _dataclass_defaults(ValidationSettings))
    try:
        return ValidationSettings(**data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [validate]: {exc}") from exc


#: ``[posterior]`` defaults: the uniform Beta(1, 1) prior, a 95% HPDI and the position paper's Gamma(1, 1) on the
#: concentration of a unit's attempts (Eq. 8). The post's Gamma(2, 0.1) leans to weak clustering: planted
#: 40 items x 5 epochs (concentration 2) gave its headline intervals 0.92 coverage at 95%, Gamma(1, 1) 0.955.
POSTERIOR_DEFAULTS = {
    "prior_a": 1.0,
    "prior_b": 1.0,
    "hpdi_mass": 0.95,
    "concentration_shape": 1.0,
    "concentration_rate": 1.0,
}


def load_posterior_settings(path: Path | None = None) -> dict[str, float]:
    """The conjugate baseline's prior and HPDI mass from ``[posterior]`` (defaults otherwise).

    They are part of the code versions of ``accuracy_posteriors``, ``suite_comparison`` and
    ``model_profile`` (see :func:`load_comparison_settings`), so editing them marks exactly those
    tables stale.
    """
    path = path or config_path()
    data: dict = _table(path, read_config(path), "posterior") if path is not None else {}
    unknown = sorted(set(data) - set(POSTERIOR_DEFAULTS))
    if unknown:
        raise ConfigError(f"{path}: unknown keys in [posterior]: {unknown}; known: {sorted(POSTERIOR_DEFAULTS)}")
    values = {**POSTERIOR_DEFAULTS, **data}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: [posterior] {name} must be a number, got {value!r}")
        if not math.isfinite(value):  # nan and inf pass the range checks below
            raise ConfigError(f"{path}: [posterior] {name} must be a finite number, got {value!r}")
        values[name] = float(value)
    for first, second in (("prior_a", "prior_b"), ("concentration_shape", "concentration_rate")):
        if min(values[first], values[second]) <= 0:
            raise ConfigError(
                f"{path}: [posterior] {first} and {second} must be positive, got {values[first]} and {values[second]}"
            )
    if not 0.0 < values["hpdi_mass"] < 1.0:
        raise ConfigError(f"{path}: [posterior] hpdi_mass must be in (0, 1), got {values['hpdi_mass']}")
    return values


#: The keys of a ``[judge.<scorer>]`` table: a labelled calibration set's counts, or known rates.
JUDGE_KEYS = ("good_passed", "n_good", "bad_failed", "n_bad", "sensitivity", "specificity")


def load_judge_settings(path: Path | None = None) -> tuple:
    """The LLM judges to correct for, from ``[judge.<scorer>]`` tables (none by default)::

        [judge.model_graded_qa]      # the scorer whose scores the judge gave
        good_passed = 72             # the judge passed 72 of 80 answers humans marked correct
        n_good = 80
        bad_failed = 51              # and failed 51 of 60 marked wrong
        n_bad = 60
        # or, if its rates are known: sensitivity = 0.92, specificity = 0.85

    Each is refused here, naming the scorer, when it is malformed or too close to chance to correct for
    (:func:`evalpipeline.stats.judge.check_judge`)."""
    from evalpipeline.stats.judge import JudgeCalibration, check_judge

    path = path or config_path()
    data: dict = _table(path, read_config(path), "judge") if path is not None else {}
    judges = []
    for scorer, table in sorted(data.items()):
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [judge.{scorer}] must be a table of {', '.join(JUDGE_KEYS)}, got {table!r}")
        unknown = sorted(set(table) - set(JUDGE_KEYS))
        if unknown:
            raise ConfigError(f"{path}: unknown keys in [judge.{scorer}]: {unknown}; known: {list(JUDGE_KEYS)}")
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{path}: [judge.{scorer}] {key} must be a finite number, got {value!r}")
        try:
            judge = JudgeCalibration(scorer, **{k: float(v) for k, v in table.items()})
            check_judge(judge)
        except ValueError as exc:
            raise ConfigError(f"{path}: [judge.{scorer}]: {exc}") from exc
        judges.append(judge)
    return tuple(judges)


def load_comparison_settings(path: Path | None = None):
    """Settings of the suite comparisons and model profiles: the Beta prior and interval mass of
    ``[posterior]``, so that their leaderboards state the same conjugate posterior as
    ``accuracy_posteriors`` (until now they always used Beta(1, 1) and 0.95); the rest default."""
    from evalpipeline.steps.comparison import ComparisonSettings

    values = load_posterior_settings(path)
    return ComparisonSettings(
        prior=(values["prior_a"], values["prior_b"]),
        mass=values["hpdi_mass"],
        concentration_prior=(values["concentration_shape"], values["concentration_rate"]),
        judges=load_judge_settings(path),
    )


def load_glm_config(path: Path | None = None):
    """HiBayES fit settings from ``[glm]`` of the project configuration::

        [glm]                        # sampler (the HiBayES paper Section 3.1 defaults)
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

    from evalpipeline.steps.fits import GlmConfig
    from evalpipeline.models import DiagnosticThresholds, FitSettings

    path = path or config_path()
    data: dict = _table(path, read_config(path), "glm") if path is not None else {}
    data = dict(data)
    thresholds = _table(path, data, "thresholds", "glm.thresholds")
    priors = _table(path, data, "priors", "glm.priors")
    data.pop("thresholds", None), data.pop("priors", None)
    check_types(
        path,
        "glm",
        data,
        {**_dataclass_defaults(FitSettings), "graded": "threshold", "graded_threshold": 0.5, "models": ()},
    )
    check_types(path, "glm.thresholds", thresholds, _dataclass_defaults(DiagnosticThresholds))
    unknown = sorted(set(thresholds) - set(_dataclass_defaults(DiagnosticThresholds)))
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys in [glm.thresholds]: {unknown}; "
            f"known: {sorted(_dataclass_defaults(DiagnosticThresholds))}"
        )
    _check_threshold_ranges(path, thresholds)
    graded = data.pop("graded", "threshold")
    if graded not in GRADED_MODES:
        raise ConfigError(f"{path}: [glm] graded must be one of {list(GRADED_MODES)}, got {graded!r}")
    graded_threshold = float(data.pop("graded_threshold", 0.5))
    if not 0.0 < graded_threshold <= 1.0:
        raise ConfigError(f"{path}: [glm] graded_threshold must be in (0, 1], got {graded_threshold!r}")
    models = data.pop("models", None)
    if models is not None:
        from evalpipeline.models import MODELS

        if not all(isinstance(m, str) for m in models):
            raise ConfigError(f"{path}: [glm] models must be an array of model names, got {models!r}")
        unknown_models = sorted(set(models) - set(MODELS))
        if unknown_models:
            raise ConfigError(f"{path}: [glm] models: unknown {unknown_models}; known: {sorted(MODELS)}")
        models = tuple(models)
    known = {f.name for f in dataclasses.fields(FitSettings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys in [glm]: {unknown}; known: {sorted(known | {'thresholds', 'priors', 'graded', 'graded_threshold', 'models'})}"
        )
    _check_priors(path, priors)
    # checked here, not in FitSettings: evalpipeline.models is hashed into every fit's code version
    if "centring_threshold" in data and not float(data["centring_threshold"]) > 0:
        raise ConfigError(
            f"{path}: [glm] centring_threshold must be > 0 (a level is centred when its groups' data "
            f"information x variance reaches it), got {data['centring_threshold']!r}; "
            'to centre every level, set centring = "centred"'
        )
    try:
        if "retry_on" in data:
            data["retry_on"] = tuple(data["retry_on"])
        return GlmConfig(
            FitSettings(**data), DiagnosticThresholds(**thresholds), dict(priors), graded, graded_threshold, models
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [glm]: {exc}") from exc
