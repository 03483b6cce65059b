"""The vectorised r-hat and ESS give arviz's numbers, element by element, and a fit's diagnostics and
summary report them."""

import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr

from evalpipeline.models.convergence import convergence, ess_mean


def _chains(chains: int, draws: int, phi: float, seed: int) -> xr.Dataset:
    """AR(1) chains (autocorrelation ``phi``) for a vector variable whose elements probe the edge cases,
    and a scalar variable."""
    rng = np.random.default_rng(seed)
    x = np.zeros((chains, draws, 7))
    noise = rng.normal(size=x.shape)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    x[..., 1] = np.round(x[..., 1])  # ties: average ranks
    x[..., 2] = 3.0  # constant: ESS is the draw count, r-hat NaN
    x[0, 0, 3] = np.nan  # NaN: every statistic NaN
    x[0, :, 4] += np.linspace(0.0, 5.0, draws)  # one drifting chain: r-hat far above 1
    x[..., 5] = rng.integers(0, 2, size=(chains, draws))  # two values: tail quantiles on ties
    return xr.Dataset({"vector": (("chain", "draw", "k"), x), "scalar": (("chain", "draw"), x[..., 6])})


def _arviz(dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "r_hat": az.rhat(dataset, method="rank"),
            "ess_bulk": az.ess(dataset, method="bulk"),
            "ess_tail": az.ess(dataset, method="tail"),
            "ess_mean": az.ess(dataset, method="mean"),
        }


def _assert_same(ours: np.ndarray, expected) -> None:
    expected = np.asarray(expected.values, dtype=float)
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=0)


@pytest.mark.parametrize("chains, draws", [(4, 500), (4, 1001), (2, 4), (2, 5), (3, 7), (4, 10), (8, 50), (1, 100)])
@pytest.mark.parametrize("phi", [0.0, 0.5, 0.95, 0.999, -0.5])
def test_matches_arviz(chains, draws, phi):
    dataset = _chains(chains, draws, phi, seed=chains * 1000 + draws)
    expected, ours = _arviz(dataset), convergence(dataset)
    means = ess_mean(dataset)
    for name in ("vector", "scalar"):
        _assert_same(ours.r_hat[name], expected["r_hat"][name])
        _assert_same(ours.ess_bulk[name], expected["ess_bulk"][name])
        _assert_same(ours.ess_tail[name], expected["ess_tail"][name])
        _assert_same(means[name], expected["ess_mean"][name])


def test_the_edge_elements_behave_as_documented():
    ours = convergence(_chains(4, 200, 0.5, seed=3))
    r_hat, bulk = ours.r_hat["vector"], ours.ess_bulk["vector"]
    assert np.isnan(r_hat[2]) and bulk[2] == 4 * 200  # constant
    assert np.isnan(r_hat[3]) and np.isnan(bulk[3]) and np.isnan(ours.ess_tail["vector"][3])  # NaN draw
    assert r_hat[4] > 1.1 and r_hat[0] < 1.05  # a drifting chain is caught
    assert np.isnan(ours.extreme("r_hat", max))  # any NaN element: the fit fails its r-hat gate


def test_a_fit_reports_arvizs_r_hat_and_ess(tmp_path):
    from evalpipeline.models import Fitter, GlmData
    from evalpipeline.models.fit import FitSettings, fit_glm

    rng = np.random.default_rng(5)
    rows = [
        {
            "model": "m",
            "suite": "s",
            "domain": f"d{i % 2}",
            "subdomain": f"d{i % 2}/s{i % 4}",
            "item_id": f"q{i}",
            "epoch": e,
            "score": float(rng.random() < 0.6),
            "error": None,
            "limit": None,
        }
        for i in range(40)
        for e in (1, 2)
    ]
    import pandas as pd

    data = GlmData.from_samples(pd.DataFrame(rows))
    fit = fit_glm(
        "binomial", data, FitSettings(num_warmup=200, num_samples=200, num_chains=2), seed_key="conv", fitter=Fitter()
    )
    expected = _arviz(fit.idata.posterior)
    for name in ("r_hat", "ess_bulk", "ess_tail"):
        values = np.concatenate(
            [np.asarray(expected[name][v].values, float).ravel() for v in fit.idata.posterior.data_vars]
        )
        worst = values.max() if name == "r_hat" else values.min()
        reported = fit.diagnostics.set_index("diagnostic").loc[name, "value"]
        assert reported == pytest.approx(worst, rel=1e-10)
        for site in fit.summary["parameter"].unique():
            rows_ = fit.summary[fit.summary["parameter"] == site]
            np.testing.assert_allclose(
                rows_[name].to_numpy(float), np.asarray(expected[name][site].values, float).ravel(), rtol=1e-10
            )
