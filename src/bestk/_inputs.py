"""Validated input of every batch function: rewards to a float64 tensor, results back.

:func:`prepare` is what :func:`bestk.advantages` and the metrics (:func:`bestk.best_at_k`, ...)
do first: rewards (list, numpy array or tensor; 1-D with group labels or 2-D ``(G, N)``) become
a flat float64 tensor and a :class:`bestk.groups.Groups`, and ``finish`` maps a float64 result
back to the caller's type. :func:`rewards_to_tensor` / :func:`to_output` are the two halves on
their own; :func:`first_non_binary` is the one 0/1 check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
import torch
from numpy.typing import ArrayLike

from bestk.groups import GroupLabels, Groups, block_groups, make_groups

__all__ = ["prepare", "rewards_to_tensor", "to_output", "first_non_binary", "Numbers",
           "ArrayInput", "NumbersOut", "Finish"]

#: Numbers as the public batch functions take them: a tensor, or anything numpy reads as an
#: array (a numpy array, a nested sequence of numbers, a scalar).
Numbers: TypeAlias = torch.Tensor | ArrayLike
#: Numbers that are not a tensor: a numpy array, a number or a (nested) sequence of numbers
#: (the inputs whose results are float64 numpy arrays; the non-tensor ``@overload`` of a
#: function that returns what it was given).
ArrayInput: TypeAlias = np.ndarray | float | Sequence[float] | Sequence[Sequence[float]]
#: What they return: a tensor (of the input tensor's dtype and device) for tensor input, else a
#: float64 numpy array.
NumbersOut: TypeAlias = torch.Tensor | np.ndarray
#: ``finish(a, shape=None, what="advantages")`` of :func:`prepare`: a flat float64 result back
#: in the caller's type and shape.
Finish: TypeAlias = Callable[..., NumbersOut]


#: Integers above this magnitude do not convert to float64 exactly.
_EXACT_INT = 2**53


def _integer_range_check(lo: float, hi: float) -> None:
    if max(abs(lo), abs(hi)) > _EXACT_INT:
        raise ValueError(
            f"integer rewards must lie within +-2**53 to convert to float64 exactly; got values "
            f"from {lo} to {hi} (pass them as floats if rounding is intended)"
        )


def rewards_to_tensor(rewards: Numbers) -> tuple[torch.Tensor, torch.dtype | None]:
    """Conversion to a float64 tensor, and the dtype of tensor input (``None`` otherwise)."""
    if isinstance(rewards, torch.Tensor):
        if rewards.is_complex():
            raise ValueError("rewards must be real numbers, got a complex tensor")
        if rewards.ndim == 0:
            raise ValueError(
                f"rewards must be 1-D (B,) or 2-D (G, N), got a 0-d tensor ({rewards.item()!r})"
            )
        if rewards.is_floating_point():
            return rewards.detach().to(torch.float64), rewards.dtype
        if rewards.dtype != torch.bool and rewards.numel():
            lo, hi = torch.aminmax(rewards.detach())
            _integer_range_check(int(lo), int(hi))
        return rewards.detach().to(torch.float64), torch.get_default_dtype()
    try:
        arr = np.asarray(rewards)
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"rewards must be a 1-D or 2-D array of numbers: {e}") from None
    if arr.ndim == 0:
        raise ValueError(f"rewards must be 1-D (B,) or 2-D (G, N), got a 0-d scalar {rewards!r}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"rewards must be numbers, got dtype {arr.dtype}")
    if arr.dtype.kind in "iu" and arr.size:
        _integer_range_check(int(arr.min()), int(arr.max()))
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64)), None


def _validate(r: torch.Tensor) -> None:
    if r.ndim not in (1, 2):
        raise ValueError(
            f"rewards must be 1-D (B,) or 2-D (G, N), got {r.ndim}-D shape {tuple(r.shape)}"
        )
    if r.numel() == 0:
        raise ValueError(f"rewards are empty (shape {tuple(r.shape)})")
    lo, hi = torch.aminmax(r)  # NaN propagates into both
    if not (math.isfinite(lo) and math.isfinite(hi)):
        finite = torch.isfinite(r)
        bad = torch.nonzero(~finite)[0].tolist()
        where = bad[0] if r.ndim == 1 else tuple(bad)
        raise ValueError(f"reward at index {where} is {r[tuple(bad)].item()} (must be finite)")


def to_output(a: torch.Tensor, dtype: torch.dtype | None, what: str = "advantages"
              ) -> NumbersOut:
    """A float64 result in the caller's type: a tensor of ``dtype`` (tensor input, ``dtype``
    not ``None``) or a float64 numpy array.

    A result the dtype cannot hold (``|a|`` beyond its largest finite value, e.g. 65504 for
    float16) is a ``ValueError`` naming the dtype and its range, never a silent ``inf``.
    """
    if dtype is None:
        return a.cpu().numpy()
    if dtype == torch.float64:
        return a
    out = a.to(dtype)
    if out.numel() and out.is_floating_point():
        lo, hi = torch.aminmax(out)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            big = float(a.abs().max())
            raise ValueError(
                f"{what} up to {big:.6g} in magnitude do not fit the rewards' dtype {dtype} "
                f"(finite range +-{torch.finfo(dtype).max:.6g}); pass rewards in a wider float "
                "dtype, or rescale them"
            )
    return out


def prepare(rewards: Numbers, group: GroupLabels = None) -> tuple[torch.Tensor, Groups, Finish]:
    """Validate ``rewards``/``group`` as :func:`advantages` does.

    Returns the flat float64 reward tensor, its :class:`Groups`, and ``finish(a, shape=None,
    what="advantages")`` mapping a flat float64 result back to the caller's type (tensor of
    the rewards' dtype, or float64 numpy) and to ``shape`` (default: the rewards' shape),
    raising ``ValueError`` if the rewards' dtype cannot represent it.
    """
    r, dtype = rewards_to_tensor(rewards)
    _validate(r)
    shape = r.shape
    if r.ndim == 2:
        if group is not None:
            raise ValueError("group must be None when rewards are a 2-D (G, N) array")
        groups = block_groups(shape[0], shape[1], r.device)
        flat = r.reshape(-1)
    else:
        flat = r
        groups = make_groups(group, shape[0], r.device)

    def finish(a: torch.Tensor, out_shape: tuple[int, ...] | None = None,
               what: str = "advantages") -> NumbersOut:
        return to_output(a.reshape(shape if out_shape is None else out_shape), dtype, what)

    return flat, groups, finish


def first_non_binary(values: Numbers) -> int | None:
    """Flat index of the first value of ``values`` (tensor or array) that is neither 0 nor 1,
    or ``None`` when all are 0/1 (NaN counts as not 0/1)."""
    if isinstance(values, torch.Tensor):
        bad = (values != 0) & (values != 1)
        return int(torch.nonzero(bad.reshape(-1))[0]) if bool(bad.any()) else None
    arr = np.asarray(values)
    where = np.flatnonzero((arr != 0) & (arr != 1))
    return int(where[0]) if where.size else None
