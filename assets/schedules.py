"""Schedule ``nightly_refresh``: new or changed logs, and fits whose code changed, every night.

At each tick it scans the landing folder (headers only), registers new
models and suites, and requests one run of the per-partition job for every
model x suite partition that

- has a source whose exact bytes the lake does not hold yet, or
- misses a materialisation of one of the job's assets, or
- was last materialised by different code or settings (its code version
  changed, e.g. a model's priors were edited).

Unchanged partitions get no run, so a night without new logs launches no
fits. The per-suite, per-model and lake-wide assets downstream refresh by
their automation conditions once these runs update their inputs.

Cron and timezone come from ``EVALPIPELINE_NIGHTLY_CRON`` (default
``0 2 * * *``) and ``EVALPIPELINE_TIMEZONE`` (default ``UTC``).
"""


import hashlib
import os

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DefaultScheduleStatus,
    DagsterInstance,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from assets.partitions import model_suite_key
from evalpipeline.keys import to_partition_key
from evalpipeline.refresh import discover
from resources import IngestSettings, LakeResource

DEFAULT_CRON = "0 2 * * *"
DEFAULT_TIMEZONE = "UTC"


def latest_code_versions(instance: DagsterInstance, key: AssetKey, chunk: int = 500) -> dict[str, str | None]:
    """partition key -> code version of its latest materialisation.

    Reads the latest materialisation of each partition (one indexed query for their ids, then the
    records by id), so a tick costs one lookup per partition, not a pass over the asset's history.
    """
    from dagster import DagsterEventType

    latest_ids = instance.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION)
    partition_of = {storage_id: partition for partition, storage_id in latest_ids.items()}
    ids = sorted(partition_of)
    versions: dict[str, str | None] = {}
    for start in range(0, len(ids), chunk):
        batch = ids[start:start + chunk]
        records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, storage_ids=batch), limit=len(batch)).records
        for record in records:
            versions[partition_of[record.storage_id]] = record.asset_materialization.tags.get("dagster/code_version")
    return versions


def stale_partitions(
    instance: DagsterInstance, code_versions: dict[AssetKey, str | None], partitions: list[str]
) -> dict[str, dict[AssetKey, str]]:
    """partition -> {asset: why it must run}: a missing materialisation or a changed code version."""
    reasons: dict[str, dict[AssetKey, str]] = {}
    for key, current in code_versions.items():
        latest = latest_code_versions(instance, key)
        for partition in partitions:
            if partition not in latest:
                reasons.setdefault(partition, {})[key] = f"{key.to_user_string()} missing"
            elif current is not None and latest[partition] != current:
                reasons.setdefault(partition, {})[key] = f"{key.to_user_string()} code changed"
    return reasons


def build_nightly_schedule(job, partition_assets):
    """The nightly schedule for ``job`` (the per-partition job) whose assets are ``partition_assets``."""
    code_versions: dict[AssetKey, str | None] = {}
    for assets_def in partition_assets:
        code_versions.update(assets_def.code_versions_by_key)

    @schedule(
        name="nightly_refresh",
        job=job,
        cron_schedule=os.environ.get("EVALPIPELINE_NIGHTLY_CRON", DEFAULT_CRON),
        execution_timezone=os.environ.get("EVALPIPELINE_TIMEZONE", DEFAULT_TIMEZONE),
        default_status=DefaultScheduleStatus.RUNNING,
        description=(
            "Every night: discover new and changed logs, and materialise the model x suite partitions "
            "whose sources changed, that miss an asset, or whose code or priors changed. Unchanged "
            "partitions launch nothing; downstream assets refresh by their automation conditions."
        ),
    )
    def nightly_refresh(context: ScheduleEvaluationContext, lake: LakeResource, ingest_settings: IngestSettings):
        store = lake.lake()
        discovery = discover(store, lake.landing_dir(), ingest_settings.options())
        for error in discovery.unreadable:
            context.log.warning(f"not ingested: {error.error}")
        instance = context.instance
        for dimension, names in (("model", discovery.models), ("suite", discovery.suites)):
            missing = sorted({to_partition_key(n) for n in names} - set(instance.get_dynamic_partitions(dimension)))
            if missing:
                instance.add_dynamic_partitions(dimension, missing)
        keys = {pair: model_suite_key(*pair) for pair in discovery.partitions}
        stale = stale_partitions(instance, code_versions, [str(k) for k in keys.values()])
        requests = []
        for pair in sorted(discovery.partitions):
            key = keys[pair]
            stale_assets = stale.get(str(key), {})
            why = ([f"{len(discovery.changed_sources[pair])} new or changed source(s)"] if pair in discovery.changed else [])
            why += list(stale_assets.values())
            if not why:
                continue
            identity = "|".join([str(key), *discovery.changed_sources.get(pair, []), *sorted(map(str, code_versions.values()))])
            requests.append(
                RunRequest(
                    run_key=hashlib.sha256(identity.encode()).hexdigest()[:32],
                    partition_key=key,
                    # new data reruns the whole partition; edited code or priors only what they made
                    # (the other fits would only be found unchanged and reused)
                    asset_selection=None if pair in discovery.changed else sorted(stale_assets, key=str),
                    tags={"evalpipeline/reason": "; ".join(why)[:200]},
                )
            )
        if not requests:
            return SkipReason(f"{discovery.files} source(s), {len(discovery.partitions)} partition(s): nothing new or stale")
        return requests

    return nightly_refresh
