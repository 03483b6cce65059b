"""Why a GLM's folder holds no outcome to read, for the tables that list every candidate GLM
(the WAIC rankings and the suite comparisons' ``fits.parquet``), so that none is silently left out.

Kept apart from :mod:`evalpipeline.fits`: the GLM fits' code versions hash that module, so an
edit here would otherwise refit every GLM.
"""

from __future__ import annotations

from pathlib import Path

from evalpipeline.fits import FIT_FILES

#: ``status`` in ``fits.parquet`` of a suite GLM whose folder holds no complete fit
NO_STORED_FIT = "no stored fit"


def no_stored_fit_reason(directory: Path) -> str:
    """Why :func:`evalpipeline.fits.read_outcome` found nothing in ``directory``: a fit under way or
    killed before its record was written, or fit files deleted since."""
    if not (directory / "provenance.json").exists():
        return (f"{NO_STORED_FIT}: provenance.json is missing (a fit under way, or one that did not finish); "
                "materialise it again if no run is fitting it")
    missing = [name for name in FIT_FILES if not (directory / name).exists()]
    return f"{NO_STORED_FIT}: {', '.join(missing)} missing; materialise it again to refit"
