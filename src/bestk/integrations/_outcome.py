"""What the verl and SkyRL plug-ins share: outcome advantages in the verl-style estimator call.

verl (``verl.trainer.ppo.core_algos``) and SkyRL (``skyrl.backends.skyrl_train.utils.ppo_utils``,
adapted from verl's) call a registered advantage estimator the same way::

    fn(token_level_rewards=(bs, T), response_mask=(bs, T), index=(bs,) group labels, config=...)

and expect ``(advantages, returns)``, both ``(bs, T)``. :func:`outcome_advantages` computes that
pair from any bestk estimator: the outcome score ``token_level_rewards.sum(-1)`` of each row,
``bestk.advantages(name, scores, group=index, **options)`` over the rows that are real samples
(each framework says which rows are its padding), broadcast over the response tokens.
:func:`check_estimator` is the estimator half of both plug-ins' preflight checks. This module
imports neither framework.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bestk.estimators import (
    Options,
    advantages,
    check_estimator_options,
    estimator_info,
    resolve_options,
)
from bestk.groups import GroupLabels
from bestk.kappo.calibration import Calibration
from bestk.kappo.transform import transform_rewards

__all__ = ["check_estimator", "options_from_config", "outcome_advantages", "real_rows",
           "select_labels"]


def options_from_config(config: Any, *, key: str = "+algorithm.bestk") -> dict[str, Any]:
    """Estimator options from a framework's algorithm config: its ``bestk`` section as a dict.

    ``config`` may be ``None``, an OmegaConf ``DictConfig``, a dataclass (verl's ``AlgoConfig``,
    SkyRL's ``AlgorithmConfig``) or any mapping. A missing ``bestk`` section means no options
    (the estimator's defaults). ``key`` is how the user writes the section on the command line
    (for the error message).
    """
    if config is None:
        return {}
    if isinstance(config, Mapping) or hasattr(config, "get"):
        section = config.get("bestk", None)
    else:
        section = getattr(config, "bestk", None)
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl and SkyRL
        pass
    if not isinstance(section, Mapping):
        raise ValueError(
            f"{key.lstrip('+')} must be a mapping of estimator options "
            f"(e.g. {key}.tau=0.1), got {type(section).__name__}: {section!r}"
        )
    return dict(section)


def select_labels(index: Sequence[Hashable] | np.ndarray | torch.Tensor, keep: torch.Tensor
                  ) -> np.ndarray | torch.Tensor:
    """``index[keep]`` for a numpy array, tensor or sequence of labels."""
    if isinstance(index, torch.Tensor):
        return index[keep.to(index.device)]
    arr = index if isinstance(index, np.ndarray) else np.asarray(index)
    if arr.ndim != 1:  # e.g. a list of tuples: keep each label whole
        arr = np.empty(len(index), dtype=object)
        arr[:] = list(index)
    return arr[keep.cpu().numpy()]


def real_rows(response_mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows with at least one response token (not verl padding).

    Exact, but cheap in the common case: responses are right-padded, so a real row almost
    always has its first mask entry set; only the other rows are scanned in full.
    """
    real = response_mask[:, 0] != 0
    rest = ~real
    if bool(rest.any()):
        real[rest] = (response_mask[rest] != 0).any(dim=-1)
    return real


def _check_batch(name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                 index: GroupLabels) -> None:
    """The framework's batch is what :func:`outcome_advantages` takes: 2-D rewards, a mask
    of their shape and one group label per row (one-line ``ValueError`` naming the field)."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.ndim != 2:
        raise ValueError(
            "token_level_rewards must be a 2-D (bs, response_length) tensor, got "
            f"{getattr(token_level_rewards, 'shape', type(token_level_rewards).__name__)}"
        )
    if not isinstance(response_mask, torch.Tensor) or tuple(response_mask.shape) != tuple(
        token_level_rewards.shape
    ):
        raise ValueError(
            "response_mask must be a tensor with the shape of token_level_rewards "
            f"{tuple(token_level_rewards.shape)}, got "
            f"{getattr(response_mask, 'shape', type(response_mask).__name__)}"
        )
    if index is None:
        raise ValueError(
            f"bestk estimator {name!r} needs the group labels: the framework passes them as "
            "`index` (verl: non_tensor_batch['uid']; SkyRL: metadata['uids'])"
        )
    bs, n_labels = token_level_rewards.shape[0], len(index)
    if n_labels != bs:
        raise ValueError(f"index has {n_labels} labels but the batch has {bs} rows")


def outcome_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupLabels,
    options: Options | None = None,
    *,
    real: torch.Tensor | None = None,
    calibration: Calibration | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl-shaped ``(advantages, returns)`` of bestk estimator ``name``.

    Parameters
    ----------
    token_level_rewards, response_mask:
        ``(bs, response_length)`` tensors, as verl and SkyRL pass them.
    index:
        ``(bs,)`` group labels (verl's ``uid`` strings, SkyRL's ``uids``, or ints).
    options:
        Estimator options (see :func:`bestk.estimator_options`).
    real:
        ``(bs,)`` bool, the rows that are real samples; the others are the framework's padding
        rows, left out of every group. Default: :func:`real_rows` of ``response_mask`` (verl's
        padding rows have an all-zero mask).
    calibration:
        A KAPPO calibration keyed by the group labels: the scores are replaced by KAPPO's
        prompt-adaptive reward (:func:`bestk.kappo.transform_rewards`, a_k(x) R or T_j) before
        the estimator sees them. ``None``: the scores as they are.

    Returns
    -------
    ``(advantages, returns)``, both ``(bs, response_length)`` in the rewards' dtype:
    ``A[:, None] * response_mask`` with ``A = bestk.advantages(name, scores, group=index)``
    over the real rows, and 0 on padding rows.
    """
    _check_batch(name, token_level_rewards, response_mask, index)
    assert index is not None  # refused above
    bs = token_level_rewards.shape[0]
    opts = resolve_options(name, options or {})  # path-valued options loaded (cached)

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        if real is None:
            real = real_rows(response_mask)
        elif tuple(real.shape) != (bs,) or real.dtype != torch.bool:
            raise ValueError(f"real must be a ({bs},) bool tensor, got {real.dtype} "
                             f"{tuple(real.shape)}")
        every = bool(real.all())
        labels = index if every else select_labels(index, real)
        kept = scores if every else scores[real]
        if calibration is not None and kept.numel():
            kept = transform_rewards(calibration, labels, kept)
        if every:
            adv = advantages(name, kept, group=labels, **opts)
        else:
            adv = torch.zeros_like(scores)
            if kept.numel():
                adv[real] = advantages(name, kept, group=labels, **opts)
        # = adv[:, None] * response_mask; converting the mask first is ~1.7x faster on CPU
        # than letting the product promote an int64 mask (copy=True: never write into it).
        token_adv = response_mask.to(dtype=adv.dtype, copy=True).mul_(adv.unsqueeze(-1))
    return token_adv, token_adv


def check_estimator(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], name: str,
                    options: Options, n: int, config: Any, *, key: str) -> list[str]:
    """The estimator half of a preflight check: run registered estimator ``fn`` (bestk's
    ``name``) as the framework will, with ``config``, on 4 toy groups of ``n`` 0/1 rewards.

    An estimator that ``needs_prompt_ids`` cannot run on made-up labels: its required options
    are checked (``key`` is how the user writes the options section, for the message), its
    option names checked and its path-valued options loaded instead. Returns lines for the
    summary; raises ``ValueError`` on a problem.
    """
    info = estimator_info(name)
    if info.needs_prompt_ids:
        missing = [o for o, d in info.options.items()
                   if d is inspect.Parameter.empty and o not in options]
        if missing:
            raise ValueError(f"{name} needs " + " ".join(
                f"{key}.{o}={'PATH' if o in info.path_options else 'VALUE'}" for o in missing))
        check_estimator_options(name, options)
        loaded = resolve_options(name, options)
        lines = [f"{o}: {loaded[o]!r}" for o in info.path_options if o in loaded]
        return lines + ["its groups must be prompt ids (uid): not run on made-up uids"]
    groups = 4
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 2, (groups * n,), generator=gen).to(torch.float32)
    rewards = torch.zeros(groups * n, 3)
    rewards[:, -1] = scores
    mask = torch.ones(groups * n, 3, dtype=torch.int64)
    uid = np.repeat(np.array([f"uid-{g}" for g in range(groups)], dtype=object), n)
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid, config=config)
    if not bool(torch.isfinite(adv).all()):  # pragma: no cover - bestk.advantages guards this
        raise ValueError(f"{name} produced non-finite advantages")
    return [f"ran on {groups} groups of {n}: advantages finite, shape {tuple(adv.shape)}"]


def preflight_cli(argv: list[str], usage: str, preflight: Callable[[list[str]], str]) -> int:
    """A plug-in's ``python -m`` command: ``usage`` and ``preflight``'s docstring for ``-h``;
    otherwise ``preflight(argv)``'s report and ``OK`` (exit 0), or any problem on one line
    (exit 1)."""
    if argv and argv[0] in ("-h", "--help"):
        print(usage + "\n\n" + (preflight.__doc__ or ""))
        return 0
    try:
        print(preflight(argv))
    except Exception as e:  # report any problem on one line, exit non-zero
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("OK")
    return 0
