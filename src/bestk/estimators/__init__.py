"""@k-aware advantage estimators, registered by name with their properties.

Importing this package registers the built-in estimators in :data:`ESTIMATORS`: ``argmaxrl``,
``maxrl`` (:mod:`~bestk.estimators.argmaxrl`), ``grpo``, ``rloo``, ``reinforce``
(:mod:`~bestk.estimators.baselines`), ``softmax_grpo``, ``pkpo``, ``passk_training`` (Pass@k
Training's analytical advantage), ``loo_max`` (the leave-one-out max of best@N) and
``kappo_grpo`` (@k-GRPO, on a KAPPO calibration from :mod:`bestk.kappo`). See
``docs/estimators.md`` for the formulas and ``docs/design.md`` for adding one.
"""

from bestk.estimators import (
    argmaxrl,
    baselines,
    kappo_grpo,
    loo_max,
    passk_training,
    pkpo,
    softmax_grpo,
)
from bestk.estimators._registry import (
    ESTIMATORS,
    REWARD_DOMAINS,
    EstimatorInfo,
    Options,
    advantages,
    check_estimator_options,
    check_option_names,
    estimator_info,
    estimator_options,
    estimator_table,
    on_register,
    prepare,
    register_estimator,
    resolve_options,
)
from bestk.estimators.objectives import ByOption, Objective, best_at, best_at_n, joint

__all__ = [
    "ESTIMATORS",
    "REWARD_DOMAINS",
    "ByOption",
    "EstimatorInfo",
    "Objective",
    "Options",
    "advantages",
    "best_at",
    "best_at_n",
    "check_estimator_options",
    "check_option_names",
    "estimator_info",
    "estimator_options",
    "estimator_table",
    "joint",
    "on_register",
    "prepare",
    "register_estimator",
    "resolve_options",
    # the modules of the built-in estimators
    "argmaxrl",
    "baselines",
    "kappo_grpo",
    "loo_max",
    "passk_training",
    "pkpo",
    "softmax_grpo",
]
