"""The lake-wide HTML report (asset ``report``): reads what the comparison assets wrote.

Writes ``<lake>/report/index.html`` with :func:`evalpipeline.report.html.render_report`,
in the order a reader wants it, and usable at leaderboard scale (100 models):

* above the contents: how many suites and models, each suite's leader with its
  interval, P(best) and P(better than the runner-up), how to read the numbers
  (collapsed) and warnings about the configuration;
* per suite (from ``suite_comparison/suite=<key>/``): the leaderboard, compact
  enough for the page's width (rank, model, mean, HPDI, P(best), rank
  interval, items, n_effective, P(above a threshold), P(the model ranked just
  above is better)), and the verdicts that decide the ranking in a few
  sentences; then, each behind a line that opens it (``<details>``): the
  verdicts in words of each model against the next, every pair's verdict in
  words and in a table (up to :data:`ALL_PAIRS_UP_TO` pairs; above it, the
  pairs that decide the ranking, saying so), the leaderboard / pairwise / GLM
  forest plots, every leaderboard column (CLT and independent-attempts
  intervals, ...), the suite GLM's per-model effects, each model's HIP-LLM
  envelopes on the suite (``reliability/``), the WAIC and LOO rankings of
  the suite's GLMs (``waic_rankings/rankings.parquet``, with its plot) and
  every fit that was excluded or failed;
* the models (from ``model_profile/model=<key>/``), alphabetical, one closed
  line each with the pooled success rate: the profile table, the forest plot
  across suites and, where computed, the reliability under the operational
  profile (``model_reliability/``: E[R(n)], median and 5-95% quantile
  envelopes, P(R(n) >= r), CDF and E[R(n)] plots);
* ingest accounting when its table exists (``ingest_accounting/accounting.parquet``).

Images are referenced by paths relative to the report, so the lake folder
can be moved or opened offline. Output depends only on the lake's files and
``generated_at`` (passed in), so equal inputs give equal bytes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from evalpipeline.steps.comparison import MODEL_PROFILE_TABLE, SUITE_COMPARISON_TABLE, ranking_pairs
from evalpipeline.lake.keys import from_partition_key
from evalpipeline.lake import Lake, SummaryCache
from evalpipeline.report.html import (
    Details,
    Image,
    Paragraph,
    Section,
    Table,
    relative_src,
    render_report,
    write_report,
)
from evalpipeline.lake.versions import code_version

REPORT_PATH = Path("report") / "index.html"
#: The reliability rows of every partition and model, kept between runs (:class:`SummaryCache`): a 600-partition
#: lake has ~2,000 reliability tables, and only the few of the new or changed partitions need reading again.
RELIABILITY_CACHE = Path("report") / "reliability_summaries.json"

#: Leaderboard columns shown in the report (the Parquet file has them all).
LEADERBOARD_SHOWN = (
    "rank",
    "model",
    "posterior_mean",
    "hpdi_low",
    "hpdi_high",
    "independent_hpdi_low",
    "independent_hpdi_high",
    "clt_low",
    "clt_high",
    "p_best",
    "expected_rank",
    "rank_low",
    "rank_high",
    "n",
    "n_items",
    "n_effective",
)
JUDGE_SHOWN = (
    "model",
    "judge",
    "posterior_mean",
    "hpdi_low",
    "hpdi_high",
    "judge_mean",
    "judge_low",
    "judge_high",
    "judge_note",
)
PROFILE_SHOWN = (
    "scope",
    "suite",
    "posterior_mean",
    "hpdi_low",
    "hpdi_high",
    "clt_low",
    "clt_high",
    "rank",
    "n_models",
    "p_best",
    "n",
    "n_effective",
    "glm",
    "glm_mean",
    "glm_hpdi_low",
    "glm_hpdi_high",
)
RANKINGS_SHOWN = (
    "scope",
    "model",
    "glm",
    "waic_rank",
    "elpd_waic",
    "waic_se",
    "d_waic",
    "waic_dse",
    "waic_weight",
    "p_waic",
    "loo_rank",
    "elpd_loo",
    "n_pareto_k_high",
    "loo_warning",
)

READING_GUIDE = (
    "How to read this page. Every success rate comes with its posterior mean and 95% highest posterior density "
    "interval (HPDI) under the stated Beta prior. The unit of evidence is the question with its repeats, or the "
    "declared cluster of questions: repeats of one question are not independent evidence, so n_effective says how "
    "many independent attempts the data were worth. The independent-attempts and CLT intervals, which count "
    "every attempt as independent, are shown beside them for comparison. P(best) is the posterior "
    "probability that a model has the highest success rate on the suite. Pairwise verdicts use the paired model "
    "with item effects when both models answered the same items: too close to call below 60%, leaning 60-70%, "
    "likely 70-95%, confident 95-99%, near-certain from 99%. The HPDI rule of HiBayES Figure 3 is given beside: "
    "different (no overlap), equivalent (one interval inside the other) or inconclusive."
)


def _partition_dirs(root: Path, prefix: str) -> list[tuple[str, Path]]:
    found = [(from_partition_key(p.name.split("=", 1)[1]), p) for p in root.glob(f"{prefix}=*") if p.is_dir()]
    return sorted(found)


def _image(path: Path, report_path: Path, alt: str, caption: str = "") -> list[Image]:
    return [Image(relative_src(path, report_path), alt, caption)] if path.exists() else []


def _shown(frame: pd.DataFrame, columns) -> pd.DataFrame:
    return frame[[c for c in columns if c in frame.columns]]


#: Up to this many pairs (25 models) a suite's section shows every pair in words and in its table; above it,
#: the pairs that decide the ranking (:func:`_pairs_shown`). At 109 models a suite has 5,886 pairs: in full,
#: the page was 22 MB of sentences nobody reads, and writing it took 10-16 s of every nightly run, with one
#: core idle. Every pair stays in the suite's pairwise.parquet, which the page names.
ALL_PAIRS_UP_TO = 300


def _pairs_shown(pairs: pd.DataFrame, board: pd.DataFrame, limit: int) -> tuple[pd.DataFrame, str | None]:
    """The pairs a suite's section shows (above ``limit``, :func:`~evalpipeline.steps.comparison.ranking_pairs`),
    and a sentence saying which when that is not all of them."""
    if len(pairs) <= limit:
        return pairs, None
    shown = ranking_pairs(pairs, board)

    def count(n: int) -> str:
        return f"{n:,} pair" + ("" if n == 1 else "s")

    note = (
        f"This suite has {count(len(pairs))} of models. Shown here: going down the leaderboard, each model "
        f"against the leader and against the model ranked just above it ({count(len(shown))}). "
        "Every pair is in the suite's pairwise.parquet, and in the plot below."
    )
    return shown, note


def _pair_sentences(pairs: pd.DataFrame) -> list[Paragraph]:
    paragraphs = []
    for row in pairs.itertuples(index=False):
        source = "paired model with item effects" if row.verdict_source == "paired" else "independent posteriors"
        extra = [f"{source}", f"HPDI rule: {row.hpdi_verdict}"]
        if pd.notna(row.p_a_better_probit):
            extra.append(f"bivariate probit P = {row.p_a_better_probit:.3f}")
        if "p_a_better_glm" in pairs.columns and pd.notna(row.p_a_better_glm):
            extra.append(f"{row.glm} P = {row.p_a_better_glm:.3f}")
        t_tests = [
            f"{name} p = {value:.3g}"
            for name, value in (("Welch t-test", row.t_unpaired_p), ("paired t-test", row.t_paired_p))
            if pd.notna(value)
        ]
        if t_tests:
            extra.append("conventional: " + ", ".join(t_tests))
        paragraphs.append(Paragraph(f"{row.verdict}. [{'; '.join(extra)}]"))
    return paragraphs


def _count(n: float, noun: str) -> str:
    n = int(round(n))
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def design_sentence(board: pd.DataFrame) -> str | None:
    """What the suite's design did to its intervals, in words (None when every attempt was independent)."""
    if "design_effect" not in board.columns:
        return None
    rows = board[board["design_effect"] > 1]
    if rows.empty:
        return None
    row = rows.loc[rows["n"].idxmax()]  # the most attempted model speaks for the design
    unit = row["unit"]
    if unit == "cluster":
        what = f"{_count(row['n'], 'attempt')} in {_count(row['n_units'], 'cluster')}"
    else:
        repeats = row["n"] / max(row["n_units"], 1)
        what = (
            f"{repeats:.3g} repeats of {_count(row['n_units'], 'question')}"
            if float(repeats).is_integer()
            else f"{_count(row['n'], 'attempt')} on {_count(row['n_units'], 'question')}"
        )
    others = (
        ""
        if len(rows) == 1
        else (
            f" (design effects of the {len(rows)} models with repeats: "
            f"{rows['design_effect'].min():.2f} to {rows['design_effect'].max():.2f})"
        )
    )
    return (
        f"For {row['model']}, {what} carried the information of about "
        f"{_count(row['n_effective'], 'independent question' if unit != 'cluster' else 'independent attempt')}: "
        f"the headline intervals are as wide as that warrants{others}. Counting every attempt as independent "
        "would make them narrower than the evidence supports (the independent_hpdi columns)."
    )


def subset_sentences(board: pd.DataFrame) -> list[str]:
    """A warning for each model counted on only part of the suite's items (``subset_flag``)."""
    if "subset_flag" not in board.columns:
        return []
    return [
        f"Not comparable by raw success rate: {row.model} was {row.subset_flag}."
        for row in board[board["subset_flag"].notna()].itertuples(index=False)
    ]


def _interval(low, high, digits: int = 3) -> str | None:
    """``low–high`` in one cell (None when either end is missing)."""
    if pd.isna(low) or pd.isna(high):
        return None
    return f"{float(low):.{digits}f}–{float(high):.{digits}f}"


def _rank_range(low, high) -> str | None:
    if pd.isna(low) or pd.isna(high):
        return None
    return f"{int(low)}" if int(low) == int(high) else f"{int(low)}–{int(high)}"


def _ranked(board: pd.DataFrame) -> pd.DataFrame:
    return board.sort_values("rank", kind="stable") if "rank" in board.columns else board


def _pair_lookup(pairs: pd.DataFrame | None) -> dict[frozenset, tuple[str, float, str]]:
    """Each pair of models -> (model_a, headline P(A better), verdict band)."""
    if pairs is None or not len(pairs):
        return {}
    column = "p_a_better" if "p_a_better" in pairs.columns else "p_a_better_independent"
    bands = pairs["verdict_band"] if "verdict_band" in pairs.columns else pd.Series([None] * len(pairs))
    return {
        frozenset((a, b)): (a, float(p), band)
        for a, b, p, band in zip(pairs["model_a"], pairs["model_b"], pairs[column], bands)
    }


def _p_better(lookup: dict, first: str, second: str) -> tuple[float, str] | None:
    """P(``first`` better than ``second``) and the pair's verdict band, if the pair was compared."""
    found = lookup.get(frozenset((first, second)))
    if found is None or pd.isna(found[1]):
        return None
    a, p, band = found
    return (p if a == first else 1.0 - p), band


def compact_leaderboard(board: pd.DataFrame, pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The leaderboard as the page shows it first: rank, model, posterior mean, its HPDI as one
    ``low–high`` cell, P(best), the 95% rank interval, items, effective sample size, the
    ``p_above_<t>`` columns, and P(the model ranked just above is better) with its verdict band.
    Narrow enough for the page's width; every column of the table is in the "all columns" table."""
    board = _ranked(board)
    mass = board["hpdi_mass"].iloc[0] if "hpdi_mass" in board.columns and len(board) else 0.95
    columns: dict[str, list] = {}
    if "rank" in board.columns:
        columns["rank"] = board["rank"].astype("Int64")
    columns["model"] = board["model"].astype(str)
    columns["mean"] = board["posterior_mean"].astype(float).round(3)
    columns[f"{mass:.0%} HPDI"] = [_interval(lo, hi) for lo, hi in zip(board["hpdi_low"], board["hpdi_high"])]
    if "p_best" in board.columns:
        columns["P(best)"] = board["p_best"].astype(float).round(3)
    if {"rank_low", "rank_high"} <= set(board.columns):
        columns["rank 95%"] = [_rank_range(lo, hi) for lo, hi in zip(board["rank_low"], board["rank_high"])]
    if "n_items" in board.columns:
        columns["items"] = board["n_items"].astype("Int64")
    if "n_effective" in board.columns:
        columns["n_eff"] = board["n_effective"].astype(float).round().astype("Int64")
    for column in (c for c in board.columns if c.startswith("p_above_")):
        columns[f"P(>{column.removeprefix('p_above_')})"] = board[column].astype(float).round(3)
    lookup = _pair_lookup(pairs)
    if lookup:
        models = list(columns["model"])
        above = [None]
        for upper, lower in zip(models, models[1:]):
            found = _p_better(lookup, upper, lower)
            above.append(None if found is None else f"{found[0]:.2f} {found[1] or ''}".strip())
        columns["P(rank above better)"] = above
    return pd.DataFrame(
        {
            name: values.reset_index(drop=True) if isinstance(values, pd.Series) else values
            for name, values in columns.items()
        }
    )


def _band_counts(bands: list[str]) -> str:
    from evalpipeline.stats.verdicts import LADDER

    order = [band for _, band in LADDER][::-1]
    counts = [(band, bands.count(band)) for band in order if bands.count(band)]
    return ", ".join(f"{n} {band}" for band, n in counts)


def verdict_summary(board: pd.DataFrame, pairs: pd.DataFrame | None, most: int = 10) -> list[str]:
    """The verdicts that decide a suite's ranking, in a few sentences: whom the leader is
    confidently ahead of, and how many steps down the leaderboard are real."""
    board = _ranked(board)
    lookup = _pair_lookup(pairs)
    if len(board) < 2 or not lookup:
        return []
    models = list(board["model"].astype(str))
    leader = models[0]
    p_best = f" (P(best) = {board['p_best'].iloc[0]:.2f})" if "p_best" in board.columns else ""
    close = [m for m in models[1:] if (found := _p_better(lookup, leader, m)) is not None and found[0] < 0.95]
    if close:
        named = ", ".join(close[:most]) + (f" and {len(close) - most} more" if len(close) > most else "")
        lead = f"{leader} leads{p_best}; not confidently behind it (P(leader better) under 0.95): {named}."
    else:
        lead = f"{leader} leads{p_best}, confidently ahead of every other model (P(leader better) at least 0.95)."
    bands = [
        found[1]
        for upper, lower in zip(models, models[1:])
        if (found := _p_better(lookup, upper, lower)) is not None and found[1]
    ]
    steps = (
        (
            f"Down the leaderboard, each model against the one ranked just above it "
            f"({len(bands)} step{'s' if len(bands) != 1 else ''}): {_band_counts(bands)}."
        )
        if bands
        else None
    )
    return [text for text in (lead, steps) if text]


def _adjacent_pairs(pairs: pd.DataFrame, board: pd.DataFrame) -> pd.DataFrame:
    """The pairs of models ranked next to each other, in leaderboard order."""
    position = {model: i for i, model in enumerate(_ranked(board)["model"])}
    first, second = pairs["model_a"].map(position), pairs["model_b"].map(position)
    chosen = ((first - second).abs() == 1) & first.notna() & second.notna()
    order = np.argsort(np.fmin(first[chosen], second[chosen]).to_numpy(), kind="stable")
    return pairs[chosen].iloc[order]


def _suite_section(
    lake: Lake,
    suite: str,
    folder: Path,
    report_path: Path,
    rankings: pd.DataFrame | None,
    summaries: SummaryCache,
    all_pairs_up_to: int = ALL_PAIRS_UP_TO,
) -> Section:
    """A suite's leaderboard (compact, to the page's width) and the verdicts that decide it first;
    then, each behind a one-line summary, the verdicts in words, every pair, the plots, every
    leaderboard column, the suite GLM, reliability and the statistical model fits."""
    blocks: list = []
    board_path = folder / "leaderboard.parquet"
    if not board_path.exists():
        return Section(
            f"Suite: {suite}", [Paragraph(f"No leaderboard for this suite yet ({board_path.name} is missing).")]
        )
    board = pd.read_parquet(board_path)
    pairs_path = folder / "pairwise.parquet"
    all_pairs = pd.read_parquet(pairs_path) if pairs_path.exists() else None
    prior = (board["prior_a"].iloc[0], board["prior_b"].iloc[0]) if len(board) else (float("nan"),) * 2
    mass = board["hpdi_mass"].iloc[0] if len(board) else float("nan")
    threshold_cols = [c for c in board.columns if c.startswith("p_above_")]
    blocks.append(
        Table(
            compact_leaderboard(board, all_pairs),
            wrap=("model",),
            decimals=3,
            caption=f"Leaderboard: {_count(len(board), 'model')}, Beta({prior[0]:g}, {prior[1]:g}) prior, "
            f"intervals at {mass:.0%}",
        )
    )
    blocks += [Paragraph(text) for text in verdict_summary(board, all_pairs)]
    blocks += [Paragraph(text) for text in (design_sentence(board), *subset_sentences(board)) if text]
    if "judge" in board.columns and (board["judge"].notna() | board["judge_note"].notna()).any():
        judged = board[board["judge"].notna() | board["judge_note"].notna()]
        blocks.append(
            Table(
                _shown(judged, JUDGE_SHOWN),
                caption="Success rates corrected for the LLM judge's sensitivity and specificity "
                "(its calibration's uncertainty included), beside the headline",
            )
        )
    if all_pairs is not None and len(all_pairs):
        adjacent = _adjacent_pairs(all_pairs, board)
        if len(adjacent):
            blocks.append(
                Details(
                    f"Verdicts in words: each model against the one ranked just above it "
                    f"({_count(len(adjacent), 'pair')})",
                    _pair_sentences(adjacent),
                    open=len(board) <= 10,
                )
            )
        pairs, which = _pairs_shown(all_pairs, board, all_pairs_up_to)
        title = (
            f"Every pair ({_count(len(pairs), 'pair')}): verdicts in words and the pairwise table"
            if which is None
            else f"The pairs that decide the ranking ({len(pairs):,} of {len(all_pairs):,}): verdicts in words "
            "and the pairwise table"
        )
        pair_blocks = [Paragraph(which)] if which else []
        pair_blocks += [Paragraph("Verdicts, pair by pair:"), *_pair_sentences(pairs)]
        pair_blocks.append(
            Table(
                _shown(
                    pairs,
                    (
                        "model_a",
                        "model_b",
                        "p_a_better_independent",
                        "p_a_better_paired",
                        "p_a_better_probit",
                        "diff_mean_paired",
                        "diff_low_paired",
                        "diff_high_paired",
                        "hpdi_verdict",
                        "verdict_band",
                        "t_unpaired_p",
                        "t_paired_p",
                    ),
                ),
                caption="Pairwise comparisons",
            )
        )
        blocks.append(Details(title, pair_blocks))
    elif all_pairs is not None:
        blocks.append(Paragraph("Only one model was evaluated on this suite: no pairwise comparison."))
    images = _image(
        folder / "plots" / "leaderboard.png",
        report_path,
        f"Leaderboard of {suite}",
        "Posterior mean and HPDI (blue) beside the observed mean and CLT interval (orange).",
    )
    if all_pairs is not None and len(all_pairs):
        images += _image(
            folder / "plots" / "pairwise.png",
            report_path,
            f"Pairwise P(A > B) on {suite}",
            "Headline P(row model better than column model).",
        )
    images += _image(
        folder / "plots" / "glm_forest.png",
        report_path,
        f"Suite GLM forest plot of {suite}",
        "Suite GLM per-model effects with the empirical mean ± SEM.",
    )
    if images:
        blocks.append(Details(f"Plots ({len(images)})", images))
    blocks.append(
        Details(
            "All leaderboard columns: CLT and independent-attempts intervals, expected rank, attempts",
            [
                Table(
                    _shown(board, LEADERBOARD_SHOWN + tuple(threshold_cols)),
                    caption=f"Leaderboard (Beta({prior[0]:g}, {prior[1]:g}) prior; intervals at {mass:.0%})",
                )
            ],
        )
    )
    glm_rows = board[board["glm"].notna()] if "glm" in board.columns else board.iloc[0:0]
    if len(glm_rows):
        glm = glm_rows["glm"].iloc[0]
        blocks.append(
            Details(
                f"Suite GLM {glm}: per-model effects",
                [
                    Table(
                        _shown(glm_rows, ("model", "glm", "glm_mean", "glm_hpdi_low", "glm_hpdi_high", "glm_p_best")),
                        caption=f"Per-model effects of the suite GLM {glm} (success-rate scale)",
                    )
                ],
            )
        )
    else:
        blocks.append(
            Paragraph("No suite GLM fit passed its diagnostics: the leaderboard uses conjugate Beta posteriors only.")
        )
    reliability = _suite_reliability_table(lake, folder.name.split("=", 1)[1], summaries)
    if reliability:
        blocks.append(Details("HIP-LLM reliability envelopes of the models on this suite", reliability))
    fit_blocks: list = []
    if rankings is not None:
        mine = rankings[rankings["suite"] == suite]
        ranked = mine[mine["excluded"].fillna("") == ""]
        if len(ranked):
            fit_blocks.append(
                Table(
                    _shown(ranked, RANKINGS_SHOWN),
                    caption="WAIC / LOO rankings of the candidate GLMs (elpd: higher is better; "
                    "d_waic and its dse: distance to the best)",
                )
            )
        excluded = mine[mine["excluded"].fillna("") != ""]
        if len(excluded):
            fit_blocks.append(
                Table(
                    _shown(excluded, ("scope", "model", "glm", "excluded")),
                    caption="Fits not ranked (excluded or failed)",
                )
            )
    suite_key = folder.name.split("=", 1)[1]
    fit_blocks += _image(
        lake.root / "waic_rankings" / "plots" / f"suite={suite_key}.png", report_path, f"WAIC comparison on {suite}"
    )
    fits_path = folder / "fits.parquet"
    if fits_path.exists():
        fits = pd.read_parquet(fits_path)
        unusable = fits[~fits["passed"].eq(True)]
        if len(unusable):
            fit_blocks.append(
                Table(
                    _shown(unusable, ("glm", "status", "passed", "failed", "reason")),
                    caption="Suite GLMs not used (failed diagnostics, not applicable or no stored fit)",
                )
            )
    if fit_blocks:
        blocks.append(Details(f"{suite}: statistical model fits (WAIC / LOO rankings, fits not used)", fit_blocks))
    return Section(f"Suite: {suite}", blocks)


def _profile_summary(profile: pd.DataFrame) -> str:
    """A model's one line: its pooled success rate with the interval, over how many suites."""
    pooled = profile[profile["scope"] == "pooled"] if "scope" in profile.columns else profile.iloc[0:0]
    n_suites = int((profile["scope"] == "suite").sum()) if "scope" in profile.columns else 0
    if not len(pooled):
        return _count(n_suites, "suite")
    row = pooled.iloc[0]
    interval = _interval(row["hpdi_low"], row["hpdi_high"])
    return (
        f"pooled {row['posterior_mean']:.3f}"
        + (f" ({interval})" if interval else "")
        + f" over {_count(n_suites, 'suite')}"
    )


def _model_section(model: str, folder: Path, report_path: Path) -> Section:
    path = folder / "profile.parquet"
    if not path.exists():
        return Section(
            f"Model: {model}", [Paragraph("No profile for this model yet.")], collapsed=True, summary="no profile yet"
        )
    profile = pd.read_parquet(path)
    blocks: list = [
        Table(
            _shown(profile, PROFILE_SHOWN),
            caption="One row per suite; 'pooled' pools every attempt, 'mean of suites' weighs suites equally",
        )
    ]
    blocks += _image(
        folder / "plots" / "forest.png",
        report_path,
        f"Forest plot of {model}",
        "Posterior mean and HPDI per suite and across suites, with the empirical mean ± SEM.",
    )
    return Section(f"Model: {model}", blocks, collapsed=True, summary=_profile_summary(profile))


def _top_level(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the highest level present: the LLM under its operational profile, else its domain."""
    for level in ("llm", "domain"):
        if (frame["level"] == level).any():
            return frame[frame["level"] == level]
    return frame.iloc[0:0]


def _reliability_summary(lake: Lake, folder: Path, summaries: SummaryCache) -> list[dict] | None:
    """One row per domain (or the LLM): E[R(n)] envelopes for each n, the median and 5-95% envelopes,
    and P(R(n) >= r) for the largest n -- from the reliability tables in ``folder``, read again only
    when they changed since ``summaries`` recorded their rows. None when a table is missing."""
    paths = {
        name: folder / f"{name}.parquet"
        for name in ("expected_reliability", "quantile_envelopes", "target_probability")
    }
    return summaries.get(
        folder.relative_to(lake.root).as_posix(), list(paths.values()), lambda: _reliability_rows(paths)
    )


def _reliability_rows(paths: dict[str, Path]) -> list[dict] | None:
    """:func:`_reliability_summary` read from the tables (JSON types)."""
    if not all(p.exists() for p in paths.values()):
        return None
    expected = _top_level(pd.read_parquet(paths["expected_reliability"]))
    quantiles = _top_level(pd.read_parquet(paths["quantile_envelopes"]))
    target = _top_level(pd.read_parquet(paths["target_probability"]))
    rows = []
    for domain, part in expected.groupby("domain", sort=True):
        row = {"level": part["level"].iloc[0], "domain": domain}
        q = quantiles[quantiles["domain"] == domain].set_index("quantile")
        for quantile, name in ((0.05, "q05"), (0.5, "median"), (0.95, "q95")):
            if quantile in q.index:
                row[f"{name}_lower"], row[f"{name}_upper"] = q.loc[quantile, "lower"], q.loc[quantile, "upper"]
        for r in part.itertuples():
            row[f"E[R({r.n})]"] = f"[{r.lower:.3f}, {r.upper:.3f}]"
        t = target[target["domain"] == domain]
        if len(t):
            last = t[t["n"] == t["n"].max()].iloc[0]
            row[f"P(R({last.n}) >= {last.r:g})"] = f"[{last.lower:.3f}, {last.upper:.3f}]"
        rows.append({k: float(v) if isinstance(v, np.floating) else v for k, v in row.items()})
    return rows


def _model_reliability_blocks(
    lake: Lake, model_key: str, model: str, report_path: Path, summaries: SummaryCache
) -> list:
    folder = lake.root / "model_reliability" / f"model={model_key}"
    rows = _reliability_summary(lake, folder, summaries)
    if rows is None:
        return []
    summary = pd.DataFrame(rows)
    blocks: list = [
        Paragraph(
            "Reliability (HIP-LLM): the probability of succeeding on the next n tasks drawn from the "
            "operational profile, R(n) = p^n, as [lower, upper] envelopes over the credal set of priors. "
            "A wide envelope means the data do not yet outweigh the choice of prior."
        ),
        Table(summary, caption=f"Reliability of {model} (envelopes over the credal set)"),
    ]
    for name, what in (
        ("cdf_envelopes", "CDF envelopes of the success probability"),
        ("expected_reliability", "E[R(n)] envelopes against n"),
    ):
        blocks += _image(folder / "plots" / f"{name}.png", report_path, f"{what} of {model}", what)
    return blocks


def _suite_reliability_table(lake: Lake, suite_key: str, summaries: SummaryCache) -> list:
    rows, found = [], False
    for model, folder in _partition_dirs(lake.root / "reliability", "model"):
        summary = _reliability_summary(lake, folder / f"suite={suite_key}", summaries)
        if summary is not None:
            found = True
            rows += [{**row, "model": model} for row in summary]
    if not found:
        return []
    table = pd.DataFrame(rows, columns=None if rows else ["model"])
    table = table[["model", *[c for c in table.columns if c != "model"]]]
    return [Table(table, caption="Reliability on this suite (HIP-LLM, the suite's subdomains pooled in its domain)")]


def _unused_judges(suites: list[tuple[str, Path]], judges) -> list[str]:
    """A warning for each configured judge whose scorer scored no model on any suite (a misspelt name?)."""
    if not judges:
        return []
    used: set[str] = set()
    for _suite, folder in suites:
        path = folder / "leaderboard.parquet"
        if path.exists():
            board = pd.read_parquet(path)
            if "judge" in board.columns:
                used |= {name.strip() for value in board["judge"].dropna() for name in str(value).split(",")}
    return [
        f"Configured judge [judge.{scorer}] corrected nothing: no suite has attempts scored by {scorer!r}. "
        "Check the scorer's name against the sample tables' scorer column."
        for scorer in judges
        if scorer not in used
    ]


def _glance(suites: list[tuple[str, Path]]) -> pd.DataFrame:
    """One row per suite: its leader with the interval and P(best), and how sure it is to lead the runner-up."""
    rows = []
    for suite, folder in suites:
        path = folder / "leaderboard.parquet"
        if not path.exists():
            continue
        board = _ranked(pd.read_parquet(path))
        if not len(board):
            continue
        top = board.iloc[0]
        row = {
            "suite": suite,
            "models": len(board),
            "leader": str(top["model"]),
            "mean": round(float(top["posterior_mean"]), 3),
            "HPDI": _interval(top["hpdi_low"], top["hpdi_high"]),
            "P(best)": round(float(top["p_best"]), 3) if "p_best" in board.columns else None,
            "P(leader better than runner-up)": None,
        }
        pairs_path = folder / "pairwise.parquet"
        if len(board) > 1 and pairs_path.exists():
            found = _p_better(_pair_lookup(pd.read_parquet(pairs_path)), str(top["model"]), str(board["model"].iloc[1]))
            if found is not None:
                row["P(leader better than runner-up)"] = f"{found[0]:.2f} {found[1] or ''}".strip()
        rows.append(row)
    return pd.DataFrame(rows)


def report_intro(suites: list[tuple[str, Path]], models: list[tuple[str, Path]], judges=()) -> list:
    """What the page holds, each suite's leader at a glance (collapsed above 5 suites), how to read the
    numbers (collapsed) and any warning about the configuration: the blocks above the contents."""
    blocks: list = [
        Paragraph(
            f"{_count(len(suites), 'suite')} and {_count(len(models), 'model')}. Each suite opens with its leaderboard "
            "and the verdicts that decide it; the verdicts in words, every pair, plots and every column follow, one "
            "click each. The models follow the suites, one line each."
        )
    ]
    glance = _glance(suites)
    if len(glance):
        blocks.append(
            Details(
                f"Each suite's leader ({_count(len(glance), 'suite')})",
                [Table(glance, wrap=("suite", "leader"), decimals=3)],
                open=len(glance) <= 5,
            )
        )
    blocks.append(Details("How to read this page", [Paragraph(READING_GUIDE)]))
    blocks += [Paragraph(text) for text in _unused_judges(suites, judges)]
    return blocks


def report_sections(
    lake: Lake, report_path: Path, summaries: SummaryCache | None = None, all_pairs_up_to: int = ALL_PAIRS_UP_TO
) -> list[Section]:
    """Every section of the report, in order: each suite, the models (collapsed, not in the contents),
    ingest accounting. What the page holds comes above them (:func:`report_intro`).

    ``summaries``: the reliability rows of an earlier report (:data:`RELIABILITY_CACHE`), to save.
    ``all_pairs_up_to``: a suite with more pairs shows those that decide its ranking (:func:`_pairs_shown`)."""
    summaries = summaries if summaries is not None else reliability_summaries(lake)
    rankings_path = lake.root / "waic_rankings" / "rankings.parquet"
    rankings = pd.read_parquet(rankings_path) if rankings_path.exists() else None
    suites = _partition_dirs(lake.root / SUITE_COMPARISON_TABLE, "suite")
    models = _partition_dirs(lake.root / MODEL_PROFILE_TABLE, "model")
    suite_sections = [
        _suite_section(lake, suite, folder, report_path, rankings, summaries, all_pairs_up_to)
        for suite, folder in suites
    ]
    sections = suite_sections or [Section("Suites", [Paragraph("No suite comparison has been computed yet.")])]
    model_sections = []
    for model, folder in models:
        section = _model_section(model, folder, report_path)
        reliability = _model_reliability_blocks(lake, folder.name.split("=", 1)[1], model, report_path, summaries)
        model_sections.append(replace(section, blocks=[*section.blocks, *reliability]))
    if model_sections:
        sections.append(
            Section(
                "Models",
                [
                    Paragraph(
                        f"{_count(len(model_sections), 'model')}, alphabetical, one line each: its success "
                        "rate pooled over every attempt on every suite. Open a model for its profile across "
                        "suites (rank, interval and P(best) per suite), forest plot and reliability."
                    )
                ],
                model_sections,
                list_subsections=False,
            )
        )
    accounting = lake.root / "ingest_accounting" / "accounting.parquet"
    if accounting.exists():
        sections.append(
            Section(
                "Ingest accounting",
                [
                    Paragraph("Where every input row went: rows read = ingested + quarantined, per partition."),
                    Table(pd.read_parquet(accounting), caption="Ingest accounting"),
                ],
            )
        )
    return sections


def reliability_summaries(lake: Lake) -> SummaryCache:
    """The reliability rows the last report read (:data:`RELIABILITY_CACHE`), valid for this code."""
    return SummaryCache(lake.root / RELIABILITY_CACHE, code_version(["evalpipeline.report.build"]))


def build_report(
    lake: Lake, generated_at: dt.datetime | str, *, all_pairs_up_to: int = ALL_PAIRS_UP_TO, judges: tuple[str, ...] = ()
) -> Path:
    """Render and write ``<lake>/report/index.html`` atomically; return its path.

    ``generated_at`` is printed as given (no clock is read), so a rerun on the
    same lake writes the same bytes (and :func:`write_report` then leaves the
    file untouched). ``all_pairs_up_to``: as in :func:`report_sections`. ``judges``: the scorers with a
    configured judge; one that no leaderboard names is warned of (:func:`report_intro`).
    """
    report_path = lake.root / REPORT_PATH
    report_path.parent.mkdir(parents=True, exist_ok=True)
    summaries = reliability_summaries(lake)
    sections = report_sections(lake, report_path, summaries, all_pairs_up_to)
    intro = report_intro(
        _partition_dirs(lake.root / SUITE_COMPARISON_TABLE, "suite"),
        _partition_dirs(lake.root / MODEL_PROFILE_TABLE, "model"),
        judges,
    )
    html = render_report("Evaluation report", sections, generated_at=generated_at, intro=intro)
    write_report(html, report_path)
    summaries.save()
    return report_path
