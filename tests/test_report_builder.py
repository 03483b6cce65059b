"""The lake-wide report (evalpipeline/report/build.py) read the way a person reads it."""

import html
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from evalpipeline.steps.comparison import ComparisonSettings, build_model_profile, build_suite_comparison
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.report.build import build_report
from tests.test_comparison import planted_scores, write_samples

MODELS = ("vendor/big model", "small <b>&co")
SUITES = ("arith", "one model suite")


def make_report_lake(root: Path) -> Lake:
    """A lake as the pipeline leaves it for the report: comparisons of two suites and two models, and
    HIP-LLM reliability (per partition and per model, with plots) for the first model."""
    from evalpipeline.reliability import ReliabilitySettings
    from evalpipeline.steps.reliability import ReliabilityConfig, assess_model, assess_partition

    rng = np.random.default_rng(2)
    lake = Lake(root)
    difficulty = rng.normal(0, 1, 15)
    write_samples(lake, MODELS[0], SUITES[0], planted_scores(rng, difficulty, 2.0))
    write_samples(lake, MODELS[1], SUITES[0], planted_scores(rng, difficulty, -1.0))
    write_samples(lake, MODELS[0], SUITES[1], planted_scores(rng, difficulty[:8], 0.0, epochs=1))
    settings = ComparisonSettings(pairwise_draws=20_000)
    for suite in SUITES:
        build_suite_comparison(lake, suite, settings)
    for model in MODELS:
        build_model_profile(lake, model, settings)
    config = ReliabilityConfig(
        ReliabilitySettings(n_configurations=16, n_draws=300, grid_size=200, cdf_points=41),
        taxonomy_path=str(root / "no-taxonomy.toml"),
    )
    for suite in SUITES:
        assess_partition(lake, MODELS[0], suite, config)
    assess_model(lake, MODELS[0], config)
    return lake


def leaderboard_model_name(i: int) -> str:
    """Names as public leaderboards have them: vendor/model-version, every tenth a long preview name."""
    name = f"vendor-{i % 9}/model-{i:03d}-2025-06-01"
    return name + "-preview-with-extended-thinking-64k-max-tokens" if i % 10 == 3 else name


def make_leaderboard_scale_lake(root: Path, n_models: int = 100, suites=("coding", "math", "reasoning")) -> Lake:
    """A lake of ``n_models`` models on ``suites`` as the comparison assets leave it, written directly
    (no fitting): every suite's leaderboard.parquet and pairwise.parquet (every pair) with the tables'
    columns, and every model's profile.parquet. Names are long (one is hostile) and the gaps between
    neighbours range from too close to call to near-certain, as on a public leaderboard."""
    from scipy.stats import norm

    from evalpipeline.steps.comparison import LEADERBOARD_COLUMNS, PAIRWISE_TABLE_COLUMNS, PROFILE_COLUMNS
    from evalpipeline.stats.verdicts import probability_band, probability_verdict

    rng = np.random.default_rng(7)
    lake = Lake(root)
    models = [leaderboard_model_name(i) for i in range(n_models - 1)] + ["small <b>&co \"quoted\" 'model'"]
    skill = rng.normal(0, 1.2, n_models)
    profiles: dict[str, list[dict]] = {m: [] for m in models}
    for s_index, suite in enumerate(suites):
        n_items, epochs = 60 + 20 * s_index, 3
        rate = 1 / (1 + np.exp(-(skill + rng.normal(0, 0.3, n_models))))
        n_eff = np.full(n_models, n_items * 1.9)
        se = np.sqrt(rate * (1 - rate) / n_eff)
        order = np.lexsort((np.array(models), -rate))
        ranks = np.empty(n_models, int)
        ranks[order] = np.arange(1, n_models + 1)
        draws = rng.normal(rate, se, (2000, n_models))
        draw_ranks = (-draws).argsort(1).argsort(1) + 1
        board = pd.DataFrame({column: [None] * n_models for column in LEADERBOARD_COLUMNS})
        board = board.assign(
            suite=suite,
            model=models,
            n=n_items * epochs,
            n_items=n_items,
            k=rate * n_items * epochs,
            n_excluded=0,
            observed_mean=rate,
            prior_a=1.0,
            prior_b=1.0,
            posterior_mean=rate,
            hpdi_mass=0.95,
            hpdi_low=rate - 1.96 * se,
            hpdi_high=rate + 1.96 * se,
            unit="item",
            n_units=n_items,
            design_effect=epochs / 1.9,
            n_effective=n_eff,
            independent_hpdi_low=rate - 1.2 * se,
            independent_hpdi_high=rate + 1.2 * se,
            n_suite_items=n_items,
            wilson_low=rate - 1.1 * se,
            wilson_high=rate + 1.1 * se,
            clopper_pearson_low=rate - 1.2 * se,
            clopper_pearson_high=rate + 1.2 * se,
            clt_low=rate - 1.1 * se,
            clt_high=rate + 1.1 * se,
            p_best=np.bincount(draws.argmax(1), minlength=n_models) / len(draws),
            expected_rank=draw_ranks.mean(0),
            rank_low=np.percentile(draw_ranks, 2.5, axis=0).astype(int),
            rank_high=np.percentile(draw_ranks, 97.5, axis=0).astype(int),
            rank=ranks,
            **{"p_above_0.8": norm.sf((0.8 - rate) / se)},
        )
        board = board.sort_values("rank").reset_index(drop=True)
        first, second = np.triu_indices(n_models, 1)
        a = np.where(rate[first] >= rate[second], first, second)
        b = first + second - a
        p = norm.cdf((rate[a] - rate[b]) / np.hypot(se[a], se[b]))
        pairs = {
            "suite": suite,
            "model_a": np.array(models)[a],
            "model_b": np.array(models)[b],
            "p_a_better": p,
            "p_a_better_independent": p,
            "p_a_better_paired": p,
            "diff_mean_paired": rate[a] - rate[b],
            "verdict_band": [probability_band(q) for q in p],
            "verdict_source": "paired",
            "verdict": [probability_verdict(q, models[i], models[j]) for q, i, j in zip(p, a, b)],
            "hpdi_verdict": "inconclusive",
            "t_unpaired_p": 2 * norm.sf(np.abs(norm.ppf(p))),
        }
        pairs = pd.DataFrame(pairs).reindex(columns=list(PAIRWISE_TABLE_COLUMNS))
        folder = lake.partition_dir("suite_comparison", suite=suite)
        for name, frame in (("leaderboard", board), ("pairwise", pairs)):
            write_parquet_atomic(pa.Table.from_pandas(frame, preserve_index=False), folder / f"{name}.parquet")
        for i, model in enumerate(models):
            profiles[model].append(
                {
                    "model": model,
                    "scope": "suite",
                    "suite": suite,
                    "n_suites": 1,
                    "n": n_items * epochs,
                    "posterior_mean": rate[i],
                    "hpdi_low": rate[i] - 1.96 * se[i],
                    "hpdi_high": rate[i] + 1.96 * se[i],
                    "rank": ranks[i],
                    "n_models": n_models,
                }
            )
    for model, rows in profiles.items():
        mean = float(np.mean([r["posterior_mean"] for r in rows]))
        rows.append(
            {
                "model": model,
                "scope": "pooled",
                "suite": "(all)",
                "n_suites": len(rows),
                "posterior_mean": mean,
                "hpdi_low": mean - 0.03,
                "hpdi_high": mean + 0.03,
            }
        )
        profile = pd.DataFrame(rows).reindex(columns=list(PROFILE_COLUMNS))
        write_parquet_atomic(
            pa.Table.from_pandas(profile, preserve_index=False),
            lake.partition_dir("model_profile", model=model) / "profile.parquet",
        )
    return lake


@pytest.fixture(scope="module")
def report_lake(tmp_path_factory):
    return make_report_lake(tmp_path_factory.mktemp("lake"))


def _image_sources(text: str) -> list[str]:
    return [html.unescape(src) for src in re.findall(r'<img src="([^"]+)"', text)]


def test_report_has_every_suite_and_model_and_no_broken_image(report_lake):
    path = build_report(report_lake, "2026-01-02T03:04:05")
    assert path == report_lake.root / "report" / "index.html"
    text = path.read_text(encoding="utf-8")
    for name in SUITES:
        assert f"Suite: {html.escape(name)}" in text
    for name in MODELS:
        assert f"Model: {html.escape(name)}" in text
    assert "<b>&co" not in text  # names are escaped, never markup
    sources = _image_sources(text)
    # two suites: leaderboard (both), pairwise (the two-model suite); two model forest plots; the first
    # model's reliability CDF and E[R(n)] plots
    assert len(sources) == 7
    assert sum("model_reliability" in src for src in sources) == 2
    for src in sources:
        assert not src.startswith("/") and "://" not in src
        assert (path.parent / unquote(src)).resolve().is_file(), src
    assert "almost certainly better than" in text  # the planted gap, said in words
    assert "Only one model was evaluated on this suite" in text
    assert "Ingest accounting" not in text  # optional section absent without its table
    # reliability in words and numbers: per suite (the model that has it) and per model
    assert text.count("Reliability on this suite") == 2
    assert f"Reliability of {html.escape(MODELS[0])}" in text and f"Reliability of {html.escape(MODELS[1])}" not in text
    assert re.search(r"E\[R\(60\)\]", text) and re.search(r"\[0\.\d{3}, 0\.\d{3}\]", text)
    # the WAIC/LOO table shows the rankings' own columns (none here: no fits in this lake)
    from evalpipeline.steps.rankings import RANKING_COLUMNS
    from evalpipeline.report.build import RANKINGS_SHOWN

    assert set(RANKINGS_SHOWN) <= set(RANKING_COLUMNS)


def test_report_is_deterministic_and_shows_optional_tables(report_lake):
    first = build_report(report_lake, "2026-01-02T03:04:05").read_bytes()
    assert build_report(report_lake, "2026-01-02T03:04:05").read_bytes() == first
    accounting = pd.DataFrame({"model": [MODELS[0]], "suite": [SUITES[0]], "rows_ingested": [30]})
    write_parquet_atomic(
        pa.Table.from_pandas(accounting, preserve_index=False),
        report_lake.root / "ingest_accounting" / "accounting.parquet",
    )
    try:
        text = build_report(report_lake, "2026-01-02T03:04:05").read_text(encoding="utf-8")
        assert "Ingest accounting" in text and "rows_ingested" in text
    finally:
        (report_lake.root / "ingest_accounting" / "accounting.parquet").unlink()


def test_report_on_an_empty_lake_says_so(tmp_path):
    text = build_report(Lake(tmp_path), "t").read_text(encoding="utf-8")
    assert "No suite comparison has been computed yet." in text
    assert "<img" not in text


def test_report_rereads_only_the_reliability_tables_that_changed(report_lake, monkeypatch):
    from evalpipeline.report import build as report_builder

    first = build_report(report_lake, "t").read_bytes()
    read = []
    rows = report_builder._reliability_rows
    monkeypatch.setattr(report_builder, "_reliability_rows", lambda paths: read.append(paths) or rows(paths))
    assert build_report(report_lake, "t").read_bytes() == first and read == []
    # one partition's envelopes change: that folder alone is read again, and the report shows the new numbers
    folder = report_lake.partition_dir("reliability", MODELS[0], SUITES[0])
    path = folder / "expected_reliability.parquet"
    original = pd.read_parquet(path)
    changed = original.assign(lower=0.0123, upper=0.0456)
    write_parquet_atomic(pa.Table.from_pandas(changed, preserve_index=False), path)
    try:
        text = build_report(report_lake, "t").read_text(encoding="utf-8")
        assert [p["expected_reliability"].parent for p in read] == [folder]
        assert "[0.012, 0.046]" in text
    finally:
        write_parquet_atomic(pa.Table.from_pandas(original, preserve_index=False), path)
    assert build_report(report_lake, "t").read_bytes() == first


def test_a_large_suite_shows_the_pairs_that_decide_its_ranking():
    from evalpipeline.report.build import _pairs_shown

    models = [f"m{i}" for i in range(6)]  # leaderboard order m0 (rank 1) .. m5; stored pairs in another order
    board = pd.DataFrame({"model": models[::-1], "rank": [6, 5, 4, 3, 2, 1]})
    pairs = pd.DataFrame(
        [(b, a) if (i + j) % 2 else (a, b) for i, a in enumerate(models) for j, b in enumerate(models) if i < j],
        columns=["model_a", "model_b"],
    )
    everything, note = _pairs_shown(pairs, board, limit=15)
    assert note is None and everything is pairs  # at the limit: every pair, as stored
    shown, note = _pairs_shown(pairs, board, limit=14)
    # going down the leaderboard, each model against the leader and the one ranked above (m1: both m0): 9 pairs
    assert [tuple(sorted(p)) for p in zip(shown["model_a"], shown["model_b"])] == [
        ("m0", "m1"),
        ("m0", "m2"),
        ("m1", "m2"),
        ("m0", "m3"),
        ("m2", "m3"),
        ("m0", "m4"),
        ("m3", "m4"),
        ("m0", "m5"),
        ("m4", "m5"),
    ]
    assert "15 pairs" in note and "(9 pairs)" in note and "pairwise.parquet" in note
    # a model missing from the leaderboard is in no pair shown (never matched by a NaN position)
    shown, _ = _pairs_shown(pd.concat([pairs, pd.DataFrame({"model_a": ["x"], "model_b": ["m1"]})]), board, limit=14)
    assert "x" not in set(shown["model_a"]) | set(shown["model_b"]) and len(shown) == 9


def test_the_report_names_what_it_leaves_out_of_a_large_suite(report_lake):
    text = build_report(report_lake, "2026-01-02T03:04:05", all_pairs_up_to=0).read_text(encoding="utf-8")
    # the two-model suite's one pair is the leader against the next model: shown, with the sentence saying so
    assert "This suite has 1 pair of models" in text and "(1 pair)" in text and "almost certainly better than" in text
    full = build_report(report_lake, "2026-01-02T03:04:05").read_text(encoding="utf-8")
    assert "pairs of models. Shown here" not in full


def test_a_report_of_a_hundred_models_leads_with_the_leaderboards_and_keeps_every_model(tmp_path):
    lake = make_leaderboard_scale_lake(tmp_path / "lake", n_models=100)
    text = build_report(lake, "t").read_text(encoding="utf-8")
    assert build_report(lake, "t").read_text(encoding="utf-8") == text
    assert "<b>&co" not in text
    first_board = text.index('<table class="fit"><caption>Leaderboard: 100 models')
    # nothing per model before the first leaderboard: no model section, no link to one
    assert text.index("<h2>Models</h2>") > first_board
    assert text[:first_board].count("<a href=") == 3 + 1  # contents: the three suites and the models
    # the leaderboard shown first is narrow: no CLT or independent-attempts columns; they are one click away
    compact = text[first_board : text.index("</table>", first_board)]
    assert "clt_low" not in compact and "independent_hpdi_low" not in compact and "P(rank above better)" in compact
    assert compact.count("<tr>") == 101
    assert "<summary>All leaderboard columns" in text and '<th scope="col">clt_low</th>' in text
    # every model is a collapsed section with its pooled rate on the line that opens it
    assert text.count('<details class="section">') == 100
    assert '<details class="section" open' not in text
    assert re.search(
        r'<summary><h3>Model: vendor-0/model-000-[^<]+</h3> <span class="summary">pooled 0\.\d{3} '
        r"\(0\.\d{3}–0\.\d{3}\) over 3 suites</span></summary>",
        text,
    )
    # the verdicts that decide the ranking, in words, under the leaderboard
    assert text.count("Down the leaderboard, each model against the one ranked just above it (99 steps)") == 3
    assert "The pairs that decide the ranking (197 of 4,950)" in text


def test_the_compact_leaderboard_and_the_verdicts_that_decide_it():
    from evalpipeline.report.build import compact_leaderboard, verdict_summary

    board = pd.DataFrame(
        {
            "rank": [2, 1, 3],
            "model": ["b", "a", "c"],
            "posterior_mean": [0.7, 0.8, 0.69],
            "hpdi_mass": 0.9,
            "hpdi_low": [0.6, 0.7, 0.6],
            "hpdi_high": [0.8, 0.9, 0.78],
            "p_best": [0.2, 0.75, 0.05],
            "rank_low": [1, 1, 2],
            "rank_high": [3, 2, 3],
            "n_items": [40, 40, 40],
            "n_effective": [61.6, 70.2, np.nan],
            "p_above_0.8": [0.1, 0.5, 0.0],
            "clt_low": [0.5, 0.6, 0.5],
        }
    )
    # one pair stored with the lower-ranked model as model_a (a tie broken the other way)
    pairs = pd.DataFrame(
        {
            "model_a": ["a", "c", "a"],
            "model_b": ["b", "b", "c"],
            "p_a_better": [0.97, 0.45, 0.9],
            "verdict_band": ["confident", "too close to call", "likely"],
        }
    )
    compact = compact_leaderboard(board, pairs)
    assert list(compact.columns) == [
        "rank",
        "model",
        "mean",
        "90% HPDI",
        "P(best)",
        "rank 95%",
        "items",
        "n_eff",
        "P(>0.8)",
        "P(rank above better)",
    ]
    assert list(compact["model"]) == ["a", "b", "c"] and list(compact["rank 95%"]) == ["1–2", "1–3", "2–3"]
    assert list(compact["90% HPDI"]) == ["0.700–0.900", "0.600–0.800", "0.600–0.780"]
    assert compact["n_eff"].tolist()[:2] == [70, 62] and compact["n_eff"].isna().tolist() == [False, False, True]
    above = compact["P(rank above better)"].tolist()
    assert pd.isna(above[0]) and above[1:] == ["0.97 confident", "0.55 too close to call"]
    lead, steps = verdict_summary(board, pairs)
    assert lead == "a leads (P(best) = 0.75); not confidently behind it (P(leader better) under 0.95): c."
    assert steps == (
        "Down the leaderboard, each model against the one ranked just above it (2 steps): 1 confident, "
        "1 too close to call."
    )
    many = verdict_summary(board, pairs.assign(p_a_better=0.6), most=1)[0]
    assert many.endswith(": b and 1 more.")
    assert verdict_summary(board.iloc[:1], pairs) == [] and verdict_summary(board, None) == []
