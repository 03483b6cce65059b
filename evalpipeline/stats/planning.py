"""Planning an eval: power and sample size by simulation, and repeats versus questions.

Source: the measurement post, "How big an eval do you actually
need?" (section 6: ``design_power`` -- simulate many evals of n questions
at a planted gap, form independent Beta posteriors, count how often
P(B > A) clears the decision threshold; the unpaired, conservative
baseline) and "How many times should you ask each question?" (section 5:
80 questions with accuracies ~ Beta(0.75 * 6, 0.25 * 6), K repeats each,
the collapsed Beta-Binomial posterior SD of the overall accuracy as K
grows, against the floor set by the number of distinct questions).

Choice: the post reads P(B > A) off 800 posterior draws per simulated
eval; here it is computed exactly (quadrature, once per distinct pair of
counts), which removes that Monte Carlo noise without changing the target.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from evalpipeline.stats.clustered import clustered_beta_binomial_posterior
from evalpipeline.stats.compare import prob_beta_greater_many


def _check_rate(value: float, name: str) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value}")


def design_power(
    baseline: float,
    candidate: float,
    n_questions: int,
    *,
    threshold: float = 0.95,
    trials: int = 3000,
    prior: tuple[float, float] = (1.0, 1.0),
    seed: int = 0,
) -> float:
    """Share of simulated evals of ``n_questions`` per model in which P(candidate > baseline) >= ``threshold``.

    Each simulated eval draws ``k_A ~ Bin(n, baseline)`` and
    ``k_B ~ Bin(n, candidate)`` and forms independent Beta(prior + counts)
    posteriors (the post's unpaired design).
    """
    _check_rate(baseline, "baseline accuracy")
    _check_rate(candidate, "candidate accuracy")
    if n_questions < 1 or trials < 1:
        raise ValueError(f"n_questions and trials must be positive, got {n_questions} and {trials}")
    if not 0.5 <= threshold < 1:
        raise ValueError(f"decision threshold must be in [0.5, 1), got {threshold}")
    if min(prior) < 1:
        raise ValueError(f"planning needs Beta prior parameters >= 1, got {prior}")
    rng = np.random.default_rng(seed)
    k_a = rng.binomial(n_questions, baseline, trials)
    k_b = rng.binomial(n_questions, candidate, trials)
    pairs, inverse = np.unique(np.column_stack([k_a, k_b]), axis=0, return_inverse=True)
    p_better = prob_beta_greater_many(
        prior[0] + pairs[:, 1],
        prior[1] + n_questions - pairs[:, 1],
        prior[0] + pairs[:, 0],
        prior[1] + n_questions - pairs[:, 0],
    )
    return float(np.mean(p_better[inverse.ravel()] >= threshold))


POWER_COLUMNS = {
    "baseline": "accuracy of the current model (A)",
    "gap": "true improvement of the candidate (B - A)",
    "candidate": "baseline + gap",
    "n_questions": "questions per model",
    "threshold": "decision bar on P(B > A)",
    "power": "share of simulated evals that reach the bar",
    "power_se": "Monte Carlo standard error of that share",
    "trials": "simulated evals",
    "seed": "seed",
}


def power_table(
    baseline: float,
    gaps: Iterable[float],
    n_values: Iterable[int],
    *,
    threshold: float = 0.95,
    trials: int = 3000,
    prior: tuple[float, float] = (1.0, 1.0),
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`design_power` over gaps x eval sizes (columns: ``POWER_COLUMNS``)."""
    rows = []
    for gap in gaps:
        for n in n_values:
            power = design_power(
                baseline, baseline + gap, int(n), threshold=threshold, trials=trials, prior=prior, seed=seed
            )
            rows.append(
                {
                    "baseline": baseline,
                    "gap": gap,
                    "candidate": baseline + gap,
                    "n_questions": int(n),
                    "threshold": threshold,
                    "power": power,
                    "power_se": math.sqrt(power * (1 - power) / trials),
                    "trials": trials,
                    "seed": seed,
                }
            )
    return pd.DataFrame(rows, columns=list(POWER_COLUMNS))


def sample_size_for_power(
    baseline: float,
    gap: float,
    *,
    target_power: float = 0.8,
    threshold: float = 0.95,
    trials: int = 2000,
    max_n: int = 100_000,
    prior: tuple[float, float] = (1.0, 1.0),
    seed: int = 0,
) -> int | None:
    """Smallest n (to within ~2%) whose simulated power reaches ``target_power``; None if above ``max_n``.

    Doubles n until the target is met (the last step stops at ``max_n``), then
    bisects. Every n is simulated with the same seed (common random numbers),
    which keeps the search from chasing Monte Carlo noise.
    """
    if not 0 < target_power < 1:
        raise ValueError(f"target power must be in (0, 1), got {target_power}")
    if gap <= 0:
        raise ValueError(f"the gap to detect must be positive, got {gap}")
    if max_n < 1:
        raise ValueError(f"the largest n to consider must be at least 1, got {max_n}")

    def power(n):
        return design_power(baseline, baseline + gap, n, threshold=threshold, trials=trials, prior=prior, seed=seed)

    # the doubling stopped as soon as it passed max_n, so an answer between the last power of two and
    # max_n was reported as "more than max_n"
    low, high = 1, min(8, max_n)
    while power(high) < target_power:
        if high >= max_n:
            return None
        low, high = high, min(high * 2, max_n)
    while high - low > max(1, int(0.02 * high)):
        middle = (low + high) // 2
        if power(middle) >= target_power:
            high = middle
        else:
            low = middle
    return high


def analytic_standard_error(mean: float, concentration: float, n_questions: int, repeats: int) -> float:
    """SD of the observed mean when question accuracies ~ Beta(mean * c, (1 - mean) * c) and each is asked K times.

    ``Var = [mu (1 - mu) / (1 + c)] / n + [mu (1 - mu) c / (1 + c)] / (n K)``:
    between-question spread plus within-question noise.
    """
    _check_rate(mean, "mean accuracy")
    if concentration <= 0 or n_questions < 1 or repeats < 1:
        raise ValueError("need concentration > 0, n_questions >= 1 and repeats >= 1")
    between = mean * (1 - mean) / (1 + concentration)
    within = mean * (1 - mean) * concentration / (1 + concentration)
    return math.sqrt(between / n_questions + within / (n_questions * repeats))


def floor_standard_error(mean: float, concentration: float, n_questions: int) -> float:
    """The limit of :func:`analytic_standard_error` as repeats grow: set by the number of questions alone."""
    _check_rate(mean, "mean accuracy")
    return math.sqrt(mean * (1 - mean) / (1 + concentration) / n_questions)


REPEATS_COLUMNS = {
    "repeats": "times each question is asked (K)",
    "n_questions": "distinct questions",
    "attempts": "n_questions x K",
    "posterior_mean": "posterior mean of the overall accuracy (clustered Beta-Binomial)",
    "posterior_sd": "posterior SD of the overall accuracy",
    "analytic_se": "analytic SD of the observed mean at the planted values",
    "floor_se": "the floor no number of repeats gets under",
}


def repeats_versus_questions(
    n_questions: int = 80,
    repeats: Iterable[int] = (1, 2, 3, 5, 10, 30),
    *,
    mean: float = 0.75,
    concentration: float = 6.0,
    seed: int = 21,
    mean_prior: tuple[float, float] = (2.0, 2.0),
    concentration_prior: tuple[float, float] = (2.0, 0.1),
) -> pd.DataFrame:
    """The post's section 5 experiment (columns: ``REPEATS_COLUMNS``).

    Plants question accuracies ~ Beta(mean * c, (1 - mean) * c), then for
    each K draws passes ~ Bin(K, accuracy) from the same generator (in the
    post's order, so its seed 21 reproduces its data) and fits the
    collapsed Beta-Binomial model with the post's priors (Beta(2, 2) on the
    mean, Gamma(2, rate 0.1) on the concentration).
    """
    _check_rate(mean, "mean accuracy")
    rng = np.random.default_rng(seed)
    accuracy = rng.beta(mean * concentration, (1 - mean) * concentration, size=n_questions)
    rows = []
    for k in repeats:
        passes = rng.binomial(int(k), accuracy)
        posterior = clustered_beta_binomial_posterior(
            passes, np.full(n_questions, int(k)), mean_prior=mean_prior, concentration_prior=concentration_prior
        )
        rows.append(
            {
                "repeats": int(k),
                "n_questions": n_questions,
                "attempts": n_questions * int(k),
                "posterior_mean": posterior.mean,
                "posterior_sd": posterior.sd,
                "analytic_se": analytic_standard_error(mean, concentration, n_questions, int(k)),
                "floor_se": floor_standard_error(mean, concentration, n_questions),
            }
        )
    return pd.DataFrame(rows, columns=list(REPEATS_COLUMNS))
