"""Shared plumbing for the plots: input checks, figure creation, PNG output.

Figures are built with :class:`matplotlib.figure.Figure` directly, never through
``pyplot``: no global figure registry, no GUI backend, nothing to leak between
Dagster runs, and the Agg canvas is attached explicitly.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from evalpipeline.lake import write_bytes_atomic

# One resolution for every PNG so reruns produce the same pixels.
PNG_DPI = 100

# Colours follow HiBayES Figures 5-6: posterior in blue, empirical in orange.
POSTERIOR_COLOR = "#1f77b4"
EMPIRICAL_COLOR = "#ff7f0e"
OVERALL_EMPIRICAL_COLOR = "#d62728"
TARGET_COLOR = "#555555"


def new_figure(width: float, height: float) -> Figure:
    """A figure on an Agg canvas (inches), independent of pyplot's state."""
    figure = Figure(figsize=(width, height), dpi=PNG_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def require_frame(frame: object, what: str) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(frame).__name__}")
    if frame.empty:
        raise ValueError(f"{what}: the table has no rows")
    return frame


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise a ValueError naming every required column that ``frame`` lacks."""
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise ValueError(
            f"{what}: missing column(s) {', '.join(missing)}; "
            f"the table has {', '.join(map(str, frame.columns)) or 'no columns'}"
        )


def numeric_column(frame: pd.DataFrame, column: str, what: str, *, allow_nan: bool = False) -> np.ndarray:
    """A column as float64, refusing non-numbers (and NaN unless allowed) by name."""
    try:
        values = pd.to_numeric(frame[column], errors="raise").to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what}: column {column} must be numeric ({error})") from None
    if not allow_nan and np.isnan(values).any():
        rows = np.flatnonzero(np.isnan(values))[:5].tolist()
        raise ValueError(f"{what}: column {column} has missing values (rows at positions {rows})")
    if np.isinf(values).any():
        raise ValueError(f"{what}: column {column} has infinite values")
    return values


def require_ordered(
    low: np.ndarray, high: np.ndarray, labels: Sequence[str], low_name: str, high_name: str, what: str
) -> None:
    """Refuse rows where ``low > high`` (NaN pairs are left to the caller)."""
    bad = np.flatnonzero(low > high + 1e-12)
    if bad.size:
        shown = ", ".join(repr(str(labels[i])) for i in bad[:5])
        raise ValueError(f"{what}: {low_name} exceeds {high_name} for {shown}")


def require_probabilities(values: np.ndarray, column: str, what: str) -> None:
    finite = values[~np.isnan(values)]
    if finite.size and (finite.min() < -1e-12 or finite.max() > 1 + 1e-12):
        raise ValueError(f"{what}: column {column} must lie in [0, 1] (found {finite.min():.4g} to {finite.max():.4g})")


def figure_png_bytes(figure: Figure, *, dpi: int = PNG_DPI, text: dict[str, str] | None = None) -> bytes:
    """Render ``figure`` to PNG bytes, with ``text`` as PNG text chunks.

    The Agg canvas draws the figure once (its layout engine included) and PIL encodes the pixels.
    ``savefig`` draws twice under a layout engine (a pass without rendering to lay the figure out,
    then the picture), a fifth of a plot's cost; the pixels are the same (tests/test_plots.py).
    An opaque picture (every plot here: a white figure) is written as RGB, not RGBA: its alpha
    channel says nothing and costs a quarter of the bytes to compress. No text chunk but ``text``
    (no software or version stamp), and Agg pixels carry no timestamp, so equal figures give
    equal bytes. A figure on another canvas (made through pyplot with a GUI backend) goes through
    ``savefig``.
    """
    if not isinstance(figure, Figure):
        raise ValueError(f"expected a matplotlib Figure, got {type(figure).__name__}")
    if not isinstance(figure.canvas, FigureCanvasAgg):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None, **(text or {})})
        return buffer.getvalue()
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    shown_dpi = figure.dpi
    figure.set_dpi(dpi)
    try:
        figure.canvas.draw()
        pixels = np.array(figure.canvas.buffer_rgba())  # a copy: the buffer is the renderer's
    finally:
        figure.set_dpi(shown_dpi)
    opaque = bool((pixels[..., 3] == 255).all())
    image = Image.fromarray(np.ascontiguousarray(pixels[..., :3]) if opaque else pixels)
    info = PngInfo()
    for key, value in (text or {}).items():
        info.add_text(key, value)
    buffer = io.BytesIO()
    image.save(buffer, format="png", pnginfo=info, dpi=(dpi, dpi))
    return buffer.getvalue()


#: Colours of a preview (:func:`png_preview`). The plots are flat colours with antialiased edges,
#: which a 128-colour palette shows indistinguishably at a third to a quarter of the bytes.
PREVIEW_COLORS = 128


def png_preview(data: bytes, *, colors: int = PREVIEW_COLORS) -> bytes:
    """A palette (8-bit) rendition of PNG ``data``, for previews embedded in run metadata.

    Every materialisation event keeps its metadata for good, so an embedded full-colour
    plot is paid for in the Dagster instance on every run: at 100 models x 6 suites a full
    rebuild wrote ~575 MB of events, nearly all of it plots. The lake keeps the full PNG.
    Same pixel size; deterministic (fast octree quantisation), so equal input gives equal
    bytes. Returns ``data`` itself when the palette version would not be smaller.
    """
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        palette = image.convert("RGBA").quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG")
    preview = buffer.getvalue()
    return preview if len(preview) < len(data) else data


def save_png(figure: Figure, path: Path | str, *, dpi: int = PNG_DPI, text: dict[str, str] | None = None) -> bool:
    """Write ``figure`` as PNG at ``path`` atomically (``text`` as PNG text chunks), then close it.

    Returns False when the file already held exactly these bytes (the lake's
    rule: reruns leave unchanged files, mtimes included, alone).
    """
    data = figure_png_bytes(figure, dpi=dpi, text=text)
    close_figure(figure)
    return write_bytes_atomic(data, Path(path))


#: The PNG text chunk in which :func:`save_png_of` records what the picture was drawn from.
INPUTS_CHUNK = "evalpipeline-inputs"


def save_png_of(
    inputs, path: Path | str, make_figure: Callable[[], Figure], *, code: Sequence[str] = (), dpi: int = PNG_DPI
) -> bool:
    """:func:`save_png` of ``make_figure()``, unless the PNG at ``path`` was drawn from equal ``inputs``
    (JSON-able: everything the figure shows) by the same code (``evalpipeline.plots`` and the modules
    named in ``code``, which build the figure), matplotlib version and dpi; then nothing is drawn.
    Returns whether the PNG changed.

    Drawing is most of a small asset's cost, and some assets rerun with new tables but the same
    plot: a new model moves every other model's ranks, not the per-suite posteriors its profile
    plots. The record is a hash in a text chunk of the PNG itself, so the picture and its record are
    replaced in one atomic write: a killed or concurrent run cannot leave one without the other.
    """
    path = Path(path)
    key = hashlib.sha256(
        json.dumps([_plotting_code(), _source_of(tuple(code)), dpi, inputs], default=str).encode()
    ).hexdigest()
    path.with_name(path.name + ".inputs").unlink(missing_ok=True)  # the separate record an earlier version kept
    if _png_text(path).get(INPUTS_CHUNK) == key:
        return False
    return save_png(make_figure(), path, dpi=dpi, text={INPUTS_CHUNK: key})


def _png_text(path: Path) -> dict:
    """The text chunks ahead of a PNG's pixels (empty for a missing or unreadable file)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return dict(image.info)
    except (OSError, UnidentifiedImageError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def _source_of(modules: tuple[str, ...]) -> str:
    from evalpipeline.lake.versions import code_version

    return code_version(list(modules)) if modules else ""


@functools.lru_cache(maxsize=1)
def _plotting_code() -> str:
    import matplotlib

    from evalpipeline.lake.versions import code_version

    return f"{code_version(['evalpipeline.plots'])} matplotlib {matplotlib.__version__}"


def close_figure(figure: Figure) -> None:
    """Release a figure: drop it from pyplot's registry if it was made there."""
    manager = getattr(figure.canvas, "manager", None)
    if manager is not None:  # created through pyplot by a caller
        import matplotlib.pyplot as plt

        plt.close(figure)
    figure.clear()
