"""bestk: @k-aware reinforcement learning for language models.

Optimise the quality of the best of k samples (pass@k, best@k) instead of one sample:
ArgMaxRL, MaxRL, KAPPO, SoftmaxGRPO and the baselines they are compared with, unbiased
pass@k / best@k metrics, an embedded trainer, and verl / TRL adapters.
"""

from bestk import (
    kappo,  # noqa: F401  (registers the kappo_grpo estimator)
    theory,  # noqa: F401
)
from bestk.estimators import (
    ESTIMATORS,
    advantages,
    estimator_options,
    register_estimator,
)
from bestk.groups import Groups, make_groups
from bestk.metrics import (
    best_at_k,
    best_at_k_curve,
    gradient_allocation,
    pass_at_k,
    pass_at_k_curve,
)

__version__ = "0.1.0"

__all__ = [
    "ESTIMATORS",
    "advantages",
    "estimator_options",
    "register_estimator",
    "Groups",
    "make_groups",
    "pass_at_k",
    "best_at_k",
    "pass_at_k_curve",
    "best_at_k_curve",
    "gradient_allocation",
    "kappo",
    "theory",
    "__version__",
]
