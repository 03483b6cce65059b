"""Partitions: models and suites are dynamic (new ones appear in new logs)."""

from __future__ import annotations

import hashlib
import math
import os
import warnings

from dagster import (
    BackfillPolicy,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    RunRequest,
)

from evalpipeline.lake.keys import from_partition_key, to_partition_key
from resources.dagster_internals import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

model_partitions = DynamicPartitionsDefinition(name="model")
suite_partitions = DynamicPartitionsDefinition(name="suite")
model_suite_partitions = MultiPartitionsDefinition({"model": model_partitions, "suite": suite_partitions})

#: Partitions one run covers at most, in `evalpipeline run` and in the backfills the daemon runs: a
#: Dagster run costs seconds of orchestration whatever it holds, and a failure fails its whole batch.
PARTITIONS_PER_RUN = 60

#: The backfill policy of the model x suite and per-model assets. Automation requests many partitions
#: of an asset as one backfill (a prior edit: every fit it made; a model's profile when suites' ranks
#: moved), and so does a backfill from the UI. Without a policy the daemon ran each partition in its own
#: run: about 8 s of run start-up each, two runs at a time, for partitions whose work takes a second.
#: With it a backfill runs ranges of up to ``PARTITIONS_PER_RUN`` (a model x suite range holds one suite's
#: or one model's partitions: Dagster's ranges of a two-dimensional subset), which the assets compute as
#: `evalpipeline run`'s ranges (assets/batch.py). Per-suite assets keep one suite per run: suites are few
#: and each is minutes of work at leaderboard size, which a range would do one after another on one core.
RANGE_BACKFILL = BackfillPolicy.multi_run(max_partitions_per_run=PARTITIONS_PER_RUN)

# Dagster 1.13 marks `asset`'s backfill_policy beta and would warn in every command that loads the
# code location; the policy is documented and stable in what we use (multi_run's partition limit)
warnings.filterwarnings("ignore", message="Parameter `backfill_policy` of function `asset`")


def model_suite_key(model: str, suite: str) -> MultiPartitionKey:
    """The partition key of a (model, suite) pair given by display names."""
    return MultiPartitionKey({"model": to_partition_key(model), "suite": to_partition_key(suite)})


def model_suite_names(partition_key: MultiPartitionKey | str) -> tuple[str, str]:
    """(model, suite) display names of a model x suite partition key (or its string form, as the
    keys of a range run come)."""
    if not isinstance(partition_key, MultiPartitionKey):
        partition_key = model_suite_partitions.get_partition_key_from_str(str(partition_key))
    keys = partition_key.keys_by_dimension
    return from_partition_key(keys["model"]), from_partition_key(keys["suite"])


def one_dimension(dimension: str):
    """The mapping from model x suite partitions to one of their dimensions (e.g. all of a suite's
    partitions feed that suite's partition downstream). Dagster marks the class beta; we rely on
    its documented behaviour and keep its warning out of every command's output."""
    import warnings

    from dagster import BetaWarning, MultiToSingleDimensionPartitionMapping

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return MultiToSingleDimensionPartitionMapping(partition_dimension_name=dimension)


def range_blocks(
    pairs, model_order: list[str], suite_order: list[str], max_per_run: int
) -> list[list[tuple[str, str]]]:
    """Cover the (model key, suite key) ``pairs`` exactly with blocks that are partition ranges.

    A range of model x suite partitions is every model between its ends (in the
    dynamic partitions' order) times every suite between its ends, so a block is
    a run of adjacent models sharing a run of adjacent suites, all present in
    ``pairs``. Blocks hold at most ``max_per_run`` partitions. Returns each
    block's pairs in range order (first and last are the range's ends).
    """
    if max_per_run < 1:
        raise ValueError(f"max_per_run must be at least 1, got {max_per_run}")
    wanted = set(pairs)
    suite_pos = {s: i for i, s in enumerate(suite_order)}
    segments_by_model = {}
    for model in model_order:
        present = sorted(suite_pos[s] for m, s in wanted if m == model)
        segments, start = [], None
        for index, position in enumerate(present):
            if start is None:
                start = position
            if index + 1 == len(present) or present[index + 1] != position + 1:
                segments.append((start, position))
                start = None
        segments_by_model[model] = tuple(segments)
    blocks: list[list[tuple[str, str]]] = []
    model_index = 0
    while model_index < len(model_order):
        segments = segments_by_model[model_order[model_index]]
        if not segments:
            model_index += 1
            continue
        end = model_index
        while end + 1 < len(model_order) and segments_by_model[model_order[end + 1]] == segments:
            end += 1
        models = model_order[model_index : end + 1]
        for first, last in segments:
            width = last - first + 1
            if width > max_per_run:  # one model's suites alone exceed a run: split the suites
                for model in models:
                    for lo in range(first, last + 1, max_per_run):
                        hi = min(lo + max_per_run - 1, last)
                        blocks.append([(model, suite_order[i]) for i in range(lo, hi + 1)])
                continue
            per_run = max(1, max_per_run // width)
            for lo in range(0, len(models), per_run):
                blocks.append([(m, suite_order[i]) for m in models[lo : lo + per_run] for i in range(first, last + 1)])
        model_index = end + 1
    return blocks


def key_blocks(keys, order: list[str], max_per_run: int) -> list[list[str]]:
    """Cover single-dimension partition ``keys`` with ranges of adjacent keys (in ``order``) of at
    most ``max_per_run`` keys each."""
    if max_per_run < 1:
        raise ValueError(f"max_per_run must be at least 1, got {max_per_run}")
    wanted = set(keys)
    blocks: list[list[str]] = []
    for key in order:
        if key not in wanted:
            if blocks and blocks[-1] is not None:
                blocks.append(None)  # a gap closes the block
            continue
        if not blocks or blocks[-1] is None or len(blocks[-1]) >= max_per_run:
            blocks.append([])
        blocks[-1].append(key)
    return [b for b in blocks if b]


def partition_blocks(keys: list[str], partitions_def, instance) -> list[list[str]]:
    """Cover partition ``keys`` of ``partitions_def`` (model x suite, or one dynamic dimension) with
    ranges of at most ``PARTITIONS_PER_RUN`` partitions (:func:`range_blocks`, :func:`key_blocks`), in
    the order of the instance's dynamic partitions: the ranges of runs that redo them."""
    if partitions_def == model_suite_partitions:
        dimensions = [model_suite_partitions.get_partition_key_from_str(key).keys_by_dimension for key in keys]
        blocks = range_blocks(
            [(d["model"], d["suite"]) for d in dimensions],
            instance.get_dynamic_partitions("model"),
            instance.get_dynamic_partitions("suite"),
            PARTITIONS_PER_RUN,
        )
        return [[str(MultiPartitionKey({"model": m, "suite": s})) for m, s in block] for block in blocks]
    return key_blocks(keys, instance.get_dynamic_partitions(partitions_def.name), PARTITIONS_PER_RUN)


def runs_at_once(instance) -> int:
    """How many runs the instance's run queue starts at once (``concurrency: runs: max_concurrent_runs``
    in dagster.yaml), or the machine's cores when it sets no limit (or has no queue)."""
    queue = instance.get_concurrency_config().run_queue_config
    limit = queue.max_concurrent_runs if queue is not None else -1
    return limit if limit > 0 else (os.cpu_count() or 1)


def requested_range_size(count: int, instance) -> int:
    """Partitions per run when a sensor or schedule requests ``count`` model x suite partitions at once:
    as many ranges as the run queue starts at once (one range on one core would leave the others idle),
    of at most ``PARTITIONS_PER_RUN`` partitions."""
    return min(PARTITIONS_PER_RUN, max(1, math.ceil(count / runs_at_once(instance))))


def range_run_request(block: list[tuple[str, str]], entries, tags: dict[str, str], asset_selection=None) -> RunRequest:
    """One run of the (model key, suite key) partitions of ``block`` (a range in order, as
    :func:`range_blocks` gives it: the first and last are the range's ends).

    The run key is a digest of ``entries`` (what makes each partition's request new: its sources'
    contents and change times, the code versions) and the range's ends. Dagster launches a sensor's
    run key once ever, a schedule's once per tick (also when a tick is evaluated again)."""
    partition_keys = [MultiPartitionKey({"model": m, "suite": s}) for m, s in block]
    keys = [str(key) for key in partition_keys]
    digest = hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()[:32]
    if len(keys) > 1:
        tags = tags | {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
    return RunRequest(
        run_key=f"{digest}:{keys[0]}..{keys[-1]}",
        partition_key=partition_keys[0] if len(keys) == 1 else None,
        asset_selection=asset_selection,
        tags=tags,
    )


def split_failed_range(keys: list[str], failing) -> tuple[list[str], list[str]] | None:
    """The partitions of a failed range run that its failures name, and the others, each in ``keys``' order;
    None when the failures name no partition or one outside the range (then nothing tells the failing
    partitions from the others). ``evalpipeline run`` reruns the named ones alone and the others in ranges;
    the ``rerun_rest_of_failed_ranges`` sensor reruns the others."""
    failing = set(failing or ())
    if not failing or not failing <= set(keys):
        return None
    return [key for key in keys if key in failing], [key for key in keys if key not in failing]
