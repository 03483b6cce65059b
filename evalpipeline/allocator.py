"""The C allocator's settings in the processes that run steps: keep freed memory for the next numpy temporary.

glibc's malloc hands memory back to the kernel eagerly. A freed block above the *mmap threshold* is unmapped
at once, and free memory above the *trim threshold* at the top of the heap is released. Both start small
(128 KiB) and grow with the blocks a process frees (the mmap threshold to the largest freed so far, at most
32 MiB; the trim threshold to twice that). A numpy loop whose iterations allocate and free temporaries of a
few MiB (PSIS-LOO over chunks of units, a reliability assessment's draws, a pairwise table's grids) then
gets fresh pages on every iteration, and each page faults when first written. On these virtual machines a
page fault is dear: PSIS-LOO of a 100-LLM suite fit (20,200 units x 2,000 draws) took 1.9-2.1 s with glibc's
defaults against 1.0 s with the settings below, and a model's reliability assessment 2.6-3.3 s against
2.1-2.6 s (``benchmarks/allocator_benchmark.py``).

:func:`tune_allocator` sets, from the start and fixed, the values glibc's own rule ends at: an mmap threshold
of 32 MiB and a trim threshold of 64 MiB. Blocks above 32 MiB (a suite fit's log-likelihood matrix, a
posterior) are still mapped and unmapped when freed; up to 64 MiB of free heap stays with a process for its
next temporaries. The settings are the process's and are inherited by the processes it forks: called when
the code location is imported, they hold in ``evalpipeline run``'s workers (forked from a server that imports
it), in the multiprocess executor's steps and in every Dask worker's step. ``EVALPIPELINE_MALLOC_TUNING=off``
leaves glibc's defaults; on another C library (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

MALLOC_TUNING_ENV = "EVALPIPELINE_MALLOC_TUNING"
#: glibc's dynamic mmap threshold stops here (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), and its trim threshold at twice that
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def malloc_tuning(environ: Mapping[str, str] | None = None) -> bool:
    """``$EVALPIPELINE_MALLOC_TUNING``: ``on`` (the default, also when unset or empty) or ``off``. Raises
    ValueError naming the variable for anything else."""
    environ = os.environ if environ is None else environ
    raw = environ.get(MALLOC_TUNING_ENV, "")
    value = raw.strip().lower() or "on"
    if value not in ("on", "off"):
        raise ValueError(f"{MALLOC_TUNING_ENV}={raw!r}: choose on (the default) or off")
    return value == "on"


def tune_allocator(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Set glibc's mmap and trim thresholds in this process (see the module's docstring) unless
    ``$EVALPIPELINE_MALLOC_TUNING`` is ``off``; returns what was set (nothing when off, or when the C
    library is not glibc)."""
    if not malloc_tuning(environ):
        return {}
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return {}
    applied = {}
    for name, parameter, value in (("mmap_threshold", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                   ("trim_threshold", _M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if mallopt(parameter, value) == 1:  # mallopt returns 1 on success, 0 on a value it refuses
            applied[name] = value
    return applied


def _glibc_mallopt():
    """glibc's ``mallopt``, or None on another C library."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    try:
        libc = ctypes.CDLL(libc_name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl has a mallopt that does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt
