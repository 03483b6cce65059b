"""``evalpipeline`` command line.

    evalpipeline run            materialise the whole graph for the landing folder
    evalpipeline ingest PATH    ingest one log file or folder into the lake

Both honour ``EVALPIPELINE_LAKE`` (lake root, default ``data/lake``);
``run`` reads ``EVALPIPELINE_LANDING`` (default ``data/inspect_logs``) and
``DAGSTER_HOME`` (default ``dagster_home``).
"""

from __future__ import annotations

import argparse
import os
import sys

from pathlib import Path

from evalpipeline.config import DEFAULT_LAKE, EXECUTOR_ENV, LAKE_ENV, lake_root, landing_overlaps_lake
from evalpipeline.ingest.detect import FORMATS


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. a container's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _pairs(text: str) -> dict[str, str]:
    mapping = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE pairs separated by commas, got {part!r}")
        mapping[key.strip()] = value.strip()
    return mapping


def _value_map(text: str) -> dict[str, float]:
    try:
        return {key: float(value) for key, value in _pairs(text).items()}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"value map values must be numbers, like C=1,I=0: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalpipeline",
        description="Ingest eval logs into the lake and run the analysis (README.md, Command line).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialise the whole graph (Dagster, local persistent instance)")
    run.add_argument(
        "--only-changed",
        action="store_true",
        help="rerun only partitions with new or changed logs, and what is stale (an output missing, "
        "or made by other code or settings): the nightly behaviour",
    )
    run.add_argument(
        "--partitions-per-run",
        type=_positive_int,
        default=60,
        metavar="N",
        help="partitions one Dagster run covers at most (default 60): a run costs seconds of "
        "orchestration whatever it holds; a failed run is rerun, its failing partitions "
        "one per run",
    )
    run.add_argument(
        "--workers",
        type=_worker_count,
        default=available_cores(),
        metavar="N",
        help="worker processes that execute a stage's runs side by side (default and most: the "
        f"cores available, {available_cores()} here); 1 runs everything in this process",
    )
    forget = sub.add_parser(
        "forget",
        help="remove what logs gave the lake (or a model's, or a model x suite's), "
        "then refresh what they fed, as `run --only-changed` does",
    )
    forget.add_argument(
        "paths",
        nargs="*",
        metavar="LOG",
        help="a log as the lake records it (its log_path, e.g. data/inspect_logs/x.eval); it must no "
        "longer be in the landing folder, or the next run would ingest it again",
    )
    forget.add_argument("--model", default=None, help="every log of this model (with --suite: of this model x suite)")
    forget.add_argument("--suite", default=None, help="with --model: only this suite's logs of the model")
    forget.add_argument("--workers", type=_worker_count, default=available_cores(), metavar="N", help="as for run")
    ingest = sub.add_parser("ingest", help="ingest a log file or folder into the lake and print the row accounting")
    ingest.add_argument(
        "path",
        help="a log or table (Inspect .eval/.json, lm-evaluation-harness results_*.json, "
        "long .jsonl, long or wide .csv/.parquet), or a folder searched recursively for them",
    )
    ingest.add_argument("--lake", default=None, help="lake root (default $EVALPIPELINE_LAKE or data/lake)")
    ingest.add_argument(
        "--config", default=None, help="configuration file (default $EVALPIPELINE_CONFIG or ./evalpipeline.toml)"
    )
    ingest.add_argument("--format", choices=["auto", *FORMATS], default=None, help="source format (default: detect)")
    ingest.add_argument(
        "--map",
        type=_pairs,
        default=None,
        metavar="COLUMN=SOURCE,...",
        help="table columns: model=COL,suite=COL,item_id=COL,score=COL,epoch=COL,answer=COL,target=COL,"
        "cov_<name>=COL,...",
    )
    ingest.add_argument(
        "--metadata-map",
        type=_pairs,
        default=None,
        metavar="COLUMN=KEY,...",
        help="Inspect sample metadata: domain=KEY,subdomain=KEY,cov_<name>=KEY,...; answer=KEY or "
        "target=KEY replace the scorer's answer or the sample's target",
    )
    ingest.add_argument(
        "--suite",
        default=None,
        help="suite name for tables without a suite column (wide tables default to the file name's stem)",
    )
    ingest.add_argument("--model", default=None, help="model name for tables without a model column")
    ingest.add_argument(
        "--scorer",
        default=None,
        help="scorer (Inspect) or metric (lm-eval) to read when a log has several (default: the first)",
    )
    ingest.add_argument("--score-key", default=None, help="key to read from dict-valued scores")
    ingest.add_argument("--value-map", type=_value_map, default=None, help="letter grades, e.g. C=1,I=0,P=0.5,N=0")
    ingest.add_argument(
        "--numeric-range",
        nargs=2,
        type=float,
        default=None,
        metavar=("LOW", "HIGH"),
        help="numeric scores are mapped linearly from this range to [0, 1] (default 0 1)",
    )
    ingest.add_argument(
        "--no-validate", action="store_true", help="skip the Great Expectations validation of each partition (faster)"
    )
    ingest.add_argument(
        "--accept-incomplete-logs",
        action="store_true",
        default=None,
        help="ingest completed samples of error/cancelled logs",
    )
    ingest.add_argument(
        "--verbose",
        action="store_true",
        help="list every partition's row accounting (default: the first 20, the rest counted)",
    )
    from evalpipeline.cli.plan import add_plan_subcommand

    add_plan_subcommand(sub)
    return parser


def _worker_count(text: str) -> int:
    """``--workers``: 1 up to the cores available. Each worker runs one step at a time on one core (its fits'
    chains one after another), so more workers than cores only make them take turns, each holding its
    own code location, samplers and data (~2 GB at peak in the 100-model scale benchmark)."""
    value, cores = _positive_int(text), available_cores()
    if value > cores:
        raise argparse.ArgumentTypeError(
            f"must be at most the {cores} core(s) this process may use, got {text} "
            "(more workers than cores only take turns, each with its own memory)"
        )
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # argparse would name this function in its message
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _lake_label(option: str | None) -> str:
    """How an error names the lake root: the option or variable that set it, or the default."""
    if option:
        return f"--lake {option}"
    if os.environ.get(LAKE_ENV):
        return f"{LAKE_ENV}={os.environ[LAKE_ENV]!r}"
    return f"lake root {DEFAULT_LAKE} (the default)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("run", "forget"):
        # Its runs execute in this process and its workers, never on the executor the daemon's runs
        # use: set the choice aside, so that one this machine cannot load does not stop the run.
        executor = os.environ.pop(EXECUTOR_ENV, None)
        try:
            from evalpipeline.lake import prepare_lake_root
            from evalpipeline.config import check_named_config

            check_named_config()  # before the import below, which reads the file
            # the composition root owns Dagster; loading it reads most settings (cron, threads, config file)
            from resources.run.loop import check_run_settings, executor_note, local_instance, run_main_job

            check_run_settings()
            prepare_lake_root(lake_root(), _lake_label(None))  # a bad setting above leaves no folder behind
            local_instance()  # a dagster.yaml Dagster refuses, named here rather than in a traceback
        except ValueError as exc:
            print(f"evalpipeline {args.command}: {exc}", file=sys.stderr)
            return 2
        note = executor_note(executor)
        if note:
            print(note)
        if args.command == "forget":
            return _forget(args)
        return run_main_job(
            only_changed=args.only_changed, partitions_per_run=args.partitions_per_run, workers=args.workers
        )
    if args.command == "plan":
        return args.handler(args)
    return _ingest(args)


def _forget(args) -> int:
    """``evalpipeline forget``: :func:`evalpipeline.ingest.forget`, then the nightly refresh with the
    suites and models that lost a partition redone (the retired partitions unregistered, their failure
    rows resolved as retired)."""
    from evalpipeline.definitions import defs
    from resources.run.loop import run_main_job
    from evalpipeline.ingest import find_log_files, forget
    from evalpipeline.lake.keys import printable

    if args.suite is not None and args.model is None:
        print("evalpipeline forget: --suite needs --model", file=sys.stderr)
        return 2
    lake = defs.resources["lake"]
    landing = lake.landing_dir().resolve()

    # by name too: a log_path is recorded relative to the folder the ingest ran in, maybe not this one
    landed = {p.resolve() for p in find_log_files(landing)} if landing.is_dir() else set()

    def in_landing(log_path: str) -> str | None:
        path = Path(log_path).resolve()
        if path in landed or any(p.name == path.name for p in landed):
            return f"a log of that name is in the landing folder {landing}: the next run would ingest it again; move it out first"
        return None

    try:
        found = forget(lake.lake(), args.paths, model=args.model, suite=args.suite, keep_if=in_landing)
    except ValueError as exc:
        print(printable(f"evalpipeline forget: {exc}"), file=sys.stderr)
        return 2
    for (model, suite), records in sorted(found.records.items()):
        what = (
            f"retired: no other log holds it ({found.retired[(model, suite)]} folder(s) removed)"
            if (model, suite) in found.retired
            else "its other logs remain: consolidated again below"
        )
        print(
            printable(
                f"forgot {len(records)} ingest record(s), {found.rows[(model, suite)]} rows, of {model} x "
                f"{suite}: {what}"
            )
        )
    if found.other_records:
        print(f"forgot {found.other_records} record(s) of rows in no partition or of unreadable files")
    pairs = set(found.records)
    return run_main_job(only_changed=True, workers=args.workers, left=({s for _, s in pairs}, {m for m, _ in pairs}))


def _ingest(args) -> int:
    from evalpipeline.ingest import PARTITIONS_SHOWN, find_log_files, ingest_paths
    from evalpipeline.lake import Lake, prepare_lake_root
    from evalpipeline.config import ConfigError, check_named_config
    from evalpipeline.settings import check_config, load_ingest_options

    try:
        check_named_config(args.config)  # a folder or an unreadable file, named with --config or the variable
        # the whole file, as `evalpipeline run` reads it: a misspelt table or a bad value in it fails here too
        check_config(Path(args.config) if args.config else None)
        files = find_log_files(args.path)
        options = load_ingest_options(
            Path(args.config) if args.config else None,
            format=args.format,
            column_map=args.map,
            metadata_map=args.metadata_map,
            suite=args.suite,
            model=args.model,
            scorer=args.scorer,
            score_key=args.score_key,
            value_map=args.value_map,
            numeric_range=args.numeric_range,
            accept_incomplete_logs=args.accept_incomplete_logs,
        )
        overlap = landing_overlaps_lake(Path(args.path), Path(args.lake or lake_root()))
        if overlap:
            raise ValueError(overlap.replace("the landing folder", "the path to ingest", 1))
        lake = Lake(prepare_lake_root(args.lake or lake_root(), _lake_label(args.lake)))
    except (FileNotFoundError, ConfigError, ValueError) as exc:
        print(f"evalpipeline ingest: {exc}", file=sys.stderr)
        return 2
    validator = None
    if not args.no_validate:
        from evalpipeline.steps.samples import partition_validator
        from evalpipeline.settings import load_validation_settings

        validator = partition_validator(lake, load_validation_settings(Path(args.config) if args.config else None))
    from evalpipeline.lake.keys import printable

    # one line per message: a name from a log shows its control characters as escapes
    report = ingest_paths(files, lake, options, progress=lambda line: print(printable(line)), validator=validator)
    print(f"lake: {lake.root}")
    for line in report.summary_lines(None if args.verbose else PARTITIONS_SHOWN):
        print(printable(line))
    return 1 if report.not_consolidated or (report.file_errors and len(report.file_errors) == report.files_seen) else 0


if __name__ == "__main__":
    sys.exit(main())
