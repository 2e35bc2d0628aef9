"""The digits testbed's settings: reward variants, learners, and ``bestk lab digits``'s knobs.

:data:`LEARNERS` lists every training rule the classification testbeds know (exact ML or a
bestk estimator with options; A/A controls and learners at another learner's rate), and
:class:`DigitsConfig` the command's settings with their checks (shared with the sparse
testbed: :func:`known_learners`, :func:`learning_rates`, :func:`positive_ks`,
:func:`config_key`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from bestk._schema import Float, Int, SchemaChecks, schema_dataclass
from bestk.estimators import EstimatorInfo, estimator_info
from bestk.kappo.calibration import BINARY, WINRATE, CalibrationKind
from bestk.metrics import PASS_RATE_BINS

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from _typeshed import DataclassInstance

N_CLASSES = 10
#: Pass-rate bins of SoftmaxGRPO Table 3 (:data:`bestk.metrics.PASS_RATE_BINS`).
BINS: tuple[float, ...] = PASS_RATE_BINS


def _edge(x: float) -> str:
    text = f"{x:g}"
    return text[1:] if text.startswith("0.") else text


#: Their labels, as the per-seed data keys them: ``[0,.2)``, ``[.2,.5)``, ..., ``[.9,1]``.
BIN_LABELS = [f"[{_edge(lo)},{_edge(hi)}{']' if hi == BINS[-1] else ')'}"
              for lo, hi in zip(BINS[:-1], BINS[1:], strict=True)]
REWARDS = ("binary", "graded")
#: The KAPPO calibration kind of each reward variant (0/1 rewards: pass@k's binary kind; graded:
#: max@k's win-rate kind). It says whether the variant's rewards are 0/1 and which @k metric
#: (``kind.metric``: pass or best) judges it.
REWARD_KINDS: dict[str, CalibrationKind] = {"binary": BINARY, "graded": WINRATE}
#: k of the @k learners (PKPO, KAPPO @k-GRPO), as in their labels.
AT_K = 4
#: Seed ids of the sweep runs start here (disjoint from the test seeds 0, 1, ...).
SWEEP_SEED0 = 1000


@dataclass(frozen=True)
class Learner:
    """A training rule: exact ML (``estimator=None``) or a bestk estimator with options.

    ``control_of`` marks an A/A copy: the same rule as that learner (and its learning rate),
    run on independent sampling noise. ``rate_of`` makes a learner run at another learner's
    chosen learning rate instead of its own (SoftmaxGRPO compares methods at one rate).
    ``exploratory`` marks an arm no claim names: it is swept and trained as a batch of its own
    with rollouts of its own (``RunSpec.exploratory``), so adding it changes no other learner's
    numbers; it starts from the same weights and sees the same minibatches (paired seeds).
    """

    label: str
    estimator: str | None
    options: tuple[tuple[str, Any], ...] = ()
    min_n: int = 2
    control_of: str | None = None
    rate_of: str | None = None
    exploratory: bool = False

    @property
    def info(self) -> EstimatorInfo | None:
        """The estimator's registry entry (``None`` for exact ML)."""
        return None if self.estimator is None else estimator_info(self.estimator)

    @property
    def binary_only(self) -> bool:
        """Its reward domain admits only 0/1 rewards (``maxrl``)."""
        return self.info is not None and self.info.binary_rewards()

    @property
    def calibrated(self) -> bool:
        """It takes a KAPPO calibration, made from the initial policy (``kappo_grpo``)."""
        return self.info is not None and self.info.calibrated

    def applies(self, reward: str, n: int) -> bool:
        return n >= self.min_n and not (self.binary_only and not REWARD_KINDS[reward].binary)


#: Every learner the classification testbeds know (configs pick a subset by label).
LEARNERS: dict[str, Learner] = {
    x.label: x
    for x in [
        Learner("ml", None),
        Learner("reinforce", "reinforce"),
        Learner("rloo", "rloo"),
        Learner("grpo", "grpo"),
        Learner("grpo (A/A)", "grpo", control_of="grpo"),
        Learner("softmax_grpo(tau=0.1)", "softmax_grpo", (("tau", 0.1),)),
        Learner("maxrl", "maxrl"),
        Learner("argmaxrl", "argmaxrl"),
        Learner(f"pkpo(k={AT_K})", "pkpo", (("k", AT_K),), min_n=AT_K),
        Learner(f"kappo_grpo(k={AT_K})", "kappo_grpo"),
        Learner("softmax_grpo(tau=0.1) @ grpo's rate", "softmax_grpo", (("tau", 0.1),),
                rate_of="grpo"),
        # N = k would never learn (every group's pass@k estimate is 0 or 1): N > k
        Learner(f"passk_training(k={AT_K})", "passk_training", (("k", AT_K),), min_n=AT_K + 1,
                exploratory=True),
        Learner("loo_max", "loo_max", exploratory=True),
    ]
}


def known_learners(cls: object, learners: tuple[str, ...]) -> tuple[str, ...]:
    """The ``learners`` rule of the classification configs: labels from :data:`LEARNERS`,
    each A/A control with its learner."""
    unknown = [x for x in learners if x not in LEARNERS]
    if unknown:
        raise ValueError(f"unknown learner(s) {unknown}; valid: {', '.join(LEARNERS)}")
    orphans = [x for x in learners
               if LEARNERS[x].control_of and LEARNERS[x].control_of not in learners]
    if orphans:
        raise ValueError(f"A/A control(s) {orphans} need their learner in learners too")
    borrowed = [x for x in learners
                if LEARNERS[x].rate_of and LEARNERS[x].rate_of not in learners]
    if borrowed:
        raise ValueError(f"learner(s) {borrowed} run at another learner's rate: add "
                         f"{sorted({str(LEARNERS[x].rate_of) for x in borrowed})} to learners")
    return learners


def learning_rates(cls: object, grid: object) -> object:
    """The ``lr_grid`` rule: a non-empty sequence of positive finite numbers."""
    if not isinstance(grid, (list, tuple)) or any(isinstance(v, bool) for v in grid):
        raise ValueError(f"lr_grid must be a list of positive numbers, got {grid!r}")
    check_lrs(grid)
    return grid


def positive_ks(cls: object, ks: tuple[int, ...]) -> tuple[int, ...]:
    """The ``ks`` rule: a non-empty sequence of integers >= 1."""
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    return ks


@schema_dataclass
class DigitsConfig(SchemaChecks):
    """Knobs of ``bestk lab digits`` (all have defaults).

    Attributes
    ----------
    n: rollouts per training image (the group size ``N``; the claims use ``N = 8``).
    rewards: reward variants, ``"binary"`` and/or ``"graded"`` (``1 - |pred - label| / 9``).
    learners: labels from :data:`LEARNERS`.
    seeds: test seeds (initial weights, minibatches, sampling); paired across learners.
    hidden: MLP hidden width (one hidden ReLU layer).
    steps: Adam steps per run (same for all learners: equal rollouts).
    batch_size: training images per step (sampled without replacement).
    lr_grid: Adam learning rates the sweep starts from, extended past an edge until each
        learner's chosen rate is interior (:mod:`bestk.lr_sweep`; one value: no sweep).
    max_extensions: most rates added past the grid's edges for one learner.
    sweep_seeds: seeds per (learner, learning rate) of the sweep.
    val_fraction: share of the training images held out as the validation split of the sweep.
    test_fraction: held-out (test) share of the 1797 images (stratified split, fixed by ``seed``).
    ks: k values of the reported pass@k / best@k.
    eval_every: steps between two points of the training curves.
    kappo_betas: @k-GRPO KL strengths the sweep tries (binary / win-rate calibration); the
        (beta, rate) pair with the best validation score is kept.
    kappo_bank: reference rewards per training image drawn from the policy RL starts from (M).
    sft_steps: exact-ML (cross-entropy) Adam steps from the random initialisation before RL,
        shared by every learner of a seed (0: RL from the random initialisation).
    sft_lr: Adam learning rate of that SFT stage.
    seed: base seed; the whole run is deterministic given it.
    threads: torch CPU threads (0 keeps torch's default; 1 is fastest for these tiny MLPs).
    """

    n: Int = Field(8, ge=2, json_schema_extra={"want": "a rollout count >= 2"})
    rewards: tuple[str, ...] = REWARDS
    learners: tuple[str, ...] = tuple(LEARNERS)
    seeds: Int = Field(160, ge=1)
    hidden: Int = Field(64, ge=1)
    steps: Int = Field(60, ge=1)
    batch_size: Int = Field(32, ge=1)
    lr_grid: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    max_extensions: Int = Field(3, ge=0)
    sweep_seeds: Int = Field(3, ge=1)
    val_fraction: Float = Field(0.2, ge=0.05, le=0.5)
    test_fraction: Float = Field(0.3, ge=0.05, le=0.9)
    ks: tuple[Int, ...] = (1, 2, 4, 8, 16)
    eval_every: Int = Field(15, ge=1)
    kappo_betas: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    kappo_bank: Int = Field(30, ge=1)
    sft_steps: Int = Field(20, ge=0)
    sft_lr: Float = Field(3e-3, gt=0)
    seed: Int = 0
    threads: Int = 1

    @field_validator("rewards")
    @classmethod
    def _known_rewards(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [r for r in v if r not in REWARDS]
        if bad or not v:
            raise ValueError(f"unknown reward variant(s) {bad}; valid: {', '.join(REWARDS)}")
        return v

    _learners = field_validator("learners")(known_learners)
    _lrs = field_validator("lr_grid", mode="before")(learning_rates)
    @field_validator("kappo_betas", mode="before")
    @classmethod
    def _positive_betas(cls, v: object) -> object:
        if (not isinstance(v, (list, tuple)) or not v or any(isinstance(b, bool) for b in v)
                or not all(isinstance(b, (int, float)) and math.isfinite(b) and b > 0
                           for b in v)):
            raise ValueError(f"kappo_betas must be a non-empty list of positive numbers, "
                             f"got {v!r}")
        return v
    _ks = field_validator("ks")(positive_ks)

    @classmethod
    def fast(cls) -> DigitsConfig:
        """Seconds-long settings for tests and smoke runs."""
        return cls(n=4, seeds=2, steps=30, batch_size=32, eval_every=15, hidden=32,
                   ks=(1, 4), kappo_bank=8, lr_grid=(3e-3, 1e-2), sweep_seeds=1,
                   kappo_betas=(1e-2, 1e-1), sft_steps=5, max_extensions=1)

    def key(self) -> str:
        """Hash of everything that changes results (for resuming a partial run)."""
        return config_key(self)


def config_key(cfg: DataclassInstance) -> str:
    """Hash of a lab config's fields (``threads`` excluded: it does not change results)."""
    d = asdict(cfg)
    d.pop("threads", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def check_lrs(grid: Sequence[float]) -> None:
    if not grid:
        raise ValueError("lr_grid is empty")
    for v in grid:
        if not (float(v) > 0 and math.isfinite(float(v))):
            raise ValueError(f"learning rates must be positive numbers, got {v}")
