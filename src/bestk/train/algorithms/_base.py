"""What the algorithms share: their properties (:class:`AlgorithmSpec`, what the trainer and
the config checks ask), what they may use of the run (:class:`RunContext`), the passes over a
batch and the mean of their metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import numpy as np
import torch

from bestk.tasks import Example, Task
from bestk.train.config import ResolvedTrainConfig
from bestk.train.rollout.batch import Rollout

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.kappo import Calibration
    from bestk.train.model.policy import Policy, Reference
    from bestk.train.reference.bank import ReferenceBank

__all__ = ["Algorithm", "AlgorithmSpec", "RunContext", "StepMetrics", "rollout_batch_text",
           "refuse_pg_options"]

#: The ``metrics.jsonl`` record of one RL step (``step(step)``): ``phase`` (``"train"``),
#: ``step`` and the step's numbers.
StepMetrics: TypeAlias = dict[str, float | str]


@runtime_checkable
class RunContext(Protocol):
    """What an algorithm may use of the run (the :class:`~bestk.train.trainer.Trainer` is one):
    exactly these attributes and methods (``tests/train/test_trainer.py`` checks the algorithms use
    no other).

    Attributes: ``cfg`` (the resolved ``TrainConfig``), ``task``, ``device``, ``model`` (the
    policy being trained), ``tokenizer``, ``ref_model`` (the frozen reference, ``None`` unless
    the spec's ``keeps_reference``), ``rl_prompts`` (the training prompts RL draws from) and
    ``kappo_kind`` (the planned KAPPO calibration kind, ``None`` without one).
    """

    cfg: ResolvedTrainConfig
    task: Task
    device: torch.device
    model: Policy
    tokenizer: PreTrainedTokenizerBase
    ref_model: Reference | None
    rl_prompts: list[Example]

    @property
    def kappo_kind(self) -> str | None: ...

    def prompt_rng(self, step: int) -> np.random.Generator:
        """The generator of step ``step``'s prompt draws (a function of ``(seed, step)``)."""
        ...

    def draw_prompts(self, step: int) -> list[Example]:
        """``rollout.prompts_per_step`` distinct prompts of ``rl_prompts`` for ``step``."""
        ...

    def sample_completions(self, examples: list[Example], step: int, n: int, *,
                           defer_policy_pass: bool = False) -> Rollout:
        """``n`` completions of the current policy per example (noise of ``(seed, step)``);
        ``defer_policy_pass``: the caller's own forward fills the policy's log-probs and
        entropies (:meth:`bestk.train.rollout.batch.Rollout.fill_policy`)."""
        ...

    def score_rollout(self, examples: list[Example], ro: Rollout, n: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, prompt ids)`` of ``ro``'s completions, ``n`` per example."""
        ...

    def optimize(self, loss: torch.Tensor | Iterable[torch.Tensor]) -> tuple[float, float]:
        """One optimizer step on ``loss``, or on the sum of micro-batch losses, each
        backpropagated as it is yielded (:func:`bestk.train.optim.backward`);
        ``(gradient norm, learning rate)``."""
        ...

    def say(self, level: str, msg: str) -> None:
        """A one-line ``note`` / ``warning`` to the user."""
        ...


class Algorithm(Protocol):
    """What :attr:`AlgorithmSpec.make` returns: an algorithm bound to its run."""

    def prepare(self, calibration: Calibration, bank: ReferenceBank | None) -> None:
        """Receive the run's KAPPO calibration and reference bank (``None`` without one)."""
        ...

    def step(self, step: int) -> StepMetrics:
        """One RL step; returns its logged metrics."""
        ...

    def describe(self, metrics: StepMetrics) -> str:
        """The progress bar's summary of a step's metrics."""
        ...


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm of ``bestk train``.

    Attributes
    ----------
    name: the ``algorithm`` config value.
    title: what the report calls it.
    make: ``make(run: RunContext) -> Algorithm``, an object with ``step(step) -> metrics``,
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
    given_calibration: ``given_calibration(cfg)``: the KAPPO calibration a run of ``cfg`` is
        given outside its ``kappo`` section (``pg``: a ``kappo_grpo`` calibration file in
        ``estimator_options``), loaded, with what to call it in errors (``"calibration
        'PATH'"``), or ``None``; RL then draws only its prompts
        (:class:`~bestk.train.setup.RunSetup`). Its option errors are raised here.
    uses_estimator: whether its updates come from ``bestk.advantages`` of ``cfg.estimator``
        (with ``estimator_options``): the progress line, the report and ``bestk compare``
        name the estimator of such a run, and its KAPPO kind otherwise.
    batch_text: ``batch_text(cfg)`` of a run's config dict (``config.yaml``): the report's
        description of one step's batch.
    pool_note: what the report adds to "RL drew these prompts only" of a calibrated run.
    out_suffix: appended to ``runs/bestk`` for the default run directory when the config
        leaves ``out`` ``null`` (so the default runs of two algorithms do not meet).
    """

    name: str
    title: str
    make: Callable[[RunContext], Algorithm]
    default_n: int
    calibrated: Callable[[ResolvedTrainConfig], bool]
    keeps_reference: Callable[[ResolvedTrainConfig], bool]
    bank_completions: bool = False
    binary_only: bool = False
    online: bool = True
    check: Callable[[ResolvedTrainConfig], None] = lambda cfg: None
    given_calibration: Callable[[ResolvedTrainConfig], tuple[Calibration, str] | None] = \
        lambda cfg: None
    uses_estimator: bool = False
    batch_text: Callable[[Mapping[str, Any]], str] = lambda cfg: rollout_batch_text(cfg)
    pool_note: str = ""
    out_suffix: str = ""

    def samples_bank(self, cfg: ResolvedTrainConfig) -> bool:
        """Whether a run of ``cfg`` samples a reference bank of its own: it calibrates from
        the ``kappo`` section and has no ``kappo.calibration`` file, or it keeps the bank's
        completions (@k-DPO's pairs come from a bank even with a calibration file)."""
        return bool(self.calibrated(cfg) and (cfg.kappo.calibration is None
                                              or self.bank_completions))


def rollout_batch_text(cfg: Mapping[str, Any]) -> str:
    """A step's batch of an algorithm sampling ``rollout.n`` completions per prompt."""
    roll = cfg.get("rollout", {})
    return f"rollout {roll.get('prompts_per_step')} prompts x {roll.get('n')} samples"


def refuse_pg_options(cfg: ResolvedTrainConfig) -> None:
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
    if cfg.loss.sampler_importance_cap is not None:
        raise ValueError(
            f"config key 'loss.sampler_importance_cap' is a pg option; algorithm {name!r} "
            "has no per-token surrogate to weight (set it to null)"
        )
