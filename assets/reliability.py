"""Assets ``reliability`` (per model x suite) and ``model_reliability`` (per model): HIP-LLM
imprecise-prior reliability envelopes."""

from dataclasses import asdict

from dagster import (
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.batch import PartitionResult, emit, partitions_in_turn
from assets.automation import refresh_partition_when_inputs_change, refresh_when_inputs_change
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.fits import FIT_POOL
from assets.metadata import column_schema, markdown_table, png_markdown, table_metadata
from assets.partitions import RANGE_BACKFILL, model_partitions, model_suite_names, model_suite_partitions, one_dimension
from evalpipeline.lake.keys import from_partition_key
from evalpipeline.lake import sha256_file
from evalpipeline.steps.reliability import (
    EXPECTED_RELIABILITY_COLUMNS,
    ReliabilityOutput,
    assess_model,
    assess_partition,
)
from evalpipeline.settings import load_plot_settings, load_reliability_settings
from evalpipeline.lake.versions import code_version
from resources import LakeResource

#: What a reliability table's code version covers: the method and its step over the lake.
RELIABILITY_CODE = ["evalpipeline.reliability", "evalpipeline.steps.reliability"]


def _version() -> str:
    """The HIP-LLM code and settings; also the ``code`` in every output's inputs hash."""
    return code_version(RELIABILITY_CODE, load_reliability_settings().describe())


def partition_version() -> str:
    """:func:`_version` plus the domain the taxonomy file gives each suite: a partition's tables name
    its suite's domain, so moving a suite to another domain marks the partitions stale. Their rerun
    recomputes only the partitions whose suite moved (the domain is in their counts, so the others
    match their stored inputs and are reused). The operational profile stays out: only the model
    level weighs by it."""
    config = load_reliability_settings()
    moved = _moved_suites(config)
    # without moved suites the version is :func:`_version`'s, so a default taxonomy stales nothing
    return code_version(RELIABILITY_CODE, {**config.describe(), **({"suite_domains": moved} if moved else {})})


def _moved_suites(config) -> dict[str, str]:
    """The suites the taxonomy puts in a domain other than their own (listing a suite under its own name
    changes nothing)."""
    return {suite: domain for suite, domain in sorted(config.taxonomy().suite_domains.items()) if domain != suite}


def model_version() -> str:
    """:func:`_version` plus everything the taxonomy file says (suite -> domain, operational profile):
    editing the profile marks every model's reliability stale, not the partitions'. (The outputs' own
    reuse needs no such help: the domains are in their counts and the profile in their settings.)"""
    config = load_reliability_settings()
    return code_version(RELIABILITY_CODE, {**config.describe(), "taxonomy_contents": asdict(config.taxonomy())})


def _result(output: ReliabilityOutput) -> MaterializeResult:
    result, directory, plots = output.result, output.directory, output.plots
    expected = result.expected_reliability
    top = expected[expected["level"] == ("llm" if (expected["level"] == "llm").any() else "domain")]
    target = result.target_probability
    return MaterializeResult(
        data_version=DataVersion(sha256_file(directory / "expected_reliability.parquet")[:16]),
        metadata={
            **table_metadata(top, directory / "expected_reliability.parquet"),
            "dagster/row_count": len(expected),
            "median_envelope": MetadataValue.md(
                markdown_table(result.quantile_envelopes.round(3))
                if len(result.quantile_envelopes) < 40
                else markdown_table(
                    result.quantile_envelopes[result.quantile_envelopes["level"] != "subdomain"].round(3)
                )
            ),
            "target_probability": MetadataValue.md(markdown_table(target[target["level"] != "subdomain"].round(4))),
            **{
                f"{name}_plot": png_markdown(plots[name], caption)
                for name, caption in (("cdf_envelopes", "CDF envelopes"), ("expected_reliability", "E[R(n)] envelopes"))
                if plots[name].exists()
            },  # a partition's are drawn on request (partition_plots)
            "folder": MetadataValue.path(str(directory)),
            "status": output.status,
            **({"subdomains_taken_over": output.subdomains_taken_over} if output.subdomains_taken_over else {}),
        },
    )


@asset(
    partitions_def=model_suite_partitions,
    backfill_policy=RANGE_BACKFILL,
    deps=["eval_samples"],
    group_name="fit",
    pool=FIT_POOL,
    retry_policy=TRANSIENT_RETRY,
    kinds={"numpy", "parquet"},
    owners=["team:evalpipeline"],
    code_version=partition_version(),
    automation_condition=refresh_partition_when_inputs_change(),
    description=(
        "HIP-LLM reliability of one model on one suite: the suite's subdomains pooled in its domain by a "
        "hierarchical Beta-Binomial under a credal set of priors. Lower/upper CDF envelopes of the success "
        "probability at subdomain, domain and LLM level (within one suite the LLM level is its domain's), "
        "envelopes of its 5%/50%/95% quantiles, of the expected "
        "future reliability E[R(n)] = E[p^n] and of P(R(n) >= r). Tables under reliability/; the column "
        "schema shown is that of expected_reliability.parquet (the others are in the README's output tables). "
        "Its plots are drawn by `partition_plots` on request (`[plots] partitions`)."
    ),
    metadata={"dagster/column_schema": column_schema(EXPECTED_RELIABILITY_COLUMNS)},
)
def reliability(context: AssetExecutionContext, lake: LakeResource):
    with permanent_errors():
        config, code, plots = load_reliability_settings(), _version(), load_plot_settings() == "always"
    results = []
    for key in partitions_in_turn(context):
        model, suite = model_suite_names(key)
        with permanent_errors(partitions=[key]):
            lake.lake().require_passed_validation(model, suite)
            output = assess_partition(lake.lake(), model, suite, config, code=code, plots=plots)
        results.append(PartitionResult(key, _result(output)))
    yield from emit(context, results)


@asset(
    partitions_def=model_partitions,
    backfill_policy=RANGE_BACKFILL,
    deps=[
        AssetDep(
            "eval_samples",
            partition_mapping=one_dimension("model"),
        )
    ],
    group_name="fit",
    pool=FIT_POOL,
    retry_policy=TRANSIENT_RETRY,
    kinds={"numpy", "parquet"},
    owners=["team:evalpipeline"],
    code_version=model_version(),
    automation_condition=refresh_when_inputs_change(dimension="model"),
    description=(
        "HIP-LLM reliability of one model across every suite it was evaluated on: suites mapped to domains "
        "by the taxonomy file (default: one domain per suite), domains combined by the operational profile "
        "(default: proportional to the number of attempts). Same tables as `reliability`, the LLM level "
        "combining the domains; "
        "the column schema shown is that of expected_reliability.parquet."
    ),
    metadata={"dagster/column_schema": column_schema(EXPECTED_RELIABILITY_COLUMNS)},
)
def model_reliability(context: AssetExecutionContext, lake: LakeResource):
    config, code = load_reliability_settings(), _version()
    results = []
    for key in partitions_in_turn(context):
        model = from_partition_key(key)
        with permanent_errors(partitions=[key]):
            output = assess_model(lake.lake(), model, config, code=code)
        results.append(PartitionResult(key, _result(output)))
    yield from emit(context, results)
