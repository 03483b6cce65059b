"""Per-class precision, recall and F1 of every model on a suite, with uncertainty: the tables the
``suite_comparison`` asset writes beside its leaderboard when the suite's attempts carry labels
(the ``answer`` and ``target`` columns). No Dagster here.

Layout written (``<key>`` is :func:`evalpipeline.lake.keys.to_partition_key` of the suite)::

    <lake>/suite_comparison/suite=<key>/classification.parquet           CLASSIFICATION_COLUMNS
    <lake>/suite_comparison/suite=<key>/classification_pairwise.parquet  CLASSIFICATION_PAIRWISE_COLUMNS

Sources and choices:

* Attempts: those a suite comparison counts (a score, no error, no limit) that
  have both an answer and a target. Counted attempts without one are not
  classified; ``n_unlabelled`` says how many per model, and a model with no
  labelled attempt has a macro row with n = 0 and no metrics.
* Classes: the suite's distinct targets (every model's), so that all models
  are scored over one label set. An answer that is no target is predicted
  ``(other)``: an error for its true class (a false negative), never dropped.
  ``(other)`` is a column of the confusion matrix only (no attempt has it as
  its target), present for every model when any model of the suite gives such
  an answer, so that all models share one outcome space.
* Labels are compared as text, exactly: a scorer that reads ``42.0`` as ``42``
  marks the attempt correct while the labels differ, so ``n_correct`` may
  differ from the leaderboard's ``k``.
* Not computed (nothing written, earlier files removed) when no counted attempt
  is labelled, when the suite has more than :data:`MAX_CLASSES` targets, or
  when no two items share a target: such targets are free-text references
  (sums, summaries), not class labels, and a confusion matrix over them says
  nothing.
* Per model: the Dirichlet posterior over the confusion matrix's cells
  (the position paper (Bowyer et al.) Section 3.5, Eq. 9 generalised to K classes,
  Dirichlet(1, ..., 1) prior), one-vs-rest precision, recall and F1 per class
  and their macro averages (unweighted over the target classes), each with its
  posterior mean and equal-tailed credible interval; beside them the plug-in F1
  and its delta-method CLT interval (Appendix A.5). See
  :mod:`evalpipeline.stats.confusion`. The prior is a symmetric Dirichlet worth
  four attempts in all, as Eq. 9's Dirichlet(1, 1, 1, 1) is for two classes,
  spread evenly over the K x K cells (K x (K + 1) with ``(other)``): one
  pseudo-attempt a cell would weigh K (K + 1) attempts and pull F1 towards
  chance as K grows (ten classes, 300 attempts: posterior macro-F1 0.56
  against 0.73 plug-in). ``prior_concentration`` sets the per-cell value.
* Pairwise: P(F1 of A > F1 of B) per class and for macro-F1, from independent
  posterior draws; each model draws from its own seeded stream (named by the
  model, as ``stats.compare`` names its streams), so its draws do not depend on
  which other models the suite has. A is the model of the higher posterior
  mean macro-F1 (ties: alphabetical).
* Cost: each model's draws are kept for the pairwise table, draws x (classes + 1)
  floats a model (10,000 x 5 for four classes: 0.4 MB); 100 models of 300
  attempts take ~2-3 s on four classes and ~7 s on ten (mostly the Dirichlet
  draws, K x (K + 1) cells each). Every run recomputes every model: unlike
  ``pairwise.parquet``, nothing is reused from the previous table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from evalpipeline.steps.comparison import _counted, suite_comparison_dir
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.stats.confusion import (
    CLASS_METRIC_COLUMNS,
    MACRO_LABEL,
    OTHER_LABEL,
    PRIOR_WEIGHT,
    classification_posterior,
    classification_table,
    label_confusion,
)

#: The sample columns that hold the labels: read with the comparison's columns where the tables have them.
LABEL_COLUMNS = ("answer", "target")
CLASSIFICATION_FILE = "classification.parquet"
CLASSIFICATION_PAIRWISE_FILE = "classification_pairwise.parquet"
#: Most distinct targets a suite's labels may have to be classes (a multiple-choice or labelling task): more
#: are free text, or so many classes that the uniform prior over K x (K + 1) cells outweighs a suite's
#: attempts, and the draws (K x (K + 1) cells each) cost seconds a model.
MAX_CLASSES = 10
#: Posterior draws per model (the Monte Carlo error of an interval end or a probability is ~0.005 or less).
CLASSIFICATION_DRAWS = 10_000

CLASSIFICATION_COLUMNS = {
    "model": "model display name",
    **CLASS_METRIC_COLUMNS,
    "n_unlabelled": "the model's counted attempts not classified: no answer or no target (the same on each of its rows)",
}

CLASSIFICATION_PAIRWISE_COLUMNS = {
    "model_a": "model A: the higher posterior mean macro-F1 of the two (ties: alphabetical)",
    "model_b": "model B",
    "class": f"a target label, or {MACRO_LABEL} for macro-F1",
    "p_a_better_f1": "posterior P(F1 of A > F1 of B) from independent Dirichlet posterior draws",
}

_PAIRWISE_SCHEMA = pa.schema(
    [("model_a", pa.string()), ("model_b", pa.string()), ("class", pa.string()), ("p_a_better_f1", pa.float64())]
)


@dataclass
class SuiteClassification:
    """What :func:`write_suite_classification` computed (and wrote, unless ``not_computed`` says why not)."""

    per_class: pd.DataFrame
    pairwise: pd.DataFrame
    classes: tuple[str, ...]
    not_computed: str | None = None
    paths: tuple[Path, ...] = ()


def suite_classification_tables(
    samples: pd.DataFrame,
    *,
    level: float = 0.95,
    n_draws: int = CLASSIFICATION_DRAWS,
    seed: int = 0,
    prior_concentration: float | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per_class, pairwise)`` of one suite's samples (columns :data:`CLASSIFICATION_COLUMNS` and
    :data:`CLASSIFICATION_PAIRWISE_COLUMNS`); both empty when the labels are not classified (see the
    module docstring)."""
    result = suite_classification(
        samples, level=level, n_draws=n_draws, seed=seed, prior_concentration=prior_concentration
    )
    return result.per_class, result.pairwise


def suite_classification(
    samples: pd.DataFrame,
    *,
    level: float = 0.95,
    n_draws: int = CLASSIFICATION_DRAWS,
    seed: int = 0,
    prior_concentration: float | None = None,
) -> SuiteClassification:
    """:func:`suite_classification_tables` with the classes, and why nothing was computed if so.

    ``samples``: every model's sample rows on the suite (``model``, ``score`` and, to be classified,
    ``answer``, ``target`` and ``item_id``; ``error`` and ``limit`` where present), as
    :func:`evalpipeline.steps.comparison.read_suite_samples` reads them.
    """
    missing = {"model", "score"} - set(samples.columns)
    if missing:
        raise ValueError(f"the suite's samples lack column(s) {sorted(missing)}")
    if not set(LABEL_COLUMNS) <= set(samples.columns):  # tables written before the readers kept labels
        samples = samples.assign(**{c: None for c in LABEL_COLUMNS})
    counted = _counted(samples)
    labelled = counted & samples["answer"].notna() & samples["target"].notna()
    unlabelled = samples.loc[counted & ~labelled, "model"].astype(str).value_counts()
    rows = samples.loc[labelled, ["model", *LABEL_COLUMNS]].astype(str)
    classes, reason = _classes(rows, samples.loc[labelled, "item_id"] if "item_id" in samples.columns else None)
    if reason is not None:
        return SuiteClassification(_empty(CLASSIFICATION_COLUMNS), _empty(CLASSIFICATION_PAIRWISE_COLUMNS), (), reason)

    other = not rows["answer"].isin(classes).all()  # one outcome space for every model
    if prior_concentration is None:  # a prior worth PRIOR_WEIGHT attempts, spread over the cells
        prior_concentration = PRIOR_WEIGHT / (len(classes) * (len(classes) + int(other)))
    tables, f1_draws, macro_means = [], {}, {}
    for model, mine in rows.groupby("model", sort=True):
        confusion = label_confusion(mine["answer"], mine["target"], classes, other_column=other)
        posterior = classification_posterior(
            confusion, prior_concentration=prior_concentration, n_draws=n_draws, seed=_model_stream(seed, model)
        )
        table = classification_table(posterior, level)
        table.insert(0, "model", model)
        table["n_unlabelled"] = int(unlabelled.get(model, 0))
        tables.append(table)
        # labels x draws, the draws contiguous: comparing one model with all later ones is then ~10x faster
        f1_draws[model] = np.ascontiguousarray(np.column_stack([posterior.f1, posterior.macro_f1]).T)
        macro_means[model] = float(posterior.macro_f1.mean())
    for model in sorted(set(unlabelled.index) - set(f1_draws)):  # listed, not left out: it has no labelled attempt
        tables.append(
            pd.DataFrame(
                [
                    {
                        "model": model,
                        "class": MACRO_LABEL,
                        "n": 0,
                        "n_predicted": 0,
                        "n_correct": 0,
                        "level": float(level),
                        "prior_concentration": float(prior_concentration),
                        "n_unlabelled": int(unlabelled[model]),
                    }
                ]
            )
        )
    per_class = pd.concat(tables, ignore_index=True).sort_values("model", kind="stable", ignore_index=True)
    per_class = per_class[list(CLASSIFICATION_COLUMNS)]

    order = sorted(f1_draws, key=lambda m: (-macro_means[m], m))  # A before B in every pair
    stacked = np.stack([f1_draws[m] for m in order])
    # P(A > B) for every later B at once; continuous draws: ties have probability zero
    better = [np.count_nonzero(stacked[i] > stacked[i + 1 :], axis=2) / n_draws for i in range(len(order) - 1)]
    first, second = np.triu_indices(len(order), 1)  # the pairs in the order of `better`
    labels = [*classes, MACRO_LABEL]
    names = np.array(order, dtype=object)
    pairwise = pd.DataFrame(
        {
            "model_a": np.repeat(names[first], len(labels)),
            "model_b": np.repeat(names[second], len(labels)),
            "class": np.tile(np.array(labels, dtype=object), len(first)),
            "p_a_better_f1": np.concatenate(better).ravel() if better else np.empty(0),
        },
        columns=list(CLASSIFICATION_PAIRWISE_COLUMNS),
    )
    return SuiteClassification(per_class, pairwise, classes)


def write_suite_classification(
    lake: Lake,
    suite: str,
    samples: pd.DataFrame,
    directory: Path | None = None,
    *,
    level: float = 0.95,
    n_draws: int = CLASSIFICATION_DRAWS,
    seed: int = 0,
    prior_concentration: float | None = None,
) -> SuiteClassification:
    """Write :data:`CLASSIFICATION_FILE` and :data:`CLASSIFICATION_PAIRWISE_FILE` of ``suite`` into
    ``directory`` (default: the suite comparison's folder), atomically; when nothing is classified,
    write nothing and remove the files of an earlier run, so that the folder shows only current results."""
    directory = Path(directory) if directory is not None else suite_comparison_dir(lake, suite)
    result = suite_classification(
        samples, level=level, n_draws=n_draws, seed=seed, prior_concentration=prior_concentration
    )
    paths = (directory / CLASSIFICATION_FILE, directory / CLASSIFICATION_PAIRWISE_FILE)
    if result.not_computed is not None:
        for path in paths:
            path.unlink(missing_ok=True)
        return result
    write_parquet_atomic(pa.Table.from_pandas(result.per_class, preserve_index=False), paths[0])
    write_parquet_atomic(pa.Table.from_pandas(result.pairwise, schema=_PAIRWISE_SCHEMA, preserve_index=False), paths[1])
    result.paths = paths
    return result


def _classes(rows: pd.DataFrame, items: pd.Series | None) -> tuple[tuple[str, ...], str | None]:
    """The suite's target labels, sorted, or why its labels are not classes."""
    if rows.empty:
        return (), "no counted attempt has both an answer and a target"
    classes = tuple(sorted(rows["target"].unique()))
    if len(classes) > MAX_CLASSES:
        return (), (
            f"{len(classes)} distinct targets, more than {MAX_CLASSES}: free-text references, or more "
            "classes than the uniform prior over their cells leaves room for"
        )
    if items is not None and len(classes) > 1 and items.groupby(rows["target"].to_numpy()).nunique().max() < 2:
        return (), "no two items share a target: free-text references, not class labels"
    reserved = sorted({OTHER_LABEL, MACRO_LABEL} & set(classes))
    if reserved:
        return (), f"a target is {reserved[0]!r}, which names answers outside the targets or the macro average"
    return classes, None


def _model_stream(seed: int, model: str) -> np.random.SeedSequence:
    """The model's own random stream under ``seed``: ``SeedSequence(seed, spawn_key=digest(model))``,
    as ``stats.compare.posterior_draws`` names its streams."""
    key = hashlib.blake2b(model.encode(), digest_size=16).digest()
    return np.random.SeedSequence(
        int(seed), spawn_key=tuple(int.from_bytes(key[i : i + 4], "little") for i in range(0, 16, 4))
    )


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=object) for name in columns})
