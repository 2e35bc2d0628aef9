r"""Gradient accumulation over micro-batches (``loss.micro_batch_size``).

A minibatch too large for one forward/backward pass is split into micro-batches whose losses
are each the minibatch loss's *share* (e.g. ``bestk.losses.aggregate(..., num_tokens=,
num_seqs=)`` with the minibatch's counts): :math:`L = \sum_j L_j`, so
:math:`\nabla L = \sum_j \nabla L_j` and backpropagating each share as it is computed leaves
the minibatch's gradient in ``.grad`` while holding only one micro-batch's activations.
The optimizer step then sees the same gradient as the single pass (up to float rounding) and
makes one step: one ``zero_grad``, a backward pass per micro-batch, one clip and step
(:meth:`bestk.train.loop.Trainer.optimize`).

:func:`micro_slices` splits a minibatch's rows; :func:`backward` runs the backward passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

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
