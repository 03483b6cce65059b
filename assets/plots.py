"""Asset ``partition_plots``: a model x suite partition's GLM and reliability figures, drawn on
request (``[plots] partitions = "on_request"``, the default; see evalpipeline.partition_plots).

It is in no job, schedule or automation: the nightly never draws it. Select the partitions in the
Dagster UI and materialise it to see their figures in its metadata."""

import hashlib

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset

from assets.batch import PartitionResult, emit
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.fits import PARTITION_GLM_ASSETS
from assets.metadata import png_markdown
from assets.partitions import model_suite_names, model_suite_partitions
from assets.reliability import _version as reliability_code
from evalpipeline.lake import sha256_file
from evalpipeline.partition_plots import draw_partition_plots
from evalpipeline.settings import load_reliability_settings
from evalpipeline.versions import code_version
from resources import LakeResource

#: what draws the figures: the plotting package and the two modules that lay out a fit's and an assessment's
PLOT_MODULES = ["evalpipeline.plots", "evalpipeline.partition_plots", "evalpipeline.fits", "evalpipeline.reliability.lake"]


@asset(
    partitions_def=model_suite_partitions,
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
        "(`[plots] partitions = \"on_request\"`; a fit that fails a blocking check draws its own): select "
        "partitions and materialise this asset to draw them from the stored draws and tables."
    ),
)
def partition_plots(context: AssetExecutionContext, lake: LakeResource):
    with permanent_errors():
        config, code = load_reliability_settings(), reliability_code()
    results = []
    for key in context.partition_keys:
        model, suite = model_suite_names(key)
        with permanent_errors():
            paths = draw_partition_plots(lake.lake(), model, suite, config, code)
        digest = hashlib.sha256("\n".join(f"{n}={sha256_file(p)}" for n, p in sorted(paths.items())).encode())
        metadata = {"partition": f"{model} x {suite}", "figures": len(paths),
                    **{f"plot_{name.replace('/', '_')}": png_markdown(path, f"{name}: {model} x {suite}")
                       for name, path in sorted(paths.items())},
                    "folders": MetadataValue.md("\n".join(sorted({f"- `{p.parent}`" for p in paths.values()})))}
        results.append(PartitionResult(key, MaterializeResult(data_version=DataVersion(digest.hexdigest()[:16]),
                                                              metadata=metadata)))
    yield from emit(context, results)
