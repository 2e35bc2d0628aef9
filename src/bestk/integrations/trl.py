r"""TRL integration: ``BestkGRPOTrainer`` (bestk advantages), ``BestkDPOTrainer`` (@k-DPO) and
``KappoReward`` (reward-side KAPPO for TRL's own trainers).

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
(``loss_type``, clipping, ``beta``) applies unchanged.

TRL options that change advantages (:func:`check_trl_args`, checked when the trainer is built,
before any model is loaded):

* ``reward_weights``: honoured (the weighted ``nansum`` above);
* ``multi_objective_aggregation``: ``"sum_then_normalize"`` honoured; ``"normalize_then_sum"``
  refused (it standardises each reward function before summing, which changes the reward the
  @k objective is defined on);
* ``scale_rewards`` with ``estimator="grpo"``: honoured as TRL does it -- ``"group"`` divides by
  the group std, ``"none"`` only centres (Dr.GRPO), ``"batch"`` centres per group and divides by
  the std of all the batch's rewards (PPO-Lite), with TRL's epsilon 1e-4 (unless
  ``estimator_options`` sets ``eps``); so ``estimator="grpo"`` gives TRL's own advantages. The
  same holds for every estimator with GRPO's ``scale`` and ``eps`` options
  (:func:`follows_scale_rewards`): ``loo_max`` is std-scaled under ``"group"`` (TRL's default;
  verl's ``grpo_passk`` default), the paper's unbiased leave-one-out max under ``"none"``. With
  any other estimator the estimator defines the scale: ``"group"`` and ``"none"`` add nothing on
  top, ``"batch"`` is refused;
* ``num_generations`` / ``num_generations_eval``: the group size, honoured.

Everything else in ``GRPOConfig`` acts on the loss or on generation, not on the advantages
(``loss_type``, ``epsilon``/``delta``, ``beta``, ``importance_sampling_level``,
``top_entropy_quantile``, ``off_policy_mask_threshold``, ``mask_truncated_completions``, vLLM
importance-sampling correction, ...) and applies unchanged.

Reward-side KAPPO with TRL's own ``GRPOTrainer``: :class:`KappoReward` wraps a reward function
so that it returns KAPPO's prompt-adaptive reward (:func:`bestk.kappo.transform_rewards`), the
prompt id read from a dataset column.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bestk._optional import require
from bestk.estimators import (
    Options,
    advantages,
    check_estimator_options,
    estimator_info,
    estimator_options,
    resolve_options,
)
from bestk.kappo.calibration import Calibration, load_calibration
from bestk.kappo.transform import transform_rewards
from bestk.tasks.guard import user_code
from bestk.tasks.rewards import reward_number

_trl = require("trl", extra="trl", who="bestk.integrations.trl")
# Loaded through `require` (a one-line error naming the extra when TRL is missing), so
# unchecked base classes for mypy: TRL's own signatures are not re-checked here.
DPOTrainer: Any = _trl.DPOTrainer
GRPOTrainer: Any = _trl.GRPOTrainer

__all__ = [
    "BestkDPOTrainer",
    "BestkGRPOTrainer",
    "KappoReward",
    "bestk_advantages",
    "check_dpo_args",
    "check_estimator",
    "check_trl_args",
]

#: TRL's epsilon in ``(r - mean) / (std + 1e-4)`` (``GRPOTrainer._generate_and_score_completions``).
TRL_STD_EPS = 1e-4


def check_estimator(estimator: str, options: Options | None) -> dict[str, Any]:
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


def follows_scale_rewards(estimator: str) -> bool:
    """Whether TRL's ``scale_rewards`` (and its epsilon) map onto the estimator's options: an
    estimator with GRPO's ``scale`` (``"std"`` / ``"none"``) and ``eps`` options -- bestk's
    ``grpo``, TRL's own group normalisation, and ``loo_max`` -- read off its registered
    options."""
    return {"scale", "eps"} <= set(estimator_options(estimator))


def check_trl_args(
    args: Any, estimator: str, options: dict[str, Any]
) -> tuple[dict[str, Any], float | None]:
    """Honour or refuse the ``GRPOConfig`` options that change advantages (one-line errors).

    Returns ``(options, batch_std_eps)``: the estimator options with what ``scale_rewards``
    implies for ``estimator="grpo"`` (:func:`follows_scale_rewards`) filled in, and the
    epsilon of ``scale_rewards="batch"``
    (``None`` unless batch scaling applies). ``args`` may be ``None`` (TRL's defaults).
    """
    aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
    if aggregation != "sum_then_normalize":
        raise ValueError(
            f"BestkGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' (the "
            f"@k objective is defined on the weighted sum of rewards), got {aggregation!r}"
        )
    scale: Any = getattr(args, "scale_rewards", "group")  # a str (a bool in older TRL)
    scale = {True: "group", False: "none"}.get(scale, scale)
    if scale not in ("group", "none", "batch"):
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale!r}")
    opts = dict(options)
    if not follows_scale_rewards(estimator):
        if scale == "batch":
            raise ValueError(
                f"scale_rewards='batch' is TRL's GRPO normalisation and applies only to "
                f"estimator='grpo' (an estimator with GRPO's scale and eps options); "
                f"{estimator!r} defines its own advantage scale (leave scale_rewards at 'group' "
                "or set 'none')"
            )
        return opts, None
    implied = "std" if scale == "group" else "none"
    if opts.get("scale", implied) != implied:
        raise ValueError(
            f"estimator_options scale={opts['scale']!r} contradicts GRPOConfig "
            f"scale_rewards={scale!r}; set TRL's scale_rewards instead"
        )
    opts["scale"] = implied
    if scale == "batch":
        return opts, float(opts.pop("eps", TRL_STD_EPS))
    opts.setdefault("eps", TRL_STD_EPS)
    return opts, None


def bestk_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    estimator: str,
    estimator_options: Options | None = None,
    prompt_ids: Sequence[Hashable] | None = None,
    batch_std_eps: float | None = None,
) -> torch.Tensor:
    """Advantages of ``estimator`` for TRL's gathered ``(B, n_funcs)`` reward matrix.

    ``B`` must be a multiple of ``num_generations``; rows ``g*N .. g*N+N-1`` are the ``N``
    completions of prompt ``g``. ``prompt_ids`` (length ``B``, constant within each of those
    blocks) labels the groups instead of the block number: rows of the same prompt then form
    one group even when the prompt was drawn twice, and ``kappo_grpo`` finds the prompt in its
    calibration. ``batch_std_eps`` (TRL's ``scale_rewards="batch"``): divide the advantages by
    ``std + batch_std_eps``, the std (with Bessel's correction) of all scorable rewards of the
    batch; with fewer than 2 scorable rewards the advantages are 0 (TRL's NaN, zeroed). Returns
    a ``(B,)`` float32 tensor on the rewards' device.
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
    opts = resolve_options(estimator, estimator_options or {})  # path-valued options loaded
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
        adv = advantages(estimator, rewards.view(-1, num_generations), **opts).reshape(-1)
    elif bool(scorable.all()):
        adv = advantages(estimator, rewards, group=labels, **opts)
    else:
        adv = torch.zeros_like(rewards)
        if bool(scorable.any()):
            if labels is None:
                group = (torch.arange(b, device=rewards.device) // num_generations)[scorable]
            else:
                group = labels[scorable.cpu().numpy()]
            adv[scorable] = advantages(estimator, rewards[scorable], group=group, **opts)
    if batch_std_eps is not None:
        if not (isinstance(batch_std_eps, (int, float)) and batch_std_eps >= 0):
            raise ValueError(f"batch_std_eps must be a number >= 0, got {batch_std_eps!r}")
        kept = rewards[scorable]
        if kept.numel() < 2:
            return torch.zeros_like(adv, dtype=torch.float32)
        adv = adv / (kept.std(correction=1) + batch_std_eps)
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

    ``GRPOConfig`` options that change advantages are honoured or refused up front, before any
    model is loaded (:func:`check_trl_args`; list in the module docstring).

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
        if estimator_info(estimator).needs_prompt_ids and prompt_id_column is None:
            raise ValueError(
                f"{estimator} needs prompt_id_column: the dataset column with the prompt ids "
                "its groups are labelled by (for kappo_grpo: those of its calibration bank)"
            )
        self.estimator_options = resolve_options(estimator, self.estimator_options)
        grpo_args = kwargs.get("args", args[2] if len(args) > 2 else None)
        self.estimator_options, self.batch_std_eps = check_trl_args(
            grpo_args, estimator, self.estimator_options
        )
        self.prompt_id_column = prompt_id_column
        self._bestk_rewards_per_func: torch.Tensor | None = None
        self.last_rewards: torch.Tensor | None = None
        self.last_advantages: torch.Tensor | None = None
        super().__init__(*args, **kwargs)

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
            self.batch_std_eps,
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


class KappoReward:
    r"""A TRL reward function returning KAPPO's prompt-adaptive reward of a base reward function.

    Reward-side KAPPO (Cors. 4.4 / 4.6) for TRL's stock ``GRPOTrainer`` (or any trainer that
    calls reward functions TRL's way)::

        from bestk.integrations.trl import KappoReward

        reward = KappoReward(my_reward, "cal.json", prompt_id_column="prompt_id")
        n = 8                                                  # num_generations
        GRPOTrainer(..., reward_funcs=[reward],
                    args=GRPOConfig(..., num_generations=n, scale_rewards="none",
                                    beta=cal.beta * (n - 1) / n))

    TRL passes every dataset column to reward functions as a keyword argument (one value per
    completion); this reads the prompt ids from ``prompt_id_column``, calls ``base`` with
    everything TRL passed, and returns :func:`bestk.kappo.transform_rewards` of its values:
    :math:`\hat a_k(x)R` (binary calibration; 0/1 rewards) or :math:`T_j` (win-rate). ``None``
    (TRL's "not applicable") stays ``None``. TRL logs the returned (transformed) values as
    ``rewards/kappo_<name>/mean``; the mean of ``base``'s raw rewards goes next to it as
    ``rewards/kappo_<name>/raw_mean`` (through TRL's ``log_metric``), as the verl reward keeps
    ``raw_score``.

    With a binary calibration use ``scale_rewards="none"``: TRL's default ``"group"`` divides
    each group by its std and so cancels the per-prompt multiplier (KAPPO Eq. 139). Centring
    with the group mean (the mean includes the sample itself) makes the expected update
    :math:`\frac{n-1}{n}\nabla E_\pi[\tilde R]`, so with TRL's KL coefficient ``beta`` the
    optimum is KAPPO's @k optimum for :math:`\beta = \frac{n}{n-1}\beta_{TRL}` (with an exact
    KL gradient; TRL's per-token KL term estimates it): to target the calibration's β set
    ``beta`` to :math:`\frac{n-1}{n}\beta` (``bestk lab kappo`` checks this fixed point on exact
    bandits). Win-rate calibrations also work with TRL's std scaling
    (Eq. 15, the paper's win-rate @k-GRPO).

    Parameters
    ----------
    base:
        A TRL reward function ``f(prompts, completions, completion_ids, **kwargs) -> list``.
    calibration:
        A :class:`bestk.kappo.Calibration` or the path of a ``bestk calibrate`` file.
    prompt_id_column:
        The dataset column with the calibration's prompt ids (default ``"prompt_id"``).
    """

    def __init__(self, base: Callable[..., Sequence[float | None]],
                 calibration: Calibration | str | os.PathLike[str],
                 prompt_id_column: str = "prompt_id"):
        if not callable(base) or isinstance(base, (torch.nn.Module, str)):
            raise ValueError(
                "base must be a reward function f(prompts, completions, **kwargs) -> list "
                f"(reward models are not supported), got {type(base).__name__}"
            )
        from trl.trainer.utils import get_callable_name, is_async_callable

        if is_async_callable(base):
            raise ValueError("base is an async reward function; KappoReward wraps synchronous ones")
        if not isinstance(prompt_id_column, str) or not prompt_id_column:
            raise ValueError(f"prompt_id_column must be a column name, got {prompt_id_column!r}")
        self.base = base
        self.calibration = load_calibration(calibration)
        self.prompt_id_column = prompt_id_column
        self.__name__ = f"kappo_{get_callable_name(base)}"

    def __repr__(self) -> str:
        return (
            f"KappoReward({self.__name__[6:]}, {self.calibration!r}, "
            f"prompt_id_column={self.prompt_id_column!r})"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        col = self.prompt_id_column
        if col not in kwargs:
            raise ValueError(
                f"the dataset has no column {col!r} (KappoReward's prompt_id_column); TRL passes "
                f"dataset columns to reward functions, got {sorted(kwargs)}"
            )
        ids = list(kwargs[col])
        name = self.__name__[6:]
        with user_code(f"reward function {name!r}"):  # SystemExit too: one line, a ValueError
            raw = list(self.base(*args, **kwargs))
        if len(raw) != len(ids):
            raise ValueError(f"{name} returned {len(raw)} rewards for {len(ids)} completions")
        keep = [i for i, v in enumerate(raw) if v is not None]
        out: list[float | None] = [None] * len(raw)
        if keep:
            values = np.empty(len(keep), dtype=np.float64)
            for j, i in enumerate(keep):
                try:  # bfloat16 tensors too; text such as "0.5" is refused, not parsed
                    values[j] = reward_number(raw[i])
                except TypeError as e:
                    raise ValueError(f"reward function {name!r} returned {raw[i]!r} for "
                                     f"completion {i}: {e}") from None
            log_metric = kwargs.get("log_metric")
            if callable(log_metric):  # TRL logs only what we return: the raw reward too
                log_metric(f"rewards/{self.__name__}/raw_mean", float(values.mean()))
            sel = np.empty(len(keep), dtype=object)
            sel[:] = [ids[i] for i in keep]
            for i, v in zip(keep, transform_rewards(self.calibration, sel, values), strict=True):
                out[i] = float(v)
        return out


# ---------------------------------------------------------------------------------------------
# @k-DPO: TRL's DPOTrainer with a per-prompt beta_eff(x)

#: The batch key that carries each pair's beta_eff from the collator to the loss.
BETA_EFF_KEY = "bestk_beta_eff"
#: TRL loss types whose optimum @k-DPO's beta_eff rescales as KAPPO derives it (Eq. 13); "sft"
#: (the NLL term of RPO-style mixtures) does not use beta at all.
DPO_LOSS_TYPES = ("sigmoid", "sft")


class _BetaEffCollator:
    """Wraps TRL's preference collator: adds ``beta_eff(x)`` of each pair's prompt id."""

    def __init__(self, base: Callable[[list[dict[str, Any]]], dict[str, Any]],
                 calibration: Calibration, column: str):
        self.base = base
        self.calibration = calibration
        self.column = column

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        missing = [i for i, x in enumerate(examples) if self.column not in x]
        if missing:
            raise ValueError(
                f"prompt_id_column {self.column!r} is missing from example {missing[0]} of this "
                "batch (keep it in the dataset)"
            )
        out = self.base(examples)
        ids = np.empty(len(examples), dtype=object)
        ids[:] = [x[self.column] for x in examples]
        out[BETA_EFF_KEY] = torch.tensor(
            self.calibration.get("dpo_beta_eff", ids), dtype=torch.float32
        )
        return out


def _dataset_ids(dataset: Any, column: str, name: str) -> Sequence[Hashable] | None:
    """All prompt ids of a map-style dataset (``None`` for iterable ones: checked per batch)."""
    names = getattr(dataset, "column_names", None)
    if names is None or not hasattr(dataset, "__len__"):
        return None
    if column not in names:
        raise ValueError(
            f"{name} has no column {column!r} (prompt_id_column: the calibration's prompt ids); "
            f"columns: {', '.join(names)}"
        )
    return dataset[column]


def check_dpo_args(args: Any, calibration: Calibration) -> None:
    """Refuse ``DPOConfig`` settings @k-DPO does not define, in one line each.

    @k-DPO (KAPPO Eq. 13) is the DPO logistic loss with :math:`\\beta_{eff}(x)` in place of
    :math:`\\beta`: ``loss_type`` must be ``"sigmoid"`` (optionally with ``"sft"``),
    ``f_divergence_type`` ``"reverse_kl"`` (the KL of the objective), ``beta`` the
    calibration's β (the β the pass@k objective was calibrated for), and the reference fixed
    (``sync_ref_model=False``: the calibration describes the initial reference).
    """
    loss_types = list(getattr(args, "loss_type", ["sigmoid"]) or ["sigmoid"])
    if isinstance(getattr(args, "loss_type", None), str):
        loss_types = [args.loss_type]
    bad = [t for t in loss_types if t not in DPO_LOSS_TYPES]
    if bad or "sigmoid" not in loss_types:
        raise ValueError(
            f"BestkDPOTrainer trains @k-DPO, the sigmoid DPO loss with beta_eff(x) (KAPPO Eq. 13): "
            f"loss_type must be ['sigmoid'] (optionally with 'sft'), got {loss_types}"
        )
    div = getattr(args, "f_divergence_type", "reverse_kl")
    if str(getattr(div, "value", div)) != "reverse_kl":
        raise ValueError(
            f"BestkDPOTrainer needs f_divergence_type='reverse_kl' (the KL of the pass@k "
            f"objective), got {div!r}"
        )
    beta = float(getattr(args, "beta", 0.1))
    if not math.isclose(beta, calibration.beta, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(
            f"DPOConfig beta={beta} differs from the calibration's beta={calibration.beta}: "
            "@k-DPO's beta_eff(x) is calibrated for that beta; set beta to it"
        )
    if getattr(args, "sync_ref_model", False):
        raise ValueError(
            "BestkDPOTrainer needs sync_ref_model=False: the calibration describes the fixed "
            "reference policy"
        )


class BestkDPOTrainer(DPOTrainer):
    r"""``trl.DPOTrainer`` training @k-DPO: per-prompt :math:`\beta_{eff}(x)` from a calibration.

    The loss is TRL's sigmoid DPO loss with each pair's :math:`\beta` replaced by the
    calibration's @k-DPO coefficient of its prompt (KAPPO Eq. 13 with Eq. 149):

    .. math:: -\log\sigma\big(\hat\beta_{eff}(x)\,[\log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)}
              - \log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}]\big),\qquad
              \hat\beta_{eff}(x) = \min\{\beta / a_k(N/(M+0.5)),\, 2\}.

    Its Bradley-Terry optimum is the single-reward optimum at strength :math:`\beta_{eff}(x)`,
    i.e. the pass@k optimum (Cor. 4.3). With a k = 1 calibration :math:`\hat\beta_{eff} = \beta`
    for every prompt, and the trainer is TRL's DPO exactly (tested step by step). TRL's reward
    metrics (``rewards/chosen`` ...) use :math:`\beta_{eff}(x)` too.

    Parameters
    ----------
    *args, **kwargs:
        Everything ``DPOTrainer`` takes. ``args.beta`` must be the calibration's β.
    calibration:
        A binary :class:`bestk.kappo.Calibration` or the path of a ``bestk calibrate --kind
        binary`` file (its ``dpo_beta_eff`` values: α = 0.5, cap 2).
    prompt_id_column:
        The dataset column with the calibration's prompt ids (default ``"prompt_id"``). Every
        id of a map-style train / eval dataset is checked before any model is loaded.

    Refused at construction, before any model is loaded (:func:`check_dpo_args`): a win-rate
    calibration, loss types other than ``sigmoid`` (+ ``sft``), f-divergences other than
    reverse KL, a ``beta`` other than the calibration's, ``sync_ref_model=True``.

    Implementation: the collator adds each pair's :math:`\beta_{eff}` to the batch, and the loss
    runs TRL's own ``_compute_loss`` with ``self.beta`` set to that ``(B,)`` tensor for the call,
    so every TRL option that does not touch β (``ld_alpha``, ``use_weighting``, precomputed
    reference log-probs, PEFT references, ...) works unchanged.
    """

    # set by DPOTrainer (an unchecked base class) and read back here; the signature columns
    # are a list once the base's _set_signature_columns_if_needed has run
    data_collator: Any
    _signature_columns: list[str]

    def __init__(
        self,
        *args: Any,
        calibration: Calibration | str | os.PathLike[str],
        prompt_id_column: str = "prompt_id",
        **kwargs: Any,
    ):
        cal = load_calibration(calibration)
        if not cal.kind_spec.binary:  # pairs of a success and a failure
            raise ValueError(
                f"BestkDPOTrainer needs a binary calibration (@k-DPO is defined for pass@k), got "
                f"kind={cal.kind!r}"
            )
        if not isinstance(prompt_id_column, str) or not prompt_id_column:
            raise ValueError(f"prompt_id_column must be a column name, got {prompt_id_column!r}")
        names = ("model", "ref_model", "args", "data_collator", "train_dataset", "eval_dataset")
        given = dict(zip(names, args, strict=False)) | kwargs
        check_dpo_args(given.get("args"), cal)
        datasets = [("train_dataset", given.get("train_dataset"))]
        evals = given.get("eval_dataset")
        if isinstance(evals, Mapping):
            datasets += [(f"eval_dataset[{k!r}]", v) for k, v in evals.items()]
        elif evals is not None:
            datasets.append(("eval_dataset", evals))
        for name, ds in datasets:
            ids = None if ds is None else _dataset_ids(ds, prompt_id_column, name)
            if ids is not None:
                cal.index_of(np.asarray(ids, dtype=object))  # ValueError naming a missing id
        self.calibration = cal
        self.prompt_id_column = prompt_id_column
        super().__init__(*args, **kwargs)
        self._scalar_beta = self.beta
        self.data_collator = _BetaEffCollator(self.data_collator, cal, prompt_id_column)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if self.prompt_id_column not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, self.prompt_id_column]

    def compute_ref_log_probs(self, model: Any, inputs: dict[str, Any]) -> Any:
        rest = {k: v for k, v in inputs.items() if k != BETA_EFF_KEY}
        return super().compute_ref_log_probs(model, rest)

    def _compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool) -> Any:
        if BETA_EFF_KEY not in inputs:
            raise RuntimeError(
                "the batch has no beta_eff: BestkDPOTrainer's data collator was bypassed"
            )
        beta = inputs[BETA_EFF_KEY].to(device=self.accelerator.device, dtype=torch.float32)
        rest = {k: v for k, v in inputs.items() if k != BETA_EFF_KEY}
        self.beta = beta
        try:
            return super()._compute_loss(model, rest, return_outputs)
        finally:
            self.beta = self._scalar_beta
