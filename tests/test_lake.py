import os

import pandas as pd
import pyarrow as pa
import pytest

from evalpipeline.lake import Lake, write_bytes_atomic, write_parquet_atomic


def test_atomic_write_is_idempotent(tmp_path):
    target = tmp_path / "t" / "x.parquet"
    table = pa.table({"a": [1, 2, 3]})
    assert write_parquet_atomic(table, target) is True
    stamp = target.stat().st_mtime_ns
    assert write_parquet_atomic(table, target) is False  # same bytes: not rewritten
    assert target.stat().st_mtime_ns == stamp
    assert write_parquet_atomic(pa.table({"a": [1]}), target) is True
    assert pd.read_parquet(target)["a"].tolist() == [1]
    assert [p.name for p in target.parent.iterdir()] == ["x.parquet"]  # no temporaries left


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "x.bin"
    write_bytes_atomic(b"old", target)

    def crash(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk vanished"):
        write_bytes_atomic(b"new", target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_partition_paths_are_hive_style_and_listed_by_display_name(tmp_path):
    lake = Lake(tmp_path)
    path = lake.table_path("samples", "samples.parquet", "openai/gpt-4o", "my suite")
    assert path.relative_to(tmp_path).as_posix() == "samples/model=openai%2Fgpt-4o/suite=my%20suite/samples.parquet"
    write_parquet_atomic(pa.table({"x": [1]}), path)
    assert lake.partitions("samples") == [("openai/gpt-4o", "my suite")]
    frame = lake.read_partition("samples", "openai/gpt-4o", "my suite")
    assert frame.columns.tolist() == ["model", "suite", "x"]


def test_partition_names_are_recorded_and_merged(tmp_path):
    lake = Lake(tmp_path)
    lake.record_partition_names("model", ["a/b"])
    lake.record_partition_names("model", ["c d", "_hidden?"])
    names = pd.read_parquet(tmp_path / "partition_names" / "model")
    assert dict(zip(names["key"], names["name"])) == {"a%2Fb": "a/b", "c%20d": "c d", "_hidden%3F": "_hidden?"}


def test_leftovers_of_a_killed_writer_are_swept_by_the_next_write(tmp_path):
    """A SIGKILLed process cannot remove its temporary file; the next write in the folder does,
    while temporaries of live processes and of other hosts are left alone."""
    import subprocess
    import sys

    from evalpipeline.lake import _HOST, temp_prefix, write_bytes_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f".tmp-{_HOST}-{dead_pid}-abc.parquet"
    orphan.write_bytes(b"partial")
    orphan_dir = tmp_path / f".tmp-{_HOST}-{dead_pid}-docs"
    (orphan_dir / "sub").mkdir(parents=True)
    live = tmp_path / f"{temp_prefix()}xyz.parquet"
    live.write_bytes(b"mine, in progress")
    foreign = tmp_path / f".tmp-otherhost-{dead_pid}-abc.parquet"
    foreign.write_bytes(b"another machine's")

    assert write_bytes_atomic(b"complete", tmp_path / "table.parquet")
    assert not orphan.exists() and not orphan_dir.exists()
    assert live.exists() and foreign.exists()
    assert (tmp_path / "table.parquet").read_bytes() == b"complete"


def test_a_partial_file_of_a_concurrent_writer_is_not_read(tmp_path):
    """Two runs ingesting one log (`evalpipeline run` splits a model's suites over its workers) stage
    records into the same folders. Found by the 100-model benchmark: one run listed `*.parquet`, read
    the other's half-written record and failed with "Parquet magic bytes not found". A temporary
    must never match what readers list."""
    from evalpipeline.ingest import ingest_paths
    from evalpipeline.lake import AtomicParquetWriter

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    log = landing / "scores.csv"
    log.write_text("model,suite,item_id,score\nm,s1,a,1\nm,s1,b,0\nm,s2,a,1\n")
    first = ingest_paths([log], lake)
    assert first.rows_ingested == 3

    # the other run, mid-write, in both partition folders (this process is alive: the sweep keeps it)
    writers = []
    for suite in ("s1", "s2"):
        writer = AtomicParquetWriter(lake.partition_dir("ingested", "m", suite) / "record-of-another-run.parquet")
        writer.write(pa.table({"log_path": [str(log)], "log_sha256": ["0" * 64]}))
        writers.append(writer)
    partial = [p for p in lake.root.rglob(".tmp-*")]
    assert len(partial) == 2

    log.write_text("model,suite,item_id,score\nm,s1,a,0\nm,s1,b,0\nm,s2,a,1\n")  # edited: staged again
    second = ingest_paths([log], lake)
    assert second.rows_ingested == 3 and not second.file_errors
    assert lake.read_partition("samples", "m", "s1")["score"].tolist() == [0.0, 0.0]
    for writer in writers:
        writer.abort()
    assert not list(lake.root.rglob(".tmp-*"))


def test_summary_cache_recomputes_only_what_changed(tmp_path):
    from evalpipeline.lake import SummaryCache

    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_bytes_atomic(b"one", first)
    write_bytes_atomic(b"two", second)
    cache_path = tmp_path / "cache.json"
    calls = []

    def summaries(version="v1"):
        cache = SummaryCache(cache_path, version)
        values = {
            name: cache.get(
                name,
                [path],
                lambda name=name, path=path: (
                    calls.append(name) or {"bytes": path.read_bytes().decode(), "pair": (1, 2.5)}
                ),
            )
            for name, path in (("a", first), ("b", second))
        }
        cache.save()
        return values

    computed = summaries()
    assert calls == ["a", "b"]
    # values read as they come back from JSON, computed or cached: a run's output cannot depend on the cache
    assert computed == {"a": {"bytes": "one", "pair": [1, 2.5]}, "b": {"bytes": "two", "pair": [1, 2.5]}}
    assert summaries() == computed and calls == ["a", "b"]  # nothing changed: nothing read
    write_bytes_atomic(b"two", second)  # the same bytes: the lake leaves the file alone
    assert summaries() == computed and calls == ["a", "b"]
    write_bytes_atomic(b"TWO", second)  # rewritten: only that one is read again
    assert summaries()["b"]["bytes"] == "TWO" and calls == ["a", "b", "b"]
    first.unlink()  # gone: recomputed (the summariser decides what a missing file means)
    with pytest.raises(FileNotFoundError):
        summaries()
    write_bytes_atomic(b"one", first)
    summaries()
    calls.clear()
    summaries(version="v2")  # other code: nothing of the old cache is used
    assert calls == ["a", "b"]
    cache_path.write_text("{not json")  # unreadable: ignored, everything recomputed and the file replaced
    calls.clear()
    assert summaries(version="v2") == {"a": {"bytes": "one", "pair": [1, 2.5]}, "b": {"bytes": "TWO", "pair": [1, 2.5]}}
    assert calls == ["a", "b"]
    calls.clear()
    summaries(version="v2")
    assert calls == []
    # the file holds only the keys of the last run
    SummaryCache(cache_path, "v2").save()
    assert summaries(version="v2") and calls == ["a", "b"]


def test_lake_files_are_as_readable_as_the_umask_allows(tmp_path):
    """mkstemp creates 0600 files and the rename keeps the mode: a lake written by one account was
    unreadable by any other (a report server, a worker on a shared lake). Each write path now gives
    what ``open`` would: 0644 under umask 022, 0640 under 027. Each umask in its own process (it is
    process-wide)."""
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "import pyarrow as pa\n"
        "os.umask(int(sys.argv[2], 8))\n"
        "from evalpipeline.lake import AtomicParquetWriter, write_bytes_atomic, write_parquet_atomic\n"
        "root = Path(sys.argv[1])\n"
        "write_bytes_atomic(b'x', root / 'a.json')\n"
        "write_parquet_atomic(pa.table({'a': [1]}), root / 'b.parquet')\n"
        "writer = AtomicParquetWriter(root / 'c.parquet')\n"
        "writer.write(pa.table({'a': [1]}))\n"
        "writer.commit()\n"
        "if len(sys.argv) > 3:  # the same bytes again: not rewritten\n"
        "    for name in ('a.json', 'b.parquet', 'c.parquet'):\n"
        "        os.chmod(root / name, 0o600)  # as files written before the fix were\n"
        "    assert not write_bytes_atomic(b'x', root / 'a.json')\n"
        "    assert not write_parquet_atomic(pa.table({'a': [1]}), root / 'b.parquet')\n"
        "    writer = AtomicParquetWriter(root / 'c.parquet')\n"
        "    writer.write(pa.table({'a': [1]}))\n"
        "    assert not writer.commit()\n"
    )
    for umask, mode, again in (("022", 0o644, []), ("027", 0o640, []), ("022", 0o644, ["again"])):
        folder = tmp_path / f"{umask}{''.join(again)}"
        subprocess.run([sys.executable, "-c", script, str(folder), umask, *again], check=True)
        modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
        assert modes == {"a.json": mode, "b.parquet": mode, "c.parquet": mode}, (
            umask,
            {k: oct(v) for k, v in modes.items()},
        )


def test_a_streamed_file_widens_for_a_column_a_later_batch_brings(tmp_path):
    """A source's first chunk may have no value, and so no column, for a covariate its later rows have:
    the file gains the column (null in the earlier rows) rather than failing the source, and keeps its
    schema metadata; a batch that changes a column's type is still refused."""
    import pyarrow.parquet as pq

    from evalpipeline.lake import AtomicParquetWriter

    path = tmp_path / "t.parquet"
    writer = AtomicParquetWriter(path)
    writer.write(pa.table({"item": ["a", "b"]}).replace_schema_metadata({"made_by": "test"}))
    writer.write(pa.table({"item": ["c"], "cov_x": [3.0]}))
    writer.write(pa.table({"item": ["d"]}))
    with pytest.raises((pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError)):
        writer.write(pa.table({"item": ["e"], "cov_x": ["text"]}))
    writer.commit()
    table = pq.read_table(path)
    assert table.column("item").to_pylist() == ["a", "b", "c", "d"]
    assert table.column("cov_x").to_pylist() == [None, None, 3.0, None]
    assert table.schema.metadata == {b"made_by": b"test"} and writer.rows == 4
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temporary left


def test_a_column_with_no_value_is_stored_as_text_not_null(tmp_path):
    """Leaderboards' clt_flag was typed null in a file where no row is flagged and string where one is:
    DuckDB, Polars and pyarrow refuse to read such files as one table."""
    import pyarrow.parquet as pq

    frame = pd.DataFrame({"flag": [None, None], "value": [0.5, float("nan")]})
    write_parquet_atomic(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "a.parquet")
    write_parquet_atomic(pa.table({"flag": ["outside [0, 1]"], "value": [0.25]}), tmp_path / "b.parquet")
    assert pq.read_schema(tmp_path / "a.parquet").field("flag").type == pa.string()
    both = pq.read_table(tmp_path, schema=pq.read_schema(tmp_path / "a.parquet"))
    assert sorted(both.column("flag").to_pylist(), key=lambda v: (v is None, str(v))) == ["outside [0, 1]", None, None]
    assert pd.read_parquet(tmp_path / "a.parquet")["flag"].isna().all()
