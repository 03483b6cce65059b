"""Where the pipeline reads from and writes to.

Both locations are plain paths, relative to the current working directory
unless absolute, and each is overridable by an environment variable so that
the CLI, the tests and the Dagster code location agree without arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

LAKE_ENV = "EVALPIPELINE_LAKE"
DEFAULT_LAKE = "data/lake"

LANDING_ENV = "EVALPIPELINE_LANDING"
DEFAULT_LANDING = "data/inspect_logs"

#: The executor of the runs the daemon, the UI and `dagster job launch` start (resources/executors.py).
#: Read here too because `evalpipeline run` sets it aside: its runs execute in its own processes.
EXECUTOR_ENV = "EVALPIPELINE_EXECUTOR"


def _setting(variable: str, default: str) -> Path:
    """``$variable`` as a path, or ``default`` when it is unset, empty or only spaces (a lake ``' '``
    was a second, empty lake in a folder named by a space)."""
    value = os.environ.get(variable) or ""
    return Path(value if value.strip() else default)


def lake_root() -> Path:
    """The lake root: ``$EVALPIPELINE_LAKE`` or ``data/lake``."""
    return _setting(LAKE_ENV, DEFAULT_LAKE)


def landing_root() -> Path:
    """The folder of incoming eval logs: ``$EVALPIPELINE_LANDING`` or ``data/inspect_logs``."""
    return _setting(LANDING_ENV, DEFAULT_LANDING)


def landing_overlaps_lake(landing: Path, lake: Path) -> str | None:
    """Why logs cannot be read from ``landing`` into ``lake`` (None: they can): one holds the other, so
    the lake's own tables would be read as logs (``data`` for ``data/inspect_logs`` made 282 unreadable-file
    records and partitions named after the lake's columns)."""
    landing, lake = Path(landing).resolve(), Path(lake).resolve()
    if landing == lake or landing in lake.parents:
        return f"the landing folder {landing} holds the lake {lake}: the lake's tables would be read as logs"
    if lake in landing.parents:
        return f"the landing folder {landing} is inside the lake {lake}: its tables would be read as logs"
    return None
