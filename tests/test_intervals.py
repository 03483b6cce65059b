import numpy as np
import pytest
from scipy import stats

from evalpipeline.stats.intervals import beta_hpdi, beta_posterior, clt_flags, clt_interval


def test_conjugate_update():
    assert beta_posterior(3, 10) == (4, 8)
    assert beta_posterior(2.5, 4, prior=(0.5, 0.5)) == (3.0, 2.0)
    with pytest.raises(ValueError):
        beta_posterior(11, 10)
    with pytest.raises(ValueError):
        beta_posterior(1, 2, prior=(0, 1))


@pytest.mark.parametrize("n", [1, 5, 40])
@pytest.mark.parametrize("mass", [0.9, 0.95])
def test_hpdi_closed_form_when_all_wrong(n, mass):
    # Beta(1, n + 1) has density decreasing on [0, 1]: HPDI = [0, 1 - (1 - mass)^(1 / (n + 1))].
    low, high = beta_hpdi(1, n + 1, mass)
    assert low == 0.0
    assert high == pytest.approx(1 - (1 - mass) ** (1 / (n + 1)), rel=1e-9)


@pytest.mark.parametrize("a,b", [(2, 5), (10, 3), (74, 3), (201, 26), (1.5, 1.5)])
def test_hpdi_is_the_shortest_interval_with_the_mass(a, b):
    low, high = beta_hpdi(a, b, 0.95)
    dist = stats.beta(a, b)
    assert dist.cdf(high) - dist.cdf(low) == pytest.approx(0.95, abs=1e-6)
    assert dist.pdf(low) == pytest.approx(dist.pdf(high), rel=1e-3)
    central = dist.ppf([0.025, 0.975])
    assert high - low <= central[1] - central[0] + 1e-12


def test_flat_posterior_gets_the_central_interval():
    # Beta(1, 1): every interval of length 0.95 is an HPDI; the central one is reported.
    assert beta_hpdi(1, 1, 0.95) == pytest.approx((0.025, 0.975))


def test_hpdi_refuses_u_shaped_and_bad_mass():
    with pytest.raises(ValueError, match="U-shaped"):
        beta_hpdi(0.5, 0.5)
    with pytest.raises(ValueError):
        beta_hpdi(2, 2, 1.0)


def _hpdi_through_the_frozen_distribution(a, b, mass):
    """The width search as it was written on ``stats.beta(a, b).ppf`` (before the quantile ufunc was called directly)."""
    from scipy import optimize

    dist = stats.beta(a, b)
    if a <= 1:
        return 0.0, float(dist.ppf(mass))
    if b <= 1:
        return float(dist.ppf(1 - mass)), 1.0
    best = optimize.minimize_scalar(
        lambda t: float(dist.ppf(t + mass) - dist.ppf(t)),
        bounds=(0.0, 1.0 - mass),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(dist.ppf(best.x)), float(dist.ppf(best.x + mass))


def test_hpdi_is_the_frozen_distribution_search_to_the_last_bit():
    # Every stored HPDI (leaderboards, posteriors, pairwise rows) must stay what it was.
    rng = np.random.default_rng(7)
    cases = [
        (a, b, m)
        for a in (1, 1.0000001, 1.5, 3, 50.5, 1e4, 2e5)
        for b in (0.3, 1.5, 99.5, 3e5)
        for m in (0.5, 0.89, 0.95, 0.99)
        if not (a == 1 and b == 1)
    ]
    cases += [(1 + rng.gamma(1, 50), 1 + rng.gamma(1, 50), 0.95) for _ in range(200)]
    for a, b, mass in cases:
        assert beta_hpdi(a, b, mass) == _hpdi_through_the_frozen_distribution(a, b, mass), (a, b, mass)


def test_clt_matches_eq5_for_binary_and_flags_failures():
    mean, low, high = clt_interval(np.array([1, 1, 0, 1]), 0.95)
    half = stats.norm.ppf(0.975) * np.sqrt(0.75 * 0.25 / 4)
    assert (mean, low, high) == pytest.approx((0.75, 0.75 - half, 0.75 + half))
    _, low, high = clt_interval(np.ones(10))
    assert clt_flags(low, high) == "zero width"
    _, low, high = clt_interval(np.array([1] * 19 + [0]))
    assert clt_flags(low, high) == "outside [0, 1]"


def test_clt_uses_sample_variance_for_graded_scores():
    scores = np.array([0.2, 0.5, 0.9])
    _, low, high = clt_interval(scores, 0.95)
    assert (high - low) / 2 == pytest.approx(stats.norm.ppf(0.975) * scores.std(ddof=1) / np.sqrt(3))


@pytest.mark.slow
def test_coverage_with_planted_truth():
    """Beta(1,1)-posterior HPDIs are calibrated when theta ~ U(0, 1); CLT under-covers at N = 10."""
    rng = np.random.default_rng(2026)
    sims, n, mass = 20000, 10, 0.95
    theta = rng.uniform(size=sims)
    k = rng.binomial(n, theta)
    # Intervals depend on the data only through k: compute them once per k.
    hpdi = {j: beta_hpdi(*beta_posterior(j, n), mass) for j in range(n + 1)}
    clt = {j: clt_interval(np.r_[np.ones(j), np.zeros(n - j)], mass)[1:] for j in range(n + 1)}
    hpdi_hits = sum(hpdi[j][0] <= t <= hpdi[j][1] for t, j in zip(theta, k))
    clt_hits = sum(clt[j][0] <= t <= clt[j][1] for t, j in zip(theta, k))
    # Standard error of a coverage estimate near 0.95 with 20000 draws is about 0.0015.
    assert abs(hpdi_hits / sims - mass) < 0.006
    assert clt_hits / sims < 0.90
