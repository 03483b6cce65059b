"""Assets ``suite_comparison`` (per suite), ``model_profile`` (per model) and ``report`` (lake-wide)."""

from dataclasses import asdict
from datetime import datetime, timezone

import pandas as pd
from dagster import (
    AllPartitionMapping,
    AssetSelection,
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.automation import refresh_when_inputs_change
from assets.batch import PartitionResult, emit, partitions_in_turn
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.fits import SUITE_GLM_ASSETS
from assets.metadata import column_schema, markdown_table, markdown_text, png_markdown, table_metadata
from assets.partitions import RANGE_BACKFILL, model_partitions, one_dimension, suite_partitions
from evalpipeline.steps.classification import CLASSIFICATION_FILE, MACRO_LABEL
from evalpipeline.steps.comparison import (
    LEADERBOARD_COLUMNS,
    PROFILE_COLUMNS,
    build_model_profile,
    build_suite_comparison,
    ranking_pairs,
)
from evalpipeline.lake.keys import from_partition_key, to_partition_key
from evalpipeline.lake import sha256_file
from evalpipeline.report.build import build_report
from evalpipeline.settings import load_comparison_settings
from evalpipeline.lake.versions import code_version
from resources import LakeResource

_STATS_MODULES = [
    "evalpipeline.steps.comparison",
    "evalpipeline.steps.classification",
    "evalpipeline.steps.fits",
    "evalpipeline.stats",
    "evalpipeline.plots",
]


def comparison_version() -> str:
    """The comparison code and its settings (the ``[posterior]`` prior and mass among them)."""
    return code_version(_STATS_MODULES, asdict(load_comparison_settings()))


@asset(
    partitions_def=suite_partitions,
    deps=[
        AssetDep("eval_samples", partition_mapping=one_dimension("suite")),
        *[a.key for a in SUITE_GLM_ASSETS],
    ],
    group_name="compare",
    retry_policy=TRANSIENT_RETRY,
    kinds={"parquet", "matplotlib"},
    owners=["team:evalpipeline"],
    code_version=comparison_version(),
    automation_condition=refresh_when_inputs_change(dimension="suite"),
    description=(
        "Everything needed to compare the models evaluated on one suite. leaderboard.parquet: per model the "
        "Beta posterior mean and 95% HPDI with Wilson, Clopper-Pearson and CLT intervals beside it, "
        "P(best), expected rank, P(accuracy > threshold), and the suite GLM's model effect where a fit "
        "passed its diagnostics. pairwise.parquet: per pair independent and paired P(A > B), difference "
        "and odds-ratio intervals, the HPDI-overlap verdict, a plain-language verdict and t-test p-values. "
        "fits.parquet: each suite GLM, whether it passed and was used. classification.parquet and "
        "classification_pairwise.parquet, when the attempts carry class labels (answer and target): per model "
        "and class precision, recall and F1 with credible intervals, macro-F1, and P(F1 of A > F1 of B). "
        "Models whose sample table failed "
        "validation are left out and listed. The column schema shown is that of leaderboard.parquet."
    ),
    metadata={"dagster/column_schema": column_schema(LEADERBOARD_COLUMNS)},
)
def suite_comparison(context: AssetExecutionContext, lake: LakeResource):
    yield from emit(
        context, [PartitionResult(key, _comparison(lake, key, context.log)) for key in partitions_in_turn(context)]
    )


#: Verdict sentences previewed in the UI (a 100-model suite has 4,950 pairs: the rest are in the table).
#: Above it, those of the pairs that decide the ranking, from the top of the leaderboard down.
VERDICTS_SHOWN = 50


def _comparison(lake: LakeResource, key: str, log) -> MaterializeResult:
    suite = from_partition_key(key)
    with permanent_errors(partitions=[key]):
        result = build_suite_comparison(lake.lake(), suite, load_comparison_settings())
    board = result.leaderboard
    for model, checks in sorted(result.rejected.items()):
        log.warning(f"{model} left out of suite {suite}: its sample table failed validation ({', '.join(checks)})")
    many = len(result.pairwise) > VERDICTS_SHOWN
    shown = (ranking_pairs(result.pairwise, board) if many else result.pairwise).head(VERDICTS_SHOWN)
    verdicts = (
        "\n".join(
            f"- {markdown_text(row.model_a)} vs {markdown_text(row.model_b)}: {markdown_text(row.verdict)}"
            for row in shown.itertuples()
        )
        or "(one model: nothing to compare)"
    )
    if many:
        verdicts = (
            f"Going down the leaderboard, each model against the leader and against the model ranked just "
            f"above it (the first {len(shown)}):\n\n{verdicts}\n\n... every pair of the "
            f"{len(result.pairwise)} is in pairwise.parquet"
        )
    metadata = {
        **table_metadata(
            board[
                [
                    "rank",
                    "model",
                    "posterior_mean",
                    "hpdi_low",
                    "hpdi_high",
                    "wilson_low",
                    "wilson_high",
                    "clt_low",
                    "clt_high",
                    "p_best",
                    "expected_rank",
                    "n",
                ]
            ],
            result.directory / "leaderboard.parquet",
        ),
        "suite": suite,
        "models": len(board),
        "glm_used": result.glm or "none passed",
        "left_out_failed_validation": MetadataValue.md(
            "\n".join(f"- {markdown_text(m)}: {', '.join(checks)}" for m, checks in sorted(result.rejected.items()))
            or "none"
        ),
        "verdicts": MetadataValue.md(verdicts),
        "pairwise": MetadataValue.path(str(result.directory / "pairwise.parquet")),
        "pairs_computed": result.pairwise.attrs.get("pairs_computed", len(result.pairwise)),
        "pairs_reused": result.pairwise.attrs.get("pairs_reused", 0),
    }
    classification = result.directory / CLASSIFICATION_FILE
    if classification.exists():
        macro = pd.read_parquet(
            classification, columns=["model", "class", "n", "f1_mean", "f1_low", "f1_high", "f1_plugin"]
        )
        metadata["classification_macro_f1"] = MetadataValue.md(
            markdown_table(macro[macro["class"] == MACRO_LABEL].drop(columns="class").round(3))
        )
    for name, path in result.plots.items():
        metadata[f"plot_{name}"] = png_markdown(path, name)
    digest = (
        sha256_file(result.directory / "leaderboard.parquet")[:8]
        + sha256_file(result.directory / "pairwise.parquet")[:8]
    )
    return MaterializeResult(data_version=DataVersion(digest), metadata=metadata)


@asset(
    partitions_def=model_partitions,
    backfill_policy=RANGE_BACKFILL,
    deps=[
        AssetDep("eval_samples", partition_mapping=one_dimension("model")),
        # rank, P(best) and the GLM columns come from every suite's leaderboard, and they move when any
        # model on the suite changes (which suites a model is on is data, so: all of them)
        AssetDep("suite_comparison", partition_mapping=AllPartitionMapping()),
    ],
    group_name="compare",
    retry_policy=TRANSIENT_RETRY,
    kinds={"parquet", "matplotlib"},
    owners=["team:evalpipeline"],
    code_version=comparison_version(),
    automation_condition=refresh_when_inputs_change(
        ignore=AssetSelection.assets("eval_samples"), when_missing=False, dimension="model"
    ),
    description=(
        "One model across every suite it was evaluated on: one row per suite (posterior mean, HPDI, "
        "conventional intervals, its rank and P(best) among the suite's models, the suite GLM's estimate) "
        "and two cross-suite rows (all attempts pooled; the unweighted mean of the suites), with a forest plot."
    ),
    metadata={"dagster/column_schema": column_schema(PROFILE_COLUMNS)},
)
def model_profile(context: AssetExecutionContext, lake: LakeResource):
    yield from emit(context, [PartitionResult(key, _profile(lake, key)) for key in partitions_in_turn(context)])


def _profile(lake: LakeResource, key: str) -> MaterializeResult:
    model = from_partition_key(key)
    store = lake.lake()
    with permanent_errors(partitions=[key]):
        profile = build_model_profile(store, model, load_comparison_settings())
    directory = store.root / "model_profile" / f"model={to_partition_key(model)}"
    metadata = {**table_metadata(profile, directory / "profile.parquet"), "model": model}
    forest = directory / "plots" / "forest.png"
    if forest.exists():
        metadata["plot_forest"] = png_markdown(forest, "forest plot")
    return MaterializeResult(
        data_version=DataVersion(sha256_file(directory / "profile.parquet")[:16]), metadata=metadata
    )


@asset(
    deps=[
        "suite_comparison",
        "model_profile",
        "waic_rankings",
        "ingest_accounting",
        "reliability",
        "model_reliability",
    ],
    group_name="report",
    retry_policy=TRANSIENT_RETRY,
    kinds={"html"},
    owners=["team:evalpipeline"],
    code_version=code_version(
        ["evalpipeline.report.html", "evalpipeline.report.build"],
        {"judges": [judge.scorer for judge in load_comparison_settings().judges]},
    ),
    automation_condition=refresh_when_inputs_change(),
    description=(
        "One static HTML page (report/index.html in the lake, readable offline): each suite's leader at a glance, "
        "then per suite the leaderboard (fits the page's width at 100 models) and the verdicts that decide it, "
        "with the verdicts in words, every pair, plots, every column and the WAIC/LOO rankings one click away; "
        "then one collapsed line per model opening its profile and reliability envelopes; the ingest accounting."
    ),
)
def report(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    store = lake.lake()
    generated = data_as_of(store)
    with permanent_errors():
        judges = tuple(judge.scorer for judge in load_comparison_settings().judges)
        path = build_report(store, f"{generated.isoformat()} (time of the newest table it shows)", judges=judges)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path)),
            "url": MetadataValue.url(path.resolve().as_uri()),
            "data_as_of": generated.isoformat(),
        }
    )


def data_as_of(store) -> datetime:
    """The time of the newest table the report reads: a rerun over unchanged data rewrites no
    table (unchanged bytes are not written), so it renders the same page, byte for byte."""
    newest = max(
        (
            p.stat().st_mtime
            for folder in (
                "suite_comparison",
                "model_profile",
                "waic_rankings",
                "ingest_accounting",
                "reliability",
                "model_reliability",
            )
            for p in (store.root / folder).rglob("*.parquet")
        ),
        default=0.0,
    )
    return datetime.fromtimestamp(newest, timezone.utc).replace(microsecond=0)
