"""Checks that stop a run before a bad optimizer step, naming the cause.

A reward of, say, ``1e20`` makes the policy-gradient loss and its gradient overflow: the
gradient norm is ``inf``, clipping then scales every gradient by ``clip / inf = 0`` and the
weights never change (or, with ``nan``, are destroyed). :func:`check_update` is called between
``loss.backward()`` (and the norm's computation) and ``optimizer.step()``: a non-finite loss
or gradient norm raises :class:`NonFiniteUpdate`, a one-line ``ValueError`` naming the step,
the range of that step's rewards and the fix, before any weight changes. The checks read
values the step computes anyway; they change no number of a run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import torch
    from numpy.typing import ArrayLike

__all__ = ["NonFiniteUpdate", "check_update", "check_sft_update"]


class NonFiniteUpdate(ValueError):
    """The loss or the gradient norm of an optimizer step is ``nan`` or infinite."""


def _value(x: torch.Tensor | float) -> float:
    return float(x.detach().float().item()) if hasattr(x, "detach") else float(x)


def _bad(loss: torch.Tensor | float, grad_norm: torch.Tensor | float) -> str | None:
    """``"the loss is nan"`` / ``"the gradient norm is inf"`` (both when both), or ``None``."""
    what = [f"the {name} is {v}" for name, v in (("loss", _value(loss)),
                                                ("gradient norm", _value(grad_norm)))
            if not math.isfinite(v)]
    return " and ".join(what) or None


def check_update(step: int, loss: torch.Tensor | float, grad_norm: torch.Tensor | float,
                 rewards: ArrayLike | None = None) -> None:
    """Raise :class:`NonFiniteUpdate` when ``loss`` or ``grad_norm`` (tensors or numbers) of
    RL step ``step`` is not finite; ``rewards`` (that step's rewards, if known) gives the
    range the message names."""
    bad = _bad(loss, grad_norm)
    if bad is None:
        return
    r = None if rewards is None else np.asarray(rewards, dtype=np.float64)
    seen = (f" with rewards in [{r.min():.6g}, {r.max():.6g}]" if r is not None and r.size
            else "")
    raise NonFiniteUpdate(
        f"RL step {step}: {bad}{seen}; stopped before the optimizer step (the last "
        "checkpoint is intact): rescale the task's rewards (to about [-1, 1]), or use an "
        "estimator that normalises them per group (e.g. grpo)"
    )


def check_sft_update(step: int, total: int, loss: torch.Tensor | float,
                     grad_norm: torch.Tensor | float | None) -> None:
    """Raise :class:`NonFiniteUpdate` when the loss or gradient norm of SFT step ``step`` (of
    ``total``) is not finite (``grad_norm`` may be ``None``: not computed)."""
    bad = _bad(loss, 0.0 if grad_norm is None else grad_norm)
    if bad is not None:
        raise NonFiniteUpdate(
            f"SFT step {step} of {total}: {bad}; stopped before the optimizer step: lower "
            "sft.lr (or optim.grad_clip), or check the task's reference answers"
        )
