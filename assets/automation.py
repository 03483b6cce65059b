"""Automation conditions shared by the downstream assets."""

import os
from dataclasses import dataclass

from dagster import AssetKey, AssetSelection, AutomationCondition, AutomationContext, AutomationResult

from assets.partitions import model_suite_key
from evalpipeline.config import lake_root
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.lake import Lake

#: The nightly's cron and timezone (``EVALPIPELINE_NIGHTLY_CRON``, ``EVALPIPELINE_TIMEZONE``): the
#: schedule's, and when automation retries what failed (see :func:`retry_failed_nightly`).
DEFAULT_CRON = "0 2 * * *"
DEFAULT_TIMEZONE = "UTC"


CRON_ENV, TIMEZONE_ENV = "EVALPIPELINE_NIGHTLY_CRON", "EVALPIPELINE_TIMEZONE"


def nightly_cron() -> tuple[str, str]:
    """(cron, timezone) from the environment, empty meaning the default. A bad value fails the
    code location's load with a message naming the variable, not Dagster's error deep in a stack."""
    from zoneinfo import ZoneInfo

    cron = os.environ.get(CRON_ENV, "").strip() or DEFAULT_CRON
    timezone = os.environ.get(TIMEZONE_ENV, "").strip() or DEFAULT_TIMEZONE
    try:
        # Dagster's own check of a schedule's cron, by the condition the nightly retry is built from
        # (it exports no validator); it raises its internal CheckError, hence the broad except
        AutomationCondition.cron_tick_passed(cron, DEFAULT_TIMEZONE)
    except Exception:
        raise ValueError(
            f"{CRON_ENV}={cron!r} is not a cron schedule: five fields, minute hour day month "
            f"weekday (default {DEFAULT_CRON!r})"
        ) from None
    try:
        ZoneInfo(timezone)
    except (LookupError, ValueError):  # unknown name / malformed key
        raise ValueError(
            f"{TIMEZONE_ENV}={timezone!r} is not an IANA time zone name, such as 'UTC' or 'Europe/London'"
        ) from None
    return cron, timezone


def retry_failed_nightly() -> AutomationCondition:
    """True from the nightly cron tick until requested, for a partition whose latest run failed (its
    step retries spent) or that has never been materialised. Automation requests a partition once
    per change, handled whether its run then succeeds or not, and the nightly schedule launches only
    model x suite runs: without this, a suite or model whose refresh failed would stay failed until
    its inputs changed again."""
    cron, timezone = nightly_cron()
    return (
        (
            AutomationCondition.cron_tick_passed(cron, timezone)
            & (AutomationCondition.execution_failed() | AutomationCondition.missing())
        )
        .since_last_handled()
        .with_label("failed or missing at the nightly tick")
    )


@dataclass(frozen=True)
class PassedValidation(AutomationCondition[AssetKey]):
    """The partitions of a model x suite, suite or model asset that hold (or, for a suite or model, read)
    at least one sample table that passed validation, read from the lake (``Lake.sample_tables``).

    Dagster's check conditions cannot say this: a run of a range of partitions records one result per
    check for all of them. Python, so evaluated on the code server (``use_user_code_server`` of the
    automation sensor). ``dimension``: ``model_suite``, ``model`` or ``suite``. A frozen dataclass:
    conditions are compared and hashed by what they hold (``AutomationCondition.replace``)."""

    dimension: str

    @property
    def name(self) -> str:
        return f"a sample table of the {self.dimension.replace('_', ' x ')} passed validation"

    @property
    def requires_cursor(self) -> bool:
        return False  # read afresh from the lake each tick: nothing of the previous evaluation is kept

    def evaluate(self, context: AutomationContext) -> AutomationResult:
        if context.candidate_subset.is_empty:  # the lake is not read for an asset with no candidates
            return AutomationResult(context=context, true_subset=context.get_empty_subset())
        accepted = Lake(lake_root()).sample_tables()  # without the rejected ones
        keys = {
            "model_suite": {str(model_suite_key(m, s)) for m, s, _ in accepted},
            "model": {to_partition_key(m) for m, _, _ in accepted},
            "suite": {to_partition_key(s) for _, s, _ in accepted},
        }[self.dimension]
        candidates = context.candidate_subset.expensively_compute_partition_keys()
        true_subset = context.asset_graph_view.get_subset_from_partition_keys(
            context.key, context.partitions_def, [k for k in candidates if k in keys]
        )
        return AutomationResult(context=context, true_subset=true_subset)


def has_accepted_samples(dimension: str) -> AutomationCondition:
    """True for a partition with a sample table that passed validation (:class:`PassedValidation`), or,
    for a suite or model, with outputs of an earlier night. Without it, automation requested each asset
    after a rejected table alone (each failed: 'the sample table failed validation'), and a new model's or
    suite's assets when none of its tables passed ('no sample tables'), at every nightly tick. One with
    earlier outputs is requested all the same, so that its step fails rather than leave outputs made from
    since-rejected rows shown as current: the rule of ``evalpipeline run`` (``with_data`` in
    resources.run.loop.run_main_job)."""
    if dimension == "model_suite":
        return PassedValidation(dimension=dimension)
    return (~AutomationCondition.missing() | PassedValidation(dimension=dimension)).with_label(
        f"outputs exist, or a sample table of the {dimension} passed validation"
    )


def refresh_when_inputs_change(
    ignore: AssetSelection | None = None,
    *,
    when_missing: bool = True,
    retry_nightly: bool = True,
    dimension: str | None = None,
) -> AutomationCondition:
    """Eager refresh that reacts to changed *data*, not to every rerun upstream.

    Like ``AutomationCondition.eager()``, but an upstream materialisation only
    counts when its data version changed (our assets report content hashes),
    and a changed code version counts too. Missing upstream partitions do not
    block: a model never evaluated on a suite is simply absent downstream.
    One evaluation tick folds any number of upstream updates into one
    request per downstream partition, and an asset waits while an upstream
    asset's own inputs were just updated or are being refreshed (the nightly retry
    of a missing or failed partition too): a change of samples reaches ``report``
    through the suite GLMs, ``suite_comparison`` and ``model_profile`` one tick
    after another, and report runs once, after the last of them.

    ``ignore``: upstream assets whose changes do not trigger a refresh by
    themselves because they reach the asset through another dependency too,
    and ``when_missing=False``: a missing partition waits for that dependency
    instead of running at once. ``model_profile`` reads its samples and the
    suites' leaderboards, which change whenever those samples do (a new
    model's included): reacting to the samples too would run it before the
    leaderboards are refreshed and again after. ``retry_nightly``: also
    :func:`retry_failed_nightly` (not for the model x suite assets, which the
    nightly schedule reruns itself). ``dimension`` (``suite`` or ``model``): the
    asset's partitions, for :func:`has_accepted_samples`, which is then required.
    """
    inputs_changed = AutomationCondition.any_deps_match(AutomationCondition.data_version_changed())
    if ignore is not None:
        inputs_changed = inputs_changed.ignore(ignore)
    trigger = inputs_changed | AutomationCondition.code_version_changed()
    if when_missing:
        trigger = AutomationCondition.newly_missing() | trigger
    trigger = trigger.since_last_handled().with_label("missing, inputs changed or code changed")
    if retry_nightly:
        trigger = trigger | retry_failed_nightly()
    # an upstream asset whose own inputs were just updated, or are being refreshed, is about to refresh
    # (in another run, so will_be_requested cannot see it): wait rather than run now and again after it.
    # Without the second, the nightly retry of a new model's missing profile ran while its suites' GLMs
    # were refitting, before their comparisons had the model (seen under the daemon)
    upstream_about_to_refresh = AutomationCondition.any_deps_match(
        AutomationCondition.any_deps_match(AutomationCondition.newly_updated() | AutomationCondition.in_progress())
    ).with_label("an upstream asset's inputs were just updated or are being refreshed")
    condition = (
        trigger
        & ~upstream_about_to_refresh
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    )
    return condition if dimension is None else condition & has_accepted_samples(dimension)


def refresh_partition_when_inputs_change() -> AutomationCondition:
    """:func:`refresh_when_inputs_change` for model x suite assets: never for a combination without
    samples (a model not evaluated on a suite), which would only fail with 'no data', nor for one whose
    sample table was rejected, which would only fail with 'failed validation'."""
    return (
        refresh_when_inputs_change(retry_nightly=False)
        & ~AutomationCondition.any_deps_missing()
        & has_accepted_samples("model_suite")
    )
