"""GLM fit assets: one asset per candidate model, per partition (``glm_<name>``) or per suite
(``suite_glm_<name>``), each with its convergence diagnostics as blocking asset checks,
and the lake-wide ``waic_rankings``."""

from dagster import (
    AssetDep,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.automation import refresh_partition_when_inputs_change, refresh_when_inputs_change
from assets.batch import PartitionResult, emit, partitions_in_turn
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.metadata import column_schema, markdown_table, png_markdown, table_metadata
from assets.partitions import RANGE_BACKFILL, model_suite_names, model_suite_partitions, one_dimension, suite_partitions
from evalpipeline.steps.fits import FIT_PLOTS, FitOutcome, fit_partition_glm, fit_suite_glm
from evalpipeline.steps.rankings import RANKING_COLUMNS, waic_plot_path, write_waic_rankings
from evalpipeline.lake.keys import from_partition_key
from evalpipeline.lake import sha256_file
from evalpipeline.models import MODELS, PARTITION_MODELS, SUITE_MODELS
from evalpipeline.models.fit import DIAGNOSTICS, SUMMARY_COLUMNS
from evalpipeline.settings import load_glm_config, load_plot_settings
from evalpipeline.lake.versions import code_version
from resources import LakeResource
from resources.fit import GlmSettings

#: Fitting steps share this concurrency pool: the GLMs here and the HIP-LLM reliability assets
#: (limit in dagster_home/dagster.yaml, one per core: each fit runs its chains vectorised in one
#: process, and resources.executors.limit_step_threads gives that process one thread).
FIT_POOL = "fit"

DIAGNOSTIC_DOCS = {
    "divergences": "number of divergent NUTS transitions (after the retry, if any)",
    "r_hat": "largest rank-normalised split r-hat over all parameters",
    "ess_bulk": "smallest bulk effective sample size over all parameters",
    "ess_tail": "smallest tail effective sample size over all parameters",
    "bfmi": "smallest Bayesian fraction of missing information (from the energy) over chains",
    "pareto_k": "largest Pareto-k of PSIS-LOO over the observations",
}

_MODEL_MODULES = ["evalpipeline.models", "evalpipeline.steps.fits"]


def glm_version(glm: str) -> str:
    """Code version of a GLM's fits: the model code plus this model's settings and priors."""
    return code_version(_MODEL_MODULES, load_glm_config().for_model(glm))


def _per_fit_progress(context: AssetExecutionContext, glm: str, config):
    """Where a step's fits report progress: the step's log, one line per fit; for a GLM left out of
    ``[glm] models``, one line for the step instead (each log line is an event the instance stores, ~7 ms:
    0.4 s of a 60-partition step saying the same thing 60 times)."""
    # as evalpipeline.steps.fits decides it (a change there would change every fit's code version)
    if config.models is None or glm in config.models:
        return context.log.info
    context.log.info(
        f"{glm}: disabled: not in [glm] models {list(config.models)}; its "
        f"{len(context.partition_keys)} partition(s) are recorded as not applicable"
    )
    return None


def _check_results(outcome: FitOutcome, label: str):
    """One result per diagnostic. Pareto-k speaks to how far PSIS-LOO can be trusted for this
    model, not to whether NUTS converged, so by default it warns (and flags the LOO rows) without
    blocking (``[glm.thresholds] gate_pareto_k = true`` makes it block)."""
    if outcome.status == "not applicable":
        for name in DIAGNOSTICS:
            yield AssetCheckResult(
                check_name=name,
                passed=True,
                severity=AssetCheckSeverity.WARN,
                metadata={"partition": label, "status": f"not applicable: {outcome.reason}"},
            )
        return
    for row in outcome.diagnostics.itertuples():
        yield AssetCheckResult(
            check_name=row.diagnostic,
            passed=bool(row.passed),
            severity=AssetCheckSeverity.ERROR if row.gates else AssetCheckSeverity.WARN,
            metadata={
                "partition": label,
                "value": float(row.value),
                "threshold": f"{row.comparison} {row.threshold:g}",
                "attempts": len(outcome.attempts),
            },
        )


def _materialization(outcome: FitOutcome, label: str) -> MaterializeResult:
    if outcome.status == "not applicable":
        return MaterializeResult(
            data_version=DataVersion("not-applicable"),
            metadata={"partition": label, "status": "not applicable", "reason": outcome.reason},
        )
    summary = outcome.summary
    locations = summary[summary["scale"] == "location"]
    meta = {
        **table_metadata(locations, outcome.summary_path),
        "dagster/row_count": len(summary),
        "partition": label,
        "status": outcome.status,
        "passed_diagnostics": bool(outcome.passed),
        "attempts": MetadataValue.md(
            "\n".join(
                f"- {a['attempt']}: {a.get('start', 'cold')}, target accept {a['target_accept']}, "
                f"{'passed' if a['passed'] else 'failed ' + ', '.join(a['failed'])}"
                for a in outcome.attempts
            )
        ),
        "start": outcome.metadata.get("start", "cold"),
        "parameterisation": MetadataValue.json(outcome.metadata.get("parameterisation", {})),
        "diagnostics": MetadataValue.md(markdown_table(outcome.diagnostics.round(4))),
        "posterior": MetadataValue.path(str(outcome.directory / "posterior.nc")),
    }
    for name, caption in (
        ("forest", "forest plot"),
        ("trace", "trace and rank plots"),
        ("predictive", "predictive check"),
    ):
        path = outcome.directory / FIT_PLOTS[name]
        if path.exists():
            meta[f"plot_{name}"] = png_markdown(path, caption)
    return MaterializeResult(data_version=DataVersion(sha256_file(outcome.summary_path)[:16]), metadata=meta)


def _checks(asset_name: str) -> list[AssetCheckSpec]:
    gating = load_glm_config().thresholds.gating()
    return [
        AssetCheckSpec(name, asset=asset_name, blocking=name in gating, description=DIAGNOSTIC_DOCS[name])
        for name in DIAGNOSTICS
    ]


def _fit_asset_arguments(name: str, glm: str, automation_condition) -> dict:
    """What every fit asset shares: group, kinds, pool, code version, diagnostic checks, retries."""
    return dict(
        name=name,
        group_name="fit",
        kinds={"numpyro", "parquet"},
        owners=["team:evalpipeline"],
        pool=FIT_POOL,
        code_version=glm_version(glm),
        check_specs=_checks(name),
        retry_policy=TRANSIENT_RETRY,
        automation_condition=automation_condition,
        metadata={"dagster/column_schema": column_schema(SUMMARY_COLUMNS)},
    )


def partition_glm_asset(glm: str):
    name = f"glm_{glm}"
    entry = MODELS[glm]

    @asset(
        partitions_def=model_suite_partitions,
        backfill_policy=RANGE_BACKFILL,
        deps=["eval_samples"],
        **_fit_asset_arguments(name, glm, refresh_partition_when_inputs_change()),
        description=(
            f"HiBayES GLM `{glm}` ({entry.description}) fitted by NUTS to one model on one suite: the "
            "posterior of its parameters (the success rate overall and the effects the model has, e.g. per "
            "subdomain with partial pooling, and per domain where the suite has more than one), as "
            "a tidy summary (mean, sd, two HPDIs on logit and probability scales, r-hat, ESS) and the full "
            "posterior (netCDF). Diagnostics are asset checks, the gating ones blocking (each check's "
            "description says which); a failing fit is retried once with a "
            "higher target acceptance and then excluded from the comparisons. Its trace, forest and "
            "predictive plots are drawn by `partition_plots` on request (`[plots] partitions`), and here "
            "for a fit that fails a blocking check."
        ),
    )
    def _glm_asset(context: AssetExecutionContext, lake: LakeResource, glm_settings: GlmSettings):
        store = lake.lake()
        with permanent_errors():  # a bad setting (e.g. the cache bound) is not worth a retry
            config, fitter, results = glm_settings.config(), glm_settings.fitter(store.root), []
            draw_plots = load_plot_settings() == "always"
        progress = _per_fit_progress(context, glm, config)
        for key in partitions_in_turn(context):
            model, suite = model_suite_names(key)
            with permanent_errors(partitions=[key]):
                store.require_passed_validation(model, suite)
                outcome = fit_partition_glm(
                    store,
                    model,
                    suite,
                    glm,
                    config,
                    version=glm_version(glm),
                    fitter=fitter,
                    progress=progress,
                    draw_plots=draw_plots,
                )
            label = f"{model} x {suite}"
            results.append(PartitionResult(key, _materialization(outcome, label), list(_check_results(outcome, label))))
        yield from emit(context, results)

    return _glm_asset


def suite_glm_asset(glm: str):
    name = "suite_glm_" + glm.removeprefix("suite_")
    entry = MODELS[glm]

    @asset(
        partitions_def=suite_partitions,
        deps=[AssetDep("eval_samples", partition_mapping=one_dimension("suite"))],
        **_fit_asset_arguments(name, glm, refresh_when_inputs_change(dimension="suite")),
        description=(
            f"Multi-LLM HiBayES GLM `{glm}` ({entry.description}) fitted to every model evaluated on the "
            "suite, so that model effects are estimated jointly, beside the other effects the model has "
            "(its description above says which). "
            "Same outputs and blocking diagnostics as the per-partition fits. Its trace, forest and "
            "predictive plots are drawn by `suite_fit_plots` on request (`[plots] suite_fits`), and here "
            "for a fit that fails a blocking check."
        ),
    )
    def _suite_glm_asset(context: AssetExecutionContext, lake: LakeResource, glm_settings: GlmSettings):
        store = lake.lake()
        with permanent_errors():
            config, fitter, results = glm_settings.config(), glm_settings.fitter(store.root), []
            draw_plots = load_plot_settings(scope="suite_fits") == "always"
        progress = _per_fit_progress(context, glm, config)
        for key in partitions_in_turn(context):
            suite = from_partition_key(key)
            with permanent_errors(partitions=[key]):
                outcome = fit_suite_glm(
                    store,
                    suite,
                    glm,
                    config,
                    version=glm_version(glm),
                    fitter=fitter,
                    progress=progress,
                    draw_plots=draw_plots,
                )
            results.append(PartitionResult(key, _materialization(outcome, suite), list(_check_results(outcome, suite))))
        yield from emit(context, results)

    return _suite_glm_asset


PARTITION_GLM_ASSETS = [partition_glm_asset(glm) for glm in PARTITION_MODELS]
SUITE_GLM_ASSETS = [suite_glm_asset(glm) for glm in SUITE_MODELS]


@asset(
    deps=[a.key for a in PARTITION_GLM_ASSETS + SUITE_GLM_ASSETS],
    group_name="compare",
    retry_policy=TRANSIENT_RETRY,
    kinds={"arviz", "parquet"},
    owners=["team:evalpipeline"],
    # not gated on every fit's checks: a failed fit is listed as excluded here, and one failure
    # anywhere would otherwise hold the whole lake's rankings back
    automation_condition=refresh_when_inputs_change(),
    code_version=code_version(
        ["evalpipeline.steps.rankings", "evalpipeline.steps.fits", "evalpipeline.steps.fits", "evalpipeline.models"]
    ),
    description=(
        "The candidate GLMs of every partition and of every suite compared by WAIC (as HiBayES) and by "
        "PSIS-LOO (with Pareto-k warnings): elpd, its standard error, differences to the best and their "
        "standard errors, stacking weights and effective parameters. Fits that failed their diagnostics "
        "are listed with the reason and not ranked."
    ),
    metadata={"dagster/column_schema": column_schema(RANKING_COLUMNS)},
)
def waic_rankings(context: AssetExecutionContext, lake: LakeResource, glm_settings: GlmSettings) -> MaterializeResult:
    store = lake.lake()
    with permanent_errors():
        table, path = write_waic_rankings(store, pareto_k_threshold=glm_settings.config().thresholds.max_pareto_k)
    ranked, excluded = table[table["excluded"] == ""], table[table["excluded"] != ""]
    plots = {
        f"plot_waic_{suite}": png_markdown(waic_plot_path(store, suite), f"WAIC comparison on {suite}")
        for suite in sorted(ranked.loc[ranked["scope"] == "suite", "suite"].unique())
        if waic_plot_path(store, suite).exists()
    }
    return MaterializeResult(
        data_version=DataVersion(sha256_file(path)[:16]),
        metadata={
            **table_metadata(
                ranked[
                    [
                        "scope",
                        "model",
                        "suite",
                        "glm",
                        "waic_rank",
                        "elpd_waic",
                        "waic_se",
                        "d_waic",
                        "waic_dse",
                        "loo_rank",
                        "n_pareto_k_high",
                    ]
                ],
                path,
            ),
            "dagster/row_count": len(table),
            "excluded": MetadataValue.md(  # an empty frame renders as a header alone
                markdown_table(excluded[["scope", "model", "suite", "glm", "excluded"]]) if len(excluded) else "none"
            ),
            **plots,
        },
    )
