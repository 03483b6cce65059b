"""Speed and peak memory of the Inspect log reader against ``inspect_ai.analysis.samples_df``.

Usage::

    .venv/bin/python benchmarks/ingest_benchmark.py [--sizes 10000 200000] [--json-sizes 10000]
                                                   [--chunk-rows 10000] [--repeat 1]

Logs: synthetic Inspect logs (``tests/helpers/synthetic_logs.py``: inspect_ai runs
once on a two-sample task, its log is the template for N samples), cached in
``benchmarks/.logs/`` and reused by later runs.

What runs, each in a fresh subprocess so that peak memory is its own:

* ``ours: read`` -- ``InspectReader().read(...)``, every chunk consumed
  (``IngestOptions(chunk_rows=--chunk-rows)``);
* ``ours: ingest`` -- ``ingest_paths([log], Lake(tmp))``: hashing, staging the
  chunks to Parquet, and consolidating the partition;
* ``samples_df`` -- ``inspect_ai.analysis.samples_df(log)``;
* a baseline that only imports what the others import.

Speed is samples / second of the operation alone (imports and interpreter
start excluded). Peak memory is what the operation added to the process:

* ``peak MiB``: after the imports the child resets its peak-RSS mark
  (``/proc/self/clear_refs``, Linux >= 4.0) and reports ``VmHWM`` after the
  operation minus ``VmRSS`` before it;
* ``maxrss-base``: the child's ``ru_maxrss`` (from ``os.wait4``) minus the
  baseline child's. Importing inspect_ai.analysis peaks high and then
  frees much of it, so this hides anything smaller than that transient
  import peak; it is shown for completeness and is 0 for such operations.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(__file__).resolve().parent / ".logs"
GENERATOR_VERSION = "v1"  # bump when tests/helpers/synthetic_logs.py changes what it writes

MODES = ("baseline", "ours_read", "ours_ingest", "samples_df")
LABELS = {"ours_read": "ours: read", "ours_ingest": "ours: ingest", "samples_df": "samples_df"}


# -- the child: one operation, timed ------------------------------------------------------


def _imports() -> None:
    """What every child imports before timing (the same for all, so the baseline is fair)."""
    import inspect_ai.analysis  # noqa: F401
    import inspect_ai.log  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import evalpipeline.ingest  # noqa: F401
    import evalpipeline.ingest.inspect_logs  # noqa: F401


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset this process's peak-RSS mark (VmHWM) to its current RSS, where Linux allows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(mode: str, path: str, chunk_rows: int) -> dict:
    sys.path.insert(0, str(REPO))
    _imports()
    import gc

    from evalpipeline.ingest import IngestOptions, Source, ingest_paths
    from evalpipeline.ingest.inspect_logs import InspectReader
    from evalpipeline.lake import Lake

    rows = 0
    gc.collect()
    reset = _reset_peak()
    rss_before = _status_kib("VmRSS")
    start = time.perf_counter()
    if mode == "ours_read":
        options = IngestOptions(chunk_rows=chunk_rows)
        source = Source(path=path, sha256="0" * 64, format="inspect")  # the hash is ingest's job, timed there
        for chunk in InspectReader().read(source, options):
            rows += len(chunk.rows)
    elif mode == "ours_ingest":
        with tempfile.TemporaryDirectory() as lake:
            report = ingest_paths([Path(path)], Lake(Path(lake)), IngestOptions(chunk_rows=chunk_rows))
            if report.file_errors:
                raise RuntimeError(report.file_errors)
            rows = report.rows_read
    elif mode == "samples_df":
        from inspect_ai.analysis import samples_df

        rows = len(samples_df(path, quiet=True))
    elif mode != "baseline":
        raise ValueError(mode)
    seconds = time.perf_counter() - start
    added = (_status_kib("VmHWM") - rss_before) / 1024 if reset else None
    return {"rows": rows, "seconds": seconds, "added_mib": added}


def run_child(mode: str, path: Path | None, chunk_rows: int) -> dict:
    """Run one operation in a fresh interpreter; its result and its peak RSS (MiB)."""
    command = [sys.executable, __file__, "--child", mode, str(path or ""), "--chunk-rows", str(chunk_rows)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO) as proc:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} on {path} failed (exit {proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_mib"] = usage.ru_maxrss / 1024  # kilobytes on Linux
    return result


# -- the logs ------------------------------------------------------------------------------


def ensure_logs(sizes: list[int], json_sizes: list[int]) -> list[tuple[int, str, Path]]:
    sys.path.insert(0, str(REPO))
    from tests.helpers.synthetic_logs import log_file_name, make_template, write_synthetic_log

    wanted = [(n, "eval") for n in sizes] + [(n, "json") for n in json_sizes]
    logs = [(n, fmt, CACHE / GENERATOR_VERSION / log_file_name(n, fmt)) for n, fmt in wanted]
    missing = [(n, fmt, p) for n, fmt, p in logs if not p.exists()]
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            template = make_template(tmp)
            for n, fmt, path in missing:
                start = time.perf_counter()
                write_synthetic_log(path, n, template=template, eval_id=f"bench{n}{fmt}")
                print(
                    f"wrote {path.relative_to(REPO)} ({path.stat().st_size / 2**20:.0f} MiB) "
                    f"in {time.perf_counter() - start:.1f} s",
                    flush=True,
                )
    return logs


# -- the report ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 200_000], help=".eval log sizes (samples)")
    parser.add_argument("--json-sizes", type=int, nargs="*", default=[10_000], help=".json log sizes (samples)")
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="IngestOptions.chunk_rows for our reader")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement (the median is shown)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(LABELS), help="modes not to run")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.chunk_rows)))
        return 0

    logs = ensure_logs(args.sizes, args.json_sizes)
    baseline = statistics.median(run_child("baseline", None, args.chunk_rows)["peak_mib"] for _ in range(args.repeat))
    hwm = run_child("baseline", None, args.chunk_rows)["added_mib"] is not None
    print(
        f"\nbaseline (imports only): peak RSS {baseline:.0f} MiB; chunk_rows={args.chunk_rows}; "
        f"median of {args.repeat} run(s); python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n",
        flush=True,
    )

    results: dict[tuple[int, str, str], dict] = {}
    if not hwm:
        print("(/proc/self/clear_refs is not writable here: peak MiB falls back to maxrss-base)\n")
    header = (
        f"{'log':>14}  {'reader':<13} {'seconds':>8} {'samples/s':>10} {'peak MiB':>9} {'maxrss-base':>11} "
        f"{'speed vs df':>11} {'mem vs df':>9}"
    )
    print(header)
    print("-" * len(header))
    for n, fmt, path in logs:
        for mode in ("samples_df", "ours_read", "ours_ingest"):
            if mode in args.skip:
                continue
            runs = [run_child(mode, path, args.chunk_rows) for _ in range(args.repeat)]
            if any(r["rows"] != n for r in runs):
                raise RuntimeError(f"{mode} read {runs[0]['rows']} rows from {path}, expected {n}")
            seconds = statistics.median(r["seconds"] for r in runs)
            over_base = max(0.0, statistics.median(r["peak_mib"] for r in runs) - baseline)
            peak = statistics.median(r["added_mib"] for r in runs) if hwm else over_base
            results[(n, fmt, mode)] = {"seconds": seconds, "rate": n / seconds, "peak": peak}
            df = results.get((n, fmt, "samples_df"))
            speed = f"{results[(n, fmt, mode)]['rate'] / df['rate']:.2f}x" if df and mode != "samples_df" else ""
            memory = f"{peak / df['peak']:.2f}" if df and mode != "samples_df" and df["peak"] > 0 else ""
            print(
                f"{n:>9} {fmt:<4}  {LABELS[mode]:<13} {seconds:>8.2f} {n / seconds:>10,.0f} {peak:>9.0f} "
                f"{over_base:>11.0f} {speed:>11} {memory:>9}",
                flush=True,
            )

    eval_sizes = sorted(n for n, fmt, _ in logs if fmt == "eval")
    if len(eval_sizes) >= 2:
        small, large = eval_sizes[0], eval_sizes[-1]
        print(f"\npeak memory, {large} / {small} samples (.eval): ", end="")
        parts = []
        for mode in ("ours_read", "ours_ingest", "samples_df"):
            a, b = results.get((large, "eval", mode)), results.get((small, "eval", mode))
            if a and b and b["peak"] > 0:
                parts.append(f"{LABELS[mode]} {a['peak'] / b['peak']:.2f}")
        print(", ".join(parts) + f"  (the log is {large / small:.0f}x larger)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
