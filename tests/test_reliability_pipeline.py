"""Pipeline helpers of evalpipeline.reliability: counts from canonical samples, taxonomy, Parquet output."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from evalpipeline.reliability import (
    ReliabilitySettings,
    assess_reliability,
    counts_from_samples,
    load_taxonomy,
    model_counts,
    write_reliability,
)
from evalpipeline.reliability.pipeline import TAXONOMY_TEMPLATE, Taxonomy

SMALL = ReliabilitySettings(n_configurations=16, n_draws=300, grid_size=200, cdf_points=41, seed=5)


def samples(rows) -> pd.DataFrame:
    """Canonical-sample-like rows: (domain, subdomain, item, epoch, score, correct, error, limit)."""
    frame = pd.DataFrame(
        rows, columns=["domain", "subdomain", "item_id", "epoch", "score", "correct", "error", "limit"]
    )
    frame["correct"] = frame["correct"].astype("boolean")
    return frame


def test_counts_use_correct_when_logged_else_score_threshold_and_skip_uncountable():
    frame = samples(
        [
            ("math", "add", "1", 1, 1.0, True, None, None),
            ("math", "add", "1", 2, 0.0, False, None, None),
            ("math", "add", "2", 1, 0.5, True, None, None),  # correct logged wins over the score
            ("math", "add", "3", 1, 1.0, None, None, None),  # no correct: score >= threshold
            ("math", "add", "4", 1, 0.8, None, None, None),
            ("math", "add", "5", 1, 1.0, True, "boom", None),  # errored: not counted
            ("math", "add", "6", 1, 1.0, True, None, "tokens"),  # limit hit: not counted
            ("math", "add", "7", 1, np.nan, None, None, None),  # unscored: not counted
            ("math", None, "8", 1, 0.0, False, None, None),
        ]
    )
    counts = counts_from_samples(frame).set_index("subdomain")
    assert counts.loc["add", ["n", "k", "n_items", "n_excluded"]].tolist() == [5, 3, 4, 3]
    assert counts.loc["(none)", ["n", "k"]].tolist() == [1, 0]
    lenient = counts_from_samples(frame, success_threshold=0.75).set_index("subdomain")
    assert lenient.loc["add", "k"] == 4  # the 0.8 score now succeeds; logged correct still wins
    assert set(counts_from_samples(frame, domain="arith")["domain"]) == {"arith"}
    with pytest.raises(ValueError, match="success_threshold"):
        counts_from_samples(frame, success_threshold=0)
    with pytest.raises(ValueError, match="lack column 'error'"):
        counts_from_samples(frame.drop(columns="error"))


def test_taxonomy_maps_suites_to_domains_and_qualifies_subdomains(tmp_path):
    path = tmp_path / "taxonomy.toml"
    path.write_text(
        TAXONOMY_TEMPLATE
        + "\n[profile.domains]\nreasoning = 0.25\nagentic_ops = 0.75\n".replace(
            "[profile.domains]", "[profile.domains]"
        )
    )
    # the template's [suites] table is empty: add a mapping after it
    text = path.read_text().replace("[suites]\n", '[suites]\narith = "reasoning"\nreading = "reasoning"\n', 1)
    path.write_text(text)
    taxonomy = load_taxonomy(path)
    assert taxonomy.domain_of("arith") == "reasoning" and taxonomy.domain_of("agentic_ops") == "agentic_ops"
    by_suite = {
        "arith": samples(
            [("math", "add", "1", 1, 1.0, True, None, None), ("math", "div", "2", 1, 0.0, False, None, None)]
        ),
        "reading": samples([(None, None, "1", 1, 1.0, True, None, None)]),
        "agentic_ops": samples([("agents", "shell", "1", 1, 1.0, True, None, None)]),
    }
    counts = model_counts(by_suite, taxonomy)
    assert list(zip(counts["domain"], counts["subdomain"])) == [
        ("agentic_ops", "agentic_ops/shell"),
        ("reasoning", "arith/add"),
        ("reasoning", "arith/div"),
        ("reasoning", "reading"),
    ]
    result = assess_reliability(counts, SMALL.replace(profile=taxonomy.profile))
    assert result.weights.groupby("domain")["domain_weight"].first().to_dict() == {
        "agentic_ops": 0.75,
        "reasoning": 0.25,
    }
    assert load_taxonomy(tmp_path / "absent.toml") == Taxonomy()
    assert model_counts(by_suite)["domain"].nunique() == 3  # default: one domain per suite


@pytest.mark.parametrize(
    "text, message",
    [
        ("[suites\n", "not valid TOML"),
        ("[suites]\narith = 3\n", "non-empty domain"),
        ('[domains]\narith = "x"\n', "unknown table"),
        ("[profile]\nweights = 1\n", "unknown keys"),
    ],
)
def test_bad_taxonomy_files_raise(tmp_path, text, message):
    path = tmp_path / "taxonomy.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_taxonomy(path)


def test_write_reliability_is_atomic_and_byte_identical_on_rerun(tmp_path):
    counts = pd.DataFrame(
        [("d", "a", 30, 20), ("d", "b", 40, 35), ("e", "c", 25, 10)], columns=["domain", "subdomain", "n", "k"]
    )
    paths = write_reliability(assess_reliability(counts, SMALL), tmp_path / "one")
    again = write_reliability(assess_reliability(counts, SMALL), tmp_path / "two")
    assert set(paths) == {
        "cdf_envelopes",
        "quantile_envelopes",
        "expected_reliability",
        "target_probability",
        "configurations",
        "weights",
        "metadata",
    }
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    for name in paths:
        assert digest(paths[name]) == digest(again[name]), name
    assert not [p for p in (tmp_path / "one").iterdir() if p.name.startswith(".")]  # no temporaries left
    # every table has exactly the documented columns (README "Output tables"), in order
    from evalpipeline.steps.reliability import RELIABILITY_COLUMNS

    for name, path in paths.items():
        if name != "metadata":
            assert list(pd.read_parquet(path).columns) == list(RELIABILITY_COLUMNS[name]), name
    assert list(pd.read_parquet(paths["expected_reliability"])["method"].unique()) == ["exact"]
    other = write_reliability(assess_reliability(counts, SMALL.replace(seed=6)), tmp_path / "three")
    assert digest(other["quantile_envelopes"]) != digest(paths["quantile_envelopes"])


def test_lake_assessment_is_reused_exactly_when_its_inputs_are_unchanged(tmp_path):
    from evalpipeline.lake import Lake
    from evalpipeline.reliability import ReliabilitySettings
    from evalpipeline.steps.reliability import INPUTS_FILE, ReliabilityConfig, assess_model, assess_partition
    from tests.test_comparison import planted_scores, write_samples

    rng = np.random.default_rng(8)
    lake = Lake(tmp_path / "lake")
    scores = planted_scores(rng, rng.normal(0, 1, 12), 1.0)
    write_samples(lake, "m", "s", scores)
    config = ReliabilityConfig(
        ReliabilitySettings(n_configurations=16, n_draws=200, grid_size=100, cdf_points=21),
        taxonomy_path=str(tmp_path / "no-taxonomy.toml"),
    )

    def files(directory):
        return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    first = assess_partition(lake, "m", "s", config, code="v1")
    assert first.status == "computed" and (first.directory / INPUTS_FILE).exists()
    stored = files(first.directory)
    again = assess_partition(lake, "m", "s", config, code="v1")
    assert again.status == "reused" and files(again.directory) == stored
    pd.testing.assert_frame_equal(again.result.expected_reliability, first.result.expected_reliability)
    assert assess_model(lake, "m", config, code="v1").status == "computed"
    assert assess_model(lake, "m", config, code="v1").status == "reused"

    # whatever produced the outputs changes, they are recomputed: code, settings, data, a missing file
    assert assess_partition(lake, "m", "s", config, code="v2").status == "computed"
    assert assess_partition(lake, "m", "s", config, code="v2").status == "reused"
    other = ReliabilityConfig(config.settings.replace(n_draws=300), taxonomy_path=config.taxonomy_path)
    assert assess_partition(lake, "m", "s", other, code="v2").status == "computed"
    # a missing plot is drawn again from the stored tables, which are reused
    (first.directory / "plots" / "cdf_envelopes.png").unlink()
    assert assess_partition(lake, "m", "s", other, code="v2").status == "reused"
    assert (first.directory / "plots" / "cdf_envelopes.png").exists()
    (first.directory / "expected_reliability.parquet").unlink()
    assert assess_partition(lake, "m", "s", other, code="v2").status == "computed"
    flipped = scores.copy()
    flipped[0, 0] = 1.0 - flipped[0, 0]
    write_samples(lake, "m", "s", flipped)
    assert assess_partition(lake, "m", "s", other, code="v2").status == "computed"
    assert assess_model(lake, "m", config, code="v1").status == "computed"


def test_moving_a_suite_to_another_domain_recomputes_its_partitions_under_the_new_name_only(tmp_path):
    from evalpipeline.lake import Lake
    from evalpipeline.reliability import ReliabilitySettings
    from evalpipeline.steps.reliability import ReliabilityConfig, assess_partition
    from tests.test_comparison import planted_scores, write_samples

    rng = np.random.default_rng(9)
    lake = Lake(tmp_path / "lake")
    for suite in ("arith", "reading"):
        write_samples(lake, "m", suite, planted_scores(rng, rng.normal(0, 1, 10), 1.0))
    taxonomy = tmp_path / "taxonomy.toml"
    config = ReliabilityConfig(
        ReliabilitySettings(n_configurations=16, n_draws=200, grid_size=100, cdf_points=21), taxonomy_path=str(taxonomy)
    )
    first = {suite: assess_partition(lake, "m", suite, config, code="v1") for suite in ("arith", "reading")}
    assert set(first["arith"].result.cdf_envelopes["domain"]) - {"(all)"} == {"arith"}  # (all): the LLM level

    taxonomy.write_text('[suites]\narith = "math"\n')
    moved = assess_partition(lake, "m", "arith", config, code="v1")
    kept = assess_partition(lake, "m", "reading", config, code="v1")
    assert (moved.status, kept.status) == ("computed", "reused")
    for name in ("cdf_envelopes", "expected_reliability", "quantile_envelopes", "target_probability"):
        stored = pd.read_parquet(moved.directory / f"{name}.parquet")
        assert set(stored["domain"]) - {"(all)"} == {"math"}, name
    # the same seed and counts: only the name changed
    before = first["arith"].result.expected_reliability.drop(columns="domain")
    pd.testing.assert_frame_equal(moved.result.expected_reliability.drop(columns="domain"), before)


def test_model_reliability_takes_over_current_suite_rows_and_agrees_with_the_suites(tmp_path):
    import pyarrow as pa

    from evalpipeline.lake import Lake, write_parquet_atomic
    from evalpipeline.steps.reliability import INPUTS_FILE, ReliabilityConfig, assess_model, assess_partition

    rng = np.random.default_rng(21)
    lake = Lake(tmp_path / "lake")
    layout = {"s1": ["algebra", "geometry"], "s2": ["easy", "hard", "mid"], "s3": [None]}
    for suite, subdomains in layout.items():
        frame = pd.DataFrame(
            [
                {
                    "domain": "d",
                    "subdomain": sub,
                    "item_id": f"{suite}-{sub}-{i}",
                    "epoch": 1,
                    "score": float(rng.random() < p),
                    "error": None,
                    "limit": None,
                }
                for sub, p in zip(subdomains, (0.55, 0.8, 0.35))
                for i in range(25)
            ]
        )
        for column in ("subdomain", "error", "limit"):
            frame[column] = frame[column].astype("string")
        write_parquet_atomic(
            pa.Table.from_pandas(frame, preserve_index=False), lake.table_path("samples", "samples.parquet", "m", suite)
        )
    config = ReliabilityConfig(
        ReliabilitySettings(n_configurations=20, n_draws=300, grid_size=150, cdf_points=31),
        taxonomy_path=str(tmp_path / "no-taxonomy.toml"),
    )

    def files(directory):
        return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    alone = assess_model(lake, "m", config, code="v1")  # no suite assessed yet: everything computed
    assert alone.status == "computed" and alone.subdomains_taken_over == 0
    computed = files(alone.directory)
    stale = [assess_partition(lake, "m", suite, config, code="v0") for suite in layout]  # other code: not current
    (alone.directory / INPUTS_FILE).unlink()
    assert assess_model(lake, "m", config, code="v1").subdomains_taken_over == 0
    suites = {suite: assess_partition(lake, "m", suite, config, code="v1") for suite in layout}
    assert all(s.status == "computed" for s in suites.values()) and stale
    (alone.directory / INPUTS_FILE).unlink()
    taken = assess_model(lake, "m", config, code="v1")
    # s1 and s2 taken over (2 + 3 subdomains); s3 has one subdomain, so its domain level needs the arrays
    assert taken.status == "computed" and taken.subdomains_taken_over == 5
    assert files(taken.directory) == computed  # byte for byte what computing everything wrote
    # and the model's view of each suite is the suite's own
    for suite, output in suites.items():
        for name in ("cdf_envelopes", "quantile_envelopes", "expected_reliability", "target_probability"):
            mine = taken.result.tables()[name]
            mine = mine[(mine["domain"] == suite) & (mine["level"] != "llm")].reset_index(drop=True)
            theirs = output.result.tables()[name]
            theirs = theirs[theirs["level"] != "llm"].reset_index(drop=True)
            mine["subdomain"] = mine["subdomain"].str.removeprefix(f"{suite}/").replace(suite, "(none)")
            pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
