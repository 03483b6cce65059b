"""``evalpipeline`` command line.

    evalpipeline run            materialise the whole graph for the landing folder
    evalpipeline ingest PATH    ingest one log file or folder into the lake

Both honour ``EVALPIPELINE_LAKE`` (lake root, default ``data/lake``);
``run`` reads ``EVALPIPELINE_LANDING`` (default ``data/inspect_logs``) and
``DAGSTER_HOME`` (default ``dagster_home``).
"""

from __future__ import annotations

import argparse
import sys

from evalpipeline.config import lake_root


def _value_map(text: str) -> dict[str, float]:
    mapping = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE pairs like C=1,I=0, got {part!r}")
        mapping[key] = float(value)
    return mapping


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalpipeline", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="materialise the whole graph (Dagster, local persistent instance)")
    ingest = sub.add_parser("ingest", help="ingest a log file or folder into the lake and print the row accounting")
    ingest.add_argument("path", help="an Inspect .eval/.json log, or a folder searched recursively")
    ingest.add_argument("--lake", default=None, help="lake root (default $EVALPIPELINE_LAKE or data/lake)")
    ingest.add_argument("--scorer", default=None, help="scorer to read when a log has several (default: the first)")
    ingest.add_argument("--score-key", default=None, help="key to read from dict-valued scores")
    ingest.add_argument("--value-map", type=_value_map, default=None, help="letter grades, e.g. C=1,I=0,P=0.5,N=0")
    ingest.add_argument("--numeric-range", nargs=2, type=float, default=(0.0, 1.0), metavar=("LOW", "HIGH"))
    ingest.add_argument("--accept-incomplete-logs", action="store_true", help="ingest completed samples of error/cancelled logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        from evalpipeline.definitions import run_main_job  # the composition root owns Dagster

        return run_main_job()
    return _ingest(args)


def _ingest(args) -> int:
    from evalpipeline.ingest import ScoreNormalisation, find_log_files, ingest_paths
    from evalpipeline.ingest.scores import DEFAULT_VALUE_MAP
    from evalpipeline.lake import Lake

    try:
        files = find_log_files(args.path)
        normalisation = ScoreNormalisation(
            value_map=args.value_map or dict(DEFAULT_VALUE_MAP),
            scorer=args.scorer,
            score_key=args.score_key,
            numeric_range=tuple(args.numeric_range),
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"evalpipeline ingest: {exc}", file=sys.stderr)
        return 2
    lake = Lake(args.lake or lake_root())
    report = ingest_paths(
        files, lake, normalisation, accept_incomplete_logs=args.accept_incomplete_logs, progress=print
    )
    print(f"lake: {lake.root}")
    for line in report.summary_lines():
        print(line)
    return 1 if report.file_errors and len(report.file_errors) == report.files_seen else 0


if __name__ == "__main__":
    sys.exit(main())
