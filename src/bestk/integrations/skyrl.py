r"""SkyRL plug-in: bestk's @k-aware advantage estimators in SkyRL's estimator registry.

Importing this module registers every estimator of bestk's registry (:data:`bestk.ESTIMATORS`,
and any estimator registered later, :func:`bestk.estimators.on_register`) with SkyRL's
``AdvantageEstimatorRegistry`` (``skyrl.backends.skyrl_train.utils.ppo_utils``), which SkyRL's
trainer asks for ``trainer.algorithm.advantage_estimator``. An estimator keeps its bestk name
unless SkyRL already has one of that name (its own ``grpo``, ``rloo``, ``maxrl``, ``gae``,
``reinforce++``): then it is registered as ``bestk_<name>`` (``bestk_maxrl`` is bestk's MaxRL,
unbiased for :math:`J_N` with its default ``baseline="loo"``; SkyRL's ``maxrl`` stays SkyRL's
``(r - mean)/(mean + eps)``). :data:`SKYRL_ESTIMATORS` maps each bestk name to its SkyRL name.

Each estimator computes exactly ``bestk.advantages(name, scores, group=uids, **options)`` (the
formulas, their objectives and papers are in the estimators' docstrings, e.g.
:func:`bestk.estimators.argmaxrl.argmaxrl`) with SkyRL's conventions around it
(:func:`bestk.integrations._outcome.outcome_advantages`, shared with the verl plug-in):

* ``scores = token_level_rewards.sum(-1)``, the outcome reward, as SkyRL's GRPO;
* groups are SkyRL's ``uids`` (one per prompt; ragged groups are fine: dynamic sampling and
  filtering leave groups of different sizes, and no Python loop runs over rows or groups);
* SkyRL's padding rows (``pad_training_input_batch`` appends copies of row 0 with uids
  ``pad0``, ``pad1``, ... to make the batch divisible by the data-parallel size;
  :func:`skyrl_padding`) are left out of every group and get advantage 0;
* ``advantages = returns = A[:, None] * response_mask``.

Loading and options. SkyRL has no plug-in discovery, and its config refuses unknown keys (no
``+key``); its ``main_base`` hands the whole command line to another module's ``main()`` when
given ``trainer.override_entrypoint=MODULE``. This module's :func:`main` is SkyRL's entry point
with bestk loaded and SkyRL's config extended by two fields of ``trainer.algorithm``
(:class:`BestkAlgorithmConfig`)::

    python -m skyrl.train.entrypoints.main_base \
        trainer.override_entrypoint=bestk.integrations.skyrl \
        trainer.algorithm.advantage_estimator=pkpo trainer.algorithm.bestk.k=4 ...

* ``trainer.algorithm.bestk.<option>=...``: the estimator's options (unknown options, a missing
  required one and bad values raise ``ValueError`` naming them);
* ``trainer.algorithm.kappo_reward=/path/cal.json``: reward-side KAPPO, below.

``python -m bestk.integrations.skyrl OVERRIDES...`` checks a command line without training
(:func:`preflight`; no GPU, data or Ray needed).

KAPPO. SkyRL's uids are the prompts' row numbers in its training ``PromptDataset``
(``str(index)``, after the dataset's prompt-length filter), stable from step to step, so a
calibration keyed by those numbers (``bestk calibrate``; integer ids match their string form)
works in both KAPPO forms:

* ``kappo_grpo`` with ``trainer.algorithm.bestk.calibration=/path/cal.json`` (KAPPO Eq. 140);
* reward side, with any bestk estimator that follows :math:`\nabla E_\pi[\tilde R]` --
  ``bestk_rloo``, ``reinforce``, ``bestk_grpo`` with ``scale=none`` (Dr.GRPO): with
  ``trainer.algorithm.kappo_reward=/path/cal.json`` each outcome score is replaced by KAPPO's
  prompt-adaptive reward :math:`\hat a_k(x) R` (binary, Cor. 4.4) or :math:`T_j` (win-rate,
  Cor. 4.6 / Prop. 4.7) (:func:`bestk.kappo.transform_rewards`) before the estimator sees it,
  the role verl's ``kappo_compute_score`` reward function plays there. Refused
  (:func:`check_kappo_reward`): an estimator that applies a calibration itself
  (``kappo_grpo``), one that takes only 0/1 rewards (``bestk_maxrl``), a binary calibration
  with an estimator that cancels a per-prompt reward scale (std-normalised ``bestk_grpo``: KAPPO
  Eq. 139), and SkyRL's own estimators, which would ignore it.

KAPPO: *KAPPO: @k Adaptive Pressure for Policy Optimization*, 2026 (authors and arXiv id not
found; see docs/references.md).
"""

# No ``from __future__ import annotations`` here: SkyRL builds its config from the dataclass
# fields' types at run time (``build_nested_dataclass`` reads ``field.type``), so the types of
# the config classes below must be classes, not strings.

import dataclasses
import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bestk._optional import require
from bestk.estimators import (
    ESTIMATORS,
    EstimatorInfo,
    Options,
    advantages,
    estimator_info,
    on_register,
)
from bestk.integrations._outcome import (
    check_estimator,
    options_from_config,
    outcome_advantages,
    preflight_cli,
)
from bestk.kappo.calibration import Calibration, load_calibration

_WHO = "bestk.integrations.skyrl"
_ppo = require("skyrl.backends.skyrl_train.utils.ppo_utils", extra="skyrl", who=_WHO)
_skyrl_config = require("skyrl.train.config", extra="skyrl", who=_WHO)
# SkyRL's config dataclasses, extended below (Any to mypy: SkyRL ships no type information)
AlgorithmConfig: Any = _skyrl_config.AlgorithmConfig
TrainerConfig: Any = _skyrl_config.TrainerConfig
SkyRLTrainConfig: Any = _skyrl_config.SkyRLTrainConfig

__all__ = [
    "SKYRL_ESTIMATORS",
    "BestkAlgorithmConfig",
    "BestkSkyRLConfig",
    "BestkTrainerConfig",
    "SkyRLEstimator",
    "check_config",
    "check_kappo_reward",
    "kappo_reward_of",
    "load_config",
    "main",
    "preflight",
    "register",
    "skyrl_padding",
]

#: Each bestk estimator's name in SkyRL's registry: its own name, or ``bestk_<name>`` where
#: SkyRL has an estimator of that name. Filled by :func:`register` and later registrations.
SKYRL_ESTIMATORS: dict[str, str] = {}

#: The prefix of a bestk estimator whose name SkyRL uses for its own.
PREFIX = "bestk_"

#: How the options section is written on SkyRL's command line (for messages).
OPTIONS_KEY = "trainer.algorithm.bestk"

#: The command-line key by which SkyRL's ``main_base`` hands over to this module's :func:`main`.
ENTRYPOINT_KEY = "trainer.override_entrypoint"


# ---------------------------------------------------------------------------------------------
# The config: SkyRL's, with bestk's two fields in trainer.algorithm


@dataclass
class BestkAlgorithmConfig(AlgorithmConfig):
    """SkyRL's ``trainer.algorithm`` section with bestk's fields."""

    bestk: dict[str, Any] = field(default_factory=dict)
    """Options of the bestk estimator: ``trainer.algorithm.bestk.tau=0.1``, ``...bestk.k=4``."""
    kappo_reward: str | None = None
    """A ``bestk calibrate`` file keyed by SkyRL's uids (the training dataset's row numbers):
    a bestk estimator then sees KAPPO's prompt-adaptive reward instead of the outcome score."""


@dataclass
class BestkTrainerConfig(TrainerConfig):
    """SkyRL's ``trainer`` section whose ``algorithm`` is :class:`BestkAlgorithmConfig`."""

    algorithm: BestkAlgorithmConfig = field(default_factory=BestkAlgorithmConfig)


@dataclass
class BestkSkyRLConfig(SkyRLTrainConfig):
    """SkyRL's training config whose ``trainer`` is :class:`BestkTrainerConfig`."""

    trainer: BestkTrainerConfig = field(default_factory=BestkTrainerConfig)


def load_config(args: list[str] | dict[str, Any]) -> BestkSkyRLConfig:
    """SkyRL's config from command-line overrides (``key.path=value`` items, or a dict of them)
    with bestk's fields, by SkyRL's own parser (``from_cli_overrides``: unknown keys, a ``+``
    prefix and bad values fail there). ``trainer.override_entrypoint=...``, which brought
    SkyRL's ``main_base`` here, is dropped."""
    if isinstance(args, Mapping):
        args = {k: v for k, v in args.items() if k != ENTRYPOINT_KEY}
    else:
        args = [a for a in args if not a.startswith(ENTRYPOINT_KEY + "=")]
    cfg: BestkSkyRLConfig = BestkSkyRLConfig.from_cli_overrides(args)
    return cfg


# ---------------------------------------------------------------------------------------------
# The estimators


def skyrl_padding(index: Sequence[Hashable] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: SkyRL's padding rows, the ``p`` last rows when their uids are ``pad0``,
    ..., ``pad{p-1}`` (``pad_training_input_batch``; SkyRL's own uids are the dataset's row
    numbers). Only the tail is looked at, one row per padding row."""
    bs = len(index)
    pad = torch.zeros(bs, dtype=torch.bool)
    if bs == 0 or isinstance(index, torch.Tensor):
        return pad
    last = str(index[bs - 1])
    if not (last.startswith("pad") and last[3:].isdigit()):
        return pad
    p = int(last[3:]) + 1
    if p > bs or [str(u) for u in index[bs - p:]] != [f"pad{j}" for j in range(p)]:
        return pad
    pad[bs - p:] = True
    return pad


def kappo_reward_of(config: Any) -> Calibration | None:
    """The calibration of ``trainer.algorithm.kappo_reward`` (loaded once per path, modification
    time and size), or ``None``; ``config`` as SkyRL passes it (or a mapping)."""
    if config is None:
        return None
    if isinstance(config, Mapping) or hasattr(config, "get"):
        value = config.get("kappo_reward", None)
    else:
        value = getattr(config, "kappo_reward", None)
    return None if value is None else load_calibration(value)


def _cancels_prompt_scale(name: str, options: Options) -> bool:
    """Whether estimator ``name`` gives a group the same advantages when its rewards are scaled
    by a constant (as dividing by the group's std does), so that a per-prompt reward
    multiplier such as KAPPO's a_k(x) has no effect (KAPPO Eq. 139). Asked of the estimator
    itself, on one group of 8 rewards scaled by 1/4 and by 3 (two scales: a saturating
    estimator, SoftmaxGRPO at a small ``tau``, is nearly invariant over one of them)."""
    info = estimator_info(name)
    r = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    opts = info.fit_group(info.with_defaults(options), len(r))
    group = [0] * len(r)
    a = advantages(name, r, group=group, **opts)
    return bool(a.abs().max() > 0) and all(
        torch.allclose(advantages(name, c * r, group=group, **opts), a, rtol=1e-4, atol=0.0)
        for c in (0.25, 3.0))


def check_kappo_reward(name: str, options: Options, calibration: Calibration) -> None:
    """Refuse ``trainer.algorithm.kappo_reward`` with bestk estimator ``name`` where KAPPO's
    adaptive reward would be applied twice, refused, or cancelled (``ValueError``)."""
    info = estimator_info(name)
    shown = SKYRL_ESTIMATORS.get(name, name)
    if info.calibrated:
        raise ValueError(
            f"{shown} applies a KAPPO calibration itself ({OPTIONS_KEY}.calibration); "
            "trainer.algorithm.kappo_reward would apply one twice: drop one of them"
        )
    if info.binary_rewards():
        raise ValueError(
            f"{shown} takes 0/1 rewards, and KAPPO's adaptive reward is not 0/1: use "
            f"{SKYRL_ESTIMATORS.get('rloo', 'bestk_rloo')} with trainer.algorithm.kappo_reward"
        )
    if calibration.kind_spec.std_cancels and _cancels_prompt_scale(name, options):
        raise ValueError(
            f"{shown} with these options gives the same advantages to a group whatever its "
            "reward scale, which cancels the binary KAPPO multiplier a_k(x) (KAPPO Eq. 139): "
            f"use {SKYRL_ESTIMATORS.get('rloo', 'bestk_rloo')}, or an unscaled estimator"
        )


class SkyRLEstimator:
    """SkyRL advantage estimator of bestk estimator ``name`` (SkyRL's call: ``fn(
    token_level_rewards, response_mask, index, config, values, gamma, lambd,
    grpo_norm_by_std)``; the last four are SkyRL's and unused).

    An instance, not a closure, so that the cloudpickle copy SkyRL keeps in its Ray registry
    actor refers to this class by name and runs the estimator registered under ``name`` when it
    is called.
    """

    def __init__(self, name: str) -> None:
        self.__bestk_estimator__ = name

    def __repr__(self) -> str:
        return f"SkyRLEstimator({self.__bestk_estimator__!r})"

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        name = self.__bestk_estimator__
        options = options_from_config(config, key=OPTIONS_KEY)
        calibration = kappo_reward_of(config)
        if calibration is not None:
            check_kappo_reward(name, options, calibration)
        real = None if index is None else ~skyrl_padding(index)
        return outcome_advantages(name, token_level_rewards, response_mask, index, options,
                                  real=real, calibration=calibration)


def _holder(registry: Any, name: str) -> str | None:
    """Which bestk estimator SkyRL's registry holds under ``name`` (``""``: another one, not
    bestk's; ``None``: the name is free)."""
    if name not in registry.list_available():
        return None
    return getattr(registry.get(name), "__bestk_estimator__", "")


def _register_one(info: EstimatorInfo) -> None:
    """Hand one bestk estimator to SkyRL, under its name or, where SkyRL has an estimator of
    that name, ``bestk_<name>``; if both are taken by others, it is not registered."""
    registry = _ppo.AdvantageEstimatorRegistry
    for candidate in (info.name, PREFIX + info.name):
        holder = _holder(registry, candidate)
        if holder is None:
            registry.register(candidate, SkyRLEstimator(info.name))
        if holder is None or holder == info.name:
            SKYRL_ESTIMATORS[info.name] = candidate
            return


def register() -> dict[str, str]:
    """Register every estimator of bestk's registry with SkyRL (also done for each estimator
    registered later). Idempotent. Returns a copy of :data:`SKYRL_ESTIMATORS`."""
    for name in sorted(ESTIMATORS):
        _register_one(estimator_info(name))
    return dict(SKYRL_ESTIMATORS)


register()
on_register(_register_one)


# ---------------------------------------------------------------------------------------------
# Checks and the entry point


def check_config(cfg: Any) -> list[str]:
    """bestk's checks of a SkyRL config (after SkyRL's ``validate_cfg``): for a bestk estimator,
    its ``trainer.algorithm.bestk`` options, run on 4 toy groups of
    ``generator.n_samples_per_prompt`` (an estimator that needs prompt ids: its options loaded
    instead), and ``trainer.algorithm.kappo_reward`` (:func:`check_kappo_reward`). Returns
    lines for a summary; raises ``ValueError`` on a problem."""
    algo = cfg.trainer.algorithm
    name = str(algo.advantage_estimator)
    fn = _ppo.AdvantageEstimatorRegistry.get(name)
    n = int(cfg.generator.n_samples_per_prompt)
    ours = getattr(fn, "__bestk_estimator__", None)
    shown = repr(fn) if ours is not None else f"{fn.__module__}.{fn.__qualname__}"
    lines = [f"trainer.algorithm.advantage_estimator={name} -> {shown}",
             f"generator.n_samples_per_prompt={n}"]
    calibration = kappo_reward_of(algo)
    if ours is None:
        if calibration is not None:
            raise ValueError(
                f"trainer.algorithm.kappo_reward is read by bestk's estimators; SkyRL's own {name} "
                f"would ignore it: use {SKYRL_ESTIMATORS.get('rloo', 'bestk_rloo')}"
            )
        return lines + ["not a bestk estimator: SkyRL's own implementation"]
    options = options_from_config(algo, key=OPTIONS_KEY)
    lines.append(f"{OPTIONS_KEY}={options}")
    probe = algo
    if calibration is not None:
        check_kappo_reward(ours, options, calibration)
        lines.append(f"trainer.algorithm.kappo_reward: {calibration!r}")
        # the toy groups' uids are not the calibration's prompt ids
        probe = dataclasses.replace(algo, kappo_reward=None)
    return lines + check_estimator(fn, ours, options, n, probe, key=OPTIONS_KEY)


def preflight(args: list[str] | dict[str, Any]) -> str:
    """Check a SkyRL training command line before launching it on GPUs: SkyRL's parser and its
    ``validate_cfg`` (so misspelt keys and bad values fail here, and the estimator must be in
    SkyRL's registry), then :func:`check_config`. Returns a summary; raises on any problem."""
    utils = require("skyrl.train.utils.utils", extra="skyrl", who=_WHO)
    cfg = load_config(args)
    utils.validate_cfg(cfg)
    return "\n".join(check_config(cfg))


def main(argv: list[str] | None = None) -> None:
    """SkyRL's training entry point (``skyrl.train.entrypoints.main_base.main``) with bestk's
    estimators registered and :class:`BestkSkyRLConfig`: parse, SkyRL's ``validate_cfg``,
    :func:`check_config`, start Ray (which copies the estimator registry to every worker), and
    run SkyRL's ``skyrl_entrypoint``."""
    ray = require("ray", extra="skyrl", who=_WHO)
    utils = require("skyrl.train.utils.utils", extra="skyrl", who=_WHO)
    base = require("skyrl.train.entrypoints.main_base", extra="skyrl", who=_WHO)
    cfg = load_config(sys.argv[1:] if argv is None else argv)
    utils.validate_cfg(cfg)
    check_config(cfg)
    utils.initialize_ray(cfg)
    ray.get(base.skyrl_entrypoint.remote(cfg))


def _main(argv: list[str]) -> int:
    return preflight_cli(argv, "usage: python -m bestk.integrations.skyrl SKYRL_OVERRIDE ...",
                         preflight)


if __name__ == "__main__":  # `python -m bestk.integrations.skyrl OVERRIDES...`: the preflight
    raise SystemExit(_main(sys.argv[1:]))
