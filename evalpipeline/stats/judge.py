"""Correcting an LLM judge's pass rate with a human-labelled calibration set.

Source: ``eval-as-measurement-post.txt`` "Can you trust the model doing the
grading?" and the appendix prior sweep. The judge passes a correct answer
with probability sensitivity and a wrong one with probability
1 - specificity, so ``pass rate = sens * acc + (1 - spec) * (1 - acc)``.
Rogan-Gladen inverts it: ``acc = (pass rate + spec - 1) / (sens + spec - 1)``,
which divides by Youden's J = sens + spec - 1 and explodes near a
chance-level judge.

The posterior is the post's model: ``accuracy ~ Beta(prior)`` (post:
Beta(2, 2)), ``sensitivity, specificity ~ Beta(1, 1)``, binomial
likelihoods for the calibration counts and for the judge's pass count on
the eval. Computed as: (sens, spec) drawn from their calibration
posteriors (exact conjugate Betas), accuracy on a fine grid, each
(draw, grid point) weighted by the eval likelihood -- importance sampling
whose proposal is the exact conditional structure of the model, with no
MCMC. Seeded.

Refusal: if the calibration set cannot rule out a near-chance judge --
the ``(1 - level) / 2`` quantile of J's posterior is at or below
``min_youden`` (default 0.1) -- the correction is refused with a
``ValueError`` saying so, rather than returning an exploded estimate.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from evalpipeline.stats.conventional import beta_equal_tailed_interval
from evalpipeline.stats.intervals import beta_posterior


def rogan_gladen(pass_rate: float, sensitivity: float, specificity: float) -> float:
    """Point correction ``(pass_rate + spec - 1) / (sens + spec - 1)``, clipped to [0, 1]."""
    youden = sensitivity + specificity - 1
    if abs(youden) < 1e-12:
        raise ValueError("sensitivity + specificity - 1 is zero: the judge is at chance and carries no information")
    return float(min(1.0, max(0.0, (pass_rate + specificity - 1) / youden)))


def judge_corrected_accuracy(
    judge_passes: int,
    n_eval: int,
    good_passed: int,
    n_good: int,
    bad_failed: int,
    n_bad: int,
    *,
    prior: tuple[float, float] = (2.0, 2.0),
    judge_prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    min_youden: float = 0.1,
    n_draws: int = 4000,
    grid_size: int = 2000,
    seed: int = 0,
) -> dict:
    """Accuracy corrected for an imperfect judge, with its uncertainty (the post's judge model).

    ``judge_passes`` of ``n_eval`` answers passed by the judge; on the
    calibration set it passed ``good_passed`` of ``n_good`` answers humans
    marked correct and failed ``bad_failed`` of ``n_bad`` marked wrong.
    Returns the naive reading (judge = truth), the Rogan-Gladen point
    estimate at the calibration means, and the posterior mean and
    equal-tailed interval of the accuracy, plus the estimated judge.
    """
    for name, k, n in (("judge passes", judge_passes, n_eval), ("calibration good", good_passed, n_good),
                       ("calibration bad", bad_failed, n_bad)):
        if n <= 0 or not 0 <= k <= n:
            raise ValueError(f"{name}: need 0 <= count <= total and total > 0, got {k} of {n}")
    rng = np.random.default_rng(seed)
    sens_a, sens_b = judge_prior[0] + good_passed, judge_prior[1] + n_good - good_passed
    spec_a, spec_b = judge_prior[0] + bad_failed, judge_prior[1] + n_bad - bad_failed
    sensitivity = rng.beta(sens_a, sens_b, n_draws)
    specificity = rng.beta(spec_a, spec_b, n_draws)
    youden = sensitivity + specificity - 1
    tail = (1 - level) / 2
    youden_low, youden_high = np.quantile(youden, [tail, 1 - tail])
    if youden_low <= min_youden:
        raise ValueError(
            f"the judge is too close to chance to correct for: sensitivity + specificity - 1 is "
            f"{np.mean(youden):.2f} (interval [{youden_low:.2f}, {youden_high:.2f}]), and the correction divides by it. "
            f"Its lower bound must exceed {min_youden}; improve the judge or label a larger calibration set."
        )
    grid = (np.arange(grid_size) + 0.5) / grid_size
    rate = sensitivity[:, None] * grid[None, :] + (1 - specificity[:, None]) * (1 - grid[None, :])
    log_like = judge_passes * np.log(rate) + (n_eval - judge_passes) * np.log1p(-rate)
    log_weight = log_like + stats.beta.logpdf(grid, *prior)[None, :]
    weights = np.exp(log_weight - special.logsumexp(log_weight))
    accuracy_mass = weights.sum(axis=0)
    cdf = np.concatenate([[0.0], np.cumsum(accuracy_mass)])
    edges = np.linspace(0, 1, grid_size + 1)
    low, high = np.interp([tail, 1 - tail], cdf / cdf[-1], edges)
    a, b = beta_posterior(judge_passes, n_eval, prior)
    naive_low, naive_high = (float(x) for x in beta_equal_tailed_interval(a, b, level))
    sens_hat, spec_hat = good_passed / n_good, bad_failed / n_bad
    return {
        "naive_mean": a / (a + b),
        "naive_low": naive_low,
        "naive_high": naive_high,
        "rogan_gladen": rogan_gladen(judge_passes / n_eval, sens_hat, spec_hat),
        "corrected_mean": float(np.sum(grid * accuracy_mass)),
        "corrected_low": float(low),
        "corrected_high": float(high),
        "sensitivity_mean": sens_a / (sens_a + sens_b),
        "specificity_mean": spec_a / (spec_a + spec_b),
        "youden_mean": float(np.mean(youden)),
        "youden_low": float(youden_low),
        "prior_a": float(prior[0]),
        "prior_b": float(prior[1]),
        "level": level,
        "effective_draws": float(1 / np.sum(weights.sum(axis=1) ** 2)),
    }
