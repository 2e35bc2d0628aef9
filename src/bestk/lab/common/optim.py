"""Adam for a batch of independent models, each with its own learning rate.

The lab trains many small models at once as one set of stacked tensors (the leading dimensions
index the models: learner x learning rate x seed). Adam is elementwise, so one Adam over the
stack equals one Adam per model — except that ``torch.optim.Adam`` takes a single learning
rate. :class:`SlotAdam` is the same update (``torch.optim.Adam`` with ``amsgrad=False``,
``weight_decay=0``, ``maximize=False``) with a learning-rate tensor that broadcasts against each
parameter, so a learning-rate sweep runs as one batch:

    m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2,
    theta <- theta - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).

:func:`torch_threads` sets torch's CPU thread count for a lab run (these tiny tensors run
fastest on one thread) and restores it afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

__all__ = ["SlotAdam", "torch_threads"]


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (``n = 0`` keeps the current count),
    then restore the count it found, also when the block raises."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SlotAdam:
    """Adam with a per-model learning rate.

    Parameters
    ----------
    params:
        Tensors with ``requires_grad`` whose leading dimensions index independent models.
    lr:
        Learning rates broadcastable against every parameter, e.g. shape ``(P, 1, 1)`` for
        parameters of shape ``(P, a, b)``; all entries positive and finite.
    betas, eps:
        As in ``torch.optim.Adam``.
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: torch.Tensor,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        lr = torch.as_tensor(lr)
        if not bool(torch.isfinite(lr).all()) or not bool((lr > 0).all()):
            raise ValueError(f"learning rates must be positive and finite, got {lr.flatten()}")
        for p in self.params:
            torch.broadcast_shapes(lr.shape, p.shape)  # raises if lr does not broadcast
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        b1, b2 = self.betas
        self.t += 1
        bc1 = 1 - b1**self.t
        bc2_sqrt = math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(self.eps)
            p.sub_((self.lr.to(p.dtype) / bc1) * m / denom)
