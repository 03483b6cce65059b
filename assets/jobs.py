"""The assets by partitioning, and the jobs, one per partitioning of the graph; ``evalpipeline run`` runs
them in this order. A job's partitioning is inferred from the selected assets."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.accounting import ingest_accounting
from assets.compare import model_profile, report, suite_comparison
from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS, waic_rankings
from assets.plots import partition_plots, suite_fit_plots
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.reliability import model_reliability, reliability
from assets.samples import eval_samples

#: model x suite assets: what one ingest-and-fit run materialises for one partition
PARTITION_ASSETS = [eval_samples, accuracy_posteriors, reliability, *PARTITION_GLM_ASSETS]
#: per-suite assets
SUITE_ASSETS = [suite_leaderboard, *SUITE_GLM_ASSETS, suite_comparison]
#: per-model assets
MODEL_ASSETS = [model_reliability, model_profile]
#: lake-wide assets
LAKE_ASSETS = [ingest_accounting, waic_rankings, report]
#: assets no job, schedule or automation materialises: drawn when somebody asks, from the UI
ON_REQUEST_ASSETS = [partition_plots, suite_fit_plots]

PARTITION_STEPS = [
    "eval_samples",
    "accuracy_posteriors",
    "reliability",
    *[a.key.to_user_string() for a in PARTITION_GLM_ASSETS],
]
SUITE_STEPS = ["suite_leaderboard", *[a.key.to_user_string() for a in SUITE_GLM_ASSETS]]
#: Its own job, after the suite GLMs: in one run a GLM's failed blocking check would skip it, while it
#: should run and exclude that GLM with the reason (fits.parquet) like waic_rankings does.
COMPARISON_STEPS = ["suite_comparison"]
MODEL_STEPS = ["model_reliability", "model_profile"]
LAKE_STEPS = ["ingest_accounting", "waic_rankings", "report"]

ingest_and_fit_job = define_asset_job(
    "ingest_and_fit",
    selection=AssetSelection.assets(*PARTITION_STEPS),
    description="Ingest one model x suite from the landing folder and fit its conjugate posteriors and GLMs.",
)

suite_job = define_asset_job(
    "suite_analysis",
    selection=AssetSelection.assets(*SUITE_STEPS),
    description="Per suite: rank all evaluated models (conjugate leaderboard) and fit the multi-LLM GLMs.",
)

comparison_job = define_asset_job(
    "suite_comparisons",
    selection=AssetSelection.assets(*COMPARISON_STEPS),
    description="Per suite, after its GLMs: compare every pair and rank the models; a suite GLM that failed its "
    "diagnostics is excluded with the reason instead of holding the comparison back.",
)

model_job = define_asset_job(
    "model_analysis",
    selection=AssetSelection.assets(*MODEL_STEPS),
    description="Per model: reliability across suites under the operational profile, and the model's profile.",
)

model_profile_job = define_asset_job(
    "model_profiles",
    selection=AssetSelection.assets("model_profile"),
    description="Per model: the profile across suites alone, for a nightly's models whose own samples are "
    "unchanged but whose suites' ranks moved (their reliability has nothing new to compute).",
)

lake_job = define_asset_job(
    "lake_reports",
    selection=AssetSelection.assets(*LAKE_STEPS),
    description="Lake-wide: row accounting, WAIC/LOO rankings of the candidate GLMs, the HTML report.",
)

#: Each partitioned job's steps (asset keys), in the order a run's selection lists them.
JOB_STEPS = {
    ingest_and_fit_job.name: PARTITION_STEPS,
    suite_job.name: SUITE_STEPS,
    comparison_job.name: COMPARISON_STEPS,
    model_job.name: MODEL_STEPS,
    model_profile_job.name: ["model_profile"],
}
