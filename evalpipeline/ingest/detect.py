"""Which reader reads a file: automatic where unambiguous, overridable.

=========== ================================================================
suffix      format
=========== ================================================================
``.eval``   ``inspect``
``.json``   ``inspect`` when the first key is ``version`` (an Inspect log),
            ``lm-eval`` when it is ``results`` or the name is
            ``results_*.json`` (lm-evaluation-harness aggregate file; its
            ``samples_<task>_*.jsonl`` files beside it are read with it)
``.jsonl``  ``lm-eval`` for ``samples_*.jsonl``, else ``long``
``.csv``    ``long`` when the (mapped) columns model, item_id and score
``.parquet`` exist, ``wide`` when there is no model column and every column
            but the item column holds only 0/1
=========== ================================================================

Anything else is an error that says what was seen and to pass ``--format``.
"""

from __future__ import annotations

import re
from pathlib import Path

from evalpipeline.ingest.base import IngestOptions, Reader, Source, SourceReadError
from evalpipeline.lake import sha256_file

FORMATS = ("inspect", "lm-eval", "long", "wide")
SOURCE_SUFFIXES = (".eval", ".json", ".jsonl", ".csv", ".parquet")

_FIRST_KEY = re.compile(rb'^\s*\{\s*"([^"]{1,64})"')
LM_EVAL_RESULTS = re.compile(r"^results_.*\.json$")
LM_EVAL_SAMPLES = re.compile(r"^samples_.*\.jsonl$")


def open_source(path: Path | str, options: IngestOptions) -> Source:
    """Hash the file and settle its format (``options.format`` unless ``auto``)."""
    path = Path(path)
    if not path.is_file():
        raise SourceReadError(
            path,
            "a symbolic link to no file (its target is missing, or it loops)"
            if path.is_symlink()
            else "file not found",
        )
    if path.stat().st_size == 0:
        raise SourceReadError(path, "empty file (0 bytes)")
    fmt = options.format if options.format != "auto" else detect_format(path, options)
    if fmt not in FORMATS:
        raise SourceReadError(path, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return Source(path=str(path), sha256=sha256_file(path), format=fmt)


def reader_for(fmt: str) -> Reader:
    if fmt == "inspect":
        from evalpipeline.ingest.inspect_logs import InspectReader

        return InspectReader()
    if fmt == "lm-eval":
        from evalpipeline.ingest.lm_eval import LmEvalReader

        return LmEvalReader()
    if fmt in ("long", "wide"):
        from evalpipeline.ingest.tables import LongTableReader, WideTableReader

        return LongTableReader() if fmt == "long" else WideTableReader()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def detect_format(path: Path, options: IngestOptions) -> str:
    suffix = path.suffix.lower()
    if suffix == ".eval":
        return "inspect"
    if suffix == ".json":
        first = _first_json_key(path)
        if first == "version":
            return "inspect"
        if first == "results" or LM_EVAL_RESULTS.match(path.name):
            return "lm-eval"
        if first is None:  # not even an object's first key: let the Inspect reader name the parse error
            return "inspect"
        raise SourceReadError(
            path,
            f"cannot tell the format of this JSON file (first key {first!r}; an Inspect log starts with "
            "'version', an lm-eval results file with 'results'); pass --format",
        )
    if suffix == ".jsonl":
        return "lm-eval" if LM_EVAL_SAMPLES.match(path.name) else "long"
    if suffix in (".csv", ".parquet"):
        from evalpipeline.ingest.tables import detect_table_kind

        return detect_table_kind(path, options)
    raise SourceReadError(path, f"unsupported file type {suffix!r}; supported: {', '.join(SOURCE_SUFFIXES)}")


def claimed_by_results_file(path: Path) -> bool:
    """An lm-eval samples file whose own results file (same timestamp) is beside it is read through it."""
    if not LM_EVAL_SAMPLES.match(path.name):
        return False
    from evalpipeline.ingest.lm_eval import results_file_for

    return results_file_for(path) is not None


def _first_json_key(path: Path) -> str | None:
    with open(path, "rb") as handle:
        match = _FIRST_KEY.match(handle.read(4096))
    return match.group(1).decode("utf-8", "replace") if match else None
