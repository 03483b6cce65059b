"""Import ArviZ without the bokeh plotting modules it imports only for three docstrings.

ArviZ's ``arviz.plots.backends`` imports ``bokeh.plotting`` and ``bokeh.models`` when it loads,
whenever bokeh is installed (dagster-dask installs it), only to append their docstrings to its own
``output_notebook``, ``output_file`` and ``ColumnDataSource`` wrappers. That is ~0.7 s of every
process that imports this package: the nightly job, its worker server, each step process. Blocking
the two modules while ArviZ loads makes its docstring copy fail as it does without bokeh (those
three docstrings then say so); bokeh stays importable afterwards, and ArviZ's bokeh backend imports
what it plots with when it is asked to.
"""

from __future__ import annotations

import sys

_DOCSTRING_ONLY_MODULES = ("bokeh.plotting", "bokeh.models")


def import_arviz():
    """``import arviz``, with :data:`_DOCSTRING_ONLY_MODULES` blocked while it first loads."""
    if "arviz" in sys.modules:
        return sys.modules["arviz"]
    blocked = [name for name in _DOCSTRING_ONLY_MODULES if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # import machinery: "import of <name> halted", an ImportError
    try:
        import arviz
    finally:
        for name in blocked:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
    return arviz
