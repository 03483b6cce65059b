"""GLM fit settings as a Dagster resource, and the process's compiled-sampler cache."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from evalpipeline.steps.fits import GlmConfig
from evalpipeline.settings import load_glm_config
from resources.executors import step_threads


#: Default bound of the compilation cache in MiB; the traced programs beside it get an eighth.
DEFAULT_CACHE_MAX_MB = 2048
CACHE_MAX_ENV = "EVALPIPELINE_JAX_CACHE_MAX_MB"
CACHE_DIR_ENV = "EVALPIPELINE_JAX_CACHE"


@functools.lru_cache(maxsize=1)
def process_fitter(program_cache: str | None = None, program_cache_max_bytes: int | None = None):
    """One Fitter per process: every fit in it reuses the samplers compiled for earlier ones, and
    with ``program_cache`` the samplers other processes traced (evalpipeline.models.fit._load_runner)."""
    from evalpipeline.models import Fitter

    return Fitter(program_cache=program_cache, program_cache_max_bytes=program_cache_max_bytes)


class GlmSettings(ConfigurableResource):
    """HiBayES sampler settings, diagnostic thresholds and priors: ``[glm]`` of the project
    configuration file (see evalpipeline.settings.load_glm_config), plus a persistent JAX
    compilation cache so that new processes do not recompile the samplers. The configuration has
    no per-run override: the fit assets' code versions hash it, so that editing a prior marks
    exactly the fits made under the old one stale."""

    compilation_cache_dir: str = Field(
        default="",
        description="persistent JAX compilation cache, with the traced samplers under programs/; "
        "empty = $EVALPIPELINE_JAX_CACHE or <lake>/.cache/jax",
    )
    cache_max_mb: int = Field(
        default=0,
        description="bound of the compilation cache in MiB (least recently used entries go first; the "
        f"traced programs get an eighth of it); 0 = ${CACHE_MAX_ENV} or {DEFAULT_CACHE_MAX_MB}",
    )

    def config(self) -> GlmConfig:
        return load_glm_config()

    def cache_max_bytes(self) -> int:
        raw = self.cache_max_mb or (os.environ.get(CACHE_MAX_ENV) or "").strip() or DEFAULT_CACHE_MAX_MB
        try:
            megabytes = int(raw)
        except ValueError:
            megabytes = 0
        if megabytes < 1:
            source = "cache_max_mb" if self.cache_max_mb else f"${CACHE_MAX_ENV}"
            raise ValueError(f"{source} = {raw!r}: the compilation cache bound must be a whole number of MiB >= 1")
        return megabytes * 2**20

    def cache_dir(self, lake_root: Path) -> Path:
        """The persistent compilation cache of fits in the lake at ``lake_root``."""
        return Path(self.compilation_cache_dir or os.environ.get(CACHE_DIR_ENV) or Path(lake_root) / ".cache" / "jax")

    def program_cache(self, lake_root: Path) -> Path:
        """The traced samplers beside it (evalpipeline.models.fit._load_runner), and the requests to prepare
        some (evalpipeline.models.fit.preparation_requests)."""
        return self.cache_dir(lake_root) / "programs"

    def fitter(self, lake_root: Path):
        from evalpipeline.models import configure_jax

        cache = str(self.cache_dir(lake_root))
        # chain_method = "parallel" needs one host device per core before JAX starts its backend
        # (in a step process that is now); if JAX started earlier the fit falls back to vectorized
        # and its metadata says so
        parallel = self.config().settings.chain_method == "parallel"
        limit = self.cache_max_bytes()
        # one fitting step per core: XLA's intra-op pool gets the step's threads, not one per CPU
        # (resources.executors.step_threads; parallel chains keep XLA's default)
        threads = step_threads()
        configure_jax(
            compilation_cache_dir=cache,
            host_devices=os.cpu_count() if parallel else None,
            cache_max_bytes=limit,
            intra_op_threads=None if parallel or threads == 0 else threads,
        )
        return process_fitter(str(self.program_cache(lake_root)), limit // 8)
