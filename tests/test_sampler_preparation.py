"""Samplers prepared ahead of the night a new LLM joins: the main job and the daemon's sensor prepare
what suite fits ask for, and a preparation that fails says which."""

import json
import os

import pytest
from dagster import DagsterInstance, SkipReason, build_sensor_context

from evalpipeline.definitions import defs
from resources.run.loop import run_main_job
from resources import LakeResource
from tests.helpers.dagster import small_project


def _quiz_log(model: str, skill: float, seed: int) -> str:
    import numpy as np

    rng = np.random.default_rng(seed)
    difficulty = np.random.default_rng(0).normal(0.0, 1.0, 30)  # the same items for every model
    scores = rng.random(30) < 1 / (1 + np.exp(-(skill - difficulty)))
    rows = [f"{model},quiz,q{i},{int(s)},d,quiz" for i, s in enumerate(scores)]
    return "model,suite,item_id,score,domain,subdomain\n" + "\n".join(rows) + "\n"


@pytest.mark.slow
def test_the_main_job_prepares_the_samplers_suite_fits_ask_for(tmp_path, monkeypatch, capsys):
    """A suite fit whose warm refit after one LLM more would compile a sampler asks for it; the main job
    then runs `prepare_samplers` in its model stage, and the night that LLM joins the suite's warm refit
    loads that sampler instead of tracing it. Its outputs are those of a job without the preparation."""
    from evalpipeline.steps.fits import read_outcome
    from evalpipeline.models import fit as fit_module
    from evalpipeline.models.fit import preparation_requests

    models = {"alpha": 1.0, "beta": 0.0, "gamma": -0.5}
    small_project(
        tmp_path, monkeypatch, {f"{m}.csv": _quiz_log(m, skill, i) for i, (m, skill) in enumerate(models.items())}
    )
    config = (
        '[glm]\nmodels = ["suite_binomial"]\nnum_warmup = 300\nnum_samples = 500\nprepare_samplers_from = {}\n'
        "[glm.thresholds]\nmin_ess_bulk = 100\nmin_ess_tail = 100\nmax_r_hat = 1.05\n"
    )
    (tmp_path / "evalpipeline.toml").write_text(config.format(1))
    assert run_main_job() == 0
    out = capsys.readouterr().out
    assert "prepare_samplers warm samplers the suite fits asked for: ok" in out and "FAILED" not in out, out
    programs = defs.resources["glm_settings"].program_cache(tmp_path / "lake")  # the tests' shared cache
    assert list(programs.glob("nuts-*.zip")) and not preparation_requests(programs, tmp_path / "lake")
    fit_dir = tmp_path / "lake" / "glm_suite_fits" / "suite=quiz" / "suite_binomial"
    assert read_outcome(fit_dir).passed

    (tmp_path / "landing" / "delta.csv").write_text(_quiz_log("delta", 0.5, 7))
    (tmp_path / "evalpipeline.toml").write_text(config.format(0))  # this night asks for nothing more
    traced = fit_module._build_runner

    def build(*args, warm=False, **kwargs):
        assert not warm, "the prepared warm sampler was traced again"
        return traced(*args, warm=warm, **kwargs)

    monkeypatch.setattr(fit_module, "_build_runner", build)
    assert run_main_job(only_changed=True) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "prepare_samplers" not in out, out
    refit = read_outcome(fit_dir)
    assert refit.metadata["start"] == "warm" and "delta" in set(refit.summary["model"].dropna())


def test_the_sampler_sensor_requests_one_preparation_per_set_of_this_lakes_requests(tmp_path):
    """The daemon's path to `prepare_samplers`: no request, no run; this lake's requests, one run per
    set of them (the run key), and none for another lake's requests in a shared cache."""
    from dagster import RunRequest

    from assets.samplers import sampler_requests
    from resources.fit import GlmSettings

    lake = tmp_path / "lake"
    settings = GlmSettings(compilation_cache_dir=str(tmp_path / "cache"))
    resources = {"lake": LakeResource(root=str(lake)), "glm_settings": settings}

    def evaluate():
        with build_sensor_context(instance=DagsterInstance.ephemeral(), resources=resources) as context:
            return sampler_requests(context)

    assert isinstance(evaluate(), SkipReason)
    requests = settings.program_cache(lake) / "requests"
    requests.mkdir(parents=True)
    (requests / "other.json").write_text(
        json.dumps({"suite": "s", "glm": "suite_binomial", "lake": str(tmp_path / "x")})
    )
    assert isinstance(evaluate(), SkipReason)
    (requests / "ours.json").write_text(
        json.dumps({"suite": "s", "glm": "suite_binomial", "lake": str(lake.resolve())})
    )
    first = evaluate()
    assert isinstance(first, RunRequest) and first.run_key == evaluate().run_key  # the same requests: one run
    (requests / "ours.json").write_text(
        json.dumps({"suite": "t", "glm": "suite_binomial", "lake": str(lake.resolve())})
    )
    os.utime(requests / "ours.json", ns=(10**18, 10**18))
    assert evaluate().run_key != first.run_key  # asked again (a later fit): another run


def test_a_preparation_that_fails_fails_its_run_and_says_which(tmp_path):
    """`prepare_samplers` lists what it did in its metadata; a request it cannot prepare is removed (a fit
    that still needs one asks again) and fails the run, naming the suite, the GLM and the error."""
    import numpy as np

    from assets.samplers import prepare_samplers
    from evalpipeline.lake import Lake
    from resources.fit import GlmSettings
    from tests.test_comparison import planted_scores, write_samples

    lake = tmp_path / "lake"
    write_samples(Lake(lake), "m1", "quiz", planted_scores(np.random.default_rng(1), np.zeros(5), 0.0))
    settings = GlmSettings(compilation_cache_dir=str(tmp_path / "cache"))
    requests = settings.program_cache(lake) / "requests"
    requests.mkdir(parents=True)
    (requests / "a.json").write_text(json.dumps({"suite": "quiz", "glm": "no_such_glm", "lake": str(lake.resolve())}))
    resources = {"lake": LakeResource(root=str(lake)), "glm_settings": settings}
    result = prepare_samplers.execute_in_process(
        resources=resources, raise_on_error=False, instance=DagsterInstance.ephemeral()
    )
    assert not result.success and not list(requests.iterdir())
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "1 of 1 sampler(s) could not be prepared: no_such_glm on suite quiz: failed:" in message, message
    (requests / "b.json").write_text(
        json.dumps({"suite": "gone", "glm": "suite_binomial", "lake": str(lake.resolve())})
    )
    result = prepare_samplers.execute_in_process(resources=resources, instance=DagsterInstance.ephemeral())
    assert result.output_for_node("prepare_warm_samplers") == 1 and not list(requests.iterdir())  # handled: skipped
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    table = output.event_specific_data.metadata["samplers"].value
    assert "| gone | suite_binomial |" in table and "skipped: no sample tables for suite 'gone'" in table, table
