"""Dagster layer: partitions, assets, jobs and sensors over evalpipeline's functions."""
