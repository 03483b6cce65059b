"""Step functions for WorkerPool tests: importable by worker processes, spawned or forked (a test module's
local functions are not)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def die_or_finish(job_name: str, keys: list[str], root: str, assets=None) -> tuple[bool, float, list[str]]:
    """``job_name`` "die": exit as if SIGKILLed once the sibling step runs; "finish": succeed, after
    a minute the first time (so that the sibling dies while it runs), at once after. Each call
    leaves its pid in ``keys[0]``."""
    folder = Path(keys[0])
    first = not list(folder.glob(f"{job_name}-*.pid"))
    (folder / f"{job_name}-{os.getpid()}.pid").write_text(str(os.getpid()))
    if job_name == "die":
        deadline = time.monotonic() + 60
        while not list(folder.glob("finish-*.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(9)
    if first:
        time.sleep(60)
    return True, 0.0, []


def preloaded() -> dict:
    """What this worker had imported before running anything of its own, and its parent process."""
    import sys

    return {
        "modules": sorted(m for m in ("evalpipeline.definitions", "great_expectations") if m in sys.modules),
        "parent": os.getppid(),
    }


def environment(name: str) -> str | None:
    """``$name`` as this worker sees it."""
    return os.environ.get(name)


class _SlowToSend(str):
    """A line whose pickling (the worker sending its result to the pool) takes ten seconds."""

    def __reduce__(self):
        time.sleep(10)
        return (str, (str(self),))


def finished_unsent(job_name: str, keys: list[str], root: str, assets=None) -> tuple[bool, float, list[str]]:
    """``job_name`` "finish": succeed, with a result that takes ten seconds to send; "die": exit as if
    SIGKILLed a second after the sibling finished, while it sends. Each call leaves its pid in ``keys[0]``."""
    folder = Path(keys[0])
    (folder / f"{job_name}-{os.getpid()}.pid").write_text(str(os.getpid()))
    if job_name == "die":
        deadline = time.monotonic() + 60
        while not (folder / "finished").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        os._exit(9)
    (folder / "finished").write_text("")
    return True, 0.5, [_SlowToSend("    the finished step's own line")]


def die_and_finish_in_a_pool(folder: str) -> dict:
    """Run a "die" and a "finish" step (:func:`die_or_finish`) side by side in a fresh ``WorkerPool`` of
    two, as ``evalpipeline run`` runs its steps; returns the outcomes, the printed lines, the pids each
    job ran in and, for each call of ``on_lost_workers``, whether those processes were alive.
    ``python -m tests.helpers.pool_steps FOLDER`` prints it as JSON (what the pool test runs)."""
    import types

    from resources.run.pool import WorkerPool, run_steps
    from evalpipeline.lake import process_alive

    def pids(job: str) -> list[int]:
        return [int(p.read_text()) for p in Path(folder).glob(f"{job}-*.pid")]

    lost_calls, lines = [], []

    def on_lost_workers():  # what the job does here: mark the runs of dead processes failed
        lost_calls.append([process_alive(pid) for pid in pids("die") + pids("finish")])

    steps = [(1, "die", [folder], "dies", None), (2, "finish", [folder], "finishes", None)]
    pool = WorkerPool(2)
    try:
        outcomes = run_steps(
            steps,
            2,
            lines.append,
            pool=pool,
            instance=types.SimpleNamespace(root_directory=""),
            on_lost_workers=on_lost_workers,
            block=die_or_finish,
        )
    finally:
        pool.shutdown()
    return {
        "ok": [outcome.ok for outcome in outcomes],
        "lines": lines,
        "die": pids("die"),
        "finish": pids("finish"),
        "lost_calls": lost_calls,
    }


if __name__ == "__main__":
    import json
    import sys

    from tests.helpers import pool_steps  # the steps pickled by their module's name, not as __main__'s

    print(json.dumps(pool_steps.die_and_finish_in_a_pool(sys.argv[1])))
