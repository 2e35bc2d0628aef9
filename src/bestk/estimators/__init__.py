"""@k-aware advantage estimators, registered by name (see ``docs/estimators.md``).

Importing this package registers the built-in estimators in :data:`ESTIMATORS`.
"""

from bestk.estimators._registry import (
    ESTIMATORS,
    advantages,
    estimator_options,
    prepare,
    register_estimator,
)

__all__ = ["ESTIMATORS", "advantages", "estimator_options", "prepare", "register_estimator"]
