"""What `evalpipeline run` runs and in which ranges (resources/run/plan.py), without an instance."""

from types import SimpleNamespace

from assets.jobs import JOB_STEPS, ingest_and_fit_job, model_job, model_profile_job, suite_job
from assets.partitions import split_failed_range
from evalpipeline.lake.keys import to_partition_key
from resources.run.plan import NO_STALE, RunPlanner, profile_shares, run_scope, with_data


def _discovery(partitions, changed=(), retiring=()):
    partitions = set(partitions)
    return SimpleNamespace(
        partitions=partitions,
        changed=set(changed),
        retiring=set(retiring),
        suites={s for _, s in partitions},
        models={m for m, _ in partitions},
    )


GRID = [(m, s) for m in ("a", "b", "c") for s in ("x", "y")]


def test_a_full_run_covers_everything_and_a_nightly_what_a_new_model_touches():
    full = run_scope(_discovery(GRID), NO_STALE, only_changed=False)
    assert full.pairs == sorted(GRID) and full.suites == ["x", "y"] and full.models == ["a", "b", "c"]
    assert full.profile_only == []
    # a new model d on suite x: its partition, suite x, model d in full, the others on x their profile only
    nightly = run_scope(_discovery([*GRID, ("d", "x")], changed=[("d", "x")]), NO_STALE, only_changed=True)
    assert nightly.pairs == [("d", "x")] and nightly.suites == ["x"]
    assert nightly.models == ["d"] and nightly.profile_only == ["a", "b", "c"]


def test_stages_are_ranges_of_adjacent_partitions_in_the_instances_order():
    models, suites = [to_partition_key(m) for m in "abc"], [to_partition_key(s) for s in "xy"]
    planner = RunPlanner(models, suites, partitions_per_run=4, workers=1)
    stages = planner.stages(
        run_scope(_discovery(GRID), NO_STALE, False),
        changed=set(GRID),
        stale_pair_assets={},
        failed_validation=lambda m, s: [],
    )
    partitions, suite_runs, comparison_runs, model_runs, lake_runs = stages
    assert sorted(k for run in partitions for k in run.keys) == sorted(
        planner.pair_runs([(m, s) for m in models for s in suites], None, 6)[0].keys
    )
    assert all(len(run.keys) <= 4 and run.job == ingest_and_fit_job.name for run in partitions)
    assert [run.keys for run in suite_runs] == [["x", "y"]] and suite_runs[0].job == suite_job.name
    assert [run.keys for run in model_runs] == [["a", "b", "c"]] and lake_runs[0].keys is None
    # two workers: every stage split so that each has a share
    two = RunPlanner(models, suites, partitions_per_run=4, workers=2)
    assert [len(run.keys) for run in two.keyed_runs(model_job.name, models, two.per_run(3))] == [2, 1]


def test_a_failed_range_is_redone_its_named_partitions_alone_and_the_rest_in_ranges():
    planner = RunPlanner(list("abcdef"), [], partitions_per_run=10, workers=1)
    [run] = planner.keyed_runs(model_job.name, list("abcdef"), 10)
    alone, ranges = planner.redo(run, failing=("c",), succeeded_steps=("model_reliability",))
    assert [r.keys for r in alone] == [["c"]] and [r.keys for r in ranges] == [["a", "b"], ["d", "e", "f"]]
    assert all(r.assets == ("model_profile",) for r in alone + ranges)  # what did not succeed for every partition
    # failures that name no partition, or one outside the range: every partition alone, every step again
    alone, ranges = planner.redo(run, failing=None, succeeded_steps=())
    assert [r.keys for r in alone] == [[k] for k in "abcdef"] and ranges == []
    assert planner.redo(run, failing=("z",), succeeded_steps=())[1] == []
    # the rule both the run loop and the rerun sensor use
    assert split_failed_range(list("abc"), ["b"]) == (["b"], ["a", "c"])
    assert split_failed_range(list("abc"), []) is None and split_failed_range(list("abc"), ["q"]) is None
    assert JOB_STEPS[model_job.name] == ["model_reliability", "model_profile"]


def test_suites_and_models_without_an_accepted_table_are_left_out():
    planner = RunPlanner(["a", "b"], ["x"], partitions_per_run=10, workers=1)
    stage = planner.keyed_runs(model_profile_job.name, ["a", "b"], 10)
    kept, left_out = with_data(stage, suites_held={"x"}, models_held={"a"})
    assert [run.keys for run in kept] == [["a"]] and left_out == ["model b"]


def test_profile_shares_end_the_model_stage_together():
    assert profile_shares([], 10, 2) == [5, 5]
    assert profile_shares([1], 70, 2) == [53, 17]  # the worker with the new model's run takes fewer profiles
    assert sum(profile_shares([1, 1], 7, 3)) == 7 and profile_shares([1], 0, 2) == []
