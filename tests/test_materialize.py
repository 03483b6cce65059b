"""Materialising assets one partition at a time: a partition and its leaderboard, what a killed run
leaves stale, validation blocking the fit, rows in no partition reaching the accounting."""

import time

import pandas as pd
import pytest
from dagster import AssetKey, DagsterInstance, materialize

from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors, suite_leaderboard
from assets.samples import VALIDATION_CHECKS, eval_samples
from evalpipeline.lake.keys import to_partition_key
from tests.helpers.inspect_logs import echo, make_log
from tests.helpers.dagster import lake_resources


def test_materialize_one_partition_and_the_leaderboard(landing, tmp_path):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha"), to_partition_key("mockllm/beta/v2")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite"), "other"])
    resources = lake_resources(tmp_path / "lake", landing)
    for model in ["mockllm/alpha", "mockllm/beta/v2"]:
        result = materialize(
            [eval_samples, accuracy_posteriors],
            partition_key=model_suite_key(model, "unit suite"),
            instance=instance,
            resources=resources,
        )
        assert result.success
        meta = result.asset_materializations_for_node("eval_samples")[0].metadata
        assert meta["rows_read"].value == 6 == meta["rows_ingested"].value + meta["rows_quarantined"].value
        assert (tmp_path / "lake" / "validation" / "data_docs").exists() and "index.html" in meta["data_docs"].value
        assert all(c.passed for c in result.get_asset_check_evaluations())
    board_run = materialize(
        [suite_leaderboard], partition_key=to_partition_key("unit suite"), instance=instance, resources=resources
    )
    assert board_run.success
    board = pd.read_parquet(tmp_path / "lake/suite_leaderboard/suite=unit%20suite/leaderboard.parquet")
    # beta answered all 6 right, alpha 3 of 6; (alpha, other) was never materialised and is simply absent.
    assert board["model"].tolist() == ["mockllm/beta/v2", "mockllm/alpha"]
    assert board["posterior_mean"].tolist() == pytest.approx([7 / 8, 4 / 8])
    event = instance.get_latest_materialization_event(AssetKey("suite_leaderboard"))
    assert event.asset_materialization.metadata["dagster/row_count"].value == 2


def test_what_a_killed_run_leaves_behind_is_stale_until_refreshed(tmp_path):
    """A nightly killed after staging a changed log (or after some of its assets) must be finished by
    the next one, although the lake already holds the log's bytes: the sample table whose files
    changed after it was recorded, then each asset older than its input, is stale until rerun."""
    from assets.schedules import current_files_states, input_partitions, stale_partitions
    from evalpipeline.lake import Lake
    from evalpipeline.steps.samples import ingest_partitions
    from evalpipeline.steps.discovery import discover

    landing = tmp_path / "landing"
    make_log(landing, model="mockllm/alpha", suite="unit suite", items=6)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/alpha")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    resources = lake_resources(tmp_path / "lake", landing)
    pair_key, suite_key = model_suite_key("mockllm/alpha", "unit suite"), to_partition_key("unit suite")
    store = Lake(tmp_path / "lake")
    pair_assets, suite_assets = [eval_samples, accuracy_posteriors], [suite_leaderboard]

    def stale() -> dict[str, set[str]]:
        discovery = discover(store, landing)
        assert not discovery.changed  # the lake holds every log: only the checks below can tell
        inputs = input_partitions(pair_assets + suite_assets, discovery.partitions)
        found = set()
        for assets, partition, states in (
            (pair_assets, str(pair_key), current_files_states(store, discovery.partitions)),
            (suite_assets, suite_key, None),
        ):
            versions = {k: v for a in assets for k, v in a.code_versions_by_key.items()}
            why = stale_partitions(instance, versions, [partition], inputs=inputs, files_states=states)
            found |= {reason for reasons in why.values() for reason in reasons.values()}
        return found

    def run(assets, key):
        assert materialize(assets, partition_key=key, instance=instance, resources=resources).success

    run(pair_assets, pair_key)
    run(suite_assets, suite_key)
    assert stale() == set()
    # a second log of the same pair is staged and consolidated, then the run is killed. Inspect records
    # whole seconds: in the first log's second the two would tie, and which is kept would be arbitrary.
    time.sleep(1.05 - time.time() % 1)
    make_log(
        landing, model="mockllm/alpha", suite="unit suite", items=6, answers={(f"q{i}", 1): "yes" for i in range(6)}
    )
    ingest_partitions(store, landing, [("mockllm/alpha", "unit suite")])
    assert stale() == {"eval_samples its files changed since (an interrupted run, or an ingest outside Dagster)"}
    run([eval_samples], pair_key)  # killed after the sample table, before the posteriors
    # the leaderboard reads the sample table's verdict too (a table rejected later leaves it)
    assert stale() == {
        "accuracy_posteriors older than its input eval_samples",
        "suite_leaderboard older than its input eval_samples",
    }
    run([accuracy_posteriors], pair_key)  # killed before the suite stage
    assert stale() == {"suite_leaderboard older than its input accuracy_posteriors, eval_samples"}
    run(suite_assets, suite_key)
    assert stale() == set()
    board = pd.read_parquet(store.root / "suite_leaderboard/suite=unit%20suite/leaderboard.parquet")
    assert board["posterior_mean"].tolist() == pytest.approx([7 / 8])  # the newer log's 6 of 6, not 3 of 6
    instance.dispose()


def test_failing_validation_blocks_the_downstream_fit(tmp_path):
    landing = tmp_path / "landing"
    # every answer is scored with an unknown value: all rows quarantined, the sample table is empty
    make_log(landing, model="mockllm/broken", suite="unit suite", items=4, scorers=[echo()])
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/broken")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize(
        [eval_samples, accuracy_posteriors],
        partition_key=model_suite_key("mockllm/broken", "unit suite"),
        instance=instance,
        resources=lake_resources(tmp_path / "lake", landing),
        raise_on_error=False,
    )
    assert not result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {spec.name for spec in VALIDATION_CHECKS}
    assert not checks["row_count_positive"].passed
    assert checks["row_count_positive"].metadata["partition"].value == "mockllm/broken x unit suite"
    meta = result.asset_materializations_for_node("eval_samples")[0].metadata
    assert (meta["rows_read"].value, meta["rows_ingested"].value, meta["rows_quarantined"].value) == (4, 0, 4)
    assert result.asset_materializations_for_node("accuracy_posteriors") == []
    assert not (tmp_path / "lake" / "accuracy_posteriors").exists()


def test_rows_in_no_partition_reach_the_accounting_asset(tmp_path):
    """A landing table with rows that name no model, or a model too long for a partition key: the
    partition of the file's other rows ingests them, and the accounting counts the rest."""
    from assets.accounting import ingest_accounting
    from evalpipeline.steps.accounting import UNPLACED_MODEL

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "t.csv").write_text(f"model,suite,item_id,score\nm,s,q1,1\nm,s,q2,0\n,s,q3,1\n{'x' * 201},s,q1,1\n")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", ["m"])
    instance.add_dynamic_partitions("suite", ["s"])
    resources = lake_resources(tmp_path / "lake", landing)
    assert materialize(
        [eval_samples], partition_key=model_suite_key("m", "s"), instance=instance, resources=resources
    ).success
    result = materialize([ingest_accounting], instance=instance, resources=resources)
    meta = result.asset_materializations_for_node("ingest_accounting")[0].metadata
    assert (meta["rows_ingested"].value, meta["rows_quarantined"].value) == (2, 2)
    assert meta["rows_in_no_partition"].value == 2 and meta["unreadable_files"].value == 0
    table = pd.read_parquet(tmp_path / "lake" / "ingest_accounting" / "accounting.parquet")
    assert table["model"].tolist() == ["m", UNPLACED_MODEL] and table["suite"].tolist()[1] == str(landing / "t.csv")
    instance.dispose()
