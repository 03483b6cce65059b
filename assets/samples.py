"""Asset ``eval_samples``: the canonical sample table of one model x suite."""


from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from assets.metadata import column_schema
from assets.partitions import model_suite_names, model_suite_partitions
from evalpipeline.pipeline import ingest_partition, read_samples
from evalpipeline.schema import column_docs, samples_schema
from resources import IngestSettings, LakeResource


@asset(
    partitions_def=model_suite_partitions,
    group_name="ingest",
    kinds={"parquet", "python"},
    owners=["team:evalpipeline"],
    description=(
        "One row per scored attempt (model x suite x item x epoch) read from the Inspect logs in the "
        "landing folder, normalised to [0, 1]. Errored samples are kept and flagged; rows that cannot "
        "be trusted (unknown score values, missing scores, duplicates, unfinished logs) go to the "
        "quarantine table with their reason. Rows read = ingested + quarantined."
    ),
    metadata={
        "dagster/column_schema": column_schema(
            column_docs(), {f.name: str(f.type) for f in samples_schema()}
        )
    },
)
def eval_samples(
    context: AssetExecutionContext, lake: LakeResource, ingest_settings: IngestSettings
) -> MaterializeResult:
    model, suite = model_suite_names(context.partition_key)
    store = lake.lake()
    account, report = ingest_partition(
        store,
        lake.landing_dir(),
        model,
        suite,
        ingest_settings.options(),
        progress=context.log.info,
    )
    for line in report.summary_lines():
        context.log.info(line)
    samples = read_samples(store, model, suite)
    path = store.table_path("samples", "samples.parquet", model, suite)
    return MaterializeResult(
        metadata={
            "model": model,
            "suite": suite,
            "path": MetadataValue.path(str(path)),
            "quarantine_path": MetadataValue.path(str(store.table_path("quarantine", "quarantine.parquet", model, suite))),
            "dagster/row_count": account.rows_ingested,
            "rows_read": account.rows_read,
            "rows_ingested": account.rows_ingested,
            "rows_quarantined": account.rows_quarantined,
            "rows_errored": account.rows_errored,
            "logs": account.logs,
            "unchanged": not account.samples_written,
            "quarantine_reasons": MetadataValue.md(
                "\n".join(f"- {n} x {r}" for r, n in sorted(report.quarantine_reasons.items())) or "none"
            ),
            "preview": MetadataValue.md(
                samples.drop(columns=["metadata_json", "log_path", "log_sha256"]).head(10).to_markdown(index=False)
            ),
        }
    )
