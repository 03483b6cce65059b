"""Distributed execution chosen by configuration: the executor selection, the documented
production configuration (Postgres storage, Kubernetes run config), and a real run of the demo
job on a Dask scheduler with two worker processes on loopback whose Parquet outputs equal those
of the local multiprocess executor."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from dagster import multiprocess_executor
from dagster._core.instance.config import dagster_instance_config

from assets.jobs import COMPARISON_STEPS, LAKE_STEPS, MODEL_STEPS, PARTITION_STEPS, SUITE_STEPS
from assets.partitions import model_suite_key
from evalpipeline.lake.keys import to_partition_key
from resources.executors import (
    DASK_SCHEDULER_ENV,
    EXECUTOR_ENV,
    STEP_PRELOAD_MODULES,
    configured_executor,
    local_executor,
    STEP_THREADS_ENV,
    landing_partitions,
    limit_step_threads,
    start_dask_cluster,
)
from tests.conftest import DEMO_LOGS, REPO

README = "\n".join(
    p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
)  # the README and docs/


def test_the_local_multiprocess_executor_is_the_default():
    assert configured_executor({}) is local_executor
    assert configured_executor({EXECUTOR_ENV: "multiprocess"}) is local_executor
    assert configured_executor({EXECUTOR_ENV: ""}) is local_executor


def test_the_local_executor_forks_its_steps_from_a_preloaded_server_unless_the_run_config_says_otherwise():
    assert local_executor.name == multiprocess_executor.name  # same run config as Dagster's own
    resolved = local_executor.apply_config_mapping({"config": {"max_concurrent": 2}})
    assert resolved.success, resolved.errors
    config = resolved.value["config"]
    assert config["max_concurrent"] == 2
    assert config["start_method"] == {"forkserver": {"preload_modules": list(STEP_PRELOAD_MODULES)}}
    assert STEP_PRELOAD_MODULES[0] == "evalpipeline.definitions"
    spawn = local_executor.apply_config_mapping({"config": {"start_method": {"spawn": {}}}})
    assert spawn.success and spawn.value["config"]["start_method"] == {"spawn": {}}
    bad = local_executor.apply_config_mapping({"config": {"max_concurrent": "two"}})
    assert not bad.success  # the configuration is checked against the multiprocess executor's schema


def test_preloading_the_step_modules_starts_no_thread_and_no_jax_backend():
    """What the forkserver imports must leave it safe to fork: no JAX backend (whose threads a fork
    would copy mid-use) and no Python thread; pyarrow's jemalloc keeps one background thread, which
    jemalloc itself prepares for fork."""
    script = (
        "import importlib, os, threading\n"
        "from resources.executors import STEP_PRELOAD_MODULES\n"
        "for name in STEP_PRELOAD_MODULES: importlib.import_module(name)\n"
        "from jax._src import xla_bridge\n"
        "names = sorted(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))\n"
        "print(len(xla_bridge._backends), threading.active_count(), names)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    backends, python_threads, os_threads = done.stdout.strip().split(" ", 2)
    assert (backends, python_threads) == ("0", "1")
    assert set(eval(os_threads)) <= {"python", "jemalloc_bg_thd"}, os_threads


def test_dask_is_selected_by_environment_and_reads_the_address_from_it(monkeypatch):
    executor = configured_executor({EXECUTOR_ENV: "Dask", DASK_SCHEDULER_ENV: "tcp://127.0.0.1:8786"})
    assert executor.name == "dask"
    # The address stays an env: source, resolved when a run starts: nothing is baked in.
    monkeypatch.setenv(DASK_SCHEDULER_ENV, "tcp://127.0.0.1:9999")
    resolved = executor.apply_config_mapping({})
    assert resolved.success, resolved.errors
    assert resolved.value["config"] == {"address": "tcp://127.0.0.1:9999"}


@pytest.mark.parametrize(
    "environ, message",
    [
        ({EXECUTOR_ENV: "dask"}, f"{EXECUTOR_ENV}=dask needs {DASK_SCHEDULER_ENV}"),
        ({EXECUTOR_ENV: "dask", DASK_SCHEDULER_ENV: "  "}, f"needs {DASK_SCHEDULER_ENV}"),
        ({EXECUTOR_ENV: "celery"}, "'celery' is not a known executor; choose one of multiprocess, dask, k8s"),
    ],
)
def test_bad_executor_configuration_is_named(environ, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        configured_executor(environ)


def test_kubernetes_is_selected_by_environment_when_dagster_k8s_is_installed():
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError:
        with pytest.raises(ValueError, match=re.escape("k8s needs the dagster-k8s package")):
            configured_executor({EXECUTOR_ENV: "k8s"})
    else:
        assert configured_executor({EXECUTOR_ENV: "k8s"}) is k8s_job_executor


def _readme_yaml(first_line: str) -> dict:
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if b.startswith(first_line)]
    assert len(blocks) == 1, f"one ```yaml block starting with {first_line!r} in README.md"
    return yaml.safe_load(blocks[0])


def test_step_processes_get_one_blas_and_xla_thread_unless_told_otherwise():
    one = "--xla_cpu_multi_thread_eigen=false"
    environ = {}
    assert limit_step_threads(environ) == environ
    assert environ == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "XLA_FLAGS": one}
    # what a user set is kept; other XLA flags are extended, not replaced
    environ = {"OMP_NUM_THREADS": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    limit_step_threads(environ)
    assert environ["OMP_NUM_THREADS"] == "4" and environ["OPENBLAS_NUM_THREADS"] == "1"
    assert environ["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=4 {one}"
    environ = {STEP_THREADS_ENV: "3"}
    limit_step_threads(environ)
    assert environ["MKL_NUM_THREADS"] == "3" and "XLA_FLAGS" not in environ  # XLA: one thread or its default
    environ = {STEP_THREADS_ENV: "0"}
    assert limit_step_threads(environ) == {} and environ == {STEP_THREADS_ENV: "0"}
    with pytest.raises(ValueError, match=f"{STEP_THREADS_ENV} must be a whole number.*'two'"):
        limit_step_threads({STEP_THREADS_ENV: "two"})


def test_loading_the_code_location_pins_the_threads_of_the_step_processes_it_starts():
    """The composition root sets the variables, so every process a run worker or `evalpipeline run`
    starts afterwards (step processes, pool workers) reads them when its BLAS and XLA load."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS", STEP_THREADS_ENV)
    }
    child = "import os; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['XLA_FLAGS'])"
    script = (
        "import subprocess, sys\nimport evalpipeline.definitions\n"
        f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1", "--xla_cpu_multi_thread_eigen=false"]


def test_documented_postgres_storage_is_a_valid_instance_config_without_credentials(tmp_path):
    config = _readme_yaml("# $DAGSTER_HOME/dagster.yaml")
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    validated, _ = dagster_instance_config(str(tmp_path))  # Dagster's own schema check
    db = validated["storage"]["postgres"]["postgres_db"]
    assert all(set(value) == {"env"} for value in db.values()), db  # every field from the environment
    assert db["password"] == {"env": "DAGSTER_PG_PASSWORD"}


def test_documented_kubernetes_run_config_configures_the_k8s_job_executor():
    config = _readme_yaml("# run config: execution block for k8s_job_executor")
    executor_config = config["execution"]["config"]
    # Field names of k8s_job_executor's schema (dagster-k8s API docs), checked without installing it.
    documented = {
        "job_namespace",
        "job_image",
        "image_pull_policy",
        "image_pull_secrets",
        "service_account_name",
        "env_config_maps",
        "env_secrets",
        "env_vars",
        "max_concurrent",
    }
    assert set(executor_config) <= documented
    assert {"job_namespace", "job_image"} <= set(executor_config)
    assert "EVALPIPELINE_EXECUTOR=k8s" in README and "k8s_job_executor" in README


# Two of the twelve demo partitions, two models on one suite, and every stage of the demo job after
# them (the suite, its comparison, the models, the lake-wide tables): 7 runs per executor. The
# binomial GLM is the one candidate fitted, and HIP-LLM runs on a coarse grid, at the shortest
# settings whose fits still pass their gates (below; the runs must succeed): the test compares where
# steps run and that both executors write the same bytes, which any sample size shows; at the paper's
# 4 x 2000 draws the fits take minutes per partition on two shared cores. Every run costs its processes' imports
# (under the local executor, one forkserver per run): with four partitions in three suites (15 runs)
# this test took 6 min alone, when every local step was a fresh interpreter. On these two
# partitions the local half takes 79 s with the forkserver, 140 s with a fresh interpreter per step.
# benchmarks/executor_benchmark.py runs all twelve partitions and compares the two lakes the same way.
SUBSET = [
    ("mockllm/atlas-large", "arith"),
    ("mockllm/cirrus 7b", "arith"),
]
GLM_CONFIG = """
[glm]
models = ["binomial"]
num_warmup = 150
num_samples = 150
[glm.thresholds]
min_ess_bulk = 50
min_ess_tail = 50
max_r_hat = 1.05
[reliability]
n_configurations = 20
n_draws = 200
grid_size = 100
"""


def _run_driver(tmp_path, name: str, executor_env: dict[str, str], concurrent_runs: int) -> dict:
    """Run the demo job's stages for SUBSET in a fresh process, as launched runs would be: the
    executor comes from its environment only. Returns the driver's JSON report."""
    home = tmp_path / f"home-{name}"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k not in (EXECUTOR_ENV, DASK_SCHEDULER_ENV)}
    env.update(executor_env, DAGSTER_HOME=str(home))
    report = tmp_path / f"{name}.json"
    args = [
        sys.executable,
        "-m",
        "resources.executors",
        "--lake",
        str(tmp_path / f"lake-{name}"),
        "--landing",
        str(DEMO_LOGS),
        "--concurrent-runs",
        str(concurrent_runs),
        "--json",
        str(report),
    ]
    for model, suite in SUBSET:
        args += ["--only", model, suite]
    args.append("--all-stages")
    done = subprocess.run(
        args, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200
    )  # a hang guard, not a speed target: loaded CI machines are slow
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return json.loads(report.read_text())


def _parquet_tables(lake) -> dict[str, pd.DataFrame]:
    return {str(p.relative_to(lake)): pd.read_parquet(p) for p in sorted(lake.rglob("*.parquet"))}


@pytest.mark.slow
def test_demo_job_on_two_dask_workers_equals_the_local_executor(tmp_path, monkeypatch):
    assert set(SUBSET) <= set(landing_partitions(DEMO_LOGS))
    # The steps read the project configuration where they run: the Dask workers (started from this
    # environment, as a deployment starts them from its own) and the local step processes alike.
    config = tmp_path / "evalpipeline.toml"
    config.write_text(GLM_CONFIG)
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    with start_dask_cluster(2, log_dir=tmp_path / "dask") as cluster:
        assert cluster.address.startswith("tcp://127.0.0.1:")
        assert len(cluster.worker_pids) == 2
        dask = _run_driver(tmp_path, "dask", {EXECUTOR_ENV: "dask", DASK_SCHEDULER_ENV: cluster.address}, 2)
        processes = cluster.processes
    assert all(p.poll() is not None for p in processes)  # the cluster is gone
    local = _run_driver(tmp_path, "local", {}, 2)  # two runs side by side, as the Dask half

    assert (dask["executor"], local["executor"]) == ("dask", "multiprocess")
    pairs = [str(model_suite_key(m, s)) for m, s in SUBSET]  # run in this order, as the suites and models are sorted
    suites, models = sorted({to_partition_key(s) for _, s in SUBSET}), sorted({to_partition_key(m) for m, _ in SUBSET})
    for report in (dask, local):
        # the partitions, then each suite twice (its GLMs, then its comparison), each model, the lake-wide run
        assert [r["partition_key"] for r in report["runs"]] == pairs + suites + suites + models + [""]
        assert all(r["success"] for r in report["runs"])
        assert all(set(r["step_pids"]) == set(PARTITION_STEPS) for r in report["runs"][: len(pairs)])
        steps = {step for r in report["runs"] for step in r["step_pids"]}
        assert set(SUITE_STEPS + COMPARISON_STEPS + MODEL_STEPS + LAKE_STEPS) <= steps
    # Every step of the Dask runs started in a Dask worker process -- not in the driver -- and the
    # two concurrent runs kept both workers busy; the local executor used fresh processes of its own.
    dask_pids = {pid for r in dask["runs"] for pid in r["step_pids"].values()}
    assert dask_pids == set(cluster.worker_pids)
    local_pids = {pid for r in local["runs"] for pid in r["step_pids"].values()}
    assert not local_pids & (set(cluster.worker_pids) | {local["driver_pid"]})

    dask_tables, local_tables = _parquet_tables(tmp_path / "lake-dask"), _parquet_tables(tmp_path / "lake-local")
    for table in (
        "accuracy_posteriors/",
        "glm_fits/",
        "reliability/",
        "suite_comparison/",
        "model_reliability/",
        "model_profile/",
        "waic_rankings/",
    ):
        assert any(name.startswith(table) for name in dask_tables), table
    # the GLM steps fitted (same seeds from the partition keys): the posteriors are equal draw for draw
    import xarray as xr

    for fit in sorted((tmp_path / "lake-dask").rglob("posterior.nc")):
        other = tmp_path / "lake-local" / fit.relative_to(tmp_path / "lake-dask")
        with xr.open_dataset(fit, group="posterior") as a, xr.open_dataset(other, group="posterior") as b:
            xr.testing.assert_identical(a, b)
    assert sorted(dask_tables) == sorted(local_tables)
    for name, table in dask_tables.items():
        # exact, HIP-LLM's BLAS grid sums too: Dask workers and local step processes alike run them on
        # one BLAS thread (limit_step_threads), so the additions happen in the same order
        pd.testing.assert_frame_equal(table, local_tables[name], check_exact=True, obj=name)


def test_a_half_written_scheduler_file_is_waited_for_not_parsed(tmp_path):
    from resources.executors import _scheduler_address

    scheduler_file = tmp_path / "scheduler.json"
    assert _scheduler_address(scheduler_file) is None  # not there yet
    scheduler_file.write_text("")  # created, not yet written (a CI run failed on this)
    assert _scheduler_address(scheduler_file) is None
    scheduler_file.write_text('{"type": "Scheduler", "addr')
    assert _scheduler_address(scheduler_file) is None
    scheduler_file.write_text('{"type": "Scheduler", "address": "tcp://127.0.0.1:4242"}')
    assert _scheduler_address(scheduler_file) == "tcp://127.0.0.1:4242"


def _listening(cluster) -> list[tuple[int, str, int]]:
    import psutil

    found = []
    for process in cluster.processes:
        parent = psutil.Process(process.pid)
        for member in [parent, *parent.children(recursive=True)]:
            found += [
                (member.pid, c.laddr.ip, c.laddr.port)
                for c in member.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            ]
    return found


def test_every_cluster_process_listens_on_loopback_only(tmp_path):
    with start_dask_cluster(1, log_dir=tmp_path / "dask", preload=()) as cluster:
        listening = _listening(cluster)
    # scheduler (comm + dashboard) and worker (comm + its HTTP server) at least; a worker's HTTP
    # server listened on every interface before it was given the address
    assert len(listening) >= 4, listening
    assert {ip for _, ip, _ in listening} == {"127.0.0.1"}, listening


def test_the_dashboards_stay_on_loopback_when_the_cluster_serves_another_address(tmp_path):
    with start_dask_cluster(1, log_dir=tmp_path / "dask", host="127.0.0.2", preload=()) as cluster:
        listening = _listening(cluster)
        comm_ports = {int(address.rsplit(":", 1)[1]) for address in [cluster.address]}
    # the scheduler and the worker serve the cluster on the address given; their HTTP servers
    # (dashboard, metrics: no authentication) only on 127.0.0.1
    assert {ip for _, ip, _ in listening} == {"127.0.0.1", "127.0.0.2"}, listening
    assert all(ip == "127.0.0.2" for _, ip, port in listening if port in comm_ports), listening
    assert sum(ip == "127.0.0.1" for _, ip, _ in listening) >= 2, listening
