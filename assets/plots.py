"""Assets ``partition_plots`` (a model x suite partition's GLM and reliability figures) and
``suite_fit_plots`` (a suite GLM fit's figures), drawn on request (``[plots] partitions`` and
``[plots] suite_fits``, both ``"on_request"`` by default; see evalpipeline.steps.figures).

They are in no job, schedule or automation: the nightly never draws them. Select the partitions in
the Dagster UI and materialise them to see their figures in their metadata."""

import hashlib

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset

from assets.batch import PartitionResult, emit, partitions_in_turn
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS
from assets.metadata import png_markdown
from assets.partitions import RANGE_BACKFILL, model_suite_names, model_suite_partitions, suite_partitions
from assets.reliability import _version as reliability_code
from evalpipeline.lake import sha256_file
from evalpipeline.lake.keys import from_partition_key
from evalpipeline.steps.figures import draw_partition_plots, draw_suite_fit_plots, suite_fits_not_applicable
from evalpipeline.settings import load_reliability_settings
from evalpipeline.lake.versions import code_version
from resources import LakeResource

#: what draws the figures: the plotting package and the two modules that lay out a fit's and an assessment's
PLOT_MODULES = [
    "evalpipeline.plots",
    "evalpipeline.steps.figures",
    "evalpipeline.steps.fits",
    "evalpipeline.steps.reliability",
]


@asset(
    partitions_def=model_suite_partitions,
    backfill_policy=RANGE_BACKFILL,
    deps=[*(a.key for a in PARTITION_GLM_ASSETS), "reliability"],
    group_name="report",
    kinds={"matplotlib", "png"},
    owners=["team:evalpipeline"],
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version(PLOT_MODULES),
    description=(
        "The figures of one model on one suite, drawn on request: for every stored GLM fit its trace and "
        "rank plots, forest plot and posterior predictive check (HiBayES Figures 4-7), and the HIP-LLM "
        "CDF envelopes and E[R(n)] envelopes (Figures 3-8), as PNGs beside the fit and the reliability "
        "tables and inline here. The nightly stores the numbers without these pictures "
        '(`[plots] partitions = "on_request"`; a fit that fails a blocking check draws its own): select '
        "partitions and materialise this asset to draw them from the stored draws and tables."
    ),
)
def partition_plots(context: AssetExecutionContext, lake: LakeResource):
    with permanent_errors():
        config, code = load_reliability_settings(), reliability_code()
    results = []
    for key in partitions_in_turn(context):
        model, suite = model_suite_names(key)
        with permanent_errors(partitions=[key]):
            paths = draw_partition_plots(lake.lake(), model, suite, config, code)
        results.append(PartitionResult(key, _figures_result(paths, f"{model} x {suite}")))
    yield from emit(context, results)


@asset(
    partitions_def=suite_partitions,
    deps=[a.key for a in SUITE_GLM_ASSETS],
    group_name="report",
    kinds={"matplotlib", "png"},
    owners=["team:evalpipeline"],
    retry_policy=TRANSIENT_RETRY,
    code_version=code_version(PLOT_MODULES),
    description=(
        "The figures of one suite's multi-LLM GLM fits, drawn on request: for every stored suite GLM fit its "
        "trace and rank plots, forest plot and posterior predictive check (HiBayES Figures 4-7), as PNGs "
        "beside the fit and inline here. The nightly stores the fits without these pictures "
        '(`[plots] suite_fits = "on_request"`; a fit that fails a blocking check draws its own): select '
        "suites and materialise this asset to draw them from the stored draws. The suite's comparison "
        "figures (`suite_comparison`) are drawn every night. When no suite GLM applies (each left out of "
        "`[glm] models`, or the suite has one LLM), it materialises without figures and says why (`not_drawn`)."
    ),
)
def suite_fit_plots(context: AssetExecutionContext, lake: LakeResource):
    results = []
    for key in partitions_in_turn(context):
        suite = from_partition_key(key)
        with permanent_errors(partitions=[key]):
            paths = draw_suite_fit_plots(lake.lake(), suite)
            # every suite GLM disabled or not applicable: a success that says so, not a failure
            not_drawn = suite_fits_not_applicable(lake.lake(), suite) if not paths else {}
        results.append(PartitionResult(key, _figures_result(paths, suite, not_drawn)))
    yield from emit(context, results)


def _figures_result(paths: dict, label: str, not_drawn: dict | None = None) -> MaterializeResult:
    """The figures inline, their folders, and a data version that is the hash of their bytes; with
    ``not_drawn`` ({fit: reason}), why there are none."""
    lines = [f"{n}={sha256_file(p)}" for n, p in sorted(paths.items())]
    lines += [f"{n}: {reason}" for n, reason in sorted((not_drawn or {}).items())]
    digest = hashlib.sha256("\n".join(lines).encode())
    metadata = {
        "partition": label,
        "figures": len(paths),
        **{
            f"plot_{name.replace('/', '_')}": png_markdown(path, f"{name}: {label}")
            for name, path in sorted(paths.items())
        },
        "folders": MetadataValue.md("\n".join(sorted({f"- `{p.parent}`" for p in paths.values()}))),
    }
    if not_drawn:
        metadata["not_drawn"] = MetadataValue.md(
            "\n".join(f"- `{n}`: {reason}" for n, reason in sorted(not_drawn.items()))
        )
    return MaterializeResult(data_version=DataVersion(digest.hexdigest()[:16]), metadata=metadata)
