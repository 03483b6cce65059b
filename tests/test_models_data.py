"""GlmData aggregation, applicability, HPDI, predictive-check statistics and the beta-binomial pmf (no MCMC)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from evalpipeline.models import GlmData, applicability, seed_from_key
from evalpipeline.models.fit import FitSettings, hpdi
from evalpipeline.models.glm import _BetaBinomial, layout_for, build_arrays, success_rate_check


def _samples(rows):
    base = {"domain": "d", "subdomain": None, "correct": None, "error": None, "limit": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_item_counts_binary_graded_and_uncounted_rows():
    frame = _samples(
        [
            {"item_id": "a", "epoch": 1, "score": 1.0, "correct": True},
            {"item_id": "a", "epoch": 2, "score": 0.0, "correct": False},
            {"item_id": "a", "epoch": 3, "score": 1.0, "correct": None},  # binary score, correct missing
            {"item_id": "b", "epoch": 1, "score": 0.64},  # graded: success at threshold 0.5
            {"item_id": "b", "epoch": 2, "score": 0.27},
            {"item_id": "b", "epoch": 3, "score": 1.0, "error": "boom"},  # not counted
            {"item_id": "c", "epoch": 1, "score": np.nan},  # unscored: not counted
            {"item_id": "c", "epoch": 2, "score": 0.0, "limit": "tokens"},
        ]
    )
    data = GlmData.from_samples(frame)
    units = data.units.set_index("item_id")
    assert list(units.index) == ["a", "b"]
    assert units.loc["a", ["k", "n"]].tolist() == [2.0, 3.0]
    assert units.loc["b", ["k", "n"]].tolist() == [1.0, 2.0]
    assert data.subdomains == (("d", "(none)"),)
    assert data.meta["n_graded"] == 2 and data.meta["n_not_counted"] == 3
    fractional = GlmData.from_samples(frame, graded="fractional").units.set_index("item_id")
    assert fractional.loc["b", "k"] == pytest.approx(0.91)


def test_suite_data_indices_labels_and_covariates():
    rows = []
    for model in ("m1", "m2"):
        for sub in ("x", "y"):
            for i in range(3):
                for effort in (0, 2):
                    rows.append(
                        {
                            "model": model,
                            "subdomain": sub,
                            "item_id": f"{sub}{i}",
                            "epoch": 1,
                            "score": 1.0,
                            "correct": True,
                            "cov_effort": effort,
                            "cov_difficulty": "hard" if i else "easy",
                        }
                    )
    data = GlmData.from_samples(_samples(rows))
    assert data.models == ("m1", "m2") and data.n_subdomains == 2 and data.has_subdomain_structure
    assert data.numeric_covariates == ("cov_effort",)
    assert data.categorical_covariates == {"cov_difficulty": ("easy", "hard")}
    # units split by covariate value: model x item x effort
    assert data.n_units == 2 * 6 * 2
    # each unit holds one attempt (the effort values split every item's two attempts)
    assert "every LLM's item at one set of covariate values has one countable attempt" in applicability(
        "suite_beta_binomial", data
    )
    assert applicability("suite_binomial", data) is None
    assert "one LLM" in applicability("binomial", data)
    arrays = build_arrays(data, layout_for(data), {})
    assert arrays["cov_numeric"][: data.n_units, 0].tolist().count(-1.0) == data.n_units // 2  # centred 0/2 -> -1/+1
    assert (
        arrays["unit_mask"].sum() == data.n_units and len(arrays["unit_mask"]) == layout_for(data).units >= data.n_units
    )


def test_the_beta_binomial_is_not_applicable_when_every_unit_has_one_attempt():
    """With one trial a unit's beta-binomial is a Bernoulli with mean p whatever phi is: the overdispersion
    is not identified, and the model is recorded as not applicable with the reason. One unit with two
    attempts informs phi, and then it is fitted; so are the binomial and null models either way."""

    def samples(epochs_of, model="m", graded=False):
        return [
            {
                "model": model,
                "subdomain": f"s{i % 2}",
                "item_id": f"q{i}",
                "epoch": e + 1,
                "score": 0.25 + 0.5 * ((i + e) % 2) if graded else float((i + e) % 3 == 0),
            }
            for i, epochs in enumerate(epochs_of)
            for e in range(epochs)
        ]

    once = GlmData.from_samples(_samples(samples([1] * 12)))
    reason = applicability("beta_binomial", once)
    assert reason == (
        "every item has one countable attempt: the beta-binomial's overdispersion phi is not "
        "identified (its posterior would be its prior) and its likelihood equals the binomial's"
    )
    assert applicability("binomial", once) is None and applicability("null", once) is None
    assert "needs repeats" in applicability("item_difficulty", once)
    one_repeat = GlmData.from_samples(_samples(samples([1] * 11 + [2])))
    assert applicability("beta_binomial", one_repeat) is None
    assert applicability("beta_binomial", GlmData.from_samples(_samples(samples([3] * 12)))) is None
    # graded scores: thresholded to 0/1 they are Bernoulli too; kept fractional, the quasi-likelihood
    # at k strictly between 0 and 1 depends on phi, and the model is fitted
    graded = _samples(samples([1] * 12, graded=True))
    assert applicability("beta_binomial", GlmData.from_samples(graded)) == reason
    assert applicability("beta_binomial", GlmData.from_samples(graded, graded="fractional")) is None

    suite = GlmData.from_samples(_samples(samples([1] * 12, "a") + samples([1] * 12, "b")))
    assert applicability("suite_beta_binomial", suite).startswith("every LLM's item has one countable attempt:")
    assert applicability("suite_binomial", suite) is None and applicability("suite_null", suite) is None
    repeated = GlmData.from_samples(_samples(samples([1] * 12, "a") + samples([1] * 11 + [2], "b")))
    assert applicability("suite_beta_binomial", repeated) is None
    # with one LLM the scope's reason comes first
    assert "needs two or more LLMs" in applicability("suite_beta_binomial", once)

    # the premise: at n = 1 the beta-binomial's log-pmf is log p or log(1 - p) for every phi
    p = np.array([0.2, 0.7])
    for grid in (np.arange(4, dtype=np.float32), np.zeros(0, np.float32)):
        for phi in (0.05, 1.0, 40.0):
            pmf = _BetaBinomial(p * phi, (1 - p) * phi, np.ones(2), grid)
            np.testing.assert_allclose(np.exp(pmf.log_prob(np.array([1.0, 0.0]))), [0.2, 0.3], rtol=1e-4)


def test_a_covariate_with_one_value_is_not_a_covariate_of_the_models():
    """A constant covariate's slope (on a centred constant: zero) or one-level effect is not identified: it
    is left out of the design, named in the data's meta, and a design left without covariates has none."""
    from evalpipeline.models.glm import structure_options

    rows = [
        {
            "item_id": f"q{i}",
            "epoch": e,
            "score": float((i + e) % 2),
            "cov_effort": 3,
            "cov_judge": "gpt",
            "cov_length": i % 4,
            "cov_kind": "ab"[i % 2],
        }
        for i in range(8)
        for e in (1, 2)
    ]
    data = GlmData.from_samples(_samples(rows))
    assert data.numeric_covariates == ("cov_length",) and data.categorical_covariates == {"cov_kind": ("a", "b")}
    assert data.meta["constant_covariates"] == ["cov_effort", "cov_judge"]
    assert data.n_units == 8 and structure_options("binomial", data)["use_covariates"]
    alone = GlmData.from_samples(
        _samples([{k: v for k, v in r.items() if k not in ("cov_length", "cov_kind")} for r in rows])
    )
    assert alone.numeric_covariates == () and alone.categorical_covariates == {}
    assert not structure_options("binomial", alone)["use_covariates"]
    varied = GlmData.from_samples(_samples([{**r, "cov_effort": r["epoch"]} for r in rows]))
    assert varied.numeric_covariates == ("cov_effort", "cov_length") and varied.meta["constant_covariates"] == [
        "cov_judge"
    ]


@pytest.mark.parametrize("use_difficulty, expected", [(False, set()), (True, {"category_effect", "category_sigma"})])
def test_suite_null_keeps_difficulty_only_when_asked(use_difficulty, expected):
    """The HiBayES paper contradicts itself on the null GLM: the text drops task difficulty, Eq. 6
    keeps diff_difficulty. Either way reasoning slopes and subdomains are out, LLM and task effects in."""
    import jax
    from numpyro.handlers import seed, trace

    from evalpipeline.models.glm import suite_null

    rows = [
        {
            "model": m,
            "subdomain": s,
            "item_id": f"{s}{i}",
            "epoch": 1,
            "score": 1.0,
            "correct": True,
            "cov_effort": e,
            "cov_difficulty": "hard" if i else "easy",
        }
        for m in ("m1", "m2")
        for s in ("x", "y")
        for i in range(3)
        for e in (0, 2)
    ]
    data = GlmData.from_samples(_samples(rows))
    arrays = {k: jax.numpy.asarray(v) for k, v in build_arrays(data, layout_for(data), {}).items()}
    sites = set(trace(seed(suite_null, 0)).get_trace(arrays, use_difficulty=use_difficulty))
    assert {"model", "task", "obs"} <= sites
    assert not sites & {"slope", "slope_mu", "subdomain_dev", "domain_dev"}
    assert sites & {"category_effect", "category_sigma"} == expected


def test_item_difficulty_needs_repeats():
    once = GlmData.from_counts(pd.DataFrame({"item_id": list("abc"), "k": [1, 0, 1], "n": [1, 1, 1]}))
    thrice = GlmData.from_counts(pd.DataFrame({"item_id": list("abc"), "k": [1, 0, 3], "n": [3, 3, 3]}))
    assert "repeats" in applicability("item_difficulty", once)
    assert applicability("item_difficulty", thrice) is None


@pytest.mark.parametrize(
    "bad, message",
    [
        (pd.DataFrame({"k": [2], "n": [1]}), "0 <= k <= n"),
        (pd.DataFrame({"k": [0], "n": [0]}), "n > 0"),
        (pd.DataFrame({"n": [1]}), "lacks column"),
        (pd.DataFrame({"item_id": ["a", "a"], "subdomain": ["x", "y"], "k": [0, 1], "n": [1, 1]}), "more than one"),
    ],
)
def test_bad_counts_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        GlmData.from_counts(bad)


def test_bad_samples_and_settings_are_rejected():
    with pytest.raises(ValueError, match="required column"):
        GlmData.from_samples(pd.DataFrame({"item_id": ["a"]}))
    with pytest.raises(ValueError, match="no countable"):
        GlmData.from_samples(_samples([{"item_id": "a", "epoch": 1, "score": np.nan}]))
    with pytest.raises(ValueError, match="graded"):
        GlmData.from_samples(_samples([{"item_id": "a", "epoch": 1, "score": 1.0}]), graded="round")
    with pytest.raises(ValueError, match="num_warmup"):
        FitSettings(num_warmup=0)
    with pytest.raises(ValueError, match="target_accept"):
        FitSettings(target_accept=1.0)
    with pytest.raises(ValueError, match="unknown model"):
        applicability("nope", GlmData.from_counts(pd.DataFrame({"k": [1], "n": [1]})))


def test_seed_from_key_is_stable_and_distinct():
    assert (
        seed_from_key("m|s|glm")
        == seed_from_key("m|s|glm")
        == int(__import__("hashlib").sha256(b"m|s|glm").hexdigest()[:8], 16)
    )
    assert seed_from_key("m|s|glm") != seed_from_key("m|s|beta")
    with pytest.raises(ValueError):
        seed_from_key("")


def test_hpdi_matches_closed_forms():
    rng = np.random.default_rng(1)
    normal = rng.normal(size=(200_000, 1))
    low, high = hpdi(normal, 0.95)
    assert low[0] == pytest.approx(-1.96, abs=0.02) and high[0] == pytest.approx(1.96, abs=0.02)
    expo = rng.exponential(size=(200_000, 1))  # HPDI of Exp(1) is [0, -log(0.05)]
    low, high = hpdi(expo, 0.95)
    assert low[0] == pytest.approx(0.0, abs=0.01) and high[0] == pytest.approx(-np.log(0.05), abs=0.03)


def test_beta_binomial_pmf_matches_scipy_both_forms():
    k, n = np.array([0.0, 1, 2, 3, 5, 9]), np.array([3.0, 3, 4, 3, 10, 9])
    a, b = np.array([0.3, 1.2, 2.0, 0.05, 4.0, 0.5]), np.array([0.7, 0.4, 3.0, 0.9, 0.1, 2.5])
    expected = stats.betabinom.logpmf(k, n, a, b)
    grid = _BetaBinomial(a, b, n, np.arange(16, dtype=np.float32)).log_prob(k)
    gammaln = _BetaBinomial(a, b, n, np.zeros(0, np.float32)).log_prob(k)
    np.testing.assert_allclose(np.asarray(grid), expected, atol=2e-5)
    np.testing.assert_allclose(np.asarray(gammaln), expected, atol=2e-5)


def test_success_rate_check_flags_missing_bimodality():
    # observed: half the items always fail, half always succeed (Figure 7's shape)
    data = GlmData.from_counts(pd.DataFrame({"k": [0] * 50 + [10] * 50, "n": [10] * 100}))
    rng = np.random.default_rng(2)
    binomial_like = rng.binomial(10, 0.5, size=(300, 100))
    bimodal_like = rng.binomial(10, rng.beta(0.05, 0.05, size=(300, 100)))
    share = lambda t: t.set_index("stat").loc["share_at_0_or_1"]
    bad, good = success_rate_check(data, binomial_like), success_rate_check(data, bimodal_like)
    assert share(bad)["observed"] == 1.0 and not share(bad)["inside"] and share(bad)["p_value"] == 0.0
    assert share(good)["simulated_mean"] > 0.8
    assert bad[bad.stat == "bin_share"]["observed"].sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        success_rate_check(data, binomial_like[:, :5])


def test_success_rate_check_bins_integer_counts_by_lookup_as_it_bins_their_rates():
    """Integer counts are binned by a table of each trial count's possible rates; the result must be the
    searching of every simulated rate's bin (the float path), exactly: rates on the bin edges (3/10,
    1/5, 0 and 1) included, and counts above 255 trials (uint16)."""
    trials = np.array([1, 2, 3, 5, 10, 300] * 40)
    rng = np.random.default_rng(8)
    data = GlmData.from_counts(pd.DataFrame({"k": rng.binomial(trials, 0.4), "n": trials}))
    for p in (0.02, 0.3, 0.5, 0.98):
        counts = rng.binomial(np.broadcast_to(trials, (200, trials.size)), p).astype(np.uint16)
        by_lookup, by_search = success_rate_check(data, counts), success_rate_check(data, counts.astype(float))
        pd.testing.assert_frame_equal(by_lookup, by_search, check_exact=True)
        assert by_lookup.loc[by_lookup.stat == "bin_share", "simulated_mean"].sum() == pytest.approx(1.0)


def _two_domains(rates, n):
    return GlmData.from_counts(pd.DataFrame({"domain": ["a", "b"], "k": [round(r * n) for r in rates], "n": [n, n]}))


def test_centring_follows_information_and_the_spread_of_the_groups():
    from evalpipeline.models.glm import choose_centring, group_spread

    scales = {"domain": 0.1}
    # use case 1's shape: two domains measured precisely and far apart -> the data pin each one: centred
    apart = _two_domains((0.47, 0.84), 5000)
    assert group_spread(apart, "domain") > 0.5
    assert choose_centring(apart, scales) == {"domain": "centred"}
    # as precisely measured but alike: sigma may be ~0, the centred funnel -> non-centred
    alike = _two_domains((0.60, 0.61), 5000)
    assert group_spread(alike, "domain") == 0.0
    assert choose_centring(alike, scales) == {"domain": "non_centred"}
    # far apart but barely measured: the prior, not the data, decides -> non-centred
    assert choose_centring(_two_domains((0.2, 0.8), 10), scales) == {"domain": "non_centred"}
    assert choose_centring(alike, scales, mode="centred") == {"domain": "centred"}
    with pytest.raises(ValueError, match="centring"):
        choose_centring(alike, scales, mode="sideways")


def test_group_spread_recovers_a_planted_sd_from_below():
    from evalpipeline.models.glm import group_spread

    rng = np.random.default_rng(11)
    logits = rng.normal(0.0, 0.8, size=40)
    frame = pd.DataFrame({"domain": "d", "subdomain": [f"s{i}" for i in range(40)], "n": 4000})
    frame["k"] = rng.binomial(4000, 1 / (1 + np.exp(-logits)))
    spread = group_spread(GlmData.from_counts(frame), "subdomain")
    sd = np.std(logits, ddof=1)
    assert 0.6 * sd < spread < sd  # a lower bound, not far below


def test_leaderboard_suite_layout_keeps_its_shape_when_one_llm_joins():
    """100 -> 101 LLMs x 200 items must reuse the compiled sampler, and units are padded by at most 1/8."""
    from evalpipeline.models.glm import padded_models, padded_units

    def suite(n_models):
        rows = [
            {
                "model": f"m{m:03d}",
                "subdomain": f"s{i % 4}",
                "item_id": f"q{i}",
                "epoch": 1,
                "score": float((m + i) % 3 == 0),
                "correct": None,
            }
            for m in range(n_models)
            for i in range(200)
        ]
        return GlmData.from_samples(_samples(rows))

    assert layout_for(suite(100)) == layout_for(suite(101))
    assert layout_for(suite(100)).models == 104 and layout_for(suite(100)).units == 20_480
    # on the LLM x task grid the units are padded by whole LLMs: a new LLM keeps the shape too
    assert layout_for(suite(100), grid=True) == layout_for(suite(101), grid=True)
    assert layout_for(suite(100), grid=True).units == 104 * 200
    for size in (2049, 4000, 8193, 20_000, 123_457):
        assert size <= padded_units(size) <= size * 1.125
    assert [padded_models(n) for n in (1, 4, 8, 9, 100)] == [1, 4, 8, 16, 104]
    assert padded_units(200) == 512  # per-partition fits keep their shared bucket


def test_padded_llm_slots_add_only_their_own_standard_normal_prior():
    """The log joint with 16 LLM slots for 9 LLMs = the one with 9 slots + the N(0, 1) log densities of the empty slots."""
    import dataclasses

    import jax.numpy as jnp
    from numpyro.infer.util import log_density
    from scipy import stats as sstats

    from evalpipeline.models.glm import suite_binomial

    rows = [
        {
            "model": f"m{m}",
            "subdomain": f"s{i % 2}",
            "item_id": f"q{i}",
            "epoch": 1,
            "score": float((m * i) % 5 < 2),
            "correct": None,
        }
        for m in range(9)
        for i in range(12)
    ]
    data = GlmData.from_samples(_samples(rows))
    centring = {"model": "non_centred", "subdomain": "non_centred", "item": "non_centred"}
    padded = layout_for(data)
    exact = dataclasses.replace(padded, models=9, slope_groups=9)
    assert padded.models == 16
    rng = np.random.default_rng(3)
    params = {
        "overall": 0.3,
        "sigma_model": 0.7,
        "sigma_domain": 0.1,
        "sigma_subdomain": 0.2,
        "sigma_task": 0.4,
        "subdomain_dev_raw": rng.normal(size=padded.subdomains),
        "task_raw": rng.normal(size=padded.items),
        "domain_dev_raw": rng.normal(size=padded.domains),
        "model_raw": rng.normal(size=padded.models),
    }

    def joint(layout, model_raw):
        arrays = {k: jnp.asarray(v) for k, v in build_arrays(data, layout, centring).items()}
        return float(log_density(suite_binomial, (arrays,), {}, dict(params, model_raw=model_raw))[0])

    empty_slots = sstats.norm.logpdf(params["model_raw"][9:]).sum()
    assert joint(padded, params["model_raw"]) == pytest.approx(
        joint(exact, params["model_raw"][:9]) + empty_slots, rel=1e-6
    )


def _crossed_suite(split: bool) -> GlmData:
    # 5 LLMs x 12 tasks in 3 subdomains of uneven size (split) or in one
    sizes = {"s0": 4, "s1": 3, "s2": 5} if split else {"s0": 12}
    items = [(f"q{i}", s) for i, s in enumerate(s for s, n in sizes.items() for _ in range(n))]
    rows = [
        {
            "model": f"m{m}",
            "subdomain": s,
            "item_id": q,
            "epoch": 1,
            "score": float((m * 7 + i) % 3 == 0),
            "correct": None,
        }
        for m in range(5)
        for i, (q, s) in enumerate(items)
    ]
    return GlmData.from_samples(_samples(rows))


@pytest.mark.parametrize("nested", [True, False], ids=["tasks in 3 subdomains", "one subdomain"])
@pytest.mark.parametrize(
    "model_form,item_form", [("centred", "non_centred"), ("non_centred", "centred"), ("centred", "centred")]
)
def test_group_mean_basis_is_the_same_model(nested, model_form, item_form):
    """The suite GLM in the group-mean basis has the plain basis's log joint at matched effects, plus only
    the prior of the coordinates the basis leaves unused: an orthogonal change of variables (unit
    Jacobian), the same priors and likelihood. A wrong scale, centre or reflection breaks the equality."""
    import jax.numpy as jnp
    from numpyro.handlers import seed, substitute, trace
    from numpyro.infer.util import log_density

    from evalpipeline.models.glm import crossed_arrays, item_subdomains, structure_options, suite_binomial

    data = _crossed_suite(nested)
    assert item_subdomains(data) is not None  # GlmData requires each item in one subdomain
    options = structure_options("suite_binomial", data)
    assert options["tasks_nested"] and options["use_subdomain"] == nested
    centring = {"model": model_form, "subdomain": "non_centred", "item": item_form}
    layout = layout_for(data)
    arrays = {
        k: jnp.asarray(v) for k, v in (build_arrays(data, layout, centring) | crossed_arrays(data, layout)).items()
    }
    new = dict(options, group_mean_basis=True)
    rng = np.random.default_rng(11)
    scalars = {"overall": -0.4, "sigma_model": 0.8, "sigma_subdomain": 0.15, "sigma_task": 0.6}
    # random coordinates of the new basis, then the effects they give
    shapes = {
        name: site["value"].shape
        for name, site in trace(seed(suite_binomial, 0)).get_trace(arrays, **new).items()
        if site["type"] == "sample" and not site.get("is_observed", False)
    }
    coords = {name: (scalars[name] if name in scalars else rng.normal(size=shape)) for name, shape in shapes.items()}
    tr = trace(substitute(suite_binomial, data=coords)).get_trace(arrays, **new)
    model, task = (np.asarray(tr[s]["value"]) for s in ("model", "task"))
    sub = np.asarray(tr["subdomain_dev"]["value"]) if nested else None
    # the plain basis's coordinates for the same effects (padding slots shared)
    c_model, c_item = np.asarray(arrays["c_model"]), np.asarray(arrays["c_item"])
    rest = "task_rest_raw" if nested else "task_all_rest_raw"
    model_raw = np.where(c_model == 1, model, (model - scalars["overall"]) / scalars["sigma_model"])
    task_raw = np.where(c_item == 1, task, task / scalars["sigma_task"])
    model_raw[data.n_models :] = coords["model_rest_raw"][data.n_models :]
    task_raw[data.n_items :] = coords[rest][data.n_items :]
    plain = {k: v for k, v in coords.items() if not k.startswith(("model_", "task_"))}
    plain.update(model_raw=model_raw, task_raw=task_raw)
    plain_joint = float(log_density(suite_binomial, (arrays,), dict(options, group_mean_basis=False), plain)[0])
    new_joint = float(log_density(suite_binomial, (arrays,), new, coords)[0])

    # the unused coordinates: each group's first slot of the rest
    def logpdf(site, index):
        return float(np.sum(np.asarray(tr[site]["fn"].log_prob(tr[site]["value"]))[index]))

    firsts = np.asarray(arrays["group_first"])[: data.n_subdomains] if nested else np.array([0])
    unused = logpdf("model_rest_raw", np.array([0])) + logpdf(rest, firsts)
    assert np.asarray(arrays["group_size"]).tolist() == ([4.0, 3.0, 5.0] if nested else [12.0])  # real groups only
    assert new_joint == pytest.approx(plain_joint + unused, rel=0, abs=1e-3)  # float32 sums of ~800 terms
    if not nested:
        return
    # and the subdomains' logits are unchanged coordinates
    np.testing.assert_array_equal(
        sub,
        np.asarray(
            trace(substitute(suite_binomial, data=plain)).get_trace(arrays, **dict(options, group_mean_basis=False))[
                "subdomain_dev"
            ]["value"]
        ),
    )


def test_curvature_inverse_mass_is_one_over_the_curvature_at_the_mode():
    """Closed form: potential sum(exp(x) - c x) has its mode at log c with curvature c there (1 at the
    start x = 0), so the starting inverse mass is 1 / c per coordinate, as one vector over the sorted
    sites or, with a dense block, a diagonal block matrix and a vector for the other sites."""
    import jax
    import jax.numpy as jnp

    from evalpipeline.models.fit import curvature_inverse_mass

    c = {"a": jnp.array([0.5, 2.0, 4.0]), "b": jnp.array(3.0), "z": jnp.array([1.5, 0.8])}

    def potential(z):
        return sum(jnp.sum(jnp.exp(z[k]) - c[k] * z[k]) for k in c)

    start = {k: jnp.zeros_like(v) for k, v in c.items()}
    flat = curvature_inverse_mass(potential, start, jax.random.PRNGKey(0))
    expected = 1.0 / np.concatenate([np.atleast_1d(np.asarray(c[k])) for k in sorted(c)])
    np.testing.assert_allclose(np.asarray(flat), expected, rtol=0.05)
    blocked = curvature_inverse_mass(potential, start, jax.random.PRNGKey(0), ("b", "a"))
    assert set(blocked) == {("b", "a"), ("z",)}
    np.testing.assert_allclose(
        np.asarray(blocked[("b", "a")]), np.diag(1.0 / np.array([3.0, 0.5, 2.0, 4.0])), rtol=0.05, atol=1e-6
    )
    np.testing.assert_allclose(np.asarray(blocked[("z",)]), 1.0 / np.array([1.5, 0.8]), rtol=0.05)


def test_a_dense_block_starts_from_the_inverse_of_its_hessian_at_the_mode():
    """Closed form: a Gaussian potential 0.5 x'Ax - b'x over the block's sites (mode A^-1 b, Hessian A
    everywhere) plus sum(exp(y) - c y) for the rest. The block's starting inverse mass is A^-1, whose
    off-diagonal terms the diagonal start missed; the other sites keep 1 / c. A block whose Hessian has
    eigenvalues outside [1e-2, 1e6] gets them clipped there."""
    import jax
    import jax.numpy as jnp

    from evalpipeline.models.fit import curvature_inverse_mass

    a = jnp.array([[2.0, 1.5, 0.3], [1.5, 2.0, 0.5], [0.3, 0.5, 1.0]])  # strongly correlated, positive definite
    b = jnp.array([0.4, -0.2, 0.1])
    c = jnp.array([1.5, 0.8])

    def potential(z):
        x = jnp.concatenate([jnp.atleast_1d(z["overall"]), z["mean"]])
        return 0.5 * x @ a @ x - b @ x + jnp.sum(jnp.exp(z["rest"]) - c * z["rest"])

    start = {"overall": jnp.array(0.0), "mean": jnp.zeros(2), "rest": jnp.zeros(2)}
    blocked = curvature_inverse_mass(potential, start, jax.random.PRNGKey(0), ("overall", "mean"))
    assert set(blocked) == {("overall", "mean"), ("rest",)}
    np.testing.assert_allclose(np.asarray(blocked[("overall", "mean")]), np.linalg.inv(np.asarray(a)), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(blocked[("rest",)]), 1.0 / np.asarray(c), rtol=0.05)

    flat = jnp.diag(jnp.array([1e-4, 1e8]))  # curvatures outside the clip range, both ways

    def extreme(z):
        return 0.5 * z["x"] @ flat @ z["x"]

    clipped = curvature_inverse_mass(extreme, {"x": jnp.ones(2), "y": jnp.zeros(1)}, jax.random.PRNGKey(0), ("x",))
    np.testing.assert_allclose(np.asarray(clipped[("x",)]), np.diag([1e2, 1e-6]), rtol=1e-3)


def _grid_suite(n_models: int = 5, n_items: int = 12, subdomains: int = 3, domains: int = 1, skip=None) -> GlmData:
    # task i in subdomain (7 i) mod S: GlmData orders an LLM's units by subdomain, then task name, so
    # the grid's columns are a permutation of the task indices (q10 sorts before q2, too)
    rows = [
        {
            "model": f"m{m}",
            "domain": f"d{i % domains}",
            "subdomain": f"s{(7 * i) % subdomains}",
            "item_id": f"q{i}",
            "epoch": 1,
            "score": float((m * 5 + i * 3) % 4 == 0),
            "correct": None,
        }
        for m in range(n_models)
        for i in range(n_items)
        if (m, i) != skip
    ]
    return GlmData.from_samples(_samples(rows))


def test_unit_grid_finds_complete_llm_by_task_grids_only():
    from evalpipeline.models.glm import unit_grid

    data = _grid_suite()
    order = unit_grid(data)
    assert order is not None and sorted(order) == list(range(12)) and list(order) != list(range(12))
    units = data.units
    np.testing.assert_array_equal(units["item_idx"].to_numpy().reshape(5, 12), np.tile(order, (5, 1)))
    assert unit_grid(_grid_suite(skip=(2, 5))) is None  # one LLM skipped a task
    assert unit_grid(_grid_suite(n_models=1)) is None  # one LLM: a partition, not a suite
    repeated = _grid_suite().units.copy()
    repeated["cov_split"] = np.arange(len(repeated)) % 2  # a covariate splits no cell here: still a grid
    assert unit_grid(GlmData.from_counts(repeated, categorical=["cov_split"])) is not None
    doubled = pd.concat([repeated, repeated.assign(cov_split=1 - repeated["cov_split"])])  # two units per cell
    assert unit_grid(GlmData.from_counts(doubled, categorical=["cov_split"])) is None


@pytest.mark.parametrize("name", ["suite_binomial", "suite_beta_binomial", "suite_null"])
@pytest.mark.parametrize(
    "subdomains, domains, basis", [(3, 1, True), (3, 1, False), (1, 1, True), (4, 2, False), (4, 2, True)]
)
def test_the_grid_layout_is_the_same_model(name, subdomains, domains, basis):
    """The crossed suite models on the LLM x task grid have the per-unit layout's log joint and
    success probabilities at the same parameters: only how the linear predictor is formed differs
    (and the padding, which is masked). A wrong column order or axis breaks the equality."""
    import jax.numpy as jnp
    from numpyro.handlers import seed, substitute, trace
    from numpyro.infer.util import log_density

    from evalpipeline.models.glm import MODELS, crossed_arrays, grid_arrays, structure_options, unit_grid

    data = _grid_suite(subdomains=subdomains, domains=domains)
    order = unit_grid(data)
    options = dict(structure_options(name, data), group_mean_basis=basis)
    centring = {"model": "centred", "subdomain": "non_centred", "item": "centred"}
    fn = MODELS[name].fn

    def arrays_for(grid: bool):
        layout = layout_for(data, grid=grid)
        arrays = build_arrays(data, layout, centring) | crossed_arrays(data, layout)
        if grid:
            arrays |= grid_arrays(data, layout, order)
        return {k: jnp.asarray(v) for k, v in arrays.items()}, layout

    (plain, plain_layout), (grid, grid_layout) = arrays_for(False), arrays_for(True)
    assert grid_layout.units == grid_layout.models * data.n_items != plain_layout.units
    params = {
        site: value["value"]
        for site, value in trace(seed(fn, 7)).get_trace(plain, **options).items()
        if value["type"] == "sample" and not value.get("is_observed", False)
    }
    rng = np.random.default_rng(5)
    params = {
        k: jnp.asarray(rng.normal(size=np.shape(v)) * 0.7 + (1.0 if k.startswith(("sigma", "phi")) else 0.0))
        for k, v in params.items()
    }
    joint_plain = float(log_density(fn, (plain,), dict(options, unit_grid=False), params)[0])
    joint_grid = float(log_density(fn, (grid,), dict(options, unit_grid=True), params)[0])
    assert joint_grid == pytest.approx(joint_plain, rel=1e-5)
    p = [
        np.asarray(trace(substitute(fn, data=params)).get_trace(a, **dict(options, unit_grid=g))["p"]["value"])
        for a, g in ((plain, False), (grid, True))
    ]
    np.testing.assert_allclose(p[1][: data.n_units], p[0][: data.n_units], rtol=1e-6)


@pytest.mark.parametrize("trials", [np.ones(50, np.int64), np.tile([1, 3], 25)], ids=["one trial", "mixed trials"])
def test_replicated_counts_follow_the_binomial_law(trials):
    """simulate_counts (the predictive checks' counts): one trial per unit takes the Bernoulli shortcut,
    other counts rng.binomial; either way each unit's mean over many draws is n p (within 4.5 standard
    errors), counts are whole numbers in [0, n], and the same generator state gives the same counts."""
    from evalpipeline.models.glm import simulate_counts

    p = np.linspace(0.02, 0.98, 50)[None, :].repeat(4000, axis=0)
    counts = simulate_counts(np.random.default_rng(3), trials, p)
    assert counts.shape == p.shape and (counts == np.round(counts)).all()
    assert (counts >= 0).all() and (counts <= trials).all()
    standard_error = np.sqrt(trials * p[0] * (1 - p[0]) / len(p))
    assert (np.abs(counts.mean(axis=0) - trials * p[0]) <= 4.5 * standard_error).all()
    assert (counts == simulate_counts(np.random.default_rng(3), trials, p)).all()
    # beta-binomial draws (phi) keep the mean n p
    overdispersed = simulate_counts(np.random.default_rng(4), trials, p, np.full(len(p), 5.0))
    spread = np.sqrt(trials * p[0] * (1 - p[0]) * (1 + (trials - 1) / 6.0) / len(p))
    assert (np.abs(overdispersed.mean(axis=0) - trials * p[0]) <= 4.5 * spread).all()
    # whole numbers in the smallest unsigned type holding n (what posterior.nc stores)
    assert counts.dtype == overdispersed.dtype == np.uint8


def test_replicated_counts_keep_counts_above_255_trials():
    """A unit of 300 attempts needs 16 bits: the compact type of the counts must not wrap them."""
    from evalpipeline.models.glm import simulate_counts

    trials = np.array([300, 1, 40])
    counts = simulate_counts(np.random.default_rng(5), trials, np.full((2000, 3), 0.9))
    assert counts.dtype == np.uint16 and counts.max() > 255 and (counts <= trials).all()
    assert abs(counts[:, 0].mean() - 270) < 4.5 * np.sqrt(300 * 0.09 / 2000)


def _cell_data(n_models: int, numeric: bool = True, categorical: bool = True) -> GlmData:
    """Units with repeated predictor values: LLMs x 2 domains x 3 subdomains each, covariates of few
    values, 1-3 attempts a unit, so that cells hold several units of different sizes."""
    rng = np.random.default_rng(11)
    rows = []
    for m in range(n_models):
        for i in range(48):
            n = int(rng.integers(1, 4))
            row = {
                "model": f"m{m}",
                "domain": f"d{i % 2}",
                "subdomain": f"s{(i // 2) % 3}",
                "item_id": f"q{i}",
                "n": n,
                "k": int(rng.integers(0, n + 1)),
            }
            if numeric:
                row["cov_length"] = float(i % 3)  # three values: splits each subdomain's units in three
            if categorical:
                row["cov_kind"] = "ab"[(i // 6) % 2]
            rows.append(row)
    return GlmData.from_counts(pd.DataFrame(rows), categorical=["cov_kind"] if categorical else [])


@pytest.mark.parametrize(
    "name,n_models,covariates",
    [
        ("binomial", 1, True),
        ("binomial", 1, False),
        ("null", 1, False),
        ("suite_nested", 3, False),
    ],
)
def test_a_cell_model_has_the_log_density_and_gradient_of_its_units_on_its_likelihood_cells(name, n_models, covariates):
    """glm.cell_arrays sums k, n and log C(n, k) over the units that share every predictor input
    (LLM, domain, subdomain, covariate values); the sampler's potential reads those cells
    (glm.potential_arrays). The log joint and its gradient at random parameters equal the per-unit
    ones (float32), and there is one cell per distinct predictor: grouping too coarsely (a covariate
    left out of the key) changes the density, too finely gains nothing."""
    import jax
    from numpyro.handlers import seed, trace
    from numpyro.infer.util import log_density

    from evalpipeline.models.glm import (
        CELL_PREFIX,
        MODELS,
        cell_arrays,
        potential_arrays,
        samples_on_cells,
        structure_options,
    )

    data = _cell_data(n_models, numeric=covariates, categorical=covariates)
    options = structure_options(name, data)
    assert samples_on_cells(name, options)
    layout = layout_for(data)
    arrays = build_arrays(data, layout, {"model": "centred", "domain": "non_centred", "subdomain": "centred"})
    cells = cell_arrays(arrays, data.n_units)
    assert cells is not None
    keys = ["model", "domain", "subdomain"] + (["cov_length", "cov_kind"] if covariates else [])
    expected = data.units.groupby(keys)[["k", "n"]].sum()
    real = cells[CELL_PREFIX + "unit_mask"]
    assert real.sum() == len(expected) < data.n_units
    assert cells[CELL_PREFIX + "n"][real].sum() == data.units["n"].sum()
    assert sorted(cells[CELL_PREFIX + "k_obs"][real]) == sorted(expected["k"])
    sampled = potential_arrays({**arrays, **cells})
    assert len(sampled["k_obs"]) == len(real) < len(arrays["k_obs"])
    fn = MODELS[name].fn
    params = {
        site: value["value"]
        for site, value in trace(seed(fn, 3)).get_trace(arrays, **options).items()
        if value["type"] == "sample" and not value.get("is_observed", False)
    }
    rng = np.random.default_rng(8)
    for _ in range(3):
        point = {k: rng.normal(size=np.shape(v)) * 0.6 for k, v in params.items()}
        point = {
            k: jax.numpy.asarray(np.abs(v) + 0.1 if "sigma" in k else v, dtype=np.float32) for k, v in point.items()
        }

        def joint(p, a):
            return log_density(fn, (a,), options, p)[0]

        per_unit, per_cell = float(joint(point, arrays)), float(joint(point, sampled))
        assert per_cell == pytest.approx(per_unit, rel=2e-6, abs=1e-3)
        g_unit, g_cell = jax.grad(joint)(point, arrays), jax.grad(joint)(point, sampled)
        for site in point:
            np.testing.assert_allclose(np.asarray(g_cell[site]), np.asarray(g_unit[site]), rtol=1e-4, atol=1e-3)


def test_only_binomial_models_without_item_terms_sample_on_cells_and_only_when_cells_are_fewer():
    from evalpipeline.models.glm import cell_arrays, samples_on_cells

    assert samples_on_cells("binomial", {}) and samples_on_cells("null", {}) and samples_on_cells("suite_nested", {})
    for name in ("beta_binomial", "item_difficulty", "suite_binomial", "suite_beta_binomial", "suite_null"):
        assert not samples_on_cells(name, {})
    assert not samples_on_cells("binomial", {"likelihood": "beta_binomial"})
    assert not samples_on_cells("binomial", {"item_sd_concentration": 2.0})  # a per-item difficulty
    distinct = _cell_data(1).units.assign(cov_length=np.arange(48.0))  # every unit its own covariate value
    data = GlmData.from_counts(distinct, categorical=["cov_kind"])
    assert cell_arrays(build_arrays(data, layout_for(data), {}), data.n_units) is not None  # 48 cells -> 128 < 512
    many = GlmData.from_counts(
        pd.concat(
            [
                distinct.assign(item_id=distinct["item_id"] + f"-{j}", cov_length=distinct["cov_length"] + 100 * j)
                for j in range(11)
            ]
        ),
        categorical=["cov_kind"],
    )
    assert many.n_units == 528 and cell_arrays(build_arrays(many, layout_for(many), {}), many.n_units) is None
