"""GLM fits against the paper's numbers, Figure 7/8's model ranking, the diagnostics gate and reproducibility.

One Fitter serves the whole module so that fits of the same model and shape
bucket reuse one compiled sampler (as the pipeline does); the agentic data
set and the funnel data set are built to share a bucket on purpose.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalpipeline.models import (
    DiagnosticThresholds,
    FitSettings,
    Fitter,
    GlmData,
    compare_fits,
    fit_glm,
    read_fit,
    write_fit,
)
from evalpipeline.models.fit import SAMPLING_DIAGNOSTICS, gating_failures
from evalpipeline.models.glm import layout_for

fit_module = importlib.import_module("evalpipeline.models.fit")

FITTER = Fitter()
SETTINGS = FitSettings(num_warmup=400, num_samples=400, predictive_draws=300)


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


# -- use case 1 (the HiBayES paper Section 3.3, Figure 5) -------------------------------------


def _use_case_1():
    """Use case 1's counts: N = 1257 with "about 47%" correct, N = 6768 with "about 84%".

    The paper reports N, the rounded rates and the posterior, not k. k = 585 (46.5%) for domain 1: the
    partial pooling of Eq. 2 moves domain 1 about +0.005 towards the overall mean, and k = 591 (47.0%)
    gives .476 [.447, .503], whose upper bound is 0.013 from the paper's .49; the paper's interval
    [.44, .49] (centre .465) points to an empirical rate just under 47%. Aggregated counts per domain
    give the same posterior as item-level Bernoulli units (the likelihoods differ by a constant), and
    Eq. 2 is written on domain counts.
    """
    counts = pd.DataFrame({"domain": ["coding", "reasoning"], "k": [585, round(0.84 * 6768)], "n": [1257, 6768]})
    return GlmData.from_counts(counts)


@pytest.mark.parametrize("paper_form", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_use_case_1_matches_the_paper(paper_form):
    data = _use_case_1()
    settings = FitSettings(paper_form=paper_form)  # the paper's 2000 warmup + 2000 draws x 4 chains
    fit = fit_glm("binomial", data, settings, seed_key=f"claude|uc1|binomial|{paper_form}", fitter=FITTER)
    # sampling diagnostics pass; Pareto-k does not apply here: with two units (whole domains) leaving one
    # out is not a small perturbation, which is why the pipeline's units are items
    sampling = fit.diagnostics[fit.diagnostics.diagnostic != "pareto_k"]
    if paper_form:
        # The paper's mu_bar = mu_overall + sigma_overall * z_overall is a ridge (only the sum is identified):
        # divergences may survive the retry, and the ridge's own coordinates mix slowly, so whether r-hat and
        # ESS over every parameter pass depends on the chains' floating point (they passed on one machine; on
        # an AMD EPYC, mu_overall's r-hat was 1.015 and its bulk ESS 329) -- the reason the identified form
        # is the default. What the paper reports is identified, and must converge: the domain and overall
        # rates, under the fit's own r-hat and ESS thresholds; and the energy (BFMI) must pass.
        gate = fit.diagnostics.set_index("diagnostic")["threshold"]
        identified = fit.summary[fit.summary["parameter"].isin(["domain", "overall"])]
        assert len(identified) == 3 and (identified["r_hat"] <= gate["r_hat"]).all(), identified
        assert (identified["ess_bulk"] >= gate["ess_bulk"]).all() and (identified["ess_tail"] >= gate["ess_tail"]).all()
        assert sampling.set_index("diagnostic").loc["bfmi", "passed"], fit.diagnostics
    else:
        assert sampling["passed"].all(), fit.diagnostics
    rows = fit.summary.set_index(["parameter", "domain"], drop=False)
    for domain, mean, low, high in (("coding", 0.47, 0.44, 0.49), ("reasoning", 0.84, 0.83, 0.85)):
        row = rows.loc[("domain", domain)]
        assert row["prob_mean"] == pytest.approx(mean, abs=0.01)
        assert row["prob_hpdi_low"] == pytest.approx(low, abs=0.01)
        assert row["prob_hpdi_high"] == pytest.approx(high, abs=0.01)
        k, n = data.units.set_index("domain").loc[domain, ["k", "n"]]
        sem = np.sqrt(k / n * (1 - k / n) / n)
        assert row["prob_hpdi_high"] - row["prob_hpdi_low"] > 2 * sem  # wider than the empirical mean +- SEM
        assert abs(row["prob_mean"] - k / n) < 0.01  # partial pooling shrinks, but not far, at these N
    overall = fit.summary.set_index("parameter").loc["overall"]
    assert 0.47 < overall["prob_mean"] < 0.84
    assert fit.metadata["parameterisation"]["domain"] in ("centred", "non_centred")
    assert fit.metadata["parameterisation"]["intercept"].startswith("paper" if paper_form else "identified")


# -- simulated agentic data (Figure 7) and the WAIC ranking of Figure 8 --------------------------


def _agentic(seed=7, n_sub=8, n_items=15, repeats=10, phi=0.6):
    """Bimodal per-task success: theta ~ Beta(p phi, (1 - p) phi) with small phi, subdomain means spread."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, logit in enumerate(np.linspace(-2.0, 2.0, n_sub)):
        p = _expit(logit)
        for i in range(n_items):
            theta = rng.beta(p * phi, (1 - p) * phi)
            rows.append(
                {
                    "domain": "agents",
                    "subdomain": f"task-family-{s}",
                    "item_id": f"t{s}-{i}",
                    "k": rng.binomial(repeats, theta),
                    "n": repeats,
                }
            )
    return GlmData.from_counts(pd.DataFrame(rows))


@pytest.fixture(scope="module")
def agentic_fits():
    data = _agentic()
    fits = {
        name: fit_glm(name, data, SETTINGS, seed_key=f"agent|gaia|{name}", fitter=FITTER)
        for name in ("beta_binomial", "binomial", "null")
    }
    return data, fits


@pytest.mark.slow
def test_waic_ranks_beta_binomial_over_binomial_over_null(agentic_fits):
    data, fits = agentic_fits
    table = compare_fits(fits)
    assert list(table["model"]) == ["beta_binomial", "binomial", "null"]
    assert list(table["waic_rank"]) == [0, 1, 2]
    by = table.set_index("model")
    # not a coin flip: each step clears twice its paired standard error
    assert by.loc["binomial", "d_waic"] > 2 * by.loc["binomial", "waic_dse"]
    assert by.loc["null", "d_waic"] - by.loc["binomial", "d_waic"] > 0
    assert by.loc["beta_binomial", "loo_rank"] == 0
    assert set(table.columns) >= {
        "elpd_waic",
        "p_waic",
        "waic_weight",
        "elpd_loo",
        "p_loo",
        "n_pareto_k_high",
        "loo_warning",
    }
    assert (table["n_units"] == data.n_units).all()


@pytest.mark.slow
def test_posterior_predictive_success_rates_figure_7(agentic_fits):
    data, fits = agentic_fits
    share = {
        name: fit.predictive_checks(data).query("stat == 'share_at_0_or_1'").set_index("check")
        for name, fit in fits.items()
    }
    observed = share["binomial"].loc["posterior", "observed"]
    assert observed > 0.4  # the simulated data are bimodal
    assert share["beta_binomial"].loc["posterior", "inside"]
    assert not share["binomial"].loc["posterior", "inside"]
    assert share["binomial"].loc["posterior", "simulated_high"] < observed
    # the prior predictive of every model is a check of its own (present, finite)
    assert np.isfinite(share["null"].loc["prior", "simulated_mean"])


def test_the_stored_fit_tables_have_the_documented_columns(agentic_fits):
    """The README documents diagnostics, predictive and criteria tables from these dictionaries."""
    from evalpipeline.models.compare import CRITERIA_COLUMNS, pointwise_criteria
    from evalpipeline.models.fit import DIAGNOSTICS_COLUMNS
    from evalpipeline.models.glm import PREDICTIVE_COLUMNS

    data, fits = agentic_fits
    fit = fits["binomial"]
    assert list(fit.diagnostics.columns) == list(DIAGNOSTICS_COLUMNS)
    assert list(fit.predictive_checks(data).columns) == list(PREDICTIVE_COLUMNS)
    assert (fit.criteria or pointwise_criteria(fit.idata)).to_table().column_names == list(CRITERIA_COLUMNS)


def test_compare_rejects_different_units(agentic_fits):
    data, fits = agentic_fits
    other = fit_glm("binomial", _agentic(seed=8), SETTINGS, seed_key="agent|other|binomial", fitter=FITTER)
    with pytest.raises(ValueError, match="same observational units"):
        compare_fits({"a": fits["binomial"], "b": other})
    with pytest.raises(ValueError, match="at least two"):
        compare_fits({"a": fits["binomial"]})


# -- diagnostics gate ---------------------------------------------------------------------------


def _funnel_data():
    """Weakly informative subdomains (8 x 8 items x 5 attempts at p ~ 0.5): a funnel in the centred form."""
    rng = np.random.default_rng(3)
    rows = [
        {"domain": "d", "subdomain": f"s{s}", "item_id": f"s{s}-{i}", "k": rng.binomial(5, 0.5), "n": 5}
        for s in range(8)
        for i in range(8)
    ]
    return GlmData.from_counts(pd.DataFrame(rows))


def test_funnel_data_share_the_agentic_bucket():
    assert layout_for(_funnel_data()) == layout_for(_agentic())


def test_centred_funnel_fails_and_is_retried_with_higher_target_accept(agentic_fits):
    data = _funnel_data()
    compilations = FITTER.compilations
    bad = fit_glm(
        "binomial",
        data,
        FitSettings(**{**SETTINGS.__dict__, "centring": "centred"}),
        seed_key="funnel|centred",
        fitter=FITTER,
    )
    assert FITTER.compilations == compilations  # centring is data: the agentic binomial sampler is reused
    assert bad.metadata["parameterisation"]["subdomain"] == "centred"
    assert len(bad.attempts) == 2
    assert not bad.attempts[0]["passed"] and "divergences" in bad.attempts[0]["failed"]
    assert [a["target_accept"] for a in bad.attempts] == [0.8, 0.95]
    assert bad.passed == bad.attempts[1]["passed"] == (gating_failures(bad.diagnostics) == [])
    good = fit_glm("binomial", data, SETTINGS, seed_key="funnel|auto", fitter=FITTER)
    assert good.metadata["parameterisation"]["subdomain"] == "non_centred"  # auto picks non-centred here
    divergences = good.diagnostics.set_index("diagnostic").loc["divergences", "value"]
    assert divergences < bad.diagnostics.set_index("diagnostic").loc["divergences", "value"] or divergences == 0


def test_thresholds_decide_passed(agentic_fits):
    _, fits = agentic_fits
    diagnostics = fits["binomial"].diagnostics.set_index("diagnostic")
    assert set(diagnostics.index) == {"divergences", "r_hat", "ess_bulk", "ess_tail", "bfmi", "pareto_k"}
    from evalpipeline.models import diagnose

    impossible = diagnose(fits["binomial"].idata, DiagnosticThresholds(min_ess_bulk=1e9)).set_index("diagnostic")
    assert not impossible.loc["ess_bulk", "passed"] and impossible.loc["ess_bulk", "threshold"] == 1e9
    # the other rows are judged against their own (default) thresholds, on the same values
    assert impossible["value"].equals(diagnostics["value"])
    assert impossible.loc["divergences", "passed"] == (diagnostics.loc["divergences", "value"] <= 0)
    assert "ess_bulk" in gating_failures(impossible.reset_index())


def test_pareto_k_warns_by_default_and_gates_when_configured(agentic_fits):
    _, fits = agentic_fits
    from evalpipeline.models import diagnose

    strict = DiagnosticThresholds(max_pareto_k=-1.0)  # every fit has some k above -1
    warned = diagnose(fits["binomial"].idata, strict)
    assert not warned.set_index("diagnostic").loc["pareto_k", "passed"]
    assert "pareto_k" not in gating_failures(warned)
    gated = diagnose(fits["binomial"].idata, DiagnosticThresholds(max_pareto_k=-1.0, gate_pareto_k=True))
    assert "pareto_k" in gating_failures(gated)
    assert set(gated.loc[gated["gates"], "diagnostic"]) == set(SAMPLING_DIAGNOSTICS) | {"pareto_k"}


# -- reproducibility and persistence --------------------------------------------------------------


def test_same_seed_key_reproduces_bit_for_bit_and_parquet_bytes(agentic_fits, tmp_path):
    data, fits = agentic_fits
    again = fit_glm("binomial", data, SETTINGS, seed_key="agent|gaia|binomial", fitter=FITTER)
    first = fits["binomial"]
    for site in first.idata.posterior.data_vars:
        np.testing.assert_array_equal(first.idata.posterior[site].values, again.idata.posterior[site].values)
    other = fit_glm("binomial", data, SETTINGS, seed_key="agent|gaia|binomial|2", fitter=FITTER)
    assert not np.array_equal(first.idata.posterior["overall"].values, other.idata.posterior["overall"].values)
    paths_a, paths_b = write_fit(first, tmp_path / "a"), write_fit(again, tmp_path / "b")
    for name in ("summary.parquet", "diagnostics.parquet"):
        assert paths_a[name].read_bytes() == paths_b[name].read_bytes()
    loaded = read_fit(tmp_path / "a")
    pd.testing.assert_frame_equal(loaded.summary, first.summary)
    assert set(loaded.idata.groups()) == set(first.idata.groups())
    for group in first.idata.groups():  # the shuffled, gzipped netCDF is lossless, group by group
        for name, values in getattr(first.idata, group).variables.items():
            np.testing.assert_array_equal(
                getattr(loaded.idata, group)[name].values, values.values, err_msg=f"{group}/{name}"
            )
    for group in ("prior_predictive", "posterior_predictive"):  # counts stored compactly, read back as such
        assert first.idata[group]["obs"].dtype == loaded.idata[group]["obs"].dtype == np.uint8
    assert loaded.passed == first.passed and loaded.metadata["seed"] == first.metadata["seed"]
    assert not list((tmp_path / "a").glob(".tmp-*"))
    with pytest.raises(ValueError, match="missing"):
        read_fit(tmp_path / "nothing")


def test_a_fit_written_without_its_log_likelihood_keeps_its_criteria_and_comparisons(agentic_fits, tmp_path):
    """``write_fit(..., log_likelihood=False)`` (the lake's default, ``store_log_likelihood``) leaves the
    (chain, draw, unit) matrix out of posterior.nc and nothing else; the criteria read back are those
    computed from it, and comparing the read fits ranks as the in-memory fits do."""
    from evalpipeline.models.compare import pointwise_criteria

    _data, fits = agentic_fits
    read = {}
    for name, fit in fits.items():
        write_fit(fit, tmp_path / name, log_likelihood=False)
        loaded = read_fit(tmp_path / name)
        assert "log_likelihood" not in loaded.idata.groups()
        assert set(loaded.idata.groups()) == set(fit.idata.groups()) - {"log_likelihood"}
        for group in loaded.idata.groups():
            for variable, values in getattr(fit.idata, group).variables.items():
                np.testing.assert_array_equal(getattr(loaded.idata, group)[variable].values, values.values)
        computed = pointwise_criteria(fit.idata)
        for column in ("waic_i", "p_waic_i", "loo_i", "lppd_i", "pareto_k"):
            np.testing.assert_array_equal(getattr(loaded.criteria, column), getattr(computed, column), err_msg=column)
        read[name] = loaded
    pd.testing.assert_frame_equal(compare_fits(read), compare_fits(fits))
    with_matrix = write_fit(fits["binomial"], tmp_path / "kept")["posterior.nc"].stat().st_size
    assert (tmp_path / "binomial" / "posterior.nc").stat().st_size < with_matrix


def test_a_written_fit_is_as_readable_as_the_umask_allows(agentic_fits, tmp_path):
    # posterior.nc is written into a temporary first, like every lake file: not 0600 whatever the umask
    previous = os.umask(0o022)
    try:
        paths = write_fit(agentic_fits[1]["binomial"], tmp_path / "binomial")
    finally:
        os.umask(previous)
    assert {name: oct(path.stat().st_mode & 0o777) for name, path in paths.items()} == {
        name: oct(0o644) for name in paths
    }


def test_a_posterior_left_half_written_by_a_killed_process_is_swept_by_the_next_write(agentic_fits, tmp_path):
    # A process killed while writing posterior.nc leaves its temporary; the rerun's write removes it.
    killed_writer = (
        "import os, sys, types\n"
        "from evalpipeline.models import fit\n"
        "def half_written(idata, path, **options):\n"
        "    open(path, 'wb').write(b'HDF partial')\n"
        "    os._exit(137)  # as SIGKILL: no cleanup runs\n"
        "fit._write_netcdf = half_written\n"
        "fit.write_fit(types.SimpleNamespace(idata=None), sys.argv[1])\n"
    )
    folder = tmp_path / "binomial"
    assert subprocess.run([sys.executable, "-c", killed_writer, str(folder)]).returncode == 137
    (left,) = folder.glob(".tmp-*")
    assert left.read_bytes() == b"HDF partial"
    write_fit(agentic_fits[1]["binomial"], folder)
    assert not list(folder.glob(".tmp-*")), "the killed writer's partial posterior is still there"
    assert read_fit(folder).passed == agentic_fits[1]["binomial"].passed


@pytest.mark.slow
def test_a_stored_sampler_program_gives_the_draws_of_a_traced_one(tmp_path, monkeypatch):
    """Fitters with a program cache trace a runner (sampler and prior draws) once and store it
    (jax.export); a Fitter in a new process loads it instead of tracing anything. The draws must be
    those of the traced runner, and a damaged file or other settings must not be used."""
    data, settings = _use_case_1(), FitSettings(num_warmup=150, num_samples=150, predictive_draws=50)

    def draws(fitter, fit_settings=settings):
        fit = fit_glm("binomial", data, fit_settings, seed_key="program-cache", fitter=fitter)
        return {f"posterior/{v}": fit.idata.posterior[v].values for v in fit.idata.posterior.data_vars} | {
            f"{g}/obs": fit.idata[g]["obs"].values for g in ("prior_predictive", "posterior_predictive")
        }

    def assert_same(expected, got):
        assert set(got) == set(expected)
        for name, values in expected.items():
            np.testing.assert_array_equal(got[name], values, err_msg=name)

    traced = draws(Fitter())
    storing = Fitter(program_cache=tmp_path)
    assert_same(traced, draws(storing))
    programs = list(tmp_path.glob("nuts-*.zip"))
    assert len(programs) == 1 and storing.stats()["programs_loaded"] == 0

    loading = Fitter(program_cache=tmp_path)
    with monkeypatch.context() as patched:  # loading traces neither the model nor the sampler
        patched.setattr(fit_module, "_build_runner", lambda *a, **k: pytest.fail("a stored runner was traced"))
        assert_same(traced, draws(loading))
    assert loading.stats()["programs_loaded"] == 1

    programs[0].write_bytes(b"not a program")
    retracing = Fitter(program_cache=tmp_path)
    assert_same(traced, draws(retracing))
    assert retracing.stats()["programs_loaded"] == 0 and programs[0].stat().st_size > 1000

    longer = dataclasses.replace(settings, num_samples=160)
    other = Fitter(program_cache=tmp_path)
    draws(other, longer)
    assert other.stats()["programs_loaded"] == 0 and len(list(tmp_path.glob("nuts-*.zip"))) == 2

    # bounded: a loaded program counts as used, and the one used longest ago goes first
    (first,) = programs
    (second,) = set(tmp_path.glob("nuts-*.zip")) - {first}
    os.utime(first, ns=(10**18, 10**18))
    os.utime(second, ns=(15 * 10**17, 15 * 10**17))  # both in the past, ``second`` used later
    budget = int(2.5 * max(first.stat().st_size, second.stat().st_size))
    bounded = Fitter(program_cache=tmp_path, program_cache_max_bytes=budget)
    assert_same(traced, draws(bounded))  # loads ``first``, the older of the two
    assert bounded.stats()["programs_loaded"] == 1 and first.stat().st_mtime_ns > second.stat().st_mtime_ns
    draws(bounded, dataclasses.replace(settings, num_samples=170))  # a third program: over the budget
    kept = set(tmp_path.glob("nuts-*.zip"))
    assert first in kept and second not in kept and len(kept) == 2
    assert sum(p.stat().st_size for p in kept) <= budget


_CACHE_SCRIPT = """
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from evalpipeline.models.fit import configure_jax

folder, bound, sizes = Path(sys.argv[1]), int(sys.argv[2]), [int(n) for n in sys.argv[3].split(",")]
configure_jax(compilation_cache_dir=folder, cache_max_bytes=None if bound < 0 else bound)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # these programs compile fast
for size in sizes:
    jax.jit(lambda x: jnp.cumsum(jnp.sin(x)) @ jnp.cos(x)).lower(np.ones(size, np.float32)).compile()
"""


def test_the_compilation_cache_stays_under_its_bound(tmp_path):
    """JAX's persistent cache evicts the least recently used programs once it holds more than
    ``cache_max_bytes``, including entries written by a process that had no bound (which carry
    no record of their use until configure_jax gives them one). In subprocesses: the cache is
    set up once per process."""
    import subprocess
    import sys

    script, cache = tmp_path / "compile.py", tmp_path / "cache"
    script.write_text(_CACHE_SCRIPT)

    def compile_in_new_process(bound: int, sizes: str) -> dict:
        subprocess.run(
            [sys.executable, str(script), str(cache), str(bound), sizes],
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        return {p.name: p.stat().st_size for p in cache.glob("*-cache")}

    unbounded = compile_in_new_process(-1, "11,12,13")
    assert len(unbounded) == 3 and not list(cache.glob("*-atime"))
    bound = int(3.5 * max(unbounded.values()))
    bounded = compile_in_new_process(bound, "21,22,23")
    assert sum(bounded.values()) <= bound
    assert len(set(bounded) - set(unbounded)) >= 2, "the bounded process cached (next to) nothing new"
    assert len(set(unbounded) - set(bounded)) >= 2, "the oldest entries were not evicted"


_POOL_SCRIPT = """
import json, os, sys

import jax.numpy as jnp

from resources import GlmSettings

from evalpipeline.models import fit

mode, folder = sys.argv[1], sys.argv[2]
if mode == "started-before":
    jnp.ones(3).sum().block_until_ready()  # something else started the backend first
GlmSettings(compilation_cache_dir=folder).fitter(folder)
jnp.arange(1000.0).cumsum().block_until_ready()
again = fit.configure_jax(intra_op_threads=1)["intra_op_threads"]
tasks = os.listdir("/proc/self/task")
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
print(json.dumps({"started_with": fit._backend_threads, "again": again, "pool": names.count("tf_XLAEigen"),
                  "masks": sorted({len(os.sched_getaffinity(int(t))) for t in tasks})}))
"""


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and at least two CPUs: one CPU gives a pool of one thread anyway",
)
@pytest.mark.slow
def test_the_fits_start_xlas_cpu_backend_with_one_intra_op_thread_and_pin_nothing(tmp_path):
    """XLA gives its intra-op pool one thread per CPU (its flags have no count); a fitting step is one
    process per core, so GlmSettings.fitter starts the backend with EVALPIPELINE_STEP_THREADS threads
    (default 1). Afterwards every thread of the process may run on every CPU again. With the
    variable at 0, or when something started JAX's backend first, the pool is XLA's default
    (and the latter is reported). In fresh processes: the backend starts once per process."""
    import json

    script = tmp_path / "pool.py"
    script.write_text(_POOL_SCRIPT)
    cpus = len(os.sched_getaffinity(0))

    def probe(mode: str, **env) -> dict:
        done = subprocess.run(
            [sys.executable, str(script), mode, str(tmp_path / mode)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            env={**os.environ, **env},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    late = "not applied: JAX had started its CPU backend already"
    assert probe("default", EVALPIPELINE_STEP_THREADS="1") == {
        "started_with": 1,
        "again": 1,
        "pool": 1,
        "masks": [cpus],
    }
    assert probe("step-threads-0", EVALPIPELINE_STEP_THREADS="0") == {
        "started_with": None,
        "again": late,
        "pool": cpus,
        "masks": [cpus],
    }
    assert probe("started-before", EVALPIPELINE_STEP_THREADS="1") == {
        "started_with": None,
        "again": late,
        "pool": cpus,
        "masks": [cpus],
    }
    with pytest.raises(ValueError, match="at least 1"):
        from evalpipeline.models.fit import start_cpu_backend

        start_cpu_backend(0)


def test_summary_is_tidy_and_labelled(agentic_fits):
    data, fits = agentic_fits
    summary = fits["beta_binomial"].summary
    subdomains = summary[summary.parameter == "subdomain"]
    assert sorted(subdomains["subdomain"]) == sorted(s for _, s in data.subdomains)
    assert subdomains["prob_mean"].between(0, 1).all()
    assert (subdomains["hpdi_low"] < subdomains["hpdi2_low"]).all() and (
        subdomains["hpdi2_high"] < subdomains["hpdi_high"]
    ).all()
    assert summary.loc[summary.parameter == "phi", "prob_mean"].isna().all()  # not a location: no probability scale
    assert not summary["parameter"].str.endswith("_raw").any()
    # the planted subdomain ordering (logits -2 .. 2, beta-binomial noise with phi = 0.6) is recovered
    from scipy.stats import spearmanr

    order = subdomains.sort_values("subdomain")["mean"].to_numpy()
    assert spearmanr(np.arange(len(order)), order).statistic >= 0.8


# -- per-suite model with covariates (Eq. 4) -------------------------------------------------------


@pytest.mark.slow
def test_suite_beta_binomial_recovers_reasoning_slope_and_model_order():
    rng = np.random.default_rng(11)
    rows = []
    model_logit = {"strong": 1.0, "mid": 0.0, "weak": -1.0}
    slope = {"strong": 0.8, "mid": 0.0, "weak": 0.0}
    task = rng.normal(0, 0.5, size=18)
    for model, base in model_logit.items():
        for j in range(18):
            difficulty = ("easy", "mid", "hard")[j % 3]
            for effort in (0, 1, 2, 3):
                p = _expit(base + task[j] + slope[model] * (effort - 1.5) - 0.3 * (j % 3))
                rows.append(
                    {
                        "model": model,
                        "domain": "agents",
                        "subdomain": f"family{j % 2}",
                        "item_id": f"task{j}",
                        "cov_reasoning": effort,
                        "cov_difficulty": difficulty,
                        "k": rng.binomial(8, rng.beta(p * 20, (1 - p) * 20)),
                        "n": 8,
                    }
                )
    data = GlmData.from_counts(pd.DataFrame(rows))
    fit = fit_glm("suite_beta_binomial", data, SETTINGS, seed_key="suite|agentic|beta", fitter=Fitter())
    summary = fit.summary
    models = summary[summary.parameter == "model"].set_index("model")
    assert models.loc["strong", "mean"] > models.loc["mid", "mean"] > models.loc["weak", "mean"]
    slopes = summary[summary.parameter == "slope"]
    strong = slopes[slopes["level"].str.startswith("strong|")]
    others = slopes[~slopes["level"].str.startswith("strong|")]
    assert len(strong) == 3 and (strong["hpdi_low"] > 0).all()
    assert ((others["hpdi_low"] < 0) & (others["hpdi_high"] > 0)).mean() >= 0.8
    assert fit.metadata["parameterisation"]["model"] in ("centred", "non_centred")


@pytest.mark.slow
def test_a_suite_fit_on_the_unit_grid_has_the_posterior_of_the_per_unit_layout():
    """fit_glm takes the grid layout for a complete LLM x task suite (unless told not to) and its
    posterior agrees with the per-unit layout's within Monte Carlo error; a suite with a missing
    cell keeps the per-unit layout. (The log joints are equal: tests/test_models_data.py.)"""
    rng = np.random.default_rng(17)
    ability, difficulty = rng.normal(0, 0.8, 6), rng.normal(0, 1.0, 30)
    rows = [
        {
            "model": f"llm{m}",
            "domain": "d",
            "subdomain": f"s{i % 3}",
            "item_id": f"t{i}",
            "n": 2,
            "k": rng.binomial(2, _expit(ability[m] - difficulty[i])),
        }
        for m in range(6)
        for i in range(30)
    ]
    data = GlmData.from_counts(pd.DataFrame(rows))
    fits = {
        grid: fit_glm(
            "suite_binomial", data, dataclasses.replace(SETTINGS, unit_grid=grid), seed_key="grid", fitter=FITTER
        )
        for grid in (True, False)
    }
    assert fits[True].metadata["options"]["unit_grid"] and not fits[False].metadata["options"]["unit_grid"]
    assert fits[True].metadata["layout"]["units"] == 6 * 30 != fits[False].metadata["layout"]["units"]
    effects = {grid: fit.summary[fit.summary.parameter == "model"].set_index("model") for grid, fit in fits.items()}
    assert list(effects[True].index) == [f"llm{m}" for m in range(6)]
    for column in ("mean", "sd"):
        assert set(effects[True][column].index) == set(effects[False][column].index)
    gap = (effects[True]["mean"] - effects[False]["mean"]).abs()
    # Monte Carlo standard error of each mean: sd / sqrt(bulk ESS)
    se = np.sqrt(sum((e["sd"] ** 2 / e["ess_bulk"]) for e in effects.values()))
    assert (gap <= 4 * se).all(), pd.DataFrame({"gap": gap, "se": se})
    assert fits[True].criteria.waic_i.shape == fits[False].criteria.waic_i.shape == (data.n_units,)
    holed = GlmData.from_counts(pd.DataFrame(rows[1:]))
    assert not fit_glm("suite_binomial", holed, SETTINGS, seed_key="grid", fitter=FITTER).metadata["options"][
        "unit_grid"
    ]


def test_a_fit_whose_pointwise_terms_are_streamed_has_the_draws_and_criteria_of_one_that_keeps_them(monkeypatch):
    """Above POINTWISE_IN_SAMPLER_ELEMENTS the sampler returns no per-unit terms and the fit computes them
    after it, a chunk of draws at a time (here 7 draws a chunk): the same draws bit for bit, the same
    predictive draws, and the WAIC / PSIS-LOO terms of the stored log-likelihood up to float32 rounding."""
    rng = np.random.default_rng(5)
    ability, difficulty = rng.normal(0, 0.8, 5), rng.normal(0, 1.0, 24)
    rows = [
        {"model": f"llm{m}", "domain": "d", "subdomain": f"s{i % 3}", "item_id": f"t{i}", "n": 3}
        | {"k": rng.binomial(3, _expit(ability[m] - difficulty[i]))}
        for m in range(5)
        for i in range(24)
    ]
    data = GlmData.from_counts(pd.DataFrame(rows))
    settings = dataclasses.replace(SETTINGS, num_warmup=200, num_samples=200)
    kept = fit_glm(
        "suite_beta_binomial",
        data,
        dataclasses.replace(settings, store_log_likelihood=True),
        seed_key="s",
        fitter=FITTER,
    )
    monkeypatch.setattr(fit_module, "POINTWISE_IN_SAMPLER_ELEMENTS", 0)
    monkeypatch.setattr(fit_module, "POINTWISE_CHUNK_ELEMENTS", 7 * kept.metadata["layout"]["units"])
    streamed = fit_glm("suite_beta_binomial", data, settings, seed_key="s", fitter=FITTER)
    assert "log_likelihood" in kept.idata.groups() and "log_likelihood" not in streamed.idata.groups()
    for group in ("posterior", "posterior_predictive", "prior_predictive"):
        for name, values in kept.idata[group].data_vars.items():
            np.testing.assert_array_equal(streamed.idata[group][name].values, values.values, err_msg=f"{group} {name}")
    for name, tolerance in (
        ("waic_i", 1e-6),
        ("p_waic_i", 1e-6),
        ("loo_i", 1e-6),
        ("lppd_i", 1e-6),
        ("pareto_k", 1e-4),
    ):
        np.testing.assert_allclose(
            getattr(streamed.criteria, name), getattr(kept.criteria, name), rtol=0, atol=tolerance, err_msg=name
        )
    assert streamed.criteria.identity == kept.criteria.identity
    assert streamed.criteria.n_samples == kept.criteria.n_samples == 4 * 200


@pytest.mark.slow
def test_a_partition_fit_on_its_likelihood_cells_has_the_posterior_of_the_per_unit_fit():
    """fit_glm samples the binomial GLM on its likelihood cells (one per subdomain here) unless told
    not to; the posterior agrees with the per-unit fit's within Monte Carlo error, and everything per
    unit stays per unit: the pointwise criteria, the predictive draws, the observed counts. The
    beta-binomial has no cells. (The log densities are equal: tests/test_models_data.py.)"""
    rng = np.random.default_rng(23)
    rates = {"s0": 0.3, "s1": 0.5, "s2": 0.7, "s3": 0.85}
    rows = [
        {"domain": "d", "subdomain": s, "item_id": f"{s}-q{i}", "n": 2, "k": rng.binomial(2, rate)}
        for s, rate in rates.items()
        for i in range(40)
    ]
    data = GlmData.from_counts(pd.DataFrame(rows))
    fits = {
        cells: fit_glm(
            "binomial", data, dataclasses.replace(SETTINGS, sufficient_cells=cells), seed_key="cells", fitter=FITTER
        )
        for cells in (True, False)
    }
    assert fits[True].metadata["likelihood_cells"] == 4 and fits[False].metadata["likelihood_cells"] is None
    assert fits[True].passed and fits[False].passed
    summaries = {c: f.summary.set_index(["parameter", "subdomain"]) for c, f in fits.items()}
    assert list(summaries[True].index) == list(summaries[False].index)
    gap = (summaries[True]["mean"] - summaries[False]["mean"]).abs()
    se = np.sqrt(sum(s["sd"] ** 2 / s["ess_bulk"] for s in summaries.values()))
    assert (gap <= 4 * se).all(), pd.DataFrame({"gap": gap, "se": se})
    sd_ratio = summaries[True]["sd"] / summaries[False]["sd"]
    assert sd_ratio.between(0.85, 1.15).all(), sd_ratio
    for fit in fits.values():
        assert fit.criteria.waic_i.shape == (data.n_units,)
        assert fit.idata.posterior_predictive["obs"].shape[-1] == data.n_units
        np.testing.assert_array_equal(fit.idata.observed_data["obs"].values, data.units["k"].to_numpy(float))
    # the same draws give the same per-unit log-likelihood whichever arrays the potential read
    waic = {c: float(f.criteria.waic_i.sum()) for c, f in fits.items()}
    assert waic[True] == pytest.approx(waic[False], abs=1.0)
    beta = fit_glm("beta_binomial", data, SETTINGS, seed_key="cells", fitter=FITTER)
    assert beta.metadata["likelihood_cells"] is None


@pytest.mark.slow
def test_a_batch_fit_gives_the_same_posterior_in_lockstep_and_chain_after_chain():
    """``Fitter.sample_batch`` runs every chain of every data set one after another by default and in
    lockstep with ``chain_method="vectorized"``; the two differ in rounding only, so each data set's
    posterior must agree within Monte Carlo error, and the shapes must be the same."""
    swapped = pd.DataFrame({"domain": ["coding", "reasoning"], "k": [1050, 3400], "n": [1257, 6768]})
    datasets = [_use_case_1(), GlmData.from_counts(swapped)]  # one design, other rates: a mix-up would show
    settings = FitSettings(num_warmup=200, num_samples=300, num_chains=2)
    results = {
        method: Fitter().sample_batch(
            "binomial", datasets, dataclasses.replace(settings, chain_method=method), seed_key="batch-methods"
        )
        for method in ("sequential", "vectorized")
    }
    for sequential, vectorized in zip(results["sequential"], results["vectorized"]):
        assert set(sequential["posterior"]) == set(vectorized["posterior"])
        for site, draws in sequential["posterior"].items():
            other = vectorized["posterior"][site]
            assert draws.shape == other.shape and draws.shape[:2] == (2, 300)
            mean = draws.reshape(600, -1).mean(axis=0)
            # generous standard error: 600 correlated draws counted as 100 effective ones per method
            se = np.sqrt((draws.reshape(600, -1).var(axis=0) + other.reshape(600, -1).var(axis=0)) / 100)
            assert np.all(np.abs(mean - other.reshape(600, -1).mean(axis=0)) <= 4 * se + 1e-9), site
    # each data set got its own fit: use case 1's domains at ~47% and ~84%, the other's at ~84% and ~50%
    for method, (first, second) in results.items():
        rates = [1 / (1 + np.exp(-fit["posterior"]["domain"].mean(axis=(0, 1)).ravel())) for fit in (first, second)]
        assert rates[0][0] < 0.5 < 0.8 < rates[0][1] and rates[1][1] < 0.55 < 0.8 < rates[1][0], (method, rates)


def test_the_package_imports_arviz_without_the_bokeh_modules_it_loads_only_for_docstrings():
    """evalpipeline.models imports ArviZ with bokeh.plotting and bokeh.models blocked (~0.7 s of every
    process's start, arviz_import.py); ArviZ must work and bokeh stay importable afterwards."""
    script = (
        "import sys\n"
        "import evalpipeline.models\n"
        "loaded = sorted(m for m in ('bokeh.plotting', 'bokeh.models') if m in sys.modules)\n"
        "import arviz, numpy as np\n"
        "summary = arviz.summary(arviz.from_dict(posterior={'x': np.random.default_rng(0).normal(size=(2, 50))}))\n"
        "import bokeh.plotting, bokeh.models\n"
        "print(loaded, list(summary.index), callable(bokeh.plotting.figure))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[] ['x'] True"
