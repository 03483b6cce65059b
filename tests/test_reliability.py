"""HIP-LLM reliability envelopes (evalpipeline.reliability) against closed forms and structure.

Source: the HIP-LLM paper (Table 2, Section 3.1,
Theorems 1-6, Remark 6, Appendix B).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special, stats

from evalpipeline.reliability import (
    HyperBox,
    OperationalProfile,
    ReliabilitySettings,
    assess_reliability,
    beliefs,
    beta_moments,
    conjugate_envelope,
    elicit,
    elicit_box,
    hyperparameter_configurations,
    hyperparameter_sensitivity,
    log_marginal_likelihood,
    narrowed_boxes,
    profile_sensitivity,
    weighted_sum_moments,
    within_domain_profiles,
)
from evalpipeline.reliability import core
from evalpipeline.reliability.core import (
    ReliabilityResult,
    SubdomainEnvelopes,
    beta_mixture_cdf,
    beta_survival,
    mixture_quantiles,
)

# Small but structurally complete numerics (K^2 > max_pairings, so LLM pairings are capped).
FAST = ReliabilitySettings(n_configurations=48, n_draws=1500, grid_size=900, cdf_points=101, seed=11)


def two_domain_counts(scale: int = 1) -> pd.DataFrame:
    rows = [
        ("coding", "mbpp", 60, 27),
        ("coding", "ds1000", 80, 39),
        ("reasoning", "boolq", 70, 63),
        ("reasoning", "race", 50, 42),
        ("reasoning", "logic", 40, 30),
    ]
    return pd.DataFrame(
        [(d, s, n * scale, k * scale) for d, s, n, k in rows], columns=["domain", "subdomain", "n", "k"]
    )


@pytest.fixture(scope="module")
def result():
    return assess_reliability(two_domain_counts(), FAST)


# ----------------------------------------------------------------- closed forms


def test_table2_coin_example_follows_the_formula_not_the_print():
    # Table 2: prior Beta(alpha, beta), alpha, beta in [1, 3]; 3 heads in 10 tosses, so the
    # posterior is Beta(3 + alpha, 7 + beta) and its mean (3 + alpha) / (10 + alpha + beta)
    # ranges over [4/14, 6/14] = [0.2857, 0.4286] (corners (1, 3) and (3, 1)). The paper
    # prints [0.31, 0.38], which its own formula does not give; we test the formula.
    env = conjugate_envelope(3, 10, (1.0, 3.0), (1.0, 3.0))
    assert env.loc[0, "lower"] == pytest.approx(4 / 14, rel=1e-12)
    assert env.loc[0, "upper"] == pytest.approx(6 / 14, rel=1e-12)
    # the corners are the extremes: brute force over the box
    grid = np.linspace(1, 3, 41)
    means = np.array([[(3 + a) / (10 + a + b) for b in grid] for a in grid])
    assert means.min() == pytest.approx(4 / 14) and means.max() == pytest.approx(6 / 14)
    # the precise Beta(2, 2) column of Table 2: Beta(5, 9), mean 5/14 = 0.357 (printed 0.36)
    assert conjugate_envelope(3, 10, (2, 2), (2, 2)).loc[0, "lower"] == pytest.approx(5 / 14)


def test_degenerate_box_one_subdomain_matches_beta_moment_closed_form():
    # E[theta^n | data] = B(a + C + n, b + N - C) / B(a + C, b + N - C) holds for a Beta(a, b)
    # prior on theta itself (Section 3.1). In HIP-LLM theta ~ Beta(mu nu, (1 - mu) nu), so the
    # hyperprior must pin (mu, nu): mu ~ Beta(mu0 s, (1 - mu0) s) and nu ~ Gamma(s, rate s / nu0)
    # with s = 1e8 have relative spread 1e-4, which moves E[theta^n] only at second order
    # (~1e-8 n^2); then a = mu0 nu0, b = (1 - mu0) nu0.
    mu0, nu0, s = 0.4, 5.0, 1e8
    a, b, n_trials, c = mu0 * nu0, (1 - mu0) * nu0, 20, 7
    settings = ReliabilitySettings(
        box=HyperBox.point(mu0 * s, (1 - mu0) * s, s, s / nu0), n_configurations=1, target=0.3
    )
    res = assess_reliability(pd.DataFrame({"domain": ["d"], "subdomain": ["x"], "n": [n_trials], "k": [c]}), settings)
    for n in settings.horizons:
        closed = math.exp(special.betaln(a + c + n, b + n_trials - c) - special.betaln(a + c, b + n_trials - c))
        rows = res.expected_reliability[res.expected_reliability["n"] == n]
        assert len(rows) == 3  # subdomain, domain (one subdomain) and LLM (one domain) coincide
        np.testing.assert_allclose(rows[["lower", "upper"]].to_numpy(), closed, rtol=1e-6)
        # P(theta^n >= r) = 1 - I_{r^(1/n)}(a + C, b + N - C)
        exact = special.betaincc(a + c, b + n_trials - c, 0.3 ** (1 / n))
        sub = res.target_probability[
            (res.target_probability["n"] == n) & (res.target_probability["level"] == "subdomain")
        ]
        np.testing.assert_allclose(sub[["lower", "upper"]].to_numpy(), exact, rtol=1e-6, atol=1e-12)
    cdf = res.cdf_envelopes[res.cdf_envelopes["level"] == "subdomain"]
    np.testing.assert_allclose(cdf["cdf_lower"], special.betainc(a + c, b + n_trials - c, cdf["x"]), atol=1e-7)
    np.testing.assert_allclose(cdf["cdf_upper"], cdf["cdf_lower"])
    q = res.quantile_envelopes[res.quantile_envelopes["level"] == "subdomain"]
    exact_q = stats.beta.ppf(q["quantile"], a + c, b + n_trials - c)
    np.testing.assert_allclose(q["lower"], exact_q, atol=1e-8)  # the hyperprior's spread moves them ~1e-9


def test_beta_moments_and_weighted_sum_moments_against_binomial_expansion():
    alpha, beta = np.array([2.5, 7.0]), np.array([4.0, 1.5])
    m = beta_moments(alpha, beta, 12)
    for i in range(2):
        for k in range(13):
            closed = math.exp(special.betaln(alpha[i] + k, beta[i]) - special.betaln(alpha[i], beta[i]))
            assert m[i, k] == pytest.approx(closed, rel=1e-12)
    w = (0.3, 0.7)
    total = weighted_sum_moments([m[0], m[1]], w)
    for n in range(13):
        direct = sum(math.comb(n, k) * w[0] ** k * w[1] ** (n - k) * m[0, k] * m[1, n - k] for k in range(n + 1))
        assert total[n] == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize(
    "low, high", [(0.0, 1.0), (0.0, 0.3), (1e-4, 0.2), (0.31, 0.62), (0.8, 1.0), (0.9, 1.0 - 1e-5), (0.5, 0.5 + 1e-6)]
)
def test_beta_mixture_cdf_equals_the_incomplete_beta_mixture(low, high):
    """The quadrature tabulation of the subdomain CDFs against ``weights @ betainc`` (what it replaces), for
    Betas from U- and J-shaped (parameters below 1: singular at an end of [0, 1]) to peaks far narrower than
    the grid's intervals, on grids that touch 0 or 1, stop just short of them, or sit inside."""
    rng = np.random.default_rng(7)
    shapes = np.array([0.05, 0.3, 0.7, 1.0, 1.5, 3.0, 17.0, 60.0, 400.0, 5e3, 2e5])
    alpha, beta = (a.ravel() for a in np.meshgrid(shapes, shapes))
    weights = rng.dirichlet(np.full(alpha.size, 0.5), size=5)
    x = np.linspace(low, high, 101)
    got = beta_mixture_cdf(weights, alpha, beta, x)
    want = weights @ special.betainc(alpha[:, None], beta[:, None], x[None, :])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    one = beta_mixture_cdf(weights, alpha, beta, x[:1])  # a one-point grid
    np.testing.assert_allclose(one, want[:, :1], rtol=0, atol=1e-15)


def exact_mixture_quantile(weights, alpha, beta, q):
    """The q-quantile of ``weights @ Beta(alpha, beta)`` by brentq on the exact CDF (``betainc``), solved in
    log x below the median's side of 1/2 and in log(1 - x) above it, so it is accurate relative to the
    distance to the nearer end: 0 (1) when it is nearer that end than 2.2e-308 (2**-53)."""
    cdf = lambda x: weights @ special.betainc(alpha, beta, x)
    if q <= cdf(0.5):
        gap = lambda t: cdf(math.exp(t)) - q
        low = math.log(np.finfo(float).tiny)
        return 0.0 if gap(low) >= 0 else math.exp(optimize.brentq(gap, low, math.log(0.5), xtol=1e-14, rtol=1e-15))
    gap = lambda t: (1.0 - q) - weights @ special.betainc(beta, alpha, math.exp(t))  # P(theta > 1 - e**t)
    low = math.log(2.0**-53)
    return 1.0 if gap(low) <= 0 else -math.expm1(optimize.brentq(gap, low, math.log(0.5), xtol=1e-14, rtol=1e-15))


def assert_quantiles_match(got, want):
    """Equal to 1e-8 of the distance to the nearer end of [0, 1] (plus rounding near 1)."""
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    bound = 1e-8 * np.minimum(want, 1.0 - want) + 1e-15
    worst = np.unravel_index(np.argmax(np.abs(got - want) - bound), got.shape)
    assert (np.abs(got - want) <= bound).all(), f"at {worst}: got {got[worst]!r}, exact {want[worst]!r}"


@pytest.mark.parametrize(
    "low, high, points",
    [
        (0.0, 1.0, 101),
        (0.0, 1.0, 2),
        (0.0, 0.3, 101),
        (1e-4, 0.2, 101),
        (0.31, 0.62, 101),
        (0.8, 1.0, 101),
        (0.9, 1.0 - 1e-5, 101),
    ],
)
def test_mixture_quantiles_invert_the_exact_mixture_cdf(low, high, points):
    """Subdomain quantiles from the tabulated CDF against brentq on ``weights @ betainc``, for the Betas of
    the tabulation test (U- and J-shaped ones put quantiles within 1e-100 of 0 or 1; the narrowest peaks
    are far narrower than a grid interval), on grids that touch 0 or 1, stop short of them, or sit inside."""
    rng = np.random.default_rng(7)
    shapes = np.array([0.05, 0.3, 0.7, 1.0, 1.5, 3.0, 17.0, 60.0, 400.0, 5e3, 2e5])
    alpha, beta = (a.ravel() for a in np.meshgrid(shapes, shapes))
    weights = rng.dirichlet(np.full(alpha.size, 0.5), size=4)
    quantiles = (0.001, 0.05, 0.5, 0.95, 0.999)
    x = np.linspace(low, high, points)
    got = mixture_quantiles(weights, alpha, beta, x, beta_mixture_cdf(weights, alpha, beta, x), quantiles)
    want = [[exact_mixture_quantile(w, alpha, beta, q) for q in quantiles] for w in weights]
    assert_quantiles_match(got, want)


def all_success_or_failure_counts() -> pd.DataFrame:
    return pd.DataFrame(
        {"domain": ["aced"] * 2 + ["failed"] * 2, "subdomain": ["a", "b"] * 2, "n": 20, "k": [20, 20, 0, 0]}
    )


def test_subdomain_quantiles_near_0_and_1_match_the_exact_mixture(monkeypatch):
    """With 20 successes (failures) in 20 trials the strongly pooled configurations put nearly all of a
    subdomain's posterior within 1e-10 of 1 (0), inside the CDF grid's last (first) interval: the
    quantiles of every configuration, and so the envelopes, must still be those of the exact mixture."""
    seen = []

    def keep(weights, alpha, beta, x, cdf, quantiles):
        out = mixture_quantiles(weights, alpha, beta, x, cdf, quantiles)
        seen.append((weights, alpha, beta, out))
        return out

    monkeypatch.setattr(core, "mixture_quantiles", keep)
    settings = dataclasses.replace(FAST, n_configurations=20)
    res = assess_reliability(all_success_or_failure_counts(), settings)
    envelopes = res.quantile_envelopes[res.quantile_envelopes["level"] == "subdomain"]
    assert len(seen) == 4
    for (weights, alpha, beta, out), domain, subdomain in zip(seen[::2], ["aced", "failed"], ["a", "a"]):
        want = np.array([[exact_mixture_quantile(w, alpha, beta, q) for q in settings.quantiles] for w in weights])
        assert_quantiles_match(out, want)
        rows = envelopes[(envelopes["domain"] == domain) & (envelopes["subdomain"] == subdomain)]
        assert_quantiles_match(rows["lower"], want.min(axis=0))
        assert_quantiles_match(rows["upper"], want.max(axis=0))


def test_subdomains_at_0_or_1_bound_the_quantiles_of_their_domain():
    """The domain's rate p is the mean of its subdomains' rates, which given (mu, nu) are independent and,
    with the same counts, identically distributed: under each configuration P(p <= x) >= P(theta_1 <= x,
    theta_2 <= x) >= P(theta <= x)**2, and likewise P(p >= x) >= P(theta >= x)**2. At the subdomains'
    median both are >= 1/4, so the domain's 5% quantile is at most it and its 95% quantile at least it,
    envelope-wise too (Monte Carlo moves the domain's levels by ~0.006; its draws are float32).
    With 20 successes in 20 trials linear interpolation in the CDF grid's last interval put the
    subdomains' median below 0.996, under the domain's 5% quantile (1 to float32); with 20 failures it
    put their median near 0.004, above the domain's 95% quantile (4e-6)."""
    res = assess_reliability(all_success_or_failure_counts(), FAST)
    q = res.quantile_envelopes.set_index(["domain", "level", "subdomain", "quantile"]).sort_index()
    for subdomain in ("a", "b"):
        aced, aced_domain = q.loc[("aced", "subdomain", subdomain)], q.loc[("aced", "domain", "(all)")]
        assert aced_domain.loc[0.05, "upper"] <= aced.loc[0.5, "upper"] + 2.0**-24
        failed, failed_domain = q.loc[("failed", "subdomain", subdomain)], q.loc[("failed", "domain", "(all)")]
        assert failed_domain.loc[0.95, "lower"] >= failed.loc[0.5, "lower"] * (1 - 2.0**-24) - 2.0**-149


def test_beta_survival_is_betaincc_on_both_sides_of_one_half():
    shapes = np.array([0.05, 0.7, 1.0, 3.0, 60.0, 5e3, 2e5])
    alpha, beta = (a.ravel()[:, None] for a in np.meshgrid(shapes, shapes))
    x = np.array([0.0, 1e-6, 0.2, 0.4999, 0.5, 0.9, 0.9 ** (1 / 60), 1 - 1e-9, 1.0])[None, :]
    got, want = beta_survival(alpha, beta, x), special.betaincc(alpha, beta, x)
    assert got.shape == want.shape == (alpha.size, x.size)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_log_marginal_likelihood_is_the_beta_binomial_of_eq_a8():
    mu, nu = np.array([0.2, 0.7, 0.5]), np.array([0.3, 12.0, 400.0])
    c, n = np.array([3, 9]), np.array([10, 9])
    got = log_marginal_likelihood(mu, nu, c, n)
    want = [
        sum(
            stats.betabinom.logpmf(c[j], n[j], m * v, (1 - m) * v) - math.log(math.comb(int(n[j]), int(c[j])))
            for j in range(2)
        )
        for m, v in zip(mu, nu)
    ]
    np.testing.assert_allclose(got, want, rtol=1e-10)


# ----------------------------------------------------------------- structure


def test_cdf_envelopes_are_ordered_monotone_probabilities(result):
    cdf = result.cdf_envelopes
    assert (cdf["cdf_lower"] <= cdf["cdf_upper"] + 1e-15).all()
    assert cdf[["cdf_lower", "cdf_upper"]].stack().between(0, 1).all()
    for _, unit in cdf.groupby(["level", "domain", "subdomain"]):
        assert (np.diff(unit["x"]) > 0).all()
        assert (np.diff(unit["cdf_lower"]) >= -1e-12).all() and (np.diff(unit["cdf_upper"]) >= -1e-12).all()
    assert set(cdf["level"]) == {"subdomain", "domain", "llm"}
    assert len(cdf) == (5 + 2 + 1) * FAST.cdf_points


def test_median_interval_inside_the_5_95_envelope(result):
    summary = result.summary()
    assert (summary["q05_lower"] <= summary["median_lower"]).all()
    assert (summary["median_lower"] <= summary["median_upper"]).all()
    assert (summary["median_upper"] <= summary["q95_upper"]).all()


def test_expected_reliability_decreases_in_n(result):
    for _, unit in result.expected_reliability.groupby(["level", "domain", "subdomain"]):
        unit = unit.sort_values("n")
        assert (np.diff(unit["lower"]) < 0).all() and (np.diff(unit["upper"]) < 0).all()
        assert (unit["lower"] <= unit["upper"]).all()
    for _, unit in result.target_probability.groupby(["level", "domain", "subdomain"]):
        unit = unit.sort_values("n")  # P(p^n >= r) = P(p >= r^(1/n)) falls as n grows
        assert (np.diff(unit["upper"]) <= 1e-12).all()


def test_levels_aggregate_as_the_weights_say(result):
    e1 = result.expected_reliability[result.expected_reliability["n"] == 1].set_index(["level", "domain", "subdomain"])
    weights = result.weights.set_index(["domain", "subdomain"])
    # E[p_i | h] = sum_j Omega_ij E[theta_ij | h] for the same h: the domain interval lies inside the
    # Omega-weighted subdomain bounds
    for domain, cells in weights.groupby(level="domain"):
        subs = e1.loc["subdomain"].loc[domain].loc[cells.index.get_level_values("subdomain")]
        dom = e1.loc[("domain", domain, "(all)")]
        assert dom["lower"] >= (cells["omega"].to_numpy() * subs["lower"].to_numpy()).sum() - 1e-12
        assert dom["upper"] <= (cells["omega"].to_numpy() * subs["upper"].to_numpy()).sum() + 1e-12
    # E[p_L | H] = sum_i W_i E[p_i | h_i] with h_i chosen freely: the extremal pairings make the
    # LLM interval exactly the W-weighted domain bounds, hence between the domains
    w = weights.groupby(level="domain")["domain_weight"].first()
    doms = e1.loc["domain"].droplevel("subdomain").loc[w.index]
    llm = e1.loc[("llm", "(all)", "(all)")]
    assert llm["lower"] == pytest.approx((w * doms["lower"]).sum(), rel=1e-12)
    assert llm["upper"] == pytest.approx((w * doms["upper"]).sum(), rel=1e-12)
    assert doms["lower"].min() <= llm["lower"] and llm["upper"] <= doms["upper"].max()
    assert result.metadata["n_pairings"] == FAST.max_pairings and not result.metadata["pairings_exhaustive"]
    # default profile is proportional to N
    np.testing.assert_allclose(w.to_numpy(), [140 / 300, 160 / 300])


def test_all_weight_on_one_domain_gives_that_domain():
    profile = OperationalProfile(domain_weights={"coding": 0.0, "reasoning": 1.0})
    res = assess_reliability(two_domain_counts(), FAST.replace(profile=profile))
    e = res.expected_reliability.set_index(["level", "domain", "subdomain", "n"]).sort_index()
    np.testing.assert_allclose(
        e.loc["llm"][["lower", "upper"]].to_numpy(),
        e.loc[("domain", "reasoning")][["lower", "upper"]].to_numpy(),
        rtol=1e-12,
    )


def test_envelopes_narrow_as_n_grows(result):
    bigger = assess_reliability(two_domain_counts(scale=10), FAST).summary().set_index(["level", "domain", "subdomain"])
    small = result.summary().set_index(["level", "domain", "subdomain"])
    width = lambda s: s["q95_upper"] - s["q05_lower"]  # noqa: E731
    assert (width(bigger) < 0.6 * width(small)).all()
    mean_width = lambda s: s["mean_upper"] - s["mean_lower"]  # noqa: E731
    assert (mean_width(bigger) < mean_width(small)).all()


def test_rerun_with_same_seed_is_identical_and_seed_matters(result):
    again = assess_reliability(two_domain_counts(), FAST)
    for name, table in result.tables().items():
        pd.testing.assert_frame_equal(table, again.tables()[name])
    other = assess_reliability(two_domain_counts(), FAST.replace(seed=12))
    assert not other.quantile_envelopes.equals(result.quantile_envelopes)


def _subdomain_rows(result: "ReliabilityResult", domain: str) -> list[SubdomainEnvelopes]:
    """What a stored assessment hands over: its subdomain rows, read back from its tables."""
    tables = {
        name: t[(t["level"] == "subdomain") & (t["domain"] == domain)]
        for name, t in result.tables().items()
        if name in ("cdf_envelopes", "quantile_envelopes", "expected_reliability", "target_probability")
    }
    rows = []
    for subdomain in tables["cdf_envelopes"]["subdomain"].unique():
        part = {name: t[t["subdomain"] == subdomain] for name, t in tables.items()}
        rows.append(
            SubdomainEnvelopes(
                x=part["cdf_envelopes"]["x"].to_numpy(),
                cdf_lower=part["cdf_envelopes"]["cdf_lower"].to_numpy(),
                cdf_upper=part["cdf_envelopes"]["cdf_upper"].to_numpy(),
                quantile_lower=part["quantile_envelopes"]["lower"].to_numpy(),
                quantile_upper=part["quantile_envelopes"]["upper"].to_numpy(),
                expected_lower=part["expected_reliability"]["lower"].to_numpy(),
                expected_upper=part["expected_reliability"]["upper"].to_numpy(),
                target_lower=part["target_probability"]["lower"].to_numpy(),
                target_upper=part["target_probability"]["upper"].to_numpy(),
            )
        )
    return rows


def test_a_domain_seed_reproduces_the_domain_assessed_alone_and_its_rows_can_be_taken_over():
    counts = two_domain_counts()
    alone = assess_reliability(counts[counts["domain"] == "reasoning"], FAST.replace(seed=77))
    settings = FAST.replace(domain_seeds={"reasoning": 77})
    full = assess_reliability(counts, settings)
    # the domain seeded as it was alone: its subdomain and domain rows are the lone assessment's
    for name in ("cdf_envelopes", "quantile_envelopes", "expected_reliability", "target_probability"):
        mine = full.tables()[name]
        mine = mine[(mine["domain"] == "reasoning") & (mine["level"] != "llm")].reset_index(drop=True)
        theirs = alone.tables()[name]
        pd.testing.assert_frame_equal(mine, theirs[theirs["level"] != "llm"].reset_index(drop=True), check_exact=True)
    assert not full.quantile_envelopes.equals(assess_reliability(counts, FAST).quantile_envelopes)  # the seed is used

    known = {"reasoning": _subdomain_rows(alone, "reasoning")}
    taken = assess_reliability(counts, settings, known_subdomains=known)
    assert taken.subdomains_taken_over == 3 and full.subdomains_taken_over == 0
    for name, table in full.tables().items():
        pd.testing.assert_frame_equal(taken.tables()[name], table, check_exact=True)

    # rows that do not belong to this domain's grid are not used, whatever else they say
    wrong_seed = {
        "reasoning": _subdomain_rows(
            assess_reliability(counts[counts["domain"] == "reasoning"], FAST.replace(seed=78)), "reasoning"
        )
    }
    nudged = _subdomain_rows(alone, "reasoning")
    nudged[1].x = nudged[1].x + 1e-15
    for bad in (wrong_seed, {"reasoning": nudged}, {"reasoning": known["reasoning"][:2]}):
        checked = assess_reliability(counts, settings, known_subdomains=bad)
        assert checked.subdomains_taken_over == 0
        for name, table in full.tables().items():
            pd.testing.assert_frame_equal(checked.tables()[name], table, check_exact=True)
    # a one-subdomain domain's own level needs the per-configuration arrays: always computed
    one = counts[counts["subdomain"] != "ds1000"]
    lone = assess_reliability(one[one["domain"] == "coding"], FAST.replace(seed=5))
    assert (
        assess_reliability(
            one, FAST.replace(domain_seeds={"coding": 5}), known_subdomains={"coding": _subdomain_rows(lone, "coding")}
        ).subdomains_taken_over
        == 0
    )


def test_configurations_include_the_box_corners(result):
    cfg = result.configurations
    corners = HyperBox().corners()
    for domain, part in cfg.groupby("domain"):
        assert len(part) == FAST.n_configurations and part["is_corner"].sum() == 16
        got = {tuple(r) for r in part.loc[part["is_corner"], ["a", "b", "c", "d"]].to_numpy()}
        assert got == {tuple(r) for r in corners}
        assert part[["a", "b"]].stack().between(1, 12).all() and part[["c", "d"]].stack().between(1, 25).all()
    one, _ = hyperparameter_configurations(HyperBox.point(2, 3, 4, 5), 160, np.random.default_rng(0))
    assert one.tolist() == [[2, 3, 4, 5]]


# ----------------------------------------------------------------- elicitation


def test_elicitation_round_trip_and_paper_example():
    a, b, c, d = elicit(0.85, 40.0, 20.0, 5.0)
    assert (a, b, c, d) == pytest.approx((34.0, 6.0, 5.0, 0.25))
    assert c / d == pytest.approx(20.0)  # E[nu] = c / d with d a rate
    assert beliefs(a, b, c, d) == pytest.approx((0.85, 40.0, 20.0, 5.0))
    # Remark 6: r in [0.8, 0.9], s in [30, 100], e in [30, 100], f in [3, 10]
    box = elicit_box((0.8, 0.9), (30, 100), (30, 100), (3, 10))
    assert box.a == pytest.approx((24, 90)) and box.b == pytest.approx((3, 20))
    assert box.c == pytest.approx((3, 10)) and box.d == pytest.approx((0.03, 10 / 30))
    assert elicit_box(0.85, 40.0, 20.0, 5.0) == HyperBox.point(*elicit(0.85, 40.0, 20.0, 5.0))


# ----------------------------------------------------------------- sensitivity


SWEEP = ReliabilitySettings(n_configurations=20, n_draws=400, grid_size=400, cdf_points=51, seed=3)


def test_hyperparameter_sweep_table():
    boxes = narrowed_boxes(HyperBox())
    assert [(p, round(f, 3)) for p, f, _ in boxes][:3] == [("a", 0.0), ("a", 0.333), ("a", 0.667)]
    assert dict((p, bx) for p, f, bx in boxes if f > 0.6)["b"].b == pytest.approx((1 + 22 / 3, 12))
    table = hyperparameter_sensitivity(
        two_domain_counts(), SWEEP, sub_boxes=[b for b in boxes if b[0] == "a"], domains=["coding"]
    )
    assert len(table) == 3 * 8 and set(table["parameter"]) == {"a"}
    assert table.groupby("fraction")["a_low"].first().to_numpy() == pytest.approx([1, 1 + 11 / 3, 1 + 22 / 3])
    # raising a's lower bound raises the prior mean of mu in coding: its lowest E[p] cannot fall
    coding = table[(table["level"] == "domain") & (table["domain"] == "coding")].sort_values("fraction")
    assert (np.diff(coding["mean_lower"]) > 0).all()


def test_profile_sweep_moves_domain_reliability_with_the_weak_subdomain():
    counts = pd.DataFrame(
        [("reasoning", "boolq", 200, 182), ("reasoning", "race", 200, 110)], columns=["domain", "subdomain", "n", "k"]
    )
    profiles = within_domain_profiles("reasoning", "race", [0.1, 0.517, 0.9], ["boolq", "race"])
    table = profile_sensitivity(counts, profiles, SWEEP)
    dom = table[table["level"] == "domain"]
    assert list(dom["profile"]) == list(profiles)
    assert (np.diff(dom["mean_lower"]) < 0).all() and (np.diff(dom["mean_upper"]) < 0).all()
    assert (np.diff(dom["median_upper"]) < 0).all()
    # the subdomains themselves do not depend on the weights
    subs = table[table["level"] == "subdomain"].groupby("subdomain")["mean_lower"].nunique()
    assert (subs == 1).all()


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.assign(n=c["n"].where(c.index != 0, -5)), "must be >= 0"),
        (lambda c: c.assign(k=c["k"].where(c.index != 1, 500)), "k > n"),
        (lambda c: c.assign(k=c["k"].astype(float).where(c.index != 1, 2.5)), "whole numbers"),
        (lambda c: c.drop(columns="k"), "lack column"),
        (lambda c: pd.concat([c, c.iloc[[0]]]), "repeated"),
        (lambda c: c.iloc[0:0], "no rows"),
        (lambda c: c.assign(domain=c["domain"].where(c.index != 2, None)), "domain is missing"),
    ],
)
def test_bad_counts_raise(mutate, message):
    with pytest.raises(ValueError, match=message):
        assess_reliability(mutate(two_domain_counts()), SWEEP)


@pytest.mark.parametrize(
    "profile, message",
    [
        (OperationalProfile(domain_weights={"coding": 0.5, "reasoning": 0.6}), "sum to 1"),
        (OperationalProfile(domain_weights={"coding": 0.5, "reasoning": 0.3, "law": 0.2}), "unknown domain"),
        (OperationalProfile(domain_weights={"coding": 1.0}), "no weight for domain"),
        (OperationalProfile(domain_weights={"coding": 1.2, "reasoning": -0.2}), ">= 0"),
        (OperationalProfile(subdomain_weights={"coding": {"mbpp": 0.2, "ds1000": 0.7}}), "sum to 1"),
        (OperationalProfile(subdomain_weights={"law": {"x": 1.0}}), "unknown domain"),
        (OperationalProfile(subdomain_weights={"coding": {"mbpp": 1.0}}), "no weight for subdomain"),
        (OperationalProfile(subdomain_weights={"coding": {"mbpp": 0.5, "ds1000": 0.4, "x": 0.1}}), "unknown subdomain"),
    ],
)
def test_bad_profiles_raise(profile, message):
    with pytest.raises(ValueError, match=message):
        assess_reliability(two_domain_counts(), SWEEP.replace(profile=profile))


def test_flat_profile_equals_hierarchical_form():
    flat = {
        ("coding", "mbpp"): 0.1,
        ("coding", "ds1000"): 0.3,
        ("reasoning", "boolq"): 0.2,
        ("reasoning", "race"): 0.2,
        ("reasoning", "logic"): 0.2,
    }
    resolved = OperationalProfile.flat(flat).resolve(two_domain_counts()).set_index(["domain", "subdomain"])
    assert resolved.loc[("coding", "mbpp"), "omega"] == pytest.approx(0.25)
    assert resolved.loc[("reasoning", "race"), "domain_weight"] == pytest.approx(0.6)
    np.testing.assert_allclose(resolved["op"].to_numpy(), [flat[i] for i in resolved.index])
    with pytest.raises(ValueError, match="sum to 1"):
        OperationalProfile.flat({**flat, ("coding", "mbpp"): 0.2})
    with pytest.raises(ValueError, match="unknown domain"):
        OperationalProfile.flat({**flat, ("coding", "mbpp"): 0.05, ("law", "x"): 0.05}).resolve(two_domain_counts())


def test_bad_settings_and_beliefs_raise():
    with pytest.raises(ValueError, match="corners"):
        assess_reliability(two_domain_counts(), SWEEP.replace(n_configurations=8))
    with pytest.raises(ValueError, match="low > high"):
        HyperBox(a=(3, 1))
    with pytest.raises(ValueError, match="> 0"):
        HyperBox(d=(0, 1))
    with pytest.raises(ValueError, match="target"):
        ReliabilitySettings(target=1.5)
    with pytest.raises(ValueError, match="horizons"):
        ReliabilitySettings(horizons=(0, 2))
    with pytest.raises(ValueError, match=r"domain_seeds\['coding'\] must be an integer >= 0"):
        ReliabilitySettings(domain_seeds={"coding": -1})
    with pytest.raises(ValueError, match=r"r \(expected reliability\)"):
        elicit(1.2, 10, 5, 5)
    with pytest.raises(ValueError, match="e must be > 0"):
        elicit(0.5, 10, 0, 5)
