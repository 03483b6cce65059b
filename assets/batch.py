"""One step, many partitions: what an asset yields when its run covers a range of partitions.

`evalpipeline run` materialises many model x suite (and suite, and model)
partitions per Dagster run -- a run per partition costs seconds of
orchestration alone, more than most partitions' work -- by giving each run a
partition range (the ``dagster/asset_partition_range_*`` tags); the daemon's
backfills do the same for the assets with a backfill policy (assets.partitions). An asset then
computes every partition of ``context.partition_keys`` and hands its
per-partition results to :func:`emit`:

* one partition: its ``MaterializeResult`` and check results, unchanged;
* several: each partition's metadata is attached to that partition's
  materialisation (as ``context.add_asset_metadata(..., partition_key=...)``
  does: :func:`attach_partition_metadata`); the data version is one hash over
  the partitions' own versions (Dagster gives a range run one data version for
  all its partitions); each check is reported
  once for the run, failing if it failed for any partition, with the failing
  partitions and their details in its metadata (their keys, all of them, as a
  JSON list under ``failed_partitions``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    DagsterInvariantViolationError,
    DataVersion,
    MaterializeResult,
    MetadataValue,
)

from assets.metadata import markdown_text


#: Metadata key of a combined check: the keys of the partitions it failed for (a JSON list).
FAILED_PARTITIONS = "failed_partitions"

#: How a step's progress message starts (:func:`partitions_in_turn`); ``evalpipeline run`` reads them.
PROGRESS_MARK = "partitions done:"


def partitions_in_turn(context: AssetExecutionContext) -> Iterator[str]:
    """``context.partition_keys`` one at a time, logging after each how many of the run's are done
    (``partitions done: 3/60``): what ``evalpipeline run`` reports while a range run is under way."""
    keys = list(context.partition_keys)
    for done, key in enumerate(keys, 1):
        yield key
        if len(keys) > 1:
            context.log.info(f"{PROGRESS_MARK} {done}/{len(keys)}")


@dataclass
class PartitionResult:
    """What an asset computed for one partition of its run."""

    key: str
    result: MaterializeResult
    checks: list[AssetCheckResult] = field(default_factory=list)


def emit(context: AssetExecutionContext, results: list[PartitionResult]) -> Iterator:
    """Yield the events of a step that computed ``results`` (one per partition of its run)."""
    if len(results) == 1:
        yield results[0].result
        yield from results[0].checks
        return
    attach_partition_metadata(context, [(item.key, dict(item.result.metadata or {})) for item in results])
    versions = []
    for item in results:
        version = item.result.data_version.value if item.result.data_version else ""
        versions.append(f"{item.key}={version}")
    digest = hashlib.sha256("\n".join(sorted(versions)).encode()).hexdigest()[:16]
    yield MaterializeResult(data_version=DataVersion(digest), metadata={"partitions_in_run": len(results)})
    yield from _combined_checks(results)


def attach_partition_metadata(context: AssetExecutionContext, metadata: list[tuple[str, dict]]) -> None:
    """Attach each ``(partition key, metadata)`` to that partition's materialisation, as
    ``context.add_asset_metadata(metadata, partition_key=key)`` does, but checking the keys once.

    ``add_asset_metadata`` checks a key against every key of the run's range, which it lists afresh from
    the instance's dynamic partitions at each call: ~15 ms at 100 models x 6 suites, a second of a
    60-partition step, seven such steps in a partition run. Here the keys are checked against
    ``context.partition_keys`` once, then added to the step's metadata accumulator as
    ``add_asset_metadata`` adds them (Dagster 1.13). Where a release no longer has that accumulator,
    the public call is used."""
    step = getattr(context.op_execution_context, "_step_execution_context", None)
    accumulator = getattr(step, "_metadata_accumulator", None)
    if not hasattr(accumulator, "with_additional_asset_metadata"):
        for key, values in metadata:
            context.add_asset_metadata(values, partition_key=key)
        return
    targeted = set(context.partition_keys)
    strays = [key for key, _values in metadata if key not in targeted]
    if strays:
        raise DagsterInvariantViolationError(
            f"Attempted to add metadata for partition keys {strays[:5]} that are not being targeted."
        )
    asset_key = context.assets_def.key
    for key, values in metadata:
        accumulator = accumulator.with_additional_asset_metadata(
            asset_key=asset_key, metadata=values, partition_key=key
        )
    step._metadata_accumulator = accumulator


def _combined_checks(results: Iterable[PartitionResult]) -> Iterator[AssetCheckResult]:
    by_name: dict[str, list[tuple[str, AssetCheckResult]]] = {}
    for item in results:
        for check in item.checks:
            by_name.setdefault(check.check_name, []).append((item.key, check))
    for name, outcomes in by_name.items():
        failed = [(key, check) for key, check in outcomes if not check.passed]
        severity = (
            AssetCheckSeverity.ERROR
            if any(c.severity == AssetCheckSeverity.ERROR for _k, c in failed or outcomes)
            else AssetCheckSeverity.WARN
        )
        metadata = {"partitions": len(outcomes), "partitions_failed": len(failed)}
        if failed:
            # every failing key, for evalpipeline run to rerun those alone and the rest in ranges again
            metadata[FAILED_PARTITIONS] = MetadataValue.json([key for key, _check in failed])
            lines = []
            for key, check in failed[:50]:
                details = ", ".join(f"{k}: {_plain(v)}" for k, v in (check.metadata or {}).items() if k != "examples")
                lines.append(f"- {markdown_text(key)}: {markdown_text(details)}")
            if len(failed) > 50:
                lines.append(f"- ... and {len(failed) - 50} more")
            metadata["failed"] = MetadataValue.md("\n".join(lines))
        yield AssetCheckResult(check_name=name, passed=not failed, severity=severity, metadata=metadata)


def _plain(value) -> str:
    return str(getattr(value, "value", value))[:200]
