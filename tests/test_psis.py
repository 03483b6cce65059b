"""The vectorised PSIS-LOO gives arviz.loo's numbers, unit by unit, including the units it hands back to arviz."""

import warnings

import arviz as az
import numpy as np
import pytest

from evalpipeline.models import psis


def _idata(chains: int, draws: int, units: int, seed: int, *, edge_units: bool = False) -> az.InferenceData:
    rng = np.random.default_rng(seed)
    log_lik = -np.abs(rng.normal(size=(chains, draws, units))) * rng.gamma(2.0, 0.5, size=units)
    if edge_units:
        log_lik[..., 0] = -0.7  # every draw equal: ties at the cutoff
        log_lik[..., 1] = np.round(log_lik[..., 1], 1)  # coarse values: ties in and around the tail
        log_lik[..., 2] = 0.9 * np.log(rng.random((chains, draws)))  # ratios U^-0.9: a Pareto tail, k ~ 0.9
        log_lik[..., 3] = -rng.pareto(0.5, size=(chains, draws)) * 50.0
        log_lik[..., 4] = -900.0 - rng.random((chains, draws))  # likelihoods below exp(-745)
    effects = rng.normal(size=(chains, draws, 7)).cumsum(axis=1) * 0.05  # autocorrelated: reff < 1
    return az.from_dict(posterior={"effect": effects}, log_likelihood={"obs": log_lik})


def _arviz(idata):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return az.loo(idata, pointwise=True)


@pytest.mark.parametrize("chains, draws, units, seed", [(4, 500, 3000, 1), (2, 250, 400, 2), (1, 800, 300, 3)])
def test_matches_arviz_loo(chains, draws, units, seed):
    idata = _idata(chains, draws, units, seed)
    expected, ours = _arviz(idata), psis.loo(idata)
    np.testing.assert_allclose(ours.pareto_k, expected.pareto_k.values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.loo_i, expected.loo_i.values, rtol=1e-12, atol=1e-12)
    for name in ("elpd_loo", "se", "p_loo"):
        assert getattr(ours, name) == pytest.approx(float(expected[name]), rel=1e-12, abs=1e-10), name
    assert ours.warning == bool(expected.warning)
    assert ours.n_samples == chains * draws


def test_edge_units_match_arviz():
    """Ties at the cutoff, heavy tails (k > 0.7) and vanishing likelihoods give arviz's values, NaN and inf included."""
    idata = _idata(4, 400, 50, 4, edge_units=True)
    expected, ours = _arviz(idata), psis.loo(idata)
    np.testing.assert_array_equal(np.isnan(ours.pareto_k), np.isnan(expected.pareto_k.values))
    np.testing.assert_allclose(ours.pareto_k, expected.pareto_k.values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.loo_i, expected.loo_i.values, rtol=1e-12, atol=1e-9)
    assert 0.7 < ours.pareto_k[2] < 1.2 and ours.warning


def test_rejects_a_malformed_matrix():
    with pytest.raises(ValueError, match="units, samples"):
        psis.loo_from_log_likelihood(np.zeros(10), 1.0)
