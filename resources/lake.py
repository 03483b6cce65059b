"""Lake, landing folder and step settings as Dagster resources."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from evalpipeline.config import landing_root, lake_root
from evalpipeline.ingest.base import IngestOptions
from evalpipeline.settings import load_ingest_options, load_posterior_settings, load_validation_settings
from evalpipeline.validate import ValidationSettings
from evalpipeline.lake import Lake


class LakeResource(ConfigurableResource):
    """Where logs land and where tables go. Empty strings mean the environment's defaults
    (``$EVALPIPELINE_LAKE`` or ``data/lake``; ``$EVALPIPELINE_LANDING`` or ``data/inspect_logs``)."""

    root: str = Field(default="", description="lake root folder")
    landing: str = Field(default="", description="folder scanned for incoming eval logs")

    def lake(self) -> Lake:
        return Lake(Path(self.root) if self.root else lake_root())

    def landing_dir(self) -> Path:
        return Path(self.landing) if self.landing else landing_root()


class IngestSettings(ConfigurableResource):
    """How sources are read: the project configuration file (``evalpipeline.toml`` or
    ``$EVALPIPELINE_CONFIG``; see evalpipeline.settings), which the CLI reads too."""

    config_file: str = Field(default="", description="configuration file; empty = the project default")

    def options(self) -> IngestOptions:
        return load_ingest_options(Path(self.config_file) if self.config_file else None)

    def validation(self) -> ValidationSettings:
        return load_validation_settings(Path(self.config_file) if self.config_file else None)


class PosteriorSettings(ConfigurableResource):
    """The conjugate baseline's prior and HPDI mass: ``[posterior]`` of the project configuration
    (evalpipeline.settings.load_posterior_settings), the file the asset's code version hashes, so
    a changed prior marks the tables stale. The prior is recorded in every output row."""

    config_file: str = Field(default="", description="configuration file; empty = the project default")

    def values(self) -> dict[str, float]:
        return load_posterior_settings(Path(self.config_file) if self.config_file else None)
