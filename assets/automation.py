"""Automation conditions shared by the downstream assets."""


from dagster import AutomationCondition


def refresh_when_inputs_change() -> AutomationCondition:
    """Eager refresh that reacts to changed *data*, not to every rerun upstream.

    Like ``AutomationCondition.eager()``, but an upstream materialisation only
    counts when its data version changed (our assets report content hashes),
    and a changed code version counts too. Missing upstream partitions do not
    block: a model never evaluated on a suite is simply absent downstream.
    One evaluation tick folds any number of upstream updates into one
    request per downstream partition, and an asset waits while an upstream
    asset is requested in the same tick or running (``model_profile`` reads the
    ``suite_comparison`` that eval_samples' change also triggers: it runs once,
    after it, not twice).
    """
    inputs_changed = AutomationCondition.any_deps_match(AutomationCondition.data_version_changed())
    return (
        (AutomationCondition.newly_missing() | inputs_changed | AutomationCondition.code_version_changed())
        .since_last_handled()
        .with_label("missing, inputs changed or code changed")
        & ~AutomationCondition.any_deps_match(AutomationCondition.will_be_requested())
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    )
