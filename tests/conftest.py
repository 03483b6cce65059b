from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_LOGS = REPO / "data" / "inspect_logs"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """Never let a test write to the real data/lake or dagster_home."""
    env = tmp_path_factory.mktemp("env")
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(env / "lake"))
    monkeypatch.setenv("DAGSTER_HOME", str(env / "dagster_home"))
    (env / "dagster_home").mkdir()
    return env
