"""Confusion-matrix metrics with uncertainty: F1 from a Dirichlet posterior.

Source: the position paper (Bowyer et al.) Section 3.5 (Eq. 9: categorical
outcomes TP/FP/FN/TN, uniform Dirichlet(1, 1, 1, 1) prior, posterior
Dirichlet(1 + counts); Eq. 10: F1; Snippet 3: 2000 draws, HDI and
quantile interval) and Appendix A.5 (the delta-method CLT interval,
Eq. 41, reported beside as the conventional reading).

K classes (:func:`label_confusion`, :func:`classification_posterior`): the
same model over the K x K matrix of (predicted, true) label pairs, one-vs-rest
precision, recall and F1 per class, and macro averages, from one Dirichlet
posterior; :func:`f1_better_probabilities` compares two models' posteriors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats


def _check_counts(tp, fp, fn, tn) -> np.ndarray:
    counts = np.array([tp, fp, fn, tn], dtype=float)
    if np.any(counts < 0) or np.any(np.isnan(counts)):
        raise ValueError(f"confusion counts must be non-negative numbers, got TP={tp}, FP={fp}, FN={fn}, TN={tn}")
    return counts


def f1_from_probabilities(theta: np.ndarray) -> np.ndarray:
    """Eq. 29: ``F1 = 2 theta_TP / (2 theta_TP + theta_FP + theta_FN)``; last axis is (TP, FP, FN, TN)."""
    theta = np.asarray(theta, dtype=float)
    return 2 * theta[..., 0] / (2 * theta[..., 0] + theta[..., 1] + theta[..., 2])


def f1_delta_interval(tp, fp, fn, tn, level: float = 0.95) -> tuple[float, float, float]:
    """Plug-in F1 and its delta-method CLT interval, Appendix A.5 Eq. 40-41. Returns (f1, low, high)."""
    _check_counts(tp, fp, fn, tn)
    f1, low, high = _f1_delta(tp, fp, fn, level)
    return float(f1), float(low), float(high)


def _f1_delta(tp, fp, fn, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`f1_delta_interval` over arrays of counts (NaN where 2 TP + FP + FN is 0)."""
    tp, fp, fn = (np.asarray(x, dtype=float) for x in (tp, fp, fn))
    denominator = 2 * tp + fp + fn
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(denominator > 0, 2 * tp / denominator, np.nan)
        se = np.sqrt(f1 * (1 - f1) * (2 - f1) / denominator)
    z = float(stats.norm.ppf(0.5 + level / 2))
    return f1, f1 - z * se, f1 + z * se


def _hdi(samples: np.ndarray, mass: float) -> tuple[float, float]:
    # Shortest window holding `mass` of the sorted draws (what arviz.hdi computes for unimodal draws).
    ordered = np.sort(samples)
    count = int(math.floor(mass * ordered.size))
    widths = ordered[count:] - ordered[: ordered.size - count]
    start = int(np.argmin(widths))
    return float(ordered[start]), float(ordered[start + count])


F1_COLUMNS = {
    "tp": "true positives",
    "fp": "false positives",
    "fn": "false negatives",
    "tn": "true negatives",
    "f1_plugin": "2 TP / (2 TP + FP + FN)",
    "f1_posterior_mean": "posterior mean of F1 (Dirichlet posterior)",
    "qbi_low": "equal-tailed (quantile-based) credible interval, lower",
    "qbi_high": "upper",
    "hdi_low": "highest-density interval of the F1 draws, lower",
    "hdi_high": "upper",
    "delta_low": "delta-method CLT interval (Eq. 41), lower, unclipped",
    "delta_high": "upper",
    "level": "interval probability",
    "prior_concentration": "Dirichlet prior concentration per cell",
    "n_draws": "posterior draws",
    "seed": "seed of the draws",
}


def f1_posterior(
    tp, fp, fn, tn, *, prior_concentration: float = 1.0, level: float = 0.95, n_draws: int = 20_000, seed: int = 0
) -> dict:
    """F1 under the Dirichlet-categorical model Eq. 9 (Snippet 3), plus the plug-in and delta-method readings.

    Returns a dict with the keys of ``F1_COLUMNS`` and ``draws`` (the F1 draws).
    """
    counts = _check_counts(tp, fp, fn, tn)
    if prior_concentration <= 0:
        raise ValueError(f"prior concentration must be positive, got {prior_concentration}")
    rng = np.random.default_rng(seed)
    draws = f1_from_probabilities(rng.dirichlet(counts + prior_concentration, n_draws))
    tail = (1 - level) / 2
    qbi_low, qbi_high = np.quantile(draws, [tail, 1 - tail])
    hdi_low, hdi_high = _hdi(draws, level)
    plugin, delta_low, delta_high = f1_delta_interval(tp, fp, fn, tn, level)
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "f1_plugin": plugin,
        "f1_posterior_mean": float(draws.mean()),
        "qbi_low": float(qbi_low),
        "qbi_high": float(qbi_high),
        "hdi_low": hdi_low,
        "hdi_high": hdi_high,
        "delta_low": delta_low,
        "delta_high": delta_high,
        "level": level,
        "prior_concentration": float(prior_concentration),
        "n_draws": n_draws,
        "seed": seed,
        "draws": draws,
    }


def f1_table(counts: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """:func:`f1_posterior` for every row of a frame with columns tp, fp, fn, tn (other columns kept in front)."""
    missing = {"tp", "fp", "fn", "tn"} - set(counts.columns)
    if missing:
        raise ValueError(f"confusion counts lack columns {sorted(missing)}")
    keys = [c for c in counts.columns if c not in {"tp", "fp", "fn", "tn"}]
    rows = []
    for record in counts.to_dict("records"):
        result = f1_posterior(record["tp"], record["fp"], record["fn"], record["tn"], **kwargs)
        result.pop("draws")
        rows.append({**{k: record[k] for k in keys}, **result})
    return pd.DataFrame(rows, columns=keys + list(F1_COLUMNS))


# ------------------------------------------------------------------ K classes: per-class and macro F1

#: The predicted class of an answer that is none of the target labels: an error for the attempt's
#: true class (a false negative), never dropped. No attempt has it as its target.
OTHER_LABEL = "(other)"
#: The label of the macro-averaged row (unweighted mean over the target classes).
MACRO_LABEL = "(macro)"


@dataclass(frozen=True)
class LabelConfusion:
    """Attempts counted by (predicted, true) class: ``counts[p, t]`` attempts answered ``predicted[p]``
    whose target is ``classes[t]``. ``predicted`` is ``classes`` plus :data:`OTHER_LABEL` when that
    column is kept; the true-(other) row is left out, as no attempt can fall in it."""

    classes: tuple[str, ...]
    predicted: tuple[str, ...]
    counts: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def one_vs_rest(self) -> pd.DataFrame:
        """Per target class: n (its attempts), n_predicted (attempts answered as it), tp, fp, fn, tn."""
        return pd.DataFrame(self._one_vs_rest(), index=pd.Index(self.classes, name="class"))

    def _one_vs_rest(self) -> dict[str, np.ndarray]:
        k = len(self.classes)
        tp = np.diagonal(self.counts[:k, :k]).astype(np.int64)
        n_true = self.counts.sum(axis=0).astype(np.int64)
        n_predicted = self.counts[:k].sum(axis=1).astype(np.int64)
        fp, fn = n_predicted - tp, n_true - tp
        return {"n": n_true, "n_predicted": n_predicted, "tp": tp, "fp": fp, "fn": fn, "tn": self.n - tp - fp - fn}


def label_confusion(answers, targets, classes=None, *, other_column: bool | None = None) -> LabelConfusion:
    """Count (answer, target) label pairs into a :class:`LabelConfusion`.

    ``classes``: the target labels, in order (default: the distinct targets, sorted); every target
    must be one. An answer outside them is predicted :data:`OTHER_LABEL`; ``other_column`` keeps
    that column (True), refuses such answers (False) or keeps it only when one occurs (None).
    Raises ValueError naming the first position of a missing label, a target outside ``classes``
    or a reserved label (``(other)``, ``(macro)``) used as a class.
    """
    answers = pd.Series(answers, dtype=object).reset_index(drop=True)
    targets = pd.Series(targets, dtype=object).reset_index(drop=True)
    if len(answers) != len(targets):
        raise ValueError(f"{len(answers)} answers but {len(targets)} targets")
    for name, values in (("answer", answers), ("target", targets)):
        missing = values.isna().to_numpy()
        if missing.any():
            raise ValueError(
                f"{name} missing at position {int(missing.argmax())}: every attempt needs an answer and a target"
            )
    classes = tuple(sorted(set(targets))) if classes is None else tuple(classes)
    reserved = {OTHER_LABEL, MACRO_LABEL} & set(classes)
    if reserved:
        raise ValueError(
            f"class label(s) {sorted(reserved)} are reserved for answers outside the targets and the macro average"
        )
    if len(set(classes)) != len(classes):
        raise ValueError(f"classes repeat a label: {list(classes)}")
    index = pd.Index(classes, dtype=object)
    true = index.get_indexer(targets)
    if (true < 0).any():
        at = int((true < 0).argmax())
        raise ValueError(f"target {targets[at]!r} at position {at} is not one of the classes {list(classes)}")
    predicted = index.get_indexer(answers).astype(np.int64)
    outside = predicted < 0
    if other_column is False and outside.any():
        at = int(outside.argmax())
        raise ValueError(f"answer {answers[at]!r} at position {at} is not one of the classes {list(classes)}")
    keep_other = bool(outside.any()) if other_column is None else other_column
    k = len(classes)
    predicted[outside] = k
    rows = k + keep_other
    counts = np.bincount(predicted * k + true, minlength=rows * k).reshape(rows, k)
    return LabelConfusion(classes, classes + ((OTHER_LABEL,) if keep_other else ()), counts)


@dataclass(frozen=True)
class ClassificationPosterior:
    """Posterior draws of per-class precision, recall and F1 (n_draws x classes) and of their macro
    averages (n_draws), from one Dirichlet posterior over the confusion matrix's cells."""

    confusion: LabelConfusion
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    macro_precision: np.ndarray
    macro_recall: np.ndarray
    macro_f1: np.ndarray
    prior_concentration: float

    def f1_draws(self) -> dict[str, np.ndarray]:
        """Class label (and :data:`MACRO_LABEL`) -> its F1 draws."""
        return {**dict(zip(self.confusion.classes, self.f1.T)), MACRO_LABEL: self.macro_f1}


#: Cells of the Dirichlet drawn at once: bounds the memory of a many-class posterior.
_CELLS_PER_BLOCK = 1 << 21


#: The prior's total weight in pseudo-attempts: Eq. 9's Dirichlet(1, 1, 1, 1) over the four binary cells.
PRIOR_WEIGHT = 4.0


def default_prior_concentration(confusion: "LabelConfusion") -> float:
    """Per-cell concentration that spreads :data:`PRIOR_WEIGHT` evenly over the confusion matrix's cells: 1 for
    two classes (Eq. 9), less for more. A concentration of 1 per cell would add K (K + 1) pseudo-attempts and
    pull F1 towards the prior as K grows (10 classes, 300 attempts: posterior macro-F1 0.56 against 0.73 plug-in)."""
    return PRIOR_WEIGHT / confusion.counts.size


def classification_posterior(
    confusion: LabelConfusion,
    *,
    prior_concentration: float | None = None,
    n_draws: int = 20_000,
    seed: int | np.random.SeedSequence = 0,
) -> ClassificationPosterior:
    """Eq. 9 generalised: the confusion matrix's cells (predicted x true) are categorical with
    theta ~ Dirichlet(prior_concentration, ...), so theta | counts ~ Dirichlet(prior + counts); by default
    the concentration is :func:`default_prior_concentration` (a prior worth 4 attempts, 1 a cell for two classes).
    One-vs-rest per class c: TP = theta[c, c], FP = the rest of row c, FN = the rest of column c;
    precision TP / (TP + FP), recall TP / (TP + FN), F1 Eq. 10. All three are ratios of sums of
    theta, so every draw gives them for every class at once.

    For two classes and no (other) column, the cells are drawn in the order (TP, FP, FN, TN) of
    the first class, so its F1 draws are :func:`f1_posterior`'s for the same seed (up to rounding:
    2 TP + FP + FN is summed as (TP + FP) + (TP + FN)).
    """
    if prior_concentration is None:
        prior_concentration = default_prior_concentration(confusion)
    if prior_concentration <= 0:
        raise ValueError(f"prior concentration must be positive, got {prior_concentration}")
    if n_draws < 1:
        raise ValueError(f"n_draws must be at least 1, got {n_draws}")
    k = len(confusion.classes)
    if k == 0:
        raise ValueError("no classes: nothing to estimate")
    alpha = (confusion.counts + prior_concentration).ravel().astype(float)
    rng = np.random.default_rng(seed)
    tp, row, column = (np.empty((n_draws, k)) for _ in range(3))
    block = max(1, _CELLS_PER_BLOCK // alpha.size)
    for start in range(0, n_draws, block):  # consecutive calls continue one stream: the draws of one call
        stop = min(n_draws, start + block)
        theta = rng.dirichlet(alpha, stop - start).reshape(stop - start, *confusion.counts.shape)
        tp[start:stop] = np.diagonal(theta[:, :k, :k], axis1=1, axis2=2)
        # einsum: numpy's sum over a short last axis is ~4x slower
        row[start:stop] = np.einsum("dpt->dp", theta[:, :k, :])  # predicted c: TP + FP
        column[start:stop] = np.einsum("dpt->dt", theta)  # true c: TP + FN
    precision, recall, f1 = tp / row, tp / column, 2 * tp / (row + column)
    return ClassificationPosterior(
        confusion,
        precision,
        recall,
        f1,
        precision.mean(axis=1),
        recall.mean(axis=1),
        f1.mean(axis=1),
        float(prior_concentration),
    )


def macro_f1_delta_interval(confusion: LabelConfusion, level: float = 0.95) -> tuple[float, float, float]:
    """Plug-in macro-F1 and its delta-method CLT interval (Appendix A.4 Eq. 28, the multinomial
    covariance Eq. 31 over every cell); for one class it is Eq. 41. Macro-F1 is homogeneous of degree
    0 in theta, so the gradient is orthogonal to theta and the variance is
    ``sum_i theta_i g_i^2 / N``. NaN when some class has no attempt and no prediction (its plug-in
    F1 is 0 / 0). Returns (macro_f1, low, high)."""
    counts = confusion.counts.astype(float)
    n, k = counts.sum(), len(confusion.classes)
    table = confusion._one_vs_rest()
    d = (2 * table["tp"] + table["fp"] + table["fn"]).astype(float)
    if n == 0 or (d == 0).any():
        return math.nan, math.nan, math.nan
    f1 = 2 * table["tp"] / d
    # dF1_c/dn per cell (counts scale): +2(1 - F1_c)/d_c on its TP cell, -F1_c/d_c on its FP and FN cells
    scale = f1 / d
    gradient = np.zeros_like(counts)
    gradient[:k, :] -= scale[:, None]  # predicted c, any true class: FP of c (the diagonal fixed below)
    gradient[:, :] -= scale[None, :]  # true c, any predicted class: FN of c
    diagonal = np.arange(k)
    gradient[diagonal, diagonal] = 2 * (1 - f1) / d
    gradient *= n / k  # per unit of theta, averaged over the classes
    se = math.sqrt(float((counts / n * gradient**2).sum()) / n)
    z = float(stats.norm.ppf(0.5 + level / 2))
    macro = float(f1.mean())
    return macro, macro - z * se, macro + z * se


CLASS_METRIC_COLUMNS = {
    "class": f"a target label (one-vs-rest metrics); {OTHER_LABEL} counts answers outside the target labels (no "
    f"metric: no attempt has it as its target); {MACRO_LABEL}: the unweighted mean over the target labels",
    "n": "attempts whose target is the class (macro: every attempt counted)",
    "n_predicted": "attempts answered as the class (macro: every attempt counted)",
    "n_correct": "attempts answered as the class whose target it is, TP (macro: every correct attempt)",
    "precision_mean": "posterior mean of precision TP / (TP + FP) (macro: of the mean over the classes)",
    "precision_low": "equal-tailed credible interval of precision, lower",
    "precision_high": "upper",
    "recall_mean": "posterior mean of recall TP / (TP + FN) (macro: of the mean over the classes)",
    "recall_low": "equal-tailed credible interval of recall, lower",
    "recall_high": "upper",
    "f1_mean": "posterior mean of F1 = 2 TP / (2 TP + FP + FN) (macro: of macro-F1, the mean over the classes)",
    "f1_low": "equal-tailed credible interval of F1, lower",
    "f1_high": "upper",
    "f1_plugin": "2 TP / (2 TP + FP + FN) from the counts (macro: their mean; NaN when a class has no attempt and "
    "no prediction)",
    "f1_delta_low": "delta-method CLT interval of the plug-in F1 (Eq. 41; macro: over every cell), lower, unclipped",
    "f1_delta_high": "upper",
    "level": "probability of every interval in the row",
    "prior_concentration": "Dirichlet prior concentration per cell of the confusion matrix (K x K cells, K x (K + 1) "
    "with (other)); by default 4 / cells, a prior worth four attempts (1 a cell for two classes)",
}


def classification_table(posterior: ClassificationPosterior, level: float = 0.95) -> pd.DataFrame:
    """One row per target class, one for :data:`OTHER_LABEL` when the confusion has that column, and the
    :data:`MACRO_LABEL` row (columns :data:`CLASS_METRIC_COLUMNS`)."""
    confusion = posterior.confusion
    counts = confusion._one_vs_rest()
    n, tail = confusion.n, (1 - level) / 2
    # every summary from one (metric x label) by draws array, the draws contiguous (a many-model suite
    # builds a table per model: numpy on whole arrays, not a pandas step per class)
    draws = np.ascontiguousarray(
        np.column_stack(
            [
                posterior.precision,
                posterior.macro_precision,
                posterior.recall,
                posterior.macro_recall,
                posterior.f1,
                posterior.macro_f1,
            ]
        ).T
    )
    means = draws.mean(axis=1).reshape(3, -1)
    lows, highs = (q.reshape(3, -1) for q in np.quantile(draws, [tail, 1 - tail], axis=1))
    per_class_delta = _f1_delta(counts["tp"], counts["fp"], counts["fn"], level)
    plugin, delta_low, delta_high = (
        np.append(x, m) for x, m in zip(per_class_delta, macro_f1_delta_interval(confusion, level))
    )
    columns = {
        "class": np.array([*confusion.classes, MACRO_LABEL], dtype=object),
        "n": np.append(counts["n"], n),
        "n_predicted": np.append(counts["n_predicted"], n),
        "n_correct": np.append(counts["tp"], counts["tp"].sum()),
    }
    for i, metric in enumerate(("precision", "recall", "f1")):
        columns.update({f"{metric}_mean": means[i], f"{metric}_low": lows[i], f"{metric}_high": highs[i]})
    columns.update(f1_plugin=plugin, f1_delta_low=delta_low, f1_delta_high=delta_high)
    if OTHER_LABEL in confusion.predicted:  # a row before the macro one: its counts, no metrics
        other = {"class": OTHER_LABEL, "n": 0, "n_predicted": confusion.counts[-1].sum(), "n_correct": 0}
        columns = {name: np.insert(values, -1, other.get(name, np.nan)) for name, values in columns.items()}
    table = pd.DataFrame(columns)
    for column in ("n", "n_predicted", "n_correct"):
        table[column] = table[column].astype(np.int64)
    table["level"] = float(level)
    table["prior_concentration"] = posterior.prior_concentration
    return table[list(CLASS_METRIC_COLUMNS)]


def f1_better_probabilities(a: ClassificationPosterior, b: ClassificationPosterior) -> dict[str, float]:
    """P(F1 of A > F1 of B) per class and for macro-F1 (:data:`MACRO_LABEL`), from independent
    posterior draws (draw i of A against draw i of B). Ties have probability zero (continuous draws),
    so P(A > B) + P(B > A) = 1."""
    if a.confusion.classes != b.confusion.classes:
        raise ValueError(
            f"the two posteriors have other classes: {list(a.confusion.classes)} and {list(b.confusion.classes)}"
        )
    if len(a.macro_f1) != len(b.macro_f1):
        raise ValueError(f"the two posteriors have {len(a.macro_f1)} and {len(b.macro_f1)} draws")
    better = (np.column_stack([a.f1, a.macro_f1]) > np.column_stack([b.f1, b.macro_f1])).mean(axis=0)
    return dict(zip([*a.confusion.classes, MACRO_LABEL], better.tolist()))
