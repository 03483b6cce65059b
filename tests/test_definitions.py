"""The code location as Dagster loads it: every asset described, grouped and owned, retried on
transient failures only, every fit asset checked and versioned, the library free of Dagster imports."""

import pytest
from dagster import Definitions

from evalpipeline.definitions import defs
from tests.conftest import REPO


README = "\n".join(
    p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
)  # the README and docs/


def test_code_location_loads_and_every_asset_is_described():
    """The UI as users meet it: every asset has a description, a group, owners and kinds, and
    every table asset a column schema; groups follow the pipeline's stages."""
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {
        "eval_samples",
        "accuracy_posteriors",
        "suite_leaderboard",
        "ingest_accounting",
        "waic_rankings",
        "glm_binomial",
        "glm_beta_binomial",
        "glm_null",
        "glm_item_difficulty",
    } <= keys
    groups = set()
    for spec in defs.resolve_all_asset_specs():
        assert spec.description and len(spec.description) > 60, spec.key
        assert spec.group_name and spec.group_name != "default", spec.key
        groups.add(spec.group_name)
        assert spec.owners and spec.kinds, spec.key
        if "parquet" in spec.kinds:
            schema = spec.metadata.get("dagster/column_schema")
            assert schema is not None and schema.columns, spec.key
            assert all(column.description for column in schema.columns), spec.key
    assert groups <= {"ingest", "validate", "fit", "compare", "report"}
    assert {"ingest", "validate", "fit", "compare"} <= groups
    assert "evalpipeline" not in {m.split(".")[0] for m in _dagster_importers()}


def test_every_asset_retries_transient_failures_with_backoff_but_not_bad_input():
    from dagster import Backoff, Failure

    from assets.errors import permanent_errors
    from evalpipeline.steps.samples import NoDataError

    for assets_def in defs.assets:
        policy = assets_def.op.retry_policy
        assert policy is not None and policy.max_retries >= 2 and policy.backoff == Backoff.EXPONENTIAL, assets_def.key
    # the waits the README states ("after 5 s, then 15 s, each ±5 s"), as Dagster computes them
    from dagster._core.definitions.policy import calculate_delay

    from assets.errors import TRANSIENT_RETRY as policy

    assert [calculate_delay(n, policy.backoff, None, policy.delay) for n in (1, 2)] == [5, 15]
    assert policy.max_retries == 2 and policy.delay == 5 and "after 5 s, then 15 s, each ±5 s" in README
    jittered = [calculate_delay(2, policy.backoff, policy.jitter, policy.delay) for _ in range(200)]
    assert 10 <= min(jittered) and max(jittered) <= 20
    with pytest.raises(Failure) as failure:
        with permanent_errors():
            raise NoDataError("no sources for model 'x'")
    assert failure.value.allow_retries is False and "no sources" in failure.value.description
    with pytest.raises(OSError):  # transient: propagates to the retry policy
        with permanent_errors():
            raise OSError("share busy")
    for deterministic in (TypeError("unsupported operand"), KeyError("cov_x"), IndexError("out of range")):
        with pytest.raises(Failure) as failure:  # the same input and code raise it again: not retried
            with permanent_errors():
                raise deterministic
        assert failure.value.allow_retries is False and type(deterministic).__name__ in failure.value.description


def test_every_fit_asset_has_diagnostic_checks_and_a_code_version():
    from assets.fits import PARTITION_GLM_ASSETS, SUITE_GLM_ASSETS

    for assets_def in PARTITION_GLM_ASSETS + SUITE_GLM_ASSETS:
        checks = {spec.name: spec for spec in assets_def.check_specs}
        assert set(checks) == {"divergences", "r_hat", "ess_bulk", "ess_tail", "bfmi", "pareto_k"}
        assert all(checks[name].blocking for name in ("divergences", "r_hat", "ess_bulk", "ess_tail", "bfmi"))
        assert not checks["pareto_k"].blocking
        (version,) = set(assets_def.code_versions_by_key.values())
        assert version
        assert assets_def.op.pool == "fit"
    from assets.reliability import model_reliability, reliability

    assert reliability.op.pool == model_reliability.op.pool == "fit"  # HIP-LLM fits share the cores too


def _dagster_importers():
    """Modules of the library (other than the composition root) that import dagster."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "evalpipeline"
    pattern = re.compile(r"^\s*(import|from) dagster", re.M)
    return [str(p) for p in root.rglob("*.py") if p.name != "definitions.py" and pattern.search(p.read_text())]


def test_the_compilation_cache_bound_comes_from_the_resource_or_the_environment(monkeypatch):
    from resources.fit import CACHE_MAX_ENV, DEFAULT_CACHE_MAX_MB, GlmSettings

    monkeypatch.delenv(CACHE_MAX_ENV, raising=False)
    assert GlmSettings().cache_max_bytes() == DEFAULT_CACHE_MAX_MB * 2**20
    monkeypatch.setenv(CACHE_MAX_ENV, "300")
    assert GlmSettings().cache_max_bytes() == 300 * 2**20
    assert GlmSettings(cache_max_mb=64).cache_max_bytes() == 64 * 2**20
    for bad in ("2GB", "-5"):
        monkeypatch.setenv(CACHE_MAX_ENV, bad)
        with pytest.raises(ValueError, match=rf"\$EVALPIPELINE_JAX_CACHE_MAX_MB = '{bad}': .* whole number of MiB"):
            GlmSettings().cache_max_bytes()
