import pandas as pd
import pytest

import evalpipeline.schema as schema


def test_every_column_is_documented_in_the_module_docstring():
    for column in schema.SAMPLE_COLUMNS:
        assert f"\n{column.name} " in schema.__doc__, column.name


def test_partition_columns_stay_out_of_stored_files():
    stored = schema.samples_schema(with_partition_columns=False)
    assert "model" not in stored.names and "suite" not in stored.names
    assert schema.quarantine_schema().field("reason").nullable is False
    assert schema.staged_schema().field("reason").nullable is True


def test_missing_column_is_named():
    with pytest.raises(schema.SchemaError, match=r"missing columns \[.*'item_id'.*present: \['model'\]"):
        schema.to_arrow(pd.DataFrame({"model": ["m"]}), schema.samples_schema())


def test_null_in_required_column_names_the_row():
    row = {c.name: None for c in schema.SAMPLE_COLUMNS}
    row.update(
        model="m",
        suite="s",
        item_id="q1",
        epoch=1,
        run_id="r",
        eval_id="e",
        log_path="p",
        log_sha256="h",
        log_format="eval",
        sample_index=0,
        created_at=pd.Timestamp("2026-01-01", tz="UTC"),
    )
    good = pd.DataFrame([row, dict(row, item_id=None)])
    with pytest.raises(schema.SchemaError, match=r"'item_id' must not be null \(row 1\)"):
        schema.to_arrow(good, schema.samples_schema())
    assert schema.to_arrow(good.iloc[:1], schema.samples_schema()).num_rows == 1
