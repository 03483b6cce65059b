"""The composition root: the one module of evalpipeline that imports Dagster.

``defs`` is the code location ``dagster dev -w workspace.yaml``, the daemon and ``evalpipeline run``
load: the assets, jobs, schedule and sensors of ``assets/`` with the resources and executor of
``resources/``. The run loop of ``evalpipeline run`` is ``resources.run``.
"""

from dagster import Definitions

from assets.jobs import (
    LAKE_ASSETS,
    MODEL_ASSETS,
    ON_REQUEST_ASSETS,
    PARTITION_ASSETS,
    SUITE_ASSETS,
    comparison_job,
    ingest_and_fit_job,
    lake_job,
    model_job,
    model_profile_job,
    suite_job,
)
from assets.redo import rerun_rest_of_failed_ranges
from assets.samplers import prepare_samplers, sampler_requests
from assets.schedules import build_nightly_schedule
from assets.sensors import automation_sensor, landing_sensor
from assets.status import record_run_failures, resolve_run_failures
from resources.executors import configured_executor
from resources.lake import configured_resources

defs = Definitions(
    assets=[*PARTITION_ASSETS, *SUITE_ASSETS, *MODEL_ASSETS, *LAKE_ASSETS, *ON_REQUEST_ASSETS],
    jobs=[ingest_and_fit_job, suite_job, comparison_job, model_job, model_profile_job, lake_job, prepare_samplers],
    schedules=[build_nightly_schedule(ingest_and_fit_job, PARTITION_ASSETS)],
    sensors=[
        landing_sensor,
        record_run_failures,
        resolve_run_failures,
        rerun_rest_of_failed_ranges,
        automation_sensor,
        sampler_requests,
    ],
    resources=configured_resources(),
    executor=configured_executor(),
)
