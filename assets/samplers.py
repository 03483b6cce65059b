"""Job ``prepare_samplers`` and sensor ``sampler_requests``: compile ahead the warm samplers
that suite fits asked for (evalpipeline.steps.fits.prepare_requested_samplers), so that the night a new LLM
makes a suite outgrow its sampler's padded size does not trace and compile one in every worker.

``evalpipeline run`` runs the job itself, beside the lake-wide tables (its last stage), when a
suite fit asked; under the daemon the sensor launches it. The job writes nothing to the lake: it fills the program and
compilation caches, so it is a job of one op rather than an asset."""

import hashlib

from dagster import (
    DefaultSensorStatus,
    Failure,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from assets.fits import FIT_POOL
from evalpipeline.steps.fits import prepare_requested_samplers
from evalpipeline.models.fit import preparation_requests
from resources import LakeResource
from resources.fit import GlmSettings


def _table(records: list[dict]) -> str:
    rows = [f"| {r['suite']} | {r['glm']} | {r['reason']} | {r['done']} | {r['seconds']:.1f} |" for r in records]
    return "\n".join(["| suite | GLM | why asked | done | seconds |", "|---|---|---|---|---:|", *rows])


@op(
    description="Traces and compiles the warm samplers suite fits asked for, from each suite's data with one "
    "LLM more, into the program and compilation caches; writes nothing to the lake.",
    pool=FIT_POOL,  # compiling takes a core as a fit does
)
def prepare_warm_samplers(context: OpExecutionContext, lake: LakeResource, glm_settings: GlmSettings):
    store = lake.lake()
    fitter = glm_settings.fitter(store.root)
    records = prepare_requested_samplers(store, glm_settings.config(), fitter, progress=context.log.info)
    context.add_output_metadata(
        {
            "samplers": MetadataValue.md(_table(records) if records else "nothing was asked for"),
            "prepared": sum(r["done"] == "prepared" for r in records),
        }
    )
    failed = [r for r in records if r["done"].startswith("failed")]
    if failed:  # the nights' fits compile their own; the run fails so that the failure table shows why
        raise Failure(
            f"{len(failed)} of {len(records)} sampler(s) could not be prepared: "
            + "; ".join(f"{r['glm']} on suite {r['suite']}: {r['done']}" for r in failed)
        )
    return len(records)


@job(
    description="Compile ahead the warm samplers suite fits asked for (a suite about to outgrow its sampler's "
    "padded LLM axis, or one whose warm sampler was never compiled): the next night's refits "
    "then find them ready."
)
def prepare_samplers():
    prepare_warm_samplers()


@sensor(
    name="sampler_requests",
    job=prepare_samplers,
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches `prepare_samplers` when suite fits have asked for a warm sampler to be prepared.",
)
def sampler_requests(context: SensorEvaluationContext, lake: LakeResource, glm_settings: GlmSettings):
    root = lake.lake().root
    requests = preparation_requests(glm_settings.program_cache(root), root)
    if not requests:
        return SkipReason("no suite fit asked for a sampler")
    # one run per set of requests: a request left by a failed run is asked for again by the next fit
    key = hashlib.sha256(
        "\n".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in requests if p.exists()).encode()
    ).hexdigest()[:16]
    return RunRequest(run_key=f"samplers-{key}")
