r"""verl plugin: bestk's @k-aware advantage estimators as verl advantage estimators.

Importing this module registers, with ``verl.trainer.ppo.core_algos.register_adv_est``:

========================  ===================================================================
``argmaxrl``              ArgMaxRL (unbiased for :math:`\nabla J_N`, default ``baseline="loo"``)
``maxrl``                 MaxRL (ArgMaxRL on 0/1 rewards; non-binary rewards are an error)
``softmax_grpo``          SoftmaxGRPO, :math:`A_i = N\,\mathrm{softmax}(r/\tau)_i - 1`
``pkpo``                  PKPO max@k / pass@k (option ``k`` is required)
``kappo_grpo``            @k-GRPO with a KAPPO reference calibration (option ``calibration``)
========================  ===================================================================

verl's own ``grpo`` / ``rloo`` / ... keep their verl implementations. Each function computes
exactly ``bestk.advantages(name, scores, group=uid, **options)`` (the formulas, their
objectives and paper equations are in the estimators' docstrings, e.g.
:func:`bestk.estimators.argmaxrl.argmaxrl`), with verl's conventions around it:

* ``scores = token_level_rewards.sum(-1)`` (outcome reward, as verl's GRPO);
* groups are the ``uid`` strings (ragged groups and non-contiguous members are fine; labels are
  factorised with ``numpy.unique`` / ``torch.unique``, no Python loop over rows);
* rows whose ``response_mask`` is all zero are verl's synthetic padding rows
  (``verl.trainer.ppo.padding_utils``): they are left out of every group and get advantage 0, so
  they can neither join a real group nor change its advantages;
* the per-sequence advantage is broadcast over the response tokens:
  ``advantages = A[:, None] * response_mask``; ``returns`` is the same tensor (outcome-only,
  as verl's GRPO / RLOO).

Loading. bestk's package metadata declares this module under the ``verl.plugins`` entry-point
group, which ``import verl`` loads automatically (``VERL_USE_EXTERNAL_PLUGINS``, default
``auto``); ``VERL_USE_EXTERNAL_MODULES=bestk.integrations.verl`` works too. Either way
``algorithm.adv_estimator=argmaxrl`` works in an unmodified verl. verl swallows a plugin's
import error (it logs it at DEBUG level): check a command line before launching with
``python -m bestk.integrations.verl algorithm.adv_estimator=argmaxrl ...`` (:func:`preflight`).

Options. Estimator options are read from ``config.bestk`` where ``config`` is the
``algorithm`` section verl passes to estimators. ``algorithm`` in verl's ``ppo_trainer.yaml``
is a struct config, so a new key needs Hydra's ``+``::

    algorithm.adv_estimator=softmax_grpo +algorithm.bestk.tau=0.1
    algorithm.adv_estimator=pkpo +algorithm.bestk.k=4
    algorithm.adv_estimator=kappo_grpo +algorithm.bestk.calibration=/path/cal.json

verl passes ``algorithm`` to estimators as the raw ``DictConfig``; nothing converts it into the
``AlgoConfig`` dataclass on that path. (If your own code does convert it with
``verl.utils.config.omega_conf_to_dataclass``, the unknown ``bestk`` key is rejected by
OmegaConf; pass the options in a plain mapping instead.) Unknown options, a missing required
option (``pkpo``'s ``k``) and invalid values raise ``ValueError`` naming them.

``kappo_grpo``: ``calibration`` is a path to a file written by ``bestk calibrate`` (loaded
once and cached per path and modification time) or a :class:`bestk.kappo.Calibration`; the
group labels (verl's ``uid``) must be the calibration's prompt ids. Stock verl sets ``uid`` to
a fresh ``uuid4`` per prompt, so with stock verl this estimator raises ``ValueError`` naming
the first uid that is not in the calibration (see ``docs/integrations.md``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

import bestk
import bestk.kappo  # noqa: F401  (registers kappo_grpo)
from bestk.integrations._common import load_calibration as _load_calibration

try:
    from verl.trainer.ppo import core_algos as _core_algos
except ImportError as e:  # pragma: no cover - exercised only without verl
    raise ImportError(
        'bestk.integrations.verl needs verl; install it with `pip install "bestk[verl]"`'
    ) from e

__all__ = [
    "VERL_ESTIMATORS",
    "options_from_config",
    "outcome_advantages",
    "register",
    "compose_verl_config",
    "preflight",
]

#: The bestk estimators registered with verl (verl keeps its own grpo / rloo).
VERL_ESTIMATORS: tuple[str, ...] = ("argmaxrl", "maxrl", "softmax_grpo", "pkpo", "kappo_grpo")


def options_from_config(config: Any) -> dict[str, Any]:
    """Estimator options from verl's ``algorithm`` config: its ``bestk`` section as a dict.

    ``config`` may be ``None``, an OmegaConf ``DictConfig``, verl's ``AlgoConfig`` or any
    mapping. A missing ``bestk`` section means no options (the estimator's defaults).
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
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if not isinstance(section, Mapping):
        raise ValueError(
            "algorithm.bestk must be a mapping of estimator options "
            f"(e.g. +algorithm.bestk.tau=0.1), got {type(section).__name__}: {section!r}"
        )
    return dict(section)


def _select_labels(index: Any, keep: torch.Tensor) -> Any:
    """``index[keep]`` for a numpy array, tensor or sequence of labels."""
    if isinstance(index, torch.Tensor):
        return index[keep.to(index.device)]
    arr = index if isinstance(index, np.ndarray) else np.asarray(index)
    if arr.ndim != 1:  # e.g. a list of tuples: keep each label whole
        arr = np.empty(len(index), dtype=object)
        arr[:] = list(index)
    return arr[keep.cpu().numpy()]


def _real_rows(response_mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows with at least one response token (not verl padding).

    Exact, but cheap in the common case: responses are right-padded, so a real row almost
    always has its first mask entry set; only the other rows are scanned in full.
    """
    real = response_mask[:, 0] != 0
    rest = ~real
    if bool(rest.any()):
        real[rest] = (response_mask[rest] != 0).any(dim=-1)
    return real


def outcome_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    options: Mapping[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl-shaped ``(advantages, returns)`` of bestk estimator ``name``.

    Parameters
    ----------
    token_level_rewards, response_mask:
        ``(bs, response_length)`` tensors, as verl passes them.
    index:
        ``(bs,)`` group labels (verl's ``uid`` strings, or ints).
    options:
        Estimator options (see :func:`bestk.estimator_options`).

    Returns
    -------
    ``(advantages, returns)``, both ``(bs, response_length)`` in the rewards' dtype:
    ``A[:, None] * response_mask`` with ``A = bestk.advantages(name, scores, group=index)``
    over the non-padding rows, and 0 on padding rows (all-zero response mask).
    """
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
            f"bestk estimator {name!r} needs the group labels: verl passes them as `index` "
            "(non_tensor_batch['uid'])"
        )
    bs = token_level_rewards.shape[0]
    n_labels = len(index)
    if n_labels != bs:
        raise ValueError(f"index has {n_labels} labels but the batch has {bs} rows")
    opts = dict(options or {})
    if name == "kappo_grpo" and "calibration" in opts:
        opts["calibration"] = _load_calibration(opts["calibration"])

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        real = _real_rows(response_mask)
        if bool(real.all()):
            adv = bestk.advantages(name, scores, group=index, **opts)
        else:
            adv = torch.zeros_like(scores)
            if bool(real.any()):
                adv[real] = bestk.advantages(
                    name, scores[real], group=_select_labels(index, real), **opts
                )
        # = adv[:, None] * response_mask; converting the mask first is ~1.7x faster on CPU
        # than letting the product promote an int64 mask (copy=True: never write into it).
        advantages = response_mask.to(dtype=adv.dtype, copy=True).mul_(adv.unsqueeze(-1))
    return advantages, advantages


def _make_verl_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return outcome_advantages(
            name, token_level_rewards, response_mask, index, options_from_config(config)
        )

    estimator.__name__ = f"compute_bestk_{name}_outcome_advantage"
    estimator.__qualname__ = estimator.__name__
    estimator.__doc__ = (
        f"verl advantage estimator ``{name}`` from bestk: see "
        "``bestk.integrations.verl.outcome_advantages``; options from ``config.bestk``.\n\n"
        + (bestk.ESTIMATORS[name].__doc__ or "")
    )
    estimator.__bestk_estimator__ = name  # type: ignore[attr-defined]
    return estimator


def register() -> list[str]:
    """Register :data:`VERL_ESTIMATORS` with verl; idempotent (re-imports are fine).

    Returns the names registered. A name already taken in verl by a non-bestk estimator is a
    ``ValueError`` (verl's own check).
    """
    registry = _core_algos.ADV_ESTIMATOR_REGISTRY
    for name in VERL_ESTIMATORS:
        if name not in bestk.ESTIMATORS:  # pragma: no cover - all ship with bestk
            raise ValueError(f"bestk has no estimator {name!r}")
        current = registry.get(name)
        if getattr(current, "__bestk_estimator__", None) == name:
            continue
        _core_algos.register_adv_est(name)(_make_verl_estimator(name))
    return list(VERL_ESTIMATORS)


register()


def compose_verl_config(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """verl's own ``ppo_trainer`` config composed with Hydra ``overrides`` (no GPU needed)."""
    import verl
    from hydra import compose, initialize_config_dir

    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def preflight(overrides: list[str] | tuple[str, ...] = ()) -> str:
    """Check a ``verl.trainer.main_ppo`` command line before launching it on GPUs.

    Composes verl's config with ``overrides`` (so misspelt keys and a missing ``+`` fail
    here), looks ``algorithm.adv_estimator`` up in verl's registry (so the plugin must have
    loaded), and for a bestk estimator validates its ``algorithm.bestk`` options by running it
    on a small batch of ``actor_rollout_ref.rollout.n``-sample groups (``kappo_grpo``: loads the
    calibration instead). Returns a one-paragraph summary; raises on any problem.
    """
    cfg = compose_verl_config(overrides)
    name = str(cfg.algorithm.adv_estimator)
    fn = _core_algos.get_adv_estimator_fn(name)
    n = int(cfg.actor_rollout_ref.rollout.n)
    lines = [
        f"algorithm.adv_estimator={name} -> {fn.__module__}.{fn.__name__}",
        f"actor_rollout_ref.rollout.n={n}",
    ]
    if getattr(fn, "__bestk_estimator__", None) is None:
        lines.append("not a bestk estimator: verl's own implementation")
        return "\n".join(lines)
    options = options_from_config(cfg.algorithm)
    lines.append(f"algorithm.bestk={options}")
    if name == "kappo_grpo":
        if "calibration" not in options:
            raise ValueError("kappo_grpo needs +algorithm.bestk.calibration=PATH")
        cal = _load_calibration(options["calibration"])
        lines.append(f"calibration: {cal!r}")
        return "\n".join(lines)
    groups = 4
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 2, (groups * n,), generator=gen).to(torch.float32)
    rewards = torch.zeros(groups * n, 3)
    rewards[:, -1] = scores
    mask = torch.ones(groups * n, 3, dtype=torch.int64)
    uid = np.repeat(np.array([f"uid-{g}" for g in range(groups)], dtype=object), n)
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid, config=cfg.algorithm)
    if not bool(torch.isfinite(adv).all()):  # pragma: no cover - bestk.advantages guards this
        raise ValueError(f"{name} produced non-finite advantages")
    lines.append(f"ran on {groups} groups of {n}: advantages finite, shape {tuple(adv.shape)}")
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(
            "usage: python -m bestk.integrations.verl [HYDRA_OVERRIDE ...]\n\n"
            + (preflight.__doc__ or "")
        )
        return 0
    try:
        print(preflight(argv))
    except Exception as e:  # report any problem on one line, exit non-zero
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":  # `python -m bestk.integrations.verl OVERRIDES...`
    raise SystemExit(_main(sys.argv[1:]))
