"""Classification testbeds: scikit-learn's digits, and the engine the sparse testbed shares.

A policy ``pi(c | x)`` (an MLP) over the classes of an image. The RL learners sample ``N``
labels per training example ("rollouts"), get a reward — binary ``1[c = label]`` or graded
``1 - |c - label| / 9`` — and follow ``(1/N) sum_i A_i grad log pi(c_i | x)`` with the
advantages of a bestk estimator. Exact maximum likelihood (``ml``) is the cross-entropy on the
true label.

Everything trains as one batch of independent MLPs ("slots": learner x learning rate x seed),
with :class:`bestk.lab._optim.SlotAdam` (Adam with a learning rate per slot), so a learning-rate
sweep is one batch too. For a given seed every slot starts from the same weights and sees the
same minibatches; the slots differ in how they turn *their own* sampled rewards into a gradient
(each slot draws its own rollouts). The A/A control ``grpo (A/A)`` is GRPO again: same weights,
same minibatches, independent sampling noise — every difference to ``grpo`` is noise.

Every seed first trains by exact maximum likelihood for ``sft_steps`` steps (the SFT stage,
shared by every learner of the seed), and RL starts from that policy: as with language models,
RL begins from a policy that is right some of the time.

Learning rates come from a sweep on a validation split (a share of the training images held
out; the test images are never used for it): every learner trains with each rate of
``lr_grid`` on ``sweep_seeds`` seeds of their own, the grid extended past an edge until the
chosen rate is interior (:mod:`bestk.lr_sweep`), and keeps the rate with the best
validation score (the mean over ``ks`` of pass@k for binary rewards, best@k for graded). The
A/A control uses GRPO's rate.

Evaluation is exact, not sampled: for a test example with policy ``pi`` the pass rate is
``p = pi(label | x)``, ``pass@k = 1 - (1 - p)^k`` and graded ``best@k`` follows from the closed
form of :func:`bestk.lab.exact.best_at_k_exact`, averaged over the test examples. These are
continuous in the weights, so two seeds never tie by construction (argmax accuracy is not
reported: on a few hundred test images it moves in steps of one image).

The gradient allocation by difficulty (SoftmaxGRPO Table 3) accumulates, over all training
steps, ``sum_i |A_i|`` of each example's group into the bin of that example's exact current
pass rate ``p`` (bins ``[0,.2), [.2,.5), [.5,.7), [.7,.9), [.9,1]``), and reports the shares.

KAPPO @k-GRPO (``bestk.advantages("kappo_grpo", ..., calibration=...)``) is calibrated from the
policy RL starts from (the SFT policy, KAPPO's reference): a bank of ``kappo_bank`` sampled
rewards per training image (per seed) before RL, ``bestk.kappo.calibrate(bank, k, beta,
kind)`` (binary, or win-rate for graded), so it trains on the same images as the other
learners; its KL strength beta is swept with the learning rate (``kappo_betas``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, field_validator
from rich.progress import Progress

from bestk._optional import pyplot, require
from bestk._schema import Float, Int, SchemaChecks, schema_dataclass
from bestk._seeds import (
    LAB_DIGITS_BATCHES,
    LAB_DIGITS_EVAL_COMPOSITES,
    LAB_DIGITS_INIT,
    LAB_DIGITS_ROLLOUTS,
    LAB_DIGITS_SFT,
    LAB_DIGITS_TEST_SPLIT,
    LAB_DIGITS_VALIDATION_SPLIT,
)
from bestk.estimators import ESTIMATORS, EstimatorInfo, advantages, estimator_info
from bestk.figures import save_figure
from bestk.kappo.calibration import BINARY, WINRATE, CalibrationKind, calibrate
from bestk.lab._optim import SlotAdam, torch_threads
from bestk.lab.exact import best_at_k_exact
from bestk.lab.io import (
    alloc_key,
    fmt,
    markdown_table,
    metric_key,
    write_json_atomic,
    write_text_atomic,
)
from bestk.lr_sweep import fixed_rate, sweep_until_interior
from bestk.metrics import PASS_RATE_BINS
from bestk.stats import mean_ci

__all__ = [
    "DigitsConfig",
    "LEARNERS",
    "Learner",
    "Problem",
    "Slot",
    "load_digits_split",
    "make_problem",
    "run_slots",
    "sweep_and_test",
    "run_digits",
    "testbed_data",
    "known_learners",
    "learning_rates",
    "positive_ks",
    "learner_colour",
    "plot",
]

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
    """

    label: str
    estimator: str | None
    options: tuple[tuple[str, Any], ...] = ()
    min_n: int = 2
    control_of: str | None = None
    rate_of: str | None = None

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
    ]
}


def known_learners(cls: Any, learners: tuple[str, ...]) -> tuple[str, ...]:
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


def learning_rates(cls: Any, grid: Any) -> Any:
    """The ``lr_grid`` rule: a non-empty sequence of positive finite numbers."""
    if not isinstance(grid, (list, tuple)) or any(isinstance(v, bool) for v in grid):
        raise ValueError(f"lr_grid must be a list of positive numbers, got {grid!r}")
    _check_lrs(grid)
    return grid


def positive_ks(cls: Any, ks: tuple[int, ...]) -> tuple[int, ...]:
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
    def _positive_betas(cls, v: Any) -> Any:
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


def config_key(cfg: Any) -> str:
    """Hash of a lab config's fields (``threads`` excluded: it does not change results)."""
    d = asdict(cfg)
    d.pop("threads", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _check_lrs(grid: Sequence[float]) -> None:
    if not grid:
        raise ValueError("lr_grid is empty")
    for v in grid:
        if not (float(v) > 0 and math.isfinite(float(v))):
            raise ValueError(f"learning rates must be positive numbers, got {v}")


# ---------------------------------------------------------------------------------------------
# data and model


def load_digits_split(test_fraction: float, seed: int):
    """scikit-learn's digits (bundled with the package, nothing downloaded), scaled to [0, 1]
    and split stratified: returns ``(x_train, y_train, x_test, y_test)`` tensors."""
    load_digits = require("sklearn.datasets", extra="lab").load_digits
    train_test_split = require("sklearn.model_selection", extra="lab").train_test_split

    data = load_digits()
    x = data.data.astype(np.float32) / 16.0
    y = data.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction,
                                          random_state=LAB_DIGITS_TEST_SPLIT.seed(seed),
                                          stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte),
            torch.from_numpy(yte))


@dataclass
class Problem:
    """A classification problem: ``parts`` images side by side per example, the label the
    ``parts``-digit number they show (``10**parts`` classes).

    ``x_train`` / ``y_train`` are the single training images; ``x_eval`` / ``y_eval`` the
    evaluation examples, already composed (``(T, parts * 64)``, ``(T,)``; the validation or
    the test split, see :func:`make_problem`). ``data_id`` fingerprints the training
    images and evaluation examples (two runs with the same id saw the same data).
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    reward: str
    parts: int = 1
    data_id: str = ""

    @property
    def n_classes(self) -> int:
        return 10**self.parts

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    def reward_matrix(self) -> torch.Tensor:
        if self.parts != 1:
            raise ValueError("reward matrices exist for single digits only")
        return reward_matrix(self.reward)

    def batch(self, gen: torch.Generator, seeds: int, b: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x (S, b, d), y (S, b), image ids (S, b))`` of one minibatch per seed: ``b``
        distinct training images (single digits), or ``b`` composites of uniformly drawn
        images (image ids ``-1``)."""
        n_tr = self.n_train
        if self.parts == 1:
            idx = torch.rand(seeds, n_tr, generator=gen).argsort(1)[:, :b]
            return self.x_train[idx], self.y_train[idx], idx
        idx = torch.randint(0, n_tr, (seeds, b, self.parts), generator=gen)
        return compose(self.x_train, self.y_train, idx) + (torch.full((seeds, b), -1),)


def compose(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``idx (..., parts)`` side by side -> ``(..., parts * d)`` and the label
    ``sum_j y[idx_j] 10^(parts - 1 - j)``."""
    parts = idx.shape[-1]
    xs = x[idx].reshape(*idx.shape[:-1], parts * x.shape[-1])
    place = 10 ** torch.arange(parts - 1, -1, -1)
    return xs, (y[idx] * place).sum(-1)


def make_problem(reward: str, *, split: str, test_fraction: float, val_fraction: float,
                 seed: int, parts: int = 1, num_eval: int = 2000) -> Problem:
    """The digits split for ``split="test"`` (train on the training images, evaluate on the
    test images) or ``"validation"`` (a ``val_fraction`` share of the training images is held
    out and evaluated on; the test images are not used). Composites (``parts > 1``) evaluate
    on ``num_eval`` fixed composites of evaluation images."""
    if split not in ("test", "validation"):
        raise ValueError(f"split must be 'test' or 'validation', got {split!r}")
    xtr, ytr, xte, yte = load_digits_split(test_fraction, seed)
    if split == "validation":
        train_test_split = require("sklearn.model_selection", extra="lab").train_test_split

        a, b, c, d = train_test_split(xtr.numpy(), ytr.numpy(), test_size=val_fraction,
                                      random_state=LAB_DIGITS_VALIDATION_SPLIT.seed(seed),
                                      stratify=ytr.numpy())
        xtr, xte, ytr, yte = (torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c),
                              torch.from_numpy(d))
    if parts > 1:
        g = torch.Generator().manual_seed(LAB_DIGITS_EVAL_COMPOSITES.seed(
            seed, parts=parts, validation=int(split == "validation")))
        eidx = torch.randint(0, xte.shape[0], (num_eval, parts), generator=g)
        xte, yte = compose(xte, yte, eidx)
    h = hashlib.sha256()
    for t in (xtr, ytr, xte, yte):
        h.update(np.ascontiguousarray(t.numpy()).tobytes())
    return Problem(xtr, ytr, xte, yte, reward, parts, "sha256:" + h.hexdigest()[:16])


class BatchedMLP(torch.nn.Module):
    """``P`` independent one-hidden-layer MLPs evaluated with batched matmuls."""

    def __init__(self, inits: Sequence[dict[str, torch.Tensor]]):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.stack([i["w1"] for i in inits]))
        self.b1 = torch.nn.Parameter(torch.stack([i["b1"] for i in inits]))
        self.w2 = torch.nn.Parameter(torch.stack([i["w2"] for i in inits]))
        self.b2 = torch.nn.Parameter(torch.stack([i["b2"] for i in inits]))

    @staticmethod
    def init(d_in: int, hidden: int, d_out: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """PyTorch-default-like uniform fan-in initialisation of one MLP."""
        a1, a2 = 1 / math.sqrt(d_in), 1 / math.sqrt(hidden)
        return {
            "w1": (torch.rand(d_in, hidden, generator=gen) * 2 - 1) * a1,
            "b1": (torch.rand(1, hidden, generator=gen) * 2 - 1) * a1,
            "w2": (torch.rand(hidden, d_out, generator=gen) * 2 - 1) * a2,
            "b2": (torch.rand(1, d_out, generator=gen) * 2 - 1) * a2,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(P, B, d_in)`` -> logits ``(P, B, d_out)``."""
        h = torch.relu(torch.baddbmm(self.b1, x, self.w1))
        return torch.baddbmm(self.b2, h, self.w2)


def reward_matrix(kind: str) -> torch.Tensor:
    """``(10, 10)`` reward of predicting class ``c`` (column) for label ``y`` (row)."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward variant {kind!r}; valid: {', '.join(REWARDS)}")
    c = torch.arange(N_CLASSES, dtype=torch.float64)
    return {"binary": torch.eye(N_CLASSES, dtype=torch.float64),
            "graded": 1.0 - (c[None, :] - c[:, None]).abs() / 9.0}[kind]


# ---------------------------------------------------------------------------------------------
# the engine: a list of slots (learner, learning rate, seed) trained as one batch


@dataclass(frozen=True)
class Slot:
    """One model of the batch: a learner, its learning rate and its seed id."""

    learner: Learner
    lr: float
    seed: int
    #: @k-GRPO's KL strength (calibrated learners only; ``None`` for the others).
    beta: float | None = None


@dataclass
class RunSpec:
    """What every slot of a batch shares: group size, budget, model, metrics, base seed."""

    n: int
    steps: int
    batch_size: int
    hidden: int
    ks: tuple[int, ...]
    eval_every: int
    seed: int
    kappo_bank: int = 30
    sft_steps: int = 0
    sft_lr: float = 1e-2
    eval_chunk: int = field(default=16)


def _kappo_calibration(spec: RunSpec, problem: Problem, model: BatchedMLP, slots: list[int],
                       slot_seed_pos: list[int], gen: torch.Generator,
                       betas: Sequence[float]) -> dict[float, Any]:
    """Calibrate @k-GRPO from the policy RL starts from (the SFT policy when
    ``spec.sft_steps > 0``) of each seed, once per KL strength in ``betas``: bank id = seed
    position x n_train + image index (the group ids the training loop uses)."""
    n_train = problem.n_train
    rmat = problem.reward_matrix()
    banks: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for slot, pos in zip(slots, slot_seed_pos, strict=True):
            logits = _slot_logits(model, slot, problem.x_train)
            probs = torch.softmax(logits.double(), -1)
            draws = torch.multinomial(probs, spec.kappo_bank, replacement=True, generator=gen)
            bank_r = rmat[problem.y_train[:, None].expand_as(draws), draws]
            for i, row in enumerate(bank_r.numpy()):
                banks[pos * n_train + i] = row
    kind = REWARD_KINDS[problem.reward]
    return {b: calibrate(banks, AT_K, b, kind=kind) for b in betas}


def _slot_logits(model: BatchedMLP, slot: int, x: torch.Tensor) -> torch.Tensor:
    """Logits of one slot's MLP on ``x (T, d)``."""
    h = torch.relu(torch.addmm(model.b1[slot], x, model.w1[slot]))
    return torch.addmm(model.b2[slot], h, model.w2[slot])


def _calibration_summary(cal: Any) -> dict[str, Any]:
    """What the KAPPO calibration from the initial policy looked like (for the report)."""
    summary: dict[str, Any] = {"kind": cal.kind, "k": cal.k, "beta": cal.beta,
                               "prompts": cal.num_prompts}
    if cal.kind_spec.binary:
        a_k = np.asarray(cal.values["a_k"], dtype=np.float64)
        n_succ = np.asarray(cal.values["n_success"])
        summary.update({
            "a_k_min": float(a_k.min()), "a_k_median": float(np.median(a_k)),
            "a_k_max": float(a_k.max()),
            "share_no_success": float(np.mean(n_succ == 0)),
        })
    return summary


def evaluate_slots(model: BatchedMLP, problem: Problem, ks: Sequence[int],
                   chunk: int = 16) -> dict[str, torch.Tensor]:
    """Exact evaluation metrics of every slot: ``{"pass": (P, len(ks)), "best": (P, len(ks)),
    "p": (P, T)}`` (``best`` equals ``pass`` on binary rewards)."""
    kt = torch.tensor(list(ks), dtype=torch.float64)
    n_slots = model.w1.shape[0]
    passes, bests, ps = [], [], []
    with torch.no_grad():
        for lo in range(0, n_slots, chunk):
            sl = slice(lo, min(lo + chunk, n_slots))
            w1, b1, w2, b2 = model.w1[sl], model.b1[sl], model.w2[sl], model.b2[sl]
            x = problem.x_eval.expand(w1.shape[0], *problem.x_eval.shape)
            logits = torch.baddbmm(b2, torch.relu(torch.baddbmm(b1, x, w1)), w2)
            logp = torch.log_softmax(logits.double(), -1)  # (c, T, C)
            y = problem.y_eval[None, :, None].expand(logp.shape[0], -1, 1)
            p = logp.gather(2, y)[..., 0].exp()  # (c, T)
            pk = (1 - (1 - p[..., None]) ** kt).mean(1)
            if REWARD_KINDS[problem.reward].binary:  # 0/1 rewards: best@k is pass@k
                bk = pk
            else:
                bk = best_at_k_exact(logp.exp(), problem.reward_matrix()[problem.y_eval],
                                     ks).mean(1)
            passes.append(pk)
            bests.append(bk)
            ps.append(p)
    return {"pass": torch.cat(passes), "best": torch.cat(bests), "p": torch.cat(ps)}


def run_slots(problem: Problem, slots: Sequence[Slot], spec: RunSpec,
              progress: Callable[[], None] | None = None) -> dict[str, Any]:
    """Train every slot for ``spec.steps`` steps; return per-slot metrics at the start and the
    end (``{"start": {key: [P]}, "end": {key: [P]}}``, keys from :func:`metric_key`), the
    gradient allocation shares, training curves of pass@1 and the KAPPO calibration summary."""
    slots = list(slots)
    missing = [s.learner.label for s in slots
               if s.learner.estimator is not None and s.learner.estimator not in ESTIMATORS]
    if missing:
        raise ValueError(f"estimator(s) of {sorted(set(missing))} are not registered in bestk")
    n, b = spec.n, min(spec.batch_size, problem.n_train)
    seeds = sorted({s.seed for s in slots})
    seed_pos = {sd: i for i, sd in enumerate(seeds)}
    pos = torch.tensor([seed_pos[s.seed] for s in slots])
    n_slots, n_seeds = len(slots), len(seeds)
    d_in = problem.x_train.shape[1] * problem.parts
    inits = {}
    for sd in seeds:
        g = torch.Generator().manual_seed(LAB_DIGITS_INIT.seed(spec.seed, slot_seed=sd))
        inits[sd] = BatchedMLP.init(d_in, spec.hidden, problem.n_classes, g)
    if spec.sft_steps:
        inits = supervised_warm_start(problem, inits, spec)
    model = BatchedMLP([inits[s.seed] for s in slots])
    lr = torch.tensor([s.lr for s in slots], dtype=torch.float32)[:, None, None]
    opt = SlotAdam(list(model.parameters()), lr)
    setting_seed = LAB_DIGITS_ROLLOUTS.seed(spec.seed, reward=REWARDS.index(problem.reward) + 1,
                                            n=n)
    gen = torch.Generator().manual_seed(setting_seed)
    batch_gen = torch.Generator().manual_seed(
        LAB_DIGITS_BATCHES.seed(spec.seed, first_slot_seed=seeds[0]))

    # group the slots by learner and KL strength (one advantage call per group and step)
    groups: dict[tuple[str, float | None], list[int]] = {}
    for i, s in enumerate(slots):
        groups.setdefault((s.learner.label, s.beta), []).append(i)
    calibrations: dict[float, Any] = {}
    kappo = [i for i, s in enumerate(slots) if s.learner.calibrated]
    if kappo:
        no_beta = sorted({slots[i].learner.label for i in kappo if slots[i].beta is None})
        if no_beta:
            raise ValueError(f"calibrated learner(s) {no_beta} need a KL strength (Slot.beta)")
        calibrations = _kappo_calibration(spec, problem, model, kappo,
                                          [int(pos[i]) for i in kappo], gen,
                                          sorted({_beta(slots[i]) for i in kappo}))
    alloc = torch.zeros(n_slots, len(BINS) - 1, dtype=torch.float64)
    edges = torch.tensor(BINS[1:-1], dtype=torch.float64)
    curve_steps: list[int] = []
    curves: list[torch.Tensor] = []
    start = evaluate_slots(model, problem, spec.ks, spec.eval_chunk)
    curve_steps.append(0)
    curves.append(start["pass"][:, 0].clone())
    n_classes = problem.n_classes
    # 0/1 rewards: the indicator of the true class; else the variant's reward matrix
    rmat = None if REWARD_KINDS[problem.reward].binary else problem.reward_matrix()
    for step in range(1, spec.steps + 1):
        xs, ys, ids = problem.batch(batch_gen, n_seeds, b)  # (S, b, d), (S, b), (S, b)
        xb, yb = xs[pos], ys[pos]  # (P, b, d), (P, b)
        logp = torch.log_softmax(model(xb), -1)  # (P, b, C)
        with torch.no_grad():
            probs = logp.exp().double()
            draws = torch.multinomial(probs.reshape(-1, n_classes), n, replacement=True,
                                      generator=gen).reshape(n_slots, b, n)
            if rmat is None:
                rewards = (draws == yb[..., None]).double()  # (P, b, n)
            else:
                rewards = rmat[yb[..., None].expand_as(draws), draws]
            p_true = probs.gather(2, yb[..., None])[..., 0]  # (P, b) exact pass rate
        loss = torch.zeros(())
        for idx in groups.values():
            lrn = slots[idx[0]].learner
            it = torch.tensor(idx)
            if lrn.estimator is None:
                loss = loss - logp[it].gather(2, yb[it, :, None]).mean() * len(idx)
                continue
            r = rewards[it]  # (s, b, n)
            opts = dict(lrn.options)
            if lrn.calibrated:
                opts["calibration"] = calibrations[_beta(slots[idx[0]])]
            # groups labelled by the bank ids of the images
            if estimator_info(lrn.estimator).needs_prompt_ids:
                gid = (pos[it][:, None] * problem.n_train + ids[pos[it]])[..., None]
                adv = advantages(lrn.estimator, r.reshape(-1), gid.expand_as(r).reshape(-1),
                                 **opts).reshape(r.shape)
            else:
                adv = advantages(lrn.estimator, r.reshape(-1, n), **opts).reshape(r.shape)
            adv = adv.to(torch.float32)
            lp = logp[it].gather(2, draws[it])  # (s, b, n)
            loss = loss - (adv * lp).mean() * len(idx)  # mean over examples and rollouts
            with torch.no_grad():
                mass = adv.abs().double().sum(2)  # (s, b)
                bin_id = torch.bucketize(p_true[it], edges, right=True)
                alloc[it] += torch.zeros(len(idx), len(BINS) - 1,
                                         dtype=torch.float64).scatter_add_(1, bin_id, mass)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % spec.eval_every == 0 or step == spec.steps:
            ev = evaluate_slots(model, problem, spec.ks, spec.eval_chunk)
            curve_steps.append(step)
            curves.append(ev["pass"][:, 0].clone())
        if progress is not None:
            progress()
    end = ev
    tot = alloc.sum(1, keepdim=True)
    share = torch.where(tot > 0, alloc / tot.clamp_min(1e-300), torch.zeros_like(alloc))
    out: dict[str, Any] = {
        "slots": [{"learner": s.learner.label, "lr": s.lr, "seed": s.seed, "beta": s.beta}
                  for s in slots],
        "start": _metrics(start, spec.ks),
        "end": _metrics(end, spec.ks),
        "allocation": {lb: share[:, j].tolist() for j, lb in enumerate(BIN_LABELS)},
        "curve_steps": curve_steps,
        "curve_pass@1": torch.stack(curves, 1).tolist(),  # (P, points)
    }
    if calibrations:
        out["kappo_calibration"] = {f"{b:g}": _calibration_summary(c)
                                    for b, c in calibrations.items()}
    return out


def _beta(slot: Slot) -> float:
    """A calibrated slot's KL strength (:class:`Slot`)."""
    if slot.beta is None:
        raise ValueError(f"calibrated learner {slot.learner.label!r} needs a KL strength")
    return float(slot.beta)


def supervised_warm_start(problem: Problem, inits: dict[int, dict[str, torch.Tensor]],
                          spec: RunSpec) -> dict[int, dict[str, torch.Tensor]]:
    """The SFT stage: every seed's initial MLP trained by exact maximum likelihood
    (cross-entropy on the true label, Adam at ``spec.sft_lr``) for ``spec.sft_steps`` steps of
    ``spec.batch_size`` training images (minibatches from their own stream), so RL starts, as
    with language models, from a policy that is right some of the time, and @k-GRPO is
    calibrated from that policy (KAPPO's reference). Returns the trained weights per seed."""
    seeds = sorted(inits)
    model = BatchedMLP([inits[sd] for sd in seeds])
    opt = SlotAdam(list(model.parameters()), torch.full((len(seeds), 1, 1), spec.sft_lr))
    gen = torch.Generator().manual_seed(LAB_DIGITS_SFT.seed(spec.seed, first_slot_seed=seeds[0]))
    b = min(spec.batch_size, problem.n_train)
    for _ in range(spec.sft_steps):
        xs, ys, _ids = problem.batch(gen, len(seeds), b)
        logp = torch.log_softmax(model(xs), -1)
        loss = -logp.gather(2, ys[..., None]).mean() * len(seeds)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return {sd: {name: getattr(model, name)[j].detach().clone()
                     for name in ("w1", "b1", "w2", "b2")} for j, sd in enumerate(seeds)}


def _metrics(ev: dict[str, torch.Tensor], ks: Sequence[int]) -> dict[str, list]:
    """``pass@k`` and ``best@k`` per slot (on binary rewards best@k is pass@k)."""
    out = {metric_key("pass", k): ev["pass"][:, j].tolist() for j, k in enumerate(ks)}
    out.update({metric_key("best", k): ev["best"][:, j].tolist() for j, k in enumerate(ks)})
    return out


# ---------------------------------------------------------------------------------------------
# sweep on the validation split, then the test run


def selection_score(result: dict[str, Any], reward: str, ks: Sequence[int]) -> np.ndarray:
    """Per slot: mean over ``ks`` of pass@k (binary) or best@k (graded) at the end."""
    name = REWARD_KINDS[reward].metric
    return np.mean([result["end"][metric_key(name, k)] for k in ks], axis=0)


def sweep_and_test(make: Callable[[str], Problem], learners: Sequence[Learner],
                   spec: RunSpec, *, seeds: int, lr_grid: Sequence[float], sweep_seeds: int,
                   progress: Callable[[str, int], Callable[[], None] | None] | None = None,
                   max_extensions: int = 3, kappo_betas: Sequence[float] = (1e-3,),
                   ) -> dict[str, Any]:
    """Choose each learner's learning rate on ``make("validation")``, then train every learner
    with its rate on ``make("test")`` for ``seeds`` paired seeds.

    The sweep trains every rate of ``lr_grid`` x ``sweep_seeds`` seeds of its own and extends
    the grid past an edge until the chosen rate is interior (:mod:`bestk.lr_sweep`, at
    most ``max_extensions`` rates per learner); a calibrated learner (@k-GRPO) is swept at
    every KL strength of ``kappo_betas`` and keeps the (beta, rate) pair with the best score.
    A/A controls take their learner's rate.

    Returns ``{"sweep": {...}, "test": run_slots(...) result, "selected": {label: lr},
    "beta": {label: beta}}``.
    """
    _check_lrs(lr_grid)
    tuned = [x for x in learners if x.control_of is None and x.rate_of is None]
    # one sweep "arm" per (learner, beta): calibrated learners get one per KL strength
    arms: dict[str, tuple[Learner, float | None]] = {}
    for x in tuned:
        if x.calibrated:
            for b in kappo_betas:
                arms[f"{x.label}|beta={b:g}"] = (x, float(b))
        else:
            arms[x.label] = (x, None)
    selected: dict[str, float] = {}
    betas: dict[str, float] = {}
    if len(lr_grid) == 1:
        sweep: dict[str, Any] = {**fixed_rate([x.label for x in tuned], float(lr_grid[0])),
                                 "seeds": sweep_seeds}
        selected = dict(sweep["selected"])
        betas = {x.label: float(kappo_betas[0]) for x in tuned if x.calibrated}
    else:
        problem = make("validation")
        rounds = [0]

        def score(want: Any) -> dict[str, dict[float, float]]:
            slots = [Slot(arms[a][0], float(v), SWEEP_SEED0 + j, arms[a][1])
                     for a, rates in want.items() for v in rates for j in range(sweep_seeds)]
            rounds[0] += 1
            tag = "" if rounds[0] == 1 else f" (extension {rounds[0] - 1})"
            res = run_slots(problem, slots, spec,
                            progress(f"sweep {problem.reward}{tag}", spec.steps)
                            if progress else None)
            sc = selection_score(res, problem.reward, spec.ks)
            got: dict[str, dict[float, float]] = {}
            for a, rates in want.items():
                for v in rates:
                    mask = [i for i, s in enumerate(slots) if s.learner is arms[a][0]
                            and s.beta == arms[a][1] and s.lr == float(v)]
                    got.setdefault(a, {})[float(v)] = float(np.mean(sc[mask]))
            return got

        raw = sweep_until_interior(score, list(arms), lr_grid, max_extensions=max_extensions)
        sweep = {"grid": raw["grid"], "seeds": sweep_seeds, "scores": {}, "grids": {},
                 "interior": {}, "extensions": raw["extensions"]}
        for x in tuned:
            mine = [a for a in arms if arms[a][0] is x]
            best = max(mine, key=lambda a: (max(r["score"] for r in raw["scores"][a]),
                                            -(arms[a][1] or 0.0)))
            selected[x.label] = raw["selected"][best]
            sweep["scores"][x.label] = raw["scores"][best]
            sweep["grids"][x.label] = raw["grids"][best]
            sweep["interior"][x.label] = raw["interior"][best]
            chosen_beta = arms[best][1]
            if chosen_beta is not None:  # calibrated learners: the KL strength of the pair
                betas[x.label] = chosen_beta
                sweep.setdefault("betas", {})[x.label] = [
                    {"beta": arms[a][1], "lr": raw["selected"][a],
                     "score": max(r["score"] for r in raw["scores"][a]),
                     "interior": raw["interior"][a], "grid": raw["grids"][a]} for a in mine]
        sweep["data_id"] = problem.data_id
        sweep["select_by"] = f"mean over k of validation {REWARD_KINDS[problem.reward].metric}@k"
    for x in learners:
        source = x.control_of if x.control_of is not None else x.rate_of
        if source is not None:
            selected[x.label] = selected[source]
            if x.calibrated:
                betas[x.label] = betas[source]
    sweep["selected"] = dict(selected)
    if betas:
        sweep["selected_beta"] = dict(betas)
    problem = make("test")
    slots = [Slot(x, selected[x.label], s, betas.get(x.label)) for x in learners
             for s in range(seeds)]
    test = run_slots(problem, slots, spec,
                     progress(f"test {problem.reward}", spec.steps) if progress else None)
    test["data_id"] = problem.data_id
    return {"sweep": sweep, "selected": selected, "beta": betas, "test": test}


# ---------------------------------------------------------------------------------------------
# per-seed data for the claims


def per_learner(test: dict[str, Any], label: str, when: str) -> dict[str, list[float]]:
    """Per-seed values (seed order) of every metric of one learner at ``when`` (start / end)."""
    idx = [i for i, s in enumerate(test["slots"]) if s["learner"] == label]
    idx.sort(key=lambda i: test["slots"][i]["seed"])
    out = {k: [v[i] for i in idx] for k, v in test[when].items()}
    if when == "end":
        out.update({alloc_key(b): [v[i] for i in idx] for b, v in test["allocation"].items()})
    return out


def learner_config(lrn: Learner, reward: str, lr: float, *, n: int, steps: int, batch: int,
                   data_id: str) -> dict[str, Any]:
    """The run configuration recorded with each learner's per-seed data: what the estimator
    sees (``reward``), the data it trains on (``prompts``) and the rollout budget."""
    rl = lrn.estimator is not None
    return {
        "estimator": lrn.estimator or "cross-entropy (exact ML)",
        "options": {k: v for k, v in lrn.options},
        "reward": reward if rl else "label",
        "prompts": data_id,
        "rollouts": n * steps * batch if rl else 0,
        "lr": lr,
        "sampling": "independent (A/A control of " + lrn.control_of + ")" if lrn.control_of
        else "per-slot draws",
        "control_of": lrn.control_of,
    }


def learner_data(test: dict[str, Any], label: str, reward: str, lr: float, *, n: int,
                 steps: int, batch: int) -> dict[str, Any]:
    """One learner's entry in the claims data: ``{"config", "start", "end"}`` (its run
    configuration from :func:`learner_config` and its per-seed metrics from
    :func:`per_learner`)."""
    return {
        "config": learner_config(LEARNERS[label], reward, lr, n=n, steps=steps, batch=batch,
                                 data_id=test["data_id"]),
        "start": per_learner(test, label, "start"),
        "end": per_learner(test, label, "end"),
    }


def record_sweep(methods: dict[str, dict[str, Any]], setting: dict[str, Any]) -> None:
    """Add to each learner's run configuration the grid its rate was chosen from
    (``lr_grid``; an A/A control: its learner's), whether the rate is interior to it
    (``lr_interior``) and @k-GRPO's chosen KL strength (``kappo_beta``)."""
    sweep = setting["sweep"]
    for lb, m in methods.items():
        tuned = LEARNERS[lb].control_of or LEARNERS[lb].rate_of or lb
        m["config"]["lr_grid"] = sweep.get("grids", {}).get(tuned, sweep["grid"])
        m["config"]["lr_interior"] = sweep.get("interior", {}).get(tuned)
        if lb in setting.get("beta", {}):
            m["config"]["kappo_beta"] = setting["beta"][lb]


def testbed_data(cfg: DigitsConfig, settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{testbed id: {"ks", "seeds", "methods": {label: {"config", "start", "end"}}, "sweep"}}``
    for the claims (testbed ids ``digits-binary`` / ``digits-graded``)."""
    out = {}
    for reward, st in settings.items():
        test = st["test"]
        methods = {
            lb: learner_data(test, lb, reward, st["selected"][lb], n=cfg.n, steps=cfg.steps,
                             batch=cfg.batch_size)
            for lb in st["learners"]
        }
        record_sweep(methods, st)
        extra = {"kappo_calibration": test["kappo_calibration"]} \
            if "kappo_calibration" in test else {}
        out[f"digits-{reward}"] = {"ks": list(cfg.ks), "seeds": list(range(cfg.seeds)),
                                   "n": cfg.n, "methods": methods, "sweep": st["sweep"],
                                   "wall_seconds": st.get("wall_seconds"), **extra}
    return out


# ---------------------------------------------------------------------------------------------
# report and plot


def _cell(values: Sequence[float]) -> str:
    m, h = mean_ci(values)
    return f"{m:.3f} ± {fmt(h)}"


def render_testbed(tb: dict[str, Any], title: str | None = None,
                   name: str | None = None,
                   measure: str = "test split at the end of training, exact") -> str:
    """Markdown of one testbed's data: selected learning rates, end metrics, change from the
    start, allocation (``name``: ``"pass"`` or ``"best"``; default best@k when measured and
    the rewards are not 0/1; ``measure`` says how the metrics were computed)."""
    ks = tb["ks"]
    m0 = next(iter(tb["methods"].values()))
    if name is None:
        rewards = {m["config"]["reward"] for m in tb["methods"].values()}
        name = "best" if rewards - {"binary", "success", "label"} and \
            metric_key("best", ks[0]) in m0["end"] else "pass"
    lines = [f"## {title}\n"] if title else []
    sw = tb.get("sweep") or {}
    if sw.get("scores"):
        # every rate any learner was tried at (the grid plus the extensions past its edges)
        grid = sorted({r["lr"] for rs in sw["scores"].values() for r in rs})
        rows = []
        for lb, rs in sw["scores"].items():
            got = {r["lr"]: r["score"] for r in rs}
            interior = (sw.get("interior") or {}).get(lb)
            rows.append([lb, *[f"{got[v]:.4f}" if v in got else "–" for v in grid],
                         f"**{tb['methods'][lb]['config']['lr']}**"
                         + ("" if interior is None else " (interior)" if interior
                            else " (EDGE)")])
        lines.append(f"Learning-rate sweep on the validation split ({sw['seeds']} seed(s) per "
                     f"rate; score = {sw['select_by']}; starting grid {sw['grid']}, extended "
                     "past an edge until the chosen rate is interior; – = not tried):\n")
        lines.append(markdown_table(["learner", *[f"lr {v:g}" for v in grid], "selected"],
                                    rows))
        for lb, betas in (sw.get("betas") or {}).items():
            lines.append(f"\n{lb}: KL strength beta swept with the rate (best validation "
                         "score per beta; the best pair is used): "
                         + ", ".join(f"beta {b['beta']:g}: {b['score']:.4f} at lr "
                                     f"{b['lr']:g}" for b in betas)
                         + f"; chosen beta {tb['methods'][lb]['config'].get('kappo_beta')}\n")
    rows, drows = [], []
    for lb, m in tb["methods"].items():
        rows.append([lb, *[_cell(m["end"][metric_key(name, k)]) for k in ks]])
        drows.append([lb, *[_cell(np.subtract(m["end"][metric_key(name, k)],
                                              m["start"][metric_key(name, k)]))
                            for k in ks]])
    lines.append(f"\n{name}@k ({measure}), mean ± 95% t-interval over "
                 f"{len(tb['seeds'])} seeds:\n")
    lines.append(markdown_table(["learner", *[f"{name}@{k}" for k in ks]], rows))
    lines.append("\nChange from the initial policy (end − start, paired by seed):\n")
    lines.append(markdown_table(["learner", *[f"Δ{name}@{k}" for k in ks]], drows))
    arows = [[lb, *[f"{100 * np.mean(m['end'][alloc_key(b)]):.1f}%" for b in BIN_LABELS]]
             for lb, m in tb["methods"].items() if m["config"]["rollouts"] > 0
             and alloc_key(BIN_LABELS[0]) in m["end"]]
    if arows:
        lines.append("\nGradient allocation by exact pass rate (share of Σ|A_i|, SoftmaxGRPO "
                     "Table 3), accumulated over training, mean over seeds:\n")
        lines.append(markdown_table(["learner", *BIN_LABELS], arows))
    return "\n".join(lines) + "\n"


def learner_colour(label: str) -> str:
    """One colour per learner across every panel and run: ``tab10`` colour number
    ``position in LEARNERS`` as a matplotlib colour string (``"C0"``..``"C9"``), then tab20's
    light shades."""
    if label not in LEARNERS:
        raise ValueError(f"unknown learner {label!r}; known: {list(LEARNERS)}")
    i = list(LEARNERS).index(label)
    return f"C{i}" if i < 10 else _EXTRA_COLOURS[(i - 10) % len(_EXTRA_COLOURS)]


#: Colours after tab10's ten (tab20's light shades), so every learner keeps its own.
_EXTRA_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5")


def plot(results: dict[str, Any], path: Path) -> None:
    """Per reward: test pass@k / best@k vs k, and test pass@1 along training (mean over seeds).
    Each learner keeps its colour (:func:`learner_colour`) in every panel, and every top panel
    has its own legend (the reward variants train different learners)."""
    plt = pyplot(extra="lab")

    rewards = list(results)
    fig, axes = plt.subplots(2, len(rewards), figsize=(5.5 * len(rewards), 8), squeeze=False)
    for j, reward in enumerate(rewards):
        st = results[reward]
        test, ks = st["test"], st["ks"]
        name = REWARD_KINDS[reward].metric
        ax, ax2 = axes[0][j], axes[1][j]
        for lb in st["learners"]:
            idx = [t for t, s in enumerate(test["slots"]) if s["learner"] == lb]
            ys = [np.mean([test["end"][metric_key(name, k)][t] for t in idx]) for k in ks]
            style = "--" if LEARNERS[lb].control_of else "-"
            ax.plot(ks, ys, style, marker="o", ms=3, label=lb, color=learner_colour(lb))
            curve = np.asarray(test["curve_pass@1"])[idx].mean(0)
            ax2.plot(test["curve_steps"], curve, style, label=lb, color=learner_colour(lb))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel(f"test {name}@k (exact)")
        ax.set_title(f"digits, {reward} rewards, N={st['n']}")
        ax.grid(alpha=0.3)
        ax2.set_xlabel("Adam step")
        ax2.set_ylabel("test pass@1 (exact)")
        ax2.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# the command


def _spec(cfg: DigitsConfig) -> RunSpec:
    return RunSpec(n=cfg.n, steps=cfg.steps, batch_size=cfg.batch_size, hidden=cfg.hidden,
                   ks=tuple(cfg.ks), eval_every=cfg.eval_every, seed=cfg.seed,
                   kappo_bank=cfg.kappo_bank, sft_steps=cfg.sft_steps, sft_lr=cfg.sft_lr)


def run_digits(cfg: DigitsConfig, out: str | Path, *, progress: bool = True,
               resume: bool = True) -> dict[str, Any]:
    """Sweep and test every reward variant; write ``results.json`` (per reward: the sweep, the
    selected rates and the per-slot test results), ``testbeds.json`` (per-seed data for the
    claims), ``results.md``, ``digits.png`` and ``config.json`` under ``out``.

    Each finished reward variant is saved atomically to ``out/settings/``; with ``resume`` a
    rerun with the same configuration reuses it (a killed run continues where it stopped).
    """
    cfg.validate()
    out = Path(out)
    with torch_threads(cfg.threads):
        return _run_digits(cfg, out, progress=progress, resume=resume)


Ticker = Callable[[str, int], Callable[[], None]]


def run_settings(out: Path, items: Sequence[tuple[Any, str]], key: str, *, resume: bool,
                 progress: bool, prefix: str,
                 compute: Callable[[Any, Ticker], dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """``{item: compute(item, tick)}`` for ``(item, file name)`` pairs, each result saved
    atomically to ``out/settings/<file name>`` with its wall time and the config ``key``;
    with ``resume`` a saved result of the same key is reused instead of recomputed."""
    results: dict[Any, dict[str, Any]] = {}
    with Progress(disable=not progress, transient=True) as bar:
        def tick(desc: str, total: int) -> Callable[[], None]:
            task = bar.add_task(f"{prefix} {desc}", total=total)
            return lambda: bar.advance(task)

        for item, fname in items:
            part = out / "settings" / fname
            if resume and part.exists():
                saved = json.loads(part.read_text())
                if saved.get("config_key") == key:
                    results[item] = saved
                    continue
            t0 = time.perf_counter()
            st = {**compute(item, tick), "wall_seconds": time.perf_counter() - t0,
                  "config_key": key}
            write_json_atomic(part, st)
            results[item] = st
    return results


def write_outputs(out: Path, cfg: Any, results: dict[Any, dict[str, Any]],
                  data: dict[str, Any]) -> None:
    """``config.json`` (with the summed training time), ``results.json`` and the per-seed
    ``testbeds.json`` of a classification command."""
    wall = sum(st.get("wall_seconds", 0.0) for st in results.values())
    write_json_atomic(out / "config.json", {**asdict(cfg), "config_key": cfg.key(),
                                            "training_wall_seconds": wall})
    write_json_atomic(out / "results.json", results)
    write_json_atomic(out / "testbeds.json", data)


def _run_digits(cfg: DigitsConfig, out: Path, *, progress: bool, resume: bool) -> dict[str, Any]:
    key = cfg.key()
    spec = _spec(cfg)

    def compute(reward: str, tick: Ticker) -> dict[str, Any]:
        learners = [LEARNERS[lb] for lb in cfg.learners if LEARNERS[lb].applies(reward, cfg.n)]
        res = sweep_and_test(
            lambda split: make_problem(reward, split=split, test_fraction=cfg.test_fraction,
                                       val_fraction=cfg.val_fraction, seed=cfg.seed),
            learners, spec, seeds=cfg.seeds, lr_grid=cfg.lr_grid,
            sweep_seeds=cfg.sweep_seeds, progress=tick, max_extensions=cfg.max_extensions,
            kappo_betas=cfg.kappo_betas)
        return {"reward": reward, "n": cfg.n, "ks": list(cfg.ks),
                "learners": [x.label for x in learners],
                "skipped": {lb: ("binary rewards only" if LEARNERS[lb].binary_only else
                                 f"needs N >= {LEARNERS[lb].min_n}")
                            for lb in cfg.learners if not LEARNERS[lb].applies(reward, cfg.n)},
                **res}

    results = run_settings(out, [(r, f"{r}.json") for r in cfg.rewards], key, resume=resume,
                           progress=progress, prefix="digits", compute=compute)
    data = testbed_data(cfg, results)
    write_outputs(out, cfg, results, data)
    md = [f"# bestk lab digits\n\nMLP (hidden {cfg.hidden}) on scikit-learn digits, N = {cfg.n} "
          f"rollouts per image, {cfg.steps} Adam steps of {cfg.batch_size} images; "
          f"{cfg.seeds} paired seeds; learning rate per learner from a sweep over "
          f"{list(cfg.lr_grid)} on a validation split; exact evaluation on the test split.\n"]
    for reward, tb in data.items():
        md.append(render_testbed(tb, f"{reward}"))
    write_text_atomic(out / "results.md", "\n".join(md))
    plot(results, out / "digits.png")
    return results
