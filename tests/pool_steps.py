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

    return {"modules": sorted(m for m in ("evalpipeline.definitions", "great_expectations") if m in sys.modules),
            "parent": os.getppid()}


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
