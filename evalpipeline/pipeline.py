"""The pipeline's steps as plain functions over a lake.

Each Dagster asset is a thin wrapper around one of these; a notebook user
or the CLI can call them directly with the same effect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa

from evalpipeline.ingest import (
    IngestReport,
    PartitionAccount,
    IngestOptions,
    Validator,
    consolidate_partition,
    find_log_files,
    ingest_paths,
    scan_sources,
)
from evalpipeline.keys import from_partition_key, to_partition_key
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.stats.posteriors import accuracy_posteriors, suite_leaderboard


class NoDataError(LookupError):
    """A partition asked for that has no data anywhere."""


def ingest_partition(
    lake: Lake,
    landing: Path,
    model: str,
    suite: str,
    options: IngestOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    validator: Validator | None = None,
) -> tuple[PartitionAccount, IngestReport]:
    """Ingest every source in ``landing`` that holds rows for ``model`` x ``suite``.

    Records of the partition ingested earlier from elsewhere (``evalpipeline
    ingest PATH``) stay part of it. Raises :class:`NoDataError` when neither
    exists.
    """
    options = options or IngestOptions()
    files = find_log_files(landing) if Path(landing).exists() else []
    found, _unreadable = scan_sources(files, options)  # unreadable files belong to no partition
    mine = [Path(source.path) for source, parts in found if any((p.model, p.suite) == (model, suite) for p in parts)]
    staged = list(lake.partition_dir("ingested", model, suite).glob("*.parquet"))
    if not mine and not staged:
        raise NoDataError(f"no sources for model {model!r} x suite {suite!r} in {landing} or in the lake {lake.root}")
    report = ingest_paths(mine, lake, options, progress=progress, validator=validator)
    if (model, suite) not in report.partitions:  # every landing source failed: rebuild from what is staged
        report.partitions[(model, suite)], _ = consolidate_partition(lake, model, suite, validator)
    return report.partitions[(model, suite)], report


def partition_validator(lake: Lake, settings=None, *, data_docs: bool = True) -> Validator:
    """A validator for :func:`evalpipeline.ingest.consolidate_partition`: the canonical GX suite,
    with Data Docs under ``<lake>/validation/data_docs/model=<key>/suite=<key>/``."""
    from evalpipeline.validate import ValidationSettings, validate_samples

    settings = settings or ValidationSettings()

    def validate(samples: pd.DataFrame, quarantine: pd.DataFrame, model: str, suite: str):
        docs = lake.partition_dir("validation/data_docs", model, suite) if data_docs else None
        return validate_samples(samples, settings, docs, quarantine=quarantine, label=f"{model} x {suite}")

    return validate


def read_samples(lake: Lake, model: str, suite: str) -> pd.DataFrame:
    """The canonical sample table of one partition (raises :class:`NoDataError` if absent)."""
    path = lake.table_path("samples", "samples.parquet", model, suite)
    if not path.exists():
        raise NoDataError(f"no sample table for {model!r} x {suite!r}: {path} does not exist")
    return lake.read_files([path], model=model, suite=suite)


def write_accuracy_posteriors(
    lake: Lake, model: str, suite: str, *, prior: tuple[float, float] = (1.0, 1.0), mass: float = 0.95
) -> tuple[pd.DataFrame, Path]:
    """Compute and store the conjugate posteriors of one partition."""
    table = accuracy_posteriors(read_samples(lake, model, suite), prior=prior, mass=mass)
    path = lake.table_path("accuracy_posteriors", "posteriors.parquet", model, suite)
    write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), path)
    return table, path


def leaderboard_path(lake: Lake, suite: str) -> Path:
    return lake.root / "suite_leaderboard" / f"suite={to_partition_key(suite)}" / "leaderboard.parquet"


def format_leaderboard(board: pd.DataFrame) -> str:
    """A plain-text leaderboard: rank, model, posterior mean with HPDI, CLT interval, n."""
    lines = []
    for row in board.itertuples():
        flag = f" ({row.clt_flag})" if isinstance(row.clt_flag, str) else ""
        lines.append(
            f"  {row.rank}. {row.model:<28} {row.posterior_mean:.3f}  "
            f"{row.hpdi_mass:.0%} HPDI [{row.hpdi_low:.3f}, {row.hpdi_high:.3f}]  "
            f"CLT [{row.clt_low:.3f}, {row.clt_high:.3f}]{flag}  n={row.n}"
        )
    return "\n".join(lines)


def write_suite_leaderboard(lake: Lake, suite: str) -> tuple[pd.DataFrame, Path]:
    """Rank every model that has posteriors on ``suite``; skip combinations never evaluated."""
    suite_key = to_partition_key(suite)
    files = sorted(lake.root.glob(f"accuracy_posteriors/model=*/suite={suite_key}/posteriors.parquet"))
    if not files:
        raise NoDataError(f"no accuracy posteriors for suite {suite!r} under {lake.root / 'accuracy_posteriors'}")
    frames = []
    for file in files:
        model_key = file.parent.parent.name.split("=", 1)[1]
        frames.append(lake.read_files([file], model=from_partition_key(model_key)))
    board = suite_leaderboard(pd.concat(frames, ignore_index=True))
    path = leaderboard_path(lake, suite)
    write_parquet_atomic(pa.Table.from_pandas(board, preserve_index=False), path)
    return board, path
