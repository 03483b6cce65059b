"""Partitions: models and suites are dynamic (new ones appear in new logs)."""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from evalpipeline.keys import from_partition_key, to_partition_key

model_partitions = DynamicPartitionsDefinition(name="model")
suite_partitions = DynamicPartitionsDefinition(name="suite")
model_suite_partitions = MultiPartitionsDefinition({"model": model_partitions, "suite": suite_partitions})


def model_suite_key(model: str, suite: str) -> MultiPartitionKey:
    """The partition key of a (model, suite) pair given by display names."""
    return MultiPartitionKey({"model": to_partition_key(model), "suite": to_partition_key(suite)})


def model_suite_names(partition_key: MultiPartitionKey) -> tuple[str, str]:
    """(model, suite) display names of a model x suite partition key."""
    keys = partition_key.keys_by_dimension
    return from_partition_key(keys["model"]), from_partition_key(keys["suite"])


def one_dimension(dimension: str):
    """The mapping from model x suite partitions to one of their dimensions (e.g. all of a suite's
    partitions feed that suite's partition downstream). Dagster marks the class beta; we rely on
    its documented behaviour and keep its warning out of every command's output."""
    import warnings

    from dagster import MultiToSingleDimensionPartitionMapping
    from dagster._utils.warnings import BetaWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return MultiToSingleDimensionPartitionMapping(partition_dimension_name=dimension)
