r"""Gradient accumulation over micro-batches (``loss.micro_batch_size``).

A minibatch too large for one forward/backward pass is split into micro-batches whose losses
are each the minibatch loss's *share* (e.g. ``bestk.losses.aggregate(..., num_tokens=,
num_seqs=)`` with the minibatch's counts): :math:`L = \sum_j L_j`, so
:math:`\nabla L = \sum_j \nabla L_j` and backpropagating each share as it is computed leaves
the minibatch's gradient in ``.grad`` while holding only one micro-batch's activations.
The optimizer step then sees the same gradient as the single pass (up to float rounding) and
makes one step: one ``zero_grad``, a backward pass per micro-batch, one clip and step
(:meth:`bestk.train.trainer.Trainer.optimize`).

:func:`micro_slices` splits a minibatch's rows; :func:`backward` runs the backward passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from bestk.train.algorithms._base import RunContext

__all__ = ["backward", "micro_slices"]


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


def optimizer_steps(
    run: RunContext,
    size: int,
    loss_of: Callable[[slice, int | None], tuple[dict[str, float], torch.Tensor]],
    micro_size: int | None,
) -> dict[str, float]:
    """The optimizer steps of one update over ``size`` items (``loss.ppo_epochs`` x
    ``loss.minibatches``, :func:`minibatches`); returns their mean metrics
    (:func:`mean_metrics`), each with ``grad_norm`` and ``lr``.

    ``loss_of(sl, None) -> (metrics, loss)`` is the mean loss of items ``sl``; ``loss_of(sl,
    count)`` its share of a minibatch of ``count`` items (the sum over ``sl`` over ``count``).
    Without ``micro_size`` a minibatch is one pass. With it, the minibatch's micro-batches of
    ``micro_size`` items (:func:`micro_slices`) are backpropagated one
    at a time into the same step (:meth:`RunContext.optimize`), and the step's metrics are the
    sums of their shares."""
    lc = run.cfg.loss
    run.model.train()
    steps = []
    for sl in minibatches(size, lc.ppo_epochs, lc.minibatches):
        if micro_size is None:
            st, loss = loss_of(sl, None)
            gnorm, lr = run.optimize(loss)
        else:
            parts: list[dict[str, float]] = []
            gnorm, lr = run.optimize(
                _micro_losses(loss_of, sl, micro_size, size, len(range(size)[sl]), parts))
            st = {k: sum(p[k] for p in parts) for k in parts[0]}
        st.update(grad_norm=gnorm, lr=lr)
        steps.append(st)
    return mean_metrics(steps)


def _micro_losses(
    loss_of: Callable[[slice, int | None], tuple[dict[str, float], torch.Tensor]],
    sl: slice, micro_size: int, size: int, count: int, parts: list[dict[str, float]],
) -> Iterator[torch.Tensor]:
    """The loss shares of minibatch ``sl``'s micro-batches, each yielded when it is computed
    (so its graph is freed after its backward); their metrics are appended to ``parts``."""
    for mic in micro_slices(sl, micro_size, size):
        st, loss = loss_of(mic, count)
        parts.append(st)
        yield loss
