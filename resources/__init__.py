"""Dagster resources: thin configurable handles on evalpipeline objects.

The names are imported on first use (PEP 562), so that a process that needs one module of the
package (the executors, the Dagster adapter) does not import the fitting code."""

__all__ = ["GlmSettings", "IngestSettings", "LakeResource", "PosteriorSettings"]

_HOMES = {
    "GlmSettings": "resources.fit",
    "IngestSettings": "resources.lake",
    "LakeResource": "resources.lake",
    "PosteriorSettings": "resources.lake",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'resources' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
