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


@pytest.mark.parametrize("draws_per_chunk", [1, 37, 400, 1600])
def test_draws_given_in_chunks_give_the_whole_matrixs_values(draws_per_chunk):
    """StreamingLoo fed a chunk of draws (and a block of units) at a time: the values of the whole matrix,
    edge units included; only a unit with a value that is not finite is asked for its whole row (for
    arviz); the variance is numpy's."""
    idata = _idata(4, 400, 60, 5, edge_units=True)
    matrix, reff = psis.log_likelihood_matrix(idata)
    matrix[7, 123] = -np.inf
    whole = psis.loo_from_log_likelihood(matrix, reff)
    terms = psis.StreamingLoo(60, 1600, reff)
    asked = []
    for start in range(0, 1600, draws_per_chunk):
        for units in (slice(0, 25), slice(25, 60)):
            terms.add(matrix[units, start : start + draws_per_chunk], units=units)

    def rows(index):
        asked.extend(index)
        return matrix[index]

    loo_i, pareto_k, lppd_i, variance = terms.finish(rows)
    assert asked == [7]
    np.testing.assert_array_equal(np.isnan(pareto_k), np.isnan(whole.pareto_k))
    np.testing.assert_allclose(pareto_k, whole.pareto_k, rtol=0, atol=1e-12)
    np.testing.assert_allclose(loo_i, whole.loo_i, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lppd_i, whole.lppd_i, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(variance, matrix.var(axis=1), rtol=1e-10, atol=1e-12)


def test_a_missing_chunk_is_an_error():
    terms = psis.StreamingLoo(3, 100, 1.0)
    terms.add(np.zeros((3, 60)))
    with pytest.raises(ValueError, match="60-60 draws were added, 100 announced"):
        terms.finish(lambda index: None)
