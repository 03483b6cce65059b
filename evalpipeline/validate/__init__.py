"""Data validation of the canonical sample table with Great Expectations 1.x.

- :mod:`evalpipeline.validate.suite`: the expectation suite, built from
  :class:`ValidationSettings` and versioned as ``canonical_suite.json``;
- :mod:`evalpipeline.validate.run`: :func:`validate_samples`, which runs it on
  one partition and returns per-row failures (for quarantine), one
  :class:`CheckOutcome` per check (for Dagster asset checks) and GX's Data Docs;
- :mod:`evalpipeline.validate.batch`: :func:`validate_batch`, one GX run over many partitions
  that gives each partition passing every check the report it would get alone (the others are
  left to :func:`validate_samples`);
- :mod:`evalpipeline.validate.checks`: the suite-level checks in plain pandas.

Importing this package does not import GX (it takes seconds); running a
validation or building the suite does. Nothing here imports dagster.
"""

from evalpipeline.validate.checks import SUITE_LEVEL_CHECKS, CheckOutcome
from evalpipeline.validate.run import ValidationReport, validate_samples
from evalpipeline.validate.suite import (
    SUITE_NAME,
    SUITE_PATH,
    ValidationSettings,
    build_suite,
    check_names,
    load_suite,
    write_suite,
)

__all__ = [
    "SUITE_LEVEL_CHECKS",
    "SUITE_NAME",
    "SUITE_PATH",
    "CheckOutcome",
    "ValidationReport",
    "ValidationSettings",
    "build_suite",
    "check_names",
    "load_suite",
    "validate_samples",
    "write_suite",
]
