"""What the algorithms share: their properties (:class:`AlgorithmSpec`, what the trainer and
the config checks ask), the passes over a batch and the mean of their metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["AlgorithmSpec", "refuse_pg_options", "minibatches", "mean_metrics", "rollout_metrics"]


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
    online: whether each step samples ``rollout.n`` completions per prompt from the current
        policy (``False``: it trains on the reference bank only, so its rollout budget is the
        bank's).
    check: ``check(cfg)`` raises ``ValueError`` for settings the algorithm does not support
        (on a config whose defaults are resolved).
    uses_estimator: whether the run computes advantages with ``estimator`` (so the
        estimator's option names and values are checked against ``estimator_options``).
    out_suffix: appended to ``runs/bestk`` for the default run directory when the config
        leaves ``out`` ``null`` (so the default runs of two algorithms do not meet).
    """

    name: str
    title: str
    make: Callable[[Any], Any]
    default_n: int
    calibrated: Callable[[Any], bool]
    keeps_reference: Callable[[Any], bool]
    bank_completions: bool = False
    binary_only: bool = False
    online: bool = True
    check: Callable[[Any], None] = lambda cfg: None
    uses_estimator: bool = False
    out_suffix: str = ""

    def samples_bank(self, cfg: Any) -> bool:
        """Whether a run of ``cfg`` samples a reference bank of its own: it calibrates from
        the ``kappo`` section and has no ``kappo.calibration`` file, or it keeps the bank's
        completions (@k-DPO's pairs come from a bank even with a calibration file)."""
        return bool(self.calibrated(cfg) and (cfg.kappo.calibration is None
                                              or self.bank_completions))


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


def minibatches(size: int, epochs: int, count: int) -> Iterator[slice]:
    """The slices of ``epochs`` passes over a batch of ``size`` items in ``count`` minibatches
    of ``ceil(size / count)`` consecutive items (``loss.ppo_epochs`` x ``loss.minibatches``
    optimizer steps)."""
    step = max(1, -(-size // count))
    for _ in range(epochs):
        for start in range(0, size, step):
            yield slice(start, start + step)


def rollout_metrics(ro: Any) -> dict[str, float]:
    """A step's metrics of its sampled completions: ``entropy``, the mean token entropy over
    the completion tokens, and ``response_len``, the mean completion length in tokens."""
    mask = ro.completion_mask.float()
    return {
        "entropy": float((ro.entropy * mask).sum() / mask.sum().clamp_min(1)),
        "response_len": float(mask.sum(1).mean()),
    }


def mean_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over the optimizer steps of an update."""
    keys = dict.fromkeys(k for st in steps for k in st)
    return {k: float(np.mean([st[k] for st in steps if k in st])) for k in keys}
