"""The local Dagster instance: Dagster's SQLite storage, keeping its connection to the event index open.

Dagster's ``SqliteEventLogStorage`` builds a new SQLAlchemy engine and opens a new connection for
every event it stores in a run's file, and another for its cross-run index when the event is an
asset event (a materialisation, its planned event, a check evaluation), then closes them; closing
a write-ahead-logged database's last connection checkpoints it. A step stores one or two events for
every partition of every asset it materialises: ~15,000 in a 100-model rebuild, 11,100 of them
mirrored in the index.

:class:`PooledSqliteEventLogStorage` keeps the index's connection open for the life of the process;
a run's own file is opened and closed per transaction as Dagster does. Everything else is Dagster's:
the same files, schema, journal mode (WAL), synchronous level and busy timeout, and every
transaction begins and commits as before, under Dagster's own lock. Measured by
``benchmarks/event_storage_benchmark.py`` (a step's mix of events): 8.4 against 4.7 ms of wall time
an event, 1.8x.

Why not the runs' files too (measured 5.4x): Dagster's run-log watchers, which feed the UI's live
logs, wait for the run's ``.db`` file to change, and in WAL mode it changes only when the log is
checkpointed, which Dagster's close of the last connection does; a kept connection stalled the UI's
live logs until the run's connection closed. And ``wipe`` deletes run files under a kept
connection, which would then write into a deleted file. The index is neither watched nor deleted.

A kept connection must not cross a fork: a child must not use, or close, a SQLite connection its
parent opened (SQLite's rule: its close can checkpoint and remove the write-ahead log the parent is
still using). It is closed before any fork (``os.register_at_fork``) and reopened on use.

:class:`LocalInstance` is the instance class ``dagster_home/dagster.yaml`` names
(``instance_class``): a ``DagsterInstance`` whose default storage is :class:`PooledSqliteStorage`
in the instance's own folder, as Dagster's default is ``DagsterSqliteStorage`` there. A
``storage:`` block in the same file (Postgres in production, README) replaces the default as usual.

This overrides one private method of Dagster's storage (``_connect``, where it opens every
connection) and imports from Dagster's internal modules; pyproject.toml pins dagster to the 1.13
line, whose code this follows, and tests/test_instance.py exercises it against the installed Dagster.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Iterator

import yaml
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage, _event_logs_directory
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import StaticPool


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` keeping its connection to the cross-run index open (module docstring).

    A run's own file is opened and closed per transaction, as Dagster does: closing its last
    connection checkpoints the write-ahead log into the ``.db`` file, which is what Dagster's
    run-log watchers (the UI's live logs) wait for, and ``wipe`` deletes those files. The index is
    never deleted or watched that way.

    Dagster's lock (``_db_lock``, held for every transaction) also guards the kept connection: the
    fork hook takes it, so no transaction of another thread is open while it closes, and holds it
    across the fork (a child must not start with it taken by a thread it does not have)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._index_engine = None
        self._index_pid = os.getpid()
        super().__init__(base_dir, inst_data=inst_data)
        own = weakref.ref(self)  # the hooks live as long as the process; the storage need not
        os.register_at_fork(before=lambda: _call(own, "_before_fork"),
                            after_in_parent=lambda: _call(own, "_after_fork_in_parent"),
                            after_in_child=lambda: _call(own, "_after_fork_in_child"))

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "PooledSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator:
        if shard != INDEX_SHARD_NAME:
            with super()._connect(shard) as conn:  # a run's file: Dagster's own, opened and closed
                yield conn
            return
        # SqliteEventLogStorage._connect, with the kept engine instead of a new one each time
        with self._db_lock:
            if self._index_pid != os.getpid():  # not forked by os.fork (no hooks ran): not ours
                self._index_engine, self._index_pid = None, os.getpid()
            if self._index_engine is None:
                # StaticPool: one connection, kept; _db_lock serialises its use among this process's threads
                self._index_engine = create_engine(
                    self.conn_string_for_shard(shard), poolclass=StaticPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
            if shard not in self._initialized_dbs:
                self._initdb(self._index_engine)
                self._initialized_dbs.add(shard)
            with self._index_engine.connect() as conn, conn.begin():
                yield conn

    def close_connections(self) -> None:
        """Close this process's kept connection (it reopens on the next use)."""
        with self._db_lock:
            self._close_index()

    def _close_index(self) -> None:
        if self._index_engine is not None:
            self._index_engine.dispose()
            self._index_engine = None

    def _before_fork(self) -> None:
        self._db_lock.acquire()
        self._close_index()

    def _after_fork_in_parent(self) -> None:
        self._db_lock.release()

    def _after_fork_in_child(self) -> None:
        self._index_pid = os.getpid()
        self._db_lock.release()

    def dispose(self) -> None:
        super().dispose()
        self.close_connections()


def _call(reference: weakref.ref, method: str) -> None:
    storage = reference()
    if storage is not None:
        getattr(storage, method)()


class PooledSqliteStorage(DagsterSqliteStorage):
    """Dagster's SQLite storage (runs, schedules) with :class:`PooledSqliteEventLogStorage` for events."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        super().__init__(base_dir, inst_data=inst_data)
        self._event_log_storage = PooledSqliteEventLogStorage(_event_logs_directory(base_dir))

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "PooledSqliteStorage":
        return cls.from_local(inst_data=inst_data, **config_value)

    @property
    def event_storage_data(self) -> ConfigurableClassData | None:
        return ConfigurableClassData(__name__, PooledSqliteEventLogStorage.__name__,
                                     yaml.dump({"base_dir": _event_logs_directory(self.base_dir)}, default_flow_style=False))


class LocalInstance(DagsterInstance):
    """A ``DagsterInstance`` whose default storage is :class:`PooledSqliteStorage` in its own folder."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> dict:
        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = ConfigurableClassData(
            __name__, PooledSqliteStorage.__name__, yaml.dump({"base_dir": base_dir}, default_flow_style=False))
        return defaults
