"""Partition ranges for batched runs (assets/partitions.py): every requested partition exactly once,
and each block exactly the partitions Dagster's range between the block's ends holds."""

import itertools
import random

import pytest

from assets.partitions import key_blocks, range_blocks


def _range_between(first, last, model_order, suite_order):
    """What a Dagster model x suite partition range holds: every model between the ends (in the
    dimension's order) times every suite between the ends (MultiPartitionsDefinition semantics)."""
    models = model_order[model_order.index(first[0]) : model_order.index(last[0]) + 1]
    suites = suite_order[suite_order.index(first[1]) : suite_order.index(last[1]) + 1]
    return [(m, s) for m in models for s in suites]


@pytest.mark.parametrize("seed", range(40))
def test_blocks_cover_the_pairs_exactly_as_ranges(seed):
    rng = random.Random(seed)
    models = [f"m{i}" for i in range(rng.randint(1, 12))]
    suites = [f"s{i}" for i in range(rng.randint(1, 7))]
    pairs = [p for p in itertools.product(models, suites) if rng.random() < (0.95 if seed % 2 else 0.6)]
    cap = rng.choice([1, 2, 5, 13, 60])
    blocks = range_blocks(pairs, models, suites, cap)
    covered = [p for block in blocks for p in block]
    assert sorted(covered) == sorted(pairs)  # each requested partition once, nothing else
    for block in blocks:
        assert 1 <= len(block) <= cap
        assert block == _range_between(block[0], block[-1], models, suites)


def test_a_complete_grid_is_one_range_per_run_cap():
    models, suites = [f"m{i}" for i in range(100)], [f"s{i}" for i in range(6)]
    blocks = range_blocks(list(itertools.product(models, suites)), models, suites, 60)
    assert [len(b) for b in blocks] == [60] * 10  # 600 partitions, 10 runs of 10 models x 6 suites


def test_key_blocks_are_adjacent_runs():
    assert key_blocks(["x", "y", "w"], ["w", "x", "z", "y"], 10) == [["w", "x"], ["y"]]
    assert key_blocks(list("abcde"), list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]
    with pytest.raises(ValueError, match="at least 1"):
        key_blocks(["a"], ["a"], 0)


def test_a_range_step_attaches_each_partitions_metadata_to_its_materialisation(monkeypatch):
    """assets/batch.py's emit attaches each partition's metadata as context.add_asset_metadata does, checking
    the keys once for the step instead of listing the range's keys again for each (a second of a 60-partition
    step at 100 models): every partition gets its own metadata, a key outside the run is refused."""
    from dagster import (
        AssetExecutionContext,
        DagsterInstance,
        DagsterInvariantViolationError,
        DynamicPartitionsDefinition,
        MaterializeResult,
        asset,
        materialize,
    )
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from assets.batch import PartitionResult, emit

    models = DynamicPartitionsDefinition(name="ranged_models")
    stray = []

    @asset(partitions_def=models)
    def ranged(context: AssetExecutionContext):
        results = [
            PartitionResult(key, MaterializeResult(metadata={"partition": key, "square": int(key[1:]) ** 2}))
            for key in [*context.partition_keys, *stray]
        ]
        yield from emit(context, results)

    instance = DagsterInstance.ephemeral()
    keys = [f"m{i}" for i in range(12)]
    instance.add_dynamic_partitions("ranged_models", keys)
    tags = {ASSET_PARTITION_RANGE_START_TAG: "m2", ASSET_PARTITION_RANGE_END_TAG: "m9"}

    def refuse(self, *args, **kwargs):  # the per-key public call: what the step must no longer make
        raise AssertionError("add_asset_metadata called once per partition")

    monkeypatch.setattr(AssetExecutionContext, "add_asset_metadata", refuse)
    assert materialize([ranged], instance=instance, tags=tags).success
    records = instance.fetch_materializations(ranged.key, limit=100).records
    metadata = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert sorted(metadata) == sorted(keys[2:10])
    for key, values in metadata.items():
        assert values["partition"].value == key and values["square"].value == int(key[1:]) ** 2, (key, values)

    stray.append("m11")  # a partition the run does not target
    with pytest.raises(DagsterInvariantViolationError, match="m11"):
        materialize([ranged], instance=instance, tags=tags)
