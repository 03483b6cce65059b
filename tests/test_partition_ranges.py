"""Partition ranges for batched runs (assets/partitions.py): every requested partition exactly once,
and each block exactly the partitions Dagster's range between the block's ends holds."""

import itertools
import random

import pytest

from assets.partitions import key_blocks, range_blocks


def _range_between(first, last, model_order, suite_order):
    """What a Dagster model x suite partition range holds: every model between the ends (in the
    dimension's order) times every suite between the ends (MultiPartitionsDefinition semantics)."""
    models = model_order[model_order.index(first[0]): model_order.index(last[0]) + 1]
    suites = suite_order[suite_order.index(first[1]): suite_order.index(last[1]) + 1]
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
