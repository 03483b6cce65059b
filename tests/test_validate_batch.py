"""One GX run over many partitions (evalpipeline.validate.batch) gives each partition it vouches for
exactly the report it would get alone, and vouches for no partition that fails anything."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalpipeline.validate import ValidationSettings, validate_samples
from evalpipeline.validate.batch import BATCH_MANIFEST, BatchItem, validate_batch
from tests.test_validate import errored, make_samples, row


def _graded(frame: pd.DataFrame, labels) -> pd.DataFrame:
    frame = frame.copy()
    frame["correct"] = frame["correct"].astype(object)
    frame.loc[labels, "score"] = 0.5
    frame.loc[labels, "correct"] = None
    return frame


def _corpus() -> dict[str, tuple[pd.DataFrame, pd.DataFrame | None, bool]]:
    """name -> (samples, quarantine, passes alone)."""
    base = make_samples(n_items=6, epochs=2)
    cases: dict[str, tuple[pd.DataFrame, pd.DataFrame | None, bool]] = {}
    for seed in range(3):
        cases[f"clean-{seed}"] = (make_samples(n_items=5 + seed, epochs=2, seed=seed), None, True)
    cases["clean-one-epoch"] = (make_samples(n_items=9, epochs=1, seed=7), None, True)
    cases["some-errored"] = (errored(base, [row(base, 0, 1)]), None, True)
    cases["errored-above-bound"] = (errored(base, list(range(8))), None, False)
    duplicate = pd.concat([base, base.iloc[[3]]], ignore_index=True)
    cases["duplicate-key"] = (duplicate, None, False)
    null_item = base.copy()
    null_item.loc[2, "item_id"] = None
    cases["null-item"] = (null_item, None, False)
    out_of_range = base.copy()
    out_of_range.loc[1, "score"] = 1.5
    cases["score-out-of-range"] = (out_of_range, None, False)
    mismatch = base.copy()
    mismatch.loc[0, "correct"] = not bool(mismatch.loc[0, "correct"])
    cases["correct-mismatch"] = (mismatch, None, False)
    late = base.copy()
    late.loc[4, "epoch"] = 5000
    cases["epoch-out-of-range"] = (late, None, False)
    cases["graded"] = (_graded(base, [0, 1, 2]), None, True)
    cases["graded-all"] = (_graded(base, list(base.index)), None, True)
    cases["graded-other-rows"] = (_graded(base, [5, 6]), None, True)
    all_errored = errored(base, list(base.index))
    cases["all-errored"] = (all_errored, None, False)
    wide_epoch = base.copy()
    wide_epoch["epoch"] = wide_epoch["epoch"].astype("int64")
    cases["epoch-int64"] = (wide_epoch, None, False)
    cases["missing-column"] = (base.drop(columns=["log_format"]), None, False)
    cases["covariate"] = (base.assign(cov_len=np.arange(len(base), dtype=float)), None, True)
    cases["covariate-2"] = (make_samples(n_items=3, seed=4).assign(cov_len=1.0), None, True)
    cases["empty"] = (base.iloc[0:0], None, False)
    quarantined = base.iloc[[0]].assign(item_id="item-999", reason="unknown score value")
    cases["item-only-in-quarantine"] = (base, quarantined, False)
    cases["same-items-as-clean-0"] = (make_samples(n_items=5, epochs=2, seed=0), None, True)
    return cases


def _view(report) -> tuple:
    return (
        [
            (
                c.name,
                c.passed,
                c.description,
                json.dumps(c.observed, sort_keys=True, default=str),
                c.expectation_type,
                c.source,
                len(c.examples),
            )
            for c in report.checks
        ],
        report.row_failures,
        report.rows,
    )


@pytest.mark.parametrize("settings", [ValidationSettings(), ValidationSettings(epoch_max=3, max_error_share=0.2)])
def test_every_report_of_a_batch_is_the_one_the_partition_gets_alone(settings, tmp_path):
    cases = _corpus()
    items = [BatchItem(samples, quarantine, name) for name, (samples, quarantine, _) in cases.items()]
    batched = validate_batch(items, settings, tmp_path / "ranges")
    vouched = []
    for item, report in zip(items, batched):
        alone = validate_samples(item.samples, settings, quarantine=item.quarantine, label=item.label)
        if report is None:
            continue
        vouched.append(item.label)
        assert alone.success, f"{item.label}: the batch vouched for a partition that fails {alone.failed_checks}"
        assert _view(report) == _view(alone), item.label
    expected = {name for name, (_, _, passes) in cases.items() if passes}
    if settings.epoch_max == 3:  # two epochs everywhere: all still in range; the errored share bound is 20%
        expected -= {
            name
            for name in expected
            if not validate_samples(cases[name][0], settings, quarantine=cases[name][1]).success
        }
    # every partition that passes alone and shares its columns and dtypes with another is vouched for
    shapes = {}
    for name in expected:
        frame = cases[name][0]
        shapes.setdefault((tuple(frame.columns), tuple(map(repr, frame.dtypes))), []).append(name)
    lonely = {names[0] for names in shapes.values() if len(names) == 1}
    assert lonely <= {"covariate-2", "covariate", "graded", "graded-all", "graded-other-rows", "some-errored"}
    assert set(vouched) >= expected - lonely - {"graded-all"}  # all-null correct: GX's percentage is undefined
    # the batch's Data Docs site lists what it validated
    sites = [p for p in (tmp_path / "ranges").iterdir() if not p.name.startswith(".")]
    assert sites and all((s / "index.html").is_file() for s in sites)
    listed = {e["label"] for s in sites for e in json.loads((s / BATCH_MANIFEST).read_text())}
    assert set(vouched) <= listed
    report = next(r for r in batched if r is not None)
    assert report.data_docs_page.is_file() and report.data_docs_index.parent in sites


def test_a_batch_of_one_shape_is_one_gx_run(monkeypatch):
    from evalpipeline.validate import batch

    calls = []
    original = batch._run_gx
    monkeypatch.setattr(batch, "_run_gx", lambda *a, **k: calls.append(1) or original(*a, **k))
    items = [BatchItem(make_samples(n_items=4, seed=s), None, f"p{s}") for s in range(5)]
    reports = validate_batch(items)
    assert len(calls) == 1 and all(r is not None and r.success for r in reports)


# -- in the ingest pipeline (evalpipeline.steps.samples.PartitionValidator) ---------------------------------------


def _landing(tmp_path, *, bad_epoch: bool) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    rows = [
        {"model": f"m{m}", "suite": f"s{s}", "item_id": f"q{i}", "epoch": 1, "score": float((i + m) % 2)}
        for m in range(3)
        for s in range(2)
        for i in range(6)
    ]
    if bad_epoch:  # the last model's first suite gets a row GX rejects (epoch above epoch_max)
        rows.append({"model": "m2", "suite": "s0", "item_id": "q0", "epoch": 5000, "score": 1.0})
    pd.DataFrame(rows).to_parquet(landing / "scores.parquet")
    return landing


def test_ingest_validates_clean_partitions_together_and_a_failing_one_alone(tmp_path, monkeypatch):
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import ingest_partitions, partition_validator
    from evalpipeline.validate import batch, run

    gx_runs = []
    original = run._run_gx
    monkeypatch.setattr(run, "_run_gx", lambda frame, *a: gx_runs.append(len(frame)) or original(frame, *a))
    monkeypatch.setattr(batch, "_run_gx", run._run_gx)
    lake = Lake(tmp_path / "lake")
    pairs = [(f"m{m}", f"s{s}") for m in range(3) for s in range(2)]
    report = ingest_partitions(lake, _landing(tmp_path, bad_epoch=True), pairs, validator=partition_validator(lake))
    # one run over the six candidates (37 rows); the five that passed again, for a Data Docs site of a
    # validation that passed; then m2 x s0 alone twice: with its bad row, then without it
    assert gx_runs == [37, 30, 7, 6]
    bad = report.partitions[("m2", "s0")]
    assert bad.rows_failed_validation == 1 and bad.validation.success
    quarantine = pd.read_parquet(lake.table_path("quarantine", "quarantine.parquet", "m2", "s0"))
    assert quarantine["reason"].str.startswith("validation: expect_column_values_to_be_between(epoch").all()
    # its Data Docs are GX's own site; the others' pages link the batch's site, which lists them
    assert "evalpipeline validated in batch" not in bad.validation.data_docs_index.read_text()
    (site,) = (lake.root / "validation/data_docs/batches").iterdir()
    listed = {tuple(e["key"]) for e in json.loads((site / BATCH_MANIFEST).read_text())}
    assert listed == set(pairs) - {("m2", "s0")}
    for pair in listed:
        account = report.partitions[pair]
        assert account.validation.success and account.rows_ingested == 6
        page = account.validation.data_docs_index
        assert page == lake.partition_dir("validation/data_docs", *pair) / "index.html"
        text = page.read_text()
        assert f"validated in batch {site.name} " in text
        from urllib.parse import unquote
        import re

        target = unquote(re.search(r'url=([^"]+)"', text).group(1))
        assert (page.parent / target).resolve() == account.validation.data_docs_page.resolve()
        assert account.validation.data_docs_page.is_file()


def test_a_table_changed_after_preparing_is_validated_alone(tmp_path):
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import partition_validator

    lake = Lake(tmp_path / "lake")
    validator = partition_validator(lake, data_docs=False)
    tables = {s: make_samples(n_items=4, seed=s) for s in range(3)}
    validator.prepare([(tables[s], None, "m", f"s{s}") for s in range(3)])
    assert validator(tables[0], None, "m", "s0").timings.keys() == {"gx_run_share_of_batch"}
    changed = tables[1].copy()
    changed.loc[0, "score"] = 1.0 - changed.loc[0, "score"]
    changed.loc[0, "correct"] = not changed.loc[0, "correct"]
    assert "gx_run" in validator(changed, None, "m", "s1").timings  # not the prepared report
    late = tables[2].copy()
    late.loc[0, "epoch"] = 5000
    assert not validator(late, None, "m", "s2").success


def test_batch_sites_no_partition_links_are_swept_after_the_grace_period(tmp_path, monkeypatch):
    import os
    import time

    from evalpipeline.lake import Lake
    from evalpipeline.steps import samples as pipeline
    from evalpipeline.steps.samples import ingest_partitions, partition_validator

    lake = Lake(tmp_path / "lake")
    pairs = [(f"m{m}", f"s{s}") for m in range(3) for s in range(2)]
    landing = _landing(tmp_path, bad_epoch=False)
    ingest_partitions(lake, landing, pairs, validator=partition_validator(lake))
    (first,) = (lake.root / "validation/data_docs/batches").iterdir()
    # new scores for every partition: a new batch site, and no page links the first any more
    frame = pd.read_parquet(landing / "scores.parquet")
    frame["score"] = 1.0 - frame["score"]
    frame.to_parquet(landing / "scores.parquet")
    ingest_partitions(lake, landing, pairs, validator=partition_validator(lake))
    sites = set((lake.root / "validation/data_docs/batches").iterdir())
    assert first in sites and len(sites) == 2  # within the grace period: kept
    old = time.time() - pipeline.BATCH_SITE_GRACE_SECONDS - 60
    for site in sites:
        os.utime(site, (old, old))
    removed = partition_validator(lake).sweep_batch_sites()
    assert removed == [first] and set((lake.root / "validation/data_docs/batches").iterdir()) == sites - {first}


def test_a_batch_whose_gx_run_raises_leaves_every_partition_to_the_single_path(tmp_path, monkeypatch):
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import ingest_partitions, partition_validator
    from evalpipeline.validate import batch

    def broken(*_args, **_kwargs):
        raise RuntimeError("GX could not run on the concatenation")

    monkeypatch.setattr(batch, "_run_gx", broken)
    lake = Lake(tmp_path / "lake")
    validator = partition_validator(lake)
    pairs = [(f"m{m}", f"s{s}") for m in range(3) for s in range(2)]
    report = ingest_partitions(lake, _landing(tmp_path, bad_epoch=False), pairs, validator=validator)
    assert validator.batch_error == "RuntimeError: GX could not run on the concatenation"
    for pair in pairs:
        validation = report.partitions[pair].validation
        assert validation.success and "gx_run" in validation.timings  # validated alone
        assert "validated in batch" not in validation.data_docs_index.read_text()


def test_batches_hold_a_bounded_number_of_rows_and_a_large_partition_is_validated_alone(tmp_path, monkeypatch):
    from evalpipeline import ingest
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import ingest_partitions, partition_validator

    monkeypatch.setattr(ingest, "BATCH_VALIDATION_ROWS", 13)  # two 6-row partitions a batch
    lake = Lake(tmp_path / "lake")
    validator = partition_validator(lake, data_docs=False)
    batches = []
    original = validator.prepare
    monkeypatch.setattr(
        validator,
        "prepare",
        lambda candidates: batches.append(sorted((m, s) for _, _, m, s in candidates)) or original(candidates),
    )
    landing = _landing(tmp_path, bad_epoch=True)  # m2 x s0 has 7 staged rows
    pairs = [(f"m{m}", f"s{s}") for m in range(3) for s in range(2)]
    frame = pd.read_parquet(landing / "scores.parquet")
    extra = frame[(frame["model"] == "m1") & (frame["suite"] == "s1")].assign(epoch=2)
    pd.concat([frame, extra, extra.assign(epoch=3)]).to_parquet(landing / "scores.parquet")  # m1 x s1: 18 rows
    report = ingest_partitions(lake, landing, pairs, validator=validator)
    assert batches == [[("m0", "s0"), ("m0", "s1")], [("m1", "s0"), ("m2", "s0")]]  # m2 x s1 ends alone
    assert all(report.partitions[p].validation.success for p in pairs)
    assert report.partitions[("m1", "s1")].rows_ingested == 18
