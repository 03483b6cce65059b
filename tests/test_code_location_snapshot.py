"""The code location's shape against a checked-in snapshot (tests/snapshots/code_location.json): its
asset keys with their groups and partitioning, asset checks, jobs, schedules and sensors. A change
to any of them shows up here as a reviewable diff of that file; regenerate it after a deliberate
change with

    EVALPIPELINE_UPDATE_SNAPSHOT=1 .venv/bin/python -m pytest tests/test_code_location_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "snapshots" / "code_location.json"
UPDATE_ENV = "EVALPIPELINE_UPDATE_SNAPSHOT"


def _partitioning(partitions_def) -> str | None:
    if partitions_def is None:
        return None
    dimensions = getattr(partitions_def, "partition_dimension_names", None)
    if dimensions:
        return " x ".join(dimensions)
    return getattr(partitions_def, "name", None) or type(partitions_def).__name__


def code_location_shape() -> dict:
    from evalpipeline.definitions import defs

    repository = defs.get_repository_def()
    graph = defs.resolve_asset_graph()
    checks: dict[str, list[str]] = {}
    for check in graph.asset_check_keys:
        checks.setdefault(check.asset_key.to_user_string(), []).append(check.name)
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "partitioned_by": _partitioning(node.partitions_def),
            "checks": sorted(checks.get(key.to_user_string(), [])),
        }
    return {
        "assets": assets,
        "jobs": sorted(job.name for job in repository.get_all_jobs() if not job.name.startswith("__")),
        "schedules": {
            s.name: {"cron": s.cron_schedule, "timezone": s.execution_timezone, "job": s.job_name}
            for s in sorted(repository.schedule_defs, key=lambda s: s.name)
        },
        "sensors": {s.name: type(s).__name__ for s in sorted(repository.sensor_defs, key=lambda s: s.name)},
    }


def _differences(now, stored, where: str = "") -> list[str]:
    """What the code location has (+) or lacks (-) against the snapshot, one line a difference."""
    if isinstance(now, dict) and isinstance(stored, dict):
        lines = []
        for key in sorted(set(now) | set(stored)):
            here = f"{where}.{key}" if where else key
            if key not in stored:
                lines.append(f"+ {here}")
            elif key not in now:
                lines.append(f"- {here}")
            else:
                lines += _differences(now[key], stored[key], here)
        return lines
    if isinstance(now, list) and isinstance(stored, list):
        return [f"+ {where}: {item}" for item in now if item not in stored] + [
            f"- {where}: {item}" for item in stored if item not in now
        ]
    return [] if now == stored else [f"~ {where}: {stored!r} -> {now!r}"]


def test_the_code_location_matches_its_snapshot():
    shape = code_location_shape()
    text = json.dumps(shape, indent=2, sort_keys=True) + "\n"
    if os.environ.get(UPDATE_ENV):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(text)
    how = (
        f"the code location changed (assets, checks, jobs, schedules or sensors); if that is intended, "
        f"regenerate {SNAPSHOT.relative_to(SNAPSHOT.parents[2])} with\n    {UPDATE_ENV}=1 "
        f".venv/bin/python -m pytest tests/test_code_location_snapshot.py\nand review its diff"
    )
    assert SNAPSHOT.exists(), how
    stored = json.loads(SNAPSHOT.read_text())
    differences = _differences(shape, stored)
    assert not differences, "\n".join(differences) + "\n" + how
