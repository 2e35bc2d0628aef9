"""bestk: @k-aware reinforcement learning for language models.

Optimise the quality of the best of k samples (pass@k, best@k) instead of one sample:
ArgMaxRL, MaxRL, KAPPO, SoftmaxGRPO and the baselines they are compared with, unbiased
pass@k / best@k metrics, an embedded trainer, and verl / TRL adapters.

The public names below load on first use (PEP 562, :mod:`bestk._lazy`), so ``import bestk``
and the ``bestk`` command line's ``--help`` do not import torch. The first use of any
estimator name (``bestk.ESTIMATORS``, ``bestk.advantages``, ...) imports
:mod:`bestk.estimators`, which registers every built-in estimator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bestk._lazy import lazy_attributes

__version__ = "0.1.0"

#: public name -> module that defines it (a submodule: the module itself)
_LAZY: dict[str, str] = {
    "ESTIMATORS": "bestk.estimators",
    "advantages": "bestk.estimators",
    "estimator_info": "bestk.estimators",
    "estimator_options": "bestk.estimators",
    "register_estimator": "bestk.estimators",
    "Groups": "bestk.groups",
    "make_groups": "bestk.groups",
    "best_at_k": "bestk.metrics",
    "best_at_k_curve": "bestk.metrics",
    "gradient_allocation": "bestk.metrics",
    "pass_at_k": "bestk.metrics",
    "pass_at_k_curve": "bestk.metrics",
    "kappo": "bestk.kappo",
    "theory": "bestk.theory",
}

__all__ = [
    "ESTIMATORS",
    "advantages",
    "estimator_info",
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

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk import kappo, theory
    from bestk.estimators import (
        ESTIMATORS,
        advantages,
        estimator_info,
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

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
