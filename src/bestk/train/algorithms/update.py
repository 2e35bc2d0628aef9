r"""The update of an algorithm: minibatches, micro-batches and the optimizer steps over a batch.

:func:`optimizer_steps` runs ``loss.ppo_epochs`` passes of ``loss.minibatches`` minibatches
(:func:`minibatches`) over a step's batch, one optimizer step each, and returns their mean
metrics: ``pg``, ``apo`` and ``dpo`` all update through it.

Gradient accumulation (``loss.micro_batch_size``). A minibatch too large for one
forward/backward pass is split into micro-batches (:func:`micro_slices`) whose losses are
each the minibatch loss's *share* (e.g. ``bestk.losses.aggregate(..., num_tokens=,
num_seqs=)`` with the minibatch's counts): :math:`L = \sum_j L_j`, so
:math:`\nabla L = \sum_j \nabla L_j` and backpropagating each share as it is computed
(:func:`bestk.train.optim.backward`) leaves the minibatch's gradient in ``.grad`` while
holding only one micro-batch's activations. The optimizer step then sees the same gradient
as the single pass (up to float rounding) and makes one step: one ``zero_grad``, a backward
pass per micro-batch, one clip and step (:class:`bestk.train.optim.PolicyOptimizer`).

A batch that gives no gradient (``zero_gradient``: e.g. every advantage 0 and no other term
in the loss) skips the backward pass through the model: its metrics come from the same
forward pass run without a graph, and the optimizer takes its step on :func:`zero_loss`,
whose gradient is an exact zero for every trainable parameter -- what the full backward
would give -- so AdamW's moments, weight decay, step count and the logs match a full update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from bestk.train.algorithms._base import RunContext

__all__ = ["micro_slices", "minibatches", "mean_metrics", "optimizer_steps", "LossOf",
           "items_in", "zero_loss"]


def micro_slices(rows: slice, size: int | None, length: int) -> Iterator[slice]:
    """The consecutive slices of at most ``size`` rows of ``rows`` (a ``slice`` with a start and
    a stop, within a batch of ``length`` rows); ``size`` ``None``: ``rows`` itself (one
    pass)."""
    if size is None:
        yield rows
        return
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    stop = min(rows.stop, length)
    for start in range(rows.start, stop, size):
        yield slice(start, min(start + size, stop))




def minibatches(size: int, epochs: int, count: int) -> Iterator[slice]:
    """The slices of ``epochs`` passes over a batch of ``size`` items in ``count`` minibatches
    of ``ceil(size / count)`` consecutive items (``loss.ppo_epochs`` x ``loss.minibatches``
    optimizer steps)."""
    step = max(1, -(-size // count))
    for _ in range(epochs):
        for start in range(0, size, step):
            yield slice(start, start + step)


def mean_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over the optimizer steps of an update."""
    keys = dict.fromkeys(k for st in steps for k in st)
    return {k: float(np.mean([st[k] for st in steps if k in st])) for k in keys}


def items_in(minibatch: slice | None, size: int) -> int | None:
    """The number of items of ``minibatch`` within a batch of ``size`` (``None`` for
    ``None``): the denominator of a micro-batch's share of a per-item mean."""
    return None if minibatch is None else len(range(size)[minibatch])


#: ``loss_of(rows, minibatch) -> (metrics, loss)`` of :func:`optimizer_steps`.
LossOf = Callable[[slice, "slice | None"], tuple[dict[str, float], torch.Tensor]]


def zero_loss(model: torch.nn.Module) -> torch.Tensor:
    """``sum_p sum(0 * p)`` over the trainable parameters: 0, with gradient exactly 0 for
    each of them, from a graph one elementwise product deep (no pass through the model)."""
    return torch.stack([(p * 0).sum() for p in model.parameters() if p.requires_grad]).sum()


def optimizer_steps(run: RunContext, size: int, loss_of: LossOf, micro_size: int | None,
                    *, zero_gradient: bool = False) -> dict[str, float]:
    """The optimizer steps of one update over ``size`` items (``loss.ppo_epochs`` x
    ``loss.minibatches``, :func:`minibatches`); returns their mean metrics
    (:func:`mean_metrics`), each with ``grad_norm`` and ``lr``. The one micro-batch loop of
    the trainer: every algorithm's update goes through it.

    ``loss_of(rows, None) -> (metrics, loss)`` is the loss of the minibatch ``rows`` on its
    own (its mean); ``loss_of(rows, minibatch)`` the share of micro-batch ``rows`` of the loss
    of ``minibatch`` (e.g. the sum over ``rows`` divided by the minibatch's item or token
    count), so that the shares add up to the minibatch's loss. Without ``micro_size`` a
    minibatch is one pass. With it, the minibatch's micro-batches of ``micro_size`` items
    (:func:`micro_slices`) are backpropagated one at a time into the same step
    (:meth:`RunContext.optimize`, :func:`bestk.train.optim.backward`), and the step's
    metrics are the sums of their shares. ``zero_gradient``: the caller knows the loss has
    no gradient (module docstring); no backward pass through the model is run."""
    lc = run.cfg.loss
    run.model.train()
    steps = []
    for sl in minibatches(size, lc.ppo_epochs, lc.minibatches):
        if zero_gradient:
            with torch.no_grad():
                shares = [loss_of(mic, None if micro_size is None else sl)[0]
                          for mic in micro_slices(sl, micro_size, size)]
            gnorm, lr = run.optimize(zero_loss(run.model))
            st = {k: sum(p[k] for p in shares) for k in shares[0]}
        elif micro_size is None:
            st, loss = loss_of(sl, None)
            gnorm, lr = run.optimize(loss)
        else:
            parts: list[dict[str, float]] = []
            gnorm, lr = run.optimize(_micro_losses(loss_of, sl, micro_size, size, parts))
            st = {k: sum(p[k] for p in parts) for k in parts[0]}
        st.update(grad_norm=gnorm, lr=lr)
        steps.append(st)
    return mean_metrics(steps)


def _micro_losses(loss_of: LossOf, minibatch: slice, micro_size: int, size: int,
                  parts: list[dict[str, float]]) -> Iterator[torch.Tensor]:
    """The loss shares of ``minibatch``'s micro-batches, each yielded when it is computed (so
    its graph is freed after its backward); their metrics are appended to ``parts``."""
    for mic in micro_slices(minibatch, micro_size, size):
        st, loss = loss_of(mic, minibatch)
        parts.append(st)
        yield loss
