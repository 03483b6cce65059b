"""Hostile inputs to the ingest: every bad file or row is named, nothing crashes,
the good files of the same ingest still land, and the row accounting adds up.

The logs are real Inspect logs (two offline ``inspect_ai.eval`` runs per
module, see ``tests.helpers.bad_logs.make_base_logs``), edited through Inspect's own
reader/writer or damaged byte-wise. Each test ingests a landing folder that
holds the two good logs (suites ``good_eval`` and ``good_json``) next to the
bad input.

The last group of tests pins bugs these tests found (and that were fixed):
hostile names and eval ids, two files of one eval, colliding error records.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bad_logs as bl

import evalpipeline.cli.main as cli
from evalpipeline.ingest import ScoreNormalisation, find_log_files, ingest_paths
from evalpipeline.lake import Lake, sha256_file

MODEL = bl.MODEL
DEFAULT_KNOWN = "['C', 'I', 'N', 'P']"  # the default value_map's keys, as reasons list them
EXPECTED_SCORE = {"C": 1.0, "I": 0.0}


# -- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    """One real Inspect log per format (model ``bl.MODEL``, suite ``bl.SUITE``, 3 items x 2 epochs)."""
    return bl.make_base_logs(tmp_path_factory.mktemp("base_logs"))


@pytest.fixture(scope="module")
def good_templates(base, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("good_logs")
    return {
        "eval": bl.derive(base["eval"], out / "good.eval", suite="good_eval"),
        "json": bl.derive(base["json"], out / "good.json", suite="good_json"),
    }


@pytest.fixture
def landing(tmp_path) -> Path:
    folder = tmp_path / "landing"
    folder.mkdir()
    return folder


@pytest.fixture
def good(landing, good_templates) -> list[Path]:
    """The two good logs, copied into this test's landing folder."""
    return [bl.copy_file(src, landing / "good" / src.name) for src in good_templates.values()]


# -- helpers -----------------------------------------------------------------------


def ingest(source, lake_root: Path, normalisation: ScoreNormalisation | None = None, **kwargs):
    paths = find_log_files(source) if isinstance(source, Path) else [Path(p) for p in source]
    lake = Lake(lake_root)
    report = ingest_paths(paths, lake, normalisation or ScoreNormalisation(), **kwargs)
    return report, lake, paths


def all_rows(lake: Lake, table: str) -> pd.DataFrame:
    frames = [lake.read_partition(table, m, s) for m, s in lake.partitions(table)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["log_path", "item_id", "epoch"])


def keyed(frame: pd.DataFrame) -> dict[tuple[str, int], pd.Series]:
    return {(row.item_id, int(row.epoch)): row for row in frame.itertuples(index=False)}


def check_report(report, lake: Lake, paths: list[Path], good: list[Path], *, fresh_lake: bool = True) -> None:
    """Accounting adds up (report, partitions, files on disk); nothing is dropped; good files land."""
    assert report.files_seen == len(paths)
    assert report.rows_read == report.rows_ingested + report.rows_quarantined
    assert sum(report.quarantine_reasons.values()) == report.rows_quarantined
    for (model, suite), acc in report.partitions.items():
        assert acc.rows_read == acc.rows_ingested + acc.rows_quarantined, (model, suite)
        samples = lake.read_partition("samples", model, suite)
        quarantine = lake.read_partition("quarantine", model, suite)
        assert len(samples) == acc.rows_ingested, (model, suite)
        assert len(quarantine) == acc.rows_quarantined, (model, suite)
        if len(quarantine):
            assert quarantine["reason"].notna().all() and (quarantine["reason"].str.len() > 0).all()
    if fresh_lake:  # every sample of every readable file is in the account, once
        unreadable = {e.path for e in report.file_errors}
        expected = sum(len(bl.sample_keys(p)) for p in paths if str(p) not in unreadable)
        assert report.rows_read == expected
    samples = all_rows(lake, "samples")
    for path in good:
        assert str(path) not in {e.path for e in report.file_errors}
        mine = samples[samples["log_path"] == str(path)]
        assert sorted(zip(mine["item_id"], mine["epoch"].astype(int))) == sorted(bl.sample_keys(path)), path
        assert mine["score"].notna().all()


def the_file_error(report, lake: Lake, path: Path, *fragments: str):
    """The one file-level error for ``path``: names the file, holds ``fragments``, is recorded in the lake."""
    errors = [e for e in report.file_errors if e.path == str(path)]
    assert len(errors) == 1, report.file_errors
    error = errors[0]
    assert error.error.startswith(f"{path}: "), error.error
    for fragment in fragments:
        assert fragment in error.error, (fragment, error.error)
    records = [
        json.loads(p.read_text())
        for p in (lake.root / "file_errors").glob(f"{(error.sha256 or 'missing')[:16]}-*.json")
    ]
    assert {"path": str(path), "sha256": error.sha256, "error": error.error} in records
    # no row anywhere comes from the unreadable file
    for table in ("ingested", "samples", "quarantine"):
        rows = all_rows(lake, table)
        assert str(path) not in set(rows["log_path"]), table
    return error


# -- 1. truncated .eval ------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_truncated_eval_zip_is_a_file_error(base, good, landing, tmp_path, fraction):
    bad = bl.truncate(base["eval"], landing / "truncated.eval", fraction)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    error = the_file_error(report, lake, bad, "cannot read Inspect log header")
    assert re.search(r"EOCD|zip", error.error, re.I), error.error  # the zip's end record is missing
    assert len(report.file_errors) == 1
    assert set(report.partitions) == {(MODEL, "good_eval"), (MODEL, "good_json")}
    check_report(report, lake, paths, good)


# -- 2. corrupt .eval (not a zip) ---------------------------------------------------


@pytest.mark.parametrize("content", ["random_bytes", "zero_bytes", "json_text"])
def test_corrupt_eval_is_a_file_error(base, good, landing, tmp_path, content):
    bad = landing / "corrupt.eval"
    if content == "random_bytes":
        bl.random_bytes(bad, size=5000, seed=7)
    elif content == "zero_bytes":
        bl.empty_file(bad)
    else:  # a JSON log under a .eval name
        bl.copy_file(base["json"], bad)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    the_file_error(
        report, lake, bad, "empty file (0 bytes)" if content == "zero_bytes" else "cannot read Inspect log header"
    )
    assert len(report.file_errors) == 1
    check_report(report, lake, paths, good)


# -- 3. invalid JSON ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("syntax_error", ["cannot read Inspect log header"]),
        ("empty", ["empty file (0 bytes)"]),
        # the header streams fine; the cut-off samples do not
        ("truncated", ["cannot read samples", "EOF"]),
    ],
)
def test_invalid_json_is_a_file_error(base, good, landing, tmp_path, kind, expected):
    bad = landing / f"{kind}.json"
    if kind == "syntax_error":
        bl.json_syntax_error(base["json"], bad)
    elif kind == "empty":
        bl.empty_file(bad)
    else:
        bl.truncate(base["json"], bad, 0.5)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    the_file_error(report, lake, bad, *expected)
    assert len(report.file_errors) == 1
    check_report(report, lake, paths, good)


@pytest.mark.parametrize("cut", ["in_reductions", "before_last_brace", "trailing_text"])
def test_json_log_cut_after_its_samples_is_a_file_error(base, good, landing, tmp_path, cut):
    """Every sample is there, but the document is not whole: a copy still running, or a bad write.
    (inspect_ai's header reader already refuses cuts before ``reductions``, which follows the samples.)"""
    text = base["json"].read_text()
    reductions = text.index('"reductions"')
    assert reductions > text.index('"samples"'), "the base log must have data after its samples"
    bad = landing / f"{cut}.json"
    if cut == "in_reductions":
        bad.write_text(text[: (reductions + len(text)) // 2])
    elif cut == "before_last_brace":
        bad.write_text(text.rstrip()[:-1])
    else:
        bad.write_text(text + "\n{}")
    report, lake, paths = ingest(landing, tmp_path / "lake")

    the_file_error(report, lake, bad, "cannot read samples", "EOF" if cut != "trailing_text" else "after its end")
    assert len(report.file_errors) == 1
    check_report(report, lake, paths, good)


def test_json_log_with_trailing_whitespace_is_read(base, good, landing, tmp_path):
    spaced = landing / "spaced.json"
    spaced.write_text(base["json"].read_text() + "\n\n  \n")
    report, lake, paths = ingest(landing, tmp_path / "lake")

    assert not report.file_errors
    check_report(report, lake, paths, [*good, spaced])


@pytest.mark.parametrize(
    "kind, cause", [("syntax_error", r"pars|syntax|JSON|separated|expect"), ("empty", r"EOF|empty")]
)
def test_invalid_json_message_names_the_cause(base, good, landing, tmp_path, kind, cause):
    bad = landing / f"{kind}.json"
    if kind == "syntax_error":
        bl.json_syntax_error(base["json"], bad)
    else:
        bl.empty_file(bad)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    error = the_file_error(
        report, lake, bad, "cannot read Inspect log header" if kind == "syntax_error" else "empty file"
    )
    message = error.error.replace(str(bad), "<path>")  # the tmp path itself may hold 'json'
    assert re.search(cause, message, re.I), message


# -- 4. logs that did not finish ----------------------------------------------------


@pytest.mark.parametrize(
    "status, fmt", [("error", "json"), ("error", "eval"), ("cancelled", "eval"), ("cancelled", "json")]
)
def test_incomplete_log_is_quarantined_unless_accepted(base, good, landing, tmp_path, status, fmt):
    bad = bl.derive(base[fmt], landing / f"{status}.{fmt}", suite="incomplete", status=status)
    reason = f"log status is {status!r}: the eval did not finish (set accept_incomplete_logs to ingest)"

    report, lake, paths = ingest(landing, tmp_path / "lake")
    assert report.file_errors == []
    acc = report.partitions[(MODEL, "incomplete")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined) == (bl.N_SAMPLES, 0, bl.N_SAMPLES)
    quarantine = lake.read_partition("quarantine", MODEL, "incomplete")
    assert set(quarantine["reason"]) == {reason}
    assert set(quarantine["log_path"]) == {str(bad)}
    assert sorted(zip(quarantine["item_id"], quarantine["epoch"])) == sorted(bl.sample_keys(bad))
    assert report.quarantine_reasons == {reason: bl.N_SAMPLES}
    check_report(report, lake, paths, good)

    report, lake, paths = ingest(landing, tmp_path / "lake_accepting", accept_incomplete_logs=True)
    acc = report.partitions[(MODEL, "incomplete")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined) == (bl.N_SAMPLES, bl.N_SAMPLES, 0)
    samples = lake.read_partition("samples", MODEL, "incomplete")
    assert set(samples["log_path"]) == {str(bad)}
    assert {k: r.score for k, r in keyed(samples).items()} == {
        (item, epoch): EXPECTED_SCORE[grade] for item, grade in bl.ITEMS.items() for epoch in (1, 2)
    }
    check_report(report, lake, paths, good + [bad])


def test_started_log_is_a_file_error(base, good, landing, tmp_path):
    bad = bl.derive(base["eval"], landing / "started.eval", suite="running", status="started")
    report, lake, paths = ingest(landing, tmp_path / "lake", accept_incomplete_logs=True)

    the_file_error(report, lake, bad, "log status is 'started': the eval is still running")
    assert (MODEL, "running") not in report.partitions
    check_report(report, lake, paths, good)


# -- 5. no samples --------------------------------------------------------------------


@pytest.mark.parametrize("fmt, status", [("eval", "success"), ("json", "success"), ("eval", "error")])
def test_log_without_samples_is_a_file_error(base, good, landing, tmp_path, fmt, status):
    bad = bl.derive(base[fmt], landing / f"empty_run.{fmt}", suite="no_samples", status=status, edit=bl.remove_samples)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    the_file_error(report, lake, bad, f"log has no samples (status {status!r})")
    assert (MODEL, "no_samples") not in report.partitions
    assert len(report.file_errors) == 1
    check_report(report, lake, paths, good)


# -- 6. a sample without a score ------------------------------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_sample_without_score_is_quarantined(base, good, landing, tmp_path, fmt):
    from inspect_ai.scorer import Score

    bad = bl.derive(
        base[fmt],
        landing / f"unscored.{fmt}",
        suite="unscored",
        edit=bl.set_scores(
            bl.replace_scores("q2", 2, None),  # no score at all
            bl.replace_scores("q3", 1, {"other": Score(value="C")}),  # only another scorer's
        ),
    )
    report, lake, paths = ingest(landing, tmp_path / "lake")

    assert report.file_errors == []
    quarantine = keyed(lake.read_partition("quarantine", MODEL, "unscored"))
    assert set(quarantine) == {("q2", 2), ("q3", 1)}
    assert quarantine[("q2", 2)].reason == "sample 'q2' epoch 2: no score from scorer 'grade' (scores: none)"
    assert quarantine[("q3", 1)].reason == "sample 'q3' epoch 1: no score from scorer 'grade' (scores: ['other'])"
    for row in quarantine.values():
        assert row.log_path == str(bad)
        assert row.sample_index == bl.sample_keys(bad).index((row.item_id, row.epoch))
    samples = keyed(lake.read_partition("samples", MODEL, "unscored"))
    assert set(samples) == {(i, e) for i in bl.ITEMS for e in (1, 2)} - {("q2", 2), ("q3", 1)}
    acc = report.partitions[(MODEL, "unscored")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined) == (6, 4, 2)
    check_report(report, lake, paths, good)


# -- 7. unknown score strings ---------------------------------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_unknown_score_strings_are_quarantined_never_zero(base, good, landing, tmp_path, fmt):
    bad = bl.derive(
        base[fmt],
        landing / f"unknown.{fmt}",
        suite="unknown",
        edit=bl.set_scores(bl.set_score("q1", 1, "Q"), bl.set_score("q3", 2, "correct")),
    )
    report, lake, paths = ingest(landing, tmp_path / "lake")

    quarantine = keyed(lake.read_partition("quarantine", MODEL, "unknown"))
    assert set(quarantine) == {("q1", 1), ("q3", 2)}
    assert quarantine[("q1", 1)].reason == (
        f"sample 'q1' epoch 1: unknown score value 'Q' (value_map knows {DEFAULT_KNOWN})"
    )
    assert quarantine[("q3", 2)].reason == (
        f"sample 'q3' epoch 2: unknown score value 'correct' (value_map knows {DEFAULT_KNOWN})"
    )
    for key, raw in ((("q1", 1), '"Q"'), (("q3", 2), '"correct"')):
        row = quarantine[key]
        assert row.score_raw == raw and row.log_path == str(bad)
        assert pd.isna(row.score) and pd.isna(row.correct)  # not read as 0 / False
    samples = lake.read_partition("samples", MODEL, "unknown")
    assert not set(samples["score_raw"]) & {'"Q"', '"correct"'}
    assert {k: r.score for k, r in keyed(samples).items()} == {
        (i, e): EXPECTED_SCORE[g] for i, g in bl.ITEMS.items() for e in (1, 2) if (i, e) not in {("q1", 1), ("q3", 2)}
    }
    assert report.quarantine_reasons == {
        f"unknown score value 'Q' (value_map knows {DEFAULT_KNOWN})": 1,
        f"unknown score value 'correct' (value_map knows {DEFAULT_KNOWN})": 1,
    }
    check_report(report, lake, paths, good)

    custom = ScoreNormalisation(value_map={"C": 1.0, "I": 0.0, "Q": 0.25, "correct": 1.0})
    report, lake, paths = ingest(landing, tmp_path / "lake_custom_map", custom)
    acc = report.partitions[(MODEL, "unknown")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined) == (6, 6, 0)
    samples = keyed(lake.read_partition("samples", MODEL, "unknown"))
    assert samples[("q1", 1)].score == 0.25 and pd.isna(samples[("q1", 1)].correct)
    assert samples[("q3", 2)].score == 1.0 and samples[("q3", 2)].correct
    check_report(report, lake, paths, good + [bad])


# -- 8. duplicates --------------------------------------------------------------------


def test_duplicate_within_a_log_keeps_the_first(base, good, landing, tmp_path):
    # JSON only: Inspect's .eval zip names sample files by id and epoch, so it cannot hold two
    bad = bl.derive(base["json"], landing / "dup.json", suite="dup", edit=bl.duplicate_sample("q2", 1))
    keys = bl.sample_keys(bad)
    first, second = [i for i, k in enumerate(keys) if k == ("q2", 1)]
    report, lake, paths = ingest(landing, tmp_path / "lake")

    quarantine = lake.read_partition("quarantine", MODEL, "dup")
    assert len(quarantine) == 1
    row = quarantine.iloc[0]
    assert (row.item_id, row.epoch, row.sample_index, row.log_path) == ("q2", 1, second, str(bad))
    assert row.reason == f"duplicate (item_id 'q2', epoch 1) in the log; first seen at sample index {first}"
    kept = keyed(lake.read_partition("samples", MODEL, "dup"))
    assert len(kept) == 6 and kept[("q2", 1)].sample_index == first
    acc = report.partitions[(MODEL, "dup")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined) == (7, 6, 1)
    assert report.quarantine_reasons == {"duplicate (item_id, epoch) within one log": 1}
    check_report(report, lake, paths, good)


@pytest.mark.parametrize("order", ["one_call", "newer_first", "older_first"])
def test_duplicate_across_runs_keeps_the_newer(base, good, landing, tmp_path, order):
    older = bl.derive(
        base["eval"], landing / "runs" / "b_older.eval", suite="rerun", created="2026-01-01T00:00:00+00:00"
    )
    newer = bl.derive(
        base["json"],
        landing / "runs" / "a_newer.json",  # sorts (and is read) first
        suite="rerun",
        created="2026-03-01T00:00:00+00:00",
        edit=bl.set_score("q1", 1, "I"),  # the rerun changed one outcome
    )
    new_id = bl.eval_id_of(newer)
    lake_root = tmp_path / "lake"
    if order == "one_call":
        report, lake, paths = ingest(landing, lake_root)
        check_report(report, lake, paths, good)
    else:
        first, second = (newer, older) if order == "newer_first" else (older, newer)
        report, lake, _ = ingest([first], lake_root)
        check_report(report, lake, [first], [first])
        report, lake, _ = ingest([second], lake_root)
        check_report(report, lake, [second], [], fresh_lake=False)
        assert report.rows_read == 12  # the partition's account covers both runs

    acc = report.partitions[(MODEL, "rerun")]
    assert (acc.rows_read, acc.rows_ingested, acc.rows_quarantined, acc.logs) == (12, 6, 6, 2)
    samples = keyed(lake.read_partition("samples", MODEL, "rerun"))
    assert {r.log_path for r in samples.values()} == {str(newer)}
    assert {r.eval_id for r in samples.values()} == {new_id}
    assert samples[("q1", 1)].score == 0.0
    quarantine = lake.read_partition("quarantine", MODEL, "rerun")
    assert set(quarantine["log_path"]) == {str(older)}
    assert sorted(quarantine["reason"]) == sorted(
        f"superseded: (item_id {i!r}, epoch {e}) is also in eval_id {new_id} ({newer}), which is kept as the newer run"
        for i in bl.ITEMS
        for e in (1, 2)
    )
    assert report.quarantine_reasons == {"superseded by a newer run of the same (item_id, epoch)": 6}


@pytest.mark.parametrize("same_run", [True, False])
def test_two_logs_created_in_one_second_say_why_one_is_kept(base, good, landing, tmp_path, same_run):
    """Inspect records whole seconds, so two runs may tie on created_at: the reason must not call them one
    run unless they share an eval_id (a copy of one log)."""
    created = "2026-02-01T12:00:00+00:00"
    first = bl.derive(base["eval"], landing / "runs" / "a.eval", suite="tie", created=created)
    second = bl.derive(
        base["json"],
        landing / "runs" / "b.json",
        suite="tie",
        created=created,
        eval_id=bl.eval_id_of(first) if same_run else None,
    )
    report, lake, paths = ingest(landing, tmp_path / "lake")
    check_report(report, lake, paths, good)
    samples = lake.read_partition("samples", MODEL, "tie")
    kept = samples["log_path"].iloc[0]
    assert set(samples["log_path"]) == {kept}
    kept_id = samples["eval_id"].iloc[0]
    quarantine = lake.read_partition("quarantine", MODEL, "tie")
    assert len(quarantine) == 6 and set(quarantine["log_path"]) == {str(first), str(second)} - {kept}
    why = (
        "as the later copy of the same run"
        if same_run
        else "by eval_id and path order, not as newer: both runs were created at 2026-02-01T12:00:00+00:00 "
        "(Inspect records whole seconds); to keep this row instead, take the kept log out of the landing "
        "folder and `evalpipeline forget` it"
    )
    assert sorted(quarantine["reason"]) == sorted(
        f"superseded: (item_id {i!r}, epoch {e}) is also in eval_id {kept_id} ({kept}), which is kept {why}"
        for i in bl.ITEMS
        for e in (1, 2)
    )


# -- 9. model names that are not path-safe --------------------------------------------


@pytest.mark.parametrize(
    "model, key",
    [
        (MODEL, "mockllm%2Facme%2Flarge%20model%20v2"),  # as Inspect itself logged it
        (".hidden/model", "%2Ehidden%2Fmodel"),
        ("odd%2Fname|a,b", "odd%252Fname%7Ca%2Cb"),  # a literal %2F must survive the round trip
    ],
)
def test_model_name_with_slash_gets_an_encoded_partition(base, good, landing, tmp_path, model, key):
    if model == MODEL:
        log = bl.copy_file(base["eval"], landing / "slash.eval")
    else:
        log = bl.derive(base["eval"], landing / "slash.eval", model=model)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    assert report.file_errors == []
    assert (model, bl.SUITE) in report.partitions
    assert (lake.root / "samples" / f"model={key}" / f"suite={bl.SUITE}" / "samples.parquet").is_file()
    model_dirs = sorted(p.name for p in (lake.root / "samples").iterdir())
    assert set(model_dirs) == {f"model={key}", "model=mockllm%2Facme%2Flarge%20model%20v2"}
    assert (model, bl.SUITE) in lake.partitions("samples")

    frame = pd.read_parquet(lake.root / "samples")  # pyarrow decodes the Hive keys
    frame["model"] = frame["model"].astype(str)
    assert set(frame["model"]) == {model, MODEL}
    mine = frame[frame["log_path"] == str(log)]
    assert len(mine) == bl.N_SAMPLES and set(mine["model"]) == {model} and set(mine["suite"].astype(str)) == {bl.SUITE}
    check_report(report, lake, paths, good + [log])


# -- 10. numeric scores out of range, NaN, infinity -----------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_numeric_score_out_of_range_or_nan_is_quarantined(base, good, landing, tmp_path, fmt):
    bad = bl.derive(
        base[fmt],
        landing / f"numeric.{fmt}",
        suite="numeric",
        edit=bl.set_scores(
            bl.set_score("q1", 1, 3.0),
            bl.set_score("q2", 1, -0.5),
            bl.set_score("q3", 1, float("nan")),
            bl.set_score("q1", 2, float("inf")),
            bl.set_score("q2", 2, 0.7),
        ),
    )
    report, lake, paths = ingest(landing, tmp_path / "lake")

    quarantine = keyed(lake.read_partition("quarantine", MODEL, "numeric"))
    assert {k: r.reason for k, r in quarantine.items()} == {
        ("q1", 1): "sample 'q1' epoch 1: score 3.0 outside numeric_range [0, 1]",
        ("q2", 1): "sample 'q2' epoch 1: score -0.5 outside numeric_range [0, 1]",
        ("q3", 1): "sample 'q3' epoch 1: score nan is not finite",
        ("q1", 2): "sample 'q1' epoch 2: score inf is not finite",
    }
    assert all(pd.isna(r.score) and r.log_path == str(bad) for r in quarantine.values())
    samples = keyed(lake.read_partition("samples", MODEL, "numeric"))
    assert set(samples) == {("q2", 2), ("q3", 2)}
    assert math.isclose(samples[("q2", 2)].score, 0.7) and pd.isna(samples[("q2", 2)].correct)
    check_report(report, lake, paths, good)

    report, lake, paths = ingest(landing, tmp_path / "lake_0_5", ScoreNormalisation(numeric_range=(0.0, 5.0)))
    quarantine = keyed(lake.read_partition("quarantine", MODEL, "numeric"))
    assert {k: r.reason for k, r in quarantine.items()} == {
        ("q2", 1): "sample 'q2' epoch 1: score -0.5 outside numeric_range [0, 5]",
        ("q3", 1): "sample 'q3' epoch 1: score nan is not finite",
        ("q1", 2): "sample 'q1' epoch 2: score inf is not finite",
    }
    samples = keyed(lake.read_partition("samples", MODEL, "numeric"))
    assert math.isclose(samples[("q1", 1)].score, 0.6) and math.isclose(samples[("q2", 2)].score, 0.14)
    check_report(report, lake, paths, good)


# -- 11. the CLI ----------------------------------------------------------------------


def test_cli_ingest_mixed_folder(base, good, landing, tmp_path, capsys):
    truncated = bl.truncate(base["eval"], landing / "bad" / "truncated.eval")
    empty = bl.empty_file(landing / "bad" / "empty.json")
    bl.derive(base["json"], landing / "cancelled.json", suite="incomplete", status="cancelled")
    bl.derive(base["eval"], landing / "unknown.eval", suite="unknown", edit=bl.set_score("q2", 2, "Q"))
    lake_root = tmp_path / "lake"

    code = cli.main(["ingest", str(landing), "--lake", str(lake_root)])
    out = capsys.readouterr().out

    assert code == 0
    assert "files: 6 seen, 4 read, 2 unreadable" in out
    match = re.search(r"^rows: (\d+) read = (\d+) ingested \+ (\d+) quarantined$", out, re.M)
    assert match, out
    read, ingested, quarantined = map(int, match.groups())
    assert read == ingested + quarantined
    assert (read, ingested, quarantined) == (24, 17, 7)  # 4 readable logs x 6; cancelled 6 + unknown 1
    for bad in (truncated, empty):
        expected = "empty file (0 bytes)" if bad == empty else "cannot read Inspect log header"
        assert f"{bad}: NOT INGESTED: {expected}" in out
        assert re.search(rf"^  unreadable: {re.escape(str(bad))}: {re.escape(expected)}", out, re.M)
    assert f"  {MODEL} x incomplete: 6 read = 0 ingested (0 errored, flagged) + 6 quarantined, from 1 log(s)" in out
    assert f"  {MODEL} x unknown: 6 read = 5 ingested (0 errored, flagged) + 1 quarantined, from 1 log(s)" in out
    assert f"quarantined x1: unknown score value 'Q' (value_map knows {DEFAULT_KNOWN})" in out
    for line in re.findall(r"^  .* x .*: (\d+) read = (\d+) ingested .*\+ (\d+) quarantined", out, re.M):
        r, i, q = map(int, line)
        assert r == i + q
    recorded = [json.loads(p.read_text()) for p in sorted((lake_root / "file_errors").iterdir())]
    assert sorted((r["path"], r["sha256"]) for r in recorded) == sorted(
        (str(p), sha256_file(p)) for p in (truncated, empty)
    )


def test_cli_ingest_missing_path(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "logs"
    code = cli.main(["ingest", str(missing), "--lake", str(tmp_path / "lake")])
    captured = capsys.readouterr()

    assert code == 2
    assert captured.err == f"evalpipeline ingest: no such file or folder: {missing}\n"
    assert captured.out == ""
    assert not (tmp_path / "lake").exists()


def test_cli_ingest_only_bad_files_fails(base, landing, tmp_path, capsys):
    bad = bl.random_bytes(landing / "junk.eval")
    code = cli.main(["ingest", str(landing), "--lake", str(tmp_path / "lake")])
    out = capsys.readouterr().out

    assert code == 1
    assert "rows: 0 read = 0 ingested + 0 quarantined" in out
    assert f"unreadable: {bad}: cannot read Inspect log header" in out


def test_cli_rejects_bad_options(landing, tmp_path, capsys):
    code = cli.main(["ingest", str(landing), "--lake", str(tmp_path / "lake"), "--numeric-range", "1", "0"])
    assert code == 2
    assert "numeric_range must be finite with low < high, got (1.0, 0.0)" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["ingest", str(landing), "--lake", str(tmp_path / "lake"), "--value-map", "Q"])
    assert exit_info.value.code == 2
    assert "argument --value-map: expected KEY=VALUE pairs separated by commas, got 'Q'" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


# -- bugs these tests found, fixed in the library ---------------------------------------


@pytest.mark.parametrize("field, value", [("model", ""), ("model", "m" * 250), ("suite", "s" * 250)])
def test_unkeyable_model_or_suite_name_is_a_file_error(base, good, landing, tmp_path, field, value):
    # "aaa_" sorts before "good/": the bad log is read first
    bad = bl.derive(base["json"], landing / "aaa_badname.json", **{field: value})
    report, lake, paths = ingest(landing, tmp_path / "lake")

    the_file_error(report, lake, bad, "partition key")
    check_report(report, lake, paths, good)
    # the nightly's discovery reports it too (it held a partition no run could make before)
    from evalpipeline.steps.discovery import discover

    found = discover(Lake(tmp_path / "lake2"), landing)
    assert [e.path for e in found.unreadable] == [str(bad)] and "partition key" in found.unreadable[0].error
    assert {m for m, _ in found.partitions} == {bl.MODEL}


@pytest.mark.parametrize("eval_id", ["a/b", "x/../../../../../escaped"])
def test_eval_id_is_not_trusted_as_a_file_name(base, good, landing, tmp_path, eval_id):
    bad = bl.derive(base["json"], landing / "odd_id.json", suite="odd_id", eval_id=eval_id)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    assert bl.files_outside(tmp_path, lake.root) == sorted(str(p.relative_to(tmp_path)) for p in paths)
    if report.file_errors:  # rejecting the log is fine, if it says why
        the_file_error(report, lake, bad, "eval_id")
    else:
        acc = report.partitions[(MODEL, "odd_id")]
        assert (acc.rows_read, acc.rows_ingested) == (6, 6)
    check_report(report, lake, paths, good)


def test_two_files_with_one_eval_id_are_both_accounted(base, good, landing, tmp_path):
    first = bl.derive(base["json"], landing / "same_a.json", suite="same_id", eval_id="SAMEID")
    second = bl.derive(
        base["eval"], landing / "same_b.eval", suite="same_id", eval_id="SAMEID", edit=bl.set_score("q1", 1, "I")
    )
    report, lake, paths = ingest(landing, tmp_path / "lake")

    check_report(report, lake, paths, good)  # rows_read == 6 + 6 + the good files'
    staged_paths = set(all_rows(lake, "samples")["log_path"]) | set(all_rows(lake, "quarantine")["log_path"])
    assert {str(first), str(second)} <= staged_paths


def test_every_unreadable_file_gets_its_own_error_record(good, landing, tmp_path):
    a = bl.empty_file(landing / "a" / "empty.json")
    b = bl.empty_file(landing / "b" / "empty.json")
    report, lake, paths = ingest(landing, tmp_path / "lake")

    assert {e.path for e in report.file_errors} == {str(a), str(b)}
    check_report(report, lake, paths, good)
    recorded = {json.loads(p.read_text())["path"] for p in (lake.root / "file_errors").glob("*.json")}
    assert recorded == {str(a), str(b)}


def test_summary_reason_with_colon_in_item_id(base, good, landing, tmp_path):
    def rename_q1(log):
        for sample in log.samples:
            if sample.id == "q1":
                sample.id = "q1: variant"
        bl.set_score("q1: variant", 1, "Q")(log)

    bl.derive(base["json"], landing / "colon.json", suite="colon", edit=rename_q1)
    report, lake, paths = ingest(landing, tmp_path / "lake")

    check_report(report, lake, paths, good)
    assert report.quarantine_reasons == {f"unknown score value 'Q' (value_map knows {DEFAULT_KNOWN})": 1}


def test_a_log_restored_after_being_unreadable_loses_its_record_at_the_next_discovery(good, landing, tmp_path):
    """A log damaged after its ingest and then restored byte for byte is not ingested again (the lake
    holds its rows), so the ingest that clears a repaired file's record never ran: the record, and a
    '(unreadable file)' row in the accounting, stayed for good."""
    from evalpipeline.steps.discovery import discover

    report, lake, paths = ingest(landing, tmp_path / "lake")
    check_report(report, lake, paths, good)
    target = next(p for p in good if p.suffix == ".eval")
    original = target.read_bytes()
    target.write_bytes(original[: len(original) // 2])
    assert {e.path for e in discover(lake, landing).unreadable} == {str(target)}
    assert [json.loads(p.read_text())["path"] for p in (lake.root / "file_errors").glob("*.json")] == [str(target)]

    target.write_bytes(original)
    discovery = discover(lake, landing)
    assert discovery.unreadable == [] and discovery.changed == set()  # nothing to ingest again
    assert list((lake.root / "file_errors").glob("*.json")) == []


def test_names_at_the_length_limit_are_validated_not_a_traceback(tmp_path, capsys):
    """Great Expectations names Data Docs folders after the batch label; "<model> x <suite>" of two
    200-character names would be longer than a file name may be. The label is shortened with a hash of the whole."""
    from evalpipeline.steps.samples import VALIDATION_LABEL_BYTES, validation_label

    model, suite = "m" * 200, "s" * 200
    table = tmp_path / "long.csv"
    table.write_text("model,suite,item_id,score\n" + "".join(f"{model},{suite},q{i},1\n" for i in range(3)))
    assert cli.main(["ingest", str(table), "--lake", str(tmp_path / "lake")]) == 0
    out = capsys.readouterr().out
    assert "3 read = 3 ingested" in out and "validation: all checks passed" in out
    label = validation_label(model, suite)
    assert len(label.encode()) <= VALIDATION_LABEL_BYTES and label != validation_label(model, suite + "x")
    assert validation_label("a", "b") == "a x b"


def test_control_characters_in_names_are_shown_as_escapes_on_the_terminal(tmp_path, capsys):
    """A name with a line break would forge a leaderboard line, and ANSI escapes would recolour the
    terminal: the CLI's lines and the plain-text leaderboard show them as escapes."""
    from evalpipeline.steps.samples import write_accuracy_posteriors, write_suite_leaderboard
    from evalpipeline.report.terminal import format_leaderboard

    names = ["fake\n  1. winner", "\x1b[31mred\x1b[0m", "ok"]
    table = tmp_path / "ctl.csv"
    table.write_text(
        "model,suite,item_id,score\n" + "".join(f'"{m}",s,q{i},{i % 2}\n' for m in names for i in range(3))
    )
    assert cli.main(["ingest", str(table), "--lake", str(tmp_path / "lake"), "--no-validate"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\n  1. winner" not in out
    assert "fake\\n  1. winner x s: 3 read" in out and "\\x1b[31mred\\x1b[0m x s: 3 read" in out
    lake = Lake(tmp_path / "lake")
    for name in names:
        write_accuracy_posteriors(lake, name, "s")
    board = format_leaderboard(write_suite_leaderboard(lake, "s")[0])
    assert board.count("\n") == 2 and "\x1b" not in board and "fake\\n  1. winner" in board


def test_a_json_log_score_beyond_float_range_is_quarantined_not_the_whole_log(good_templates, landing, tmp_path):
    # json.loads-style parsing gives Python ints of any size; float() of one raised OverflowError, which made
    # the whole log unreadable and lost its other samples
    text = good_templates["json"].read_text()
    start = text.index('"samples": [')
    at = text.index('"value": "C"', start)
    bad = landing / "huge.json"
    bad.write_text(text[:at] + '"value": 1' + "0" * 400 + text[at + len('"value": "C"') :])
    report, lake, _ = ingest([bad], tmp_path / "lake")
    assert report.file_errors == []
    quarantine = lake.read_partition("quarantine", MODEL, "good_json")
    assert len(quarantine) == 1 and quarantine["reason"].iloc[0].endswith(
        "score 1000000000000000000000000000000000000... is not finite as a number (beyond 1.8e308)"
    )
    assert report.rows_read == report.rows_ingested + 1
