"""Dagster resources: thin configurable handles on evalpipeline objects."""

from resources.lake import IngestSettings, LakeResource, PosteriorSettings

__all__ = ["IngestSettings", "LakeResource", "PosteriorSettings"]
