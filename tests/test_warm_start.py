"""Warm-started refits (evalpipeline/models/warm.py, fit_glm(warm=...), fits.previous_warm_state): the
labelled state maps onto a new layout exactly, a warm refit has the cold refit's posterior, and the
lake keeps the state a killed run would rerun from."""

import json

import numpy as np
import pandas as pd
import pytest

from evalpipeline.models import warm as warm_start
from evalpipeline.models.warm import WarmStart, WarmStartMismatch

OPTIONS = {"group_mean_basis": True}


def _out(chains=2):
    """A sampler's end state as fit._build_runner returns it: ``model_rest_raw`` over 3 real LLMs padded
    to 4, a scalar ``sigma_model`` (the diagonal block's coordinates in sorted order), a dense block over
    ``overall`` and ``model_mean_raw``."""
    position = np.array([[1.0, 2.0, 3.0, 9.0], [4.0, 5.0, 6.0, 9.0]])[:chains]
    return {
        "last_z": {
            "model_rest_raw": position,
            "sigma_model": np.array([-1.0, -2.0])[:chains],
            "overall": np.array([0.5, 0.6])[:chains],
            "model_mean_raw": np.array([[0.1], [0.2]])[:chains],
        },
        "inverse_mass": {
            "model_rest_raw|sigma_model": np.array([[0.1, 0.2, 0.3, 1.5, 0.7], [0.4, 0.5, 0.6, 1.5, 0.8]])[:chains],
            "overall|model_mean_raw": np.array([[[2.0, 0.5], [0.5, 3.0]], [[4.0, 1.0], [1.0, 5.0]]])[:chains],
        },
        "final_step_size": np.array([0.25, 0.3])[:chains],
    }


SHAPES = {"model_rest_raw": (4,), "sigma_model": (), "overall": (), "model_mean_raw": (1,)}
BLOCK = ("overall", "model_mean_raw")


def _axes(site):
    return ("model",) if site == "model_rest_raw" else ()


def _captured(labels=("a", "c", "d")):
    return warm_start.capture(_out(), "suite_binomial", OPTIONS, SHAPES, BLOCK, _axes, lambda axis: list(labels))


def test_a_captured_state_round_trips_through_json_and_keeps_real_coordinates_only():
    state = _captured()
    assert state.sites["model_rest_raw"]["labels"] == [["a", "c", "d"]]
    assert state.sites["model_rest_raw"]["position"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]  # the padded slot dropped
    np.testing.assert_allclose(state.sites["model_rest_raw"]["inverse_mass"], [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    np.testing.assert_allclose(state.sites["sigma_model"]["inverse_mass"], [[0.7], [0.8]])
    assert state.block["sites"] == list(BLOCK) and state.step_size == [0.25, 0.3]
    assert WarmStart.from_json(state.to_json()) == state
    with pytest.raises(WarmStartMismatch, match="format"):
        WarmStart.from_json(json.dumps({**json.loads(state.to_json()), "format": 99}).encode())
    with pytest.raises(WarmStartMismatch, match="not a warm-start state"):
        WarmStart.from_json(b"{not json")


def test_a_joining_llm_starts_at_its_sites_median_and_padded_slots_at_the_prior():
    """The new LLM "b" sorts between "a" and "c": every known LLM keeps its own position and inverse mass
    (by label, not by slot), "b" gets the chain's medians, the padded slot 0 and 1."""
    state = _captured()
    shapes = dict(SHAPES, model_rest_raw=(6,))
    starts, diagonals, block_mass, step = warm_start.arguments(
        state, "suite_binomial", OPTIONS, shapes, BLOCK, lambda axis: ["a", "b", "c", "d"], chains=2
    )
    np.testing.assert_allclose(starts["model_rest_raw"], [[1, 2, 2, 3, 0, 0], [4, 5, 5, 6, 0, 0]])
    np.testing.assert_allclose(
        diagonals["model_rest_raw"], [[0.1, 0.2, 0.2, 0.3, 1, 1], [0.4, 0.5, 0.5, 0.6, 1, 1]], rtol=1e-6
    )
    np.testing.assert_allclose(starts["sigma_model"], [-1.0, -2.0])
    np.testing.assert_allclose(diagonals["sigma_model"], [[0.7], [0.8]], rtol=1e-6)
    assert "overall" not in diagonals and "model_mean_raw" not in diagonals  # in the dense block
    np.testing.assert_allclose(block_mass, [[[2.0, 0.5], [0.5, 3.0]], [[4.0, 1.0], [1.0, 5.0]]])
    np.testing.assert_allclose(step, [0.25, 0.3])
    # an LLM that left ("a") is dropped; the others keep their values
    starts, _, _, _ = warm_start.arguments(
        state, "suite_binomial", OPTIONS, SHAPES, BLOCK, lambda axis: ["c", "d"], chains=2
    )
    np.testing.assert_allclose(starts["model_rest_raw"], [[2, 3, 0, 0], [5, 6, 0, 0]])


def test_pooled_tuning_gives_every_chain_the_mean_mass_matrix_and_step_size_and_its_own_position():
    """FitSettings.warm_tuning = "pooled": the chains' inverse masses (after the relabelling: the joining
    LLM's medians, the padded slots' 1) and dense blocks and step sizes are averaged over the chains; the
    positions stay each chain's own."""
    state = _captured()
    shapes = dict(SHAPES, model_rest_raw=(6,))
    labels = lambda axis: ["a", "b", "c", "d"]  # noqa: E731
    own = warm_start.arguments(state, "suite_binomial", OPTIONS, shapes, BLOCK, labels, chains=2)
    starts, diagonals, block_mass, step = warm_start.arguments(
        state, "suite_binomial", OPTIONS, shapes, BLOCK, labels, chains=2, pooled=True
    )
    for site in starts:
        np.testing.assert_array_equal(starts[site], own[0][site])
    np.testing.assert_allclose(diagonals["model_rest_raw"], [[0.25, 0.35, 0.35, 0.45, 1, 1]] * 2, rtol=1e-6)
    np.testing.assert_allclose(diagonals["sigma_model"], [[0.75]] * 2, rtol=1e-6)
    np.testing.assert_allclose(block_mass, [[[3.0, 0.75], [0.75, 4.0]]] * 2)
    np.testing.assert_allclose(step, [0.275, 0.275], rtol=1e-6)
    assert step.dtype == np.float32 and block_mass.dtype == np.float32
    assert all(diagonals[s].dtype == own[1][s].dtype and diagonals[s].shape == own[1][s].shape for s in diagonals)


def test_warm_tuning_must_be_pooled_or_per_chain():
    from evalpipeline.models import FitSettings

    assert FitSettings().warm_tuning == "pooled" and FitSettings(warm_tuning="per_chain").warm_tuning == "per_chain"
    with pytest.raises(ValueError, match="warm_tuning must be pooled or per_chain"):
        FitSettings(warm_tuning="mean")


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(name="suite_null"), "is of 'suite_binomial'"),
        (dict(options={"group_mean_basis": False}), "structure changed .*group_mean_basis"),
        (dict(chains=4), "2 chains, this fit runs 4"),
        (dict(shapes={**SHAPES, "sigma_task": ()}), "sites changed"),
        (dict(shapes={**SHAPES, "overall": (2,)}), "dense mass block"),
    ],
)
def test_a_state_that_cannot_start_the_fit_says_why(change, match):
    state = _captured()
    arguments = dict(name="suite_binomial", options=OPTIONS, shapes=SHAPES, block=BLOCK, chains=2) | change
    with pytest.raises(WarmStartMismatch, match=match):
        warm_start.arguments(
            state,
            arguments["name"],
            arguments["options"],
            arguments["shapes"],
            arguments["block"],
            lambda axis: ["a", "c", "d"],
            arguments["chains"],
        )


def test_a_dense_block_over_padded_coordinates_is_not_captured():
    out = _out()
    out["last_z"]["model_mean_raw"] = np.zeros((2, 2))  # padded: 2 slots for 1 real one
    shapes = dict(SHAPES, model_mean_raw=(2,))
    assert (
        warm_start.capture(
            out,
            "suite_binomial",
            OPTIONS,
            shapes,
            BLOCK,
            lambda s: ("model",) if s in ("model_rest_raw", "model_mean_raw") else (),
            lambda axis: ["a"],
        )
        is None
    )


# ---------------------------------------------------------------------------
# sampling


def _suite_frame(models: int, items: int, seed: int = 0) -> pd.DataFrame:
    """``models`` LLMs with planted abilities on one suite of ``items`` tasks with planted difficulties."""
    rng = np.random.default_rng(seed)
    ability, difficulty = rng.normal(0.0, 1.0, models), rng.normal(0.0, 1.0, items)
    p = 1.0 / (1.0 + np.exp(-(ability[:, None] - difficulty[None, :])))
    rows = [
        {
            "model": f"m{m:02d}",
            "suite": "s",
            "domain": "d",
            "subdomain": f"sub{i % 3}",
            "item_id": f"q{i:03d}",
            "epoch": 1,
            "score": float(rng.random() < p[m, i]),
            "error": None,
            "limit": None,
        }
        for m in range(models)
        for i in range(items)
    ]
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_a_warm_refit_has_the_posterior_of_a_cold_refit():
    """A model joins (sorting into the middle): the warm refit passes on its warm attempt and its LLM
    effects agree with a cold refit's to Monte Carlo precision (posterior means within 0.3 posterior
    SDs; ~0.05 expected at these ESS). A state that cannot start the fit gives a cold fit that says why."""
    from evalpipeline.models import DiagnosticThresholds, FitSettings, Fitter, GlmData, fit_glm

    frame = _suite_frame(30, 30)
    # enough LLMs for centred tasks: the group-mean basis with its dense mass block, as at 100 LLMs
    settings = FitSettings(num_warmup=400, num_samples=500)
    thresholds = DiagnosticThresholds(max_r_hat=1.02)  # cold fits of this size reach 1.013
    fitter = Fitter()
    before = fit_glm(
        "suite_binomial",
        GlmData.from_samples(frame[frame["model"] != "m06"]),
        settings,
        thresholds,
        seed_key="before",
        fitter=fitter,
    )
    assert before.passed and before.metadata["start"] == "cold: no earlier fit to start from"
    assert before.metadata["options"]["group_mean_basis"] and before.warm_state.block is not None
    state = WarmStart.from_json(before.warm_state.to_json())
    data = GlmData.from_samples(frame)
    cold = fit_glm("suite_binomial", data, settings, thresholds, seed_key="after", fitter=fitter)
    warm = fit_glm("suite_binomial", data, settings, thresholds, seed_key="after", fitter=fitter, warm=state)
    assert warm.metadata["start"] == "warm" and warm.passed
    assert [a["start"] for a in warm.attempts] == ["warm (150 burn-in)"] and warm.attempts[0][
        "seed_key"
    ] == "after|warm"
    assert warm.idata.posterior.sizes["draw"] == 500
    # the pooled tuning (the default): one step size, the mean of the stored chains'
    steps = warm.idata.sample_stats["step_size"].values
    np.testing.assert_allclose(steps, np.mean(state.step_size), rtol=1e-6)
    effects = [f.idata.posterior["model"] for f in (cold, warm)]
    shift = abs(effects[0].mean(("chain", "draw")) - effects[1].mean(("chain", "draw"))) / effects[0].std(
        ("chain", "draw")
    )
    assert float(shift.max()) < 0.3
    assert warm.warm_state is not None and warm.warm_state.sites["model_rest_raw"]["labels"][0][6] == "m06"

    other = fit_glm("suite_null", data, settings, thresholds, seed_key="after", fitter=fitter, warm=state)
    assert other.metadata["start"] == "cold: the stored state is of 'suite_binomial', not 'suite_null'"
    assert [a["start"] for a in other.attempts][0] == "cold"


@pytest.mark.slow
def test_a_warm_attempt_that_fails_is_followed_by_the_cold_fit(monkeypatch):
    """A warm attempt failing a retried diagnostic is followed by exactly the fit a cold start would
    have given (same seed keys, same draws)."""
    from evalpipeline.models import DiagnosticThresholds, FitSettings, Fitter, GlmData, fit_glm

    frame = _suite_frame(6, 30, seed=2)
    settings = FitSettings(num_warmup=300, num_samples=300)
    lenient = DiagnosticThresholds(min_ess_bulk=100, min_ess_tail=100, max_r_hat=1.05)
    fitter = Fitter()
    data = GlmData.from_samples(frame)
    before = fit_glm("suite_binomial", data, settings, lenient, seed_key="x", fitter=fitter)
    state = before.warm_state
    # a step size far too large: the warm chains diverge
    broken = WarmStart(state.glm, state.options, [5.0] * state.chains, state.sites, state.block)
    warm = fit_glm("suite_binomial", data, settings, lenient, seed_key="x", fitter=fitter, warm=broken)
    assert warm.attempts[0]["start"] == "warm (150 burn-in)" and not warm.attempts[0]["passed"]
    assert warm.metadata["start"].startswith("cold: the warm attempt failed")
    assert [a["seed_key"] for a in warm.attempts[1:]] == [a["seed_key"] for a in before.attempts]
    np.testing.assert_array_equal(warm.idata.posterior["model"].values, before.idata.posterior["model"].values)


# ---------------------------------------------------------------------------
# in the lake


@pytest.mark.slow
def test_a_suite_refit_starts_from_the_state_its_provenance_names(tmp_path):
    """A model joins: the suite GLM refits warm from the state file the previous provenance names.
    A state file left by a run killed before its provenance was written is ignored (the rerun starts
    from the same state as the uninterrupted run), a damaged one means a cold start, and so do another
    code version and ``warm_start = false`` (which still keeps the state, for the refit after it). A
    partition fit keeps none."""
    import dataclasses

    from evalpipeline.steps.fits import GlmConfig, fit_suite_glm, previous_warm_state
    from evalpipeline.lake import Lake
    from evalpipeline.models import DiagnosticThresholds, FitSettings
    from tests.test_comparison import planted_scores, write_samples

    rng = np.random.default_rng(5)
    lake = Lake(tmp_path / "lake")
    difficulty = rng.normal(0.0, 1.0, 30)
    for name, shift in (("m1", 1.0), ("m3", -0.5), ("m4", 0.2)):
        write_samples(lake, name, "quiz", planted_scores(rng, difficulty, shift))
    # 500 draws: the cold refit below must pass its gates for the bookkeeping to be tested; with 300,
    # one seed in twelve failed tail ESS after its retry (30 items, 5 LLMs), before and after the
    # likelihood's custom gradient alike (12 of 12 and 11 of 12 passed)
    config = GlmConfig(
        FitSettings(num_warmup=300, num_samples=500),
        DiagnosticThresholds(min_ess_bulk=100, min_ess_tail=100, max_r_hat=1.05),
    )
    first = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1")
    assert first.passed and first.metadata["start"] == "cold: no earlier fit to start from"
    provenance = json.loads((first.directory / "provenance.json").read_text())
    named = provenance["warm_state"]
    assert [p.name for p in first.directory.glob("warm-*.json")] == [named]

    write_samples(lake, "m2", "quiz", planted_scores(rng, difficulty, 0.5))
    # a state file a killed run wrote before its provenance: not the one to start from
    orphan = first.directory / "warm-0000000000000000.json"
    orphan.write_bytes((first.directory / named).read_bytes().replace(b'"step_size": [', b'"step_size": [9.0, '))
    wanted = {"version": "v1", "config": config.for_model("suite_binomial")}
    state, why = previous_warm_state(first.directory, wanted)
    assert why is None and state.to_json() == (first.directory / named).read_bytes()
    assert previous_warm_state(first.directory, {**wanted, "version": "v2"}) == (
        None,
        "the previous fit was made by other code",
    )
    # switching warm starts off or on changes no version: nothing is refitted for it
    off = dataclasses.replace(config, settings=dataclasses.replace(config.settings, warm_start=False))
    assert off.for_model("suite_binomial") == config.for_model("suite_binomial")

    second = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1")
    assert second.status == "fitted" and second.metadata["start"] == "warm" and second.passed
    assert "m2" in set(second.summary["model"].dropna())
    newer = json.loads((second.directory / "provenance.json").read_text())["warm_state"]
    assert [p.name for p in second.directory.glob("warm-*.json")] == [newer]  # the old state and the orphan removed

    (second.directory / newer).write_bytes(b"{}")  # damaged
    write_samples(lake, "m5", "quiz", planted_scores(rng, difficulty, 0.0))
    third = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1")
    assert third.metadata["start"] == f"cold: {second.directory / newer} does not match its content hash"
    assert third.passed  # only a passing fit keeps where its chains ended
    assert previous_warm_state(second.directory, wanted)[0] is not None  # the third fit stored a fresh one

    write_samples(lake, "m6", "quiz", planted_scores(rng, difficulty, 0.3))
    fourth = fit_suite_glm(lake, "quiz", "suite_binomial", off, version="v1")
    assert (
        fourth.status == "fitted" and fourth.metadata["start"] == "cold: warm starts are off ([glm] warm_start = false)"
    )
    # where its chains ended is kept even so: switched back on, warm starts take effect at the next refit
    kept = json.loads((fourth.directory / "provenance.json").read_text())["warm_state"]
    assert [p.name for p in fourth.directory.glob("warm-*.json")] == [kept]
    write_samples(lake, "m7", "quiz", planted_scores(rng, difficulty, -0.2))
    fifth = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1")
    assert fifth.metadata["start"] == "warm" and fifth.passed

    from evalpipeline.steps.fits import fit_partition_glm

    partition = fit_partition_glm(lake, "m1", "quiz", "binomial", config, version="v1")
    assert partition.status == "fitted" and partition.metadata["start"] == "cold: no earlier fit to start from"
    assert json.loads((partition.directory / "provenance.json").read_text())["warm_state"] is None
    assert not list(partition.directory.glob("warm-*.json"))


@pytest.mark.slow
def test_a_stored_warm_sampler_gives_the_draws_of_a_traced_one(tmp_path):
    """The warm sampler goes through the program cache like the cold one (jax.export with its extra
    arguments): a Fitter that loads it draws what a tracing Fitter draws from the same state."""
    from evalpipeline.models import DiagnosticThresholds, FitSettings, Fitter, fit_glm
    from tests.test_models_fit import _use_case_1

    data, settings = _use_case_1(), FitSettings(num_warmup=150, num_samples=150, predictive_draws=50, warm_burn_in=50)
    lenient = DiagnosticThresholds(min_ess_bulk=50, min_ess_tail=50, max_r_hat=1.1)
    cold = fit_glm("binomial", data, settings, lenient, seed_key="cold", fitter=Fitter())
    assert cold.passed and cold.warm_state is not None and cold.warm_state.block is None  # a diagonal mass matrix
    state = cold.warm_state

    def draws(fitter):
        fit = fit_glm("binomial", data, settings, lenient, seed_key="warm", fitter=fitter, warm=state)
        assert fit.metadata["start"] == "warm"
        return {v: fit.idata.posterior[v].values for v in fit.idata.posterior.data_vars}

    traced = draws(Fitter())
    storing = Fitter(program_cache=tmp_path)
    stored = draws(storing)
    loading = Fitter(program_cache=tmp_path)
    loaded = draws(loading)
    # the warm sampler only: a warm fit that passes never builds the cold one
    assert loading.stats()["programs_loaded"] == 1 and len(list(tmp_path.glob("nuts-*.zip"))) == 1
    for name, values in traced.items():
        np.testing.assert_array_equal(stored[name], values, err_msg=name)
        np.testing.assert_array_equal(loaded[name], values, err_msg=name)


# ---------------------------------------------------------------------------
# samplers prepared ahead of the night a new LLM joins


def test_room_for_another_llm_follows_the_padded_llm_axis_and_units():
    from types import SimpleNamespace

    from evalpipeline.models import glm

    def data(models, units):
        return SimpleNamespace(
            n_models=models,
            n_units=units,
            n_domains=1,
            n_subdomains=1,
            n_items=units // models,
            numeric_covariates=[],
            categorical_covariates={},
        )

    for models, room in ((7, False), (8, False), (9, True), (103, True), (104, False), (105, True)):  # exact up to 8
        grid = data(models, models * 200)
        assert glm.room_for_another_llm(grid, glm.layout_for(grid, grid=True), grid=True) is room, models
    # without the grid, the units have their own padded size: 100 LLMs x 200 tasks fill 20,480 units at 102
    for models, room in ((100, True), (101, True), (102, False)):
        loose = data(models, models * 200)
        assert glm.padded_models(models + 1) == 104
        assert glm.room_for_another_llm(loose, glm.layout_for(loose)) is room, models


def test_a_suite_fit_asks_for_a_sampler_only_when_one_llm_more_would_compile_one():
    from types import SimpleNamespace

    from evalpipeline.steps.fits import preparation_reason

    def fit(ready, passed=True, padded=16):
        return SimpleNamespace(passed=passed, next_llm_ready=ready, metadata={"layout": {"models": padded}})

    assert preparation_reason(fit(False), 16, 8) == "16 LLMs fill the sampler's padded LLM axis (16)"
    assert preparation_reason(fit(False), 12, 8) == "its warm sampler for one LLM more is not compiled yet"
    assert preparation_reason(fit(True), 12, 8) is None  # stored, with room
    assert preparation_reason(fit(None), 16, 8) is None  # no program cache to prepare into
    assert preparation_reason(fit(False, passed=False), 16, 8) is None  # no state to start warm from
    assert preparation_reason(fit(False, padded=7), 7, 8) is None  # below prepare_samplers_from
    assert preparation_reason(fit(False), 16, 0) is None  # switched off


@pytest.mark.slow
def test_a_sampler_prepared_from_one_llm_more_is_what_the_next_refit_loads(tmp_path, monkeypatch):
    """A passing suite fit whose warm refit after one more LLM would need a sampler not yet compiled asks
    for it; prepare_requested_samplers traces and compiles it from the suite with one LLM more, and
    removes the request. When that LLM joins, the warm refit loads it and traces nothing."""
    from evalpipeline.steps.fits import GlmConfig, fit_suite_glm, prepare_requested_samplers, with_another_llm
    from evalpipeline.lake import Lake
    from evalpipeline.models import DiagnosticThresholds, FitSettings, Fitter
    from evalpipeline.models import fit as fit_module
    from evalpipeline.models.fit import preparation_requests
    from tests.test_comparison import planted_scores, write_samples

    rng = np.random.default_rng(11)
    lake, programs = Lake(tmp_path / "lake"), tmp_path / "programs"
    difficulty = rng.normal(0.0, 1.0, 30)
    for index in range(9):  # padded to 16 LLMs: one more keeps the shape
        write_samples(lake, f"m{index}", "quiz", planted_scores(rng, difficulty, rng.normal(0.0, 0.5)))
    # the plain basis: whether tasks are centred, which the group-mean basis follows, may flip with a
    # tenth LLM here, and a warm start needs the same structure (a cold start is tested elsewhere)
    config = GlmConfig(
        FitSettings(num_warmup=300, num_samples=500, prepare_samplers_from=9, group_mean_basis=False),
        DiagnosticThresholds(min_ess_bulk=100, min_ess_tail=100, max_r_hat=1.05),
    )
    first = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1", fitter=Fitter(program_cache=programs))
    assert first.passed and first.metadata["start"].startswith("cold")
    (request,) = preparation_requests(programs)  # the cold fit compiled no warm sampler
    assert json.loads(request.read_text()) == {
        "suite": "quiz",
        "glm": "suite_binomial",
        "lake": str(lake.root.resolve()),
        "reason": "its warm sampler for one LLM more is not compiled yet",
    }
    assert preparation_requests(programs, lake.root) == [request] and not preparation_requests(programs, tmp_path)
    stored = set(programs.glob("nuts-*.zip"))

    preparing = Fitter(program_cache=programs)
    (record,) = prepare_requested_samplers(lake, config, preparing)
    assert record["done"] == "prepared" and record["llms"] == 10 and not preparation_requests(programs)
    assert len(set(programs.glob("nuts-*.zip")) - stored) == 1 and preparing.stats()["compilations"] == 1
    samples = pd.DataFrame({"model": ["b", "a", "a"], "score": [1.0, 0.0, 1.0]})
    added = with_another_llm(samples)
    assert added["model"].tolist() == ["b", "a", "a", "~next LLM", "~next LLM"]  # a copy of the first model
    assert with_another_llm(samples.assign(model="~next LLM"))["model"].iloc[-1] == "~next LLM~"

    write_samples(lake, "m9", "quiz", planted_scores(rng, difficulty, 0.1))
    loading = Fitter(program_cache=programs)
    traced = fit_module._build_runner

    def build(*args, warm=False, **kwargs):
        assert not warm, "the prepared warm sampler was traced again"
        return traced(*args, warm=warm, **kwargs)

    monkeypatch.setattr(fit_module, "_build_runner", build)
    second = fit_suite_glm(lake, "quiz", "suite_binomial", config, version="v1", fitter=loading)
    assert second.attempts[0]["start"].startswith("warm") and second.passed, second.attempts
    assert loading.stats()["programs_loaded"] >= 1
    assert not preparation_requests(programs)  # 10 of 16 LLMs, the warm sampler stored: nothing to ask
    # a request that no longer applies is dropped with the reason, and so is one that is not a request
    # a request that no longer applies is dropped with the reason, and so is one that is not a request;
    # another lake's (lakes may share a cache) is left to that lake's job
    root = str(lake.root.resolve())
    (programs / "requests" / "gone.json").write_text(
        json.dumps({"suite": "gone", "glm": "suite_binomial", "lake": root})
    )
    (programs / "requests" / "junk.json").write_text("{")
    other = programs / "requests" / "other.json"
    other.write_text(json.dumps({"suite": "quiz", "glm": "suite_binomial", "lake": str(tmp_path / "other")}))
    (record,) = prepare_requested_samplers(lake, config, loading)
    assert record["done"].startswith("skipped: no sample tables for suite 'gone'")
    assert preparation_requests(programs) == [other]
