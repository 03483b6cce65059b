"""Great Expectations validation of the canonical sample table (evalpipeline.validate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalpipeline.schema import samples_schema, to_arrow
from evalpipeline.validate import (
    SUITE_NAME,
    SUITE_PATH,
    ValidationSettings,
    build_suite,
    check_names,
    load_suite,
    validate_samples,
)
from evalpipeline.validate import run as validate_run
from evalpipeline.validate.suite import REQUIRED_COLUMNS, comparable, suite_to_json

REPO = Path(__file__).resolve().parents[1]


def make_samples(n_items: int = 4, epochs: int = 2, *, seed: int = 0) -> pd.DataFrame:
    """A valid partition of ``n_items`` x ``epochs`` rows, with the dtypes pandas reads from the lake.

    Rows are ordered by item then epoch, so row ``i * epochs + (e - 1)`` is item ``i`` epoch ``e``.
    Scores alternate 1, 0 so that ``correct`` is set; ``model``/``suite`` are left out as in
    the lake files.
    """
    rng = np.random.default_rng(seed)
    n = n_items * epochs
    score = rng.integers(0, 2, n).astype(float)
    frame = pd.DataFrame(
        {
            "domain": "math",
            "item_id": np.repeat([f"item-{i:03d}" for i in range(n_items)], epochs),
            "epoch": np.tile(np.arange(1, epochs + 1), n_items),
            "scorer": "match",
            "score": score,
            "correct": score == 1.0,
            "score_raw": [json.dumps("C" if s else "I") for s in score],
            "log_path": "logs/run.eval",
            "log_sha256": "ab" * 32,
            "log_format": "eval",
            "sample_index": np.arange(n),
            "created_at": pd.Timestamp("2025-01-01", tz="UTC"),
        }
    )
    schema = samples_schema(with_partition_columns=False)
    for name in schema.names:
        if name not in frame.columns:
            frame[name] = None
    return to_arrow(frame, schema).to_pandas()


def row(frame: pd.DataFrame, item: int, epoch: int, epochs: int = 2) -> int:
    label = item * epochs + epoch - 1
    assert frame.loc[label, "item_id"] == f"item-{item:03d}" and frame.loc[label, "epoch"] == epoch
    return label


def errored(frame: pd.DataFrame, labels) -> pd.DataFrame:
    """Make rows errored samples: an error, no scorer, score or correct (as the Inspect reader does)."""
    frame = frame.copy()
    frame["correct"] = frame["correct"].astype(object)
    frame.loc[labels, "error"] = "RuntimeError: sandbox died"
    frame.loc[labels, ["scorer", "score_raw"]] = np.nan
    frame.loc[labels, "score"] = np.nan
    frame.loc[labels, "correct"] = None
    return frame


def failed(report) -> set[str]:
    return {c.name for c in report.failed_checks}


@pytest.fixture(scope="module")
def clean_report():
    return validate_samples(make_samples(), ValidationSettings(), None)


# -- the suite --------------------------------------------------------------------------------


def test_committed_suite_json_matches_the_builder():
    on_disk = json.loads(SUITE_PATH.read_text())
    built = json.loads(suite_to_json(build_suite(ValidationSettings())))
    assert comparable(on_disk) == comparable(built), "run: python -m evalpipeline.validate"
    assert on_disk["name"] == SUITE_NAME
    assert on_disk["suite_parameters"] == {"epoch_min": 1, "epoch_max": 1000, "max_error_share": 0.2}


def test_committed_suite_loads_with_gx_and_round_trips():
    suite = load_suite()
    assert suite.name == SUITE_NAME
    assert comparable(suite.to_json_dict()) == comparable(build_suite().to_json_dict())
    names = [e.meta["check"] for e in suite.expectations]
    assert len(names) == len(set(names))
    assert all(name.replace("_", "").isalnum() for name in names)  # valid Dagster check names


def test_settings_become_suite_parameter_defaults():
    suite = build_suite(ValidationSettings(epoch_max=5, max_error_share=0.5))
    assert suite.suite_parameters == {"epoch_min": 1, "epoch_max": 5, "max_error_share": 0.5}


@pytest.mark.parametrize("kwargs", [{"epoch_min": 0}, {"epoch_min": 5, "epoch_max": 4}, {"max_error_share": 1.5}])
def test_settings_reject_nonsense(kwargs):
    with pytest.raises(ValueError):
        ValidationSettings(**kwargs)


# -- a clean partition ---------------------------------------------------------------------


def test_clean_partition_passes_everything(clean_report):
    assert clean_report.success, clean_report.failed_checks
    assert clean_report.row_failures == {}
    assert [c.name for c in clean_report.checks] == check_names()
    assert all(c.examples.empty for c in clean_report.checks)
    assert clean_report.rows == 8 and clean_report.data_docs_index is None


def test_every_canonical_column_type_is_checked(clean_report):
    typed = {c.name.removeprefix("type_") for c in clean_report.checks if c.name.startswith("type_")}
    assert typed == set(samples_schema(with_partition_columns=False).names)


def test_partition_columns_and_covariates_are_allowed():
    samples = make_samples()
    samples.insert(0, "model", "gpt-x")
    samples.insert(1, "suite", "gsm8k")
    samples["cov_difficulty"] = 0.5
    assert validate_samples(samples).success


def test_pandas2_style_object_string_columns_pass():
    samples = make_samples()
    for name in samples.columns:
        if pd.api.types.is_string_dtype(samples[name].dtype):
            samples[name] = samples[name].astype(object)
    report = validate_samples(samples)
    assert report.success, report.failed_checks


def test_errored_samples_with_nulls_pass():
    samples = errored(make_samples(), [1])  # item 0 still has epoch 1 scored
    samples["source_line"] = samples["source_line"].astype("float64")  # int32 with nulls, as Arrow gives it
    report = validate_samples(samples)
    assert report.success, report.failed_checks


def test_nullable_and_arrow_backed_frames_are_validated_like_lake_reads():
    """GX's pandas metrics misread pd.NA and ArrowDtype columns; validate_samples converts them first."""
    import pyarrow as pa

    nullable = make_samples()
    nullable["score"] = nullable["score"].astype("Float64")
    nullable["correct"] = nullable["correct"].astype("boolean")
    nullable.loc[1, ["score", "correct"]] = [0.5, pd.NA]
    nullable["epoch"] = nullable["epoch"].astype("Int32")
    nullable["item_id"] = nullable["item_id"].astype("string")
    arrow = pa.Table.from_pandas(make_samples()).to_pandas(types_mapper=pd.ArrowDtype)
    for samples in (nullable, arrow):
        report = validate_samples(samples)
        assert report.success, report.failed_checks
        samples.loc[2, "correct"] = not bool(samples.loc[2, "score"] == 1)
        report = validate_samples(samples)
        assert failed(report) == {"correct_matches_score"} and set(report.row_failures) == {2}


# -- planted violations: the right check fails on the right rows --------------------------


def test_score_out_of_range_fails_on_that_row():
    samples = make_samples()
    bad = row(samples, 1, 2)
    samples.loc[bad, "score"] = 1.5
    samples["correct"] = samples["correct"].astype(object)
    samples.loc[bad, "correct"] = None  # so that only the range check fails
    report = validate_samples(samples)
    assert failed(report) == {"score_in_unit_interval"}
    assert list(report.check("score_in_unit_interval").examples.index) == [bad]
    assert report.row_failures == {bad: ["expect_column_values_to_be_between(score, 0, 1) failed: 1.5"]}


@pytest.mark.parametrize(
    ("score", "correct"),
    [(0.0, True), (1.0, False), (1.0, None), (0.0, None), (0.5, True), (np.nan, True)],
)
def test_correct_inconsistent_with_score_fails_on_that_row(score, correct):
    samples = make_samples()
    samples["correct"] = samples["correct"].astype(object)
    bad = row(samples, 2, 1)
    samples.loc[bad, "score"] = score
    samples.loc[bad, "correct"] = correct
    report = validate_samples(samples)
    assert "correct_matches_score" in failed(report)
    assert set(report.row_failures) == {bad}
    (reason,) = [r for r in report.row_failures[bad] if "correct" in r]
    assert reason.startswith("expect_column_pair_values_to_be_equal(score, correct) where ")
    assert "correct=" in reason and "failed: score=" in reason


def test_partial_score_with_null_correct_is_consistent():
    samples = make_samples()
    samples["correct"] = samples["correct"].astype(object)
    samples.loc[row(samples, 0, 1), ["score", "correct"]] = [0.25, None]
    assert validate_samples(samples).success


def test_duplicate_item_epoch_scorer_fails_on_both_rows():
    samples = make_samples(epochs=3)  # epoch 3 keeps item 1 scored once both duplicates go
    first, second = row(samples, 1, 1, epochs=3), row(samples, 1, 2, epochs=3)
    samples.loc[second, "epoch"] = 1
    report = validate_samples(samples)
    assert failed(report) == {"unique_item_epoch_scorer"}
    assert set(report.row_failures) == {first, second}
    assert report.row_failures[first] == [
        "expect_compound_columns_to_be_unique(item_id, epoch, scorer) failed: "
        "(item_id='item-001', epoch=1, scorer='match') occurs 2 times"
    ]


def test_same_item_epoch_with_another_scorer_is_fine():
    samples = make_samples()
    extra = samples.loc[[0]].assign(scorer="model_graded", sample_index=np.int32(99))
    extra.index = [100]
    assert validate_samples(pd.concat([samples, extra])).success


def test_epoch_zero_fails_on_that_row():
    samples = make_samples()
    bad = row(samples, 3, 1)
    samples.loc[bad, "epoch"] = 0
    report = validate_samples(samples)
    assert failed(report) == {"epoch_in_range"}
    assert report.row_failures == {bad: ["expect_column_values_to_be_between(epoch, 1, 1000) failed: 0"]}


def test_epoch_range_comes_from_the_settings():
    samples = make_samples(epochs=3)
    assert validate_samples(samples, ValidationSettings(epoch_max=3)).success
    report = validate_samples(samples, ValidationSettings(epoch_max=2))
    assert failed(report) == {"epoch_in_range"}
    assert set(report.row_failures) == set(samples.index[samples["epoch"] == 3])
    assert report.row_failures[2] == ["expect_column_values_to_be_between(epoch, 1, 2) failed: 3"]


@pytest.mark.parametrize("column", REQUIRED_COLUMNS)
def test_null_in_a_required_column_fails_on_that_row(column):
    samples = make_samples()
    bad = row(samples, 2, 2)
    if pd.api.types.is_integer_dtype(samples[column].dtype):
        samples[column] = samples[column].astype("Int32")  # a nullable int keeps the type check green
        samples.loc[bad, column] = pd.NA
    else:
        samples.loc[bad, column] = np.nan
    report = validate_samples(samples)
    assert f"not_null_{column}" in failed(report)
    assert bad in report.row_failures
    assert f"expect_column_values_to_not_be_null({column}) failed: null" in report.row_failures[bad]
    if column != "item_id":  # a null item_id also takes the row out of its item
        assert set(report.row_failures) == {bad}


def test_null_item_id_reported_by_index_label_not_position():
    samples = make_samples()
    samples.index = pd.Index([f"r{i}" for i in range(len(samples))], name="row_id")  # GX reports named indexes as dicts
    samples.loc["r5", "item_id"] = np.nan
    report = validate_samples(samples)
    assert failed(report) == {"not_null_item_id"}
    assert report.row_failures == {"r5": ["expect_column_values_to_not_be_null(item_id) failed: null"]}
    assert list(report.check("not_null_item_id").examples.index) == ["r5"]


def test_empty_table_fails_the_row_count_check_only():
    empty = samples_schema(with_partition_columns=False).empty_table().to_pandas()
    report = validate_samples(empty)
    assert failed(report) == {"row_count_positive"}
    assert report.check("row_count_positive").observed == 0
    assert report.row_failures == {}


def test_missing_column_fails_checks_without_raising():
    report = validate_samples(make_samples().drop(columns=["log_sha256"]))
    assert {"columns_present", "type_log_sha256", "not_null_log_sha256"} <= failed(report)
    assert report.check("columns_present").observed == {"missing_columns": ["log_sha256"]}
    assert report.check("not_null_log_sha256").observed.startswith("error:")


def test_wrong_dtype_fails_the_type_check():
    samples = make_samples()
    samples["epoch"] = samples["epoch"].astype("float64")
    assert failed(validate_samples(samples)) == {"type_epoch"}


def test_several_failures_on_one_row_are_all_named():
    samples = make_samples()
    bad = row(samples, 0, 2)
    samples.loc[bad, ["score", "epoch"]] = [2.0, 0]
    report = validate_samples(samples)
    reasons = report.row_failures[bad]
    assert any(r.startswith("expect_column_values_to_be_between(score, 0, 1)") for r in reasons)
    assert any(r.startswith("expect_column_values_to_be_between(epoch, 1, 1000)") for r in reasons)
    assert any(r.startswith("expect_column_pair_values_to_be_equal(score, correct)") for r in reasons)
    kept, moved = report.split(samples)
    assert list(moved.index) == [bad] and len(kept) == len(samples) - 1
    assert moved.loc[bad, "reason"] == "; ".join(reasons)


def test_examples_show_provenance_of_at_most_five_rows():
    samples = make_samples(n_items=5, epochs=2)
    samples["source_line"] = samples["sample_index"] + 1
    samples["epoch"] = samples["epoch"] + 1000  # every row out of range
    outcome = validate_samples(samples).check("epoch_in_range")
    assert not outcome.passed
    assert outcome.observed["unexpected_count"] == 10
    assert len(outcome.examples) == 5
    assert list(outcome.examples.columns) == ["item_id", "epoch", "log_path", "sample_index", "source_line"]


def test_non_unique_index_is_refused():
    samples = make_samples()
    samples.index = [0] * len(samples)
    with pytest.raises(ValueError, match="unique index"):
        validate_samples(samples)


# -- suite-level checks --------------------------------------------------------------------


def test_an_item_that_only_errored_is_fine():
    samples = make_samples(n_items=10)
    samples = errored(samples, [row(samples, 3, 1), row(samples, 3, 2)])  # 10 % errored, all of item 3
    report = validate_samples(samples)
    assert report.success, report.failed_checks
    assert report.check("every_item_scored").observed["items_not_scored"] == 0


def test_an_item_with_no_scored_row_fails_every_item_scored():
    samples = make_samples()
    samples["correct"] = samples["correct"].astype(object)
    labels = [row(samples, 2, 1), row(samples, 2, 2)]
    samples.loc[labels, ["score", "correct", "scorer"]] = [np.nan, None, np.nan]
    report = validate_samples(samples)
    assert failed(report) == {"every_item_scored"}
    outcome = report.check("every_item_scored")
    assert outcome.source == "pandas"
    assert outcome.observed["first_items_not_scored"] == ["item-002"]
    assert list(outcome.examples.index) == labels
    assert set(outcome.examples["table"]) == {"samples"}
    assert report.row_failures == {}  # an item-level failure: no row to quarantine


def test_an_item_present_only_in_quarantine_counts_as_not_scored():
    samples = make_samples()
    quarantine = make_samples(n_items=1).assign(item_id="item-lost", reason="unreadable score")
    report = validate_samples(samples, quarantine=quarantine)
    assert failed(report) == {"every_item_scored"}
    outcome = report.check("every_item_scored")
    assert outcome.observed["first_items_not_scored"] == ["item-lost"]
    assert set(outcome.examples["table"]) == {"quarantine"}


def test_rows_failing_row_checks_do_not_score_their_item():
    samples = make_samples()
    labels = [row(samples, 1, 1), row(samples, 1, 2)]
    samples.loc[labels[0], "epoch"] = 0
    samples.loc[labels[1], "epoch"] = -1
    report = validate_samples(samples)
    assert failed(report) == {"epoch_in_range", "every_item_scored"}
    assert report.check("every_item_scored").observed["first_items_not_scored"] == ["item-001"]


def test_errored_share_above_the_bound_fails():
    samples = make_samples(n_items=10, epochs=1)
    samples = errored(samples, [0, 1, 2])  # 30 % errored
    report = validate_samples(samples)
    assert failed(report) == {"errored_share_within_bound"}
    outcome = report.check("errored_share_within_bound")
    assert outcome.observed == pytest.approx(0.3)
    assert list(outcome.examples.index) == [0, 1, 2]
    assert "error" in outcome.examples.columns
    assert validate_samples(samples, ValidationSettings(max_error_share=0.3)).success


# -- Data Docs and side effects ------------------------------------------------------------


def test_data_docs_site_is_written_and_replaced(tmp_path):
    target = tmp_path / "validation" / "data_docs" / "model=m" / "suite=s"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old site")
    samples = make_samples()
    samples.loc[0, "score"] = 1.5
    report = validate_samples(samples, ValidationSettings(), target, label="model=m/suite=s")
    assert report.data_docs_index == target / "index.html"
    index = report.data_docs_index.read_text()
    assert SUITE_NAME in index
    assert (target / "expectations" / f"{SUITE_NAME}.html").is_file()
    page = report.data_docs_page.read_text()
    assert report.data_docs_page.is_file() and report.data_docs_page.is_relative_to(target)
    assert "expect_column_values_to_be_between" in page or "greater than or equal to" in page
    assert not (target / "stale.txt").exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["suite=s"]  # no temporaries left
    assert not (target / "static" / "images" / "glossary_scroller.gif").exists()  # unused GIFs pruned


def _site_pages(site: Path) -> dict[str, str]:
    """A Data Docs site's pages, with what differs between two builds (times, uuids) blanked."""
    import re

    def blank(text: str) -> str:
        text = re.sub(r"\d{8}T\d{6}\.\d+Z", "<run>", text)
        text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
        text = re.sub(r"'_run_time_sort': [\d.]+", "<sort>", text)
        return re.sub(r"\d{4}-\d{2}-\d{2}[T ][\d:.+Z]+", "<time>", text)

    return {blank(str(page.relative_to(site))): blank(page.read_text()) for page in site.rglob("*.html")}


def test_data_docs_compile_their_templates_once_a_process_and_render_as_gx_does(tmp_path, monkeypatch):
    from evalpipeline.validate import docs_views

    samples = make_samples()
    samples.loc[0, "score"] = 1.5  # a failing check: the page shows its unexpected rows too
    docs_views.TEMPLATE_CACHE.clear()
    validate_samples(samples, ValidationSettings(), tmp_path / "first", label="m x s")
    compiled, hits = len(docs_views.TEMPLATE_CACHE), docs_views.TEMPLATE_CACHE.hits
    assert compiled > 10  # the page, index and component templates
    validate_samples(samples, ValidationSettings(), tmp_path / "cached", label="m x s")
    assert len(docs_views.TEMPLATE_CACHE) == compiled and docs_views.TEMPLATE_CACHE.hits >= hits + compiled
    monkeypatch.setattr(
        docs_views, "site_views", lambda: {"site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}
    )
    validate_samples(samples, ValidationSettings(), tmp_path / "gx", label="m x s")  # GX's own views
    cached, own = _site_pages(tmp_path / "cached"), _site_pages(tmp_path / "gx")
    assert len(cached) == 3 and cached == own


def test_failed_data_docs_build_leaves_the_old_site_and_no_temporaries(tmp_path, monkeypatch):
    target = tmp_path / "docs" / "suite=s"
    target.mkdir(parents=True)
    (target / "index.html").write_text("old site")

    def boom(site):
        assert (site / "index.html").exists()  # GX built the site in the hidden folder...
        raise OSError("disk full")  # ...then publishing failed

    monkeypatch.setattr(validate_run, "_prune_unused_images", boom)
    with pytest.raises(OSError, match="disk full"):
        validate_samples(make_samples(), ValidationSettings(), target)
    assert (target / "index.html").read_text() == "old site"
    assert sorted(p.name for p in target.parent.iterdir()) == ["suite=s"]


def test_no_gx_state_in_home_or_cwd_and_no_dagster(tmp_path):
    """In a fresh interpreter: nothing written outside the docs folder, dagster never imported."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.test_validate import make_samples\n"
        "from evalpipeline.validate import validate_samples\n"
        "r = validate_samples(make_samples(), None, Path(sys.argv[1]))\n"
        "assert r.success, r.failed_checks\n"
        "bad = [m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')]\n"
        "assert not bad, bad\n"
    )
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(REPO))
    docs = tmp_path / "docs" / "site"
    done = subprocess.run(
        [sys.executable, "-c", code, str(docs)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(home.iterdir()) == [] and list(cwd.iterdir()) == []
    assert (docs / "index.html").is_file()
