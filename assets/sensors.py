"""Sensors ``landing_sensor`` (new or changed logs -> partitions and runs) and ``refresh_downstream``
(the assets' automation conditions).

Reads only log headers. The cursor remembers each file's size, mtime, ctime and
content hash, so unchanged files are neither re-hashed nor re-requested, and
logs whose exact contents the lake already holds (ingested by
``evalpipeline run`` or the CLI) are not requested again. The run key is the
content hash, the partition (a table may hold several) and the file's ctime
(inode change time): a file is requested once per change of content, and a log
reverted to an earlier content (A, then B, then A again) is requested again,
which a key of the content alone would not be (Dagster skips a run key it has
seen). The ctime rather than the mtime, because a revert by ``cp -p`` or
``rsync -t`` restores A's old mtime too; no tool can set a ctime.

The partitions of one tick's new contents are requested in ranges (``evalpipeline run``'s batches:
assets/batch.py), as many ranges as the run queue starts runs at once, of up to ``PARTITIONS_PER_RUN``
partitions each: a Dagster run costs seconds of start-up whatever it holds, and a one-partition run for
each of a new model's logs paid it for every log. A range whose blocking check fails for one log still
materialised its tables; Dagster skipped the range's later steps, and automation fits the partitions that
passed at its next tick (``refresh_partition_when_inputs_change``). A range that fails naming partitions
and materialised nothing is split by ``rerun_rest_of_failed_ranges`` (assets/redo.py).
"""

import json
import warnings
from pathlib import Path

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    MultiPartitionKey,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.jobs import ingest_and_fit_job
from assets.partitions import model_partitions, range_blocks, range_run_request, requested_range_size, suite_partitions
from evalpipeline.ingest import already_ingested, find_log_files, record_file_error, scan_sources
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import sha256_file
from resources import IngestSettings, LakeResource


@sensor(
    job=ingest_and_fit_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Discovers new or changed eval sources in the landing folder, registers their model and "
    "suite partitions and requests ingest-and-fit runs of their partitions, in ranges: as many runs as the "
    "run queue starts at once, of up to 60 partitions each.",
)
def landing_sensor(context: SensorEvaluationContext, lake: LakeResource, ingest_settings: IngestSettings):
    landing = lake.landing_dir()
    if not landing.exists():
        return SkipReason(f"landing folder {landing} does not exist")
    seen: dict[str, list] = json.loads(context.cursor) if context.cursor else {}
    changed: list[Path] = []
    modified: dict[str, int] = {}
    for path in find_log_files(landing):
        stat = path.stat()
        previous = seen.get(str(path))  # [size, mtime, digest, ctime]; cursors of earlier versions lack the ctime
        if previous and previous[:2] + previous[3:] == [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]:
            continue
        digest = sha256_file(path)
        seen[str(path)] = [stat.st_size, stat.st_mtime_ns, digest, stat.st_ctime_ns]
        if previous and previous[2] == digest:
            continue
        modified[str(path)] = stat.st_ctime_ns  # Source.path is str(path)
        changed.append(path)
    if not changed:
        return SensorResult(skip_reason=SkipReason("no new or changed logs"), cursor=json.dumps(seen))

    options = ingest_settings.options()
    found, errors = scan_sources(changed, options)
    store = lake.lake()
    for error in errors:
        record_file_error(store, error)
        context.log.warning(f"not ingested: {error.error}")
    found = [(source, parts) for source, parts in found if not already_ingested(store, source, parts, options)]
    parts = [p for _, ps in found for p in ps]
    known_models = set(context.instance.get_dynamic_partitions("model"))
    known_suites = set(context.instance.get_dynamic_partitions("suite"))
    new_models = sorted({to_partition_key(p.model) for p in parts} - known_models)
    new_suites = sorted({to_partition_key(p.suite) for p in parts} - known_suites)
    # each partition once, whichever of this tick's sources hold it, with what makes its request new
    wanted: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for source, ps in found:
        for part in ps:
            pair = (to_partition_key(part.model), to_partition_key(part.suite))
            wanted.setdefault(pair, []).append((f"{source.sha256}:{modified[source.path]}", Path(source.path).name))
    # new keys are added after the known ones, in the order of the requests below (Dagster keeps the order)
    model_order = context.instance.get_dynamic_partitions("model") + new_models
    suite_order = context.instance.get_dynamic_partitions("suite") + new_suites
    per_run = requested_range_size(len(wanted), context.instance)
    requests = [_range_request(block, wanted) for block in range_blocks(wanted, model_order, suite_order, per_run)]
    dynamic = []
    if new_models:
        dynamic.append(model_partitions.build_add_request(new_models))
    if new_suites:
        dynamic.append(suite_partitions.build_add_request(new_suites))
    return SensorResult(run_requests=requests, dynamic_partitions_requests=dynamic, cursor=json.dumps(seen))


def _range_request(block: list[tuple[str, str]], wanted: dict) -> RunRequest:
    """One ingest-and-fit run of the (model key, suite key) partitions of ``block`` (a range, in order),
    keyed by each partition's sources, their contents and change times: a log changed again (or
    reverted to an earlier content) is requested again, an unchanged one never twice."""
    entries = [
        f"{MultiPartitionKey({'model': m, 'suite': s})}={stamp}" for m, s in block for stamp, _name in wanted[(m, s)]
    ]
    names = sorted({name for pair in block for _stamp, name in wanted[pair]})
    listed = ", ".join(names)
    return range_run_request(
        block,
        entries,
        {"evalpipeline/source": listed if len(listed) <= 200 else f"{listed[:180]}... ({len(names)} files)"},
    )


# Dagster 1.13 passes owners=None when it binds a sensor to its job while resolving the repository, and
# warns that the (unused) parameter is beta in every command that loads the code location.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`")

#: Evaluates the assets' automation conditions (downstream refreshes) every 30 s while the daemon runs,
#: on the code server: assets.automation.PassedValidation reads the lake (``use_user_code_server`` is a
#: beta parameter in Dagster 1.13, which would warn in every command that loads the code location).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Parameter `use_user_code_server`")
    automation_sensor = AutomationConditionSensorDefinition(
        "refresh_downstream",
        target=AssetSelection.all(),
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        use_user_code_server=True,
        description="Refreshes per-suite, per-model and lake-wide assets when the data they read changed.",
    )
