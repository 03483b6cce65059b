"""Assets ``accuracy_posteriors`` (per model x suite) and ``suite_leaderboard`` (per suite)."""


from dagster import (
    AssetDep,
    AssetExecutionContext,
    AutomationCondition,
    MaterializeResult,
    MultiToSingleDimensionPartitionMapping,
    asset,
)

from assets.metadata import column_schema, table_metadata
from assets.partitions import model_suite_names, model_suite_partitions, suite_partitions
from evalpipeline.keys import from_partition_key
from evalpipeline.pipeline import write_accuracy_posteriors, write_suite_leaderboard
from evalpipeline.stats.posteriors import LEADERBOARD_COLUMNS, POSTERIOR_COLUMNS
from resources import LakeResource, PosteriorSettings


@asset(
    partitions_def=model_suite_partitions,
    deps=["eval_samples"],
    group_name="fit",
    kinds={"parquet", "scipy"},
    owners=["team:evalpipeline"],
    description=(
        "Conjugate Beta posterior of the success rate of one model on one suite, overall and per "
        "domain and subdomain: posterior mean and HPDI, with the CLT interval beside it for contrast "
        "(flagged where it collapses or leaves [0, 1]). Errored and limit-hit attempts are not counted."
    ),
    metadata={"dagster/column_schema": column_schema(POSTERIOR_COLUMNS)},
)
def accuracy_posteriors(
    context: AssetExecutionContext, lake: LakeResource, posterior_settings: PosteriorSettings
) -> MaterializeResult:
    model, suite = model_suite_names(context.partition_key)
    table, path = write_accuracy_posteriors(
        lake.lake(),
        model,
        suite,
        prior=(posterior_settings.prior_a, posterior_settings.prior_b),
        mass=posterior_settings.hpdi_mass,
    )
    overall = table[table["level"] == "overall"].iloc[0]
    return MaterializeResult(
        metadata={
            **table_metadata(table, path),
            "posterior_mean": float(overall["posterior_mean"]),
            "hpdi": f"[{overall['hpdi_low']:.3f}, {overall['hpdi_high']:.3f}]",
            "n": int(overall["n"]),
        }
    )


@asset(
    partitions_def=suite_partitions,
    deps=[
        AssetDep(
            "accuracy_posteriors",
            partition_mapping=MultiToSingleDimensionPartitionMapping(partition_dimension_name="suite"),
        )
    ],
    group_name="compare",
    kinds={"parquet"},
    owners=["team:evalpipeline"],
    # Eager, but not blocked by model x suite combinations that were never evaluated.
    automation_condition=AutomationCondition.eager().without(~AutomationCondition.any_deps_missing()),
    description=(
        "Every model evaluated on the suite, ranked by posterior mean success rate, with HPDI and the "
        "CLT interval side by side; models never evaluated on the suite are absent, not zero."
    ),
    metadata={"dagster/column_schema": column_schema(LEADERBOARD_COLUMNS)},
)
def suite_leaderboard(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    suite = from_partition_key(context.partition_key)
    board, path = write_suite_leaderboard(lake.lake(), suite)
    return MaterializeResult(
        metadata={
            **table_metadata(board, path),
            "suite": suite,
            "models": len(board),
            "leader": str(board.iloc[0]["model"]),
        }
    )
