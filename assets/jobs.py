"""Jobs: the per-partition ingest-and-fit job and the per-suite leaderboard job.

Their partitioning is inferred from the selected assets."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

ingest_and_fit_job = define_asset_job(
    "ingest_and_fit",
    selection=AssetSelection.assets("eval_samples", "accuracy_posteriors"),
    description="Ingest one model x suite from the landing folder and fit its conjugate posteriors.",
)

leaderboard_job = define_asset_job(
    "suite_leaderboards",
    selection=AssetSelection.assets("suite_leaderboard"),
    description="Rank all evaluated models on one suite.",
)
