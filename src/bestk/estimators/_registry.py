"""Estimator registry and the public entry point :func:`advantages`.

An estimator is a plain function ``fn(rewards, groups, *, option=default, ...) -> Tensor``:

* ``rewards`` is a 1-D float64 tensor of the batch's rewards (validated finite, non-empty);
* ``groups`` is a :class:`bestk.groups.Groups` of the batch;
* options are keyword-only parameters; their names are the options the user may pass;
* the result is a 1-D float64 tensor of advantages, scaled so that the per-group
  policy-gradient estimate is ``(1/N) * sum_i A_i * grad log pi(y_i | x)``.

:func:`advantages` does all input conversion and validation, so estimators only check the
values of their own options (raising ``ValueError``).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bestk.groups import Groups, block_groups, make_groups

__all__ = [
    "ESTIMATORS",
    "register_estimator",
    "advantages",
    "estimator_options",
    "check_estimator_options",
    "check_option_names",
    "prepare",
    "to_output",
]

EstimatorFn = Callable[..., torch.Tensor]

#: name -> estimator function. Use :func:`register_estimator` to add one.
ESTIMATORS: dict[str, EstimatorFn] = {}


def register_estimator(
    name: str, *, overwrite: bool = False
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn(rewards, groups, *, options...)`` under ``name``.

    Example
    -------
    >>> import bestk
    >>> @bestk.register_estimator("centered")
    ... def centered(rewards, groups):
    ...     return rewards - groups.mean(rewards)[groups.index]
    """
    if not isinstance(name, str) or not name:
        raise ValueError("estimator name must be a non-empty string")

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS and not overwrite and ESTIMATORS[name] is not fn:
            raise ValueError(
                f"estimator {name!r} is already registered; pass overwrite=True to replace it"
            )
        params = list(inspect.signature(fn).parameters.values())
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(positional) != 2:
            raise ValueError(
                f"estimator {name!r} must take (rewards, groups) positionally and options as "
                "keyword-only parameters"
            )
        ESTIMATORS[name] = fn
        return fn

    return decorator


@functools.cache
def _keyword_options(fn: EstimatorFn) -> tuple[tuple[str, Any], ...]:
    return tuple(
        (p.name, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.kind == p.KEYWORD_ONLY
    )


def estimator_options(name: str) -> dict[str, Any]:
    """Option names of estimator ``name`` with their defaults (``inspect.Parameter.empty``
    for a required option)."""
    return dict(_keyword_options(_lookup(name)))


def _lookup(name: str) -> EstimatorFn:
    try:
        return ESTIMATORS[name]
    except (KeyError, TypeError):
        valid = ", ".join(sorted(ESTIMATORS))
        raise ValueError(f"unknown estimator {name!r}; valid estimators: {valid}") from None


def check_option_names(kind: str, name: str, given: Any, valid: dict[str, Any]) -> None:
    """Raise ``ValueError`` for option names of ``kind`` ``name`` (an estimator, a task...)
    that are unknown, or required (default ``inspect.Parameter.empty``) and missing.

    ``valid`` maps option names to defaults, as :func:`estimator_options` returns.
    """
    unknown = sorted(set(given) - set(valid))
    if unknown:
        listing = ", ".join(valid) if valid else "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {kind} {name!r}; "
            f"valid options: {listing}"
        )
    missing = [k for k, v in valid.items() if v is inspect.Parameter.empty and k not in given]
    if missing:
        raise ValueError(f"{kind} {name!r} requires option(s): {', '.join(missing)}")


def check_estimator_options(name: str, options: Any) -> None:
    """Validate an estimator name and its option *names* (values are checked when it runs)."""
    check_option_names("estimator", name, options, estimator_options(name))


#: Integers above this magnitude do not convert to float64 exactly.
_EXACT_INT = 2**53


def _integer_range_check(lo: float, hi: float) -> None:
    if max(abs(lo), abs(hi)) > _EXACT_INT:
        raise ValueError(
            f"integer rewards must lie within +-2**53 to convert to float64 exactly; got values "
            f"from {lo} to {hi} (pass them as floats if rounding is intended)"
        )


def _rewards_to_tensor(rewards: Any) -> tuple[torch.Tensor, torch.dtype | None]:
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


def to_output(a: torch.Tensor, dtype: torch.dtype | None, what: str = "advantages") -> Any:
    """A float64 result in the caller's type: a tensor of ``dtype`` (tensor input, ``dtype``
    not ``None``) or a float64 numpy array.

    A result the dtype cannot hold (``|a|`` beyond its largest finite value, e.g. 65504 for
    float16) is a ``ValueError`` naming the dtype and its range, never a silent ``inf``.
    """
    if dtype is None:
        return a.cpu().numpy() if a.device.type != "cpu" else a.numpy()
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


def prepare(rewards: Any, group: Any = None) -> tuple[torch.Tensor, Groups, Callable]:
    """Validate ``rewards``/``group`` as :func:`advantages` does.

    Returns the flat float64 reward tensor, its :class:`Groups`, and ``finish(a, shape=None,
    what="advantages")`` mapping a flat float64 result back to the caller's type (tensor of
    the rewards' dtype, or float64 numpy) and to ``shape`` (default: the rewards' shape),
    raising ``ValueError`` if the rewards' dtype cannot represent it.
    """
    r, dtype = _rewards_to_tensor(rewards)
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

    def finish(a: torch.Tensor, out_shape: Any = None, what: str = "advantages") -> Any:
        return to_output(a.reshape(shape if out_shape is None else out_shape), dtype, what)

    return flat, groups, finish


def advantages(name: str, rewards: Any, group: Any = None, **options: Any) -> Any:
    """Per-sample advantages of estimator ``name``.

    Parameters
    ----------
    name:
        A key of :data:`ESTIMATORS` (``"argmaxrl"``, ``"maxrl"``, ``"softmax_grpo"``,
        ``"grpo"``, ``"rloo"``, ``"reinforce"``, ``"pkpo"``, ``"kappo_grpo"``, or a user one).
    rewards:
        1-D sequence of ``B`` rewards (list, numpy array or tensor), or a 2-D ``(G, N)`` array
        of ``G`` groups of ``N`` samples.
    group:
        For 1-D rewards: length-``B`` group labels (ints or any hashable, e.g. verl uids);
        ``None`` means a single group. Must be ``None`` for 2-D rewards.
    **options:
        Estimator options (see ``docs/estimators.md``); unknown options raise ``ValueError``.

    Returns
    -------
    Advantages with the shape of ``rewards``: a tensor (same dtype and device) for tensor
    input, else a float64 numpy array. Scaled so that ``(1/N) sum_i A_i grad log pi(y_i|x)``
    is the per-group gradient estimate (the GRPO convention). Computed in float64 whatever
    the input dtype; never NaN or inf: advantages beyond the float64 range, or beyond the
    range of a narrower input dtype (float16: +-65504), raise ``ValueError`` naming it.

    Raises
    ------
    ValueError
        Unknown estimator or option, bad option value, rewards that are not a 1-D / 2-D
        array of finite numbers (a 0-d scalar included), labels that do not match, or
        rewards outside the estimator's domain.
    """
    fn = _lookup(name)
    check_estimator_options(name, options)
    flat, groups, finish = prepare(rewards, group)
    a = fn(flat, groups, **options)
    if not isinstance(a, torch.Tensor) or a.shape != flat.shape:
        raise ValueError(
            f"estimator {name!r} returned {type(a).__name__} of shape "
            f"{tuple(getattr(a, 'shape', ()))}, expected a tensor of shape {tuple(flat.shape)}"
        )
    lo, hi = torch.aminmax(a)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        if bool(torch.isnan(a).any()):  # pragma: no cover - estimator bug guard
            raise ValueError(f"estimator {name!r} produced NaN advantages")
        big = float(flat.abs().max())
        raise ValueError(
            f"estimator {name!r}: the advantages exceed the float64 range (+-1.8e308) for "
            f"rewards up to {big:.6g} in magnitude; rescale the rewards"
        )
    return finish(a)
