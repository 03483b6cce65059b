"""Asset ``eval_samples``: the canonical sample table of one model x suite."""

from dataclasses import asdict

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.batch import PartitionResult, emit
from assets.errors import TRANSIENT_RETRY, permanent_errors
from assets.metadata import column_schema, markdown_table, markdown_text
from assets.partitions import RANGE_BACKFILL, model_suite_names, model_suite_partitions
from evalpipeline.ingest import partition_files_state
from evalpipeline.steps.samples import ingest_partitions, partition_validator, read_samples
from evalpipeline.schema import column_docs, samples_schema
from evalpipeline.settings import load_ingest_options, load_validation_settings
from evalpipeline.lake import sha256_file
from evalpipeline.validate import SUITE_NAME, check_names
from evalpipeline.validate.checks import first_example_line
from evalpipeline.lake.versions import code_version
from resources import IngestSettings, LakeResource

#: One blocking check per expectation of the canonical GX suite and per suite-level check:
#: a failing partition stops its downstream fits in the same run.
VALIDATION_CHECKS = [
    AssetCheckSpec(name, asset="eval_samples", blocking=True, description=f"{SUITE_NAME}: {name}")
    for name in check_names()
]


#: Metadata entry of each materialisation: the partition's files as it left them (see
#: evalpipeline.ingest.partition_files_state); the nightly redoes a partition whose files changed since.
FILES_STATE = "lake_files_state"


def samples_version() -> str:
    """The reading and validation code and the ``[ingest]`` / ``[validate]`` configuration in
    effect: editing either marks every sample table stale, and the staged records it made are
    read again (evalpipeline.ingest.already_ingested compares the options they were read with)."""
    return code_version(
        ["evalpipeline.ingest", "evalpipeline.schema", "evalpipeline.validate"],
        {"ingest": load_ingest_options().describe(), "validate": asdict(load_validation_settings())},
    )


@asset(
    partitions_def=model_suite_partitions,
    backfill_policy=RANGE_BACKFILL,
    group_name="ingest",
    kinds={"parquet", "python"},
    owners=["team:evalpipeline"],
    description=(
        "One row per scored attempt (model x suite x item x epoch) read from the logs in the landing "
        "folder (Inspect .eval/.json, lm-evaluation-harness samples, long or wide tables), normalised to [0, 1]. Errored samples are kept and flagged; rows that cannot "
        "be trusted (unknown score values, missing scores, duplicates, unfinished logs) go to the "
        "quarantine table with their reason. Rows read = ingested + quarantined."
    ),
    metadata={
        "dagster/column_schema": column_schema(
            column_docs(), {**{f.name: str(f.type) for f in samples_schema()}, "cov_<name>": "as mapped"}
        )
    },
    check_specs=VALIDATION_CHECKS,
    code_version=samples_version(),
    # Transient I/O failures (a log still being copied, a busy network share) get two more tries.
    retry_policy=TRANSIENT_RETRY,
)
def eval_samples(context: AssetExecutionContext, lake: LakeResource, ingest_settings: IngestSettings):
    keys = list(context.partition_keys)
    pairs = [model_suite_names(key) for key in keys]
    store = lake.lake()
    with permanent_errors():
        report = ingest_partitions(
            store,
            lake.landing_dir(),
            pairs,
            ingest_settings.options(),
            progress=context.log.info,
            validator=partition_validator(store, ingest_settings.validation()),
        )
    for line in report.summary_lines():
        context.log.info(line)
    for note in report.notes:
        context.log.warning(note)
    yield from emit(context, [_partition_result(store, key, pair, report) for key, pair in zip(keys, pairs)])


def _partition_result(store, key: str, pair: tuple[str, str], report) -> PartitionResult:
    model, suite = pair
    account = report.partitions[pair]
    samples = read_samples(store, model, suite)
    path = store.table_path("samples", "samples.parquet", model, suite)
    validation = account.validation
    reasons = account.quarantine_reasons
    result = MaterializeResult(
        # The content hash: downstream refreshes only when the table's bytes changed.
        data_version=DataVersion(sha256_file(path)[:16]),
        metadata={
            "model": model,
            "suite": suite,
            "path": MetadataValue.path(str(path)),
            "quarantine_path": MetadataValue.path(
                str(store.table_path("quarantine", "quarantine.parquet", model, suite))
            ),
            "dagster/row_count": account.rows_ingested,
            "rows_read": account.rows_read,
            "rows_ingested": account.rows_ingested,
            "rows_quarantined": account.rows_quarantined,
            "rows_errored": account.rows_errored,
            "rows_failed_validation": account.rows_failed_validation,
            "data_docs": MetadataValue.path(str(validation.data_docs_index)) if validation.data_docs_index else "none",
            "logs": account.logs,
            FILES_STATE: partition_files_state(store, model, suite),
            "unchanged": not account.samples_written,
            "quarantine_reasons": MetadataValue.md(
                "\n".join(f"- {n} x {markdown_text(r)}" for r, n in sorted(reasons.items())) or "none"
            ),
            "preview": MetadataValue.md(
                markdown_table(samples.drop(columns=["metadata_json", "log_path", "log_sha256"]).head(10))
            ),
        },
    )
    partition = f"{model} x {suite}"
    checks = []
    for outcome in validation.checks:
        metadata = {"partition": partition, "description": outcome.description, "observed": str(outcome.observed)}
        if len(outcome.examples):
            metadata["examples"] = MetadataValue.md(markdown_table(outcome.examples.head(5)))
            metadata["first_example"] = first_example_line(outcome.examples)
        checks.append(
            AssetCheckResult(
                check_name=outcome.name, passed=outcome.passed, severity=AssetCheckSeverity.ERROR, metadata=metadata
            )
        )
    return PartitionResult(key, result, checks)
