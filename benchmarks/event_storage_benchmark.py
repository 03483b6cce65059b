"""What a Dagster event costs to store: Dagster's SQLite storage against the repository's instance.

    .venv/bin/python benchmarks/event_storage_benchmark.py [--events 300] [--rounds 5]

Two instances in temporary folders: one with Dagster's default storage (a ``dagster.yaml`` without
``instance_class``), one with ``dagster_home/dagster.yaml`` (``resources.instance.LocalInstance``:
the same SQLite files, connections kept open). In each round, each instance in turn stores
``--events`` events of the kinds a step stores: a materialisation of an asset partition (written to
the run's database and mirrored in the cross-run index), a check evaluation's planned event, and a
log line (the run's database only), one third each. Prints the wall and CPU milliseconds an event
per round and instance, the medians' ratio (default / kept; > 1: the kept connections are faster), and
whether every event stored is read back (exit status 1 if not). The rounds alternate the instances,
so that this shared machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dagster import AssetKey, AssetMaterialization, DagsterEvent, DagsterEventType, DagsterInstance
from dagster._core.events import AssetMaterializationPlannedData, StepMaterializationData
from dagster._core.events.log import EventLogEntry

REPO = Path(__file__).resolve().parents[1]


def _entry(run_id: str, index: int) -> EventLogEntry:
    kind = index % 3
    if kind == 2:  # a log line
        return EventLogEntry(error_info=None, level=logging.INFO, user_message=f"fit {index}: passed",
                             run_id=run_id, timestamp=time.time())
    key = AssetKey(f"asset_{index % 7}")
    partition = f"model-{index // 3:04d}|suite{index % 6}"
    if kind == 0:
        event = DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "ingest_and_fit",
                             event_specific_data=StepMaterializationData(
                                 AssetMaterialization(key, partition=partition, metadata={"rows": index})))
    else:
        event = DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION_PLANNED.value, "ingest_and_fit",
                             event_specific_data=AssetMaterializationPlannedData(key, partition=partition))
    return EventLogEntry(error_info=None, level=logging.DEBUG, user_message="", run_id=run_id,
                         timestamp=time.time(), dagster_event=event)


def _store(instance: DagsterInstance, run_id: str, start: int, count: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for index in range(start, start + count):
        instance.store_event(_entry(run_id, index))
    return (time.perf_counter() - wall) / count * 1e3, (time.process_time() - cpu) / count * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300, help="events an instance stores a round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="event-storage-"))
    try:
        homes = {"Dagster's default": work / "default", "kept connections": work / "kept"}
        for name, home in homes.items():
            home.mkdir()
        (homes["Dagster's default"] / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", homes["kept connections"] / "dagster.yaml")
        instances = {name: DagsterInstance.from_config(str(home)) for name, home in homes.items()}
        print("instances:", ", ".join(f"{name}: {type(i.event_log_storage).__name__}" for name, i in instances.items()))
        run_id = "benchmark-run"
        measured = {name: [] for name in instances}
        for round_ in range(args.rounds):
            for name, instance in (instances.items() if round_ % 2 == 0 else reversed(instances.items())):
                wall, cpu = _store(instance, run_id, round_ * args.events, args.events)
                measured[name].append((wall, cpu))
                print(f"round {round_ + 1}  {name:18s} {wall:6.2f} ms wall, {cpu:6.2f} ms CPU an event")
        ok = True
        for name, instance in instances.items():
            stored = len(instance.all_logs(run_id))
            expected = args.rounds * args.events
            ok &= stored == expected
            print(f"{name}: {stored} of {expected} events read back")
            instance.dispose()
        medians = {name: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
                   for name, rows in measured.items()}
        (default_wall, default_cpu), (kept_wall, kept_cpu) = medians.values()
        print(f"median ms an event: Dagster's default {default_wall:.2f} wall / {default_cpu:.2f} CPU, "
              f"kept connections {kept_wall:.2f} / {kept_cpu:.2f}")
        print(f"ratio default / kept (MEASURED): {default_wall / kept_wall:.2f}x wall, {default_cpu / kept_cpu:.2f}x CPU")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
