r"""TRL integration: ``BestkGRPOTrainer``, a ``trl.GRPOTrainer`` trained on bestk advantages.

.. code-block:: python

    from bestk.integrations.trl import BestkGRPOTrainer

    trainer = BestkGRPOTrainer(
        model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...,
        estimator="argmaxrl",                 # any bestk estimator name
        estimator_options={"baseline": "loo"},
    )
    trainer.train()

Everything else is TRL's: generation, reward functions, the clipped surrogate, KL, logging,
multi-process training. Only the advantages change. TRL has no hook smaller than
``_generate_and_score_completions`` (it computes the group-normalised advantages inline), so
the subclass

1. records the reward matrix TRL computes in ``_calculate_rewards`` -- ``(B, n_funcs)``, already
   gathered over all processes, ``NaN`` where a reward function returned ``None``;
2. lets TRL's ``_generate_and_score_completions`` run unchanged;
3. replaces ``output["advantages"]`` with this process's slice of :func:`bestk_advantages`,
   computed on the *gathered* rewards (groups of ``num_generations`` consecutive completions of
   one prompt, as TRL lays them out), and rewrites the advantage log column to match.

:func:`bestk_advantages` is TRL's reward aggregation followed by a bestk estimator:
``rewards = nansum_j(w_j * rewards_per_func[:, j])`` (TRL's ``sum_then_normalize``, where a
``None`` from one reward function contributes 0) and
``A = bestk.advantages(estimator, rewards.view(-1, num_generations), **estimator_options)``.
A completion for which *every* reward function returned ``None`` is unscorable: like TRL, it
is left out of its group's estimate (the group becomes smaller) and gets advantage 0.
With ``prompt_id_column="..."`` the groups are labelled by that dataset column (gathered
across processes like the rewards) instead of by position; ``kappo_grpo`` needs this, since
its calibration is keyed by prompt id::

    BestkGRPOTrainer(..., estimator="kappo_grpo", prompt_id_column="prompt_id",
                     estimator_options={"calibration": "cal.json"})  # from `bestk calibrate`

What each estimator is an unbiased gradient of (or that it is not) is in its docstring, e.g.
:func:`bestk.estimators.argmaxrl.argmaxrl`; the advantages use the GRPO scale, so TRL's loss
(``loss_type``, clipping, ``beta``) applies unchanged. TRL's ``scale_rewards`` only affects
TRL's own standardisation and is ignored (the estimator defines the scale);
``multi_objective_aggregation="normalize_then_sum"`` would change the rewards the @k
objective is defined on, so it is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

import bestk
import bestk.kappo  # noqa: F401  (registers kappo_grpo)
from bestk.estimators import check_estimator_options
from bestk.integrations._common import load_calibration

try:
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - exercised only without trl
    raise ImportError(
        'bestk.integrations.trl needs TRL; install it with `pip install "bestk[trl]"`'
    ) from e

__all__ = ["BestkGRPOTrainer", "bestk_advantages", "check_estimator"]


def check_estimator(estimator: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate an estimator name and its option names up front; returns the options dict.

    Values are validated by the estimator itself on the first batch.
    """
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(
            f"estimator_options must be a mapping of option names to values, got "
            f"{type(options).__name__}"
        )
    opts = dict(options or {})
    check_estimator_options(estimator, opts)  # also a ValueError for an unknown estimator
    return opts


def bestk_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    estimator: str,
    estimator_options: Mapping[str, Any] | None = None,
    prompt_ids: Sequence[Any] | None = None,
) -> torch.Tensor:
    """Advantages of ``estimator`` for TRL's gathered ``(B, n_funcs)`` reward matrix.

    ``B`` must be a multiple of ``num_generations``; rows ``g*N .. g*N+N-1`` are the ``N``
    completions of prompt ``g``. ``prompt_ids`` (length ``B``, constant within each of those
    blocks) labels the groups instead of the block number: rows of the same prompt then form
    one group even when the prompt was drawn twice, and ``kappo_grpo`` finds the prompt in its
    calibration. Returns a ``(B,)`` float32 tensor on the rewards' device.
    """
    if rewards_per_func.ndim != 2:
        raise ValueError(
            f"rewards_per_func must be (B, n_funcs), got shape {tuple(rewards_per_func.shape)}"
        )
    b, n_funcs = rewards_per_func.shape
    if reward_weights.shape != (n_funcs,):
        raise ValueError(
            f"reward_weights must have one weight per reward function ({n_funcs}), got shape "
            f"{tuple(reward_weights.shape)}"
        )
    if isinstance(num_generations, bool) or not isinstance(num_generations, int):
        raise ValueError(f"num_generations must be an int, got {num_generations!r}")
    if num_generations < 1 or b % num_generations:
        raise ValueError(
            f"{b} completions are not whole groups of num_generations={num_generations}"
        )
    opts = dict(estimator_options or {})
    if "calibration" in opts:
        opts["calibration"] = load_calibration(opts["calibration"])
    labels = None
    if prompt_ids is not None:
        labels = np.empty(len(prompt_ids), dtype=object)
        labels[:] = list(prompt_ids)
        if labels.shape[0] != b:
            raise ValueError(f"prompt_ids has {labels.shape[0]} labels but there are {b} rows")
        blocks = labels.reshape(-1, num_generations)
        same = blocks == blocks[:, :1]
        if not bool(np.all(same)):
            g, j = np.argwhere(~same)[0]
            raise ValueError(
                f"prompt id {blocks[g, j]!r} at row {g * num_generations + j} differs from "
                f"{blocks[g, 0]!r}, the id of its group's first row (TRL puts the "
                f"num_generations={num_generations} completions of a prompt together)"
            )
    w = reward_weights.to(device=rewards_per_func.device, dtype=rewards_per_func.dtype)
    rewards = (rewards_per_func * w.unsqueeze(0)).nansum(dim=1)
    scorable = ~torch.isnan(rewards_per_func).all(dim=1)
    if bool(scorable.all()) and labels is None:
        adv = bestk.advantages(estimator, rewards.view(-1, num_generations), **opts).reshape(-1)
    elif bool(scorable.all()):
        adv = bestk.advantages(estimator, rewards, group=labels, **opts)
    else:
        adv = torch.zeros_like(rewards)
        if bool(scorable.any()):
            if labels is None:
                group = (torch.arange(b, device=rewards.device) // num_generations)[scorable]
            else:
                group = labels[scorable.cpu().numpy()]
            adv[scorable] = bestk.advantages(estimator, rewards[scorable], group=group, **opts)
    return adv.to(torch.float32)


class BestkGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages are ``bestk.advantages(estimator, ...)``.

    Parameters
    ----------
    *args, **kwargs:
        Everything ``GRPOTrainer`` takes (``model``, ``reward_funcs``, ``args``,
        ``train_dataset``, ``processing_class``, ...).
    estimator:
        A bestk estimator name (``bestk estimators`` lists them): ``"argmaxrl"`` (default),
        ``"maxrl"``, ``"softmax_grpo"``, ``"pkpo"``, ``"grpo"``, ``"rloo"``, ...
    estimator_options:
        Its options, e.g. ``{"tau": 0.1}`` for ``softmax_grpo`` or ``{"k": 4}`` for ``pkpo``;
        ``kappo_grpo``'s ``calibration`` may be a path to a ``bestk calibrate`` file. Unknown
        names and missing required options raise ``ValueError`` at construction.
    prompt_id_column:
        A dataset column holding a prompt id (gathered across processes with the rewards).
        Groups are then labelled by it (see :func:`bestk_advantages`). Required by
        ``kappo_grpo``, whose calibration is keyed by these ids.

    Attributes
    ----------
    last_rewards, last_advantages:
        The gathered rewards (after weighting and ``nansum``, NaN for unscorable completions) and
        the gathered advantages of the latest generation batch (for inspection and tests).
    """

    def __init__(
        self,
        *args: Any,
        estimator: str = "argmaxrl",
        estimator_options: Mapping[str, Any] | None = None,
        prompt_id_column: str | None = None,
        **kwargs: Any,
    ):
        self.estimator_options = check_estimator(estimator, estimator_options)
        self.estimator = estimator
        if estimator == "kappo_grpo" and prompt_id_column is None:
            raise ValueError(
                "kappo_grpo needs prompt_id_column: the dataset column with the prompt ids of "
                "its calibration bank"
            )
        if "calibration" in self.estimator_options:
            self.estimator_options["calibration"] = load_calibration(
                self.estimator_options["calibration"]
            )
        self.prompt_id_column = prompt_id_column
        self._bestk_rewards_per_func: torch.Tensor | None = None
        self.last_rewards: torch.Tensor | None = None
        self.last_advantages: torch.Tensor | None = None
        super().__init__(*args, **kwargs)
        aggregation = getattr(self, "multi_objective_aggregation", "sum_then_normalize")
        if aggregation != "sum_then_normalize":
            raise ValueError(
                f"BestkGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' (the "
                f"@k objective is defined on the weighted sum of rewards), got {aggregation!r}"
            )

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._bestk_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        prompt_ids = None
        if self.prompt_id_column is not None:
            col = self.prompt_id_column
            missing = [i for i, x in enumerate(inputs) if col not in x]
            if missing:
                raise ValueError(
                    f"prompt_id_column {col!r} is missing from dataset row {missing[0]} of this "
                    "batch"
                )
            from accelerate.utils import gather_object

            prompt_ids = gather_object([x[col] for x in inputs])
        self._bestk_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._bestk_rewards_per_func
        self._bestk_rewards_per_func = None
        if rewards_per_func is None:  # pragma: no cover - guards against a TRL refactor
            raise RuntimeError(
                "TRL's GRPOTrainer no longer computes rewards through _calculate_rewards; this "
                "TRL version is not supported by bestk.integrations.trl"
            )
        adv_all = bestk_advantages(
            rewards_per_func,
            self.reward_weights,
            int(num_generations),
            self.estimator,
            self.estimator_options,
            prompt_ids,
        )
        local = output["advantages"]
        n_local = local.shape[0]
        start = self.accelerator.process_index * n_local
        if start + n_local > adv_all.shape[0]:  # pragma: no cover - TRL layout changed
            raise RuntimeError(
                f"gathered batch of {adv_all.shape[0]} rewards does not cover process "
                f"{self.accelerator.process_index}'s {n_local} completions"
            )
        output["advantages"] = adv_all[start : start + n_local].to(
            device=local.device, dtype=local.dtype
        )
        w = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * w.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        self.last_rewards = rewards.detach().cpu()
        self.last_advantages = adv_all.detach().cpu()
        self._relog_advantages(adv_all)
        return output

    def _relog_advantages(self, adv_all: torch.Tensor) -> None:
        """Replace the advantages TRL just logged (its own) with the ones used."""
        logs = getattr(self, "_logs", None)
        column = logs.get("advantages") if isinstance(logs, dict) else None
        if column is None:  # pragma: no cover - TRL without completion logs
            return
        kept = list(column)[: len(column) - min(adv_all.shape[0], len(column))]
        column.clear()
        column.extend(kept)
        column.extend(adv_all.tolist())
