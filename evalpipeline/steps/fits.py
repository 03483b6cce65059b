"""The GLM steps of the pipeline: fit, store and reuse, over a lake (the rankings of the stored
fits: :mod:`evalpipeline.steps.rankings`).

Layout::

    <lake>/glm_fits/model=<key>/suite=<key>/<glm>/      one candidate GLM of one partition
    <lake>/glm_suite_fits/suite=<key>/<glm>/            one multi-LLM GLM of one suite
        posterior.nc          ArviZ InferenceData (netCDF)
        summary.parquet       tidy parameter summary (logit and probability scales)
        diagnostics.parquet   divergences, r-hat, ESS, BFMI, Pareto-k, each with threshold and verdict
        fit.json              attempts, parameterisation, settings, seed, how the chains started
        provenance.json       what the fit was made from: input table hash + code/settings version
        warm-<hash>.json      suite fits: where the chains ended, to start the next refit warm (named
                              by provenance.json; evalpipeline.models.warm)
        predictive.parquet    prior and posterior predictive checks of the success-rate distribution
        predictive.png, forest.png, trace.png   HiBayES Figures 7, 5/6 and 4 for this fit (drawn only when
                              asked, ``draw_plots``, or when the fit fails: evalpipeline.steps.figures)

A fit whose provenance matches its inputs is reused, not refitted, so a rerun
over unchanged data launches no sampling. A suite GLM refitted to new inputs (a model joined) starts
warm from its previous fit when that fit passed under the same code and configuration
(``[glm] warm_start``, :class:`~evalpipeline.models.warm.WarmStart`). The state it starts from is
the file the previous provenance names; a new one gets a new name and replaces it only when the new
provenance is written, so a run killed mid-fit reruns from the same state as before. A model that does not apply to the
data (e.g. item difficulty without repeats) is recorded as such, with the
reason, in ``provenance.json`` and has no fit files: those of an earlier fit (the data changed, or
the code now finds the model unidentified by them) are removed when the record is written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import Lake, read_parquet_files, write_bytes_atomic, write_parquet_atomic
from evalpipeline.steps.samples import NoDataError, rejected_note, read_samples

PARTITION_TABLE = "glm_fits"
SUITE_TABLE = "glm_suite_fits"
FIT_FILES = ("posterior.nc", "summary.parquet", "diagnostics.parquet", "fit.json")


@dataclass
class GlmConfig:
    """Everything that decides a fit besides the data: sampler settings, thresholds, priors per model."""

    settings: object = None  # evalpipeline.models.FitSettings
    thresholds: object = None  # evalpipeline.models.DiagnosticThresholds
    priors: dict[str, dict] = field(default_factory=dict)
    graded: str = "threshold"
    graded_threshold: float = 0.5
    #: candidate GLMs to fit (None: all); the others are recorded as disabled, not fitted
    models: tuple[str, ...] | None = None

    def __post_init__(self):
        from evalpipeline.models import DiagnosticThresholds, FitSettings

        self.settings = self.settings or FitSettings()
        self.thresholds = self.thresholds or DiagnosticThresholds()

    def for_model(self, glm: str) -> dict:
        """The settings that decide ``glm``'s fits, as JSON-able data (hashed into versions). How the
        chains start (``warm_start``, ``warm_burn_in``, ``warm_tuning``) and which samplers are prepared
        ahead (``prepare_samplers_from``) are left out: they decide no estimate, and switching them must
        not refit every GLM."""
        import dataclasses

        settings = {
            k: v
            for k, v in dataclasses.asdict(self.settings).items()
            if k not in ("warm_start", "warm_burn_in", "warm_tuning", "prepare_samplers_from")
        }
        return {
            "glm": glm,
            "settings": settings,
            "thresholds": dataclasses.asdict(self.thresholds),
            "priors": self.priors.get(glm, {}),
            "graded": [self.graded, self.graded_threshold],
            "enabled": self.models is None or glm in self.models,
        }


@dataclass
class FitOutcome:
    """What one fit step did."""

    glm: str
    status: str  # "fitted", "reused" or "not applicable"
    directory: Path
    passed: bool | None = None
    reason: str | None = None
    diagnostics: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    attempts: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

    @property
    def summary_path(self) -> Path:
        return self.directory / "summary.parquet"


def partition_fit_dir(lake: Lake, model: str, suite: str, glm: str) -> Path:
    return lake.partition_dir(PARTITION_TABLE, model, suite) / glm


def suite_fit_dir(lake: Lake, suite: str, glm: str) -> Path:
    return lake.partition_dir(SUITE_TABLE, None, None) / f"suite={to_partition_key(suite)}" / glm


def fit_partition_glm(
    lake: Lake,
    model: str,
    suite: str,
    glm: str,
    config: GlmConfig,
    *,
    version: str,
    fitter=None,
    progress: Callable[[str], None] | None = None,
    draw_plots: bool = True,
) -> FitOutcome:
    """Fit candidate ``glm`` to one model x suite partition (or reuse the stored fit of the same inputs).

    ``draw_plots=False``: the fit's figures (:data:`FIT_PLOTS`) are drawn only when it fails a gating
    diagnostic; otherwise earlier figures are removed, so that none shows another fit, and
    :func:`draw_fit_plots` draws them when asked. ``True``: drawn with every fit, and drawn for a
    reused fit that has none. The figures are no input of the fit: the choice refits nothing."""
    samples_path = lake.table_path("samples", "samples.parquet", model, suite)
    if not samples_path.exists():
        raise NoDataError(f"no sample table for {model!r} x {suite!r}: {samples_path} does not exist")
    if _disabled(glm, config):
        return _record_disabled(partition_fit_dir(lake, model, suite, glm), glm, config, version, progress)
    inputs = {"samples": samples_content_hash(samples_path)}
    return _fit(
        partition_fit_dir(lake, model, suite, glm),
        glm,
        config,
        version,
        inputs,
        lambda: read_samples(lake, model, suite),
        seed_key=f"{model}|{suite}|{glm}",
        fitter=fitter,
        progress=progress,
        draw_plots=draw_plots,
    )


#: Sample-table columns that say where a row was read from, not what it is. A log moved or renamed
#: (same bytes) changes them and nothing else, and must not refit a GLM.
LOCATION_COLUMNS = ("log_path",)


def samples_content_hash(path: Path) -> str:
    """SHA-256 of a sample table's rows without :data:`LOCATION_COLUMNS`: what a fit's reuse compares."""
    import pyarrow.parquet as pq

    return _rows_hash(pq.read_table(path))


def _rows_hash(table: pa.Table | pd.DataFrame) -> str:
    """SHA-256 of a sample table's rows and dtypes without :data:`LOCATION_COLUMNS`; of the table
    read, or of the DataFrame its ``to_pandas`` made (the same digest)."""
    if isinstance(table, pa.Table):
        table = table.to_pandas()
    frame = table.drop(columns=[c for c in LOCATION_COLUMNS if c in table.columns])
    digest = hashlib.sha256("\x1f".join(f"{c}:{t}" for c, t in frame.dtypes.astype(str).items()).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def suite_samples(lake: Lake, suite: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Every model's samples on ``suite`` (with a ``model`` column) and each table's content hash
    (:func:`samples_content_hash`'s digest)."""
    tables = lake.sample_tables(suite=suite)  # without those that failed validation
    if not tables:
        raise NoDataError(
            f"no sample tables for suite {suite!r} under {lake.root / 'samples'}" + rejected_note(lake, suite=suite)
        )
    paths = [path for _model, _suite, path in tables]
    models = [model for model, _suite, _path in tables]
    read = read_parquet_files(paths)
    if read.one_schema:
        hashes = _slices_hashes(read.frame, models, read.rows)
    else:  # the frame's dtypes may not be a table's own: each table hashed alone
        hashes = {model: samples_content_hash(path) for model, path in zip(models, paths)}
    frame = read.frame
    frame.insert(0, "model", np.repeat(np.array(models, dtype=object), read.rows))
    return frame, hashes


def _slices_hashes(frame: pd.DataFrame, names: list[str], rows: list[int]) -> dict[str, str]:
    """:func:`_rows_hash` of each table concatenated in ``frame`` (``rows`` of each, in order; each
    slice with the dtypes of its table), from one pass over the frame: pandas hashes each row's values,
    not its position, so a table's digest is its slice's."""
    body = frame.drop(columns=[c for c in LOCATION_COLUMNS if c in frame.columns])
    header = "\x1f".join(f"{c}:{t}" for c, t in body.dtypes.astype(str).items()).encode()
    row_hashes = pd.util.hash_pandas_object(body, index=False).to_numpy()
    ends = np.cumsum(rows, dtype=np.int64)
    hashes = {}
    for name, end, count in zip(names, ends, rows):
        digest = hashlib.sha256(header)
        digest.update(row_hashes[end - count : end].tobytes())
        hashes[name] = digest.hexdigest()
    return hashes


def fit_suite_glm(
    lake: Lake,
    suite: str,
    glm: str,
    config: GlmConfig,
    *,
    version: str,
    fitter=None,
    progress: Callable[[str], None] | None = None,
    draw_plots: bool = True,
) -> FitOutcome:
    """Fit the multi-LLM model ``glm`` to every model evaluated on ``suite``.

    ``draw_plots``: as in :func:`fit_partition_glm` (``[plots] suite_fits``; a fit that fails a
    gating diagnostic always draws its figures)."""
    if _disabled(glm, config):
        if not lake.sample_tables(suite=suite):
            suite_samples(lake, suite)  # raises the NoDataError that names what is missing
        return _record_disabled(suite_fit_dir(lake, suite, glm), glm, config, version, progress)
    samples, hashes = suite_samples(lake, suite)
    return _fit(
        suite_fit_dir(lake, suite, glm),
        glm,
        config,
        version,
        hashes,
        lambda: samples,
        seed_key=f"{suite}|{glm}",
        fitter=fitter,
        progress=progress,
        draw_plots=draw_plots,
        warm_start=config.settings.warm_start,
        source={"suite": suite, "lake": str(lake.root.resolve())},
    )


def _fit(
    directory: Path,
    glm: str,
    config: GlmConfig,
    version: str,
    inputs: dict,
    load: Callable,
    *,
    seed_key: str,
    fitter,
    progress,
    draw_plots: bool = True,
    warm_start: bool | None = None,
    source: dict | None = None,
) -> FitOutcome:
    """Fit (or reuse) one GLM in ``directory``. ``warm_start`` (suite fits: ``[glm] warm_start``): True
    starts from the previous fit's stored state when it may (:func:`previous_warm_state`); True or False
    stores where this fit's chains ended, so that switching warm starts on takes effect at the next
    refit. None (partition fits): cold, nothing stored; a new partition has no previous fit, and a warm
    sampler is one more program to compile per shape bucket.

    ``source`` (suite fits: the suite): with warm starts on, a passing fit whose warm refit after one
    more LLM would not find its sampler compiled leaves a request naming it, for
    :func:`prepare_requested_samplers`."""
    from evalpipeline.models import applicability, fit_glm, write_fit

    say = progress or (lambda _m: None)
    provenance = {"inputs": inputs, "version": version, "config": config.for_model(glm)}
    stored = _stored(directory, provenance)
    if stored is not None:
        say(f"{glm}: inputs and code unchanged since the stored fit; reused")
        if draw_plots and stored.status == "reused" and not all((directory / p).exists() for p in FIT_PLOTS.values()):
            draw_fit_plots(directory, _glm_data(load(), config))  # e.g. fitted while figures were on request
        return stored
    data = _glm_data(load(), config)
    reason = applicability(glm, data)
    if reason:
        _clear_fit_files(directory)
        _write_provenance(directory, {**provenance, "status": "not applicable", "reason": reason})
        say(f"{glm}: not applicable ({reason})")
        return FitOutcome(glm, "not applicable", directory, reason=reason)
    s = config.settings
    say(f"{glm}: NUTS {s.num_chains} chains x ({s.num_warmup} warmup + {s.num_samples} draws) on {data.n_units} units")
    warm, why_cold = (
        previous_warm_state(directory, provenance)
        if warm_start
        else (None, "warm starts are off ([glm] warm_start = false)")
        if warm_start is False
        else (None, None)
    )
    if why_cold:
        say(f"{glm}: starting cold: {why_cold}")
    fit = fit_glm(
        glm,
        data,
        config.settings,
        config.thresholds,
        seed_key,
        fitter,
        priors=config.priors.get(glm),
        warm=warm,
        **({"cold_reason": why_cold} if why_cold else {}),
    )
    for attempt in fit.attempts:
        say(
            f"{glm}: attempt {attempt['attempt']} ({attempt.get('start', 'cold')}, target accept {attempt['target_accept']}) "
            f"{'passed' if attempt['passed'] else 'failed ' + ', '.join(attempt['failed'])} in {attempt['seconds']:.1f}s"
        )
    write_fit(fit, directory, log_likelihood=config.settings.store_log_likelihood)
    _write_predictive_checks(fit, data, directory)
    if draw_plots or not fit.passed:  # a failed fit is the one somebody will look at
        _write_fit_plots(fit, data, directory)
    else:
        remove_fit_plots(directory)
    keep_state = warm_start is not None and fit.warm_state is not None
    state = _write_warm_state(directory, fit.warm_state) if keep_state else None
    _write_provenance(directory, {**provenance, "status": "fitted", "passed": fit.passed, "warm_state": state})
    _remove_warm_states(directory, keep=state)  # only now: until here the old provenance named the old state
    why = (
        preparation_reason(fit, data.n_models, config.settings.prepare_samplers_from) if warm_start and source else None
    )
    if why:
        fitter.request_preparation(fit.design_key, {**source, "glm": glm, "reason": why})
        say(f"{glm}: asked for the warm sampler of one LLM more to be prepared ({why})")
    return FitOutcome(
        glm, "fitted", directory, fit.passed, None, fit.diagnostics, fit.summary, fit.attempts, fit.metadata
    )


def preparation_reason(fit, n_models: int, prepare_from: int) -> str | None:
    """Why the warm sampler of ``fit``'s data with one LLM more should be prepared ahead, or None: the
    fit passed (a failed one leaves no state to start warm from), its suite has at least
    ``prepare_from`` LLMs (0: never), and the fitter's program cache lacks that sampler
    (``fit.next_llm_ready``; None: no cache to prepare into)."""
    if not fit.passed or fit.next_llm_ready is not False or not 0 < prepare_from <= n_models:
        return None
    padded = fit.metadata["layout"]["models"]
    if n_models >= padded:
        return f"{n_models} LLMs fill the sampler's padded LLM axis ({padded})"
    return "its warm sampler for one LLM more is not compiled yet"


def prepare_requested_samplers(
    lake: Lake, config: GlmConfig, fitter, *, progress: Callable[[str], None] | None = None
) -> list[dict]:
    """Prepare the warm samplers that suite fits asked for (:func:`_fit`'s requests): for each, the
    suite's data with one LLM more (:func:`with_another_llm`), so that the night a new LLM joins finds
    its sampler traced and compiled (:meth:`~evalpipeline.models.Fitter.prepare`) instead of paying
    ~6 s in each process that refits the suite. Only the requests of fits in ``lake`` are handled (lakes
    may share a cache); each is removed once handled, prepared or not (a fit that still needs one asks
    again). Returns one record per request: suite, glm, why it was asked, what was done (``prepared``;
    ``already stored, compiled``: traced before, its programs compiled or found in the compilation
    cache; ``skipped: <why>``; ``failed: <error>``), seconds and, when prepared, the LLMs it was
    prepared for."""
    from evalpipeline.models import applicability
    from evalpipeline.models.fit import preparation_requests

    say = progress or (lambda _m: None)
    if fitter is None or fitter.program_cache is None:
        return []
    done = []
    for path in preparation_requests(fitter.program_cache, lake.root):
        try:
            request = json.loads(path.read_text())
            suite, glm = str(request["suite"]), str(request["glm"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            say(f"{path}: not a preparation request ({exc!r}); removed")
            path.unlink(missing_ok=True)
            continue
        record = {"suite": suite, "glm": glm, "reason": str(request.get("reason", "")), "seconds": 0.0}
        try:
            if _disabled(glm, config):
                record["done"] = f"skipped: {glm} is not in [glm] models"
            else:
                samples, _hashes = suite_samples(lake, suite)
                data = _glm_data(with_another_llm(samples), config)
                reason = applicability(glm, data)
                if reason:  # e.g. asked for before the tables changed: no fit will need the sampler
                    record["done"] = f"skipped: not applicable: {reason}"
                else:
                    outcome = fitter.prepare(glm, data, config.settings, priors=config.priors.get(glm))
                    record |= {
                        "done": "already stored, compiled" if outcome["stored"] else "prepared",
                        "seconds": outcome["seconds"],
                        "llms": data.n_models,
                    }
        except NoDataError as exc:
            record["done"] = f"skipped: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported; the night's fit compiles its own sampler
            record["done"] = f"failed: {type(exc).__name__}: {exc}"
        path.unlink(missing_ok=True)
        say(
            f"{glm} on suite {suite}: {record['done']}" + (f" in {record['seconds']:.1f}s" if record["seconds"] else "")
        )
        done.append(record)
    return done


def with_another_llm(samples: pd.DataFrame) -> pd.DataFrame:
    """``samples`` (a suite's, with a ``model`` column) and a copy of its first model's rows under a name
    no model has: the shape the suite takes when one more LLM joins."""
    models = sorted(samples["model"].unique())
    if not models:
        raise NoDataError("no samples to add an LLM to")
    name = "~next LLM"
    while name in set(models):
        name += "~"
    return pd.concat([samples, samples[samples["model"] == models[0]].assign(model=name)], ignore_index=True)


WARM_STATE_PATTERN = "warm-*.json"


def previous_warm_state(directory: Path, provenance: dict):
    """The stored :class:`~evalpipeline.models.warm.WarmStart` of the fit in ``directory`` when the
    next fit, of ``provenance``, may start from it: that fit passed under the same code version and
    configuration, and its state file is intact. Returns (state or None, why not or None)."""
    from evalpipeline.models.warm import WarmStart, WarmStartMismatch

    path = directory / "provenance.json"
    if not path.exists():
        return None, None  # a first fit: nothing to say (fit_glm: "no earlier fit to start from")
    try:
        record = json.loads(path.read_text())
    except ValueError:
        return None, f"{path} is not JSON"
    wanted = json.loads(json.dumps({k: provenance[k] for k in ("version", "config")}, default=str))
    if record.get("status") != "fitted" or not record.get("passed"):
        return None, "the previous fit did not pass its diagnostics"
    if record.get("version") != wanted["version"]:
        return None, "the previous fit was made by other code"
    if record.get("config") != wanted["config"]:
        return None, "the previous fit was made under another configuration"
    name = record.get("warm_state")
    if not name:
        return None, "the previous fit stored no warm-start state"
    state_path = directory / name
    try:
        raw = state_path.read_bytes()
    except OSError as exc:
        return None, f"cannot read {state_path}: {exc}"
    if _warm_state_name(raw) != name:
        return None, f"{state_path} does not match its content hash"
    try:
        return WarmStart.from_json(raw, str(state_path)), None
    except WarmStartMismatch as exc:
        return None, str(exc)


def _warm_state_name(raw: bytes) -> str:
    return f"warm-{hashlib.sha256(raw).hexdigest()[:16]}.json"


def _write_warm_state(directory: Path, state) -> str:
    raw = state.to_json()
    name = _warm_state_name(raw)
    write_bytes_atomic(raw, directory / name)
    return name


def _remove_warm_states(directory: Path, keep: str | None = None) -> None:
    for path in directory.glob(WARM_STATE_PATTERN):
        if path.name != keep:
            path.unlink(missing_ok=True)


def _disabled(glm: str, config: GlmConfig) -> bool:
    return config.models is not None and glm not in config.models


def _record_disabled(
    directory: Path, glm: str, config: GlmConfig, version: str, progress: Callable[[str], None] | None
) -> FitOutcome:
    """Record a GLM left out of ``[glm] models`` as not applicable, without reading its data: a suite's
    tables at 100 models take ~3 s to read and hash, for each left-out suite GLM of every refresh. The
    record does not depend on the data (``inputs`` is None), so it is written once."""
    reason = f"disabled: not in [glm] models {list(config.models)}"
    _clear_fit_files(directory)
    _write_provenance(
        directory,
        {
            "inputs": None,
            "version": version,
            "config": config.for_model(glm),
            "status": "not applicable",
            "reason": reason,
        },
    )
    (progress or (lambda _m: None))(f"{glm}: {reason}")
    return FitOutcome(glm, "not applicable", directory, reason=reason)


def _glm_data(samples: pd.DataFrame, config: GlmConfig):
    from evalpipeline.models import GlmData

    return GlmData.from_samples(samples, graded=config.graded, graded_threshold=config.graded_threshold)


def _write_predictive_checks(fit, data, directory: Path) -> None:
    """Prior and posterior predictive checks of the success-rate distribution (HiBayES Figure 7):
    ``predictive.parquet`` (observed vs simulated share per bin, with p-values)."""
    checks = fit.predictive_checks(data)
    write_parquet_atomic(pa.Table.from_pandas(checks, preserve_index=False), directory / "predictive.parquet")


#: Per-fit plots beside the predictive check, shown in the fit asset's metadata and linked from the lake.
FIT_PLOTS = {"forest": "forest.png", "trace": "trace.png", "predictive": "predictive.png"}
#: at most this many posterior quantities in a trace plot (hyperparameters first)
TRACE_VARIABLES = 6


def draw_fit_plots(directory: Path, data) -> dict[str, Path]:
    """Draw :data:`FIT_PLOTS` of the fit stored in ``directory`` (written by :func:`_fit`), fitted to
    ``data`` (its :class:`~evalpipeline.models.GlmData`): the figures it would have drawn when fitted,
    from the stored draws (``posterior.nc`` holds them losslessly)."""
    from evalpipeline.models import read_fit

    _write_fit_plots(read_fit(directory), data, directory)
    return {name: directory / file for name, file in FIT_PLOTS.items()}


def remove_fit_plots(directory: Path) -> None:
    for file in FIT_PLOTS.values():
        (directory / file).unlink(missing_ok=True)


def _write_predictive_plot(fit, data, directory: Path) -> None:
    """``predictive.png``: observed per-unit success rates against posterior predictive draws (Figure 7)."""
    import numpy as np

    from evalpipeline.plots import save_png, success_rate_distribution

    n = data.units["n"].to_numpy(float)
    simulated = fit.idata.posterior_predictive["obs"].values.reshape(-1, data.n_units) / n
    trials = int(np.median(n)) if np.all(n == np.median(n)) else None
    figure = success_rate_distribution(
        data.observed_rates(),
        simulated,
        n_trials=trials,
        title=f"{fit.name}: per-item success rates, observed vs posterior predictive",
    )
    save_png(figure, directory / "predictive.png")


def _write_fit_plots(fit, data, directory: Path) -> None:
    """HiBayES Figures 4, 5/6 and 7 for one fit: ``trace.png`` (per-chain densities, traces and rank
    plots of the hyperparameters and location effects), ``forest.png`` (posterior success rate with
    both HPDIs per location parameter -- overall, LLM, domain, subdomain -- beside the empirical mean
    +/- SEM of the same group of attempts) and ``predictive.png``."""
    import numpy as np

    from evalpipeline.plots import forest_plot, nest_inside, save_png, trace_rank_plot

    _write_predictive_plot(fit, data, directory)
    posterior = fit.idata.posterior
    names = [v for v in posterior.data_vars if not v.endswith("_raw") and v != "p"]
    names = sorted(names, key=lambda v: (posterior[v].ndim > 2, names.index(v)))[:TRACE_VARIABLES]
    save_png(
        trace_rank_plot(fit.idata, names, title=f"{fit.name}: traces, per-chain densities and rank plots"),
        directory / FIT_PLOTS["trace"],
    )

    summary = fit.summary
    rows = summary[summary["scale"] == "location"].copy()
    if rows.empty:
        return
    units = data.units
    labels, empirical = [], []
    for row in rows.itertuples():
        keys = {
            c: getattr(row, c)
            for c in ("model", "domain", "subdomain")
            if c in units.columns and getattr(row, c) not in (None, "(none)") and not pd.isna(getattr(row, c))
        }
        group = units
        for column, value in keys.items():
            group = group[group[column].astype(str) == str(value)]
        k, n = float(group["k"].sum()), float(group["n"].sum())
        empirical.append((k / n, np.sqrt(k / n * (1 - k / n) / n)) if n > 0 else (np.nan, np.nan))
        labels.append(" / ".join(str(v) for v in keys.values()) or row.parameter)
    hpdi, outer = ("prob_hpdi", "prob_hpdi2")
    masses = (float(rows["hpdi_mass"].iloc[0]), float(rows["hpdi2_mass"].iloc[0]))
    if masses[1] < masses[0]:  # the thick interval is the narrower mass
        hpdi, outer, masses = outer, hpdi, masses[::-1]
    outer_low, outer_high = rows[f"{outer}_low"].to_numpy(), rows[f"{outer}_high"].to_numpy()
    inner_low, inner_high = nest_inside(rows[f"{hpdi}_low"], rows[f"{hpdi}_high"], outer_low, outer_high)
    frame = pd.DataFrame(
        {
            "label": labels,
            "level": rows["parameter"].to_numpy(),
            "posterior_mean": rows["prob_mean"].to_numpy(),
            "hpdi_low": inner_low,
            "hpdi_high": inner_high,
            "outer_low": outer_low,
            "outer_high": outer_high,
            "empirical_mean": [e[0] for e in empirical],
            "empirical_sem": [e[1] for e in empirical],
        }
    )
    save_png(
        forest_plot(
            frame,
            title=f"{fit.name}: posterior success rates",
            hpdi_label=f"{masses[0]:.0%} HPDI",
            outer_label=f"{masses[1]:.0%} HPDI",
        ),
        directory / FIT_PLOTS["forest"],
    )


def _stored(directory: Path, provenance: dict) -> FitOutcome | None:
    path = directory / "provenance.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if {k: record.get(k) for k in provenance} != json.loads(json.dumps(provenance, default=str)):
        return None
    glm = provenance["config"]["glm"]
    if record.get("status") == "not applicable":
        return FitOutcome(glm, "not applicable", directory, reason=record.get("reason"))
    if not all((directory / name).exists() for name in FIT_FILES):
        return None
    fit = json.loads((directory / "fit.json").read_text())
    return FitOutcome(
        glm,
        "reused",
        directory,
        bool(record.get("passed")),
        None,
        pd.read_parquet(directory / "diagnostics.parquet"),
        pd.read_parquet(directory / "summary.parquet"),
        fit.get("attempts", []),
        fit.get("metadata", {}),
    )


def _write_provenance(directory: Path, record: dict) -> None:
    write_bytes_atomic(
        json.dumps(record, indent=1, sort_keys=True, default=str).encode(), directory / "provenance.json"
    )


#: What a fit writes besides :data:`FIT_FILES` (and its figures, :data:`FIT_PLOTS`): removed with them
#: when the GLM is recorded as not applicable, so that nothing of an earlier fit stays beside the record.
FIT_EXTRA_FILES = ("criteria.parquet", "predictive.parquet")


def _clear_fit_files(directory: Path) -> None:
    for name in (*FIT_FILES, *FIT_EXTRA_FILES):
        (directory / name).unlink(missing_ok=True)
    remove_fit_plots(directory)
    _remove_warm_states(directory)


def read_outcome(directory: Path) -> FitOutcome | None:
    """The stored outcome in ``directory`` regardless of inputs (None when nothing was stored)."""
    path = directory / "provenance.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return _stored(directory, {k: record[k] for k in ("inputs", "version", "config")})


def remove_fit(directory: Path) -> None:
    """Delete a stored fit (e.g. of a model removed from the registry)."""
    shutil.rmtree(directory, ignore_errors=True)


#: ``status`` in ``fits.parquet`` of a suite GLM whose folder holds no complete fit
NO_STORED_FIT = "no stored fit"


def no_stored_fit_reason(directory: Path) -> str:
    """Why :func:`read_outcome` found nothing in ``directory``: a fit under way or
    killed before its record was written, or fit files deleted since."""
    if not (directory / "provenance.json").exists():
        return (
            f"{NO_STORED_FIT}: provenance.json is missing (a fit under way, or one that did not finish); "
            "materialise it again if no run is fitting it"
        )
    missing = [name for name in FIT_FILES if not (directory / name).exists()]
    return f"{NO_STORED_FIT}: {', '.join(missing)} missing; materialise it again to refit"
