"""Partial pooling: the grid posterior of HIP-LLM agrees with NUTS on the same hierarchical Beta-Binomial.

Source: the HIP-LLM paper, Section 3.2.1 and Lemma 7.
One configuration (a degenerate box), three subdomains: the grid gives
E[theta_j] and the CDF of theta_j exactly up to quadrature; NUTS samples the
full centred model (theta_j not integrated out). They must agree to within
the NUTS Monte Carlo error (4 standard errors, from the effective sample size).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalpipeline.reliability import HyperBox, ReliabilitySettings, assess_reliability

A, B, C, D = 3.0, 2.0, 4.0, 0.4  # mu ~ Beta(3, 2), nu ~ Gamma(4, rate 0.4): E[nu] = 10
TRIALS = np.array([30, 40, 25])
SUCCESSES = np.array([18, 31, 12])


def nuts_draws(seed: int = 0):
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import MCMC, NUTS

    def model():
        mu = numpyro.sample("mu", dist.Beta(A, B))
        nu = numpyro.sample("nu", dist.Gamma(C, D))  # numpyro's Gamma takes (concentration, rate)
        with numpyro.plate("subdomain", len(TRIALS)):
            theta = numpyro.sample("theta", dist.Beta(mu * nu, (1 - mu) * nu))
            numpyro.sample("k", dist.Binomial(total_count=TRIALS, probs=theta), obs=SUCCESSES)

    mcmc = MCMC(
        NUTS(model, target_accept_prob=0.95),
        num_warmup=1000,
        num_samples=3000,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed))
    theta = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])  # (chains, draws, J)
    ess = np.array([float(effective_sample_size(theta[:, :, j])) for j in range(theta.shape[2])])
    divergences = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    return theta.reshape(-1, theta.shape[2]), ess, divergences


@pytest.mark.slow
def test_grid_posterior_of_theta_matches_nuts():
    counts = pd.DataFrame({"domain": "d", "subdomain": ["s1", "s2", "s3"], "n": TRIALS, "k": SUCCESSES})
    result = assess_reliability(counts, ReliabilitySettings(box=HyperBox.point(A, B, C, D), n_configurations=1))
    theta, ess, divergences = nuts_draws()
    assert divergences < 0.005 * len(theta)
    assert ess.min() > 1000
    means = result.expected_reliability.query("level == 'subdomain' and n == 1").set_index("subdomain")
    cdf = result.cdf_envelopes.query("level == 'subdomain'")
    for j, sub in enumerate(["s1", "s2", "s3"]):
        draws = theta[:, j]
        se = draws.std() / np.sqrt(ess[j])
        assert means.loc[sub, "lower"] == means.loc[sub, "upper"]  # one configuration: a precise posterior
        assert abs(means.loc[sub, "lower"] - draws.mean()) < 4 * se, sub
        table = cdf[cdf["subdomain"] == sub]
        for q in (0.05, 0.25, 0.5, 0.75, 0.95):  # grid CDF at the NUTS quantile should be q
            at = np.interp(np.quantile(draws, q), table["x"], table["cdf_lower"])
            assert abs(at - q) < 4 * np.sqrt(q * (1 - q) / ess[j]), (sub, q, at)
    # pooling is visible: each theta_j is pulled from C/N toward the pooled rate
    pooled = SUCCESSES.sum() / TRIALS.sum()
    for j, sub in enumerate(["s1", "s2", "s3"]):
        raw = SUCCESSES[j] / TRIALS[j]
        assert min(raw, pooled) < means.loc[sub, "lower"] < max(raw, pooled)
    # domain level: E[p] is exact (moments); compare with the NUTS draws of sum_j Omega_j theta_j
    omega = TRIALS / TRIALS.sum()
    p = theta @ omega
    e_p = result.expected_reliability.query("level == 'domain' and n == 1")["lower"].item()
    assert abs(e_p - p.mean()) < 4 * p.std() / np.sqrt(ess.min())
