"""What the Dagster tests share: a landing folder of small Inspect logs, the resources to
materialise assets into a lake, and a small project to run the main job on."""

from __future__ import annotations

from pathlib import Path

from resources import IngestSettings, LakeResource, PosteriorSettings


def make_unit_landing(folder: Path) -> Path:
    """Three Inspect logs in ``folder``: alpha (3 of 6 right) and beta/v2 (6 of 6) on 'unit suite',
    alpha on 'other' (a .json log)."""
    from tests.helpers.inspect_logs import make_log

    make_log(folder, model="mockllm/alpha", suite="unit suite", items=6)
    make_log(
        folder, model="mockllm/beta/v2", suite="unit suite", items=6, answers={(f"q{i}", 1): "yes" for i in range(6)}
    )
    make_log(folder, model="mockllm/alpha", suite="other", items=4, log_format="json")
    return folder


def lake_resources(lake_root, landing):
    return {
        "lake": LakeResource(root=str(lake_root), landing=str(landing)),
        "ingest_settings": IngestSettings(),
        "posterior_settings": PosteriorSettings(),
    }


#: Small settings for the end-to-end tests of a few tiny partitions: no GLM, a short reliability run.
SMALL_PROJECT_CONFIG = (
    "[glm]\nmodels = []\n[reliability]\nn_configurations = 20\nn_draws = 200\ngrid_size = 100\nhorizons = [1, 5]\n"
)


def small_project(tmp_path, monkeypatch, logs: dict[str, str] | None = None):
    """A project in ``tmp_path`` (the working folder) with ``SMALL_PROJECT_CONFIG`` and a landing
    folder of ``logs`` (file name -> text; default: alpha and beta on arith and logic, 8 items each,
    one table each). Returns the landing folder."""
    landing = tmp_path / "landing"
    landing.mkdir()
    if logs is None:
        logs = {}
        for model in ("alpha", "beta"):
            for suite in ("arith", "logic"):
                rows = [f"{model},{suite},q{i},{(i + len(model)) % 2},d,{suite}" for i in range(8)]
                logs[f"{model}_{suite}.csv"] = "model,suite,item_id,score,domain,subdomain\n" + "\n".join(rows) + "\n"
    for name, text in logs.items():
        (landing / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evalpipeline.toml").write_text(SMALL_PROJECT_CONFIG)
    monkeypatch.setenv("EVALPIPELINE_LANDING", "landing")
    monkeypatch.setenv("EVALPIPELINE_LAKE", "lake")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return landing


def requested_partitions(result, instance) -> list[list[str]]:
    """The partitions of each run request of a landing sensor result (its new partitions registered as
    the daemon registers them) or of a schedule's list of requests (a range request names its ends)."""
    from assets.partitions import model_suite_partitions
    from assets.status import range_partition_keys

    for request in getattr(result, "dynamic_partitions_requests", None) or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    requests = result.run_requests if hasattr(result, "run_requests") else result
    return [range_partition_keys(r.tags, model_suite_partitions, instance) or [str(r.partition_key)] for r in requests]


def nightly_tick(instance, resources):
    """The nightly schedule's tick over the sample tables, as the daemon evaluates it."""
    from dagster import build_schedule_context

    from assets.jobs import ingest_and_fit_job
    from assets.samples import eval_samples
    from assets.schedules import build_nightly_schedule

    with build_schedule_context(instance=instance, resources=resources) as context:
        return build_nightly_schedule(ingest_and_fit_job, [eval_samples])(context)
