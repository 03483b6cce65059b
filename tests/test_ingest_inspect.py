"""Ingest of logs made here by inspect_ai, checked against inspect_ai's own full-log reader."""

import json
from pathlib import Path

import pandas as pd
import pytest
from inspect_ai.log import read_eval_log

from evalpipeline.ingest import IngestOptions, ScoreNormalisation, find_log_files, ingest_paths
from evalpipeline.ingest.inspect_logs import read_inspect_log, read_log_header
from evalpipeline.lake import Lake, sha256_file
from evalpipeline.steps.samples import read_samples
from tests.helpers.inspect_logs import echo, exact, make_log

VALUE = {"C": 1.0, "I": 0.0, "P": 0.5}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("logs")
    return {
        "eval": make_log(
            folder / "a",
            model="mockllm/acme/large v2",
            suite="unit_suite",
            items=6,
            epochs=2,
            fail={("q3", 1)},
            log_format="eval",
        ),
        "json": make_log(folder / "b", model="mockllm/acme-small", suite="unit_suite", items=4, log_format="json"),
        "two_scorers": make_log(folder / "c", suite="scored_twice", items=4, scorers=[echo(), exact()]),
    }


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_rows_match_inspect_full_log(logs, fmt):
    path = logs[fmt]
    header, rows = read_inspect_log(path)
    full = read_eval_log(str(path))  # the whole log, messages and all
    assert header.model == full.eval.model and header.suite == full.eval.task
    assert header.run_id == full.eval.run_id and header.eval_id == full.eval.eval_id
    assert header.sha256 == sha256_file(path) and header.log_format == fmt
    assert len(rows) == len(full.samples)
    expected = {
        (str(s.id), s.epoch): (
            None if s.error else VALUE[s.scores["exact"].value],
            s.metadata["domain"],
            s.metadata["subdomain"],
            s.error.message if s.error else None,
        )
        for s in full.samples
    }
    got = {
        (r.item_id, r.epoch): (
            None if pd.isna(r.score) else r.score,
            r.domain,
            r.subdomain,
            None if pd.isna(r.error) else r.error,
        )
        for r in rows.itertuples()
    }
    assert got.keys() == expected.keys()
    for key, (score, domain, subdomain, error) in expected.items():
        g_score, g_domain, g_subdomain, g_error = got[key]
        assert (g_score, g_domain, g_subdomain) == (score, domain, subdomain), key
        assert (g_error is None) == (error is None), key
        if error:
            assert error in g_error
    assert rows["reason"].isna().all()
    assert (rows["log_path"] == str(path)).all() and (rows["run_id"] == full.eval.run_id).all()


def test_errored_sample_is_kept_flagged_and_unscored(logs):
    _, rows = read_inspect_log(logs["eval"])
    errored = rows[rows["error"].notna()]
    assert list(zip(errored["item_id"], errored["epoch"])) == [("q3", 1)]
    assert "planted failure on q3" in errored["error"].iloc[0]
    assert errored["score"].isna().all() and errored["reason"].isna().all()


def test_scorer_choice_is_explicit(logs):
    path = logs["two_scorers"]
    assert read_log_header(path).scorers == ("echo", "exact")
    _, first = read_inspect_log(path)  # default: the first declared scorer, echo, whose "yes"/"no" are unknown
    assert (first["scorer"] == "echo").all()
    assert first["reason"].str.contains("unknown score value 'yes'|unknown score value 'no'").all()
    _, chosen = read_inspect_log(path, ScoreNormalisation(scorer="exact"))
    assert (chosen["scorer"] == "exact").all() and chosen["reason"].isna().all()
    assert chosen["score"].tolist() == [1.0, 0.0, 1.0, 0.0]
    _, missing = read_inspect_log(path, ScoreNormalisation(scorer="nope"))
    assert missing["reason"].str.contains("no score from scorer 'nope' \\(scores: \\['echo', 'exact'\\]\\)").all()


def test_ingest_writes_partitions_with_provenance_and_accounting(logs, tmp_path):
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([logs["eval"], logs["json"]], lake)
    assert report.rows_read == 12 + 4 == report.rows_ingested + report.rows_quarantined
    account = report.partitions[("mockllm/acme/large v2", "unit_suite")]
    assert (account.rows_read, account.rows_ingested, account.rows_errored) == (12, 12, 1)
    samples = read_samples(lake, "mockllm/acme/large v2", "unit_suite")
    assert set(samples["log_sha256"]) == {sha256_file(logs["eval"])}
    assert (tmp_path / "lake/samples/model=mockllm%2Facme%2Flarge%20v2/suite=unit_suite/samples.parquet").exists()
    metadata = json.loads(samples["metadata_json"].iloc[0])
    assert metadata["domain"] == "unit"


def test_reingesting_the_same_file_changes_nothing(logs, tmp_path):
    lake = Lake(tmp_path / "lake")
    ingest_paths([logs["eval"]], lake)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (tmp_path / "lake").rglob("*") if p.is_file()}
    report = ingest_paths([logs["eval"]], lake)
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (tmp_path / "lake").rglob("*") if p.is_file()}
    assert before == after
    assert report.partitions[("mockllm/acme/large v2", "unit_suite")].samples_written is False


def test_find_log_files_skips_hidden_and_other_files(tmp_path, logs):
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.eval").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a log")
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / logs["json"].name
    target.write_bytes(logs["json"].read_bytes())
    assert find_log_files(tmp_path) == [target]
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        find_log_files(tmp_path / "absent")


def test_demo_logs_ingest_completely(tmp_path):
    from tests.conftest import DEMO_LOGS

    truth = json.loads((DEMO_LOGS.parent / "demo_truth.json").read_text())
    report = ingest_paths(find_log_files(DEMO_LOGS), Lake(tmp_path / "lake"))
    assert report.file_errors == []
    assert len(report.partitions) == 12
    expected_rows = sum(
        len(s["subdomains"]) * s["items_per_subdomain"] * s["epochs"] for s in truth["suites"].values()
    ) * len(truth["accuracy"])
    assert report.rows_read == expected_rows == report.rows_ingested
    assert sum(p.rows_errored for p in report.partitions.values()) == len(truth["errored"]) == 1


def test_metadata_mapping_covariates_and_other_scorers_kept(tmp_path):
    from inspect_ai.log import read_eval_log, write_eval_log

    from evalpipeline.ingest import IngestOptions

    path = make_log(tmp_path / "m", suite="mapped", items=4, scorers=[exact(), echo()])
    log = read_eval_log(str(path))
    for n, sample in enumerate(log.samples):
        sample.metadata = {"category": "alg", "topic": f"t{n % 2}", "level": n + 1}
    write_eval_log(log, str(path))
    options = IngestOptions(
        normalisation=ScoreNormalisation(scorer="exact"),
        metadata_map={"domain": "category", "subdomain": "topic", "cov_difficulty": "level"},
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([path], lake, options)
    assert report.rows_ingested == 4
    samples = read_samples(lake, "mockllm/test-model", "mapped")
    assert samples["domain"].tolist() == ["alg"] * 4
    assert samples["subdomain"].tolist() == ["t0", "t1", "t0", "t1"]
    assert samples["cov_difficulty"].tolist() == [1, 2, 3, 4]
    kept = [json.loads(s) for s in samples["scores_json"]]
    assert [k["echo"] for k in kept] == ["yes", "no", "yes", "no"] and [k["exact"] for k in kept] == [
        "C",
        "I",
        "C",
        "I",
    ]
    assert report.notes == []


def test_a_mapped_metadata_key_no_sample_has_gives_a_note(tmp_path, capsys):
    """A misspelt --metadata-map key left the column empty without a word."""
    import evalpipeline.cli.main as cli

    path = make_log(tmp_path / "m", suite="mapped", items=2)
    options = IngestOptions(metadata_map={"domain": "categroy", "cov_level": "level"})
    report = ingest_paths([path], Lake(tmp_path / "lake"), options)
    assert report.rows_ingested == 2
    assert report.notes == [
        f"{path}: metadata_map domain='categroy': no sample has a value for that metadata key, so domain is empty",
        f"{path}: metadata_map cov_level='level': no sample has a value for that metadata key, so cov_level is empty",
    ]
    assert f"  note: {report.notes[0]}" in report.summary_lines()
    # the defaults (domain=domain, ...) say nothing when logs carry no such metadata
    assert ingest_paths([path], Lake(tmp_path / "lake2")).notes == []
    assert (
        cli.main(
            [
                "ingest",
                str(path),
                "--lake",
                str(tmp_path / "lake3"),
                "--no-validate",
                "--metadata-map",
                "domain=categroy",
            ]
        )
        == 0
    )
    assert (
        "note: metadata_map domain='categroy': no sample has a value for that metadata key" in capsys.readouterr().out
    )


def test_dict_valued_scores_need_a_key(tmp_path):
    from inspect_ai.log import read_eval_log, write_eval_log

    path = make_log(tmp_path / "d", suite="dicts", items=2)
    log = read_eval_log(str(path))
    for sample in log.samples:
        sample.scores["exact"].value = {"acc": sample.scores["exact"].value, "f1": 0.5}
    write_eval_log(log, str(path))
    _, rows = read_inspect_log(path)
    assert rows["reason"].str.contains("dict-valued score \\(keys \\['acc', 'f1'\\]\\); set score_key").all()
    _, keyed = read_inspect_log(path, ScoreNormalisation(score_key="acc"))
    assert keyed["reason"].isna().all() and keyed["score"].tolist() == [1.0, 0.0]


def test_a_changed_score_map_reaches_the_lake_although_the_log_did_not_change(tmp_path):
    """The lake skips sources it holds; "holds" means the same bytes read with the same options.
    A record read under another score map, or one written before records carried the options,
    is read again, and a rerun under the same options changes nothing."""
    from dataclasses import replace

    import pyarrow.parquet as pq

    from evalpipeline.ingest import IngestOptions
    from evalpipeline.steps.samples import ingest_partitions
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    make_log(landing, suite="mapped", items=4)  # exact scorer: C for even items, I for odd ones
    pair = ("mockllm/test-model", "mapped")
    default = IngestOptions()
    ingest_partitions(lake, landing, [pair], default)
    assert read_samples(lake, *pair)["score"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert discover(lake, landing, default).changed == set()
    # how rows are streamed is not what they are: no rereading
    assert discover(lake, landing, replace(default, chunk_rows=7)).changed == set()

    partial = IngestOptions(normalisation=ScoreNormalisation(value_map={"C": 1.0, "I": 0.25}))
    assert discover(lake, landing, partial).changed == {pair}
    report = ingest_partitions(lake, landing, [pair], partial)
    assert report.partitions[pair].samples_written is True
    assert read_samples(lake, *pair)["score"].tolist() == [1.0, 0.25, 1.0, 0.25]
    assert discover(lake, landing, partial).changed == set()
    table = lake.table_path("samples", "samples.parquet", *pair)
    before = (table.read_bytes(), table.stat().st_mtime_ns)
    again = ingest_partitions(lake, landing, [pair], partial)
    assert again.partitions[pair].samples_written is False and (table.read_bytes(), table.stat().st_mtime_ns) == before

    # a record from before the fingerprint: read again once, and the same rows leave the table as it was
    (staged,) = lake.partition_dir("ingested", *pair).glob("*.parquet")
    pq.write_table(pq.read_table(staged).replace_schema_metadata(None), staged)
    assert discover(lake, landing, partial).changed == {pair}
    upgraded = ingest_partitions(lake, landing, [pair], partial)
    assert upgraded.partitions[pair].samples_written is False and table.read_bytes() == before[0]
    assert discover(lake, landing, partial).changed == set()


def test_a_log_rewritten_under_another_model_retires_the_old_partition_and_its_outputs(tmp_path):
    """A log rewritten in place under another model name leaves the old model with no log: its
    tables and every output made from them go (they would rank a model that no longer exists);
    the suite, which still has a model, keeps its own tables."""
    import shutil

    from evalpipeline.lake.keys import to_partition_key

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    first = make_log(tmp_path / "made", model="mockllm/old-name", suite="unit suite", items=4)
    shutil.copy(first, landing / "run.eval")
    assert ingest_paths(find_log_files(landing), lake).rows_ingested == 4
    old, suite = to_partition_key("mockllm/old-name"), to_partition_key("unit suite")
    outputs = [
        f"accuracy_posteriors/model={old}/suite={suite}/posteriors.parquet",
        f"glm_fits/model={old}/suite={suite}/binomial/summary.parquet",
        f"validation/data_docs/model={old}/suite={suite}/index.html",
        f"model_profile/model={old}/profile.parquet",
        f"suite_leaderboard/suite={suite}/leaderboard.parquet",
    ]
    for name in outputs:  # what the pipeline made downstream of the old partition
        (lake.root / name).parent.mkdir(parents=True, exist_ok=True)
        (lake.root / name).write_bytes(b"made from the old partition")

    second = make_log(tmp_path / "made-again", model="mockllm/new-name", suite="unit suite", items=4)
    shutil.copy(second, landing / "run.eval")  # the same path, another model
    lines = []
    report = ingest_paths(find_log_files(landing), lake, progress=lines.append)
    # 6 model x suite folders (ingested, samples, quarantine and the 3 outputs) and the model's 7
    assert report.retired == {("mockllm/old-name", "unit suite"): 13}, (report.retired, lines)
    assert any("mockllm/old-name x unit suite: no log holds it any more" in line for line in lines)
    assert "retired, no log holds it any more" in "\n".join(report.summary_lines())
    left = sorted(str(p.relative_to(lake.root)) for p in lake.root.rglob("*") if old in str(p))
    assert left == [], left
    assert (lake.root / outputs[-1]).exists()  # the suite still has a model: its tables stay
    assert read_samples(lake, "mockllm/new-name", "unit suite").shape[0] == 4
    assert not list(lake.root.rglob(".tmp-*"))


def test_model_names_that_differ_only_in_unicode_form_or_surrounding_spaces_are_one_model(tmp_path):
    """'café' in its two Unicode spellings, and a name with a trailing space, made separate partitions
    that every listing shows alike (a report said "X is confidently better than X")."""
    import shutil
    import unicodedata

    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    landing.mkdir()
    composed, decomposed = (unicodedata.normalize(form, "mockllm/café") for form in ("NFC", "NFD"))
    assert composed != decomposed
    first = make_log(tmp_path / "a", model=decomposed + " ", suite="unit_suite ", items=4)
    second = make_log(tmp_path / "b", model=composed, suite="unit_suite", items=4, log_format="json")
    shutil.copy(first, landing / "a.eval")
    shutil.copy(second, landing / "b.json")
    assert discover(lake, landing).changed == {(composed, "unit_suite")}
    report = ingest_paths(find_log_files(landing), lake)
    assert report.file_errors == [] and set(report.partitions) == {(composed, "unit_suite")}
    assert lake.partitions("samples") == [(composed, "unit_suite")]
    again = discover(lake, landing)
    assert again.partitions == {(composed, "unit_suite")} and not again.changed and not again.lake_only


# -- an adversarial corpus ----------------------------------------------------------


def _demo_json_log():
    from pathlib import Path

    return sorted((Path(__file__).resolve().parents[1] / "data" / "inspect_logs").glob("*.json"))[0]


def test_an_inspect_sample_whose_epoch_no_table_holds_is_quarantined_alone(tmp_path):
    """Epoch 2**40 failed the whole log at the table's int32 cast ("Conversion failed for column epoch"),
    naming no sample; epoch 0 reached the sample table unless validation ran."""
    log = json.loads(_demo_json_log().read_text())
    log["samples"][0]["epoch"] = 2**40
    log["samples"][1]["epoch"] = 0
    path = tmp_path / "in" / "epochs.json"
    path.parent.mkdir()
    path.write_text(json.dumps(log))
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([path], lake)
    assert report.file_errors == [] and report.rows_read == len(log["samples"])
    assert report.rows_quarantined == 2 and report.rows_ingested == len(log["samples"]) - 2
    first, second = log["samples"][0]["id"], log["samples"][1]["id"]
    assert report.quarantine_reasons == {
        f"sample {first!r}: epoch {2**40} is not a whole number from 1 to 2147483647": 1,
        f"sample {second!r}: epoch 0 is not a whole number from 1 to 2147483647": 1,
    }


def test_an_inspect_summary_that_fails_validation_is_named_by_its_place(tmp_path):
    """inspect_ai's validation error named neither the sample nor where in the log it was."""
    log = json.loads(_demo_json_log().read_text())
    scorer = next(iter(log["samples"][2]["scores"]))
    log["samples"][2]["scores"][scorer]["value"] = None
    path = tmp_path / "in" / "odd.json"
    path.parent.mkdir()
    path.write_text(json.dumps(log))
    report = ingest_paths([path], Lake(tmp_path / "lake"))
    (error,) = report.file_errors
    assert f"cannot read samples: summary 3, after sample {log['samples'][1]['id']!r} (ValidationError: " in error.error


# -- answers and targets (the labels classification metrics read) ------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_answer_and_target_are_the_scorers_answer_and_the_samples_target(logs, fmt):
    path = logs[fmt]
    _, rows = read_inspect_log(path)
    full = read_eval_log(str(path))
    expected = {(str(s.id), s.epoch): (None if s.error else s.scores["exact"].answer, s.target) for s in full.samples}
    got = {(r.item_id, r.epoch): (None if pd.isna(r.answer) else r.answer, r.target) for r in rows.itertuples()}
    assert got == expected
    assert rows["target"].eq("yes").all() and set(rows["answer"].dropna()) == {"yes", "no"}
    if fmt == "eval":  # the errored sample has no score, so no answer
        assert rows.loc[rows["error"].notna(), "answer"].isna().all()


def _labelled_log(folder, log_format: str = "eval"):
    """Targets of every shape inspect_ai takes, and a scorer that gives an answer for some samples only."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import Score, accuracy, scorer

    from tests.helpers.inspect_logs import planted_answers

    targets = {"one": "B", "listed": ["C"], "several": ["A", "D"], "none": ""}
    answers = {"one": "B", "listed": "A", "several": "D", "none": "x"}

    @scorer(metrics=[accuracy()], name="letter")
    def letter():
        async def score(state, target):  # no answer for "several": Score.answer stays None
            text = state.output.completion
            return Score(
                value="C" if text in target.target else "I", answer=None if state.sample_id == "several" else text
            )

        return score

    dataset = MemoryDataset(
        [
            Sample(id=i, input=f"question {i}", target=t, metadata={"gold": f"g-{i}", "said": 7})
            for i, t in targets.items()
        ]
    )
    task = Task(
        dataset=dataset, solver=planted_answers({(i, 1): a for i, a in answers.items()}), scorer=letter(), name="labels"
    )
    (log,) = inspect_eval(task, model="mockllm/model", log_dir=str(folder), log_format=log_format, display="none")
    return Path(log.location)


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_a_list_target_and_a_missing_answer(tmp_path, fmt):
    _, rows = read_inspect_log(_labelled_log(tmp_path, fmt))
    labels = rows.set_index("item_id")[["answer", "target"]].astype(object).where(lambda f: f.notna(), None)
    assert labels.to_dict("index") == {
        "one": {"answer": "B", "target": "B"},
        "listed": {"answer": "A", "target": "C"},  # a list of one target is that target
        "several": {"answer": None, "target": '["A", "D"]'},  # several: a JSON list; no Score.answer: null
        "none": {"answer": "x", "target": None},  # "" is inspect_ai's default target: none
    }


def test_answer_and_target_may_come_from_sample_metadata(tmp_path):
    path = _labelled_log(tmp_path)
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([path], lake, IngestOptions(metadata_map={"answer": "said", "target": "gold"}))
    assert report.rows_ingested == 4 and report.notes == []
    samples = read_samples(lake, "mockllm/model", "labels").set_index("item_id")
    assert samples["target"].to_dict() == {i: f"g-{i}" for i in ("one", "listed", "several", "none")}
    assert samples["answer"].eq("7").all()  # a mapped answer replaces the scorer's, as text
    with pytest.raises(ValueError, match="metadata_map key 'label': use domain, subdomain, cluster, answer, target"):
        IngestOptions(metadata_map={"label": "gold"})


def test_a_score_answer_that_is_not_text_is_named_by_its_place(tmp_path):
    """inspect_ai's Score.answer is text or null; a log holding a number there is invalid, and named."""
    log = json.loads(_demo_json_log().read_text())
    scorer = next(iter(log["samples"][1]["scores"]))
    log["samples"][1]["scores"][scorer]["answer"] = 42
    path = tmp_path / "in" / "odd.json"
    path.parent.mkdir()
    path.write_text(json.dumps(log))
    (error,) = ingest_paths([path], Lake(tmp_path / "lake")).file_errors
    assert (
        f"cannot read samples: summary 2, after sample {log['samples'][0]['id']!r} (ValueError: the answer of "
        f"score {scorer!r} is a JSON int, not a string)"
    ) in error.error
