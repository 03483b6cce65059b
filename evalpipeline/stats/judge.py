"""Correcting an LLM judge's pass rate with a human-labelled calibration set.

Source: the measurement post "Can you trust the model doing the
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

from dataclasses import dataclass

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


@dataclass(frozen=True)
class JudgeCalibration:
    """What is known of one scorer's judge: the counts of a human-labelled calibration set (the judge passed
    ``good_passed`` of ``n_good`` answers marked correct and failed ``bad_failed`` of ``n_bad`` marked wrong),
    or its ``sensitivity`` and ``specificity`` taken as known exactly (no calibration uncertainty)."""

    scorer: str
    good_passed: float | None = None
    n_good: float | None = None
    bad_failed: float | None = None
    n_bad: float | None = None
    sensitivity: float | None = None
    specificity: float | None = None

    def __post_init__(self):
        counts = (self.good_passed, self.n_good, self.bad_failed, self.n_bad)
        rates = (self.sensitivity, self.specificity)
        if (
            all(x is not None for x in counts) == all(x is not None for x in rates)
            or any(x is not None for x in counts)
            and any(x is not None for x in rates)
        ):
            raise ValueError(
                f"judge of scorer {self.scorer!r}: give either the calibration counts good_passed, n_good, "
                "bad_failed and n_bad, or sensitivity and specificity"
            )
        if self.measured:
            for name, k, n in (
                ("good_passed of n_good", self.good_passed, self.n_good),
                ("bad_failed of n_bad", self.bad_failed, self.n_bad),
            ):
                if n <= 0 or not 0 <= k <= n:
                    raise ValueError(
                        f"judge of scorer {self.scorer!r}: {name} must satisfy 0 <= count <= total and "
                        f"total > 0, got {k} of {n}"
                    )
        else:
            for name, value in (("sensitivity", self.sensitivity), ("specificity", self.specificity)):
                if not 0 <= value <= 1:
                    raise ValueError(f"judge of scorer {self.scorer!r}: {name} must be in [0, 1], got {value}")

    @property
    def measured(self) -> bool:
        return self.n_good is not None


def _judge_draws(calibration: JudgeCalibration, judge_prior, n_draws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Draws of (sensitivity, specificity): from their conjugate calibration posteriors, or the known values."""
    if not calibration.measured:
        return np.full(n_draws, float(calibration.sensitivity)), np.full(n_draws, float(calibration.specificity))
    sens_a, sens_b = (
        judge_prior[0] + calibration.good_passed,
        judge_prior[1] + calibration.n_good - calibration.good_passed,
    )
    spec_a, spec_b = (
        judge_prior[0] + calibration.bad_failed,
        judge_prior[1] + calibration.n_bad - calibration.bad_failed,
    )
    return rng.beta(sens_a, sens_b, n_draws), rng.beta(spec_a, spec_b, n_draws)


def check_judge(
    calibration: JudgeCalibration,
    *,
    judge_prior=(1.0, 1.0),
    level: float = 0.95,
    min_youden: float = 0.1,
    n_draws: int = 4000,
    seed: int = 0,
) -> None:
    """Refuse (ValueError naming the scorer) a judge too close to chance to correct for: the ``(1 - level) / 2``
    quantile of Youden's J = sensitivity + specificity - 1 at or below ``min_youden``."""
    sensitivity, specificity = _judge_draws(calibration, judge_prior, n_draws, np.random.default_rng(seed))
    youden = sensitivity + specificity - 1
    tail = (1 - level) / 2
    youden_low, youden_high = np.quantile(youden, [tail, 1 - tail])
    if youden_low <= min_youden:
        raise ValueError(
            f"the judge of scorer {calibration.scorer!r} is too close to chance to correct for: sensitivity + "
            f"specificity - 1 is {np.mean(youden):.2f} (interval [{youden_low:.2f}, {youden_high:.2f}]), and the "
            f"correction divides by it. Its lower bound must exceed {min_youden}; improve the judge or label a "
            "larger calibration set."
        )


def judge_corrected_accuracy(
    judge_passes: float,
    n_eval: float,
    good_passed: int | None = None,
    n_good: int | None = None,
    bad_failed: int | None = None,
    n_bad: int | None = None,
    *,
    calibration: JudgeCalibration | None = None,
    prior: tuple[float, float] = (2.0, 2.0),
    judge_prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    min_youden: float = 0.1,
    n_draws: int = 4000,
    grid_size: int = 2000,
    seed: int = 0,
) -> dict:
    """Accuracy corrected for an imperfect judge, with its uncertainty (the post's judge model).

    ``judge_passes`` of ``n_eval`` answers passed by the judge (fractional counts are read quasi-binomially:
    a design-aware headline's effective counts). The judge is described by the calibration counts (on the
    calibration set it passed ``good_passed`` of ``n_good`` answers humans marked correct and failed
    ``bad_failed`` of ``n_bad`` marked wrong) or by ``calibration``. Returns the naive reading (judge =
    truth), the Rogan-Gladen point estimate at the calibration means, and the posterior mean and
    equal-tailed interval of the accuracy, plus the estimated judge.
    """
    if calibration is None:
        calibration = JudgeCalibration("(judge)", good_passed, n_good, bad_failed, n_bad)
    if n_eval <= 0 or not 0 <= judge_passes <= n_eval:
        raise ValueError(f"judge passes: need 0 <= count <= total and total > 0, got {judge_passes} of {n_eval}")
    check_judge(calibration, judge_prior=judge_prior, level=level, min_youden=min_youden, n_draws=n_draws, seed=seed)
    rng = np.random.default_rng(seed)
    sensitivity, specificity = _judge_draws(calibration, judge_prior, n_draws, rng)
    youden = sensitivity + specificity - 1
    tail = (1 - level) / 2
    youden_low = float(np.quantile(youden, tail))
    grid = (np.arange(grid_size) + 0.5) / grid_size
    rate = sensitivity[:, None] * grid[None, :] + (1 - specificity[:, None]) * (1 - grid[None, :])
    with np.errstate(divide="ignore"):
        log_like = judge_passes * np.log(rate) + (n_eval - judge_passes) * np.log1p(-rate)
    log_weight = log_like + stats.beta.logpdf(grid, *prior)[None, :]
    weights = np.exp(log_weight - special.logsumexp(log_weight))
    accuracy_mass = weights.sum(axis=0)
    cdf = np.concatenate([[0.0], np.cumsum(accuracy_mass)])
    edges = np.linspace(0, 1, grid_size + 1)
    low, high = np.interp([tail, 1 - tail], cdf / cdf[-1], edges)
    a, b = beta_posterior(judge_passes, n_eval, prior)
    naive_low, naive_high = (float(x) for x in beta_equal_tailed_interval(a, b, level))
    if calibration.measured:
        sens_hat, spec_hat = calibration.good_passed / calibration.n_good, calibration.bad_failed / calibration.n_bad
        sens_a = judge_prior[0] + calibration.good_passed
        sensitivity_mean = sens_a / (sens_a + judge_prior[1] + calibration.n_good - calibration.good_passed)
        spec_a = judge_prior[0] + calibration.bad_failed
        specificity_mean = spec_a / (spec_a + judge_prior[1] + calibration.n_bad - calibration.bad_failed)
    else:
        sens_hat = sensitivity_mean = float(calibration.sensitivity)
        spec_hat = specificity_mean = float(calibration.specificity)
    return {
        "naive_mean": a / (a + b),
        "naive_low": naive_low,
        "naive_high": naive_high,
        "rogan_gladen": rogan_gladen(judge_passes / n_eval, sens_hat, spec_hat),
        "corrected_mean": float(np.sum(grid * accuracy_mass)),
        "corrected_low": float(low),
        "corrected_high": float(high),
        "sensitivity_mean": sensitivity_mean,
        "specificity_mean": specificity_mean,
        "youden_mean": float(np.mean(youden)),
        "youden_low": youden_low,
        "prior_a": float(prior[0]),
        "prior_b": float(prior[1]),
        "level": level,
        "effective_draws": float(1 / np.sum(weights.sum(axis=1) ** 2)),
    }
