"""Assets ``accuracy_posteriors`` (per model x suite) and ``suite_leaderboard`` (per suite)."""

from dagster import (
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    asset,
)

from assets.automation import refresh_partition_when_inputs_change, refresh_when_inputs_change
from assets.batch import PartitionResult, emit, partitions_in_turn
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.metadata import column_schema, table_metadata
from assets.partitions import RANGE_BACKFILL, model_suite_names, model_suite_partitions, one_dimension, suite_partitions
from evalpipeline.lake.keys import from_partition_key
from evalpipeline.lake import sha256_file
from evalpipeline.steps.samples import write_accuracy_posteriors, write_suite_leaderboard
from evalpipeline.settings import load_posterior_settings
from evalpipeline.stats.posteriors import LEADERBOARD_COLUMNS, POSTERIOR_COLUMNS
from evalpipeline.lake.versions import code_version
from resources import LakeResource, PosteriorSettings


def posteriors_version() -> str:
    """Code version of the headline posteriors: their code plus the ``[posterior]`` settings."""
    return code_version(
        [
            "evalpipeline.stats.intervals",
            "evalpipeline.stats.posteriors",
            "evalpipeline.stats.clustered",
            "evalpipeline.steps.samples",
        ],
        load_posterior_settings(),
    )


@asset(
    partitions_def=model_suite_partitions,
    backfill_policy=RANGE_BACKFILL,
    deps=["eval_samples"],
    group_name="fit",
    retry_policy=TRANSIENT_RETRY,
    kinds={"parquet", "scipy"},
    owners=["team:evalpipeline"],
    description=(
        "Design-aware posterior of the success rate of one model on one suite, overall and per domain and "
        "subdomain: posterior mean and HPDI with the item (its repeats) or the declared cluster as the unit of "
        "evidence, the design effect and effective n, the independent-attempts HPDI and the CLT interval beside "
        "it for contrast (flagged where too narrow, collapsed or outside [0, 1]). Errored and limit-hit attempts "
        "are not counted."
    ),
    metadata={"dagster/column_schema": column_schema(POSTERIOR_COLUMNS)},
    code_version=posteriors_version(),
    # as the partition fits: refreshed when its samples' data changed outside a run of it (a range whose
    # blocking check failed for another partition), or its code or [posteriors] settings changed
    automation_condition=refresh_partition_when_inputs_change(),
)
def accuracy_posteriors(context: AssetExecutionContext, lake: LakeResource, posterior_settings: PosteriorSettings):
    yield from emit(
        context,
        [PartitionResult(key, _posteriors(lake, key, posterior_settings)) for key in partitions_in_turn(context)],
    )


def _posteriors(lake: LakeResource, key: str, posterior_settings: PosteriorSettings) -> MaterializeResult:
    model, suite = model_suite_names(key)
    with permanent_errors(partitions=[key]):
        lake.lake().require_passed_validation(model, suite)
        settings = posterior_settings.values()
        table, path = write_accuracy_posteriors(
            lake.lake(),
            model,
            suite,
            prior=(settings["prior_a"], settings["prior_b"]),
            mass=settings["hpdi_mass"],
            concentration_prior=(settings["concentration_shape"], settings["concentration_rate"]),
        )
    overall = table[table["level"] == "overall"].iloc[0]
    return MaterializeResult(
        data_version=DataVersion(sha256_file(path)[:16]),
        metadata={
            **table_metadata(table, path),
            "posterior_mean": float(overall["posterior_mean"]),
            "hpdi": f"[{overall['hpdi_low']:.3f}, {overall['hpdi_high']:.3f}]",
            "n": int(overall["n"]),
        },
    )


@asset(
    partitions_def=suite_partitions,
    deps=[
        AssetDep(
            "accuracy_posteriors",
            partition_mapping=one_dimension("suite"),
        ),
        # it leaves out the models whose sample table failed validation: a table rejected on a later
        # night changes no posteriors (the checks stop them), and must refresh the leaderboard all the same
        AssetDep("eval_samples", partition_mapping=one_dimension("suite")),
    ],
    group_name="compare",
    retry_policy=TRANSIENT_RETRY,
    kinds={"parquet"},
    owners=["team:evalpipeline"],
    automation_condition=refresh_when_inputs_change(dimension="suite"),
    code_version=code_version(["evalpipeline.stats.posteriors", "evalpipeline.steps.samples"]),
    description=(
        "Every model evaluated on the suite, ranked by posterior mean success rate, with HPDI and the "
        "CLT interval side by side; models never evaluated on the suite are absent, not zero."
    ),
    metadata={"dagster/column_schema": column_schema(LEADERBOARD_COLUMNS)},
)
def suite_leaderboard(context: AssetExecutionContext, lake: LakeResource):
    yield from emit(context, [PartitionResult(key, _leaderboard(lake, key)) for key in partitions_in_turn(context)])


def _leaderboard(lake: LakeResource, key: str) -> MaterializeResult:
    suite = from_partition_key(key)
    with permanent_errors(partitions=[key]):
        board, path = write_suite_leaderboard(lake.lake(), suite)
    return MaterializeResult(
        data_version=DataVersion(sha256_file(path)[:16]),
        metadata={
            **table_metadata(board, path),
            "suite": suite,
            "models": len(board),
            "leader": str(board.iloc[0]["model"]),
        },
    )
