"""The properties of a training algorithm (what the trainer and the config checks ask)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AlgorithmSpec"]


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm of ``bestk train``.

    Attributes
    ----------
    name: the ``algorithm`` config value.
    title: what the report calls it.
    make: ``make(trainer) -> algorithm object`` with ``step(step) -> metrics``,
        ``prepare(calibration, bank)`` and ``describe(metrics) -> str``.
    default_n: ``rollout.n`` when the config leaves it ``null``.
    calibrated: ``calibrated(cfg)``: whether the run needs a KAPPO calibration from the
        ``kappo`` section.
    keeps_reference: ``keeps_reference(cfg)``: whether a frozen copy of the policy after SFT
        is kept (and checkpointed) for ``log pi_ref``.
    bank_completions: whether the reference bank's completions (token ids, reference
        log-probs) are kept, not only its rewards.
    binary_only: whether only a binary calibration will do.
    check: ``check(cfg)`` raises ``ValueError`` for settings the algorithm does not support
        (on a config whose defaults are resolved).
    """

    name: str
    title: str
    make: Callable[[Any], Any]
    default_n: int
    calibrated: Callable[[Any], bool]
    keeps_reference: Callable[[Any], bool]
    bank_completions: bool = False
    binary_only: bool = False
    check: Callable[[Any], None] = lambda cfg: None


def refuse_pg_options(cfg: Any) -> None:
    """``loss.kl_coef``, ``loss.entropy_coef`` and ``estimator_options`` belong to ``pg``: a
    regression or preference loss that already ties the policy to the reference by beta
    would silently ignore them."""
    name = cfg.algorithm
    if cfg.loss.kl_coef != 0:
        raise ValueError(
            f"config key 'loss.kl_coef' is a pg option; algorithm {name!r} is regularised by "
            "kappo.beta (set loss.kl_coef=0)"
        )
    if cfg.loss.entropy_coef != 0:
        raise ValueError(
            f"config key 'loss.entropy_coef' is a pg option; algorithm {name!r} has no entropy "
            "bonus (set loss.entropy_coef=0)"
        )
    if cfg.estimator_options:
        raise ValueError(
            f"config key 'estimator_options' is a pg option; algorithm {name!r} uses no "
            "advantage estimator (remove it)"
        )
