"""The Great Expectations suite of the canonical sample table, built in code and versioned as JSON.

``canonical_suite.json`` beside this file is the suite that
:func:`evalpipeline.validate.validate_samples` runs, loaded with GX's own
schema (as GX's file-backed expectations store does). It is *written* by
this module from :class:`ValidationSettings`, so that the JSON is reviewed
in diffs and a test can check that it equals what the code builds::

    python -m evalpipeline.validate          # rewrite the JSON
    python -m evalpipeline.validate --check  # exit 1 when stale

The configurable bounds (epoch range, errored share) are GX *suite
parameters* (``{"$PARAMETER": name}`` in an expectation's kwargs): the JSON
holds their defaults in ``suite_parameters`` and ``validate_samples`` passes
the run's settings as ``expectation_parameters``, so one committed suite
serves any settings and the Data Docs show the values actually used.

Every expectation carries ``meta.check``, the stable name of the check
(a valid Dagster asset-check name), and ``meta.row_level``: whether its
failing rows are reported per row (to be moved to quarantine) or only as a
table-level outcome.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipeline.schema import PARTITION_COLUMNS, SAMPLE_COLUMNS

if TYPE_CHECKING:  # GX takes seconds to import: only the functions that need it import it
    from great_expectations.core.expectation_suite import ExpectationSuite

SUITE_NAME = "canonical_samples"
SUITE_PATH = Path(__file__).with_name("canonical_suite.json")

#: Columns that must be non-null in every sample row (row-level: failing rows go to quarantine).
REQUIRED_COLUMNS = ("item_id", "epoch", "log_path", "log_sha256", "log_format", "sample_index")

#: Columns checked by the suite: the canonical ones less ``model`` and ``suite``, which are constant
#: in a partition and live in the lake path (a frame that has them passes too: extra columns,
#: ``cov_<name>`` covariates included, are allowed).
SUITE_COLUMNS = tuple(c.name for c in SAMPLE_COLUMNS if c.name not in PARTITION_COLUMNS)

#: Uniqueness key within a partition (model and suite are constant there).
UNIQUE_KEY = ("item_id", "epoch", "scorer")


@dataclass(frozen=True)
class ValidationSettings:
    """Tunable bounds of the validation (defaults are the ones in ``canonical_suite.json``)."""

    epoch_min: int = 1
    epoch_max: int = 1000
    max_error_share: float = 0.2

    def __post_init__(self):
        if not 1 <= self.epoch_min <= self.epoch_max:
            raise ValueError(f"need 1 <= epoch_min <= epoch_max, got {self.epoch_min}..{self.epoch_max}")
        if not 0.0 <= self.max_error_share <= 1.0:
            raise ValueError(f"max_error_share must be in [0, 1], got {self.max_error_share}")

    def suite_parameters(self) -> dict[str, Any]:
        """The GX suite parameters these settings give (names as used by ``$PARAMETER``)."""
        return asdict(self)


def _dtype_expectation(column: str):
    """The GX type expectation of one canonical column, as pandas reads it from the lake.

    ``ExpectColumnValuesToBeOfType`` compares the dtype's scalar type, so ``"str"`` matches
    pandas 3's ``str`` dtype (and ``string``), ``"int32"`` matches ``int32`` and ``Int32``,
    ``"bool"`` matches ``bool`` and ``boolean``; an ``object`` column (e.g. ``correct``
    with nulls) is checked value by value, nulls skipped. ``ExpectColumnValuesToBeInTypeList``
    compares whole dtypes and cannot match pandas 3's ``str`` dtype or a tz-aware timestamp
    under any type name in GX 1.24, so it is used only for ``source_line``: an int32 column
    with nulls comes out of Arrow as ``float64``.
    """
    import great_expectations.expectations as gxe

    arrow_type = {c.name: c.type for c in SAMPLE_COLUMNS}[column]
    meta = {"check": f"type_{column}", "row_level": False}
    if column == "source_line":
        return gxe.ExpectColumnValuesToBeInTypeList(
            column=column, type_list=["int32", "Int32Dtype", "float64"], meta=meta
        )
    type_name = {
        "string": "str",
        "int32": "int32",
        "double": "float64",
        "bool": "bool",
        "timestamp[us, tz=UTC]": "Timestamp",
    }[str(arrow_type)]
    return gxe.ExpectColumnValuesToBeOfType(column=column, type_=type_name, meta=meta)


def build_suite(settings: ValidationSettings | None = None) -> ExpectationSuite:
    """The expectation suite of the canonical sample table, with ``settings`` as parameter defaults."""
    import great_expectations.expectations as gxe
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.row_conditions import Column, OrCondition

    settings = settings or ValidationSettings()

    def meta(check: str, row_level: bool) -> dict:
        return {"check": check, "row_level": row_level}

    expectations = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1, meta=meta("row_count_positive", False)),
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(SUITE_COLUMNS), exact_match=False, meta=meta("columns_present", False)
        ),
        *(_dtype_expectation(c) for c in SUITE_COLUMNS),
        *(gxe.ExpectColumnValuesToNotBeNull(column=c, meta=meta(f"not_null_{c}", True)) for c in REQUIRED_COLUMNS),
        gxe.ExpectColumnValuesToBeBetween(
            column="score", min_value=0, max_value=1, meta=meta("score_in_unit_interval", True)
        ),
        # correct is true iff score == 1, false iff score == 0, null otherwise. On the rows where
        # correct is set or score is 0 or 1, correct must equal score (pandas compares True == 1.0
        # and False == 0.0 as equal; a null on either side is unequal, and ignore_row_if="neither"
        # keeps such rows, so (1.0, null) and (null, true) fail). Every other row has correct null
        # and score outside {0, 1} or null, which is consistent by definition.
        # (ExpectColumnPairValuesToBeInSet with value_pairs_set {(0, false), (1, true)} would read
        # better, but in GX 1.24 its metric ignores row_condition -- column_pair_values.in_set
        # lacks row_condition in its condition_domain_keys -- and it loops with iterrows.)
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="score",
            column_B="correct",
            ignore_row_if="neither",
            row_condition=OrCondition(
                conditions=[Column("correct").is_not_null(), Column("score") == 0, Column("score") == 1]
            ),
            meta=meta("correct_matches_score", True),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="epoch",
            min_value={"$PARAMETER": "epoch_min"},
            max_value={"$PARAMETER": "epoch_max"},
            meta=meta("epoch_in_range", True),
        ),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=list(UNIQUE_KEY), meta=meta("unique_item_epoch_scorer", True)),
        # The share of errored samples (error not null) is the proportion of non-null values
        # of the error column: a table-level bound, so it is a GX expectation too.
        gxe.ExpectColumnProportionOfNonNullValuesToBeBetween(
            column="error",
            min_value=0,
            max_value={"$PARAMETER": "max_error_share"},
            meta=meta("errored_share_within_bound", False),
        ),
    ]
    return ExpectationSuite(
        name=SUITE_NAME,
        expectations=expectations,
        suite_parameters=settings.suite_parameters(),
        meta={
            "description": (
                "The canonical sample table of one model x suite partition "
                "(evalpipeline.schema); written by evalpipeline.validate.suite"
            ),
        },
    )


def suite_to_json(suite: ExpectationSuite) -> str:
    """The suite as the JSON text kept in the repository (sorted keys, two-space indent)."""
    return json.dumps(suite.to_json_dict(), indent=2, sort_keys=True) + "\n"


def comparable(suite_json: dict) -> dict:
    """A suite's JSON dict without the GX version that wrote it (for comparing suites across GX releases)."""
    data = copy.deepcopy(suite_json)
    data.get("meta", {}).pop("great_expectations_version", None)
    return data


def write_suite(path: Path = SUITE_PATH, settings: ValidationSettings | None = None) -> Path:
    """(Re)write the suite JSON built from ``settings``."""
    from evalpipeline.lake import write_bytes_atomic

    write_bytes_atomic(suite_to_json(build_suite(settings)).encode(), Path(path))
    return Path(path)


@lru_cache(maxsize=8)
def _suite_text(path: str, mtime_ns: int) -> str:
    return Path(path).read_text()


def load_suite(path: Path = SUITE_PATH) -> ExpectationSuite:
    """A fresh ExpectationSuite from the JSON at ``path``, read with GX's own suite schema.

    Fresh on every call: a suite added to a data context is bound to it (GX assigns ids), so
    each validation gets its own copy.
    """
    from great_expectations.core.expectation_suite import ExpectationSuite, expectationSuiteSchema

    path = Path(path)
    return ExpectationSuite(**expectationSuiteSchema.loads(_suite_text(str(path), path.stat().st_mtime_ns)))


def check_names(path: Path = SUITE_PATH) -> list[str]:
    """The names of every check :func:`validate_samples` reports, in report order (for Dagster check specs).

    Read from the suite JSON without importing GX.
    """
    from evalpipeline.validate.checks import SUITE_LEVEL_CHECKS

    data = json.loads(Path(path).read_text())
    return [e["meta"]["check"] for e in data["expectations"]] + [c for c, _ in SUITE_LEVEL_CHECKS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or check) the canonical sample table's GX suite JSON.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON differs from the builder's")
    parser.add_argument("--path", type=Path, default=SUITE_PATH)
    args = parser.parse_args(argv)
    if args.check:
        built = comparable(json.loads(suite_to_json(build_suite())))
        on_disk = comparable(json.loads(args.path.read_text()))
        if built != on_disk:
            print(f"{args.path} is stale: run python -m evalpipeline.validate", file=sys.stderr)
            return 1
        print(f"{args.path} matches the builder")
        return 0
    print(f"wrote {write_suite(args.path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
