from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_LOGS = REPO / "data" / "inspect_logs"


def pytest_collection_modifyitems(config, items):
    """Start the tests marked slow first, in their collected order: pytest-xdist hands tests to its
    workers in this order, and a minutes-long test handed out last would keep one worker busy while
    the others have nothing left to run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    """A landing folder of three small Inspect logs (tests.helpers.dagster.make_unit_landing), one per
    test module."""
    from tests.helpers.dagster import make_unit_landing

    return make_unit_landing(tmp_path_factory.mktemp("landing"))


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """Never let a test write to the real data/lake or dagster_home."""
    env = tmp_path_factory.mktemp("env")
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(env / "lake"))
    monkeypatch.setenv("DAGSTER_HOME", str(env / "dagster_home"))
    (env / "dagster_home").mkdir()
    return env


@pytest.fixture(scope="session", autouse=True)
def shared_jax_cache(tmp_path_factory):
    """One persistent JAX compilation cache for the whole session, as one lake would have: tests
    that fit GLMs in separate lakes (and processes) compile each sampler once."""
    import os

    base = tmp_path_factory.getbasetemp()
    # under pytest-xdist every worker has its own basetemp inside one shared root: share the cache
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax_cache"
    cache.mkdir(exist_ok=True)
    previous = os.environ.get("EVALPIPELINE_JAX_CACHE")
    os.environ["EVALPIPELINE_JAX_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("EVALPIPELINE_JAX_CACHE", None)
    else:
        os.environ["EVALPIPELINE_JAX_CACHE"] = previous


@pytest.fixture(autouse=True)
def no_leaked_dagster_instance():
    """Fail the test that leaves a Dagster instance entered in the defs-state context variable
    (e.g. a schedule or sensor context used without ``with``): every later test that resolves
    Definitions would then raise 'Attempted to resolve undefined DagsterInstance weakref'."""
    yield
    import sys

    if "dagster" not in sys.modules:
        return
    from dagster._core.storage.defs_state.base import DefsStateStorage

    leaked = DefsStateStorage.get()
    if leaked is not None:
        from dagster._core.storage.defs_state.base import _current_storage

        _current_storage.set(None)  # so that one leak fails one test, not all that follow
        pytest.fail(
            f"the test left a Dagster instance entered (defs-state storage {leaked!r}); "
            "use schedule/sensor contexts and instances as context managers"
        )
