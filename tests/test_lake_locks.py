"""Locks between runs writing one lake: staging a shared source once, one partition rebuilt at a time.

The race these guard against is a new-model night: the model's
one long table held six suites, split over two worker runs; both staged it and both rebuilt every
partition it touched, and one run's Data Docs swap failed ("Directory not empty") and was retried.
"""

import multiprocessing
import os
import signal
import threading
import time

import pandas as pd
import pytest

from evalpipeline.lake import Lake
from evalpipeline.steps.samples import ingest_partitions, partition_validator

SUITES = ["s0", "s1", "s2", "s3"]


def _hold_then_mark(lake_root, marker, ready, hold_seconds):
    lake = Lake(lake_root)
    with lake.partition_lock("m", "s"):
        open(ready, "w").close()
        open(marker, "w").close()
        time.sleep(hold_seconds)


def _acquire(lock, done: threading.Event):
    with lock:
        done.set()


def test_a_lock_excludes_another_process_until_released_and_a_killed_holder_releases_it(tmp_path):
    lake = Lake(tmp_path / "lake")
    ctx = multiprocessing.get_context("spawn")
    ready = tmp_path / "ready"
    holder = ctx.Process(target=_hold_then_mark, args=(str(lake.root), str(tmp_path / "held"), str(ready), 60))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and holder.is_alive(), "the holder never took the lock"
            time.sleep(0.05)
        done = threading.Event()
        waiter = threading.Thread(target=_acquire, args=(lake.partition_lock("m", "s"), done), daemon=True)
        waiter.start()
        assert not done.wait(1.5)  # held by the other process: we wait
        os.kill(holder.pid, signal.SIGKILL)  # a run killed mid-write
        assert done.wait(10), "a killed holder's lock must be released"
    finally:
        holder.kill()
        holder.join()
    # another name is another lock; the lock files change no byte or mtime when taken again
    with lake.partition_lock("m", "other"), lake.source_lock(tmp_path / "x.parquet"):
        pass
    files = sorted((lake.root / ".locks").iterdir())
    stamps = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files}
    time.sleep(0.02)
    for model, suite in (("m", "s"), ("m", "other")):
        with lake.partition_lock(model, suite):
            pass
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files} == stamps
    assert all(size == 0 for size, _ in stamps.values())


def _landing(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [
        {
            "model": "m",
            "suite": s,
            "item_id": f"q{i}",
            "score": float((i + j) % 2),
            "domain": "d",
            "subdomain": f"sub{i % 2}",
        }
        for j, s in enumerate(SUITES)
        for i in range(40)
    ]
    pd.DataFrame(rows).to_parquet(landing / "m.parquet")
    return landing


def _ingest(lake_root, landing, suites, barrier, out):
    lake = Lake(lake_root)
    barrier.wait()  # both runs look at the landing folder at once, as the two workers of one night do
    messages = []
    report = ingest_partitions(
        lake, landing, [("m", s) for s in suites], validator=partition_validator(lake), progress=messages.append
    )
    with open(out, "w") as handle:
        handle.write(f"{report.files_seen}\n" + "\n".join(messages))


@pytest.mark.slow
def test_two_runs_given_partitions_of_one_source_stage_it_once_and_both_succeed(tmp_path):
    landing = _landing(tmp_path)
    lake = Lake(tmp_path / "lake")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    runs = [
        ctx.Process(target=_ingest, args=(str(lake.root), landing, part, barrier, str(out)))
        for part, out in zip((SUITES[:2], SUITES[2:]), outs)
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join(240)
    assert [run.exitcode for run in runs] == [0, 0]  # neither failed (the Data Docs swap raced before)
    seen = [int(out.read_text().splitlines()[0]) for out in outs]
    assert sorted(seen) == [0, 1], f"the shared source must be read once, not by each run: {seen}"
    # the tables are those of one ingest of everything, run alone
    alone = Lake(tmp_path / "alone")
    ingest_partitions(alone, landing, [("m", s) for s in SUITES], validator=partition_validator(alone))
    for suite in SUITES:
        pd.testing.assert_frame_equal(
            lake.read_partition("samples", "m", suite), alone.read_partition("samples", "m", suite)
        )
        assert (lake.partition_dir("validation/data_docs", "m", suite) / "index.html").is_file()
        assert not lake.failed_validation("m", suite)


def _ingest_reporting(lake_root, landing, suites, progress_file):
    lake = Lake(lake_root)

    def say(message):
        with open(progress_file, "a") as handle:
            handle.write(message + "\n")

    ingest_partitions(lake, landing, [("m", s) for s in suites], validator=partition_validator(lake), progress=say)


@pytest.mark.slow
def test_a_partition_is_rebuilt_only_while_no_other_run_rebuilds_it(tmp_path):
    landing = _landing(tmp_path)
    lake = Lake(tmp_path / "lake")
    progress = tmp_path / "progress.txt"
    table = lake.table_path("samples", "samples.parquet", "m", "s1")
    ctx = multiprocessing.get_context("spawn")
    with lake.partition_lock("m", "s1"):  # another run rebuilding m x s1
        run = ctx.Process(target=_ingest_reporting, args=(str(lake.root), landing, ["s1"], str(progress)))
        run.start()
        deadline = time.monotonic() + 120
        # the source holds s0 to s3; they are rebuilt in order, s0 (no other holder) first
        while not lake.table_path("samples", "samples.parquet", "m", "s0").exists():
            assert time.monotonic() < deadline and run.is_alive(), "the run never rebuilt m x s0"
            time.sleep(0.05)
        time.sleep(2.0)
        assert not table.exists()  # it waits for the lock on m x s1
    run.join(120)
    assert run.exitcode == 0 and len(lake.read_partition("samples", "m", "s1")) == 40
