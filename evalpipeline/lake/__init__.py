"""The lake: Hive-style Parquet tables under one root, written atomically.

Layout (``<key>`` is :func:`evalpipeline.lake.keys.to_partition_key` of the name)::

    <root>/ingested/model=<key>/suite=<key>/eval-<eval_id>-<path hash>.parquet
        every row one log file yielded, accepted or not (``reason`` null when
        accepted): the ingest record, one file per log file
    <root>/samples/model=<key>/suite=<key>/samples.parquet
        the canonical sample table of the partition (asset ``eval_samples``)
    <root>/samples/model=<key>/suite=<key>/_validation.json
        the validation verdict of that table (failed blocking checks); a table
        that failed one is left out of every comparison (see sample_tables)
    <root>/quarantine/model=<key>/suite=<key>/quarantine.parquet
        rows set aside, each with its ``reason``
    <root>/unplaced/<path hash>.parquet
        a log's rows that no partition can hold (no model or suite name, or one
        too long for a key), each with its ``reason``
    <root>/file_errors/<sha256[:16]>-<path hash>.json
        logs that could not be read at all (no partition can be named)
    <root>/accuracy_posteriors/model=<key>/suite=<key>/posteriors.parquet
    <root>/suite_leaderboard/suite=<key>/leaderboard.parquet
    <root>/partition_names/<dimension>/name-<key>.parquet
        key -> display name, for every partition key ever issued
    <root>/.locks/<hash>.lock
        empty files that runs side by side lock (flock) while staging one source
        or rebuilding one partition's tables (:meth:`Lake.lock`)

Writes go to a hidden temporary file in the target folder and are renamed
over the target, so a reader sees the old file or the new one, never a
partial one; pyarrow and Spark skip the hidden temporaries. A write whose
bytes equal the file already there is skipped, so reruns leave the lake
(mtimes included) untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipeline.lake.keys import from_partition_key, to_partition_key


_HOST = socket.gethostname().replace("-", "_")


#: Suffix of every temporary file: a partial file of another process writing into the same folder
#: (two runs ingesting one log, a Dask worker) must not match a reader's ``*.parquet`` or ``*.json``.
TEMP_SUFFIX = ".tmp"

#: Folder of the lake's lock files (:meth:`Lake.lock`), hidden like the caches beside it.
LOCKS_DIR = ".locks"


def temp_prefix() -> str:
    """Prefix of this process's temporary files: host and pid, so that a later writer can tell
    the leftovers of a killed process (see :func:`sweep_orphaned_temporaries`)."""
    return f".tmp-{_HOST}-{os.getpid()}-"


def new_temporary(directory: Path) -> Path:
    """An empty temporary file in ``directory`` (named by :func:`temp_prefix`) for a write that ends in
    ``os.replace``, readable as the process's umask allows (as ``open`` would create it).

    ``tempfile.mkstemp`` creates its file 0600 whatever the umask, and the rename keeps that mode:
    every lake file would be private to the account that wrote it, out of reach of a reader, a web
    server showing the report, or a worker under another account on a shared lake.
    """
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), suffix=TEMP_SUFFIX, dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~_process_umask())
    finally:
        os.close(fd)
    return Path(tmp)


def _widen_to_umask(path: Path) -> None:
    """Give an unchanged file, which is not rewritten, the permission bits a new one would get: files
    written before :func:`new_temporary` (0600) become readable as the umask allows at their next
    write. Bits are only added, never removed; a file of another account is left as it is."""
    try:
        mode = path.stat().st_mode & 0o777
        wanted = mode | (0o666 & ~_process_umask())
        if wanted != mode:
            os.chmod(path, wanted)
    except OSError:
        pass


def _process_umask() -> int:
    """The umask, read without changing it where Linux reports it (``os.umask`` can only set it, and
    setting it back leaves a moment in which another thread would create files with the wrong mode)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sweep_orphaned_temporaries(folder: Path) -> list[Path]:
    """Delete temporary files in ``folder`` left by a process of this host that no longer runs.

    A killed run (SIGKILL, power loss) cannot clean up after itself; the next
    write into the same folder does. Files of live processes and of other
    hosts (a distributed executor shares the lake) are left alone.
    """
    removed = []
    for tmp in Path(folder).glob(".tmp-*"):
        parts = tmp.name.split("-", 3)
        if len(parts) < 4 or parts[1] != _HOST or not parts[2].isdigit():
            continue
        if not process_alive(int(parts[2])):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process of this host with ``pid`` still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_bytes_atomic(data: bytes, path: Path) -> bool:
    """Write ``data`` to ``path`` atomically; return False if the file already held exactly ``data``."""
    path = Path(path)
    if path.parent.exists():
        sweep_orphaned_temporaries(path.parent)
    if path.exists() and sha256_file(path) == hashlib.sha256(data).hexdigest():
        _widen_to_umask(path)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_temporary(path.parent)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def parquet_bytes(table: pa.Table) -> bytes:
    """Serialise a table to Parquet bytes (deterministic for equal tables).

    A column with no value in this table (Arrow infers type null for all-None text) is stored as
    string: a folder or glob of one kind of table (leaderboards' ``clt_flag``, GLM summaries'
    ``item``) must not mix null and string, which readers refuse to reconcile. Every such column of
    the lake is text; a numeric one with no value is NaN, typed double."""
    nulls = [i for i, field in enumerate(table.schema) if pa.types.is_null(field.type)]
    for i in nulls:
        table = table.set_column(i, table.schema.field(i).with_type(pa.string()), table.column(i).cast(pa.string()))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def write_parquet_atomic(table: pa.Table, path: Path) -> bool:
    """Write ``table`` as Parquet at ``path`` atomically; False when unchanged."""
    return write_bytes_atomic(parquet_bytes(table), path)


class ParquetFrames(NamedTuple):
    """Parquet files read as one frame (:func:`read_parquet_files`)."""

    frame: pd.DataFrame
    rows: list[int]  # each file's number of rows: its slice of ``frame``, in the order given
    one_schema: bool  # the files shared one schema, so each slice has the dtypes the file alone would get


def read_parquet_files(paths: list[Path], columns: tuple[str, ...] | None = None) -> ParquetFrames:
    """Parquet files as one frame, in the order given; of ``columns`` alone (those a file has) when given.

    Files of one schema are concatenated as Arrow tables and converted to pandas once: a suite's ~100
    small sample tables converted one by one took ~2.5x as long. Files whose schemas differ are
    converted one by one and concatenated by pandas, which reconciles their types."""
    tables = []
    for path in paths:
        if columns is None:
            tables.append(pq.read_table(path))
        else:
            handle = pq.ParquetFile(path)
            tables.append(handle.read(columns=[c for c in columns if c in handle.schema_arrow.names]))
    rows = [table.num_rows for table in tables]
    if not tables:
        return ParquetFrames(pd.DataFrame(), rows, True)
    if all(table.schema.equals(tables[0].schema) for table in tables[1:]):
        return ParquetFrames(pa.concat_tables(tables).to_pandas(), rows, True)
    return ParquetFrames(pd.concat([table.to_pandas() for table in tables], ignore_index=True), rows, False)


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_identity(paths) -> list:
    """What tells a rewritten lake file from an unchanged one, per path: name, inode, size and mtime
    in ns (name and None for a missing file). Lake files are replaced atomically, by a new file with a
    new inode, and never when their bytes are unchanged (:func:`write_bytes_atomic`), so equal
    identities mean equal contents."""
    identity = []
    for path in paths:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            identity.append([Path(path).name, None])
            continue
        identity.append([Path(path).name, stat.st_ino, stat.st_size, stat.st_mtime_ns])
    return identity


class SummaryCache:
    """JSON summaries of lake files, recomputed only for files that changed (:func:`file_identity`).

    For the lake-wide tables that summarise every partition on every run (the report, the ingest
    accounting): at 600 partitions they read ~2,000 small tables each time, seconds of the night's
    last stage, for rows that rarely change. ``version`` names the code that computes the summaries:
    a cache written by other code is ignored. A value is returned as it reads back from JSON whether
    it was computed or cached, so a run's output does not depend on the cache. An unreadable cache is
    ignored (everything is recomputed, which is always correct); :meth:`save` writes it atomically,
    holding only the keys asked for in this run, so entries of retired partitions do not pile up.
    """

    def __init__(self, path: Path, version: str):
        self.path, self.version = Path(path), version
        self._stored: dict = {}
        self._entries: dict = {}
        self.hits = self.misses = 0
        try:
            record = json.loads(self.path.read_text())
            if (
                isinstance(record, dict)
                and record.get("version") == version
                and isinstance(record.get("entries"), dict)
            ):
                self._stored = record["entries"]
        except (OSError, ValueError):
            pass

    def get(self, key: str, files, compute):
        """``compute()`` (JSON-serialisable), or its stored value when ``files`` are those it was computed from."""
        identity = file_identity(files)  # before computing: a file changing meanwhile is recomputed next time
        entry = self._stored.get(key)
        if isinstance(entry, dict) and entry.get("files") == identity and "value" in entry:
            self.hits += 1
            value = entry["value"]
        else:
            self.misses += 1
            value = json.loads(json.dumps(compute()))
        self._entries[key] = {"files": identity, "value": value}
        return value

    def save(self) -> bool:
        """Write the entries used in this run; False when the file already held them."""
        # keys in the order given: a summary's column order is part of it
        data = json.dumps({"version": self.version, "entries": self._entries}).encode()
        return write_bytes_atomic(data, self.path)


class AtomicParquetWriter:
    """Append record batches to a Parquet file that appears atomically on :meth:`commit`.

    Lets a reader stream a large source into the lake without holding it:
    batches go to a hidden temporary file beside ``path``; ``commit``
    renames it over ``path`` (or drops it when ``path`` already holds the
    same bytes, returning False); ``abort`` drops it.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None

    @property
    def schema(self) -> pa.Schema | None:
        return self._writer.schema if self._writer else None

    def write(self, table: pa.Table) -> None:
        """Append ``table``. A table with columns the file lacks widens the file: its earlier rows get
        them as nulls (a covariate a source's first chunk has no value for, and so no type)."""
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            sweep_orphaned_temporaries(self.path.parent)
            self._tmp = new_temporary(self.path.parent)
            self._writer = pq.ParquetWriter(self._tmp, table.schema, compression="zstd")
        elif not table.schema.equals(self._writer.schema, check_metadata=False):
            added = [field for field in table.schema if field.name not in self._writer.schema.names]
            if added:
                self._widen(added)
            table = _conformed(table, self._writer.schema)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def _widen(self, added: list[pa.Field]) -> None:
        """Rewrite what was written so far with the ``added`` columns, null in every row."""
        schema = pa.schema([*self._writer.schema, *added], metadata=self._writer.schema.metadata)
        self._writer.close()
        old, self._tmp = self._tmp, new_temporary(self.path.parent)
        self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")
        for batch in pq.ParquetFile(old).iter_batches():
            self._writer.write_table(_conformed(pa.Table.from_batches([batch]), schema))
        old.unlink()

    def commit(self) -> bool:
        if self._writer is None:
            raise ValueError(f"nothing was written for {self.path}")
        self._writer.close()
        tmp, self._writer = self._tmp, None
        if self.path.exists() and sha256_file(self.path) == sha256_file(tmp):
            tmp.unlink()
            _widen_to_umask(self.path)
            return False
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        return True

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the columns of ``schema``, in its order and types (null where it lacks one); a
    column ``schema`` lacks is an error, as a value of the wrong type is."""
    extra = [name for name in table.schema.names if name not in schema.names]
    if extra:
        raise ValueError(f"columns {extra} are not in the file's schema")
    columns = [
        table.column(field.name).cast(field.type)
        if field.name in table.schema.names
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


class RejectedSamplesError(ValueError):
    """A partition's sample table failed validation: its rows must not reach a posterior or a fit."""


def prepare_lake_root(root: str | os.PathLike, label: str) -> Path:
    """Create the lake root folder ``root`` if needed; ValueError naming ``label`` (the option or
    variable that set it, with its value) when it exists and is not a folder, cannot be created or is
    not writable: the first write of a run or an ingest would otherwise fail with a traceback."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"{label}: {root} exists and is not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{label}: cannot create the lake folder {root}: {exc.strerror or exc}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ValueError(f"{label}: the lake folder {root} is not writable")
    return root


class FileLock:
    """An advisory exclusive lock on a file (``flock``), as a context manager; one use per object.

    The kernel drops it when its holder's descriptor closes, so a killed process leaves no lock
    held. The file is opened without truncation and never written: taking a lock changes no
    byte or mtime of the lake, so a rerun still leaves the lake untouched (the empty lock files
    stay). ``flock`` needs a local POSIX file system; elsewhere (Windows) ``filelock.FileLock``
    does the locking.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._held = None

    def __enter__(self) -> FileLock:
        try:
            import fcntl
        except ImportError:  # not POSIX
            from filelock import FileLock as PortableLock

            self._held = PortableLock(self.path)
            self._held.acquire()
            return self
        # read-only is enough for flock, and lets a writer under another account lock a file made by this one
        descriptor = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except BaseException:
            os.close(descriptor)
            raise
        self._held = descriptor
        return self

    def __exit__(self, *_exc) -> None:
        held, self._held = self._held, None
        if isinstance(held, int):
            os.close(held)  # closing the only descriptor of the open file releases its flock
        elif held is not None:
            held.release()


class Lake:
    """Paths and reads/writes of the lake rooted at ``root``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Lake({str(self.root)!r})"

    # -- paths ---------------------------------------------------------------
    def partition_dir(self, table: str, model: str | None = None, suite: str | None = None) -> Path:
        """Folder of ``table`` for a model and/or suite given by display name."""
        path = self.root / table
        if model is not None:
            path = path / f"model={to_partition_key(model)}"
        if suite is not None:
            path = path / f"suite={to_partition_key(suite)}"
        return path

    def table_path(self, table: str, filename: str, model: str | None = None, suite: str | None = None) -> Path:
        return self.partition_dir(table, model, suite) / filename

    # -- locks between processes ---------------------------------------------
    def lock(self, name: str):
        """An exclusive lock on ``name`` among the processes (and threads) writing this lake, as a
        context manager: the block runs while no other holder's does. Runs side by side (two
        workers, a Dask cluster, a UI backfill beside the nightly) can each be given partitions
        that one source holds; staging that source and rebuilding one partition's tables must not
        interleave. Locks are taken one at a time, never nested, so none can deadlock. See
        :class:`FileLock`: released when the block ends or its process dies."""
        folder = self.root / LOCKS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(folder / f"{hashlib.sha256(name.encode()).hexdigest()[:24]}.lock")

    def partition_lock(self, model: str, suite: str):
        """:meth:`lock` on one model x suite partition's tables (held while they are rebuilt)."""
        return self.lock(f"partition\0{model}\0{suite}")

    def source_lock(self, path: str | os.PathLike):
        """:meth:`lock` on staging one source file (by its absolute path)."""
        return self.lock(f"source\0{os.path.realpath(path)}")  # Path.resolve raises on a symlink loop

    # -- partition listing and names -----------------------------------------
    def partitions(self, table: str) -> list[tuple[str, str]]:
        """(model, suite) display names of the partitions ``table`` holds files for."""
        found = []
        base = self.root / table
        for model_dir in sorted(base.glob("model=*")):
            for suite_dir in sorted(model_dir.glob("suite=*")):
                if any(suite_dir.glob("*.parquet")):
                    found.append(
                        (
                            from_partition_key(model_dir.name.split("=", 1)[1]),
                            from_partition_key(suite_dir.name.split("=", 1)[1]),
                        )
                    )
        return found

    def sample_tables(
        self, *, model: str | None = None, suite: str | None = None, include_failed: bool = False
    ) -> list[tuple[str, str, Path]]:
        """(model, suite, path) of the partitions' sample tables, sorted, optionally of one model or
        suite. Tables that failed a blocking validation check (:meth:`failed_validation`) are left
        out unless ``include_failed``: what compares, ranks or pools partitions reads only these, so
        data the validation rejected reaches no leaderboard, profile, suite fit or reliability."""
        pattern = (
            f"samples/model={'*' if model is None else to_partition_key(model)}/"
            f"suite={'*' if suite is None else to_partition_key(suite)}/samples.parquet"
        )
        found = []
        for path in sorted(self.root.glob(pattern)):
            names = (
                from_partition_key(path.parent.parent.name.split("=", 1)[1]),
                from_partition_key(path.parent.name.split("=", 1)[1]),
            )
            if include_failed or not self.failed_validation(*names):
                found.append((*names, path))
        return found

    def validation_path(self, model: str, suite: str) -> Path:
        # "_" keeps it out of the Parquet dataset for pyarrow and Spark readers of samples/
        return self.table_path("samples", "_validation.json", model, suite)

    def failed_validation(self, model: str, suite: str) -> list[str]:
        """Names of the blocking validation checks the partition's sample table failed when it was
        written ([] when it passed, or was written without validation)."""
        path = self.validation_path(model, suite)
        if not path.exists():
            return []
        return list(json.loads(path.read_text()).get("failed_checks", []))

    def require_passed_validation(self, model: str, suite: str) -> None:
        """Raise :class:`RejectedSamplesError` when the partition's sample table failed a blocking
        check. Within a run the checks stop the assets after the table; this stops a run of those
        assets alone (from the UI, or requested by automation, which runs no checks)."""
        failed = self.failed_validation(model, suite)
        if failed:
            raise RejectedSamplesError(
                f"{model!r} x {suite!r}: the sample table failed validation ({', '.join(failed)}); nothing is "
                "computed from rejected rows. Fix or replace the log, then materialise eval_samples again"
            )

    def record_partition_names(self, dimension: str, names: set[str] | list[str]) -> None:
        """Store key -> display name for ``dimension``: one small file per key, so that runs
        recording names at the same time (a distributed executor) never overwrite each other's
        (a single merged file would be a read-modify-write race). Read them all with
        ``pd.read_parquet("<lake>/partition_names/<dimension>")``."""
        for name in sorted(set(names)):
            key = to_partition_key(name)
            table = pa.table({"key": [key], "name": [name]})
            # the prefix keeps keys starting with "_" visible to readers that skip such files
            write_parquet_atomic(table, self.root / "partition_names" / dimension / f"name-{key}.parquet")

    # -- reading ------------------------------------------------------------
    def read_files(self, files: list[Path], *, model: str | None = None, suite: str | None = None) -> pd.DataFrame:
        """Concatenate Parquet files into one frame, adding the partition columns given."""
        frames = [pq.read_table(f).to_pandas() for f in sorted(files)]
        non_empty = [f for f in frames if len(f)]
        if non_empty:
            frame = pd.concat(non_empty, ignore_index=True)
        else:  # keep the columns of an empty table
            frame = frames[0] if frames else pd.DataFrame()
        if model is not None:
            frame.insert(0, "model", model)
        if suite is not None:
            frame.insert(1 if model is not None else 0, "suite", suite)
        return frame

    def read_partition(self, table: str, model: str, suite: str) -> pd.DataFrame:
        """All Parquet files of one model x suite partition of ``table``."""
        files = list(self.partition_dir(table, model, suite).glob("*.parquet"))
        return self.read_files(files, model=model, suite=suite)

    def write_json_atomic(self, obj, path: Path) -> bool:
        return write_bytes_atomic(json.dumps(obj, indent=2, sort_keys=True, default=str).encode(), path)
