"""HIP-LLM reliability under an operational profile (issue 5): imprecise-prior envelopes.

Source: the HIP-LLM paper. See
:mod:`evalpipeline.reliability.core` for the model and how each quantity is
computed, :mod:`evalpipeline.reliability.settings` for the defaults, and
:mod:`evalpipeline.reliability.pipeline` for the helpers the Dagster assets use.
"""

from evalpipeline.reliability.core import (
    ReliabilityResult,
    assess_reliability,
    beta_moments,
    conjugate_envelope,
    hyper_posterior_grid,
    hyperparameter_configurations,
    log_marginal_likelihood,
    validate_counts,
    weighted_sum_moments,
)
from evalpipeline.reliability.settings import (
    HyperBox,
    OperationalProfile,
    ReliabilitySettings,
    beliefs,
    elicit,
    elicit_box,
)

__all__ = [
    "HyperBox",
    "OperationalProfile",
    "ReliabilityResult",
    "ReliabilitySettings",
    "assess_reliability",
    "beliefs",
    "beta_moments",
    "conjugate_envelope",
    "elicit",
    "elicit_box",
    "hyper_posterior_grid",
    "hyperparameter_configurations",
    "log_marginal_likelihood",
    "validate_counts",
    "weighted_sum_moments",
]

from evalpipeline.reliability.pipeline import (  # noqa: E402
    Taxonomy,
    counts_from_samples,
    load_taxonomy,
    model_counts,
    write_reliability,
)
from evalpipeline.reliability.sensitivity import (  # noqa: E402
    hyperparameter_sensitivity,
    narrowed_boxes,
    profile_sensitivity,
    within_domain_profiles,
)

__all__ += [
    "Taxonomy",
    "counts_from_samples",
    "hyperparameter_sensitivity",
    "load_taxonomy",
    "model_counts",
    "narrowed_boxes",
    "profile_sensitivity",
    "within_domain_profiles",
    "write_reliability",
]
