"""The binomial log-pmf kernel with its own JVP (glm.binomial_logit_kernel) against closed forms.

Its value must be numpyro's binomial log-pmf less log C(n, k); its first and second derivatives in
the logit must be k - n sigmoid(eta) and -n sigmoid(eta) (1 - sigmoid(eta)), also far in the tails,
where a naive sigmoid overflows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from evalpipeline.models import glm

ETAS = np.concatenate([np.linspace(-30.0, 30.0, 121), [-1e4, -88.0, -1e-7, 0.0, 1e-7, 88.0, 1e4]])


def grid(n_values=(1, 2, 5, 20)):
    """Every (eta, k, n) with k = 0..n, as float32 arrays (the fits' dtype)."""
    rows = [(eta, k, n) for n in n_values for k in range(n + 1) for eta in ETAS]
    eta, k, n = (np.array(column, dtype=np.float32) for column in zip(*rows))
    return eta, k, n


def rounding(*terms):
    """A float32 rounding bound for a sum of these terms (a few ulps of the largest magnitudes)."""
    return 8 * np.finfo(np.float32).eps * (1.0 + sum(np.abs(t) for t in terms))


def test_the_kernel_is_the_binomial_log_pmf_less_the_binomial_coefficient():
    eta, k, n = grid()
    x = eta.astype(float)
    closed_form = k * x - n * np.logaddexp(0.0, x)  # log p^k (1 - p)^(n - k) in float64
    got = np.asarray(glm.binomial_logit_kernel(jnp.asarray(eta), jnp.asarray(k), jnp.asarray(n)))
    assert np.isfinite(got).all()
    assert (np.abs(got - closed_form) <= rounding(k * x, n * np.logaddexp(0.0, x))).all()
    # scipy's binomial log-pmf, where its p = expit(eta) is still accurate
    log_choose = special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)
    moderate = np.abs(eta) <= 10
    scipy_value = stats.binom.logpmf(k, n, special.expit(x)) - log_choose
    np.testing.assert_allclose(got[moderate], scipy_value[moderate], rtol=1e-5, atol=5e-5)  # scipy's own error ~1e-5


def test_its_gradient_and_curvature_are_the_closed_forms_in_both_tails():
    # both of the gradient's branches: below SHARED_EXP_MIN_UNITS units XLA's logistic, from it the shared exp
    for n_values, shared in (((1, 2, 5, 10), False), ((1,) * 20 + (2, 5, 20), True)):
        eta, k, n = grid(n_values)
        assert (len(eta) >= glm.SHARED_EXP_MIN_UNITS) == shared
        kernel = lambda e: glm.binomial_logit_kernel(e, jnp.asarray(k), jnp.asarray(n))  # noqa: E731
        gradient = np.asarray(jax.grad(lambda e: kernel(e).sum())(jnp.asarray(eta)))
        sigmoid = special.expit(eta.astype(float))
        assert (np.abs(gradient - (k - n * sigmoid)) <= rounding(k, n * sigmoid)).all()
        # each unit's second derivative: the gradient of unit i's first derivative
        curvature = np.asarray(jax.grad(lambda e: jax.grad(lambda x: kernel(x).sum())(e).sum())(jnp.asarray(eta)))
        expected = -n * sigmoid * (1.0 - sigmoid)
        # float32: beyond |eta| ~ 17 sigmoid (1 - sigmoid) is below the rounding of 1 - sigmoid (then 0)
        assert (np.abs(curvature - expected) <= 1e-4 * np.abs(expected) + 1e-7 * n).all()
        assert np.isfinite(gradient).all() and np.isfinite(curvature).all()


def test_it_equals_autodiff_through_softplus_under_jit_and_vmap():
    """The custom JVP changes how the derivative is computed, not what it is: jitted and batched,
    value and gradient agree with jax's own differentiation of k eta - n softplus(eta)."""
    rng = np.random.default_rng(7)
    eta = jnp.asarray(rng.normal(0.0, 3.0, (4, 300)), jnp.float32)
    n = jnp.asarray(rng.integers(1, 6, 300), jnp.float32)
    k = jnp.asarray(rng.integers(0, 6, 300) % (np.asarray(n) + 1), jnp.float32)
    custom = jax.jit(jax.vmap(jax.value_and_grad(lambda e: glm.binomial_logit_kernel(e, k, n).sum())))
    plain = jax.jit(jax.vmap(jax.value_and_grad(lambda e: (k * e - n * jax.nn.softplus(e)).sum())))
    (value, gradient), (value_plain, gradient_plain) = custom(eta), plain(eta)
    np.testing.assert_allclose(np.asarray(value), np.asarray(value_plain), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gradient), np.asarray(gradient_plain), rtol=1e-5, atol=1e-6)


def test_the_fits_observation_site_uses_the_kernel():
    """_BinomialLogits.log_prob (the binomial GLMs' ``obs`` site) is the kernel plus log C(n, k)."""
    eta, k, n = (jnp.asarray(a) for a in grid((3,)))
    log_choose = jnp.asarray(
        special.gammaln(4.0) - special.gammaln(np.asarray(k) + 1.0) - special.gammaln(4.0 - np.asarray(k)), jnp.float32
    )
    site = glm._BinomialLogits(eta, n, log_choose)
    np.testing.assert_array_equal(
        np.asarray(site.log_prob(k)), np.asarray(glm.binomial_logit_kernel(eta, k, n) + log_choose)
    )
