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
    """How sources are read: ``[ingest]`` and ``[validate]`` of the project configuration
    (``evalpipeline.toml`` or ``$EVALPIPELINE_CONFIG``; see evalpipeline.settings), which the CLI
    reads too. There is no per-run override: ``eval_samples``' code version hashes this file, and
    a run under another one would record tables that its code version does not describe."""

    def options(self) -> IngestOptions:
        return load_ingest_options()

    def validation(self) -> ValidationSettings:
        return load_validation_settings()


class PosteriorSettings(ConfigurableResource):
    """The conjugate baseline's prior and HPDI mass: ``[posterior]`` of the project configuration
    (evalpipeline.settings.load_posterior_settings), the file the asset's code version hashes, so
    a changed prior marks the tables stale (hence no per-run override). The prior is recorded in
    every output row."""

    def values(self) -> dict[str, float]:
        return load_posterior_settings()


def configured_resources() -> dict:
    """The code location's resources, once the configuration file has been read as the runs will read it:
    a misspelt table or key is then the code location's load error under the daemon and the UI, as a bad
    cron or executor is (otherwise only `evalpipeline run` refused it, and the daemon's runs quietly used
    the defaults of the table it was meant for)."""
    from evalpipeline.settings import check_config
    from resources.fit import GlmSettings

    check_config()
    return {
        "lake": LakeResource(),
        "ingest_settings": IngestSettings(),
        "posterior_settings": PosteriorSettings(),
        "glm_settings": GlmSettings(),
    }
