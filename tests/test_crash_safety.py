"""Crash safety: SIGKILL `evalpipeline run` in the middle of a GLM fit, rerun, and get exactly
the outputs of an uninterrupted run, with no partial file left in the lake."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DEMO_LOGS

CONFIG = """
[glm]
models = ["binomial", "suite_binomial"]
num_warmup = 1500
num_samples = 1500
[glm.thresholds]
min_ess_bulk = 200
min_ess_tail = 200
"""


def _workspace(root: Path) -> dict:
    landing = root / "landing"
    landing.mkdir(parents=True)
    # one partition keeps the test short: atlas-large on arith (3 subdomains x 25 items x 3 epochs)
    (log,) = [p for p in DEMO_LOGS.iterdir() if "arith_mockllm-atlas-large" in p.name]
    shutil.copy(log, landing / log.name)
    (root / "evalpipeline.toml").write_text(CONFIG)
    (root / "home").mkdir()
    env = dict(os.environ)
    # relative paths, as `make demo` uses them: both workspaces then record the same source paths
    env.update(
        EVALPIPELINE_LANDING="landing",
        EVALPIPELINE_LAKE="lake",
        EVALPIPELINE_CONFIG=str(root / "evalpipeline.toml"),
        DAGSTER_HOME=str(root / "home"),
        EVALPIPELINE_LOG_LEVEL="INFO",
    )
    return env


def _run(env: dict, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalpipeline.cli.main", "run"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _outputs(lake: Path) -> dict[str, bytes]:
    """Every table the lake holds (netCDF posteriors compare by value below: HDF5 embeds timestamps)
    but the run status records: the killed run's failure is recorded there, checked above."""
    return {
        str(p.relative_to(lake)): p.read_bytes()
        for p in lake.rglob("*")
        if p.is_file() and p.suffix in (".parquet", ".png") and not {".cache", "run_status"} & set(p.parts)
    }


@pytest.mark.slow
def test_killed_fit_leaves_no_partial_file_and_the_rerun_matches_an_uninterrupted_run(tmp_path):
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    killed_env = _workspace(killed_root)
    process = subprocess.Popen(
        [sys.executable, "-m", "evalpipeline.cli.main", "run"],
        env=killed_env,
        cwd=killed_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    deadline = time.monotonic() + 600
    for line in process.stdout:  # wait until NUTS is running for the partition's binomial GLM
        seen.append(line)
        if "binomial: NUTS" in line:
            break
        assert time.monotonic() < deadline, "".join(seen[-20:])
    else:
        pytest.fail("the run ended before its fit started:\n" + "".join(seen[-30:]))
    time.sleep(1.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    lake = killed_root / "lake"
    assert not list(lake.glob("glm_fits/*/*/binomial/provenance.json")), "the fit finished before the kill"
    # right after the kill: what a reader of the lake sees is whole (a kill leaves only hidden
    # temporaries, which pyarrow and Spark skip and the next write into their folder sweeps)
    import pyarrow.parquet as pq

    visible = [
        p
        for p in lake.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(lake).parts)
    ]
    for path in visible:
        if path.suffix == ".parquet":
            pq.read_table(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())

    rerun = _run(killed_env, killed_root)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "marked run" in rerun.stdout and "failed: its process" in rerun.stdout
    # ... and recorded it where the morning's failures are read, as the failure sensor would
    import re

    from evalpipeline.lake import Lake
    from evalpipeline.steps.run_status import read_run_failures

    killed_runs = set(re.findall(r"marked run (\S+) failed: its process", rerun.stdout))
    failures = read_run_failures(Lake(lake))
    recorded = failures.loc[failures["error_type"] == "ProcessDied"]
    assert set(recorded["run_id"]) == killed_runs, failures
    assert recorded["partition"].str.len().gt(0).all() and recorded["error_summary"].str.contains("is gone").all()
    assert not recorded["partition"].str.contains(r"\.\.").any(), recorded  # a row per partition of a killed range
    assert recorded["resolved_by"].notna().all(), recorded  # the rerun redid them

    clean_env = _workspace(clean_root)
    clean = _run(clean_env, clean_root)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]

    assert not [p for p in lake.rglob(".tmp-*")], "partial files left in the lake"
    killed_outputs, clean_outputs = _outputs(lake), _outputs(clean_root / "lake")
    assert killed_outputs.keys() == clean_outputs.keys()
    different = [name for name in killed_outputs if killed_outputs[name] != clean_outputs[name]]
    assert not different, different

    import arviz as az

    for posterior in lake.glob("glm_fits/*/*/binomial/posterior.nc"):
        twin = clean_root / "lake" / posterior.relative_to(lake)
        a, b = az.from_netcdf(posterior), az.from_netcdf(twin)
        assert (a.posterior["overall"].values == b.posterior["overall"].values).all()
