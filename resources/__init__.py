"""Dagster resources: thin configurable handles on evalpipeline objects."""

from resources.fit import GlmSettings
from resources.lake import IngestSettings, LakeResource, PosteriorSettings

__all__ = ["GlmSettings", "IngestSettings", "LakeResource", "PosteriorSettings"]
