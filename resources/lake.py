"""Lake, landing folder and step settings as Dagster resources."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from evalpipeline.config import landing_root, lake_root
from evalpipeline.ingest.base import IngestOptions
from evalpipeline.settings import load_ingest_options, load_validation_settings
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
    """Conjugate baseline settings; the prior is recorded in every output row."""

    prior_a: float = 1.0
    prior_b: float = 1.0
    hpdi_mass: float = 0.95
