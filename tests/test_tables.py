"""Long and wide tables, format detection, declared mappings and the project configuration."""

import json

import pandas as pd
import pytest

from evalpipeline.cli.main import main
from evalpipeline.ingest import IngestOptions, find_log_files, ingest_paths, unplaced_path
from evalpipeline.ingest.base import SourceReadError
from evalpipeline.ingest.detect import open_source, reader_for
from evalpipeline.ingest.scores import ScoreNormalisation
from evalpipeline.lake import Lake
from evalpipeline.settings import ConfigError, load_ingest_options

LONG_CSV = """model,suite,question,correct,level,run
m/a,s1,q1,1,easy,r1
m/a,s1,q2,0,hard,r1
m/b,s1,q1,C,easy,r2
m/b,s1,q2,7,hard,r2
m/b,s1,q3,,hard,r2
m/b,s1,q1,1,easy,r2
"""
MAP = {"item_id": "question", "score": "correct", "cov_level": "level", "run_id": "run"}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _accounted(report):
    assert report.rows_read == report.rows_ingested + report.rows_quarantined
    for account in report.partitions.values():
        assert account.rows_read == account.rows_ingested + account.rows_quarantined


def test_long_csv_with_declared_mapping(tmp_path):
    src = _write(tmp_path / "in" / "scores.csv", LONG_CSV)
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map=MAP))
    _accounted(report)
    assert report.rows_read == 6
    a = lake.read_partition("samples", "m/a", "s1")
    assert a["score"].tolist() == [1.0, 0.0] and a["cov_level"].tolist() == ["easy", "hard"]
    assert set(a["run_id"]) == {"r1"} and set(a["log_format"]) == {"long"}
    quarantine = lake.read_partition("quarantine", "m/b", "s1").sort_values("source_line")
    assert quarantine["source_line"].tolist() == [5, 6, 7]
    assert quarantine["reason"].tolist() == [
        "line 5: sample 'q2' epoch 1: score 7.0 outside numeric_range [0, 1]",
        "line 6: sample 'q3' epoch 1: no score",
        "line 7: duplicate (model, suite, item_id 'q1', epoch 1) in the file; first at line 4",
    ]


def test_a_second_scorer_of_a_sample_is_a_duplicate_and_the_first_is_kept(tmp_path):
    # the lake keeps one score per (item_id, epoch): the first row read wins, as the README and Inspect's
    # "default: the first scorer" say; consolidation used to keep the last and call the first superseded
    src = _write(tmp_path / "scores.csv", "model,suite,item_id,grader,score\nm,s,q1,a,1\nm,s,q1,b,0\nm,s,q2,b,1\n")
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map={"scorer": "grader"}))
    _accounted(report)
    samples = lake.read_partition("samples", "m", "s").sort_values("item_id")
    assert samples[["item_id", "scorer", "score"]].values.tolist() == [["q1", "a", 1.0], ["q2", "b", 1.0]]
    quarantine = lake.read_partition("quarantine", "m", "s")
    assert quarantine["reason"].tolist() == [
        "line 3: duplicate (model, suite, item_id 'q1', epoch 1) in the file; first at line 2 "
        "(scorer 'a', kept; this row's scorer is 'b': choose one with --scorer)"
    ]
    # --scorer picks the other scorer's rows instead; the rest are quarantined as not chosen
    report = ingest_paths(
        [src],
        Lake(tmp_path / "lake-b"),
        IngestOptions(column_map={"scorer": "grader"}, normalisation=ScoreNormalisation(scorer="b")),
    )
    _accounted(report)
    assert Lake(tmp_path / "lake-b").read_partition("samples", "m", "s")["score"].tolist() == [0.0, 1.0]


def test_two_tables_with_one_sample_name_the_kept_file_without_an_eval_id(tmp_path):
    first = _write(tmp_path / "a.csv", "model,suite,item_id,score,created_at\nm,s,q1,1,2026-01-01\n")
    second = _write(tmp_path / "b.csv", "model,suite,item_id,score,created_at\nm,s,q1,0,2026-01-02\n")
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([first, second], lake)
    _accounted(report)
    assert lake.read_partition("samples", "m", "s")["score"].tolist() == [0.0]
    assert lake.read_partition("quarantine", "m", "s")["reason"].tolist() == [
        f"superseded: (item_id 'q1', epoch 1) is also in {second}, which is kept as the newer run"
    ]


def test_mapping_error_names_the_column_and_lists_what_exists(tmp_path):
    src = _write(tmp_path / "scores.csv", LONG_CSV)
    with pytest.raises(
        SourceReadError,
        match=r"column mapping score='acc': no column 'acc'; the file has \['model', 'suite', 'question'",
    ):
        list(
            reader_for("long").read(
                open_source(src, IngestOptions(format="long")),
                IngestOptions(column_map={"item_id": "question", "score": "acc"}),
            )
        )
    report = ingest_paths([src], Lake(tmp_path / "lake"), IngestOptions(format="long", column_map={"score": "correct"}))
    assert "no column for 'item_id' (map one with --map item_id=COL); the file has" in report.file_errors[0].error


def test_long_parquet_and_jsonl(tmp_path):
    frame = pd.DataFrame(
        {"model": ["x", "x"], "suite": ["s", "s"], "item_id": ["a", "b"], "score": [0.25, 1.0], "epoch": [1, 2]}
    )
    frame.to_parquet(tmp_path / "t.parquet")
    _write(
        tmp_path / "t.jsonl",
        '{"model":"y","suite":"s","item_id":"a","score":"I"}\nnot json\n[1]\n'
        '{"model":"y","suite":"s","item_id":"b","score":true}\n',
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths(find_log_files(tmp_path), lake)
    _accounted(report)
    assert lake.read_partition("samples", "x", "s")["epoch"].tolist() == [1, 2]
    assert lake.read_partition("samples", "y", "s")["score"].tolist() == [0.0, 1.0]
    # lines that are no object name no model or suite: kept in no partition, with both reasons
    assert not (lake.root / "quarantine" / "model=%28unknown%29").exists()
    bad = pd.read_parquet(unplaced_path(lake, tmp_path / "t.jsonl")).sort_values("source_line")
    assert bad["reason"].tolist() == [
        "line 2: not valid JSON (Expecting value); no model value",
        "line 3: a JSON list, not an object; no model value",
    ]
    assert bad["model"].isna().all() and bad["suite"].isna().all()
    assert report.unplaced == {
        str(tmp_path / "t.jsonl"): {
            "not valid JSON (Expecting value); no model value": 1,
            "a JSON list, not an object; no model value": 1,
        }
    }


def test_wide_table(tmp_path):
    src = _write(
        tmp_path / "mmlu_mini.csv", "item_id,domain,gpt-4,claude\nq1,math,1,0\nq2,math,0,\nq3,bio,1,2\nq3,bio,1,1\n"
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert set(report.partitions) == {("gpt-4", "mmlu_mini"), ("claude", "mmlu_mini")}
    claude = report.partitions[("claude", "mmlu_mini")]
    # q2 is empty (not evaluated, not a row); q3's 2 is quarantined; the repeated q3 row too.
    assert (claude.rows_read, claude.rows_ingested, claude.rows_quarantined) == (3, 1, 2)
    gpt = lake.read_partition("samples", "gpt-4", "mmlu_mini")
    assert gpt["item_id"].tolist() == ["q1", "q2", "q3"] and gpt["domain"].tolist() == ["math", "math", "bio"]
    reasons = sorted(lake.read_partition("quarantine", "claude", "mmlu_mini")["reason"])
    assert reasons == [
        "line 4: sample 'q3' epoch 1 model 'claude': score 2.0 outside numeric_range [0, 1]",
        "line 5: duplicate item 'q3'; first at line 4",
    ]


def test_wide_without_item_column_and_suite_override(tmp_path):
    src = _write(tmp_path / "w.csv", "a,b\n1,0\n0,1\n")
    lake = Lake(tmp_path / "lake")
    ingest_paths([src], lake, IngestOptions(format="wide", suite="bench"))
    assert lake.read_partition("samples", "a", "bench")["item_id"].tolist() == ["row-0", "row-1"]


def test_detection_is_explicit_when_ambiguous(tmp_path):
    src = _write(tmp_path / "odd.csv", "model,x\nm,1\n")
    with pytest.raises(SourceReadError, match="cannot tell whether this table is long or wide"):
        open_source(src, IngestOptions())
    other = _write(tmp_path / "other.json", '{"hello": 1}')
    with pytest.raises(SourceReadError, match="cannot tell the format of this JSON file \\(first key 'hello'"):
        open_source(other, IngestOptions())
    assert open_source(src, IngestOptions(format="wide")).format == "wide"


def test_rewritten_table_drops_partitions_it_no_longer_holds(tmp_path):
    src = _write(tmp_path / "t.csv", "model,suite,item_id,score\nm1,s,a,1\nm2,s,a,0\n")
    lake = Lake(tmp_path / "lake")
    ingest_paths([src], lake)
    _write(src, "model,suite,item_id,score\nm1,s,a,1\nm1,s,b,0\n")
    report = ingest_paths([src], lake)
    # m2 x s is in no file any more: retired, its tables removed (not left as an empty table)
    assert ("m2", "s") in report.retired and ("m2", "s") not in report.partitions
    assert not (lake.root / "samples" / "model=m2").exists() and not (lake.root / "ingested" / "model=m2").exists()
    assert lake.read_partition("samples", "m1", "s")["item_id"].tolist() == ["a", "b"]


def _records(lake, model, suite):
    return sorted(p.name for p in (lake.root / "ingested" / f"model={model}" / f"suite={suite}").glob("*.parquet"))


def test_a_moved_or_respelled_log_replaces_its_record_and_a_later_edit_reaches_the_lake(tmp_path, monkeypatch):
    """Records are named by a hash of the path: a log moved to another path, or the same file spelled
    relative and absolute, must not leave a second record, whose rows would be kept or quarantined as
    superseded by the order of the paths rather than by which content is current."""
    from evalpipeline.steps.samples import read_samples

    monkeypatch.chdir(tmp_path)
    lake = Lake(tmp_path / "lake")
    old = _write(tmp_path / "landing" / "z_scores.csv", "model,suite,item_id,score\nm,s,a,1\nm,s,b,1\n")
    ingest_paths([old], lake)
    moved = tmp_path / "landing" / "sub" / "a_scores.csv"
    moved.parent.mkdir()
    old.rename(moved)
    report = ingest_paths([moved], lake)
    assert len(_records(lake, "m", "s")) == 1
    assert report.partitions[("m", "s")].rows_quarantined == 0 and report.partitions[("m", "s")].rows_read == 2
    _write(moved, "model,suite,item_id,score\nm,s,a,0\nm,s,b,0\n")  # edited after the move
    ingest_paths([moved], lake)
    assert read_samples(lake, "m", "s")["score"].tolist() == [0.0, 0.0]

    # the same file by a relative path (evalpipeline ingest landing/...) and by its absolute one (the nightly)
    relative = _write(tmp_path / "landing" / "t.csv", "model,suite,item_id,score\nm2,s,a,1\n").relative_to(tmp_path)
    ingest_paths([relative], lake)
    _write(tmp_path / "landing" / "t.csv", "model,suite,item_id,score\nm2,s,a,0\n")
    report = ingest_paths([tmp_path / "landing" / "t.csv"], lake)
    assert len(_records(lake, "m2", "s")) == 1 and report.partitions[("m2", "s")].rows_quarantined == 0
    assert read_samples(lake, "m2", "s")["score"].tolist() == [0.0]

    # a copy at a path that still exists is another file: both records stay, the repeat is accounted for
    copy = _write(tmp_path / "landing" / "copy.csv", (tmp_path / "landing" / "t.csv").read_text())
    report = ingest_paths([copy], lake)
    assert len(_records(lake, "m2", "s")) == 2 and report.partitions[("m2", "s")].rows_quarantined == 1


def test_discovery_sees_lake_only_partitions_and_those_a_rewritten_log_retires(tmp_path):
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    table = _write(landing / "t.csv", "model,suite,item_id,score\na,s1,q,1\nb,s1,q,0\nb,s2,q,1\n")
    other = _write(tmp_path / "elsewhere" / "o.csv", "model,suite,item_id,score\nc,s1,q,1\nb,s2,r,1\n")
    ingest_paths([table, other], lake)
    # b x s1 leaves the log (retired: no other file holds it); b x s2 loses a row but o.csv holds it too
    _write(table, "model,suite,item_id,score\na,s1,q,1\nd,s1,q,0\n")
    found = discover(lake, landing)
    assert found.retiring == {("b", "s1")}
    assert found.lake_only == {("c", "s1"), ("b", "s2")}  # ingested from elsewhere: still partitions to keep fresh
    assert found.changed == {("a", "s1"), ("d", "s1"), ("b", "s2")}
    assert ("b", "s1") not in found.partitions and {"b", "c"} <= found.models


def test_one_listing_of_the_ingest_records_answers_as_a_glob_per_file(tmp_path):
    """Discovery lists ``ingested/`` once for all changed files (StagedRecords) rather than globbing every
    partition folder per file; each file's answer must be the per-file glob's."""
    from evalpipeline.ingest import StagedRecords, _path_hash, staged_partitions

    lake = Lake(tmp_path / "lake")
    files = [
        _write(tmp_path / "logs" / "one.csv", "model,suite,item_id,score\na,s1,q,1\nb,s1,q,0\nb,s2,q,1\n"),
        _write(tmp_path / "logs" / "two.csv", "model,suite,item_id,score\nb,s2,r,1\nc,s1,q,1\n"),
        _write(tmp_path / "logs" / "three.csv", "model,suite,item_id,score\nc,s1,r,0\n"),
    ]
    ingest_paths(files, lake)
    # a stray file named without a path hash counts as another file's record, never as a file's own
    (lake.root / "ingested" / "model=a" / "suite=s1" / "stray.parquet").write_bytes(b"")

    def by_glob(path):  # the definition: the folders holding the file's records, and whether others are there
        own = _path_hash(str(path))
        found = {}
        for record in lake.root.glob(f"ingested/model=*/suite=*/*-{own}.parquet"):
            pair = (record.parent.parent.name.split("=", 1)[1], record.parent.name.split("=", 1)[1])
            found[pair] = any(not r.stem.endswith(f"-{own}") for r in record.parent.glob("*.parquet"))
        return found

    index = StagedRecords(lake)
    assert index.partitions_of(files[0]) == {("a", "s1"): True, ("b", "s1"): False, ("b", "s2"): True}
    assert index.partitions_of(files[2]) == {("c", "s1"): True}
    for path in [*files, tmp_path / "logs" / "never-ingested.csv"]:
        assert index.partitions_of(path) == by_glob(path) == staged_partitions(lake, path)


def test_rows_naming_no_model_or_suite_are_quarantined_and_make_no_partition(tmp_path):
    from evalpipeline.steps.accounting import ingest_accounting
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    table = _write(landing / "t.csv", "model,suite,item_id,score\na,s1,q1,1\na,s1,q2,0\n,s1,q3,1\nb,,q1,1\n")
    report = ingest_paths([table], lake)
    _accounted(report)
    assert report.rows_ingested == 2 and report.rows_quarantined == 2
    # the nightly's discovery: only the real partition, nothing "held only by the lake" to refit forever
    found = discover(lake, landing)
    assert found.partitions == {("a", "s1")} and not found.lake_only
    accounting = ingest_accounting(lake)
    assert accounting["rows_quarantined"].sum() == 2 and accounting["rows_ingested"].sum() == 2


def test_a_name_too_long_for_a_partition_key_sets_aside_its_rows_only(tmp_path):
    """One over-long model name made the whole file unreadable: the other models' rows were lost too."""
    from evalpipeline.steps.accounting import UNPLACED_MODEL, ingest_accounting
    from evalpipeline.lake.keys import MAX_KEY_LENGTH
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    long_name = "m" * (MAX_KEY_LENGTH + 1)
    table = _write(
        landing / "t.csv",
        f"model,suite,item_id,score\na,s1,q1,1\n{long_name},s1,q1,1\n{long_name},s1,q2,X\na,s1,q2,0\nb,s1,q1,1\n",
    )
    report = ingest_paths([table], lake)
    _accounted(report)
    assert not report.file_errors
    assert set(report.partitions) == {("a", "s1"), ("b", "s1")}
    assert (report.rows_read, report.rows_ingested, report.rows_quarantined) == (5, 3, 2)
    unplaced = pd.read_parquet(unplaced_path(lake, table)).sort_values("source_line")
    assert unplaced["model"].tolist() == [long_name, long_name] and unplaced["source_line"].tolist() == [3, 4]
    problem = (
        f"model name {long_name[:60]!r}... encodes to a {MAX_KEY_LENGTH + 1}-character partition key; the limit is 200"
    )
    assert unplaced["reason"].tolist() == [
        f"line 3: {problem}",
        f"line 4: sample 'q2' epoch 1: unknown score value 'X' (value_map knows ['C', 'I', 'N', 'P']); {problem}",
    ]
    # two rows, two classes: the second's own reason first, without its line
    assert report.unplaced[str(table)] == {
        problem: 1,
        f"unknown score value 'X' (value_map knows ['C', 'I', 'N', 'P']); {problem}": 1,
    }
    # the nightly's discovery sees the placeable partitions only, and no unreadable file
    found = discover(lake, landing)
    assert found.partitions == {("a", "s1"), ("b", "s1")} and not found.unreadable and not found.changed
    accounting = ingest_accounting(lake).set_index("model")
    assert accounting.loc[UNPLACED_MODEL, "suite"] == str(table)
    assert accounting.loc[UNPLACED_MODEL, "rows_quarantined"] == 2
    assert accounting["rows_accounted"].sum() == 5
    # fixed: the record of the rows set aside goes, with its accounting row
    _write(table, "model,suite,item_id,score\na,s1,q1,1\nc,s1,q1,1\n")
    report = ingest_paths([table], lake)
    assert not report.unplaced and not unplaced_path(lake, table).exists()
    assert UNPLACED_MODEL not in set(ingest_accounting(lake)["model"])


def test_a_moved_or_respelled_log_leaves_one_record_of_its_rows_in_no_partition(tmp_path, monkeypatch):
    from evalpipeline.steps.accounting import UNPLACED_MODEL, ingest_accounting

    monkeypatch.chdir(tmp_path)
    lake = Lake(tmp_path / "lake")
    old = _write(tmp_path / "landing" / "z.csv", "model,suite,item_id,score\nm,s,a,1\n,s,b,1\n")
    ingest_paths([old], lake)
    moved = tmp_path / "landing" / "sub" / "a.csv"
    moved.parent.mkdir()
    old.rename(moved)
    ingest_paths([moved], lake)
    assert [p.name for p in (lake.root / "unplaced").iterdir()] == [unplaced_path(lake, moved).name]
    ingest_paths([moved.relative_to(tmp_path)], lake)  # the same file by its relative path
    assert [p.name for p in (lake.root / "unplaced").iterdir()] == [
        unplaced_path(lake, moved.relative_to(tmp_path)).name
    ]
    accounting = ingest_accounting(lake)
    assert accounting.loc[accounting["model"] == UNPLACED_MODEL, "rows_quarantined"].tolist() == [1]
    # a copy at a path that still exists is another file: its rows are accounted for again
    ingest_paths([_write(tmp_path / "landing" / "copy.csv", moved.read_text())], lake)
    assert len(list((lake.root / "unplaced").iterdir())) == 2


def test_an_old_lakes_unknown_pseudo_partition_is_never_scheduled_and_goes_with_its_logs(tmp_path):
    """Lakes written before unplaced/ kept blank-model rows in a "(unknown)" partition. Discovery must not
    offer it as a changed partition to run (no such Dagster partition exists); reading the logs again
    (the upgrade does, READERS_VERSION) retires it."""
    import shutil

    from evalpipeline.steps.samples import ingest_partitions
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    first = _write(landing / "a.csv", "model,suite,item_id,score\nm,s1,q1,1\n,s1,q2,1\n")
    second = _write(landing / "b.csv", "model,suite,item_id,score\nm,s1,q3,1\n,s1,q4,0\n")
    ingest_paths([first, second], lake)
    legacy = lake.partition_dir("ingested", "(unknown)", "s1")
    legacy.mkdir(parents=True)
    for record in lake.partition_dir("ingested", "m", "s1").glob("*.parquet"):  # stand-ins for the old records
        shutil.copy(record, legacy / record.name)
    _write(first, "model,suite,item_id,score\nm,s1,q1,0\n,s1,q2,1\n")  # a changed log: read again tonight
    found = discover(lake, landing)
    assert found.changed == {("m", "s1")} and not found.retiring and found.partitions == {("m", "s1")}
    _write(second, "model,suite,item_id,score\nm,s1,q3,0\n,s1,q4,0\n")
    ingest_partitions(lake, landing, sorted(discover(lake, landing).partitions))
    assert not legacy.exists() and set(lake.partitions("samples")) == {("m", "s1")}


def test_a_wide_column_named_too_long_sets_aside_that_model_only(tmp_path):
    from evalpipeline.lake.keys import MAX_KEY_LENGTH

    lake = Lake(tmp_path / "lake")
    long_name = "w" * (MAX_KEY_LENGTH + 5)
    table = _write(tmp_path / "suite1.csv", f"item_id,gpt,{long_name}\nq1,1,0\nq2,0,1\n")
    report = ingest_paths([table], lake)
    _accounted(report)
    assert not report.file_errors and set(report.partitions) == {("gpt", "suite1")}
    assert report.rows_ingested == 2 and report.rows_unplaced == 2
    # in a Parquet table (no line numbers) the reasons name the table's rows, not the cells read
    frame = pd.read_csv(table, dtype=str)
    frame.to_parquet(tmp_path / "suite2.parquet")
    pd.concat([frame, frame.head(1)]).to_parquet(tmp_path / "suite3.parquet")
    for name in ("suite2", "suite3"):
        ingest_paths([tmp_path / f"{name}.parquet"], lake)
    reasons = pd.read_parquet(unplaced_path(lake, tmp_path / "suite3.parquet"))["reason"].tolist()
    problem = (
        f"model name {long_name[:60]!r}... encodes to a {MAX_KEY_LENGTH + 5}-character partition key; the limit is 200"
    )
    assert reasons == [
        f"row 0: {problem}",
        f"row 1: {problem}",
        f"row 2: duplicate item 'q1'; first at row 0; {problem}",
    ]


def test_a_real_model_named_like_the_old_placeholder_gets_no_other_rows(tmp_path):
    """Rows without a model were quarantined in a "(unknown)" partition, shared with a real model of
    that name (whose validation they then failed), and a file of them left a 0-row table behind."""
    lake = Lake(tmp_path / "lake")
    table = _write(tmp_path / "t.csv", "model,suite,item_id,score\n(unknown),s1,q1,1\n(unknown),s1,q2,0\n,s1,q3,1\n")
    report = ingest_paths([table], lake)
    _accounted(report)
    assert report.partitions[("(unknown)", "s1")].rows_quarantined == 0
    assert lake.read_partition("samples", "(unknown)", "s1")["item_id"].tolist() == ["q1", "q2"]
    assert report.rows_unplaced == 1
    assert set(lake.partitions("ingested")) == {("(unknown)", "s1")}


@pytest.mark.parametrize(
    "text", ["model,suite,item_id,score\n,s1,q1,1\n,s1,q2,0\n", "model,suite,item_id,score\nm,,q1,1\n"]
)
def test_a_file_none_of_whose_rows_names_a_partition_is_unreadable(tmp_path, text):
    """No partition would ever read it in the nightly: it is reported, not left unaccounted."""
    from evalpipeline.steps.discovery import discover

    landing, lake = tmp_path / "landing", Lake(tmp_path / "lake")
    table = _write(landing / "t.csv", text)
    found = discover(lake, landing)
    assert [e.path for e in found.unreadable] == [str(table)] and not found.partitions
    assert "names both a model and a suite" in found.unreadable[0].error
    report = ingest_paths([table], lake)
    assert [e.path for e in report.file_errors] == [str(table)]
    assert "no row can be placed in a model x suite partition" in report.file_errors[0].error
    assert not lake.partitions("ingested") and not unplaced_path(lake, table).exists()


def test_the_accounting_counts_quarantine_reasons_by_class_not_by_row(tmp_path):
    from evalpipeline.steps.accounting import ingest_accounting

    lake = Lake(tmp_path / "lake")
    table = _write(
        tmp_path / "t.csv",
        "model,suite,item_id,score\na,s1,q1,X\na,s1,q2,X\na,s1,q3,1\na,s1,q3,0\na,s1,q4,1\na,s1,q4,1\n",
    )
    report = ingest_paths([table], lake)
    row = ingest_accounting(lake).set_index(["model", "suite"]).loc[("a", "s1")]
    # the same classes, and counts, as the ingest report gives: two unknown scores are one class, and
    # two duplicates of different items (each reason names its item and lines) another
    assert report.quarantine_reasons == {
        "unknown score value 'X' (value_map knows ['C', 'I', 'N', 'P'])": 2,
        "duplicate (model, suite, item_id, epoch) within one table file": 2,
    }
    assert row["quarantine_reasons"] == "; ".join(f"{n} x {r}" for r, n in sorted(report.quarantine_reasons.items()))
    assert "line " not in row["quarantine_reasons"]


def test_an_unreadable_file_keeps_one_record_until_it_is_read(tmp_path):
    from evalpipeline.steps.accounting import ingest_accounting

    lake = Lake(tmp_path / "lake")
    path = tmp_path / "landing" / "t.csv"
    unreadable = lambda: ingest_accounting(lake).query("model == '(unreadable file)'")["suite"].tolist()  # noqa: E731
    long = IngestOptions(format="long")
    for score in ("1", "0"):  # unreadable (no item_id column) twice, with two contents
        _write(path, f"model,suite,score\nm,s,{score}\n")
        assert len(ingest_paths([path], lake, long).file_errors) == 1
        assert unreadable() == [str(path)]  # one record, of the latest content
    _write(path, "model,suite,item_id,score\nm,s,q1,1\n")  # fixed
    report = ingest_paths([path], lake, long)
    assert not report.file_errors and report.rows_ingested == 1
    assert unreadable() == []


def test_project_configuration_and_cli_flags(tmp_path, monkeypatch, capsys):
    config = _write(
        tmp_path / "evalpipeline.toml",
        """
[ingest]
format = "long"
[ingest.columns]
item_id = "question"
score = "correct"
[ingest.scores]
value_map = { C = 1.0, I = 0.0 }
""",
    )
    options = load_ingest_options(config)
    assert options.format == "long" and options.column_map["score"] == "correct"
    assert dict(options.normalisation.value_map) == {"C": 1.0, "I": 0.0}
    assert load_ingest_options(config, format="wide").format == "wide"
    _write(tmp_path / "bad.toml", "[ingest]\nfromat = 'long'\n")
    with pytest.raises(ConfigError, match="unknown keys in \\[ingest\\]: \\['fromat'\\]"):
        load_ingest_options(tmp_path / "bad.toml")
    src = _write(tmp_path / "in" / "scores.csv", LONG_CSV)
    code = main(
        ["ingest", str(src), "--lake", str(tmp_path / "lake"), "--config", str(config), "--map", "cov_level=level"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "rows: 6 read = 3 ingested + 3 quarantined" in out
    assert "unknown score value 'q3'" not in out


def test_cli_rejects_malformed_map(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest", str(tmp_path), "--map", "item_id"])
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE pairs separated by commas, got 'item_id'" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path), "--map", "bogus=col"]) == 2
    assert "cannot map column 'bogus'" in capsys.readouterr().err


def test_chunked_reading_gives_the_same_tables(tmp_path):
    src = _write(tmp_path / "in" / "scores.csv", LONG_CSV)
    whole, chunked = Lake(tmp_path / "a"), Lake(tmp_path / "b")
    ingest_paths([src], whole, IngestOptions(column_map=MAP))
    report = ingest_paths([src], chunked, IngestOptions(column_map=MAP, chunk_rows=2))
    assert report.file_errors == []
    for table in ("samples", "quarantine"):
        for model in ("m/a", "m/b"):
            pd.testing.assert_frame_equal(
                whole.read_partition(table, model, "s1"), chunked.read_partition(table, model, "s1")
            )


def test_the_accounting_rereads_only_partitions_whose_tables_changed(tmp_path, monkeypatch):
    from evalpipeline.steps import accounting

    lake = Lake(tmp_path / "lake")
    tables = [
        _write(tmp_path / "a.csv", "model,suite,item_id,score\na,s1,q1,X\na,s1,q2,1\n"),
        _write(tmp_path / "b.csv", "model,suite,item_id,score\nb,s1,q1,1\n"),
    ]
    ingest_paths(tables, lake)
    first = accounting.ingest_accounting(lake)
    read = []
    counts = accounting._partition_counts
    monkeypatch.setattr(accounting, "_partition_counts", lambda lake_, m, s: read.append(m) or counts(lake_, m, s))
    assert accounting.ingest_accounting(lake).equals(first) and read == []  # nothing changed: no table read
    _write(tables[1], "model,suite,item_id,score\nb,s1,q1,1\nb,s1,q2,0\nb,s1,q3,Y\n")
    ingest_paths(tables, lake)
    again = accounting.ingest_accounting(lake).set_index("model")
    assert read == ["b"]  # only the partition whose tables were rewritten
    assert again.loc["b", "rows_ingested"] == 2 and again.loc["b", "rows_quarantined"] == 1
    assert again.loc["a"].to_dict() == first.set_index("model").loc["a"].to_dict()


def test_the_accounting_is_versioned_by_the_code_that_classes_reasons(tmp_path, monkeypatch):
    # the quarantine reasons are classed by ingest's rule: an edit there must invalidate the cached
    # counts (and mark the asset stale), or warm and cold runs of the same code would disagree
    from evalpipeline.steps import accounting
    from evalpipeline.ingest import general_reason

    lake = Lake(tmp_path / "lake")
    ingest_paths([_write(tmp_path / "a.csv", "model,suite,item_id,score\na,s1,q1,X\n")], lake)
    versioned = []
    real = accounting.code_version
    monkeypatch.setattr(
        accounting, "code_version", lambda modules, *a, **k: versioned.append(list(modules)) or real(modules, *a, **k)
    )
    accounting.ingest_accounting(lake)
    assert versioned and all(
        general_reason.__module__ in modules and "evalpipeline.steps.accounting" in modules for modules in versioned
    )
    from assets.accounting import ingest_accounting as asset

    assert asset.code_versions_by_key[asset.key] == real(accounting.ACCOUNTING_CODE)


# -- adversarial inputs to the command line ----------


def test_jsonl_columns_are_every_line_s_keys_not_the_first_line_s(tmp_path):
    # the first line has no epoch, error or domain: later lines' values were dropped without a word
    src = _write(
        tmp_path / "ep.jsonl",
        "\n".join(
            [
                '{"model":"m","suite":"s","item_id":"a","score":1}',
                '{"model":"m","suite":"s","item_id":"b","score":1,"epoch":1}',
                '{"model":"m","suite":"s","item_id":"b","score":0,"epoch":2}',
                '{"model":"m","suite":"s","item_id":"c","score":0,"error":"timeout"}',
                '{"model":"m","suite":"s","item_id":"d","score":1,"domain":"math"}',
            ]
        )
        + "\n",
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert report.rows_quarantined == 0
    rows = lake.read_partition("samples", "m", "s").set_index(["item_id", "epoch"])
    assert sorted(rows.index) == [("a", 1), ("b", 1), ("b", 2), ("c", 1), ("d", 1)]
    assert rows.loc[("c", 1), "error"] == "timeout" and pd.isna(rows.loc[("c", 1), "score"])
    assert rows.loc[("d", 1), "domain"] == "math"


def test_jsonl_whose_first_line_is_not_an_object_still_reads_the_others(tmp_path):
    src = _write(tmp_path / "t.jsonl", '[1, 2]\n{"model":"m","suite":"s","item_id":"a","score":1}\n')
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert report.file_errors == [] and report.rows_ingested == 1
    assert lake.read_partition("quarantine", "m", "s").empty or True  # the list line has no model: unplaced
    assert pd.read_parquet(unplaced_path(lake, src))["reason"].tolist() == [
        "line 1: a JSON list, not an object; no model value"
    ]


def test_csv_reasons_name_the_line_a_record_starts_on(tmp_path):
    # blank lines and a quoted newline used to shift every later line number
    src = _write(tmp_path / "t.csv", 'model,suite,item_id,score\n\nm,s,"q\n1",1\n\n\nm,s,q2,zz\nm,s,q3\n')
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    samples = lake.read_partition("samples", "m", "s")
    assert samples["item_id"].tolist() == ["q\n1"] and samples["source_line"].tolist() == [3]
    quarantine = lake.read_partition("quarantine", "m", "s").sort_values("source_line")
    assert quarantine["reason"].tolist() == [
        "line 7: sample 'q2' epoch 1: unknown score value 'zz' (value_map knows ['C', 'I', 'N', 'P'])",
        "line 8: sample 'q3' epoch 1: no score",
    ]


def test_a_csv_record_longer_than_the_header_names_its_line(tmp_path):
    src = _write(tmp_path / "t.csv", "model,suite,item_id,score\nm,s,q1,1\nm,s,q2,1,extra\n")
    report = ingest_paths([src], Lake(tmp_path / "lake"))
    assert report.file_errors[0].error.endswith("line 3: 5 fields where the header has 4")


@pytest.mark.parametrize("kind", ["long csv", "parquet", "wide csv"])
def test_a_column_named_twice_makes_the_file_unreadable(tmp_path, kind):
    if kind == "long csv":
        src = _write(tmp_path / "t.csv", "model,suite,item_id,score,score\nm,s,q1,1,0\n")
    elif kind == "wide csv":
        src = _write(tmp_path / "wsuite.csv", "item_id,gpt-x,claude-y,gpt-x\nq1,1,0,1\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        src = tmp_path / "t.parquet"
        pq.write_table(
            pa.table([["m"], ["s"], ["q1"], [1.0], [0.0]], names=["model", "suite", "item_id", "score", "score"]), src
        )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    assert [e.path for e in report.file_errors] == [str(src)]
    assert "more than once; rename them" in report.file_errors[0].error
    assert report.rows_read == 0 and not lake.partitions("samples")


def test_model_and_suite_names_are_stripped_and_a_name_of_spaces_is_none(tmp_path):
    src = _write(
        tmp_path / "t.csv",
        'model,suite,item_id,score\nm1,s1,q1,1\nm1 ,s1,q2,1\n m1, s1 ,q3,1\n"m1\t",s1,q4,0\n  ,s1,q5,1\n',
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert set(report.partitions) == {("m1", "s1")}
    assert sorted(lake.read_partition("samples", "m1", "s1")["item_id"]) == ["q1", "q2", "q3", "q4"]
    assert pd.read_parquet(unplaced_path(lake, src))["reason"].tolist() == ["line 6: no model value"]


def test_a_blank_fixed_model_is_no_model(tmp_path):
    src = _write(tmp_path / "t.csv", "suite,item_id,score\ns1,q1,1\n")
    report = ingest_paths([src], Lake(tmp_path / "lake"), IngestOptions(model="   "))
    assert "no row can be placed in a model x suite partition" in report.file_errors[0].error


def test_huge_numbers_are_row_reasons_not_file_errors(tmp_path):
    big = "1" + "0" * 400
    src = _write(
        tmp_path / "t.jsonl",
        "\n".join(
            [
                '{"model":"m","suite":"s","item_id":"a","score":1}',
                '{"model":"m","suite":"s","item_id":"b","score":%s}' % big,
                '{"model":"m","suite":"s","item_id":"c","score":1,"epoch":3000000000}',
            ]
        )
        + "\n",
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert report.file_errors == [] and report.rows_ingested == 1
    reasons = lake.read_partition("quarantine", "m", "s").sort_values("source_line")["reason"].tolist()
    assert reasons == [
        "line 2: sample 'b' epoch 1: score 1000000000000000000000000000000000000... is not finite as a number "
        "(beyond 1.8e308)",
        "line 3: epoch 3000000000 is not a whole number from 1 to 2147483647",
    ]


def test_a_covariate_mixing_numbers_and_text_is_named_with_its_line(tmp_path):
    src = _write(
        tmp_path / "t.jsonl",
        '{"model":"m","suite":"s","item_id":"a","score":1,"lvl":1}\n'
        '{"model":"m","suite":"s","item_id":"b","score":1,"lvl":"hard"}\n',
    )
    report = ingest_paths([src], Lake(tmp_path / "lake"), IngestOptions(column_map={"cov_lvl": "lvl"}))
    assert report.file_errors[0].error.endswith(
        "covariate 'cov_lvl' mixes value types: float 1.0 first, then str 'hard' at line 2; "
        "give it one type (all numbers or all text)"
    )


def test_jsonl_integer_and_decimal_covariates_share_a_type(tmp_path):
    src = _write(
        tmp_path / "t.jsonl",
        '{"model":"m","suite":"s","item_id":"a","score":1,"lvl":1}\n'
        '{"model":"m","suite":"s","item_id":"b","score":1,"lvl":1.5}\n',
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map={"cov_lvl": "lvl"}, chunk_rows=1))
    assert report.file_errors == []
    assert lake.read_partition("samples", "m", "s")["cov_lvl"].tolist() == [1.0, 1.5]


def test_a_misspelt_map_column_is_named_as_such(tmp_path):
    src = _write(tmp_path / "t.csv", "model,suite,item_id,acc\nm,s,q1,1\n")
    report = ingest_paths([src], Lake(tmp_path / "lake"), IngestOptions(column_map={"score": "nope"}))
    assert (
        "column mapping score='nope': no such column; the file has ['model', 'suite', 'item_id', 'acc']"
        in report.file_errors[0].error
    )


def test_detection_falls_back_to_the_canonical_column_as_the_reader_does(tmp_path):
    # a folder-wide mapping may name a column some files lack; a file that has the canonical name is read by
    # it (LongTableReader._mapping); detection refused such a file as "long or wide?"
    src = _write(tmp_path / "t.csv", "model,suite,item_id,score\nm,s,q1,1\n")
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map={"score": "acc"}))
    assert report.file_errors == [] and lake.read_partition("samples", "m", "s")["score"].tolist() == [1.0]


def test_two_untimed_tables_say_the_kept_one_is_kept_by_path_not_as_newer(tmp_path):
    monday = _write(tmp_path / "z_monday.csv", "model,suite,item_id,score\nm,s,q1,1\n")
    tuesday = _write(tmp_path / "a_tuesday.csv", "model,suite,item_id,score\nm,s,q1,0\n")
    lake = Lake(tmp_path / "lake")
    ingest_paths([monday], lake)
    report = ingest_paths([tuesday], lake)
    _accounted(report)
    assert lake.read_partition("quarantine", "m", "s")["reason"].tolist() == [
        f"superseded: (item_id 'q1', epoch 1) is also in {monday}, which is kept by path order, not as newer: "
        "a row without a created_at sorts last, then eval_id and path decide (map a created_at column to keep "
        "the newer)"
    ]


def test_a_name_of_spaces_from_any_reader_places_nowhere():
    # Inspect and lm-eval names are not stripped (they are identifiers), but one of spaces is none
    from evalpipeline.ingest.base import placement_problem

    assert placement_problem("  \t", "s") == "no model value"
    assert placement_problem("m", " ") == "no suite value"
    assert placement_problem("m ", "s") is None


# -- the csv-module reader ------------------------------------------


def test_a_quote_left_open_makes_the_file_unreadable_not_one_long_cell(tmp_path):
    src = _write(tmp_path / "t.csv", 'model,suite,item_id,score\nm1,s1,q1,1\nm1,s1,"q2,1\nm1,s1,q3,1\n')
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    assert [e.path for e in report.file_errors] == [str(src)]
    assert report.file_errors[0].error.endswith("line 3: a quoted field is not closed before the end of the file")
    assert report.rows_read == 0


def test_a_closed_multi_line_quote_at_the_end_is_read(tmp_path):
    src = _write(tmp_path / "t.csv", 'model,suite,item_id,score\nm1,s1,q1,1\nm1,s1,"q\n2",1')
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    assert report.file_errors == [] and sorted(lake.read_partition("samples", "m1", "s1")["item_id"]) == ["q\n2", "q1"]


@pytest.mark.parametrize(
    "text, rows",
    [
        ("model,suite,item_id,score\nm1,s1,q1,1\nm1,s1,q2,0\n  \n", 2),
        ("  \n\t\nmodel,suite,item_id,score\nm1,s1,q1,1\n", 1),
    ],
)
def test_lines_of_spaces_are_blank_lines(tmp_path, text, rows):
    src = _write(tmp_path / "t.csv", text)
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert report.file_errors == [] and (report.rows_read, report.rows_ingested) == (rows, rows)


def test_empty_header_names_are_pandas_positional_names_not_a_repeated_column(tmp_path):
    wide = _write(tmp_path / "wsuite.csv", "item_id,m1,m2,,\nq1,1,0,,\nq2,0,1\n")
    long = _write(tmp_path / "t.csv", "model,suite,item_id,score,,\nm1,s1,q1,1,,\n")
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([wide, long], lake)
    _accounted(report)
    assert report.file_errors == [] and (report.rows_read, report.rows_ingested) == (5, 5)


def test_jsonl_integer_covariates_beyond_float_precision_stay_exact(tmp_path):
    src = _write(
        tmp_path / "t.jsonl",
        '{"model":"m","suite":"s","item_id":"a","score":1,"id":12345678901234567}\n'
        '{"model":"m","suite":"s","item_id":"b","score":0,"id":12345678901234569}\n',
    )
    lake = Lake(tmp_path / "lake")
    ingest_paths([src], lake, IngestOptions(column_map={"cov_id": "id"}))
    assert lake.read_partition("samples", "m", "s")["cov_id"].tolist() == [12345678901234567, 12345678901234569]


def test_a_second_scorer_does_not_take_the_place_of_a_quarantined_first(tmp_path):
    # q2's first row (scorer A) has an unknown score; its scorer-B row must not join a table of A scores
    src = _write(
        tmp_path / "t.csv",
        "model,suite,item_id,score,scorer\nm1,s1,q1,1,A\nm1,s1,q1,0,B\n"
        "m1,s1,q2,zz,A\nm1,s1,q2,1,B\nm1,s1,q3,zz,A\nm1,s1,q3,1,A\n",
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    samples = lake.read_partition("samples", "m1", "s1").sort_values("item_id")
    # a same-scorer row may still replace a quarantined first one (q3), as before
    assert samples[["item_id", "scorer"]].values.tolist() == [["q1", "A"], ["q3", "A"]]
    reasons = lake.read_partition("quarantine", "m1", "s1").set_index("source_line")["reason"]
    assert reasons[5] == (
        "line 5: duplicate (model, suite, item_id 'q2', epoch 1) in the file; first at line 4 "
        "(scorer 'A', quarantined there; this row's scorer is 'B': choose one with --scorer)"
    )


def test_wide_model_headers_are_stripped_as_long_model_cells_are(tmp_path):
    src = _write(tmp_path / "wsuite.csv", "item_id, m1,m2 \nq1,1,0\nq2,0,1\n")
    long = _write(tmp_path / "t.csv", "model,suite,item_id,score\nm1 ,wsuite,q3,1\n")
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src, long], lake)
    _accounted(report)
    assert set(report.partitions) == {("m1", "wsuite"), ("m2", "wsuite")}
    assert sorted(lake.read_partition("samples", "m1", "wsuite")["item_id"]) == ["q1", "q2", "q3"]


def test_wide_model_headers_that_differ_only_in_spaces_are_refused(tmp_path):
    src = _write(tmp_path / "wsuite.csv", "item_id,m1, m1\nq1,1,0\n")
    report = ingest_paths([src], Lake(tmp_path / "lake"))
    assert report.file_errors[0].error.endswith(
        "model columns ['m1', ' m1'] name one model once stripped of spaces and in Unicode NFC form; rename them"
    )


def test_wide_model_headers_that_differ_only_in_unicode_form_are_refused(tmp_path):
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    src = _write(tmp_path / "wsuite.csv", f"item_id,{composed},{decomposed}\nq1,1,0\n")
    report = ingest_paths([src], Lake(tmp_path / "lake"))
    assert not report.partitions and report.rows_read == 0
    assert report.file_errors[0].error.endswith(
        f"model columns {[composed, decomposed]} name one model once stripped "
        "of spaces and in Unicode NFC form; rename them"
    )


def test_a_wide_table_whose_only_model_header_is_spaces_is_unreadable_in_discovery_and_ingest(tmp_path):
    from evalpipeline.steps.discovery import discover

    landing = tmp_path / "landing"
    src = _write(landing / "wsuite.csv", "item_id,  \nq1,1\n")
    lake = Lake(tmp_path / "lake")
    found = discover(lake, landing)
    assert [e.path for e in found.unreadable] == [str(src)] and not found.partitions
    report = ingest_paths([src], lake)
    assert "no row can be placed in a model x suite partition" in report.file_errors[0].error


def _named_partitions(path, options=None):
    options = options or IngestOptions()
    return {(p.model, p.suite) for p in reader_for("long").partitions(open_source(path, options), options)}


def test_a_table_names_its_partitions_as_its_rows_are_placed(tmp_path):
    # Text cells are deduplicated before they are named (one scan ran on every ingest step): a
    # name's surrounding spaces still make no new partition, and a blank name still places no row.
    frame = pd.DataFrame(
        {
            "model": ["m", " m", "m ", "n", "  ", None] * 50,
            "suite": ["s", "s", "s ", "s", "s", "s"] * 50,
            "item_id": [f"q{i}" for i in range(300)],
            "score": 1.0,
            "notes": "x" * 40,
        }
    )
    frame.to_parquet(tmp_path / "t.parquet")
    assert _named_partitions(tmp_path / "t.parquet") == {("m", "s"), ("n", "s")}
    # JSON numbers that a hash takes for one value (1, 1.0) are two names; true, which a hash takes for 1
    # too, is none (it named a partition "True" until a review found it: a boolean names nothing).
    lines = [{"model": m, "suite": "s", "item_id": f"q{i}", "score": 1} for i, m in enumerate([1, 1.0, True, 1])]
    _write(tmp_path / "t.jsonl", "\n".join(json.dumps(line) for line in lines) + "\n")
    assert _named_partitions(tmp_path / "t.jsonl") == {("1", "s"), ("1.0", "s")}
    # whole numbers stay whole where a line has no model: the scan names the partitions the reader fills
    lines = [{"model": 7, "suite": "s", "item_id": "q1", "score": 1}, {"suite": "s", "item_id": "q2", "score": 1}]
    _write(tmp_path / "v.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    assert _named_partitions(tmp_path / "v.jsonl") == {("7", "s")}
    # A fixed suite (--suite) names the partitions of a file that has no suite column.
    frame.drop(columns="suite").to_parquet(tmp_path / "u.parquet")
    assert _named_partitions(tmp_path / "u.parquet", IngestOptions(suite="fixed")) == {("m", "fixed"), ("n", "fixed")}


def test_a_covariate_first_valued_after_the_first_chunk_is_kept(tmp_path):
    """A covariate whose first chunk of rows has no value had no type there: the file was unreadable
    ("NumPyConverter doesn't implement <null> conversion")."""
    lines = [
        {"model": "m", "suite": "s", "item_id": f"q{i}", "score": i % 2, **({"tok": i} if i >= 3 else {})}
        for i in range(6)
    ]
    src = _write(tmp_path / "t.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map={"cov_tok": "tok"}, chunk_rows=2))
    assert report.file_errors == [] and report.rows_ingested == 6
    values = lake.read_partition("samples", "m", "s").set_index("item_id")["cov_tok"]
    assert values.isna().tolist() == [True] * 3 + [False] * 3 and values.dropna().tolist() == [3.0, 4.0, 5.0]


def test_a_mapped_covariate_without_values_is_left_out_of_the_partitions_tables(tmp_path):
    """A partition whose rows have no value for a mapped covariate wrote the column typed null: reading
    the samples folder then failed (null next to text in another partition), and the GLMs, which drop
    rows lacking a covariate, found no row to fit."""
    import pyarrow.parquet as pq

    from evalpipeline.models import GlmData

    src = _write(
        tmp_path / "t.csv", "model,suite,item_id,score,level\nm,s,q1,1,\nm,s,q2,0,\nm,t,q1,1,easy\nm,t,q2,0,hard\n"
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake, IngestOptions(column_map={"cov_level": "level"}))
    assert report.file_errors == [] and report.rows_ingested == 4
    empty = lake.table_path("samples", "samples.parquet", "m", "s")
    assert "cov_level" not in pq.read_schema(empty).names
    assert "cov_level" not in pq.read_schema(lake.table_path("quarantine", "quarantine.parquet", "m", "s")).names
    assert len(GlmData.from_samples(lake.read_partition("samples", "m", "s")).units) == 2
    assert lake.read_partition("samples", "m", "t")["cov_level"].tolist() == ["easy", "hard"]
    assert len(pd.read_parquet(lake.root / "samples")) == 4


def test_forget_removes_a_logs_records_and_retires_what_no_other_log_holds(tmp_path):
    from evalpipeline.ingest import forget

    lake = Lake(tmp_path / "lake")
    first = _write(tmp_path / "first.csv", "model,suite,item_id,score\nm,s,q1,1\nm,s,q2,0\nn,s,q1,1\n")
    second = _write(tmp_path / "second.csv", "model,suite,item_id,score\nm,s,q3,1\n")
    broken = _write(tmp_path / "broken.csv", 'model,suite,item_id,score\n"m,s,q1,1\n')  # a quote left open
    report = ingest_paths([first, second, broken], lake)
    assert report.rows_ingested == 4 and len(report.file_errors) == 1
    with pytest.raises(ValueError, match="the lake holds nothing of .*other.csv"):
        forget(lake, [tmp_path / "other.csv"])
    with pytest.raises(ValueError, match="first.csv: kept for the test"):
        forget(lake, [first], keep_if=lambda log: "kept for the test")
    found = forget(lake, [first, broken])
    assert found.rows == {("m", "s"): 2, ("n", "s"): 1} and set(found.retired) == {("n", "s")}
    assert found.other_records == 1 and not list((lake.root / "file_errors").glob("*.json"))
    assert lake.partitions("ingested") == [("m", "s")] and not (lake.root / "samples" / "model=n").exists()
    assert len(list(lake.partition_dir("ingested", "m", "s").glob("*.parquet"))) == 1  # second.csv's, kept
    assert forget(lake, model="m").retired.keys() == {("m", "s")}
    assert lake.partitions("ingested") == []
    # rows in no partition are kept under unplaced/ by the path's hash: forgotten by any spelling of it
    loose = _write(tmp_path / "loose.csv", "model,suite,item_id,score\n,s,q1,1\nm,s,q1,1\n")
    assert ingest_paths([loose], lake).rows_quarantined == 1
    assert forget(lake, [f"{tmp_path}/./loose.csv"]).other_records == 1
    assert not list((lake.root / "unplaced").glob("*.parquet")) and lake.partitions("ingested") == []


# -- adversarial inputs to the table readers ------------------------------


def _table(lake, name, model, suite):
    return pd.read_parquet(lake.table_path(name, f"{name}.parquet", model, suite))


def test_whole_number_ids_stay_exact_when_a_row_lacks_one(tmp_path):
    """A JSONL or Parquet id column of integers with one missing value came as floats: item 7 was stored
    as "7.0", and 2**53 + 1 as 2**53, so that a real item 2**53 was quarantined as its duplicate."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    big = 2**53
    rows = [
        {"model": "m1", "suite": "s1", "item_id": 7, "score": 1},
        {"model": "m1", "suite": "s1", "item_id": big + 1, "score": 1},
        {"model": "m1", "suite": "s1", "item_id": big, "score": 0},
        {"model": "m1", "suite": "s1", "score": 0},
    ]
    _write(tmp_path / "in" / "gap.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(
        pa.table(
            {
                "model": ["m2"] * 3,
                "suite": ["s1"] * 3,
                "item_id": pa.array([7, None, big + 1], pa.int64()),
                "score": [1, 0, 1],
            }
        ),
        tmp_path / "in" / "gap.parquet",
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths(find_log_files(tmp_path / "in"), lake)
    _accounted(report)
    assert sorted(_table(lake, "samples", "m1", "s1")["item_id"]) == sorted(["7", str(big), str(big + 1)])
    assert sorted(_table(lake, "samples", "m2", "s1")["item_id"]) == sorted(["7", str(big + 1)])
    assert list(_table(lake, "quarantine", "m1", "s1")["reason"]) == ["line 4: no item_id value"]


def test_a_list_object_or_boolean_cell_names_no_item_model_or_suite(tmp_path):
    """``str`` made them the item "{'x': 1}", the model "['m1']" and the item "True". Decimals and dates
    still name (a review found a first version of this fix refusing them)."""
    rows = [
        {"model": "m1", "suite": "s1", "item_id": "q1", "score": 1},
        {"model": "m1", "suite": "s1", "item_id": {"x": 1}, "score": 1},
        {"model": "m1", "suite": "s1", "item_id": True, "score": 1},
        {"model": "m1", "suite": "s1", "item_id": [2], "score": 1},
        {"model": ["m1"], "suite": "s1", "item_id": "q2", "score": 1},
    ]
    src = _write(tmp_path / "in" / "odd.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([src], lake)
    _accounted(report)
    assert set(report.partitions) == {("m1", "s1")} and report.rows_unplaced == 1
    assert list(_table(lake, "samples", "m1", "s1")["item_id"]) == ["q1"]
    assert list(_table(lake, "quarantine", "m1", "s1")["reason"]) == [
        "line 2: item_id {'x': 1} is not a name or a number",
        "line 3: item_id True is not a name or a number",
        "line 4: item_id [2] is not a name or a number",
    ]


def test_created_at_now_or_today_is_not_a_time(tmp_path):
    """pandas reads "now" and "today" as the moment of reading, so those rows beat every real run's."""
    src = _write(
        tmp_path / "in" / "t.csv",
        "model,suite,item_id,score,created_at\nm1,s1,q1,1,now\nm1,s1,q2,1,Today\nm1,s1,q3,1,2026-01-01\n",
    )
    lake = Lake(tmp_path / "lake")
    _accounted(ingest_paths([src], lake))
    assert list(_table(lake, "samples", "m1", "s1")["item_id"]) == ["q3"]
    assert [r.split(" (")[0] for r in _table(lake, "quarantine", "m1", "s1")["reason"]] == [
        "line 2: created_at 'now' is not a time",
        "line 3: created_at 'Today' is not a time",
    ]


def test_a_covariate_of_two_types_in_two_logs_leaves_that_partition_and_names_both_files(tmp_path, capsys):
    """A number in a JSONL log and text in a CSV one (CSV cells are text) was a SchemaError traceback naming
    neither file, and the ingest stopped there; now that partition is reported, and the others land."""
    _write(tmp_path / "in" / "a.jsonl", '{"model": "m1", "suite": "s1", "item_id": "q1", "score": 1, "level": 3}\n')
    _write(tmp_path / "in" / "b.csv", "model,suite,item_id,score,level\nm1,s1,q2,1,4\nm2,s1,q1,1,4\n")
    code = main(
        ["ingest", str(tmp_path / "in"), "--lake", str(tmp_path / "lake"), "--map", "cov_level=level", "--no-validate"]
    )
    out = capsys.readouterr().out
    assert code == 1 and "Traceback" not in out
    why = (
        f"covariate 'cov_level' mixes value types: float 3.0 first in {tmp_path / 'in' / 'a.jsonl'} at line 1, "
        f"then str '4' in {tmp_path / 'in' / 'b.csv'} at line 2; give it one type (all numbers or all text)"
    )
    assert f"  m1 x s1: NOT CONSOLIDATED, 2 staged rows, its tables left as they were (or absent): {why}" in out
    assert "rows: 1 read = 1 ingested + 0 quarantined; and 2 staged in partitions NOT CONSOLIDATED" in out
    lake = Lake(tmp_path / "lake")
    assert list(_table(lake, "samples", "m2", "s1")["item_id"]) == ["q1"]
    assert not lake.table_path("samples", "samples.parquet", "m1", "s1").exists()


def test_decimal_and_date_ids_name_items_as_before(tmp_path):
    """The first version of the list/object/boolean fix accepted only text and numbers, and quarantined
    every row of a Parquet file whose ids are decimals or dates."""
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table(
            {
                "model": ["m1", "m1"],
                "suite": ["s1", "s1"],
                "item_id": pa.array([decimal.Decimal("0"), decimal.Decimal("12")], pa.decimal128(10, 0)),
                "score": [1, 0],
            }
        ),
        tmp_path / "in" / "dec.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "model": ["m2"],
                "suite": ["s1"],
                "item_id": pa.array([datetime.date(2020, 1, 1)], pa.date32()),
                "score": [1],
            }
        ),
        tmp_path / "in" / "date.parquet",
    )
    lake = Lake(tmp_path / "lake")
    report = ingest_paths(find_log_files(tmp_path / "in"), lake)
    assert report.rows_quarantined == 0 and report.rows_ingested == 3
    assert sorted(_table(lake, "samples", "m1", "s1")["item_id"]) == ["0", "12"]
    assert list(_table(lake, "samples", "m2", "s1")["item_id"]) == ["2020-01-01"]


def test_answer_and_target_columns_of_every_long_format(tmp_path):
    """Optional label columns, mapped or under their own names: a missing label is null, a whole number
    stays whole where a row lacks one, a list of several targets is a JSON list."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv = _write(
        tmp_path / "in" / "labels.csv", "model,suite,item_id,score,pred,gold\nm,s,q1,1,A,A\nm,s,q2,0,B,C\nm,s,q3,0,,C\n"
    )
    lake = Lake(tmp_path / "lake")
    ingest_paths([csv], lake, IngestOptions(column_map={"answer": "pred", "target": "gold"}))
    rows = lake.read_partition("samples", "m", "s").set_index("item_id")
    assert _values(rows["answer"]) == ["A", "B", None] and _values(rows["target"]) == ["A", "C", "C"]

    table = pa.table(
        {
            "model": ["m2"] * 3,
            "suite": ["s"] * 3,
            "item_id": ["q1", "q2", "q3"],
            "score": [1.0, 0.0, 1.0],
            "answer": pa.array([7, None, 2], pa.int64()),
            "target": pa.array([["7"], ["3", "4"], ["2"]], pa.list_(pa.string())),
        }
    )
    pq.write_table(table, tmp_path / "in" / "labels.parquet")
    (tmp_path / "in" / "labels.jsonl").write_text(
        '{"model": "m3", "suite": "s", "item_id": "q1", "score": 1, "answer": 7, "target": 7}\n'
        '{"model": "m3", "suite": "s", "item_id": "q2", "score": 0, "target": ["a", "b"]}\n'
    )
    ingest_paths([tmp_path / "in" / "labels.parquet", tmp_path / "in" / "labels.jsonl"], lake, IngestOptions())
    parquet = lake.read_partition("samples", "m2", "s").set_index("item_id")
    assert _values(parquet["answer"]) == ["7", None, "2"]  # not "7.0": the column has a gap
    assert _values(parquet["target"]) == ["7", '["3", "4"]', "2"]
    jsonl = lake.read_partition("samples", "m3", "s").set_index("item_id")
    assert _values(jsonl["answer"]) == ["7", None] and _values(jsonl["target"]) == ["7", '["a", "b"]']


def _values(column: pd.Series) -> list:
    """A text column's values with None for its missing ones (pandas' str dtype shows them as NaN)."""
    return [None if pd.isna(v) else v for v in column]


def test_ingest_of_a_table_with_many_partitions_prints_bounded_lines(tmp_path, capsys):
    # 6 models x 5 suites in one table: one progress line of counts, 20 partitions' accounting and a count of
    # the rest; --verbose lists every partition
    import evalpipeline.cli.main as cli

    rows = [
        {"model": f"m{m:02d}", "suite": f"s{s:02d}", "item_id": "q1", "score": 1.0} for m in range(6) for s in range(5)
    ]
    table = tmp_path / "wide.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    assert cli.main(["ingest", str(table), "--lake", str(tmp_path / "lake"), "--no-validate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in out) < 300
    assert any("30 rows in 30 partitions (6 model(s) x 5 suite(s))" in line for line in out)
    assert sum(" x s" in line and "ingested" in line for line in out) == 20
    assert any("... and 10 more partition(s)" in line for line in out)
    assert cli.main(["ingest", str(table), "--lake", str(tmp_path / "lake2"), "--no-validate", "--verbose"]) == 0
    assert sum(" x s" in line and "ingested" in line for line in capsys.readouterr().out.splitlines()) == 30
