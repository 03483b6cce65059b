"""Ingest of lm-evaluation-harness ``--log_samples`` output.

The fixture run in ``tests/fixtures/lm_eval/`` was written by the harness's
own CLI code path, offline (``tests/fixtures/make_lm_eval_fixtures.py``):
model ``acme/toy-160m``; a group ``toy_science`` of two multiple-choice
tasks (``acc``, ``acc_norm``) and a generate task ``toy_arith`` with two
filters. Each test copies it to a temporary folder, edits the copy where it
needs a damaged file, and ingests through the public path
(``find_log_files`` -> ``ingest_paths``), checking rows against the samples
lines and means against the harness's own aggregate in the results file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evalpipeline.ingest import IngestOptions, ScoreNormalisation, find_log_files, ingest_paths, scan_sources
from evalpipeline.ingest.lm_eval import LmEvalReader, model_of
from evalpipeline.lake import Lake, sha256_file
from evalpipeline.steps.samples import read_samples

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lm_eval"
MODEL = "acme/toy-160m"
TASKS = ("toy_physics", "toy_biology", "toy_arith")


class Run:
    """A copy of the fixture run: its folder, results file and samples files by task."""

    def __init__(self, folder: Path):
        self.folder = folder
        (self.results,) = folder.glob("results_*.json")
        self.timestamp = self.results.stem.split("_", 1)[1]
        self.samples = {task: folder / f"samples_{task}_{self.timestamp}.jsonl" for task in TASKS}

    def data(self) -> dict:
        return json.loads(self.results.read_text())

    def write_data(self, data: dict) -> None:
        self.results.write_text(json.dumps(data, indent=2))

    def lines(self, task: str) -> list[dict]:
        return [json.loads(line) for line in self.samples[task].read_text().splitlines()]

    def write_lines(self, task: str, lines: list[str]) -> None:
        self.samples[task].write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def run(tmp_path) -> Run:
    (source,) = [p for p in FIXTURES.iterdir() if p.is_dir()]
    folder = tmp_path / "logs" / source.name
    shutil.copytree(source, folder)
    return Run(folder)


def ingest(paths, tmp_path, options=None, lake_name="lake"):
    lake = Lake(tmp_path / lake_name)
    report = ingest_paths(list(paths), lake, options)
    return lake, report


def quarantine(lake: Lake, suite: str) -> pd.DataFrame:
    return lake.read_partition("quarantine", MODEL, suite)


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts, missing values as None (chunk frames infer dtypes of their own)."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def assert_accounted(report, expected_rows: int | None = None):
    for account in report.partitions.values():
        assert account.rows_read == account.rows_ingested + account.rows_quarantined
    assert report.rows_read == report.rows_ingested + report.rows_quarantined
    if expected_rows is not None:
        assert report.rows_read == expected_rows


# -- the fixture is what the harness writes -----------------------------------------


def test_fixture_has_the_harness_layout(run):
    data = run.data()
    assert data["model_name"] == MODEL and data["lm_eval_version"]
    assert data["config"]["model_args"]["pretrained"] == MODEL
    assert data["group_subtasks"] == {"toy_science": ["toy_physics", "toy_biology"]}
    assert isinstance(data["date"], float)
    for task, path in run.samples.items():
        assert path.is_file(), path
        for line in run.lines(task):
            assert {"doc_id", "doc", "target", "filter", "metrics", "doc_hash"} <= set(line)
            assert all(metric in line for metric in line["metrics"])
    assert {line["filter"] for line in run.lines("toy_arith")} == {"strict-match", "flexible-extract"}
    assert run.lines("toy_physics")[0]["metrics"] == ["acc", "acc_norm"]


# -- reading a results file ------------------------------------------------------------


def test_results_file_reads_every_task_with_its_group_as_domain(run, tmp_path):
    files = find_log_files(run.folder.parent)
    assert files == [run.results]  # the samples files are read through it
    lake, report = ingest(files, tmp_path)
    assert not report.file_errors
    assert set(report.partitions) == {(MODEL, task) for task in TASKS}
    assert_accounted(report, expected_rows=sum(len(run.lines(t)) for t in TASKS))
    aggregate = run.data()["results"]
    for task in ("toy_physics", "toy_biology"):
        samples = read_samples(lake, MODEL, task)
        lines = run.lines(task)
        assert len(samples) == len(lines) and quarantine(lake, task).empty
        assert (samples["domain"] == "toy_science").all()
        assert (samples["scorer"] == "acc").all()  # the first metric, filter none
        assert (samples["epoch"] == 1).all() and (samples["model"] == MODEL).all()
        by_doc = {str(line["doc_id"]): line for line in lines}
        for row in samples.itertuples():
            line = by_doc[row.item_id]
            assert row.score == line["acc"] and row.correct == (line["acc"] == 1.0)
            assert json.loads(row.scores_json) == {"acc": line["acc"], "acc_norm": line["acc_norm"]}
            metadata = json.loads(row.metadata_json)
            assert metadata["doc_hash"] == line["doc_hash"] and metadata["target"] == line["target"]
            assert "doc" not in metadata
        assert samples["score"].mean() == pytest.approx(aggregate[task]["acc,none"])
    arith = read_samples(lake, MODEL, "toy_arith")
    assert arith["domain"].isna().all()


def test_run_id_eval_id_and_created_at(run, tmp_path):
    lake, _ = ingest([run.results], tmp_path)
    samples = read_samples(lake, MODEL, "toy_physics")
    assert (samples["run_id"] == run.timestamp).all()
    assert (samples["eval_id"] == f"lm-eval-{run.timestamp}").all()
    expected = pd.Timestamp(run.data()["date"], unit="s", tz="UTC")
    assert (samples["created_at"] - expected).abs().max() < pd.Timedelta(milliseconds=1)
    data = run.data()
    del data["date"]  # then the timestamp in the file name (the harness's clock, zone unknown: read as UTC)
    run.write_data(data)
    lake, _ = ingest([run.results], tmp_path, lake_name="lake2")
    stamp = read_samples(lake, MODEL, "toy_physics")["created_at"].iloc[0]
    assert stamp == pd.Timestamp(pd.to_datetime(run.timestamp, format="%Y-%m-%dT%H-%M-%S.%f"), tz="UTC")


def test_provenance_names_the_samples_file_and_line(run, tmp_path):
    lake, _ = ingest([run.results], tmp_path)
    for task in TASKS:
        path = run.samples[task]
        rows = pd.concat([read_samples(lake, MODEL, task), quarantine(lake, task)], ignore_index=True)
        assert (rows["log_path"] == str(path)).all()
        assert (rows["log_sha256"] == sha256_file(path)).all()
        assert (rows["log_format"] == "lm-eval").all()
        lines = run.lines(task)
        for row in rows.itertuples():
            assert row.sample_index == row.source_line - 1
            assert str(lines[int(row.source_line) - 1]["doc_id"]) == row.item_id


# -- choosing the scorer ----------------------------------------------------------------


def test_several_metrics_choose_acc_norm(run, tmp_path):
    lake, report = ingest([run.results], tmp_path, ScoreNormalisation(scorer="acc_norm"))
    assert_accounted(report)
    aggregate = run.data()["results"]
    for task in ("toy_physics", "toy_biology"):
        samples = read_samples(lake, MODEL, task)
        assert (samples["scorer"] == "acc_norm").all() and len(samples) == len(run.lines(task))
        assert samples["score"].mean() == pytest.approx(aggregate[task]["acc_norm,none"])
    # the generate task has no acc_norm: all its rows are quarantined, saying which scorers it has
    assert (MODEL, "toy_arith") in report.partitions and report.partitions[(MODEL, "toy_arith")].rows_ingested == 0
    reasons = quarantine(lake, "toy_arith")["reason"]
    assert len(reasons) == 6
    assert reasons.str.contains(
        "task 'toy_arith' has no scorer 'acc_norm' \\(scorers: exact_match,strict-match, exact_match,flexible-extract"
    ).all()


def test_scorer_from_column_map(run, tmp_path):
    lake, _ = ingest([run.results], tmp_path, IngestOptions(column_map={"score": "acc_norm"}))
    assert (read_samples(lake, MODEL, "toy_physics")["scorer"] == "acc_norm").all()


def test_generate_task_with_two_filters(run, tmp_path):
    aggregate = run.data()["results"]["toy_arith"]
    # default: the task's first metric,filter in the results file (strict-match; there is no filter none)
    lake, report = ingest([run.results], tmp_path)
    samples = read_samples(lake, MODEL, "toy_arith")
    assert (samples["scorer"] == "exact_match,strict-match").all()
    assert sorted(samples["item_id"]) == ["0", "1", "2"]
    assert samples["score"].mean() == pytest.approx(aggregate["exact_match,strict-match"])
    assert (samples["source_line"] <= 3).all()  # the strict-match lines come first
    assert all(
        json.loads(s) == {"exact_match,strict-match": v} for s, v in zip(samples["scores_json"], samples["score"])
    )
    other = quarantine(lake, "toy_arith")
    assert sorted(other["source_line"]) == [4, 5, 6]
    assert (
        other["reason"].str.endswith(": scorer 'exact_match,flexible-extract' not chosen (choose with --scorer)")
    ).all()
    assert report.partitions[(MODEL, "toy_arith")].rows_read == 6
    # --scorer with the filter reads the other lines
    flexible = ScoreNormalisation(scorer="exact_match,flexible-extract")
    lake, _ = ingest([run.results], tmp_path, flexible, lake_name="lake2")
    samples = read_samples(lake, MODEL, "toy_arith")
    assert (samples["scorer"] == "exact_match,flexible-extract").all()
    assert samples["score"].mean() == pytest.approx(aggregate["exact_match,flexible-extract"])
    assert (quarantine(lake, "toy_arith")["reason"].str.contains("scorer 'exact_match,strict-match' not chosen")).all()
    # a metric without a filter: filter none where the task has it, else its first filter
    lake, _ = ingest([run.results], tmp_path, ScoreNormalisation(scorer="exact_match"), lake_name="lake3")
    assert (read_samples(lake, MODEL, "toy_arith")["scorer"] == "exact_match,strict-match").all()


# -- a samples file on its own ----------------------------------------------------------


def test_target_and_the_filtered_answer_where_it_is_text(run, tmp_path):
    """A generate task's filtered response is its answer; a multiple-choice task logs log-likelihoods,
    no answer text, so its answer is null; the target is the line's (an index as text; several as JSON)."""
    lines = run.lines("toy_arith")
    lines[1]["filtered_resps"] = "15"  # a bare string reads as one
    lines[2]["filtered_resps"] = [["3"], ["x"]]  # two responses: not one plain answer
    lines[2]["target"] = ["3", "three"]
    run.write_lines("toy_arith", [json.dumps(line) for line in lines])
    lake, _ = ingest([run.results], tmp_path)
    arith = read_samples(lake, MODEL, "toy_arith").set_index("item_id")
    assert arith.loc["0", ["answer", "target"]].tolist() == ["4", "2 + 2 = 4\n#### 4"]
    assert arith.loc["1", "answer"] == "15"
    assert pd.isna(arith.loc["2", "answer"]) and arith.loc["2", "target"] == '["3", "three"]'
    physics = read_samples(lake, MODEL, "toy_physics")
    assert physics["answer"].isna().all()
    assert physics["target"].tolist() == [str(line["target"]) for line in run.lines("toy_physics")]


def test_samples_file_passed_directly(run, tmp_path):
    path = run.samples["toy_biology"]
    lake, report = ingest([path], tmp_path)
    assert not report.file_errors
    assert set(report.partitions) == {(MODEL, "toy_biology")}
    samples = read_samples(lake, MODEL, "toy_biology")
    assert len(samples) == 3 and (samples["log_path"] == str(path)).all()
    assert (samples["domain"] == "toy_science").all() and (samples["run_id"] == run.timestamp).all()
    assert (samples["log_sha256"] == sha256_file(path)).all()


def test_samples_file_without_results_file_is_a_clear_error(run, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    path = shutil.copy(run.samples["toy_physics"], alone)
    assert find_log_files(alone) == [Path(path)]  # nothing claims it
    lake, report = ingest(find_log_files(alone), tmp_path)
    assert not report.partitions
    (error,) = report.file_errors
    assert error.path == str(path)
    assert str(path) in error.error
    assert f"no lm-eval results file with timestamp {run.timestamp!r}" in error.error
    assert "the results file is needed for the model name" in error.error
    assert list((lake.root / "file_errors").glob("*.json"))


def test_file_names_without_harness_timestamp(run, tmp_path):
    """A timestamp that is not the harness's still ties the files; created_at is then unknown."""
    data = run.data()
    del data["date"]
    (tmp_path / "renamed").mkdir()
    results = tmp_path / "renamed" / "results_run1.json"
    results.write_text(json.dumps(data))
    shutil.copy(run.samples["toy_physics"], tmp_path / "renamed" / "samples_toy_physics_run1.jsonl")
    lake, report = ingest(find_log_files(tmp_path / "renamed"), tmp_path)
    assert not report.file_errors and set(report.partitions) == {(MODEL, "toy_physics")}
    samples = read_samples(lake, MODEL, "toy_physics")
    assert samples["created_at"].isna().all() and (samples["run_id"] == "run1").all()
    assert (samples["eval_id"] == "lm-eval-run1").all()


def test_results_file_of_an_output_path_ending_in_json(run, tmp_path):
    """``--output_path out/myrun.json`` names the results ``myrun_<ts>.json``; samples keep their names."""
    renamed = run.results.with_name(f"myrun_{run.timestamp}.json")
    run.results.rename(renamed)
    lake, report = ingest([renamed], tmp_path)
    assert not report.file_errors and len(report.partitions) == 3
    lake, report = ingest([run.samples["toy_physics"]], tmp_path, lake_name="lake2")
    assert not report.file_errors and set(report.partitions) == {(MODEL, "toy_physics")}


# -- damaged input ----------------------------------------------------------------------


def test_corrupt_lines_are_quarantined_with_their_line_number(run, tmp_path):
    task = "toy_physics"
    lines = run.samples[task].read_text().splitlines()
    no_doc_id = json.loads(lines[3])
    del no_doc_id["doc_id"]
    damaged = [lines[0], '{"doc_id": 1, "acc": ', lines[2], "[1, 2]", json.dumps(no_doc_id), lines[1]]
    run.write_lines(task, damaged)
    with open(run.samples[task], "ab") as handle:
        handle.write(b'{"doc_id": 9, "acc": 1.0, "x": "\xff\xfe"}\n\n')  # not UTF-8, then a blank line
    lake, report = ingest([run.results], tmp_path)
    assert not report.file_errors
    assert_accounted(report)
    account = report.partitions[(MODEL, task)]
    assert (account.rows_read, account.rows_ingested, account.rows_quarantined) == (7, 3, 4)
    samples = read_samples(lake, MODEL, task)
    assert sorted(zip(samples["item_id"], samples["source_line"])) == [("0", 1), ("1", 6), ("2", 3)]
    bad = quarantine(lake, task).set_index("source_line")
    assert list(bad.index) == [2, 4, 5, 7]
    assert bad.loc[2, "item_id"] == "line-2" and bad.loc[2, "epoch"] == 1
    assert bad.loc[2, "reason"].startswith("sample 'line-2' epoch 1: line 2 is not valid JSON (")
    assert "line 4 is not a JSON object (a list)" in bad.loc[4, "reason"]
    assert "line 5 has no doc_id" in bad.loc[5, "reason"]
    assert "line 7 is not valid JSON" in bad.loc[7, "reason"] and "utf-8" in bad.loc[7, "reason"]
    assert (bad["log_path"] == str(run.samples[task])).all()
    assert bad["score"].isna().all()


def test_missing_metric_and_nan_are_quarantined(run, tmp_path):
    task = "toy_biology"
    lines = run.lines(task)
    del lines[0]["acc"]
    lines[1]["acc"] = float("nan")  # json.dumps writes NaN, as the harness would
    run.write_lines(task, [json.dumps(line) for line in lines])
    lake, report = ingest([run.results], tmp_path)
    assert_accounted(report)
    bad = quarantine(lake, task).set_index("item_id")
    assert set(bad.index) == {"0", "1"}
    assert bad.loc["0", "reason"] == (
        "sample '0' epoch 1: line 1 (doc_id 0) has no value for metric 'acc' (metrics: ['acc', 'acc_norm'])"
    )
    assert bad.loc["1", "reason"] == "sample '1' epoch 1: score nan is not finite"
    assert bad.loc["1", "scorer"] == "acc" and bad.loc["1", "score_raw"] == "NaN"
    assert list(read_samples(lake, MODEL, task)["item_id"]) == ["2"]
    # acc_norm is still there for both
    lake, _ = ingest([run.results], tmp_path, ScoreNormalisation(scorer="acc_norm"), lake_name="lake2")
    assert len(read_samples(lake, MODEL, task)) == 3


def test_duplicate_doc_is_quarantined_naming_the_first_line(run, tmp_path):
    task = "toy_physics"
    lines = run.samples[task].read_text().splitlines()
    run.write_lines(task, [*lines, lines[1]])
    lake, report = ingest([run.results], tmp_path)
    assert_accounted(report, expected_rows=5 + 3 + 6)
    (reason,) = quarantine(lake, task)["reason"]
    assert reason.startswith("duplicate (item_id '1', epoch 1)") and "also on line 2, which is kept" in reason
    samples = read_samples(lake, MODEL, task)
    assert samples.loc[samples["item_id"] == "1", "source_line"].tolist() == [2]
    assert report.quarantine_reasons == {
        "duplicate (item_id, epoch) within one log": 1,
        "scorer 'exact_match,flexible-extract' not chosen (choose with --scorer)": 3,
    }


def test_invalid_results_json_fails_that_file_only(run, tmp_path):
    good = tmp_path / "good"
    shutil.copytree(run.folder, good)
    run.results.write_text('{"results": {"toy_physics": ')
    lake, report = ingest([run.results, *find_log_files(good)], tmp_path)
    (error,) = report.file_errors
    assert error.path == str(run.results) and "not valid JSON" in error.error and str(run.results) in error.error
    assert len(report.partitions) == 3 and report.rows_ingested == 4 + 3 + 3


def test_aggregate_only_run_says_to_log_samples(run, tmp_path):
    for path in run.samples.values():
        path.unlink()
    lake, report = ingest(find_log_files(run.folder), tmp_path)
    (error,) = report.file_errors
    assert "no samples_<task>_" in error.error and "run lm_eval with --log_samples" in error.error


def test_task_without_samples_file_is_skipped(run, tmp_path):
    run.samples["toy_arith"].unlink()
    lake, report = ingest([run.results], tmp_path)
    assert not report.file_errors
    assert set(report.partitions) == {(MODEL, "toy_physics"), (MODEL, "toy_biology")}


# -- model name, partitions, chunks, idempotence ----------------------------------------


def test_model_name_follows_the_harness():
    assert model_of({"config": {"model_args": "pretrained=EleutherAI/pythia-160m,dtype=float32"}}) == (
        "EleutherAI/pythia-160m"
    )
    assert model_of({"config": {"model_args": "pretrained=base/m,peft=me/adapter"}}) == "me/adapter"
    assert (
        model_of({"config": {"model": "openai-chat-completions", "model_args": "model=gpt-4o-mini"}}) == "gpt-4o-mini"
    )
    assert model_of({"config": {"model_args": {"path": "/models/x"}}}) == "/models/x"
    assert model_of({"model_name": "named", "config": {"model": "hf", "model_args": "dtype=float32"}}) == "named"
    assert model_of({"config": {"model": "hf", "model_args": ""}}) == "hf"
    assert model_of({"results": {}}) is None


def test_string_model_args_of_older_versions(run, tmp_path):
    data = run.data()
    data["config"]["model_args"] = "pretrained=EleutherAI/pythia-160m,dtype=float32"
    del data["model_name"]
    run.write_data(data)
    lake, report = ingest([run.results], tmp_path)
    assert {m for m, _ in report.partitions} == {"EleutherAI/pythia-160m"}


def test_partitions_read_only_the_results_file(run):
    for path in run.samples.values():
        path.write_bytes(b"\xff not even text\n")
    ((source, parts),), errors = scan_sources([run.results])
    assert not errors and source.format == "lm-eval"
    assert {(p.model, p.suite, p.source_id) for p in parts} == {
        (MODEL, task, f"lm-eval-{task}-{run.timestamp}") for task in TASKS
    }


def test_reader_streams_chunks_of_chunk_rows(run):
    ((source, _),) = scan_sources([run.results])[0]
    whole = list(LmEvalReader().read(source, IngestOptions()))
    assert [(c.suite, len(c.rows)) for c in whole] == [("toy_physics", 4), ("toy_biology", 3), ("toy_arith", 6)]
    small = list(LmEvalReader().read(source, IngestOptions(chunk_rows=2)))
    assert [(c.suite, len(c.rows)) for c in small] == [
        ("toy_physics", 2),
        ("toy_physics", 2),
        ("toy_biology", 2),
        ("toy_biology", 1),
        ("toy_arith", 2),
        ("toy_arith", 2),
        ("toy_arith", 2),
    ]
    for task in TASKS:
        one = pd.concat([c.rows for c in whole if c.suite == task], ignore_index=True)
        many = pd.concat([c.rows for c in small if c.suite == task], ignore_index=True)
        assert records(one) == records(many)
    assert {c.source_id for c in small if c.suite == "toy_arith"} == {f"lm-eval-toy_arith-{run.timestamp}"}


def test_chunks_do_not_change_the_result(run, tmp_path):
    lake, report = ingest([run.results], tmp_path)
    lake2, report2 = ingest([run.results], tmp_path, IngestOptions(chunk_rows=2), lake_name="lake2")
    assert report2.file_errors == []
    assert report2.summary_lines() == report.summary_lines()
    for task in TASKS:
        pd.testing.assert_frame_equal(read_samples(lake, MODEL, task), read_samples(lake2, MODEL, task))
        pd.testing.assert_frame_equal(quarantine(lake, task), quarantine(lake2, task))


def test_reingest_is_idempotent(run, tmp_path):
    lake, first = ingest(find_log_files(run.folder), tmp_path)
    before = {t: (read_samples(lake, MODEL, t), quarantine(lake, t)) for t in TASKS}
    staged = sorted(p.relative_to(lake.root) for p in lake.root.glob("ingested/**/*.parquet"))
    assert len(staged) == 3  # one record per task
    second = ingest_paths(find_log_files(run.folder), lake)
    assert second.summary_lines() == first.summary_lines()
    assert sorted(p.relative_to(lake.root) for p in lake.root.glob("ingested/**/*.parquet")) == staged
    for task, (samples, quarantined) in before.items():
        pd.testing.assert_frame_equal(read_samples(lake, MODEL, task), samples)
        pd.testing.assert_frame_equal(quarantine(lake, task), quarantined)
    assert not any("superseded" in r for r in second.quarantine_reasons)


@pytest.mark.parametrize("repeat", [30, 34])
def test_a_task_name_too_long_for_a_key_sets_aside_that_task_only(run, tmp_path, repeat):
    """A task whose name (34 x 'é': a 204-character key) cannot be a partition, or whose run id
    (lm-eval-<task>-<time>; 30 x 'é' is a 180-character key but a 215-character id) was too long,
    made the whole results file unreadable: the other tasks lost their rows too."""
    from evalpipeline.ingest import unplaced_path
    from evalpipeline.steps.discovery import discover

    task = "é" * repeat
    run.results.write_text(run.results.read_text().replace("toy_arith", task))
    run.samples["toy_arith"].rename(run.folder / f"samples_{task}_{run.timestamp}.jsonl")
    arith_rows = sum(1 for _ in (run.folder / f"samples_{task}_{run.timestamp}.jsonl").open())
    lake, report = ingest([run.results], tmp_path)
    assert not report.file_errors
    assert report.rows_read == report.rows_ingested + report.rows_quarantined
    assert {suite for _, suite in report.partitions} >= {"toy_physics", "toy_biology"}
    found = discover(Lake(tmp_path / "lake2"), run.folder)
    assert not found.unreadable
    if repeat == 34:  # the task's rows are in no partition
        assert task not in {suite for _, suite in report.partitions}
        assert report.rows_unplaced == arith_rows
        assert pd.read_parquet(unplaced_path(lake, run.results))["suite"].tolist() == [task] * arith_rows
        assert task not in found.suites
    else:  # the task is a partition like any other
        assert report.partitions[(MODEL, task)].rows_read == arith_rows and report.rows_unplaced == 0
        assert (MODEL, task) in found.partitions
