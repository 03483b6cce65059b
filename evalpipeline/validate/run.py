"""Run the canonical suite on one partition's sample table with Great Expectations 1.x.

One call builds a throw-away *ephemeral* GX data context (in-memory stores,
analytics off, progress bars off, nothing written to the repository or the
home folder), adds the DataFrame as a pandas data asset, runs a Checkpoint
over the suite loaded from ``canonical_suite.json`` with result format
``COMPLETE`` (so that map expectations return ``unexpected_index_list``,
the DataFrame's own index labels), and, when asked, lets the Checkpoint's
``UpdateDataDocsAction`` render GX's HTML Data Docs into a hidden temporary
folder that is then renamed into place.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evalpipeline.lake import sweep_orphaned_temporaries, temp_prefix
from evalpipeline.validate.checks import CheckOutcome, every_item_scored, example_rows
from evalpipeline.validate.suite import SUITE_PATH, ValidationSettings, load_suite

# GX keeps the current data context in a module-level project manager: one validation at a time
# per process (Dagster's multiprocess executor runs partitions in separate processes anyway).
_GX_LOCK = threading.Lock()

_RESULT_FORMAT = {
    "result_format": "COMPLETE",  # unexpected_index_list: every failing row, by DataFrame index
    "return_unexpected_index_query": False,  # a pandas filter string listing every index: not needed
}


@dataclass
class ValidationReport:
    """What :func:`validate_samples` found.

    ``row_failures`` maps a row's index label to the reasons it fails the row-level checks
    (the caller moves those rows to quarantine); ``checks`` has one outcome per expectation
    and per suite-level check, in suite order.
    """

    checks: list[CheckOutcome]
    row_failures: dict[Hashable, list[str]]
    rows: int
    data_docs_index: Path | None = None
    data_docs_page: Path | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if not c.passed]

    def check(self, name: str) -> CheckOutcome:
        for outcome in self.checks:
            if outcome.name == name:
                return outcome
        raise KeyError(f"no check named {name!r}; have {[c.name for c in self.checks]}")

    def split(self, samples: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``samples`` without the failing rows, and the failing rows with a ``reason`` column."""
        failing = samples.index.isin(list(self.row_failures))
        moved = samples[failing].copy()
        moved["reason"] = ["; ".join(self.row_failures[i]) for i in moved.index]
        return samples[~failing], moved


def validate_samples(
    samples: pd.DataFrame,
    settings: ValidationSettings | None = None,
    data_docs_dir: Path | None = None,
    *,
    quarantine: pd.DataFrame | None = None,
    label: str = "samples",
    suite_path: Path = SUITE_PATH,
) -> ValidationReport:
    """Validate one partition's canonical sample table.

    ``samples`` needs a unique index: failing rows are reported by index label. ``quarantine``
    (the partition's quarantined rows, optional) lets "every item scored" see items that only
    have quarantined rows. ``label`` names the batch in the Data Docs (e.g. ``model=x/suite=y``).
    With ``data_docs_dir``, GX's Data Docs site of this validation replaces that folder (built
    in a hidden sibling first, so a failed build leaves the old site or none, never a partial
    one) and the report gives ``data_docs_index`` and the validation page ``data_docs_page``.
    """
    started = time.perf_counter()
    settings = settings or ValidationSettings()
    if not samples.index.is_unique:
        raise ValueError("samples needs a unique index: failing rows are reported by index label")
    timings: dict[str, float] = {}

    build_dir = None
    if data_docs_dir is not None:
        data_docs_dir, build_dir = _site_dirs(data_docs_dir)
    try:
        t = time.perf_counter()
        with _GX_LOCK:  # Data Docs are rendered in here too, by the Checkpoint's UpdateDataDocsAction
            suite_result, expectations = _run_gx(_gx_frame(samples), settings, build_dir, label, load_suite(suite_path))
        timings["gx_run"] = time.perf_counter() - t

        t = time.perf_counter()
        checks, row_failures = _outcomes(samples, suite_result, expectations)
        checks.append(every_item_scored(samples, row_failures, quarantine))
        timings["outcomes"] = time.perf_counter() - t

        index_page = page = None
        if build_dir is not None:
            t = time.perf_counter()
            index_page, page = _publish_site(build_dir, data_docs_dir)
            timings["data_docs_publish"] = time.perf_counter() - t
    finally:
        if build_dir is not None and build_dir.exists():
            shutil.rmtree(build_dir, ignore_errors=True)
    return ValidationReport(
        checks=checks,
        row_failures=row_failures,
        rows=len(samples),
        data_docs_index=index_page,
        data_docs_page=page,
        seconds=time.perf_counter() - started,
        timings=timings,
    )


def _site_dirs(data_docs_dir: Path) -> tuple[Path, Path]:
    """The site folder (absolute: GX requires it) and a hidden sibling to build it in."""
    data_docs_dir = Path(data_docs_dir).resolve()
    data_docs_dir.parent.mkdir(parents=True, exist_ok=True)
    sweep_orphaned_temporaries(data_docs_dir.parent)  # a killed earlier build
    return data_docs_dir, data_docs_dir.parent / f"{temp_prefix()}{data_docs_dir.name}-{uuid.uuid4().hex[:12]}"


def _publish_site(build_dir: Path, data_docs_dir: Path) -> tuple[Path, Path]:
    """Move the site GX built in ``build_dir`` into place; its index page and validation page."""
    pages = sorted(build_dir.glob("validations/**/*.html"))
    if not (build_dir / "index.html").is_file() or not pages:
        raise RuntimeError(f"GX did not build the Data Docs site in {build_dir}")
    _prune_unused_images(build_dir)
    _replace_dir(build_dir, data_docs_dir)
    return data_docs_dir / "index.html", data_docs_dir / pages[0].relative_to(build_dir)


def _gx_frame(samples: pd.DataFrame) -> pd.DataFrame:
    """``samples`` as handed to GX: an unnamed index, and nullable and Arrow-backed columns as
    pyarrow's default ``to_pandas`` gives them.

    GX 1.24's pandas metrics assume NumPy-backed columns: on ``boolean``/``Float64`` columns
    holding ``pd.NA`` the score/correct comparison raises ("boolean value of NA is ambiguous"),
    and on ``ArrowDtype`` columns it reports every row unequal. Such columns (``Int32``,
    ``boolean``, ``string[pyarrow]``, ``double[pyarrow]``, ...) go through Arrow to the dtypes
    the lake is read with (int with nulls -> float64, bool with nulls -> object, strings ->
    ``str``); other columns, and the index, are left as they are.
    """
    import pyarrow as pa

    converted = {}
    for name in samples.columns:
        dtype = samples[name].dtype
        nullable = (
            isinstance(dtype, pd.ArrowDtype)
            or (pd.api.types.is_extension_array_dtype(dtype) and dtype.kind in "iufb")  # Int32, Float64, boolean
            or (isinstance(dtype, pd.StringDtype) and dtype.na_value is pd.NA)
        )
        if nullable:
            try:
                values = pa.array(samples[name], from_pandas=True).to_pandas()
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                continue  # let the type expectation report it
            values.index = samples.index
            converted[name] = values
    frame = samples.assign(**converted) if converted else samples
    if any(n is not None for n in frame.index.names):
        # with a named index GX reports each unexpected row as a dict of its values and index
        # names; unnamed, it reports the bare index label
        frame = frame.rename_axis(index=[None] * frame.index.nlevels)
    return frame


def _context(build_dir: Path | None):
    """An ephemeral GX context: in-memory stores, no analytics, no progress bars, an optional docs site."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {}
    if build_dir is not None:
        from evalpipeline.validate.docs_views import site_views

        sites["evalpipeline"] = {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(build_dir)},
            **site_views(),  # GX's views, with their templates compiled once a process
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _run_gx(samples: pd.DataFrame, settings: ValidationSettings, build_dir: Path | None, label: str, suite):
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier

    label = re.sub(r"[/\\]+", ",", label.strip()) or "samples"  # GX store keys must not hold path separators
    context = _context(build_dir)
    batch_definition = (
        context.data_sources.add_pandas("evalpipeline")
        .add_dataframe_asset(label)
        .add_batch_definition_whole_dataframe("whole_partition")
    )
    suite = context.suites.add(suite)
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{suite.name}:{label}", data=batch_definition, suite=suite)
    )
    actions = [UpdateDataDocsAction(name="data_docs")] if build_dir is not None else []
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name="validate_samples",
            validation_definitions=[definition],
            actions=actions,
            result_format=_RESULT_FORMAT,
        )
    )
    result = checkpoint.run(
        batch_parameters={"dataframe": samples},
        expectation_parameters=settings.suite_parameters(),
        run_id=RunIdentifier(run_name=label, run_time=dt.datetime.now(dt.timezone.utc)),
    )
    (suite_result,) = result.run_results.values()
    return suite_result, suite.expectations


def _outcomes(samples: pd.DataFrame, suite_result, expectations) -> tuple[list[CheckOutcome], dict]:
    """Check outcomes in suite order, and reasons per failing row of the row-level expectations."""
    by_check = {r.expectation_config.meta["check"]: r for r in suite_result.results}
    checks: list[CheckOutcome] = []
    row_failures: dict[Hashable, list[str]] = {}
    for expectation in expectations:
        name = expectation.meta["check"]
        result = by_check[name]
        config = result.expectation_config  # suite parameters already substituted
        kwargs = config.kwargs
        error = _exception_message(result.exception_info)
        res = result.result or {}
        columns = _columns_of(kwargs)
        signature = _signature(config.type, kwargs)
        description = config.description or _describe(config.type, kwargs)
        examples = pd.DataFrame()
        if error is not None:
            observed: Any = f"error: {error}"
        elif "unexpected_index_list" in res or "unexpected_count" in res:
            index = list(res.get("unexpected_index_list") or [])
            observed = {
                "unexpected_count": int(res.get("unexpected_count") or 0),
                "element_count": int(res.get("element_count") or 0),
                "unexpected_percent": _plain(res.get("unexpected_percent")),
            }
            examples = example_rows(samples, index, columns) if index else pd.DataFrame()
            if expectation.meta.get("row_level"):
                values = list(res.get("unexpected_list") or [])
                sizes = _key_sizes(samples, kwargs) if config.type == "expect_compound_columns_to_be_unique" else None
                for k, row in enumerate(index):
                    value = values[k] if k < len(values) else None
                    times = int(sizes.loc[row]) if sizes is not None else None
                    reason = f"{signature} failed: {_format_value(config.type, kwargs, value, times)}"
                    row_failures.setdefault(row, []).append(reason)
        elif config.type == "expect_table_columns_to_match_set":
            present = set(res.get("observed_value") or [])
            observed = {"missing_columns": [c for c in kwargs["column_set"] if c not in present]}
        else:
            observed = _plain(res.get("observed_value"))
            if not result.success and name == "errored_share_within_bound" and "error" in samples.columns:
                examples = example_rows(samples, samples.index[samples["error"].notna()], ["error"])
        checks.append(
            CheckOutcome(
                name=name,
                passed=bool(result.success),
                description=description,
                observed=observed,
                examples=examples,
                expectation_type=config.type,
            )
        )
    # a row listed twice by one expectation (cannot happen today) must not repeat its reason
    row_failures = {row: list(dict.fromkeys(reasons)) for row, reasons in row_failures.items()}
    ordered = {row: row_failures[row] for row in samples.index if row in row_failures}
    return checks, ordered


def _exception_message(info) -> str | None:
    """The message of an expectation that raised, or None.

    GX puts ``raised_exception`` at the top of ``exception_info`` when the expectation itself
    raised, and one such dict per failed metric when a metric could not be computed (e.g. a
    missing column).
    """
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message"))
    for value in info.values():
        if isinstance(value, dict) and value.get("raised_exception"):
            return str(value.get("exception_message"))
    return None


def _columns_of(kwargs: dict) -> list[str]:
    if "column" in kwargs:
        return [kwargs["column"]]
    if "column_A" in kwargs:
        return [kwargs["column_A"], kwargs["column_B"]]
    return list(kwargs.get("column_list") or [])


def _signature(expectation_type: str, kwargs: dict) -> str:
    """``expect_x(column, args...)``, as a reason names the expectation."""
    args = _columns_of(kwargs)
    if "min_value" in kwargs or "max_value" in kwargs:
        args += [_fmt(kwargs.get("min_value")), _fmt(kwargs.get("max_value"))]
    text = f"{expectation_type}({', '.join(str(a) for a in args)})"
    if kwargs.get("row_condition"):
        text += f" where {_condition_text(kwargs['row_condition'])}"
    return text


def _condition_text(condition) -> str:
    from great_expectations.expectations.row_conditions import deserialize_row_condition

    try:
        return repr(deserialize_row_condition(condition))
    except Exception:  # an unknown form: show it as stored
        return str(condition)


def _describe(expectation_type: str, kwargs: dict) -> str:
    columns = _columns_of(kwargs)
    if expectation_type == "expect_table_row_count_to_be_between":
        return f"the table has at least {kwargs.get('min_value')} row(s)"
    if expectation_type == "expect_table_columns_to_match_set":
        return f"the table has at least the {len(kwargs['column_set'])} canonical columns (more are allowed)"
    if expectation_type == "expect_column_values_to_be_of_type":
        return f"column {columns[0]} has type {kwargs['type_']}"
    if expectation_type == "expect_column_values_to_be_in_type_list":
        return f"column {columns[0]} has one of the types {', '.join(kwargs['type_list'])}"
    if expectation_type == "expect_column_values_to_not_be_null":
        return f"{columns[0]} is never null"
    if expectation_type == "expect_column_values_to_be_between":
        return f"{columns[0]} is within [{_fmt(kwargs.get('min_value'))}, {_fmt(kwargs.get('max_value'))}]"
    if expectation_type == "expect_column_pair_values_to_be_equal":
        return "correct is true iff score == 1, false iff score == 0, null otherwise"
    if expectation_type == "expect_compound_columns_to_be_unique":
        return f"({', '.join(columns)}) is unique within the partition"
    if expectation_type == "expect_column_proportion_of_non_null_values_to_be_between":
        return f"the share of rows with a non-null {columns[0]} is at most {_fmt(kwargs.get('max_value'))}"
    return expectation_type


def _key_sizes(samples: pd.DataFrame, kwargs: dict) -> pd.Series:
    """Per row, how many rows share its value of the compound key (nulls compare equal, as in GX)."""
    key = list(kwargs["column_list"])
    table = samples[key].reset_index(drop=True)  # index levels may share the key's names
    sizes = table.groupby(key, dropna=False, sort=False)[key[0]].transform("size")
    return pd.Series(sizes.to_numpy(), index=samples.index)


def _format_value(expectation_type: str, kwargs: dict, value, times: int | None) -> str:
    if "column_A" in kwargs and isinstance(value, (tuple, list)) and len(value) == 2:
        return f"{kwargs['column_A']}={_fmt(value[0])}, {kwargs['column_B']}={_fmt(value[1])}"
    if isinstance(value, dict):
        text = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
        return f"({text}) occurs {times} times" if times else f"({text}) is duplicated"
    return _fmt(value)


def _isnull(value) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _fmt(value) -> str:
    if _isnull(value):
        return "null"
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _plain(value):
    """numpy scalars to Python ones (JSON-able observed values)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _prune_unused_images(site: Path) -> None:
    """Drop the images GX copies into every site but no page of ours shows (about 3.4 MB of GIFs)."""
    images = site / "static" / "images"
    if not images.is_dir():
        return
    text = "".join(p.read_text(errors="replace") for p in site.rglob("*") if p.suffix in (".html", ".css"))
    for image in images.iterdir():
        if image.is_file() and image.name not in text:
            image.unlink()


def _replace_dir(new: Path, target: Path) -> None:
    """Move the finished folder ``new`` to ``target``, replacing what is there.

    Two renames on one file system: ``target`` holds the old complete site, then the new
    complete one; the old one is removed last.
    """
    old = None
    if target.exists():
        old = target.parent / f"{temp_prefix()}old-{target.name}-{uuid.uuid4().hex[:12]}"
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
