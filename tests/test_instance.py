"""The repository's Dagster instance (dagster_home/dagster.yaml, resources/instance.py): Dagster's
SQLite files, with the event index's connection kept open: safe across fork, threads and processes,
and the UI's live run logs still follow a run."""

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

from resources.instance import LocalInstance, PooledSqliteEventLogStorage

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


def test_a_process_keeps_the_index_open_and_no_runs_file(tmp_path):
    """The index's connection stays open between events; a run's file is closed after each, as Dagster
    does (its close checkpoints the file the UI's live logs watch, and ``wipe`` deletes run files)."""
    home = _home(tmp_path)
    instance = DagsterInstance.from_config(str(home))
    for run in range(6):
        instance.store_event(_materialization(f"run-{run}", "samples", f"m{run}|s1", run))
    opened = [name for name in _open_databases() if name.startswith(str(home))]
    assert opened == [str(home / "history" / "runs" / "index.db")], opened
    assert _materialized_partitions(instance, "samples") == {f"m{run}|s1" for run in range(6)}
    instance.dispose()


def test_threads_storing_at_once_share_the_kept_connection(tmp_path):
    """The webserver and the step workers store and read from several threads of one process."""
    from concurrent.futures import ThreadPoolExecutor

    home = _home(tmp_path)
    instance = DagsterInstance.from_config(str(home))

    def store(thread: int) -> int:
        for i in range(30):
            instance.store_event(_materialization(f"run-{thread}", "samples", f"t{thread}-{i}", i))
            _materialized_partitions(instance, "samples")
        return thread

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(store, range(4))) == [0, 1, 2, 3]
    assert _materialized_partitions(instance, "samples") == {f"t{t}-{i}" for t in range(4) for i in range(30)}
    instance.dispose()


def test_the_uis_live_run_logs_see_each_event_another_process_stores(tmp_path):
    """Dagster's run-log watcher (the UI's live logs) reacts to the run's .db file changing. A worker
    process stores 15 log lines while the run goes on; the watcher, in this process with its own
    instance as the webserver has, sees every one before the worker stops."""
    home = _home(tmp_path)
    watcher = DagsterInstance.from_config(str(home))
    watcher.store_event(_log_line("run-x", "first"))  # the run's file exists, as when the UI opens a run page
    seen: list[str] = []
    watcher.watch_event_logs("run-x", None, lambda event, cursor: seen.append(event.user_message))
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from dagster import DagsterInstance
        from test_instance import _log_line
        instance = DagsterInstance.from_config({str(home)!r})
        for i in range(15):
            instance.store_event(_log_line("run-x", f"line {{i}}"))
            time.sleep(0.1)
        print("stored", flush=True)
        time.sleep(30)  # the run goes on (its next step computing): the process and its storage stay
    """)
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "stored"
        deadline = time.monotonic() + 10
        while len(seen) < 16 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert seen == ["first"] + [f"line {i}" for i in range(15)]
    finally:
        worker.kill()
        worker.wait()
        watcher.dispose()


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
