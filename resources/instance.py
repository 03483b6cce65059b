"""The local Dagster instance: Dagster's SQLite storage, keeping its database connections open.

Dagster's ``SqliteEventLogStorage`` builds a new SQLAlchemy engine and opens a new connection for
every event it stores, and a second one for its cross-run index when the event is an asset event
(a materialisation, a check evaluation). Each close of a write-ahead-logged database's last
connection checkpoints it. A step stores one or two events for every partition of every asset it
materialises, so a 100-model rebuild stores ~15,000 events. Measured in the scale benchmark's
worker processes (20 models, the same day): 9.5-10.5 ms of wall time (6.3-6.5 ms CPU) an event
with Dagster's storage, 3.0-3.2 ms (1.8 ms CPU) with the connections kept open
(``benchmarks/event_storage_benchmark.py`` prints the ratio on this machine).

:class:`PooledSqliteEventLogStorage` keeps one connection per database file (the index and the
last few runs' files) for the life of the process. Everything else is Dagster's: the same files,
schema, journal mode (WAL), synchronous level and busy timeout, and every transaction begins and
commits as before, under Dagster's own lock. Two things a kept connection adds, handled here:

* **fork**: a child process must not use, or close, a SQLite connection its parent opened (SQLite's
  own rule: the child's close can checkpoint and remove the write-ahead log the parent is still
  using). The connections are closed before any fork (``os.register_at_fork``) and reopened on use.
* **open files**: at most :data:`KEPT_RUN_DATABASES` run databases stay open besides the index.

:class:`LocalInstance` is the instance class ``dagster_home/dagster.yaml`` names
(``instance_class``): a ``DagsterInstance`` whose default storage is :class:`PooledSqliteStorage`
in the instance's own folder, as Dagster's default is ``DagsterSqliteStorage`` there. A
``storage:`` block in the same file (Postgres in production, README) replaces the default as usual.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections import OrderedDict
from typing import Iterator

import yaml
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage, _event_logs_directory
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import StaticPool

#: Run databases kept open per process besides the index (a worker writes to one run's at a time;
#: the run queue's and sensors' reads touch a few more).
KEPT_RUN_DATABASES = 4

_INDEX_SHARD = "index"


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` with one kept connection per database file and process (module docstring).

    Dagster's lock (``_db_lock``, held for every transaction) also guards the kept connections: the
    fork hook takes it, so no transaction of another thread is open while they close, and holds it
    across the fork (a child must not start with it taken by a thread it does not have)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict = OrderedDict()  # shard -> Engine, least recently used first
        self._engines_pid = os.getpid()
        super().__init__(base_dir, inst_data=inst_data)
        own = weakref.ref(self)  # the hooks live as long as the process; the storage need not
        os.register_at_fork(before=lambda: _call(own, "_before_fork"),
                            after_in_parent=lambda: _call(own, "_after_fork_in_parent"),
                            after_in_child=lambda: _call(own, "_after_fork_in_child"))

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "PooledSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str):
        engine = self._engines.pop(shard, None)
        if engine is None:
            # StaticPool: one connection, kept; _db_lock serialises its use among this process's threads
            engine = create_engine(self.conn_string_for_shard(shard), poolclass=StaticPool,
                                   connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
            runs = [key for key in self._engines if key != _INDEX_SHARD]
            for key in runs[:max(0, len(runs) - KEPT_RUN_DATABASES + 1)]:
                self._engines.pop(key).dispose()
        self._engines[shard] = engine
        return engine

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator:
        # SqliteEventLogStorage._connect, with the shard's kept engine instead of a new one each time
        with self._db_lock:
            if self._engines_pid != os.getpid():  # not forked by os.fork (no hooks ran): none of ours
                self._engines, self._engines_pid = OrderedDict(), os.getpid()
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def close_connections(self) -> None:
        """Close this process's kept connections (they reopen on the next use)."""
        with self._db_lock:
            self._close_engines()

    def _close_engines(self) -> None:
        while self._engines:
            self._engines.popitem(last=False)[1].dispose()

    def _before_fork(self) -> None:
        self._db_lock.acquire()
        self._close_engines()

    def _after_fork_in_parent(self) -> None:
        self._db_lock.release()

    def _after_fork_in_child(self) -> None:
        self._engines_pid = os.getpid()
        self._db_lock.release()

    def wipe(self) -> None:
        self.close_connections()  # Dagster's wipe removes the run databases' files
        super().wipe()

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
