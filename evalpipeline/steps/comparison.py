"""Suite comparisons and model profiles over a lake: the library behind the assets
``suite_comparison`` (per suite) and ``model_profile`` (per model). No Dagster here.

Layout written (``<key>`` is :func:`evalpipeline.lake.keys.to_partition_key` of the name)::

    <lake>/suite_comparison/suite=<key>/leaderboard.parquet    LEADERBOARD_COLUMNS (+ p_above_<t>)
    <lake>/suite_comparison/suite=<key>/pairwise.parquet       PAIRWISE_TABLE_COLUMNS
    <lake>/suite_comparison/suite=<key>/fits.parquet           FIT_STATUS_COLUMNS: every suite GLM, used or why not
    <lake>/suite_comparison/suite=<key>/plots/leaderboard.png  posterior HPDI beside the CLT interval, P(best)
    <lake>/suite_comparison/suite=<key>/plots/pairwise.png     heatmap of the headline P(row > column), leaderboard order
                                                               (cell values as text up to 25 models)
    <lake>/suite_comparison/suite=<key>/plots/glm_forest.png   the suite GLM's per-model effects (only when a fit passed)
    <lake>/model_profile/model=<key>/profile.parquet           PROFILE_COLUMNS
    <lake>/model_profile/model=<key>/plots/forest.png          the model across suites

Sources and choices:

* Per model on a suite: the headline, design-aware posterior of the overall
  success rate (:func:`evalpipeline.stats.posteriors.success_rate_posterior`:
  the unit of evidence is the item with its epochs, or the declared cluster;
  prior recorded in every row), its HPDI, the independent-attempts HPDI
  beside it (flagged when too narrow), and the conventional intervals --
  Wilson (Appendix A.2 Eq. 12), Clopper-Pearson (Eq. 24-25), CLT/Wald (Eq. 2,
  5; unclipped, with the zero-width / outside-[0, 1] flag of Section 3.1),
  which count attempts as independent. Graded scores enter the binomial
  methods quasi-binomially (k = sum of scores), as everywhere in
  ``evalpipeline.stats``.
* P(best), expected rank: from seeded draws of the headline Beta posteriors
  (``stats.rankings``; the slides' "share of posterior samples").
  P(accuracy > t): exact tail of the headline Beta (HiBayES Section 1, Scenario 1, the 80%
  safety threshold). Thresholds are *wide* columns named ``p_above_<t>``
  with ``t`` printed by :func:`threshold_column` (``p_above_0.8``): one row
  per model keeps the leaderboard one table.
* A model counted on fewer than 90% of the suite's items is flagged
  (``subset_flag``): its raw rate answers a different question; the suite
  GLM's item effects or the paired comparison on shared items compare it.
* The pairwise table is :func:`evalpipeline.stats.compare.pairwise_table`
  plus ``suite``, the headline probability ``p_a_better`` and, when a suite
  GLM passed its diagnostics, ``p_a_better_glm`` from that GLM's joint
  posterior draws of the per-model effects (the "joint suite-level GLM's
  model contrasts" of the issue).
* Which suite GLM: the first of ``ComparisonSettings.suite_glms`` whose fit
  exists and passed the gating diagnostics (``DiagnosticThresholds.gating``).
  Failed and not-applicable fits are never used; they are listed in
  ``fits.parquet`` with the reason. The GLM's model effect is ``expit`` of the
  model's location on the logit scale (the summary's ``prob_*`` columns).
* The bivariate-probit columns are NaN whenever a suite has a score other
  than 0 or 1: that model (position paper Section 3.4, Appendix E.2) is a 2x2
  table of right/wrong pairs. The demo's ``agentic_ops`` is graded by a judge
  with C / P / I, where P (partial) is scored 0.5, so the probit is correctly
  skipped there; the logit model with item effects reads the 0.5 quasi-
  binomially and is reported.
* Cross-suite view of a model (two rows, ``scope`` says which):
  ``pooled`` -- one headline posterior over every counted attempt on every suite
  (weights suites by their number of attempts; units are each suite's); ``mean of suites`` -- the
  posterior of the unweighted mean of the per-suite success rates, from
  seeded draws of the per-suite headline Beta posteriors (every suite
  counts the same; HPDI from the draws). Ranks and P(best) are per suite
  only: models are not all evaluated on the same suites.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from evalpipeline.steps.fits import NO_STORED_FIT, no_stored_fit_reason
from evalpipeline.steps.fits import SUITE_TABLE, read_outcome
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import Lake, file_identity, read_parquet_files, write_parquet_atomic
from evalpipeline.steps.samples import NoDataError, rejected_note, read_samples
from evalpipeline.stats.compare import PAIRWISE_COLUMNS, pairwise_table
from evalpipeline.stats.conventional import clopper_pearson_interval, wilson_interval
from evalpipeline.stats.intervals import clt_flags, clt_interval
from evalpipeline.stats.posteriors import CONCENTRATION_PRIOR, DESIGN_COLUMNS, attempt_units, success_rate_posterior
from evalpipeline.stats.judge import JudgeCalibration, judge_corrected_accuracy
from evalpipeline.stats.rankings import beta_draws, rank_probabilities, threshold_probabilities_beta

SUITE_COMPARISON_TABLE = "suite_comparison"
MODEL_PROFILE_TABLE = "model_profile"
DEFAULT_SUITE_GLMS = ("suite_binomial", "suite_beta_binomial", "suite_nested", "suite_null")


@dataclass(frozen=True)
class ComparisonSettings:
    """What decides a suite comparison besides the data (hash it into the asset's code version)."""

    prior: tuple[float, float] = (1.0, 1.0)
    mass: float = 0.95  # HPDI mass and interval level of every interval
    thresholds: tuple[float, ...] = (0.8,)  # HiBayES's 80% safety threshold
    rank_draws: int = 20_000  # posterior draws for P(best) and expected rank
    pairwise_draws: int = 100_000  # draws for the independent difference / odds-ratio intervals
    seed: int = 0
    probit: bool = True  # compute the bivariate-probit columns (0/1 suites only)
    suite_glms: tuple[str, ...] = DEFAULT_SUITE_GLMS  # preference order of the suite GLM to report
    concentration_prior: tuple[float, float] = CONCENTRATION_PRIOR  # Gamma(shape, rate) on the clusters' d
    judges: tuple[JudgeCalibration, ...] = ()  # LLM judges to correct for, by scorer ([judge.<scorer>])

    def __post_init__(self):
        if len(self.prior) != 2 or min(self.prior) <= 0:
            raise ValueError(f"ComparisonSettings.prior must be two positive numbers, got {self.prior}")
        if len(self.concentration_prior) != 2 or min(self.concentration_prior) <= 0:
            raise ValueError(
                "ComparisonSettings.concentration_prior must be two positive numbers (shape, rate), "
                f"got {self.concentration_prior}"
            )
        if not 0 < self.mass < 1:
            raise ValueError(f"ComparisonSettings.mass must be in (0, 1), got {self.mass}")
        for t in self.thresholds:
            if not 0 <= t <= 1:
                raise ValueError(f"ComparisonSettings.thresholds must lie in [0, 1], got {t}")
        if len({threshold_column(t) for t in self.thresholds}) != len(self.thresholds):
            raise ValueError(f"ComparisonSettings.thresholds has duplicates: {self.thresholds}")
        if self.rank_draws < 100 or self.pairwise_draws < 100:
            raise ValueError("ComparisonSettings: rank_draws and pairwise_draws must be at least 100")


def threshold_column(threshold: float) -> str:
    """Column name of P(accuracy > threshold): ``p_above_0.8``, ``p_above_0.95`` (shortest exact repr)."""
    return f"p_above_{float(threshold)!r}"


_LEADERBOARD_BASE = {
    "suite": "suite display name",
    "rank": "1 = highest posterior mean (ties: alphabetical by model)",
    "model": "model display name",
    "n": "attempts counted (items x epochs; errored, limit-hit and unscored rows are not counted)",
    "n_items": "distinct items among them",
    "k": "sum of scores (successes; fractional for graded scores)",
    "n_excluded": "attempts not counted: errored, limit-hit or unscored",
    "observed_mean": "k / n (NaN when n = 0)",
    "prior_a": "Beta prior a",
    "prior_b": "Beta prior b",
    "posterior_a": "headline Beta a = prior_a + k / design_effect",
    "posterior_b": "headline Beta b = prior_b + (n - k) / design_effect",
    "posterior_mean": "posterior mean of the success rate (headline: design-aware)",
    "hpdi_mass": "probability mass of the HPDI and level of every interval in the row",
    "hpdi_low": "headline HPDI, lower: the unit of evidence is the item with its epochs or the declared cluster",
    "hpdi_high": "headline HPDI, upper",
    **DESIGN_COLUMNS,
    "n_suite_items": "distinct items any model was counted on in the suite",
    "subset_flag": "the model was counted on fewer than 90% of the suite's items: its raw success rate is not "
    "comparable with the others'; read the suite GLM (item effects) or the paired comparison on "
    "shared items instead. Null otherwise",
    "wilson_low": "Wilson score interval, lower (conventional)",
    "wilson_high": "Wilson score interval, upper",
    "clopper_pearson_low": "Clopper-Pearson exact interval, lower (conventional)",
    "clopper_pearson_high": "Clopper-Pearson exact interval, upper",
    "clt_low": "CLT interval mean -+ z SE, lower, unclipped (the usual reading): SE from p (1 - p) for 0/1 scores "
    "(Wald), from the scores' sample variance for graded ones (then narrower than Wilson's)",
    "clt_high": "CLT interval, upper, unclipped",
    "clt_flag": "why the CLT interval is degenerate (zero width, outside [0, 1], no data), else null",
    "p_best": "posterior probability that this model has the highest success rate on the suite (headline posteriors)",
    "expected_rank": "posterior mean rank (1 = best)",
    "rank_low": "lower end of the 95% posterior rank interval: the best rank with at least 2.5% of the draws at it "
    "or better (an integer, a rank some draw has)",
    "rank_high": "upper end: the worst rank with at least 2.5% of the draws at it or worse (an integer); under 2.5% "
    "of the draws lie beyond either end, so the interval holds at least 95% of them",
}
_LEADERBOARD_GLM = {
    "glm": "suite GLM the glm_* columns come from (null when no suite GLM passed its diagnostics)",
    "glm_mean": "the GLM's per-model effect as a success rate: posterior mean of expit(model location); a graded "
    'score counts as a success at [glm] graded_threshold (0.5) unless [glm] graded = "fractional", so it '
    "can differ from posterior_mean, which averages the scores",
    "glm_hpdi_low": "its HPDI (mass glm_hpdi_mass), lower",
    "glm_hpdi_high": "its HPDI, upper",
    "glm_hpdi_mass": "mass of that HPDI (the fit's setting)",
    "glm_p_best": "P(best) from the GLM's joint posterior draws of the model effects",
}
_LEADERBOARD_JUDGE = {
    "judge": "the scorer of the model's attempts that has an LLM judge configured ([judge.<scorer>]); null when "
    "none has",
    "judge_mean": "success rate corrected for the judge's sensitivity and specificity, posterior mean (the post's "
    "judge model, the calibration's uncertainty propagated; from the headline's effective counts)",
    "judge_low": "its equal-tailed interval, lower",
    "judge_high": "its equal-tailed interval, upper",
    "judge_note": "why a configured judge was not corrected for (several scorers, graded scores), else null",
}


def leaderboard_columns(thresholds=(0.8,)) -> dict[str, str]:
    """Column -> meaning of the leaderboard for the given thresholds (wide ``p_above_<t>`` columns)."""
    threshold_cols = {
        threshold_column(t): f"posterior P(success rate > {float(t):g}) (exact tail of the headline Beta)"
        for t in thresholds
    }
    return {**_LEADERBOARD_BASE, **threshold_cols, **_LEADERBOARD_GLM, **_LEADERBOARD_JUDGE}


LEADERBOARD_COLUMNS = leaderboard_columns(ComparisonSettings().thresholds)

PAIRWISE_TABLE_COLUMNS = {
    "suite": "suite display name",
    **PAIRWISE_COLUMNS,
    "p_a_better": "headline P(A better): the paired logit value when the models share items, else the independent one",
    "glm": "suite GLM used for p_a_better_glm (null when none passed)",
    "p_a_better_glm": "P(effect_A > effect_B) from the suite GLM's joint posterior draws (NaN without a passed fit)",
}

FIT_STATUS_COLUMNS = {
    "suite": "suite display name",
    "glm": "suite GLM",
    "status": f"reused (the stored fit of the suite GLM asset, read), not applicable or {NO_STORED_FIT}",
    "passed": f"every gating diagnostic passed (null when not applicable or {NO_STORED_FIT})",
    "failed": "the gating diagnostics that failed, comma-separated",
    "reason": "why the GLM does not apply (the wrong number of LLMs, data that cannot identify it, left out of "
    "[glm] models) or has no stored fit, if so",
    "used": "this fit's model effects are the glm_* columns of the leaderboard",
}

PROFILE_COLUMNS = {
    "model": "model display name",
    "scope": "suite (one suite), pooled (one headline posterior over every attempt on every suite) or "
    "mean of suites (posterior of the unweighted mean of the per-suite success rates)",
    "suite": "suite display name ((all) for the cross-suite rows)",
    "n_suites": "suites the row covers",
    "n": "attempts counted",
    "n_items": "distinct items (summed over suites for the cross-suite rows)",
    "k": "sum of scores",
    "observed_mean": "k / n for suite and pooled rows; the mean of per-suite observed means for 'mean of suites'",
    "prior_a": "Beta prior a",
    "prior_b": "Beta prior b",
    "posterior_mean": "posterior mean of the success rate (headline: design-aware)",
    "hpdi_mass": "HPDI mass and interval level",
    "hpdi_low": "headline HPDI lower (exact Beta HPDI; from draws of the suites' headline posteriors for "
    "'mean of suites')",
    "hpdi_high": "HPDI upper",
    "unit": DESIGN_COLUMNS["unit"] + " (suite and pooled rows; pooled: units of every suite)",
    "design_effect": DESIGN_COLUMNS["design_effect"] + " (suite and pooled rows)",
    "n_effective": DESIGN_COLUMNS["n_effective"] + " (suite and pooled rows)",
    "wilson_low": "Wilson interval, lower (suite and pooled rows)",
    "wilson_high": "Wilson interval, upper",
    "clt_low": "CLT interval, lower, unclipped (suite and pooled rows)",
    "clt_high": "CLT interval, upper",
    "clt_flag": "why the CLT interval is degenerate, if it is",
    "rank": "rank on the suite by posterior mean (suite rows)",
    "n_models": "models evaluated on the suite (suite rows)",
    "p_best": "P(best) on the suite (suite rows)",
    "expected_rank": "posterior mean rank on the suite (suite rows)",
    "glm": "suite GLM of the glm_* columns (null when none passed)",
    "glm_mean": "the suite GLM's effect of this model as a success rate, posterior mean (graded scores as in the "
    "suite leaderboard's glm_mean)",
    "glm_hpdi_low": "its HPDI, lower",
    "glm_hpdi_high": "its HPDI, upper",
}


@dataclass
class SuiteComparison:
    """What :func:`build_suite_comparison` computed and wrote."""

    suite: str
    leaderboard: pd.DataFrame
    pairwise: pd.DataFrame
    fits: pd.DataFrame
    directory: Path
    plots: dict[str, Path] = field(default_factory=dict)
    glm: str | None = None
    #: models left out because their sample table on the suite failed validation -> the failed checks
    rejected: dict[str, list[str]] = field(default_factory=dict)


# ------------------------------------------------------------------ reading


def suite_comparison_dir(lake: Lake, suite: str) -> Path:
    return lake.root / SUITE_COMPARISON_TABLE / f"suite={to_partition_key(suite)}"


def model_profile_dir(lake: Lake, model: str) -> Path:
    return lake.root / MODEL_PROFILE_TABLE / f"model={to_partition_key(model)}"


def lake_suites(lake: Lake) -> list[str]:
    """Suites with at least one sample table, sorted by display name."""
    return sorted({suite for _model, suite, _path in lake.sample_tables()})


def lake_models(lake: Lake) -> list[str]:
    """Models with at least one sample table, sorted by display name."""
    return sorted({model for model, _suite, _path in lake.sample_tables()})


#: The sample columns a suite comparison reads (:func:`build_suite_comparison`): the attempt (item, epoch),
#: its score and what decides whether it counts. The others (ids, paths, metadata) were ~60% of reading them.
COMPARISON_COLUMNS = ("item_id", "epoch", "score", "error", "limit", "cluster", "scorer")


def read_suite_samples(lake: Lake, suite: str, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Every model's canonical samples on ``suite`` (``model`` column from the hive path); of ``columns``
    alone (those a table has) when given.

    Raises :class:`evalpipeline.steps.samples.NoDataError` (a LookupError) when no
    model has a sample table for the suite, and ValueError when the tables
    lack the columns a comparison needs.
    """
    key = to_partition_key(suite)
    tables = lake.sample_tables(suite=suite)  # without those that failed validation
    if not tables:
        raise NoDataError(
            f"suite {suite!r} has no sample tables: nothing matches "
            f"{lake.root / 'samples' / 'model=*' / f'suite={key}' / 'samples.parquet'}"
            + rejected_note(lake, suite=suite)
        )
    read = read_parquet_files([path for _model, _suite, path in tables], columns)
    samples = read.frame.drop(columns=[c for c in ("model", "suite") if c in read.frame.columns])
    samples.insert(0, "model", np.repeat(np.array([model for model, _suite, _path in tables], dtype=object), read.rows))
    missing = {"item_id", "epoch", "score"} - set(samples.columns)
    if missing:
        raise ValueError(f"sample tables of suite {suite!r} lack column(s) {sorted(missing)}")
    return samples


#: The columns of a sample table that :func:`_counted_scores` reads: the score, what decides whether it
#: counts, and what makes its unit of evidence.
COUNTING_COLUMNS = ("score", "error", "limit", "item_id", "cluster")


def _counted_scores(lake: Lake, model: str, suite: str) -> tuple[np.ndarray, np.ndarray, str]:
    """The scores of the counted attempts (:func:`_counted`) of one partition's sample table with their units
    (:func:`attempt_units`, labelled with the suite) and the units' kind, read from :data:`COUNTING_COLUMNS`
    alone: a profile reads every suite's table of its model, and converting the other columns (paths,
    metadata) was most of that."""
    import pyarrow.parquet as pq

    path = lake.table_path("samples", "samples.parquet", model, suite)
    if not path.exists():
        read_samples(lake, model, suite)  # raises the NoDataError that names the table
    table = pq.ParquetFile(path)
    samples = table.read(columns=[c for c in COUNTING_COLUMNS if c in table.schema_arrow.names]).to_pandas()
    samples = samples[_counted(samples)]
    units, kind = attempt_units(samples)
    return samples["score"].to_numpy(dtype=float), (suite + "\x1f") + units.astype(str), kind


def _counted(samples: pd.DataFrame) -> pd.Series:
    keep = samples["score"].notna()
    for column in ("error", "limit"):
        if column in samples.columns:
            keep &= samples[column].isna()
    return keep


# ------------------------------------------------------------------ suite GLM


def suite_fit_status(lake: Lake, suite: str, preference=DEFAULT_SUITE_GLMS) -> tuple[pd.DataFrame, str | None]:
    """Every stored suite GLM of ``suite`` with its status, and the one to use (None if none passed).

    The used one is the first of ``preference`` that was fitted (or reused)
    and passed every gating diagnostic; GLMs not in ``preference`` are listed
    but never used.
    """
    folder = lake.root / SUITE_TABLE / f"suite={to_partition_key(suite)}"
    rows = []
    for glm_dir in sorted(p for p in folder.glob("*") if p.is_dir()) if folder.exists() else []:
        outcome = read_outcome(glm_dir)
        if outcome is None:  # listed, not dropped: its materialisation failed or is under way
            rows.append(
                {
                    "suite": suite,
                    "glm": glm_dir.name,
                    "status": NO_STORED_FIT,
                    "passed": None,
                    "failed": "",
                    "reason": no_stored_fit_reason(glm_dir),
                    "used": False,
                }
            )
            continue
        failed = ""
        if outcome.status != "not applicable" and outcome.diagnostics is not None and not outcome.passed:
            from evalpipeline.models.fit import gating_failures  # imports JAX: only when a fit failed

            failed = ", ".join(gating_failures(outcome.diagnostics))
        rows.append(
            {
                "suite": suite,
                "glm": outcome.glm,
                "status": outcome.status,
                "passed": None if outcome.status == "not applicable" else bool(outcome.passed),
                "failed": failed,
                "reason": outcome.reason or "",
                "used": False,
            }
        )
    table = pd.DataFrame(rows, columns=list(FIT_STATUS_COLUMNS))
    usable = (
        set(table.loc[table["passed"].eq(True) & table["status"].ne("not applicable"), "glm"]) if len(table) else set()
    )
    chosen = next((glm for glm in preference if glm in usable), None)
    if chosen is not None:
        table["used"] = table["glm"] == chosen
    table["used"] = table["used"].astype(bool)
    return table, chosen


def glm_model_effects(lake: Lake, suite: str, glm: str) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The suite GLM's per-model effects on the probability scale, and their joint draws.

    Returns ``(effects, draws)``: ``effects`` has ``model, glm_mean,
    glm_hpdi_low, glm_hpdi_high, glm_hpdi_mass, glm_outer_low,
    glm_outer_high`` (rows of ``summary.parquet`` with ``parameter == "model"``);
    ``draws`` is (n_draws x n_models) in the same order from ``posterior.nc``
    (logit scale; None when the file cannot be read -- then the
    draw-based columns are NaN).
    """
    directory = lake.root / SUITE_TABLE / f"suite={to_partition_key(suite)}" / glm
    summary = pd.read_parquet(directory / "summary.parquet")
    rows = summary[(summary["parameter"] == "model") & summary["model"].notna()]
    if rows.empty:
        raise ValueError(
            f"suite GLM {glm!r} of suite {suite!r} has no per-model rows (parameter 'model') in its summary"
        )
    effects = pd.DataFrame(
        {
            "model": rows["model"].astype(str).to_numpy(),
            "glm_mean": rows["prob_mean"].to_numpy(float),
            "glm_hpdi_low": rows["prob_hpdi_low"].to_numpy(float),
            "glm_hpdi_high": rows["prob_hpdi_high"].to_numpy(float),
            "glm_hpdi_mass": rows["hpdi_mass"].to_numpy(float),
            "glm_outer_low": rows["prob_hpdi2_low"].to_numpy(float),
            "glm_outer_high": rows["prob_hpdi2_high"].to_numpy(float),
            "glm_outer_mass": rows["hpdi2_mass"].to_numpy(float),
        }
    )
    draws = None
    try:
        import xarray as xr

        with xr.open_dataset(directory / "posterior.nc", group="posterior", engine="h5netcdf") as posterior:
            values = np.asarray(posterior["model"].values, dtype=float)
        values = values.reshape(values.shape[0] * values.shape[1], -1)
        if values.shape[1] == len(effects):
            draws = values
    except (OSError, KeyError, ValueError):  # a summary without readable draws still gives the effects
        draws = None
    return effects, draws


# ------------------------------------------------------------------ leaderboard


def _interval_or_nan(function, k, n, level):
    if n <= 0:
        return math.nan, math.nan
    low, high = function(k, n, level)
    return float(low), float(high)


def model_summary(
    scores: np.ndarray, n_items: int, n_excluded: int, settings: ComparisonSettings, units=None, unit_kind: str = "item"
) -> dict:
    """Headline (design-aware) posterior and conventional intervals of one model's success rate from its counted
    scores and each score's unit of evidence (:func:`evalpipeline.stats.posteriors.attempt_units`; None: every
    score its own unit)."""
    scores = np.asarray(scores, dtype=float)
    n, k = int(scores.size), float(scores.sum())
    units = np.arange(n).astype(str) if units is None else units
    headline = success_rate_posterior(
        scores,
        units,
        unit_kind,
        prior=settings.prior,
        mass=settings.mass,
        concentration_prior=settings.concentration_prior,
    )
    _, clt_low, clt_high = clt_interval(scores, settings.mass)
    wilson = _interval_or_nan(wilson_interval, k, n, settings.mass)
    clopper = _interval_or_nan(clopper_pearson_interval, k, n, settings.mass)
    return {
        "n": n,
        "n_items": int(n_items),
        "k": k,
        "n_excluded": int(n_excluded),
        "observed_mean": k / n if n else math.nan,
        "prior_a": float(settings.prior[0]),
        "prior_b": float(settings.prior[1]),
        **headline,
        "hpdi_mass": float(settings.mass),
        "wilson_low": wilson[0],
        "wilson_high": wilson[1],
        "clopper_pearson_low": clopper[0],
        "clopper_pearson_high": clopper[1],
        "clt_low": float(clt_low),
        "clt_high": float(clt_high),
        "clt_flag": clt_flags(clt_low, clt_high) if n else "no data",
    }


#: A model counted on fewer than this share of a suite's items is flagged (``subset_flag``).
SUBSET_SHARE = 0.9


def suite_leaderboard_table(
    samples: pd.DataFrame,
    suite: str,
    settings: ComparisonSettings,
    glm: str | None = None,
    effects: pd.DataFrame | None = None,
    glm_draws: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per model on one suite (columns: :func:`leaderboard_columns` of the settings' thresholds)."""
    counted = _counted(samples).to_numpy()
    names = samples["model"].astype(str)
    # each model's rows, in table order; keyed by the name objects themselves, so that even a missing name
    # (kept as NaN by string dtypes) is looked up as itself
    positions = dict(names.groupby(names, sort=False, dropna=False).indices)
    models = sorted(positions)
    if not models:
        raise ValueError(f"suite {suite!r}: the sample table has no rows")
    score = samples["score"]
    # a numeric column converts at once; otherwise only counted rows are converted (others may hold anything)
    numeric = score.to_numpy(dtype=float, na_value=np.nan) if pd.api.types.is_numeric_dtype(score) else None
    units, unit_kind = attempt_units(samples)
    suite_items = int(samples["item_id"][counted].nunique())
    rows = []
    for model in models:
        mine = positions[model]
        kept = mine[counted[mine]]
        scores = numeric[kept] if numeric is not None else score.iloc[kept].to_numpy(dtype=float)
        n_items = samples["item_id"].iloc[kept].nunique()
        row = {
            "suite": suite,
            "model": model,
            **model_summary(scores, n_items, int(len(mine) - len(kept)), settings, units[kept], unit_kind),
            "n_suite_items": suite_items,
            "subset_flag": _subset_flag(n_items, suite_items),
        }
        scorers = samples["scorer"].iloc[kept].dropna().unique() if "scorer" in samples.columns else []
        row.update(_judge_columns(row, scores, scorers, settings))
        tails = threshold_probabilities_beta(row["posterior_a"], row["posterior_b"], settings.thresholds)
        row.update({threshold_column(t): p for t, p in tails.items()})
        rows.append(row)
    board = pd.DataFrame(rows)
    draws = beta_draws(board["posterior_a"], board["posterior_b"], n_draws=settings.rank_draws, seed=settings.seed)
    ranks = rank_probabilities(draws, models).drop(columns="model")
    board = pd.concat([board, ranks], axis=1)
    board["glm"] = glm
    for column in ("glm_mean", "glm_hpdi_low", "glm_hpdi_high", "glm_hpdi_mass", "glm_p_best"):
        board[column] = math.nan
    if glm is not None and effects is not None:
        lookup = effects.set_index("model")
        for column in ("glm_mean", "glm_hpdi_low", "glm_hpdi_high", "glm_hpdi_mass"):
            board[column] = board["model"].map(lookup[column]).astype(float)
        if glm_draws is not None:
            glm_ranks = rank_probabilities(glm_draws, list(effects["model"])).set_index("model")["p_best"]
            board["glm_p_best"] = board["model"].map(glm_ranks).astype(float)
    board = board.sort_values(["posterior_mean", "model"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )
    board["rank"] = np.arange(1, len(board) + 1)
    for column in ("glm", "subset_flag", "independent_flag", "design_note", "judge", "judge_note"):
        board[column] = board[column].astype(object).where(board[column].notna(), None)
    return board[list(leaderboard_columns(settings.thresholds))]


def _judge_columns(row: dict, scores: np.ndarray, scorers, settings: ComparisonSettings) -> dict:
    """The judge-corrected success rate of one leaderboard row, where its scorer has a ``[judge.<scorer>]``."""
    judges = {judge.scorer: judge for judge in settings.judges}
    result = {"judge": None, "judge_mean": math.nan, "judge_low": math.nan, "judge_high": math.nan, "judge_note": None}
    configured = sorted(set(scorers) & set(judges))
    if not configured:
        return result
    result["judge"] = ", ".join(configured)
    if len(scorers) > 1:
        return {
            **result,
            "judge_note": f"scored by {len(scorers)} scorers ({', '.join(sorted(map(str, scorers)))}): "
            "a judge's correction applies to one scorer's pass/fail counts",
        }
    if row["n"] == 0:
        return {**result, "judge_note": "no counted attempt"}
    if not np.isin(scores, (0.0, 1.0)).all():
        return {**result, "judge_note": "graded scores: a judge's correction reads pass (1) / fail (0)"}
    effect = row["design_effect"]
    corrected = judge_corrected_accuracy(
        row["k"] / effect,
        row["n"] / effect,
        calibration=judges[configured[0]],
        prior=settings.prior,
        level=settings.mass,
        seed=settings.seed,
    )
    return {
        **result,
        "judge": configured[0],
        "judge_mean": corrected["corrected_mean"],
        "judge_low": corrected["corrected_low"],
        "judge_high": corrected["corrected_high"],
    }


def _subset_flag(n_items: int, suite_items: int) -> str | None:
    if suite_items == 0 or n_items >= SUBSET_SHARE * suite_items:
        return None
    return (
        f"counted on {n_items} of the suite's {suite_items} items: its raw rate is not comparable with models "
        "counted on the others; read the suite GLM's item-adjusted effect (glm_mean) or the paired comparison "
        "on shared items"
    )


def suite_pairwise_table(
    samples: pd.DataFrame,
    suite: str,
    settings: ComparisonSettings,
    glm: str | None = None,
    effects: pd.DataFrame | None = None,
    glm_draws: np.ndarray | None = None,
    previous: pd.DataFrame | None = None,
    board: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """:func:`evalpipeline.stats.compare.pairwise_table` plus suite, headline P and the GLM contrast.

    ``previous``: the suite's earlier pairwise table; its unchanged pairs are reused. ``board``: the suite's
    leaderboard, whose headline posteriors the independent comparisons read (computed again when absent)."""
    posteriors = None
    if board is not None:
        posteriors = {m: (a, b) for m, a, b in zip(board["model"], board["posterior_a"], board["posterior_b"])}
    pairs = pairwise_table(
        samples,
        prior=settings.prior,
        level=settings.mass,
        n_draws=settings.pairwise_draws,
        seed=settings.seed,
        probit=settings.probit,
        previous=previous,
        posteriors=posteriors,
        concentration_prior=settings.concentration_prior,
    )
    reuse = dict(pairs.attrs)
    pairs.insert(0, "suite", suite)
    pairs["p_a_better"] = np.where(
        pairs["verdict_source"] == "paired", pairs["p_a_better_paired"], pairs["p_a_better_independent"]
    ).astype(float)
    pairs["glm"] = pd.Series([glm] * len(pairs), dtype=object)
    pairs["p_a_better_glm"] = math.nan
    if glm_draws is not None and effects is not None:
        position = {m: i for i, m in enumerate(effects["model"])}
        values = []
        for a, b in zip(pairs["model_a"], pairs["model_b"]):
            if a in position and b in position:
                values.append(float((glm_draws[:, position[a]] > glm_draws[:, position[b]]).mean()))
            else:
                values.append(math.nan)
        pairs["p_a_better_glm"] = values
    pairs = pairs[list(PAIRWISE_TABLE_COLUMNS)]
    pairs.attrs.update(reuse)
    return pairs


def ranking_pairs(pairs: pd.DataFrame, board: pd.DataFrame) -> pd.DataFrame:
    """The rows of a pairwise table that decide its suite's ranking: each model against the next one
    on the leaderboard (is the order real?) and the leader against every other model (who is
    distinguishable from the best?). Read down the leaderboard: the model ranked r against the leader,
    then against the model ranked r - 1. 2 (n - 1) - 1 pairs of n models; a pair with a model that is
    not on ``board`` is not one of them. Where a suite has thousands of pairs, these are the ones the
    report and the UI spell out; every pair stays in the table."""
    position = {model: i for i, model in enumerate(board.sort_values("rank", kind="stable")["model"])}
    first = pairs["model_a"].map(position)
    second = pairs["model_b"].map(position)
    higher, lower = np.fmin(first, second), np.fmax(first, second)
    chosen = (((lower - higher) == 1) | (higher == 0)) & first.notna() & second.notna()
    order = np.lexsort((higher[chosen].to_numpy(), lower[chosen].to_numpy()))
    return pairs[chosen].iloc[order]


# ------------------------------------------------------------------ plots


def _leaderboard_figure(board: pd.DataFrame, suite: str, settings: ComparisonSettings):
    from evalpipeline.plots import leaderboard_plot

    frame = board.rename(columns={"clt_low": "conventional_low", "clt_high": "conventional_high"})
    level = f"{settings.mass:.0%}"
    return leaderboard_plot(
        frame,
        title=f"{suite}: leaderboard",
        bayesian_label=f"posterior mean, {level} HPDI (Beta{tuple(settings.prior)} prior)",
        conventional_label=f"observed mean, {level} CLT interval",
    )


def _pairwise_figure(pairs: pd.DataFrame, suite: str, board: pd.DataFrame):
    from evalpipeline.plots import pairwise_heatmap, pairwise_matrix

    matrix = pairwise_matrix(pairs[["model_a", "model_b", "p_a_better"]], value="p_a_better")
    # in leaderboard order, so that a large suite reads as a picture: better models above and to the left
    order = [m for m in board["model"].astype(str) if m in matrix.index]
    order += [m for m in matrix.index if m not in set(order)]
    matrix = matrix.loc[order, order]
    return pairwise_heatmap(matrix, title=f"{suite}: P(row model better than column model)")


def _glm_forest_figure(effects: pd.DataFrame, board: pd.DataFrame, suite: str, glm: str):
    from evalpipeline.plots import forest_plot, nest_inside

    observed = board.set_index("model")
    sem = np.sqrt(observed["observed_mean"] * (1 - observed["observed_mean"]) / observed["n"].where(observed["n"] > 0))
    order = effects.sort_values(["glm_mean", "model"], ascending=[False, True], kind="stable")
    mass, second = float(order["glm_hpdi_mass"].iloc[0]), float(order["glm_outer_mass"].iloc[0])
    # the thick interval is the narrower mass, the thin one the wider (whichever was configured second)
    inner, outer = ("glm_hpdi", "glm_outer") if mass <= second else ("glm_outer", "glm_hpdi")
    rows = pd.DataFrame(
        {
            "label": order["model"].to_numpy(),
            "level": "model",
            "posterior_mean": order["glm_mean"].to_numpy(),
            **dict(
                zip(
                    ("hpdi_low", "hpdi_high"),
                    nest_inside(
                        order[f"{inner}_low"], order[f"{inner}_high"], order[f"{outer}_low"], order[f"{outer}_high"]
                    ),
                )
            ),
            "outer_low": order[f"{outer}_low"].to_numpy(),
            "outer_high": order[f"{outer}_high"].to_numpy(),
            "empirical_mean": order["model"].map(observed["observed_mean"]).to_numpy(float),
            "empirical_sem": order["model"].map(sem).to_numpy(float),
        }
    )
    return forest_plot(
        rows,
        title=f"{suite}: per-model effects of {glm}",
        hpdi_label=f"{min(mass, second):.0%} HPDI",
        outer_label=f"{max(mass, second):.0%} HPDI",
    )


def _previous_table(path: Path) -> pd.DataFrame | None:
    """The table an earlier run wrote, for reuse; None when there is none or it cannot be read
    (then everything is recomputed, which is always correct)."""
    try:
        return pd.read_parquet(path) if path.exists() else None
    except (OSError, ValueError, pa.ArrowException):
        return None


def _write_table(frame: pd.DataFrame, path: Path) -> None:
    if frame.attrs:  # pyarrow stores DataFrame.attrs in the file: run statistics would change its bytes
        frame = frame.copy(deep=False)
        frame.attrs = {}
    write_parquet_atomic(pa.Table.from_pandas(frame, preserve_index=False), path)


# ------------------------------------------------------------------ assets


def build_suite_comparison(lake: Lake, suite: str, settings: ComparisonSettings | None = None) -> SuiteComparison:
    """Leaderboard, pairwise table, fit status and plots of one suite, written atomically to the lake.

    Raises :class:`evalpipeline.steps.samples.NoDataError` when the suite has no
    sample tables and ValueError when it has tables but no counted attempt.
    Plots of an earlier run that this run does not produce (the GLM forest
    once no fit passes) are removed, so the folder shows only current results.
    """
    from evalpipeline.steps.classification import LABEL_COLUMNS, write_suite_classification
    from evalpipeline.plots import save_png

    settings = settings or ComparisonSettings()
    samples = read_suite_samples(lake, suite, COMPARISON_COLUMNS + LABEL_COLUMNS)
    if not _counted(samples).any():
        raise ValueError(
            f"suite {suite!r} has sample rows but none counts (every row is errored, limit-hit or "
            "unscored): nothing to compare"
        )
    fits, glm = suite_fit_status(lake, suite, settings.suite_glms)
    effects = draws = None
    if glm is not None:
        effects, draws = glm_model_effects(lake, suite, glm)
    board = suite_leaderboard_table(samples, suite, settings, glm, effects, draws)
    directory = suite_comparison_dir(lake, suite)
    pairs = suite_pairwise_table(
        samples,
        suite,
        settings,
        glm,
        effects,
        draws,
        previous=_previous_table(directory / "pairwise.parquet"),
        board=board,
    )

    _write_table(board, directory / "leaderboard.parquet")
    _write_table(pairs, directory / "pairwise.parquet")
    _write_table(fits, directory / "fits.parquet")
    write_suite_classification(lake, suite, samples, directory, level=settings.mass, seed=settings.seed)
    plots_dir = directory / "plots"
    plots = {"leaderboard": plots_dir / "leaderboard.png"}
    save_png(_leaderboard_figure(board, suite, settings), plots["leaderboard"])
    if len(pairs):
        plots["pairwise"] = plots_dir / "pairwise.png"
        save_png(_pairwise_figure(pairs, suite, board), plots["pairwise"])
    if effects is not None:
        plots["glm_forest"] = plots_dir / "glm_forest.png"
        save_png(_glm_forest_figure(effects, board, suite, glm), plots["glm_forest"])
    for name in ("pairwise", "glm_forest"):
        if name not in plots:
            (plots_dir / f"{name}.png").unlink(missing_ok=True)
    rejected = {
        m: lake.failed_validation(m, suite) for m, _s, _p in lake.sample_tables(suite=suite, include_failed=True)
    }
    return SuiteComparison(suite, board, pairs, fits, directory, plots, glm, {m: c for m, c in rejected.items() if c})


def _hpdi_of_draws(draws: np.ndarray, mass: float) -> tuple[float, float]:
    """Narrowest interval holding ``mass`` of one-dimensional draws."""
    x = np.sort(np.asarray(draws, dtype=float))
    width = max(1, int(math.ceil(mass * x.size)))
    if width >= x.size:
        return float(x[0]), float(x[-1])
    spans = x[width - 1 :] - x[: x.size - width + 1]
    start = int(np.argmin(spans))
    return float(x[start]), float(x[start + width - 1])


def _suite_board(lake: Lake, suite: str, settings: ComparisonSettings) -> pd.DataFrame:
    """The suite's leaderboard as ``suite_comparison`` stored it (what the ``model_profile`` asset
    depends on), else computed the same way (a notebook user who built no suite comparison)."""
    stored = suite_comparison_dir(lake, suite) / "leaderboard.parquet"
    identity = file_identity([stored])[0]
    if identity[1] is not None:
        return _stored_board(str(stored), tuple(identity)).copy()
    _fits, glm = suite_fit_status(lake, suite, settings.suite_glms)
    effects = draws = None
    if glm is not None:
        effects, draws = glm_model_effects(lake, suite, glm)
    return suite_leaderboard_table(
        read_suite_samples(lake, suite, COMPARISON_COLUMNS), suite, settings, glm, effects, draws
    )


@functools.lru_cache(maxsize=128)
def _stored_board(path: str, identity: tuple) -> pd.DataFrame:
    """A stored leaderboard, read once per process while its file is unchanged (:func:`file_identity`):
    a ``model_profile`` step profiles many models, each reading every one of its suites' boards
    (a new-model night at 107 models: 642 reads of six files, ~24 ms of each profile's ~90)."""
    return pd.read_parquet(path)


#: A model profile row's success-rate summary, for one suite or pooled over every suite.
PROFILE_SUMMARY_COLUMNS = (
    "n", "n_items", "k", "observed_mean", "prior_a", "prior_b", "posterior_mean", "hpdi_mass", "hpdi_low",
    "hpdi_high", "unit", "design_effect", "n_effective", "wilson_low", "wilson_high", "clt_low", "clt_high",
    "clt_flag",
)  # fmt: skip
#: What a one-suite profile row also takes from the suite's leaderboard.
PROFILE_SUITE_COLUMNS = ("rank", "p_best", "expected_rank", "glm", "glm_mean", "glm_hpdi_low", "glm_hpdi_high")


def model_profile_table(lake: Lake, model: str, settings: ComparisonSettings | None = None) -> pd.DataFrame:
    """One row per suite ``model`` was evaluated on, plus the two cross-suite rows (see the module docstring).

    The suite rows are the model's rows of each suite's leaderboard (stored by
    :func:`build_suite_comparison`, else computed), so a profile agrees with the
    suite comparisons it is shown beside; rank and P(best) depend on every model
    on the suite, which is why the ``model_profile`` asset depends on them all.
    """
    settings = settings or ComparisonSettings()
    suites = sorted(suite for _model, suite, _path in lake.sample_tables(model=model))
    if not suites:
        raise NoDataError(
            f"model {model!r} has no sample tables under {lake.root / 'samples'}" + rejected_note(lake, model=model)
        )
    rows, pooled, per_suite = [], [], []
    for suite in suites:
        board = _suite_board(lake, suite, settings).set_index("model")
        if model not in board.index:
            raise NoDataError(
                f"the leaderboard of suite {suite!r} has no row for {model!r}: it predates the "
                "model's samples; rebuild the suite comparison first"
            )
        pooled.append(_counted_scores(lake, model, suite))
        entry = board.loc[model]
        per_suite.append((entry["posterior_a"], entry["posterior_b"], entry["observed_mean"], entry["n_items"]))
        rows.append(
            {
                "model": model,
                "scope": "suite",
                "suite": suite,
                "n_suites": 1,
                **{c: entry[c] for c in (*PROFILE_SUMMARY_COLUMNS, *PROFILE_SUITE_COLUMNS)},
                "n_models": len(board),
            }
        )
    scores, units = np.concatenate([p[0] for p in pooled]), np.concatenate([p[1] for p in pooled])
    kinds = {p[2] for p in pooled}
    n_items = int(sum(p[3] for p in per_suite))
    summary = model_summary(scores, n_items, 0, settings, units, "cluster" if "cluster" in kinds else "item")
    rows.append(
        {
            "model": model,
            "scope": "pooled",
            "suite": "(all)",
            "n_suites": len(suites),
            **{c: summary[c] for c in PROFILE_SUMMARY_COLUMNS},
        }
    )
    rng = np.random.default_rng(settings.seed)
    mean_draws = np.mean([rng.beta(a, b, settings.rank_draws) for a, b, _, _ in per_suite], axis=0)
    low, high = _hpdi_of_draws(mean_draws, settings.mass)
    observed = [p[2] for p in per_suite if not math.isnan(p[2])]
    rows.append(
        {
            "model": model,
            "scope": "mean of suites",
            "suite": "(all)",
            "n_suites": len(suites),
            "n": summary["n"],
            "n_items": n_items,
            "k": summary["k"],
            "observed_mean": float(np.mean(observed)) if observed else math.nan,
            "prior_a": float(settings.prior[0]),
            "prior_b": float(settings.prior[1]),
            # exact: the mean of the per-suite Beta posterior means
            "posterior_mean": float(np.mean([a / (a + b) for a, b, _, _ in per_suite])),
            "hpdi_mass": float(settings.mass),
            "hpdi_low": low,
            "hpdi_high": high,
        }
    )
    profile = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    for column in ("glm", "clt_flag"):
        profile[column] = profile[column].astype(object).where(profile[column].notna(), None)
    for column in ("rank", "n_models"):
        profile[column] = profile[column].astype("Int64")
    return profile


def _profile_forest_inputs(profile: pd.DataFrame, model: str) -> dict:
    """Everything the profile's forest plot shows: its rows, title and interval label."""
    n = profile["n"].astype(float)
    mean = profile["observed_mean"].astype(float)
    sem = np.where(
        (profile["scope"] != "mean of suites") & (n > 0), np.sqrt(mean * (1 - mean) / n.where(n > 0)), np.nan
    )
    rows = pd.DataFrame(
        {
            "label": [s if scope == "suite" else scope for s, scope in zip(profile["suite"], profile["scope"])],
            "level": ["suite" if scope == "suite" else "across suites" for scope in profile["scope"]],
            "posterior_mean": profile["posterior_mean"].astype(float),
            "hpdi_low": profile["hpdi_low"].astype(float),
            "hpdi_high": profile["hpdi_high"].astype(float),
            "empirical_mean": mean,
            "empirical_sem": sem,
        }
    )
    mass = float(profile["hpdi_mass"].iloc[0])
    return {"rows": rows, "title": f"{model} across suites", "hpdi_label": f"{mass:.0%} HPDI"}


def _profile_forest_figure(inputs: dict):
    from evalpipeline.plots import forest_plot

    return forest_plot(inputs["rows"], title=inputs["title"], hpdi_label=inputs["hpdi_label"])


def build_model_profile(lake: Lake, model: str, settings: ComparisonSettings | None = None) -> pd.DataFrame:
    """Write ``model_profile/model=<key>/profile.parquet`` and ``plots/forest.png``; return the table.

    Raises :class:`evalpipeline.steps.samples.NoDataError` when the model has no sample tables.
    """
    from evalpipeline.plots import save_png_of

    profile = model_profile_table(lake, model, settings)
    directory = model_profile_dir(lake, model)
    _write_table(profile, directory / "profile.parquet")
    # a new model on the model's suites changes its ranks, not what the plot shows: rendered only when that changed
    inputs = _profile_forest_inputs(profile, model)
    save_png_of(
        {**inputs, "rows": inputs["rows"].to_dict("split")},
        directory / "plots" / "forest.png",
        lambda: _profile_forest_figure(inputs),
        code=[__name__],
    )
    return profile
