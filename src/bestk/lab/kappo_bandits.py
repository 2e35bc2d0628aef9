r"""The bandits of ``bestk lab kappo``: its settings, and the problems with their optima.

:class:`KappoLabConfig` holds the command's settings; :func:`binary_problem` builds binary
prompts whose reference pass rate is exactly ``N / M`` of a bank (Prop. 4.1's optimum
:math:`\pi^* = \pi_{ref}\,e^{a_k R/\beta}/Z`), :func:`winrate_problem` a ``K``-arm bandit
equiprobable under the reference (Prop. 4.7's cell masses :math:`G(j/K) - G((j-1)/K)`). The
dynamics, the derived limits and the training are :mod:`bestk.lab.kappo`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pydantic import Field, ValidationInfo, field_validator, model_validator

from bestk._schema import Float, Int, SchemaChecks, schema_dataclass
from bestk._seeds import LAB_KAPPO_BINARY, LAB_KAPPO_WINRATE
from bestk.kappo import (
    Calibration,
    calibrate,
    calibration_kind,
    solve_p_star,
    transform_rewards,
    winrate_G,
)

KINDS = ("binary", "winrate")
METHODS = ("apo", "dpo", "kappo_grpo", "rloo", "drgrpo", "direct")
#: Claimed accuracy: total variation between the trained policy and its limit.
TOLERANCE = 1e-3
BINARY_ONLY = {
    "dpo": "@k-DPO is the pass@k (binary) instantiation (KAPPO Sec. 5)",
    "kappo_grpo": (
        "std-normalised @k-GRPO on win-rate rewards has a policy-dependent stationary point "
        "with no closed form (see the module docstring)"
    ),
}


def is_run(kind: str, method: str) -> bool:
    """Whether ``method`` is run on ``kind`` rewards (:data:`BINARY_ONLY` says why not)."""
    return calibration_kind(kind).binary or method not in BINARY_ONLY


@schema_dataclass
class KappoLabConfig(SchemaChecks):
    """Settings of ``bestk lab kappo`` (defaults: the full run; :meth:`fast` for tests)."""

    #: Objective parameters k.
    ks: tuple[Int, ...] = (1, 2, 4)
    #: Methods to train (:mod:`bestk.lab.kappo` derives each one's limit).
    methods: tuple[str, ...] = METHODS
    #: Reward kinds.
    kinds: tuple[str, ...] = KINDS
    #: KL strength of the binary bandits.
    beta_binary: Float = Field(0.1, gt=0)
    #: KL strength of the win-rate bandit.
    beta_winrate: Float = Field(0.25, gt=0)
    #: Reference bank size M of the binary prompts (their pass rates are N / M exactly).
    bank_size: Int = Field(20, ge=2)
    #: Reference successes N of each binary prompt (0 < N < M).
    successes: tuple[Int, ...] = (1, 5, 12, 18)
    #: Success / failure arms of each binary prompt.
    success_arms: Int = Field(2, ge=2)
    failure_arms: Int = Field(3, ge=2)
    #: Arms of the win-rate bandit (its reference quantile grid).
    winrate_arms: Int = Field(8192, ge=2)
    #: Group size n of the GRPO-family estimators.
    group_size: Int = Field(8, ge=2)
    #: Natural-gradient step: the damping of centred updates, the first step of losses.
    step_size: Float = Field(0.5, gt=0)
    #: Converged when sum_a |g_a| < tol (per prompt).
    tol: Float = Field(1e-9, gt=0)
    #: Step budget per case.
    max_steps: Int = Field(5000, ge=1)
    #: Seed of the reference policies (within-class probabilities, win-rate rewards).
    seed: Int = 0

    @field_validator("ks")
    @classmethod
    def _positive_ks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or min(v) < 1:
            raise ValueError(f"ks must be integers >= 1, got {v!r}")
        return v

    @field_validator("methods", "kinds")
    @classmethod
    def _known(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        allowed = METHODS if info.field_name == "methods" else KINDS
        bad = [x for x in v if x not in allowed]
        if not v or bad:
            raise ValueError(f"unknown {info.field_name} {bad or v!r}; valid: {', '.join(allowed)}")
        return v

    @model_validator(mode="after")
    def _successes_inside_the_bank(self) -> KappoLabConfig:
        m = self.bank_size
        if not self.successes or any(not 0 < n < m for n in self.successes):
            raise ValueError(
                f"successes must be integers strictly between 0 and bank_size={m}, got "
                f"{self.successes!r}"
            )
        return self

    @classmethod
    def fast(cls) -> KappoLabConfig:
        """Seconds-long settings for tests: fewer prompts, a coarser win-rate grid."""
        return cls(successes=(2, 13), winrate_arms=2048)


@dataclass
class KappoProblem:
    """One kind and one k: the bandits (one row per prompt), their calibration and optimum."""

    kind: str
    k: int
    beta: float
    ref: torch.Tensor  # (P, K) reference policies
    rewards: torch.Tensor  # (K,) rewards of the arms (shared by the prompts)
    prompt_ids: list[str]
    calibration: Calibration
    adaptive: torch.Tensor  # (P, K) the adaptive reward of each arm (transform_rewards)
    closed_form: torch.Tensor  # (P, K) the closed-form optimum
    q: np.ndarray | None = None  # binary: reference pass rates
    p_star: np.ndarray | None = None  # binary: optimal pass rates


def binary_problem(cfg: KappoLabConfig, k: int) -> KappoProblem:
    """Binary prompts with reference pass rates N/M and their Prop. 4.1 optimum."""
    rng = np.random.default_rng(LAB_KAPPO_BINARY.seed(cfg.seed))
    m, s, f = cfg.bank_size, cfg.success_arms, cfg.failure_arms
    q = np.asarray(cfg.successes, dtype=np.float64) / m
    ref = np.empty((q.size, s + f))
    for i, qi in enumerate(q):
        ref[i, :s] = rng.dirichlet(np.ones(s)) * qi
        ref[i, s:] = rng.dirichlet(np.ones(f)) * (1 - qi)
    ids = [f"prompt-{n}-of-{m}" for n in cfg.successes]
    bank = {pid: [1] * n + [0] * (m - n) for pid, n in zip(ids, cfg.successes, strict=True)}
    cal = calibrate(bank, k=k, beta=cfg.beta_binary, kind="binary")
    rewards = torch.tensor([1.0] * s + [0.0] * f, dtype=torch.float64)
    adaptive = transform_rewards(cal, ids, rewards.expand(len(ids), -1).contiguous())
    p_star = solve_p_star(q, k, cfg.beta_binary)
    # Prop. 4.1 through p*: success arms scale by p*/q, failure arms by (1-p*)/(1-q).
    scale = np.where(rewards.numpy()[None, :] == 1, (p_star / q)[:, None],
                     ((1 - p_star) / (1 - q))[:, None])
    return KappoProblem(
        "binary", k, cfg.beta_binary, torch.from_numpy(ref), rewards, ids, cal, adaptive,
        torch.from_numpy(ref * scale), q=q, p_star=p_star,
    )


def winrate_problem(cfg: KappoLabConfig, k: int) -> KappoProblem:
    """A K-arm bandit equiprobable under the reference, and Prop. 4.7's cell masses."""
    rng = np.random.default_rng(LAB_KAPPO_WINRATE.seed(cfg.seed))
    n_arms = cfg.winrate_arms
    values = np.sort(rng.normal(size=n_arms))
    if np.any(np.diff(values) <= 0):  # pragma: no cover - measure-zero event
        raise ValueError("win-rate bandit rewards are not distinct; change the seed")
    ids = ["winrate"]
    cal = calibrate({ids[0]: values}, k=k, beta=cfg.beta_winrate, kind="winrate")
    rewards = torch.from_numpy(values)
    adaptive = transform_rewards(cal, ids, rewards[None, :])
    cells = np.diff(winrate_G(np.arange(n_arms + 1) / n_arms, k, cfg.beta_winrate))
    ref = torch.full((1, n_arms), 1.0 / n_arms, dtype=torch.float64)
    return KappoProblem(
        "winrate", k, cfg.beta_winrate, ref, rewards, ids, cal, adaptive,
        torch.from_numpy(cells[None, :]),
    )

