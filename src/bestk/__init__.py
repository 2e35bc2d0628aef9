"""bestk: @k-aware reinforcement learning for language models.

Optimise the quality of the best of k samples (pass@k, best@k) instead of one sample:
ArgMaxRL, MaxRL, KAPPO, SoftmaxGRPO and the baselines they are compared with, unbiased
pass@k / best@k metrics, an embedded trainer, and verl / TRL adapters.

The public names below load on first use (PEP 562), so ``import bestk`` and the ``bestk``
command line's ``--help`` do not import torch. The first use of any estimator name
(``bestk.ESTIMATORS``, ``bestk.advantages``, ...) registers every built-in estimator,
``kappo_grpo`` included.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    "ESTIMATORS": "bestk.estimators",
    "advantages": "bestk.estimators",
    "estimator_options": "bestk.estimators",
    "register_estimator": "bestk.estimators",
    "Groups": "bestk.groups",
    "make_groups": "bestk.groups",
    "best_at_k": "bestk.metrics",
    "best_at_k_curve": "bestk.metrics",
    "gradient_allocation": "bestk.metrics",
    "pass_at_k": "bestk.metrics",
    "pass_at_k_curve": "bestk.metrics",
}
_SUBMODULES = ("kappo", "theory")

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

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk import kappo, theory
    from bestk.estimators import ESTIMATORS, advantages, estimator_options, register_estimator
    from bestk.groups import Groups, make_groups
    from bestk.metrics import (
        best_at_k,
        best_at_k_curve,
        gradient_allocation,
        pass_at_k,
        pass_at_k_curve,
    )


def _register_builtin_estimators() -> None:
    """Import every module that registers a built-in estimator (``kappo_grpo`` lives in
    :mod:`bestk.kappo.estimator`)."""
    importlib.import_module("bestk.estimators")
    importlib.import_module("bestk.kappo.estimator")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(f"bestk.{name}")
    elif name in _LAZY:
        if _LAZY[name] == "bestk.estimators":
            _register_builtin_estimators()
        module = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'bestk' has no attribute {name!r}")
    globals()[name] = module  # later lookups bypass __getattr__
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
