r"""The optimizer of the embedded trainer: AdamW over the trainable parameters.

* :func:`make_optimizer` -- AdamW over the parameters that require gradients (with LoRA: the
  adapters), with ``optim``'s betas, weight decay and kernel; the SFT warm-up and RL use it.
* :class:`PolicyOptimizer` -- RL's optimizer: one :meth:`~PolicyOptimizer.step` zeroes the
  gradients, backpropagates the loss (or the micro-batch losses one by one,
  :func:`backward`), clips the global gradient norm at
  ``optim.grad_clip``, stops a non-finite loss or norm before the update
  (:func:`bestk.train.run.guards.check_update`) and steps AdamW at the learning rate

  .. math:: \eta_t = \eta\,\min(1, (t + 1) / w)

  of optimizer step :math:`t` (``optim.lr`` :math:`\eta`, ``optim.warmup_steps`` :math:`w`;
  constant after the warm-up, and from the start when :math:`w = 0`). It counts its steps
  (:attr:`~PolicyOptimizer.steps`, checkpointed as ``opt_steps``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from bestk.train.config import OptimConfig, ResolvedTrainConfig
from bestk.train.run.guards import check_update

__all__ = ["make_optimizer", "PolicyOptimizer", "backward"]


def make_optimizer(model: torch.nn.Module, cfg: ResolvedTrainConfig, lr: float
                   ) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters) with ``optim``'s betas,
    weight decay and kernel (``optim.implementation``)."""
    o = cfg.optim
    kernel = {"auto": {}, "foreach": {"foreach": True}, "for-loop": {"foreach": False},
              "fused": {"fused": True}}[o.implementation]
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, **kernel,
    )


class PolicyOptimizer:
    """RL's optimizer of ``model`` (module docstring): AdamW (:attr:`optimizer`, what a
    checkpoint saves) and the count of steps taken (:attr:`steps`)."""

    def __init__(self, model: torch.nn.Module, cfg: ResolvedTrainConfig):
        self.model = model
        self.settings: OptimConfig = cfg.optim
        self.optimizer = make_optimizer(model, cfg, cfg.optim.lr)
        self.steps = 0

    def learning_rate(self) -> float:
        """The rate of the next step: ``optim.lr`` times the warm-up factor."""
        w = self.settings.warmup_steps
        return self.settings.lr * (min(1.0, (self.steps + 1) / w) if w > 0 else 1.0)

    def step(self, loss: torch.Tensor | Iterable[torch.Tensor], *, rl_step: int,
             rewards: np.ndarray | None) -> tuple[float, float]:
        """One AdamW step on ``loss`` (a tensor, or micro-batch losses backpropagated as they
        come) within RL step ``rl_step``; returns ``(gradient norm before clipping, learning
        rate)``. A non-finite loss or norm raises before the update, naming ``rl_step`` and
        the range of that step's ``rewards``."""
        lr = self.learning_rate()
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total = backward(loss)
        clip = self.settings.grad_clip if self.settings.grad_clip > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        check_update(rl_step, total, gnorm, rewards)  # nan / inf: stop before the update
        self.optimizer.step()
        self.steps += 1
        return float(gnorm), lr


def backward(loss: torch.Tensor | Iterable[torch.Tensor]) -> torch.Tensor:
    """Backpropagate ``loss`` and return it: a tensor is ``loss.backward()`` (exactly); an
    iterable of micro-batch losses (e.g. a generator computing each when asked) has each
    backpropagated as it is yielded, before the next is computed, and the detached sum
    :math:`\\sum_j L_j` is returned (the minibatch's loss). Raises ``ValueError`` for an empty
    iterable."""
    if isinstance(loss, torch.Tensor):
        loss.backward()
        return loss
    total: torch.Tensor | None = None
    for part in loss:
        part.backward()
        total = part.detach() if total is None else total + part.detach()
    if total is None:
        raise ValueError("backward: no micro-batch losses")
    return total
