"""The training algorithms of ``bestk train`` (``TrainConfig.algorithm``), one module each.

* :mod:`~bestk.train.algorithms.pg` -- ``pg``: PPO-clip on ``bestk.advantages`` of any
  estimator (the default; ``kappo_grpo`` is @k-GRPO);
* :mod:`~bestk.train.algorithms.apo` -- ``apo``: @k-A*PO, the regression of KAPPO Eq. 14 on
  the calibration's targets, ``rollout.n`` (default 1) on-policy completions per prompt;
* :mod:`~bestk.train.algorithms.dpo` -- ``dpo``: @k-DPO, KAPPO Eq. 13 with beta_eff(x) on
  (success, failure) pairs of the reference bank.

Each module defines a class with ``step(step) -> metrics`` that reads like the paper's
equation (``batch`` then ``update``), and an :class:`AlgorithmSpec` with the algorithm's
properties; the :class:`~bestk.train.trainer.Trainer` keeps the run state (config, policy,
optimizer, checkpoints, evaluation, logging) and calls them.
"""

from __future__ import annotations

from bestk.train.algorithms._base import AlgorithmSpec
from bestk.train.algorithms.apo import SPEC as _APO
from bestk.train.algorithms.dpo import SPEC as _DPO
from bestk.train.algorithms.pg import SPEC as _PG

__all__ = ["ALGORITHMS", "AlgorithmSpec"]

#: name -> :class:`AlgorithmSpec`, in the order the docs list them.
ALGORITHMS: dict[str, AlgorithmSpec] = {s.name: s for s in (_PG, _APO, _DPO)}
