"""@k-aware advantage estimators, registered by name (see ``docs/estimators.md``).

Importing this package registers the built-in estimators in :data:`ESTIMATORS`.
"""

from bestk.estimators._registry import (
    ESTIMATORS,
    advantages,
    check_estimator_options,
    check_option_names,
    estimator_options,
    prepare,
    register_estimator,
)

__all__ = [
    "ESTIMATORS",
    "advantages",
    "check_estimator_options",
    "check_option_names",
    "estimator_options",
    "prepare",
    "register_estimator",
]

# Register the built-in estimators (import for side effects).
from bestk.estimators import argmaxrl as _argmaxrl  # noqa: E402, F401
from bestk.estimators import baselines as _baselines  # noqa: E402, F401
from bestk.estimators import pkpo as _pkpo  # noqa: E402, F401
from bestk.estimators import softmax_grpo as _softmax_grpo  # noqa: E402, F401
