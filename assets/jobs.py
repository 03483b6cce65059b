"""Jobs: the per-partition ingest-and-fit job and the per-suite leaderboard job."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.partitions import model_suite_partitions, suite_partitions

ingest_and_fit_job = define_asset_job(
    "ingest_and_fit",
    selection=AssetSelection.assets("eval_samples", "accuracy_posteriors"),
    partitions_def=model_suite_partitions,
    description="Ingest one model x suite from the landing folder and fit its conjugate posteriors.",
)

leaderboard_job = define_asset_job(
    "suite_leaderboards",
    selection=AssetSelection.assets("suite_leaderboard"),
    partitions_def=suite_partitions,
    description="Rank all evaluated models on one suite.",
)
