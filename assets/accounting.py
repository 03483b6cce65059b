"""Asset ``ingest_accounting``: where every input row of the lake went."""

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, asset

from assets.automation import refresh_when_inputs_change
from assets.errors import TRANSIENT_RETRY
from assets.metadata import column_schema, table_metadata
from evalpipeline.steps.accounting import ACCOUNTING_CODE, ACCOUNTING_COLUMNS, UNPLACED_MODEL
from evalpipeline.steps.accounting import ingest_accounting as account_rows
from evalpipeline.lake import sha256_file, write_parquet_atomic
from evalpipeline.lake.versions import code_version
from resources import LakeResource

import pyarrow as pa


@asset(
    deps=["eval_samples"],
    group_name="validate",
    retry_policy=TRANSIENT_RETRY,
    kinds={"parquet"},
    owners=["team:evalpipeline"],
    automation_condition=refresh_when_inputs_change(),
    code_version=code_version(ACCOUNTING_CODE),
    description=(
        "Row accounting across the lake: per model x suite, rows ingested, rows flagged errored or "
        "limit-hit, rows quarantined by reason class; per log, its rows that no partition can hold (no "
        "model or suite name, or one too long for a partition key); and every log that could not be read at all. "
        "rows_accounted is every row the sources yielded; nothing is dropped silently."
    ),
    metadata={"dagster/column_schema": column_schema(ACCOUNTING_COLUMNS)},
)
def ingest_accounting(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    store = lake.lake()
    table = account_rows(store)
    path = store.root / "ingest_accounting" / "accounting.parquet"
    write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), path)
    unreadable = int((table["model"] == "(unreadable file)").sum())
    return MaterializeResult(
        # the content hash: the report downstream refreshes only when the accounting changed
        data_version=DataVersion(sha256_file(path)[:16]),
        metadata={
            **table_metadata(table, path),
            "rows_ingested": int(table["rows_ingested"].sum()),
            "rows_quarantined": int(table["rows_quarantined"].sum()),
            "rows_in_no_partition": int(table.loc[table["model"] == UNPLACED_MODEL, "rows_quarantined"].sum()),
            "unreadable_files": unreadable,
        },
    )
