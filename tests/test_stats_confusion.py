import numpy as np
import pandas as pd
import pytest

from scipy import stats

from evalpipeline.stats.confusion import (
    CLASS_METRIC_COLUMNS,
    F1_COLUMNS,
    MACRO_LABEL,
    OTHER_LABEL,
    LabelConfusion,
    classification_posterior,
    classification_table,
    f1_better_probabilities,
    f1_delta_interval,
    f1_from_probabilities,
    f1_posterior,
    f1_table,
    label_confusion,
    macro_f1_delta_interval,
)


def test_delta_method_se_is_eq40():
    # Eq. 37 (gradient' Cov gradient, by finite differences) equals the closed form Eq. 39.
    counts = np.array([40.0, 10.0, 15.0, 35.0])
    n = counts.sum()
    theta = counts / n
    eps = 1e-7
    grad = np.array(
        [
            (f1_from_probabilities(theta + eps * np.eye(4)[i]) - f1_from_probabilities(theta - eps * np.eye(4)[i]))
            / (2 * eps)
            for i in range(4)
        ]
    )
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


# ------------------------------------------------------------------ K classes


def labels_of(counts: dict[tuple[str, str], int]) -> tuple[list[str], list[str]]:
    """(answers, targets) holding each (answer, target) pair as often as ``counts`` says."""
    pairs = [pair for pair, times in counts.items() for _ in range(times)]
    return [a for a, _ in pairs], [t for _, t in pairs]


def test_label_confusion_counts_pairs_and_keeps_answers_outside_the_targets():
    answers, targets = labels_of({("A", "A"): 5, ("B", "A"): 2, ("x", "A"): 1, ("B", "B"): 4, ("A", "C"): 3})
    confusion = label_confusion(answers, targets)
    assert confusion.classes == ("A", "B", "C") and confusion.predicted == ("A", "B", "C", OTHER_LABEL)
    assert confusion.counts.tolist() == [[5, 0, 3], [2, 4, 0], [0, 0, 0], [1, 0, 0]]  # predicted x true
    rest = confusion.one_vs_rest()
    assert rest.loc["A"].tolist() == [8, 8, 5, 3, 3, 4]  # n, n_predicted, tp, fp, fn, tn
    assert rest.loc["C"].tolist() == [3, 0, 0, 0, 3, 12]
    assert label_confusion(["A"], ["A"]).predicted == ("A",)  # no answer outside: no (other) column
    assert label_confusion(["A"], ["A"], other_column=True).counts.tolist() == [[1], [0]]


@pytest.mark.parametrize(
    "answers, targets, kwargs, message",
    [
        (["A", None], ["A", "B"], {}, "answer missing at position 1"),
        (["A", "B"], ["A", float("nan")], {}, "target missing at position 1"),
        (["A", "B"], ["A", "C"], {"classes": ["A", "B"]}, "target 'C' at position 1 is not one of the classes"),
        (["A", "x"], ["A", "B"], {"other_column": False}, "answer 'x' at position 1 is not one of the classes"),
        (["A"], [OTHER_LABEL], {}, "reserved"),
        (["A"], ["A", "B"], {}, "1 answers but 2 targets"),
    ],
)
def test_label_confusion_names_bad_labels(answers, targets, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        label_confusion(answers, targets, **kwargs)


@pytest.mark.parametrize("counts, seed", [((17, 4, 9, 30), 0), ((0, 3, 1, 2), 7), ((250, 40, 35, 675), 3)])
def test_two_classes_reproduce_the_binary_f1_posterior(counts, seed):
    tp, fp, fn, tn = counts
    answers, targets = labels_of({("pos", "pos"): tp, ("pos", "neg"): fp, ("neg", "pos"): fn, ("neg", "neg"): tn})
    confusion = label_confusion(answers, targets, classes=["pos", "neg"])
    posterior = classification_posterior(confusion, n_draws=3000, seed=seed)
    binary = f1_posterior(*counts, n_draws=3000, seed=seed)
    np.testing.assert_allclose(posterior.f1[:, 0], binary["draws"], rtol=1e-12)
    row = classification_table(posterior).set_index("class").loc["pos"]
    assert row["f1_mean"] == pytest.approx(binary["f1_posterior_mean"], rel=1e-12)
    assert (row["f1_low"], row["f1_high"]) == pytest.approx((binary["qbi_low"], binary["qbi_high"]), rel=1e-12)
    assert (row["f1_plugin"], row["f1_delta_low"], row["f1_delta_high"]) == pytest.approx(
        (binary["f1_plugin"], binary["delta_low"], binary["delta_high"]), nan_ok=True
    )


def test_precision_and_recall_have_the_beta_margins_of_the_dirichlet():
    # Aggregation: theta_cc / (row c) ~ Beta(alpha_cc, rest of row c), theta_cc / (column c) likewise.
    answers, targets = labels_of(
        {("A", "A"): 12, ("B", "A"): 3, ("z", "A"): 2, ("B", "B"): 7, ("A", "B"): 5, ("C", "C"): 1, ("A", "C"): 2}
    )
    confusion = label_confusion(answers, targets)
    posterior = classification_posterior(confusion, prior_concentration=0.5, n_draws=200_000, seed=1)
    table = classification_table(posterior, level=0.9).set_index("class")
    alpha = confusion.counts + 0.5
    for c, label in enumerate(confusion.classes):
        precision = stats.beta(alpha[c, c], alpha[c].sum() - alpha[c, c])
        recall = stats.beta(alpha[c, c], alpha[:, c].sum() - alpha[c, c])
        for name, exact in (("precision", precision), ("recall", recall)):
            assert table.loc[label, f"{name}_mean"] == pytest.approx(exact.mean(), abs=2e-3)
            assert table.loc[label, f"{name}_low"] == pytest.approx(exact.ppf(0.05), abs=4e-3)
            assert table.loc[label, f"{name}_high"] == pytest.approx(exact.ppf(0.95), abs=4e-3)
    assert table.loc[OTHER_LABEL, ["n", "n_predicted", "n_correct"]].tolist() == [0, 2, 0]
    assert table.loc[OTHER_LABEL, "f1_mean"] != table.loc[OTHER_LABEL, "f1_mean"]  # NaN: no attempt is (other)
    macro = table.loc[MACRO_LABEL]
    assert macro["f1_mean"] == pytest.approx(posterior.macro_f1.mean())
    assert macro["f1_plugin"] == pytest.approx(table.loc[list(confusion.classes), "f1_plugin"].mean())
    assert macro[["n", "n_predicted", "n_correct"]].tolist() == [32, 32, 20]
    assert list(classification_table(posterior).columns) == list(CLASS_METRIC_COLUMNS)


def test_macro_f1_delta_interval_is_eq28_over_every_cell():
    counts = np.array([[30.0, 4, 6], [5, 22, 3], [2, 1, 18], [3, 2, 4]])  # predicted (3 + other) x true
    confusion = LabelConfusion(("a", "b", "c"), ("a", "b", "c", OTHER_LABEL), counts.astype(int))
    n = counts.sum()

    def macro_f1(theta: np.ndarray) -> float:
        theta = theta.reshape(counts.shape)
        tp = np.diagonal(theta[:3])
        return float(np.mean(2 * tp / (theta[:3].sum(axis=1) + theta.sum(axis=0))))

    theta = counts.ravel() / n
    eps = 1e-7
    grad = np.array([(macro_f1(theta + eps * e) - macro_f1(theta - eps * e)) / (2 * eps) for e in np.eye(theta.size)])
    variance = grad @ ((np.diag(theta) - np.outer(theta, theta)) / n) @ grad
    value, low, high = macro_f1_delta_interval(confusion)
    assert value == pytest.approx(macro_f1(theta))
    assert (high - low) / 2 == pytest.approx(1.959964 * np.sqrt(variance), rel=1e-5)
    # one class: Eq. 41 itself
    single = LabelConfusion(("a",), ("a", OTHER_LABEL), np.array([[40], [9]]))
    assert macro_f1_delta_interval(single) == pytest.approx(f1_delta_interval(40, 0, 9, 0))
    empty_class = LabelConfusion(("a", "b"), ("a", "b"), np.array([[4, 0], [0, 0]]))
    assert np.isnan(macro_f1_delta_interval(empty_class)).all()


def test_macro_f1_credible_interval_covers_planted_truth_at_the_nominal_rate():
    # theta from the Dirichlet(1, ..., 1) prior over the 4 x 3 cells: the interval's average coverage is nominal.
    rng = np.random.default_rng(12)
    classes = ("a", "b", "c")
    hits = []
    for _ in range(300):
        theta = rng.dirichlet(np.ones(12)).reshape(4, 3)
        counts = rng.multinomial(40, theta.ravel()).reshape(4, 3)
        confusion = LabelConfusion(classes, classes + (OTHER_LABEL,), counts)
        posterior = classification_posterior(confusion, n_draws=2000, seed=int(rng.integers(1 << 30)))
        low, high = np.quantile(posterior.macro_f1, [0.025, 0.975])
        truth = np.mean(2 * np.diagonal(theta[:3]) / (theta[:3].sum(axis=1) + theta.sum(axis=0)))
        hits.append(low <= truth <= high)
    assert np.mean(hits) == pytest.approx(0.95, abs=0.035)


def test_p_a_better_f1_is_symmetric_and_sees_a_better_model():
    strong = label_confusion(*labels_of({("A", "A"): 40, ("B", "B"): 35, ("A", "B"): 5, ("B", "A"): 3}))
    weak = label_confusion(*labels_of({("A", "A"): 25, ("B", "B"): 20, ("A", "B"): 18, ("B", "A"): 20}))
    a = classification_posterior(strong, n_draws=5000, seed=1)
    b = classification_posterior(weak, n_draws=5000, seed=2)
    forward, backward = f1_better_probabilities(a, b), f1_better_probabilities(b, a)
    assert list(forward) == ["A", "B", MACRO_LABEL]
    for label in forward:
        assert forward[label] + backward[label] == pytest.approx(1.0)
    assert forward[MACRO_LABEL] > 0.99
    same = f1_better_probabilities(a, classification_posterior(strong, n_draws=5000, seed=9))
    assert 0.4 < same[MACRO_LABEL] < 0.6
    with pytest.raises(ValueError, match="other classes"):
        f1_better_probabilities(a, classification_posterior(label_confusion(["A"], ["A"]), n_draws=5000))
    with pytest.raises(ValueError, match="prior concentration must be positive"):
        classification_posterior(strong, prior_concentration=0)


def test_default_prior_weighs_four_attempts_whatever_the_number_of_classes():
    from evalpipeline.stats.confusion import default_prior_concentration

    two = label_confusion(["a", "b", "a"], ["a", "b", "b"])
    assert default_prior_concentration(two) == 1.0  # Eq. 9's Dirichlet(1, 1, 1, 1)
    rng = np.random.default_rng(3)
    classes = [f"c{i}" for i in range(10)]
    targets = rng.choice(classes, 300)
    answers = np.where(rng.random(300) < 0.75, targets, rng.choice(classes, 300))
    ten = label_confusion(answers, targets, classes)
    assert default_prior_concentration(ten) * ten.counts.size == pytest.approx(4.0)
    posterior = classification_posterior(ten, n_draws=20_000, seed=1)
    uniform = classification_posterior(ten, prior_concentration=1.0, n_draws=20_000, seed=1)
    plugin = macro_f1_delta_interval(ten)[0]
    # the light prior leaves macro-F1 near its plug-in value; one pseudo-attempt a cell (100 of them) drags it down
    assert abs(posterior.macro_f1.mean() - plugin) < 0.03 < plugin - uniform.macro_f1.mean()
