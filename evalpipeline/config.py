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


def lake_root() -> Path:
    """The lake root: ``$EVALPIPELINE_LAKE`` or ``data/lake``."""
    return Path(os.environ.get(LAKE_ENV) or DEFAULT_LAKE)


def landing_root() -> Path:
    """The folder of incoming eval logs: ``$EVALPIPELINE_LANDING`` or ``data/inspect_logs``."""
    return Path(os.environ.get(LANDING_ENV) or DEFAULT_LANDING)
