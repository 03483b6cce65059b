"""Stored WAIC / PSIS-LOO terms (evalpipeline/models/compare.py): the rankings computed from them are
arviz's, to rounding, and they survive the round trip through criteria.parquet unchanged."""

import warnings

import arviz as az
import numpy as np
import pytest

from evalpipeline.models.compare import PointwiseCriteria, compare_fits, pointwise_criteria, single_fit_criteria


def _idata(seed: int, shift: float, units: int = 60) -> az.InferenceData:
    rng = np.random.default_rng(seed)
    # heavy-ish tails so some units warn (p_waic_i > 0.4, Pareto-k > 0.7)
    log_lik = shift - 1.0 + rng.normal(0, 0.4, (4, 250, units)) - 0.4 * np.abs(rng.standard_t(2.5, (4, 250, units)))
    effects = rng.normal(size=(4, 250, 3)).cumsum(axis=1) * 0.05  # autocorrelated: reff < 1
    return az.from_dict(
        posterior={"effect": effects},
        log_likelihood={"obs": log_lik},
        observed_data={"obs": np.arange(units, dtype=float)},
    )


@pytest.fixture(scope="module")
def idatas():
    return {"a": _idata(1, 0.0), "b": _idata(2, 0.08), "c": _idata(3, -0.15)}


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_terms_give_arvizs_waic_and_loo(idatas):
    for idata in idatas.values():
        criteria = pointwise_criteria(idata)
        waic, loo = _quiet(az.waic, idata, pointwise=True), _quiet(az.loo, idata, pointwise=True)
        ours_waic, ours_loo = criteria.waic(), criteria.loo()
        np.testing.assert_allclose(ours_waic["waic_i"].values, waic["waic_i"].values, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours_loo["pareto_k"].values, loo["pareto_k"].values, rtol=0, atol=1e-12)
        for name in ("elpd_waic", "se", "p_waic"):
            assert float(ours_waic[name]) == pytest.approx(float(waic[name]), rel=1e-12), name
        for name in ("elpd_loo", "se", "p_loo", "good_k"):
            assert float(ours_loo[name]) == pytest.approx(float(loo[name]), rel=1e-10), name
        assert ours_waic["warning"] == waic["warning"] and ours_loo["warning"] == loo["warning"]
    assert any(pointwise_criteria(i).waic()["warning"] for i in idatas.values())  # the warning path is exercised


def test_round_trip_through_parquet_is_exact(idatas):
    criteria = pointwise_criteria(idatas["a"])
    back = PointwiseCriteria.from_table(criteria.to_table())
    for name in ("waic_i", "p_waic_i", "loo_i", "lppd_i", "pareto_k"):
        np.testing.assert_array_equal(getattr(back, name), getattr(criteria, name))
    assert (back.n_samples, back.observed_total, back.n_units) == (1000, float(np.arange(60).sum()), 60)


@pytest.mark.parametrize("ic", ["waic", "loo"])
def test_comparison_from_terms_is_arvizs(idatas, ic):
    expected = _quiet(az.compare, idatas, ic=ic, scale="log")
    from_terms = compare_fits({name: pointwise_criteria(i) for name, i in idatas.items()}).set_index("model")
    assert compare_fits(idatas).set_index("model").equals(from_terms)  # InferenceData in, same table
    column = {
        "elpd": f"elpd_{ic}",
        "se": f"{ic}_se" if ic == "waic" else "loo_se",
        "p": f"p_{ic}",
        "diff": f"d_{ic}",
        "dse": f"{ic}_dse",
        "rank": f"{ic}_rank",
        "weight": f"{ic}_weight",
    }
    for name in idatas:
        row, want = from_terms.loc[name], expected.loc[name]
        assert row[column["rank"]] == want["rank"]
        for ours, theirs in (
            ("elpd", f"elpd_{ic}"),
            ("se", "se"),
            ("p", f"p_{ic}"),
            ("diff", "elpd_diff"),
            ("dse", "dse"),
        ):
            assert row[column[ours]] == pytest.approx(float(want[theirs]), rel=1e-9, abs=1e-12), (name, ours)
        assert row[column["weight"]] == pytest.approx(float(want["weight"]), abs=1e-9)  # stacking's optimiser


def test_a_lone_candidate_and_mismatched_units(idatas):
    row = single_fit_criteria("a", idatas["a"], pareto_k_threshold=0.5).iloc[0]
    loo = _quiet(az.loo, idatas["a"], pointwise=True)
    assert row["elpd_loo"] == pytest.approx(float(loo["elpd_loo"]), rel=1e-10)
    assert row["n_pareto_k_high"] == int(np.sum(loo["pareto_k"].values > 0.5)) and row["waic_weight"] == 1.0
    with pytest.raises(ValueError, match="same observational units"):
        compare_fits({"a": idatas["a"], "short": _idata(4, 0.0, units=59)})
