"""Sensor ``landing_sensor``: new or changed logs -> partitions and runs.

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
"""


import json
from pathlib import Path

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from assets.jobs import ingest_and_fit_job
from assets.partitions import model_partitions, model_suite_key, suite_partitions
from evalpipeline.ingest import already_ingested, find_log_files, record_file_error, scan_sources
from evalpipeline.keys import to_partition_key
from evalpipeline.lake import sha256_file
from resources import IngestSettings, LakeResource


@sensor(
    job=ingest_and_fit_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Discovers new or changed eval sources in the landing folder, registers their model and "
    "suite partitions and requests one ingest-and-fit run per partition of each new content.",
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
    requests = [
        RunRequest(
            run_key=f"{source.sha256}:{to_partition_key(part.model)}|{to_partition_key(part.suite)}"
            f":{modified[source.path]}",
            partition_key=model_suite_key(part.model, part.suite),
            tags={"evalpipeline/source": Path(source.path).name[:200]},
        )
        for source, ps in found
        for part in ps
    ]
    dynamic = []
    if new_models:
        dynamic.append(model_partitions.build_add_request(new_models))
    if new_suites:
        dynamic.append(suite_partitions.build_add_request(new_suites))
    return SensorResult(run_requests=requests, dynamic_partitions_requests=dynamic, cursor=json.dumps(seen))
