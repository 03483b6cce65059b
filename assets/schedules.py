"""Schedule ``nightly_refresh``: new or changed logs, and fits whose code changed, every night.

At each tick it scans the landing folder (headers only), registers new
models and suites (and unregisters those neither a log nor the lake holds any
more: see :func:`sync_dynamic_partitions`), and requests runs of the per-partition job for the
model x suite partitions that

- has a source whose exact bytes the lake does not hold yet, or
- misses a materialisation of one of the job's assets, or
- was last materialised by different code or settings (its code version
  changed, e.g. a model's priors were edited), or
- was left behind by an interrupted run: an asset older than the latest
  ``eval_samples`` of its partition, or an ``eval_samples`` whose files
  (staged records, tables) changed after it was recorded.

The partitions are requested in ranges, as the landing sensor requests them: one group of ranges
per asset selection (a partition whose logs are unchanged reruns only its stale assets), as many
ranges as the run queue starts at once, of up to ``PARTITIONS_PER_RUN`` partitions each. A run costs
seconds of start-up whatever it holds: a prior edit on a 101-model lake was 606 runs of one partition
each, now 11. A range run's key is a digest of its partitions' inputs (changed sources, code
versions) and its ends: for a schedule Dagster launches a run key once per tick, also when the
daemon evaluates the tick again after a crash. Across nights it is the staleness above that keeps an
unchanged partition quiet, so what a failed run left undone is requested again at the next tick.

Unchanged partitions get no run, so a night without new logs launches no
fits; nor does a partition whose sample table failed a blocking check while
its logs and the table's code are unchanged (:func:`rejected_and_unchanged`). The per-suite, per-model and lake-wide assets downstream refresh by
their automation conditions once these runs update their inputs.

Cron and timezone come from ``EVALPIPELINE_NIGHTLY_CRON`` (default
``0 2 * * *``) and ``EVALPIPELINE_TIMEZONE`` (default ``UTC``).
"""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DefaultScheduleStatus,
    DagsterInstance,
    DagsterRunStatus,
    RunsFilter,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from assets.automation import nightly_cron
from assets.partitions import (
    model_suite_key,
    model_suite_partitions,
    range_blocks,
    range_run_request,
    requested_range_size,
)
from assets.samples import FILES_STATE
from assets.status import range_partition_keys
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import Lake
from evalpipeline.steps.discovery import Discovery, discover, ingested_partitions
from evalpipeline.steps.run_status import resolve_retired
from resources import IngestSettings, LakeResource
from resources.dagster_internals import ASSET_PARTITION_RANGE_START_TAG

SAMPLES = AssetKey("eval_samples")


def partition_run_selection(changed: bool, stale_assets, failed_validation: list[str]) -> list[AssetKey] | None:
    """The assets a model x suite run materialises: only the stale ones when the partition's logs
    are unchanged and its sample table is current and passed validation, so that edited code or
    priors redo what they made without reading and validating the logs again. Otherwise all of
    them (None): every other partition asset reads the sample table, and a table that failed a
    blocking check (``failed_validation``: the checks, see ``Lake.failed_validation``) must meet
    the checks again; its downstream assets, skipped by the check, would otherwise run on the
    rejected rows and report the failure resolved."""
    if changed or failed_validation or not stale_assets or SAMPLES in stale_assets:
        return None
    return sorted(stale_assets, key=str)


def rejected_and_unchanged(changed: bool, stale_assets, failed_validation: list[str]) -> bool:
    """Whether the nightly leaves a partition alone: its sample table failed blocking checks
    (``failed_validation``) and neither its logs (``changed``) nor the table's code and settings
    (``eval_samples`` among ``stale_assets``) changed since. Its other assets are missing, but a run
    would only meet the same checks again, add a failure row a night and refresh its suite and that
    suite's models for nothing. The failure row of the run that rejected it stays unresolved until a
    fixed or replaced log passes."""
    return bool(failed_validation) and not changed and SAMPLES not in stale_assets


def sync_dynamic_partitions(instance: DagsterInstance, store: Lake, discovery: Discovery) -> dict[str, list[str]]:
    """Make the instance's ``model`` and ``suite`` partitions those of the landing folder and the lake.

    Registers the keys ``discovery`` found that the instance lacks, and deletes the keys that
    neither a log in the landing folder nor an ingest record in the lake holds any more: a
    model or suite retired when its logs were rewritten under another name
    (``evalpipeline.ingest.retire_partition``). Otherwise the UI keeps showing it as a
    partition to materialise, and a run launched for it fails for want of data. A name
    whose log is unreadable tonight keeps its partition while the lake holds its records.
    Its past materialisations stay in the event log. Returns the deleted keys per dimension.
    """
    ingested = ingested_partitions(store)  # an "(unknown)" pseudo-partition registered earlier is deleted
    deleted = {}
    for index, (dimension, names) in enumerate((("model", discovery.models), ("suite", discovery.suites))):
        current = {to_partition_key(n) for n in names}
        held = current | {to_partition_key(pair[index]) for pair in ingested}
        registered = instance.get_dynamic_partitions(dimension)
        missing = sorted(current - set(registered))
        if missing:
            instance.add_dynamic_partitions(dimension, missing)
        deleted[dimension] = [key for key in registered if key not in held]
        for key in deleted[dimension]:
            instance.delete_dynamic_partition(dimension, key)
    # the failures of what no longer exists cannot be rerun: mark them resolved by the retirement
    pairs = {(to_partition_key(m), to_partition_key(s)) for m, s in discovery.partitions | set(ingested)}
    keys = {to_partition_key(n) for n in discovery.models | discovery.suites} | {k for pair in pairs for k in pair}
    resolve_retired(
        store, held_pairs=pairs, held_keys=keys, resolved_at=datetime.now(timezone.utc).isoformat(timespec="seconds")
    )
    return deleted


#: Runs that have not finished yet.
IN_FLIGHT = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def partitions_in_flight(instance: DagsterInstance) -> set[str]:
    """Partition keys a run of any job (the landing sensor's, automation's, a backfill's) is queued
    for or running, each key of a range run's range included: the nightly does not request them
    again. Two runs fitting one partition at once would each fit it (a stored fit is reused only
    once it is written)."""
    keys: set[str] = set()
    for run in instance.get_runs(RunsFilter(statuses=IN_FLIGHT)):
        if "dagster/partition" in run.tags:
            keys.add(run.tags["dagster/partition"])
        elif "|" in run.tags.get(ASSET_PARTITION_RANGE_START_TAG, ""):  # a model x suite range (a backfill's)
            keys.update(range_partition_keys(run.tags, model_suite_partitions, instance) or [])
    return keys


@dataclass(frozen=True)
class Latest:
    """The latest materialisation of one partition of an asset: its position in the event log, the
    code version it was made under and what it recorded of the partition's files (eval_samples)."""

    storage_id: int
    code_version: str | None
    files_state: str | None


def latest_materialisations(instance: DagsterInstance, key: AssetKey, chunk: int = 500) -> dict[str, Latest]:
    """partition key -> its latest materialisation.

    Reads the latest materialisation of each partition (one indexed query for their ids, then the
    records by id), so a tick costs one lookup per partition, not a pass over the asset's history.
    """
    from dagster import DagsterEventType

    latest_ids = instance.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION)
    partition_of = {storage_id: partition for partition, storage_id in latest_ids.items()}
    ids = sorted(partition_of)
    latest: dict[str, Latest] = {}
    for start in range(0, len(ids), chunk):
        batch = ids[start : start + chunk]
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, storage_ids=batch), limit=len(batch)
        ).records
        for record in records:
            materialisation = record.asset_materialization
            state = materialisation.metadata.get(FILES_STATE)
            latest[partition_of[record.storage_id]] = Latest(
                record.storage_id, materialisation.tags.get("dagster/code_version"), state.value if state else None
            )
    return latest


def stale_partitions(
    instance: DagsterInstance,
    code_versions: dict[AssetKey, str | None],
    partitions: list[str],
    *,
    inputs: Callable[[AssetKey, str], list[tuple[AssetKey, str]]] | None = None,
    files_states: Mapping[str, str] | None = None,
) -> dict[str, dict[AssetKey, str]]:
    """partition -> {asset: why it must run}:

    - a missing materialisation, or one under another code version;
    - with ``inputs`` (asset, partition -> the upstream (asset, partition)s it reads): a
      materialisation older than the latest of one of its inputs. A run killed after its inputs were
      written leaves it so; Dagster's own input data versions cannot tell, as a range run records
      one for the whole range;
    - with ``files_states`` (partition -> :func:`evalpipeline.ingest.partition_files_state` now):
      an ``eval_samples`` materialisation that recorded other files (a run killed between staging a
      changed log and recording the table, or an ingest outside Dagster).
    """
    reasons: dict[str, dict[AssetKey, str]] = {}
    cache: dict[AssetKey, dict[str, Latest]] = {}

    def latest(key: AssetKey) -> dict[str, Latest]:
        if key not in cache:
            cache[key] = latest_materialisations(instance, key)
        return cache[key]

    for key, current in code_versions.items():
        for partition in partitions:
            own = latest(key).get(partition)
            why = None
            if own is None:
                why = "missing"
            elif current is not None and own.code_version != current:
                why = "code changed"
            elif files_states is not None and key == SAMPLES and own.files_state != files_states.get(partition):
                why = "its files changed since (an interrupted run, or an ingest outside Dagster)"
            elif inputs is not None:
                newer = sorted(
                    {
                        upstream.to_user_string()
                        for upstream, upstream_partition in inputs(key, partition)
                        if latest(upstream).get(upstream_partition, own).storage_id > own.storage_id
                    }
                )
                if newer:
                    why = f"older than its input {', '.join(newer)}"
            if why:
                reasons.setdefault(partition, {})[key] = f"{key.to_user_string()} {why}"
    return reasons


def current_files_states(store, pairs) -> dict[str, str]:
    """partition key -> :func:`evalpipeline.ingest.partition_files_state` of each (model, suite) pair."""
    from evalpipeline.ingest import partition_files_state

    return {str(model_suite_key(m, s)): partition_files_state(store, m, s) for m, s in pairs}


def input_partitions(
    assets_defs: list, pairs: set[tuple[str, str]]
) -> Callable[[AssetKey, str], list[tuple[AssetKey, str]]]:
    """For :func:`stale_partitions`: the upstream (asset, partition)s that the partition of an asset
    reads, among ``assets_defs`` and the model x suite ``pairs`` (display names) the landing holds: a
    model x suite asset reads the same partition, a suite asset every model's on that suite (or the
    same suite upstream), a model asset every suite's of that model (or those suites upstream)."""
    from assets.partitions import model_suite_partitions

    by_key = {key: assets_def for assets_def in assets_defs for key in assets_def.keys}
    keys = [(to_partition_key(m), to_partition_key(s)) for m, s in pairs]

    def dimension(key: AssetKey) -> str | None:
        partitions_def = by_key[key].partitions_def
        if partitions_def is model_suite_partitions:
            return "pair"
        return getattr(partitions_def, "name", None)  # "model" or "suite"

    def upstream_of(key: AssetKey, partition: str) -> list[tuple[AssetKey, str]]:
        own = dimension(key)
        found = []
        for parent in by_key[key].asset_deps.get(key, set()):
            if parent not in by_key:
                continue
            theirs = dimension(parent)
            if own == theirs:
                found.append((parent, partition))
            elif own == "pair":
                continue  # a pair asset reads only pairs
            elif theirs == "pair":
                index = 0 if own == "model" else 1
                found += [(parent, f"{m}|{s}") for m, s in keys if (m, s)[index] == partition]
            elif own == "model" and theirs == "suite":
                found += [(parent, s) for m, s in keys if m == partition]
        return found

    return upstream_of


def build_nightly_schedule(job, partition_assets):
    """The nightly schedule for ``job`` (the per-partition job) whose assets are ``partition_assets``."""
    code_versions: dict[AssetKey, str | None] = {}
    for assets_def in partition_assets:
        code_versions.update(assets_def.code_versions_by_key)

    @schedule(
        name="nightly_refresh",
        job=job,
        cron_schedule=nightly_cron()[0],
        execution_timezone=nightly_cron()[1],
        default_status=DefaultScheduleStatus.RUNNING,
        description=(
            "Every night: discover new and changed logs, and materialise the model x suite partitions "
            "whose sources changed, that miss an asset, or whose code or priors changed, in ranges of up to "
            "60 partitions (as many runs as the run queue starts at once). Unchanged partitions launch "
            "nothing; downstream assets refresh by their automation conditions."
        ),
    )
    def nightly_refresh(context: ScheduleEvaluationContext, lake: LakeResource, ingest_settings: IngestSettings):
        store = lake.lake()
        discovery = discover(store, lake.landing_dir(), ingest_settings.options())
        for error in discovery.unreadable:
            context.log.warning(f"not ingested: {error.error}")
        instance = context.instance
        for dimension, keys in sync_dynamic_partitions(instance, store, discovery).items():
            if keys:
                context.log.info(
                    f"{dimension} partition(s) no log or lake table holds any more, unregistered: {', '.join(keys)}"
                )
        keys = {pair: model_suite_key(*pair) for pair in discovery.partitions}
        stale = stale_partitions(
            instance,
            code_versions,
            [str(k) for k in keys.values()],
            inputs=input_partitions(partition_assets, discovery.partitions),
            files_states=current_files_states(store, discovery.partitions),
        )
        # each partition's assets to run, why, and what makes its request new; one group per selection
        groups: dict[tuple[str, ...] | None, dict[tuple[str, str], tuple[str, str]]] = {}
        busy = partitions_in_flight(instance)
        for pair in sorted(discovery.partitions):
            key = keys[pair]
            if str(key) in busy:
                context.log.info(f"{key}: a run for it is queued or running; not requested again")
                continue
            stale_assets = stale.get(str(key), {})
            failed_validation = store.failed_validation(*pair)
            if rejected_and_unchanged(pair in discovery.changed, stale_assets, failed_validation):
                context.log.info(
                    f"{key}: its sample table failed {', '.join(failed_validation)} and its logs are "
                    "unchanged since; not requested (fix or replace the log)"
                )
                continue
            why = (
                [f"{len(discovery.changed_sources[pair])} new or changed source(s)"]
                if pair in discovery.changed
                else []
            )
            why += list(stale_assets.values())
            if not why:
                continue
            selection = partition_run_selection(pair in discovery.changed, stale_assets, failed_validation)
            group = None if selection is None else tuple(sorted(k.to_user_string() for k in selection))
            identity = "|".join(
                [str(key), *discovery.changed_sources.get(pair, []), *sorted(map(str, code_versions.values()))]
            )
            groups.setdefault(group, {})[(to_partition_key(pair[0]), to_partition_key(pair[1]))] = (
                identity,
                "; ".join(why),
            )
        per_run = requested_range_size(sum(map(len, groups.values())), instance)
        model_order, suite_order = instance.get_dynamic_partitions("model"), instance.get_dynamic_partitions("suite")
        requests = []
        for group, wanted in sorted(groups.items(), key=lambda item: item[0] or ()):
            selection = None if group is None else [AssetKey.from_user_string(k) for k in group]
            for block in range_blocks(wanted, model_order, suite_order, per_run):
                requests.append(
                    range_run_request(
                        block,
                        [wanted[pair][0] for pair in block],
                        {"evalpipeline/reason": _range_reason([wanted[pair][1] for pair in block])},
                        selection,
                    )
                )
        if not requests:
            return SkipReason(
                f"{discovery.files} source(s), {len(discovery.partitions)} partition(s): nothing new or stale"
            )
        return requests

    return nightly_refresh


def _range_reason(reasons: list[str]) -> str:
    """A range run's reason tag: its partitions' reason when they share one, else each reason with
    the number of its partitions (at most 200 characters)."""
    counts = Counter(reasons)
    text = reasons[0] if len(counts) == 1 else " / ".join(f"{why} ({n} partition(s))" for why, n in counts.items())
    return text if len(text) <= 200 else text[:197] + "..."
