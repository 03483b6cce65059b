import numpy as np
import pandas as pd
import pytest

from evalpipeline.stats.confusion import F1_COLUMNS, f1_delta_interval, f1_from_probabilities, f1_posterior, f1_table


def test_delta_method_se_is_eq40():
    # Eq. 37 (gradient' Cov gradient, by finite differences) equals the closed form Eq. 39.
    counts = np.array([40.0, 10.0, 15.0, 35.0])
    n = counts.sum()
    theta = counts / n
    eps = 1e-7
    grad = np.array([(f1_from_probabilities(theta + eps * np.eye(4)[i]) - f1_from_probabilities(theta - eps * np.eye(4)[i])) / (2 * eps)
                     for i in range(4)])
    variance = grad @ ((np.diag(theta) - np.outer(theta, theta)) / n) @ grad
    f1, low, high = f1_delta_interval(*counts)
    assert f1 == pytest.approx(80 / 105)
    assert (high - low) / 2 == pytest.approx(1.959964 * np.sqrt(variance), rel=1e-5)


def test_f1_posterior_concentrates_on_the_plug_in_with_much_data():
    result = f1_posterior(40_000, 10_000, 15_000, 35_000, n_draws=5000)
    assert result["f1_posterior_mean"] == pytest.approx(result["f1_plugin"], abs=1e-3)
    assert result["hdi_high"] - result["hdi_low"] == pytest.approx(result["qbi_high"] - result["qbi_low"], rel=0.1)


def test_f1_credible_interval_covers_planted_truth_at_the_nominal_rate():
    # theta from the Dirichlet(1, 1, 1, 1) prior (Eq. 9): the posterior interval's average coverage is exactly nominal.
    rng = np.random.default_rng(8)
    hits = []
    for _ in range(300):
        theta = rng.dirichlet(np.ones(4))
        counts = rng.multinomial(30, theta)
        result = f1_posterior(*counts, n_draws=2000, seed=int(rng.integers(1 << 30)))
        hits.append(result["qbi_low"] <= f1_from_probabilities(theta) <= result["qbi_high"])
    assert np.mean(hits) == pytest.approx(0.95, abs=0.035)


def test_f1_table_and_bad_input():
    frame = pd.DataFrame({"model": ["a"], "tp": [5], "fp": [1], "fn": [2], "tn": [9]})
    table = f1_table(frame, n_draws=1000)
    assert list(table.columns) == ["model", *F1_COLUMNS]
    with pytest.raises(ValueError, match="non-negative"):
        f1_posterior(-1, 1, 1, 1)
    with pytest.raises(ValueError, match="lack columns"):
        f1_table(frame.drop(columns="tn"))
