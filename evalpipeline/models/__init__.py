"""Hierarchical Bayesian GLMs (HiBayES Eq. 2-6): data, models, fits, comparison.

Plain library code (no Dagster): :class:`GlmData` from canonical samples, numpyro
models and their registry (``glm.MODELS``), :func:`fit_glm` with a reusable
:class:`Fitter`, persistence (:func:`write_fit`, :func:`read_fit`) and
:func:`compare_fits` (WAIC and PSIS-LOO).
"""

from evalpipeline.models.arviz_import import import_arviz

import_arviz()  # first, before any module here imports it (~0.7 s less a process)

from evalpipeline.models.compare import compare_fits  # noqa: E402
from evalpipeline.models.data import GlmData  # noqa: E402
from evalpipeline.models.fit import (  # noqa: E402
    DiagnosticThresholds,
    FitSettings,
    Fitter,
    GlmFit,
    configure_jax,
    diagnose,
    fit_glm,
    read_fit,
    seed_from_key,
    write_fit,
)
from evalpipeline.models.glm import MODELS, PARTITION_MODELS, SUITE_MODELS, applicability  # noqa: E402

__all__ = [
    "GlmData",
    "FitSettings",
    "DiagnosticThresholds",
    "Fitter",
    "GlmFit",
    "configure_jax",
    "diagnose",
    "fit_glm",
    "read_fit",
    "write_fit",
    "seed_from_key",
    "MODELS",
    "PARTITION_MODELS",
    "SUITE_MODELS",
    "applicability",
    "compare_fits",
]
