"""The repository's Dagster instance (dagster_home/dagster.yaml, resources/instance.py): Dagster's
SQLite files, with connections kept open, safe across fork, processes and many runs."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, AssetMaterialization, DagsterEvent, DagsterEventType, DagsterInstance
from dagster._core.events import StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.ref import InstanceRef

from resources.instance import KEPT_RUN_DATABASES, LocalInstance, PooledSqliteEventLogStorage

REPO = Path(__file__).resolve().parents[1]


def _home(tmp_path: Path, name: str = "home") -> Path:
    home = tmp_path / name
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def _materialization(run_id: str, asset: str, partition: str, value: int) -> EventLogEntry:
    event = DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "ingest_and_fit",
                         event_specific_data=StepMaterializationData(
                             AssetMaterialization(AssetKey(asset), partition=partition, metadata={"value": value})))
    return EventLogEntry(error_info=None, level=logging.DEBUG, user_message="", run_id=run_id,
                         timestamp=time.time(), dagster_event=event)


def _log_line(run_id: str, text: str) -> EventLogEntry:
    return EventLogEntry(error_info=None, level=logging.INFO, user_message=text, run_id=run_id, timestamp=time.time())


def _materialized_partitions(instance: DagsterInstance, asset: str) -> set[str]:
    return set(instance.get_materialized_partitions(AssetKey(asset)))


def _open_databases() -> list[str]:
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".db"):
            names.append(target)
    return names


def test_the_repositorys_instance_stores_events_in_dagsters_own_files(tmp_path):
    """The instance dagster_home/dagster.yaml makes keeps its connections, and writes the files Dagster's
    default storage reads: an instance without instance_class on the same folder sees every event."""
    home = _home(tmp_path)
    instance = DagsterInstance.from_config(str(home))
    assert isinstance(instance, LocalInstance)
    assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
    for i in range(6):
        instance.store_event(_materialization("run-a", "samples", f"m{i}|s1", i))
        instance.store_event(_log_line("run-a", f"line {i}"))
    assert _materialized_partitions(instance, "samples") == {f"m{i}|s1" for i in range(6)}
    assert len(instance.all_logs("run-a")) == 12
    instance.dispose()
    assert not [name for name in _open_databases() if name.startswith(str(home))]  # dispose closed them

    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # Dagster's own storage, same files
    plain = DagsterInstance.from_config(str(home))
    assert type(plain) is DagsterInstance
    assert _materialized_partitions(plain, "samples") == {f"m{i}|s1" for i in range(6)}
    assert [e.user_message for e in plain.all_logs("run-a") if not e.is_dagster_event] == [f"line {i}" for i in range(6)]
    plain.dispose()


def test_a_storage_block_replaces_the_kept_connections_as_dagsters_default_is_replaced(tmp_path):
    home = _home(tmp_path)
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    config["storage"] = {"postgres": {"postgres_db": {"hostname": "db", "db_name": "d", "username": "u",
                                                      "password": {"env": "DAGSTER_PG_PASSWORD"}}}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    ref = InstanceRef.from_dir(str(home))
    assert ref.custom_instance_class is LocalInstance
    assert ref.storage_data.module_name == "dagster_postgres"


def test_a_process_keeps_at_most_a_few_run_databases_open(tmp_path):
    home = _home(tmp_path)
    instance = DagsterInstance.from_config(str(home))
    for run in range(KEPT_RUN_DATABASES + 5):
        instance.store_event(_materialization(f"run-{run}", "samples", f"m{run}|s1", run))
    opened = [name for name in _open_databases() if name.startswith(str(home))]
    assert len(opened) == KEPT_RUN_DATABASES + 1, opened  # the index and the last runs' files
    assert str(home / "history" / "runs" / "index.db") in opened
    assert _materialized_partitions(instance, "samples") == {f"m{run}|s1" for run in range(KEPT_RUN_DATABASES + 5)}
    instance.dispose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_and_its_parent_both_write_and_the_databases_stay_whole(tmp_path):
    """The parent holds open connections when it forks; the child must not share them (SQLite's rule), so
    they are closed before the fork: the child starts with no database open. Both then keep writing to
    the same run and index databases, and every event lands, intact."""
    home = _home(tmp_path)
    instance = DagsterInstance.from_config(str(home))
    for i in range(5):
        instance.store_event(_materialization("run-a", "samples", f"parent-{i}", i))
    assert [name for name in _open_databases() if name.startswith(str(home))]  # kept open before the fork
    pid = os.fork()
    if pid == 0:  # the child: write, then leave without Python's clean-up (as multiprocessing's workers do)
        code = 0
        try:
            if [name for name in _open_databases() if name.startswith(str(home))]:
                os._exit(2)  # a connection of the parent's came along: closed before the fork, none may
            for i in range(40):
                instance.store_event(_materialization("run-a", "samples", f"child-{i}", i))
        except BaseException:  # noqa: BLE001 - reported through the exit status
            code = 1
        os._exit(code)
    for i in range(5, 45):
        instance.store_event(_materialization("run-a", "samples", f"parent-{i}", i))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 2: it inherited an open database
    expected = {f"parent-{i}" for i in range(45)} | {f"child-{i}" for i in range(40)}
    assert _materialized_partitions(instance, "samples") == expected
    assert len(instance.all_logs("run-a")) == 85
    instance.dispose()
    for name in ("index.db", "run-a.db"):
        with sqlite3.connect(home / "history" / "runs" / name) as check:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_processes_writing_at_once_lose_no_event(tmp_path):
    """Three processes store materialisations of the same asset into one index at the same time."""
    home = _home(tmp_path)
    DagsterInstance.from_config(str(home)).dispose()  # made once, as the workers find it (Dagster's own
    # storages race when several processes create a new instance's databases together, kept connections or not)
    script = textwrap.dedent(f"""
        import sys, time, logging
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from dagster import DagsterInstance
        from test_instance import _materialization
        instance = DagsterInstance.from_config({str(home)!r})
        who = sys.argv[1]
        for i in range(120):
            instance.store_event(_materialization("run-" + who, "samples", who + "-" + str(i), i))
        instance.dispose()
    """)
    writers = [subprocess.Popen([sys.executable, "-c", script, name], cwd=REPO, stderr=subprocess.PIPE, text=True)
               for name in ("a", "b", "c")]
    errors = [writer.communicate(timeout=300)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0, 0], errors
    instance = DagsterInstance.from_config(str(home))
    assert _materialized_partitions(instance, "samples") == {f"{w}-{i}" for w in "abc" for i in range(120)}
    instance.dispose()
