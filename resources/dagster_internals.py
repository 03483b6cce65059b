"""The one module that uses what Dagster does not export. Everything else imports Dagster's public API,
and this module, so that a Dagster release that moves an internal name breaks here, in one place
(tests/test_dagster_api.py checks that no other module imports one and that the code location loads).

Each private import has a line saying why no public API serves.
"""

from __future__ import annotations

# No public pointer to a job of the code location's Definitions: `reconstructable` wraps a job in a repository of its own.
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository

#: The tags of a run over a range of partitions: Dagster's documented system tags, for which it exports
#: no constant, so written out here (tests/test_dagster_api.py checks that they are still Dagster's).
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "ReconstructableJob",
    "ReconstructableRepository",
]
