"""Validate many partitions' sample tables in one Great Expectations run.

GX's cost is per expectation and run, not per row: the canonical suite's 34 expectations cost
~0.2 s on a partition of 200 rows and ~0.4 s on 60 such partitions concatenated, so validating a
range's partitions one by one would spend most of an ingest step in GX.

:func:`validate_batch` runs the suite once over the concatenation of partitions that have the same
columns and dtypes, and gives each partition the report :func:`validate_samples` would give it
alone, or ``None`` where it cannot vouch for that, and the caller validates that partition alone
(:func:`evalpipeline.steps.samples.partition_validator` does). It vouches only for a partition that
passes every check, where each check's verdict and observed value follow from the batch's
results:

- row-level (map) expectations: the partition has none of the batch's unexpected rows. The
  uniqueness key gains a partition column, so that the same item in two partitions is not a
  duplicate. The observed ``element_count`` is the partition's rows in the expectation's domain
  (its row condition applied with GX's own pandas translation) and ``unexpected_percent`` is 0;
  a partition with no non-null value in an expectation's domain is left to the single path
  (GX leaves the percentage undefined there);
- column types: the dtypes are the batch's, so the batch's verdict and observed type hold for
  each; the columns present likewise;
- the row count and the share of non-null ``error`` values: computed per partition against the
  expectation's bounds (as GX does: ``min <= value <= max``);
- "every item scored": the same pandas check, per partition.

A partition that fails anything, an expectation that raised, or an expectation type not listed
here, sends the partition (or the whole batch) to the single path, whose report is GX's own with
the failing rows and examples. A test checks, on a corpus of good and broken partitions, that
every report given here equals the single path's.

Data Docs: the batch's validation is one GX site (``<data_docs_root>/<digest>/``, named after what
was validated, so a rerun on the same tables rebuilds the same folder); the reports of its
partitions link it. Nothing here imports dagster.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evalpipeline.validate.checks import CheckOutcome, every_item_scored
from evalpipeline.validate.run import (
    _GX_LOCK,
    ValidationReport,
    _describe,
    _exception_message,
    _gx_frame,
    _plain,
    _publish_site,
    _run_gx,
    _site_dirs,
)
from evalpipeline.validate.suite import SUITE_PATH, ValidationSettings, load_suite

#: The column that tells the partitions of a batch apart (added to the concatenation only).
PARTITION_COLUMN = "__evalpipeline_partition__"
#: The file in a batch's Data Docs site that lists the partitions it validated (label and key of each).
BATCH_MANIFEST = "partitions.json"

_MAP_TYPES = frozenset(
    {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
        "expect_column_pair_values_to_be_equal",
        "expect_compound_columns_to_be_unique",
    }
)
_TYPE_TYPES = frozenset({"expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list"})
_PER_PARTITION_TYPES = frozenset(
    {
        "expect_table_row_count_to_be_between",
        "expect_column_proportion_of_non_null_values_to_be_between",
    }
)
_BATCH_WIDE_TYPES = frozenset({"expect_table_columns_to_match_set"})
#: Bounds kwargs whose meaning the per-partition checks reproduce; anything else (strict bounds, ``mostly``) is left to GX alone.
_PLAIN_KWARGS = frozenset(
    {
        "column",
        "column_A",
        "column_B",
        "column_list",
        "column_set",
        "exact_match",
        "min_value",
        "max_value",
        "type_",
        "type_list",
        "row_condition",
        "condition_parser",
        "ignore_row_if",
        "batch_id",
    }
)


@dataclass
class BatchItem:
    """One partition to validate: its sample table, its quarantined rows (optional) and its label."""

    samples: pd.DataFrame
    quarantine: pd.DataFrame | None
    label: str
    key: object = None  # JSON-able, listed in the batch's manifest beside the label


def validate_batch(
    items: Sequence[BatchItem],
    settings: ValidationSettings | None = None,
    data_docs_root: Path | None = None,
    *,
    suite_path: Path = SUITE_PATH,
) -> list[ValidationReport | None]:
    """Per item, the report :func:`validate_samples` would give it, or ``None`` (validate it alone).

    Items with the same columns and dtypes are validated in one GX run (groups of one are left
    to the single path). With ``data_docs_root``, each run's Data Docs site is published under it
    and the reports link it.
    """
    settings = settings or ValidationSettings()
    reports: list[ValidationReport | None] = [None] * len(items)
    frames = [_gx_frame(item.samples) if len(item.samples) and item.samples.index.is_unique else None for item in items]
    groups: dict[tuple, list[int]] = {}
    for i, frame in enumerate(frames):
        if frame is not None and PARTITION_COLUMN not in frame.columns:
            groups.setdefault(_signature(frame), []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        found = _validate_group(
            [items[i] for i in members], [frames[i] for i in members], settings, data_docs_root, suite_path
        )
        for i, report in zip(members, found):
            reports[i] = report
    return reports


def _signature(frame: pd.DataFrame) -> tuple:
    return tuple(frame.columns), tuple(repr(d) for d in frame.dtypes)


def batch_digest(items: Sequence[BatchItem]) -> str:
    """A name for a batch: its labels and the content of its tables."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(item.label.encode() + b"\0")
        digest.update(pd.util.hash_pandas_object(item.samples, index=True).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def _validate_group(items, frames, settings, data_docs_root, suite_path) -> list[ValidationReport | None]:
    """One GX run over ``frames``. When some partitions fail and Data Docs are asked for, the site is
    built by a second run over those that passed only: a partition's page links a validation that
    passed, and the ones that failed get their own site from the single path."""
    started = time.perf_counter()
    site = build_dir = None
    if data_docs_root is not None:
        site, build_dir = _site_dirs(Path(data_docs_root) / batch_digest(items))
    try:
        outcomes, scored = _run_group(items, frames, settings, build_dir, suite_path)
        vouched = [
            k for k in range(len(items)) if outcomes is not None and outcomes[k] is not None and scored[k].passed
        ]
        index_page = page = None
        if build_dir is not None and vouched and len(vouched) < len(items):
            return _merge(
                [
                    _validate_group(
                        [items[k] for k in vouched], [frames[k] for k in vouched], settings, data_docs_root, suite_path
                    )
                ],
                [vouched],
                len(items),
            )
        if build_dir is not None and vouched:
            (build_dir / BATCH_MANIFEST).write_text(
                json.dumps([{"label": item.label, "key": item.key} for item in items], indent=1)
            )
            index_page, page = _publish_site(build_dir, site)
    finally:
        if build_dir is not None and build_dir.exists():
            import shutil

            shutil.rmtree(build_dir, ignore_errors=True)
    seconds = (time.perf_counter() - started) / len(items)
    reports: list[ValidationReport | None] = [None] * len(items)
    for k in vouched:
        reports[k] = ValidationReport(
            checks=[*outcomes[k], scored[k]],
            row_failures={},
            rows=len(items[k].samples),
            data_docs_index=index_page,
            data_docs_page=page,
            seconds=seconds,
            timings={"gx_run_share_of_batch": seconds},
        )
    return reports


def _merge(found: list[list], members: list[list[int]], n: int) -> list:
    reports = [None] * n
    for group, indices in zip(found, members):
        for k, report in zip(indices, group):
            reports[k] = report
    return reports


def _run_group(items, frames, settings, build_dir, suite_path):
    """The per-partition outcomes of one GX run over ``frames`` (see :func:`_per_partition`) and each
    partition's "every item scored"."""
    table = pd.concat(frames, ignore_index=True)
    codes = np.repeat(np.arange(len(frames)), [len(f) for f in frames])
    table[PARTITION_COLUMN] = codes
    suite = load_suite(suite_path)
    for expectation in suite.expectations:
        if expectation.expectation_type == "expect_compound_columns_to_be_unique":
            expectation.column_list = [*expectation.column_list, PARTITION_COLUMN]
    label = f"{len(items)} partitions, {items[0].label} .. {items[-1].label}"
    with _GX_LOCK:
        suite_result, expectations = _run_gx(table, settings, build_dir, label[:200], suite)
    outcomes = _per_partition(table, codes, len(frames), suite_result, expectations)
    scored = [every_item_scored(item.samples, (), item.quarantine) for item in items]
    return outcomes, scored


def _per_partition(table, codes, n, suite_result, expectations) -> list[list[CheckOutcome] | None] | None:
    """Each partition's outcomes when it passes every expectation, else None; None for the whole
    batch when an expectation raised or is of a type whose per-partition result is not derived here."""
    by_check = {r.expectation_config.meta["check"]: r for r in suite_result.results}
    clean = np.ones(n, dtype=bool)
    columns: list[
        tuple[str, str, str, object]
    ] = []  # (name, type, description, observed per partition: array or value)
    for expectation in expectations:
        name = expectation.meta["check"]
        result = by_check[name]
        config = result.expectation_config  # suite parameters already substituted
        kwargs = dict(config.kwargs)
        if _exception_message(result.exception_info) is not None or not set(kwargs) <= _PLAIN_KWARGS:
            return None
        if config.type == "expect_compound_columns_to_be_unique":
            kwargs["column_list"] = [c for c in kwargs["column_list"] if c != PARTITION_COLUMN]
        description = config.description or _describe(config.type, kwargs)
        res = result.result or {}
        if "unexpected_index_list" in res or "unexpected_count" in res:
            if config.type not in _MAP_TYPES | _TYPE_TYPES:
                return None
            bad = np.asarray(list(res.get("unexpected_index_list") or []), dtype=np.int64)
            if int(res.get("unexpected_count") or 0) != len(bad):
                return None  # a count without its rows: cannot be told apart by partition
            clean[np.unique(codes[bad])] = False
            in_domain, nonmissing = _domain_counts(table, codes, n, config.type, kwargs)
            clean &= nonmissing > 0
            columns.append((name, config.type, description, ("map", in_domain)))
        elif config.type in _TYPE_TYPES or config.type in _BATCH_WIDE_TYPES:
            if not result.success:
                return None
            observed = (
                {"missing_columns": []} if config.type in _BATCH_WIDE_TYPES else _plain(res.get("observed_value"))
            )
            columns.append((name, config.type, description, ("same", observed)))
        elif config.type in _PER_PARTITION_TYPES:
            if config.type == "expect_table_row_count_to_be_between":
                values = np.bincount(codes, minlength=n)
                observed = [int(v) for v in values]
            else:
                column = kwargs["column"]
                nonnull = np.bincount(codes, weights=table[column].notna().to_numpy(), minlength=n)
                values = nonnull / np.bincount(codes, minlength=n)
                observed = [float(v) for v in values]
            low, high = kwargs.get("min_value"), kwargs.get("max_value")
            clean &= np.array([(low is None or v >= low) and (high is None or v <= high) for v in values])
            columns.append((name, config.type, description, ("each", observed)))
        else:
            return None
    outcomes: list[list[CheckOutcome] | None] = []
    for k in range(n):
        if not clean[k]:
            outcomes.append(None)
            continue
        checks = []
        for name, expectation_type, description, (kind, value) in columns:
            if kind == "map":
                observed = {"unexpected_count": 0, "element_count": int(value[k]), "unexpected_percent": 0.0}
            elif kind == "each":
                observed = value[k]
            else:
                observed = value
            checks.append(
                CheckOutcome(
                    name=name,
                    passed=True,
                    description=description,
                    observed=observed,
                    expectation_type=expectation_type,
                )
            )
        outcomes.append(checks)
    return outcomes


def _domain_counts(table, codes, n, expectation_type, kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Per partition, the rows in the expectation's domain (its row condition applied as GX's pandas
    engine applies it) and those of them with the values the expectation looks at non-null."""
    rows = np.ones(len(table), dtype=bool)
    if kwargs.get("row_condition"):
        rows = _condition_rows(table, kwargs["row_condition"])
    if expectation_type == "expect_column_pair_values_to_be_equal":
        a, b = table[kwargs["column_A"]].notna().to_numpy(), table[kwargs["column_B"]].notna().to_numpy()
        ignore = kwargs.get("ignore_row_if") or "both_values_are_missing"
        if ignore == "neither":
            present = np.ones(len(table), dtype=bool)
        elif ignore == "either_value_is_missing":
            present = a & b
        else:
            present = a | b
    elif expectation_type == "expect_compound_columns_to_be_unique":
        present = table[list(kwargs["column_list"])].notna().any(axis=1).to_numpy()
    elif expectation_type == "expect_column_values_to_not_be_null":
        present = np.ones(len(table), dtype=bool)
    else:
        present = table[kwargs["column"]].notna().to_numpy()
    in_domain = np.bincount(codes[rows], minlength=n)
    nonmissing = np.bincount(codes[rows & present], minlength=n)
    return in_domain, nonmissing


def _condition_rows(table: pd.DataFrame, condition) -> np.ndarray:
    from great_expectations.execution_engine import PandasExecutionEngine
    from great_expectations.expectations.row_conditions import deserialize_row_condition

    if isinstance(condition, dict):
        condition = deserialize_row_condition(condition)
    clause = PandasExecutionEngine().condition_to_filter_clause(condition)
    kept = table.query(clause).index
    return table.index.isin(kept)
