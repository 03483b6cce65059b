"""Lake, landing folder and step settings as Dagster resources."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from evalpipeline.config import landing_root, lake_root
from evalpipeline.ingest.scores import DEFAULT_VALUE_MAP, ScoreNormalisation
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
    """How logged scores become numbers in [0, 1] (see evalpipeline.ingest.scores)."""

    value_map: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_VALUE_MAP))
    scorer: str | None = Field(default=None, description="scorer to read; None = the log's first scorer")
    score_key: str | None = Field(default=None, description="key to read from dict-valued scores")
    numeric_low: float = 0.0
    numeric_high: float = 1.0
    accept_incomplete_logs: bool = Field(
        default=False, description="ingest completed samples of logs with status error/cancelled"
    )

    def normalisation(self) -> ScoreNormalisation:
        return ScoreNormalisation(
            value_map=dict(self.value_map),
            scorer=self.scorer,
            score_key=self.score_key,
            numeric_range=(self.numeric_low, self.numeric_high),
        )


class PosteriorSettings(ConfigurableResource):
    """Conjugate baseline settings; the prior is recorded in every output row."""

    prior_a: float = 1.0
    prior_b: float = 1.0
    hpdi_mass: float = 0.95
