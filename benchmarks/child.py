"""A benchmark's child process in one code tree: that tree's packages first, one BLAS and XLA thread
(as the pipeline's step processes), its last stdout line read as JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from resources.executors import limit_step_threads


def run_json_child(tree: Path, command: list[str]) -> dict:
    """Run ``command`` in ``tree`` with ``PYTHONPATH=tree``; its last line of output, parsed, or exit
    naming the tree and the end of its error output."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    limit_step_threads(env)
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
