"""WAIC and PSIS-LOO rankings of the stored candidate GLMs of every partition and suite.

Kept apart from :mod:`evalpipeline.steps.fits`: the GLM fits' code versions hash that module, so a
change to how stored fits are ranked would otherwise mark every fit stale and refit it.

Layout::

    <lake>/waic_rankings/rankings.parquet, plots/suite=<key>.png
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa

from evalpipeline.steps.fits import no_stored_fit_reason
from evalpipeline.steps.fits import FIT_FILES, PARTITION_TABLE, SUITE_TABLE, read_outcome
from evalpipeline.lake.keys import from_partition_key, to_partition_key
from evalpipeline.lake import Lake, write_parquet_atomic


def _ranking_columns() -> dict[str, str]:
    from evalpipeline.models.compare import COMPARE_COLUMNS

    compared = {("glm" if k == "model" else k): v for k, v in COMPARE_COLUMNS.items()}
    return {
        "scope": "partition (one model x suite) or suite (all models on the suite, multi-LLM GLMs)",
        "model": "evaluated model ((all) for suite scope)",
        "suite": "suite",
        **compared,
        "excluded": "why a candidate is not ranked (failed diagnostics; not applicable, with the reason: the wrong "
        "number of LLMs, or data that cannot identify it; disabled; no stored fit); empty when ranked",
        "inputs_hash": "hash of the partition's or suite's stored fit records, the Pareto-k threshold and the "
        "ranking code, and which fit files each candidate's folder holds; a rerun reuses the rows "
        "when it is unchanged",
    }


#: Part of every group's inputs hash (with the ranking code's version): bump it to force a recompute.
RANKING_VERSION = "1"


RANKING_COLUMNS = _ranking_columns()
_WHOLE_NUMBERS = ["waic_rank", "loo_rank", "n_pareto_k_high", "n_units"]
_FLAGS = ["waic_warning", "loo_warning"]


def _fit_groups(lake: Lake) -> list[tuple[str, str, str, Path]]:
    groups = []
    for model_dir in sorted((lake.root / PARTITION_TABLE).glob("model=*")):
        for suite_dir in sorted(model_dir.glob("suite=*")):
            groups.append(
                ("partition", from_partition_key(model_dir.name[6:]), from_partition_key(suite_dir.name[6:]), suite_dir)
            )
    for suite_dir in sorted((lake.root / SUITE_TABLE).glob("suite=*")):
        groups.append(("suite", "(all)", from_partition_key(suite_dir.name[6:]), suite_dir))
    return groups


def waic_rankings(lake: Lake, *, pareto_k_threshold: float = 0.7, previous: pd.DataFrame | None = None) -> pd.DataFrame:
    """WAIC and PSIS-LOO rankings of the candidate GLMs of every partition and every suite.

    Only fits that passed their diagnostics are compared; the others appear
    with ``excluded`` saying why, so a failing fit is reported, never used.
    So does a candidate's folder that holds no complete fit (a fit killed
    before it finished, files deleted since).
    LOO rows count the units whose Pareto-k exceeds ``pareto_k_threshold``
    (``[glm.thresholds] max_pareto_k``).

    ``previous``: the table an earlier run wrote. A partition's or suite's rows
    are a function of its stored fits (each identified by its provenance
    record) and the threshold, so a group whose ``inputs_hash`` is unchanged
    is copied from it rather than recomputed from the posteriors.
    ``frame.attrs`` records ``groups_computed`` and ``groups_reused``.
    """
    from evalpipeline.models import compare_fits
    from evalpipeline.models.compare import single_fit_criteria
    from evalpipeline.models.fit import gating_failures

    stored: dict[tuple, list[dict]] = {}
    if previous is not None and "inputs_hash" in previous.columns:
        for record in previous[list(RANKING_COLUMNS)].to_dict("records"):
            stored.setdefault((record["scope"], record["model"], record["suite"], record["inputs_hash"]), []).append(
                record
            )
    from evalpipeline.lake.versions import code_version

    code = code_version(
        [
            "evalpipeline.models.compare",
            "evalpipeline.steps.fits",
            "evalpipeline.steps.fits",
            "evalpipeline.steps.rankings",
        ]
    )
    rows, computed, reused = [], 0, 0
    for scope, model, suite, folder in _fit_groups(lake):
        glm_dirs = sorted(p for p in folder.iterdir() if p.is_dir())
        inputs_hash = _group_hash(glm_dirs, pareto_k_threshold, code)
        if (scope, model, suite, inputs_hash) in stored:
            rows += stored[(scope, model, suite, inputs_hash)]
            reused += 1
            continue
        computed += 1
        group, usable = [], {}
        for glm_dir in glm_dirs:
            outcome = read_outcome(glm_dir)
            if outcome is None:  # listed, not dropped: its materialisation failed or is under way
                group.append(
                    {
                        "scope": scope,
                        "model": model,
                        "suite": suite,
                        "glm": glm_dir.name,
                        "excluded": no_stored_fit_reason(glm_dir),
                    }
                )
                continue
            base = {"scope": scope, "model": model, "suite": suite, "glm": outcome.glm}
            if outcome.status == "not applicable":
                group.append({**base, "excluded": f"not applicable: {outcome.reason}"})
            elif not outcome.passed:
                failed = gating_failures(outcome.diagnostics)
                group.append({**base, "excluded": f"failed diagnostics: {', '.join(failed)}"})
            else:
                usable[outcome.glm] = _stored_criteria(glm_dir)
        if len(usable) >= 2:
            table = compare_fits(usable, pareto_k_threshold=pareto_k_threshold)
        else:
            table = pd.concat(
                [single_fit_criteria(name, c, pareto_k_threshold=pareto_k_threshold) for name, c in usable.items()]
                or [pd.DataFrame()],
                ignore_index=True,
            )
        for record in table.to_dict("records"):
            glm = record.pop("model")
            group.append({"scope": scope, "model": model, "suite": suite, "glm": glm, **record, "excluded": ""})
        rows += [{**row, "inputs_hash": inputs_hash} for row in group]
    frame = pd.DataFrame(rows, columns=list(RANKING_COLUMNS))
    # Excluded candidates have no ranks or counts: nullable types keep whole numbers int64 and flags
    # bool in the file (NaN would make them double), also for rows copied from an older file.
    frame = frame.astype({**dict.fromkeys(_WHOLE_NUMBERS, "Int64"), **dict.fromkeys(_FLAGS, "boolean")})
    frame.attrs.update(groups_computed=computed, groups_reused=reused)
    return frame


def _group_hash(glm_dirs: list[Path], pareto_k_threshold: float, code: str) -> str:
    digest = hashlib.sha256(f"{RANKING_VERSION}|{code}|{pareto_k_threshold!r}".encode())
    for glm_dir in glm_dirs:
        record = glm_dir / "provenance.json"  # written last by a fit: it identifies the stored fit
        digest.update(glm_dir.name.encode() + b"\0" + (record.read_bytes() if record.exists() else b"-") + b"\0")
        # a fit file deleted since leaves the record: the candidate's rows must change with it
        digest.update(bytes((glm_dir / name).exists() for name in FIT_FILES))
    return digest.hexdigest()[:32]


def _stored_criteria(glm_dir: Path):
    """A stored fit's WAIC / PSIS-LOO terms: its ``criteria.parquet``, else (a fit written before
    they were stored) computed from its posterior."""
    from evalpipeline.models import read_fit
    from evalpipeline.models.compare import pointwise_criteria
    from evalpipeline.models.fit import read_criteria

    stored = read_criteria(glm_dir)
    if stored is not None:
        return stored
    idata = read_fit(glm_dir).idata
    if "log_likelihood" not in idata.groups():
        raise ValueError(
            f"{glm_dir}: criteria.parquet is missing and posterior.nc holds no log-likelihood "
            "to compute it from; delete its provenance.json and materialise the fit again to refit it"
        )
    return pointwise_criteria(idata)


def write_waic_rankings(lake: Lake, *, pareto_k_threshold: float = 0.7) -> tuple[pd.DataFrame, Path]:
    """Write the rankings table and one WAIC plot per suite (HiBayES Figure 8 layout) of the
    suite-level candidates, at ``waic_rankings/plots/suite=<key>.png``."""
    path = lake.root / "waic_rankings" / "rankings.parquet"
    try:
        previous = pd.read_parquet(path) if path.exists() else None
    except (OSError, ValueError, pa.ArrowException):  # unreadable: recompute everything
        previous = None
    table = waic_rankings(lake, pareto_k_threshold=pareto_k_threshold, previous=previous)
    stored = table.copy(deep=False)
    stored.attrs = {}  # pyarrow would store the run statistics in the file
    write_parquet_atomic(pa.Table.from_pandas(stored, preserve_index=False), path)
    write_waic_plots(lake, table)
    return table, path


def waic_plot_path(lake: Lake, suite: str) -> Path:
    return lake.root / "waic_rankings" / "plots" / f"suite={to_partition_key(suite)}.png"


def write_waic_plots(lake: Lake, table: pd.DataFrame) -> list[Path]:
    """A plot for each suite with at least two ranked suite-level GLMs; stale plots are removed."""
    from evalpipeline.plots import save_png, waic_comparison_plot

    ranked = table[(table["scope"] == "suite") & (table["excluded"] == "")]
    written = []
    for suite, rows in ranked.groupby("suite", sort=True):
        if len(rows) < 2:
            continue
        frame = (
            rows.drop(columns=["model"])
            .rename(columns={"glm": "model", "waic_se": "se", "waic_dse": "dse"})[
                ["model", "elpd_waic", "se", "d_waic", "dse"]
            ]
            .reset_index(drop=True)
        )
        path = waic_plot_path(lake, suite)
        save_png(waic_comparison_plot(frame, title=f"{suite}: suite GLMs by WAIC"), path)
        written.append(path)
    folder = lake.root / "waic_rankings" / "plots"
    for stale in (set(folder.glob("suite=*.png")) if folder.exists() else set()) - set(written):
        stale.unlink()
    return written
