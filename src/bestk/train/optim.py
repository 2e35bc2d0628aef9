r"""The optimizer of the embedded trainer: AdamW over the trainable parameters, through float32
master weights when they are stored in a lower precision.

* :func:`make_optimizer` -- AdamW over the parameters that require gradients (with LoRA: the
  adapters), with ``optim``'s betas, weight decay and kernel.
* :class:`MasterAdamW` -- what the SFT warm-up and RL step with: :func:`make_optimizer`'s
  AdamW, except that every trainable parameter stored in bfloat16 or float16
  (``model.dtype: bfloat16``) is stepped through a float32 *master* copy. The rule, per
  optimizer step: the forward and backward run in the parameters' own dtype; the gradients
  are upcast onto the masters (and dropped from the parameters) after each backward pass, so
  micro-batches' gradients add up in float32 (within one backward pass autograd sums the
  uses of a weight, e.g. a tied embedding's, in its own dtype); clipping, AdamW's moments
  (``exp_avg``, ``exp_avg_sq``, float32) and the update all work on the masters; then each
  parameter is written from its master, rounded to its dtype (round to nearest even). An
  update smaller than the parameter's resolution (bfloat16 keeps 8 significant bits) thus
  still accumulates in the master until it shows. A parameter written elsewhere since the
  optimizer last wrote it (torch's in-place version counter: an SFT warm-up, a warm start, a
  checkpoint restored without masters) and no longer equal to its master rounded has its
  master re-read from it before the next step (:meth:`MasterAdamW.sync`). float32 (and
  float64) parameters have no master: AdamW steps them in place, exactly as
  :func:`make_optimizer`'s would (a float32 model computes what it did before masters
  existed). Checkpoints store the masters (:meth:`MasterAdamW.masters`), so a resumed
  bfloat16 run is bit-identical to an uninterrupted one.
* :class:`PolicyOptimizer` -- RL's optimizer: one :meth:`~PolicyOptimizer.step` zeroes the
  gradients, backpropagates the loss (or the micro-batch losses one by one,
  :func:`backward`), clips the global gradient norm at
  ``optim.grad_clip``, stops a non-finite loss or norm before the update
  (:func:`bestk.train.guards.check_update`) and steps AdamW (:class:`MasterAdamW`) at the
  learning rate

  .. math:: \eta_t = \eta\,\min(1, (t + 1) / w)

  of optimizer step :math:`t` (``optim.lr`` :math:`\eta`, ``optim.warmup_steps`` :math:`w`;
  constant after the warm-up, and from the start when :math:`w = 0`). It counts its steps
  (:attr:`~PolicyOptimizer.steps`, checkpointed as ``opt_steps``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch

from bestk.train.config import OptimConfig, ResolvedTrainConfig
from bestk.train.guards import check_update

__all__ = ["make_optimizer", "MasterAdamW", "PolicyOptimizer", "backward", "LOW_PRECISION"]

#: Parameter dtypes stepped through a float32 master copy (:class:`MasterAdamW`).
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _adamw(params: list[torch.Tensor], cfg: ResolvedTrainConfig, lr: float
           ) -> torch.optim.Optimizer:
    o = cfg.optim
    kernel = {"auto": {}, "foreach": {"foreach": True}, "for-loop": {"foreach": False},
              "fused": {"fused": True}}[o.implementation]
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2),
                             weight_decay=o.weight_decay, **kernel)


def make_optimizer(model: torch.nn.Module, cfg: ResolvedTrainConfig, lr: float
                   ) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters) with ``optim``'s betas,
    weight decay and kernel (``optim.implementation``), stepping them in place in their own
    dtype (:class:`MasterAdamW` adds float32 masters for bfloat16 parameters)."""
    return _adamw([p for p in model.parameters() if p.requires_grad], cfg, lr)


class MasterAdamW:
    """AdamW over ``model``'s trainable parameters with float32 masters for those stored in
    bfloat16 / float16 (module docstring). Use: :meth:`zero_grad`, backward,
    :meth:`gradients` (upcast onto the masters, clip), :meth:`step`.

    :attr:`optimizer` is the ``torch.optim.AdamW`` (what a checkpoint saves), over
    :attr:`tensors`: for parameter ``i`` (in ``model.parameters()`` order, trainable only)
    its float32 master, or the parameter itself when it has none."""

    def __init__(self, model: torch.nn.Module, cfg: ResolvedTrainConfig, lr: float):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tensors: list[torch.Tensor] = [
            p.detach().float().clone() if p.dtype in LOW_PRECISION else p for p in self.params]
        #: indices (into :attr:`params`) of the parameters that have a master
        self.low = [i for i, p in enumerate(self.params) if p.dtype in LOW_PRECISION]
        self._written = [p._version for p in self.params]
        self.optimizer = _adamw(self.tensors, cfg, lr)

    @property
    def active(self) -> bool:
        """Whether any parameter has a float32 master (else this is plain AdamW)."""
        return bool(self.low)

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next :meth:`step`."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def sync(self) -> None:
        """Re-read the master of every parameter written elsewhere since :meth:`step` last
        wrote it (its version counter moved) that no longer equals its master rounded."""
        with torch.no_grad():
            for i in self.low:
                p, m = self.params[i], self.tensors[i]
                if p._version != self._written[i]:
                    if not torch.equal(p, m.to(p.dtype)):
                        m.copy_(p)
                    self._written[i] = p._version

    def masters(self) -> dict[int, torch.Tensor]:
        """``{parameter index: float32 master}`` (empty without masters), synced first
        (:meth:`sync`): what a checkpoint stores beside AdamW's state."""
        self.sync()
        return {i: self.tensors[i] for i in self.low}

    def zero_grad(self) -> None:
        """Drop every gradient (the parameters' and the masters'); sync the masters."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.active:
            self.sync()
            for i in self.low:
                self.params[i].grad = None

    def accumulate(self) -> None:
        """Add the low-precision parameters' gradients into their masters' float32
        gradients and drop them (after each micro-batch's backward pass)."""
        for i in self.low:
            p, m = self.params[i], self.tensors[i]
            if p.grad is None:
                continue
            if m.grad is None:
                m.grad = p.grad.float()
            else:
                m.grad.add_(p.grad.float())
            p.grad = None

    def gradients(self, max_norm: float | None) -> torch.Tensor | None:
        """After the backward pass: move the low-precision gradients onto the masters
        (float32, :meth:`accumulate`), then, unless ``max_norm`` is ``None``, clip the global
        norm of AdamW's gradients at ``max_norm`` and return it before clipping."""
        if not self.active:
            if max_norm is None:
                return None
            return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.accumulate()
        if max_norm is None:
            return None
        return torch.nn.utils.clip_grad_norm_(self.tensors, max_norm)

    def step(self) -> None:
        """AdamW's step on :attr:`tensors`; each low-precision parameter is then written from
        its master (rounded to nearest even)."""
        self.optimizer.step()
        if self.active:
            with torch.no_grad():
                for i in self.low:
                    self.params[i].copy_(self.tensors[i])
                    self._written[i] = self.params[i]._version


class PolicyOptimizer:
    """RL's optimizer of ``model`` (module docstring): AdamW through float32 masters where
    the parameters are low-precision (:attr:`adamw`; :attr:`optimizer`, its AdamW, and
    :meth:`masters` are what a checkpoint saves) and the count of steps taken
    (:attr:`steps`)."""

    def __init__(self, model: torch.nn.Module, cfg: ResolvedTrainConfig):
        self.model = model
        self.settings: OptimConfig = cfg.optim
        self.adamw = MasterAdamW(model, cfg, cfg.optim.lr)
        self.optimizer = self.adamw.optimizer
        self.steps = 0

    def masters(self) -> dict[int, torch.Tensor]:
        """The float32 masters by parameter index (:meth:`MasterAdamW.masters`)."""
        return self.adamw.masters()

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
        self.adamw.set_lr(lr)
        self.adamw.zero_grad()
        total = backward(loss, self.adamw.accumulate if self.adamw.active else None)
        clip = self.settings.grad_clip if self.settings.grad_clip > 0 else float("inf")
        gnorm = self.adamw.gradients(clip)
        assert gnorm is not None  # a norm is asked for
        check_update(rl_step, total, gnorm, rewards)  # nan / inf: stop before the update
        self.adamw.step()
        self.steps += 1
        return float(gnorm), lr


def backward(loss: torch.Tensor | Iterable[torch.Tensor],
             after_each: Callable[[], None] | None = None) -> torch.Tensor:
    """Backpropagate ``loss`` and return it: a tensor is ``loss.backward()`` (exactly); an
    iterable of micro-batch losses (e.g. a generator computing each when asked) has each
    backpropagated as it is yielded, before the next is computed (then ``after_each()``, e.g.
    :meth:`MasterAdamW.accumulate`), and the detached sum :math:`\\sum_j L_j` is returned (the
    minibatch's loss). Raises ``ValueError`` for an empty iterable."""
    if isinstance(loss, torch.Tensor):
        loss.backward()
        return loss
    total: torch.Tensor | None = None
    for part in loss:
        part.backward()
        if after_each is not None:
            after_each()
        total = part.detach() if total is None else total + part.detach()
    if total is None:
        raise ValueError("backward: no micro-batch losses")
    return total
