"""Where the pipeline reads from and writes to, and where its configuration file is.

The lake and the landing folder are plain paths, relative to the current working directory
unless absolute, and each is overridable by an environment variable so that the CLI, the tests
and the Dagster code location agree without arguments. The configuration file is read here
(:func:`read_config`); :mod:`evalpipeline.settings` turns its tables into each domain's settings.
"""

from __future__ import annotations

import os
import tomllib
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


CONFIG_ENV = "EVALPIPELINE_CONFIG"
DEFAULT_CONFIG = "evalpipeline.toml"


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""


def config_path() -> Path | None:
    """``$EVALPIPELINE_CONFIG``, else ``evalpipeline.toml`` here if it exists, else None."""
    if (os.environ.get(CONFIG_ENV) or "").strip():  # one of spaces is unset, as an empty one
        return Path(os.environ[CONFIG_ENV])
    path = Path(DEFAULT_CONFIG)
    return path if path.exists() else None


def read_config(path: Path, label: str | None = None) -> dict:
    """Every table of the configuration file at ``path``; ConfigError naming the file (as ``label``,
    e.g. the option that named it, when given) if it is missing, a folder, unreadable, not UTF-8 or
    not valid TOML."""
    where = label or str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{where}: configuration file not found") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{where}: is a folder, not a configuration file") from exc
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the configuration file: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{where}: not UTF-8 text (TOML must be): byte 0x{data[exc.start]:02x} on line {line}"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from exc


def check_named_config(option: str | None = None) -> Path | None:
    """The configuration file that ``--config`` (``option``) or ``$EVALPIPELINE_CONFIG`` names, read once
    so that one that cannot be read is refused naming the option or the variable with the path, before
    any work (else :func:`config_path`). The rest of the file is :func:`check_config`'s."""
    if option:
        path, label = Path(option), f"--config {option}"
    elif os.environ.get(CONFIG_ENV):
        path, label = Path(os.environ[CONFIG_ENV]), f"{CONFIG_ENV}={os.environ[CONFIG_ENV]!r}"
    else:
        return config_path()
    read_config(path, label)
    return path
