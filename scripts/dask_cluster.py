"""Start a Dask scheduler and worker processes on this machine and keep them up until Ctrl-C.

    .venv/bin/python scripts/dask_cluster.py [--workers 2] [--host 127.0.0.1] [--port 8786]

Prints the `export` lines that make runs use it. Listens on loopback unless --host says
otherwise; Dask's TCP comms are unauthenticated, so expose it only on a trusted network
(or configure Dask's TLS). `make dask-cluster` runs this with the defaults.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from resources.executors import DASK_SCHEDULER_ENV, EXECUTOR_ENV, start_dask_cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one thread each (default 2)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default loopback)")
    parser.add_argument("--port", type=int, default=8786, help="scheduler port (0 = any free port)")
    parser.add_argument("--log-dir", type=Path, help="process logs and worker spill space (default: a temp folder)")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="evalpipeline-dask-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with start_dask_cluster(args.workers, log_dir=log_dir, host=args.host, port=args.port) as cluster:
        print(
            f"Dask scheduler {cluster.address}, {args.workers} worker(s) (pids {cluster.worker_pids}); logs in {log_dir}"
        )
        print(f"export {EXECUTOR_ENV}=dask {DASK_SCHEDULER_ENV}={cluster.address}")
        print("Ctrl-C stops the cluster.", flush=True)
        try:
            while not stop.wait(1.0):
                if any(p.poll() is not None for p in cluster.processes):
                    print(f"a Dask process exited; see {log_dir}", file=sys.stderr)
                    return 1
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
