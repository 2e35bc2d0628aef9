"""Exact-enumeration softmax bandits: what each estimator is unbiased for, measured exactly.

Setting
-------
A ``K``-armed bandit with a fixed reward ``v_a`` per arm and a softmax policy
``pi = softmax(theta)``. One "group" is ``N`` i.i.d. draws ``a_1..a_N ~ pi`` with rewards
``r_i = v_{a_i}``; an estimator turns them into advantages ``A_i`` and the gradient estimate is
(the GRPO scaling convention of :mod:`bestk.estimators`)

    g_hat = (1/N) sum_i A_i S_i,      S_i = grad_theta log pi(a_i) = e_{a_i} - pi.

Exact moments
-------------
Every estimator in bestk is permutation-equivariant (``A_i`` depends on ``r_i`` and the multiset
of the group's rewards), so the ``K^N`` ordered draws collapse onto the ``C(N+K-1, K-1)``
multisets (count vectors ``c``) with multinomial weights ``N!/prod c_a! prod pi_a^{c_a}``:

    E[g_hat] = sum_c P(c) g_hat(c),    Var = sum_c P(c) ||g_hat(c) - E[g_hat]||^2   (trace).

``E[g_hat]`` is compared with ``grad_theta J`` of the objective the estimator claims in the
registry (:meth:`bestk.estimators.EstimatorInfo.objective_for`, the table of ``bestk
estimators``), computed independently by autograd of the closed form of
:func:`bestk.lab.common.exact.best_at_k_exact`; an estimator that claims none (GRPO, SoftmaxGRPO) is
compared with best@1. On binary rewards the implied prompt weight
``E[g_hat].grad p / |grad p|^2`` is reported next to the one the registry predicts (from the
claimed objective, or SoftmaxGRPO's Eq. 4).

Learning curves
---------------
Each estimator trains the logits with Adam for a fixed number of rollouts (``steps * N``);
all seeds are one ``(seeds, N)`` batch per estimator call, and the exact best@k of the policy
is recorded along the way.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, TypedDict

import numpy as np
import torch
from pydantic import Field, field_validator
from rich.progress import Progress

from bestk._optional import pyplot
from bestk._schema import Int, SchemaChecks, schema_dataclass
from bestk._seeds import (
    LAB_BANDIT_CURVES,
    LAB_BANDIT_EXPLORATORY_CURVES,
    LAB_BANDIT_EXPLORATORY_SWEEP,
    LAB_BANDIT_SWEEP,
)
from bestk.estimators import EstimatorInfo, advantages, estimator_info
from bestk.estimators.objectives import Objective, best_at, joint
from bestk.figures import save_figure
from bestk.lab.common.exact import best_at_k_exact
from bestk.lab.common.io import (
    BiasRow,
    TestbedData,
    fmt,
    markdown_table,
    metric_key,
    write_json_atomic,
    write_text_atomic,
)
from bestk.lab.common.optim import SlotAdam, torch_threads
from bestk.lr_sweep import SweepRecord, fixed_rate, sweep_until_interior
from bestk.stats import mean_ci

#: ``results.json`` of ``bestk lab bandit``: ``config``, ``bias`` (the :data:`BiasRow` s),
#: ``sweep`` and ``curves`` per bandit (:class:`BanditSweep`, :class:`Curves`),
#: ``wall_seconds``; JSON values, read by key.
BanditResult: TypeAlias = dict[str, Any]


class Curves(TypedDict):
    """:func:`learning_curves`' record: the rollouts at each recorded point, the ks, each
    estimator's rate and its curve (points x seeds x ks, exact best@k)."""

    rollouts: list[int]
    ks: list[int]
    lr: dict[str, float]
    curves: dict[str, list[list[list[float]]]]


class BanditSweep(SweepRecord, total=False):
    """:func:`sweep_learning_rates`' record: the :class:`~bestk.lr_sweep.SweepRecord`, its
    seeds and score, and ``selected`` with the A/A controls' rates."""

    seeds: int
    select_by: str

__all__ = [
    "Bandit",
    "BANDITS",
    "EstimatorSpec",
    "BanditConfig",
    "multisets",
    "exact_moments",
    "objective_gradient",
    "bias_table",
    "learning_curves",
    "curve_metrics",
    "sweep_learning_rates",
    "testbed_data",
    "run_bandit",
]


# ---------------------------------------------------------------------------------------------
# problems and estimators


@dataclass(frozen=True)
class Bandit:
    """A ``K``-armed bandit: the reward of each arm and the initial policy."""

    name: str
    rewards: tuple[float, ...]
    init_probs: tuple[float, ...]
    description: str

    def __post_init__(self) -> None:
        if len(self.rewards) != len(self.init_probs) or len(self.rewards) < 2:
            raise ValueError(f"bandit {self.name!r}: rewards and init_probs need the same K >= 2")
        if abs(sum(self.init_probs) - 1.0) > 1e-9 or min(self.init_probs) <= 0:
            raise ValueError(f"bandit {self.name!r}: init_probs must be positive and sum to 1")

    @property
    def binary(self) -> bool:
        return set(self.rewards) <= {0.0, 1.0}

    def values(self) -> torch.Tensor:
        return torch.tensor(self.rewards, dtype=torch.float64)

    def init_logits(self) -> torch.Tensor:
        return torch.tensor(self.init_probs, dtype=torch.float64).log()


#: The three testbeds: binary with a rare success, graded with ties, and negative rewards.
BANDITS: dict[str, Bandit] = {
    b.name: b
    for b in [
        Bandit(
            "binary",
            (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            (0.04, 0.04, 0.32, 0.2, 0.1, 0.1, 0.1, 0.1),
            "2 of 8 arms correct, initial pass rate 0.08",
        ),
        Bandit(
            "graded",
            (1.0, 0.8, 0.8, 0.5, 0.5, 0.2, 0.0, 0.0),
            (0.02, 0.03, 0.03, 0.12, 0.12, 0.4, 0.14, 0.14),
            "rewards in [0, 1] with ties (0.8, 0.8 and 0.5, 0.5); the best arm is rare",
        ),
        Bandit(
            "negative",
            (0.5, 0.2, 0.2, -0.3, -0.5, -1.0, -1.0, -2.0),
            (0.02, 0.03, 0.03, 0.12, 0.12, 0.4, 0.14, 0.14),
            "negative rewards with ties; the best arm is rare",
        ),
    ]
}


@dataclass(frozen=True)
class EstimatorSpec:
    """An estimator run with fixed options; the objective it is compared with is the one its
    registry entry claims (:meth:`bestk.estimators.EstimatorInfo.objective_for`), unless
    ``reference`` names another (a negative control: ``argmaxrl(mean)`` against ``J_N``).
    Without an objective the reference is best@1.
    """

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    reference: Objective | None = None
    """Compare with this objective instead of the claimed one."""
    control_of: str | None = None
    """A/A control: the same estimator as the spec with this label (and its learning rate),
    trained on independent sampling noise."""

    @property
    def info(self) -> EstimatorInfo:
        return estimator_info(self.name)

    @property
    def objective(self) -> Objective | None:
        """The objective the exact gradient is compared with (``None``: claims none)."""
        return self.reference or self.info.objective_for(self.options)

    @property
    def binary_only(self) -> bool:
        return self.info.binary_rewards()

    def applies(self, bandit: Bandit, n: int) -> bool:
        """The estimator's reward domain admits the bandit's rewards and it accepts groups of
        ``n`` (its own option checks decide, e.g. PKPO's ``k <= n``)."""
        if self.binary_only and not bandit.binary:
            return False
        try:
            advantages(self.name, torch.zeros(1, n, dtype=torch.float64), **self.options)
        except ValueError:
            return False
        return True


BIAS_SPECS: list[EstimatorSpec] = [
    EstimatorSpec("reinforce", "reinforce"),
    EstimatorSpec("rloo", "rloo"),
    EstimatorSpec("grpo(scale=none)", "grpo", {"scale": "none"}),
    EstimatorSpec("grpo", "grpo"),
    EstimatorSpec("argmaxrl(loo)", "argmaxrl", {"baseline": "loo"}),
    EstimatorSpec("argmaxrl(none)", "argmaxrl", {"baseline": "none"}),
    EstimatorSpec("argmaxrl(mean)", "argmaxrl", {"baseline": "mean"}),
    EstimatorSpec("argmaxrl(mean) vs J_N", "argmaxrl", {"baseline": "mean"}, reference=joint()),
    EstimatorSpec("maxrl", "maxrl"),
    EstimatorSpec("softmax_grpo(tau=0.1)", "softmax_grpo", {"tau": 0.1}),
    EstimatorSpec("softmax_grpo(tau=1)", "softmax_grpo", {"tau": 1.0}),
    EstimatorSpec("pkpo(k=2,s)", "pkpo", {"k": 2, "variant": "s"}),
    EstimatorSpec("pkpo(k=2,sloo)", "pkpo", {"k": 2, "variant": "sloo"}),
    EstimatorSpec("pkpo(k=2,sloo-1)", "pkpo", {"k": 2, "variant": "sloo_minus_one"}),
    EstimatorSpec("pkpo(k=4,sloo-1)", "pkpo", {"k": 4, "variant": "sloo_minus_one"}),
]

CURVE_SPECS: list[EstimatorSpec] = [
    EstimatorSpec("reinforce", "reinforce"),
    EstimatorSpec("rloo", "rloo"),
    EstimatorSpec("grpo", "grpo"),
    EstimatorSpec("grpo (A/A)", "grpo", control_of="grpo"),
    EstimatorSpec("softmax_grpo(tau=0.1)", "softmax_grpo", {"tau": 0.1}),
    EstimatorSpec("maxrl", "maxrl"),
    EstimatorSpec("argmaxrl", "argmaxrl"),
    EstimatorSpec("pkpo(k=4)", "pkpo", {"k": 4}),
]

#: Exploratory arms: no claim names them; they show how more @k estimators compare. They are
#: swept and trained as a batch of their own on seed streams of their own
#: (:data:`~bestk._seeds.LAB_BANDIT_EXPLORATORY_SWEEP`, ``..._CURVES``), so adding them leaves
#: every curve of :data:`CURVE_SPECS` as it was, bit for bit.
EXPLORATORY_SPECS: list[EstimatorSpec] = [
    EstimatorSpec("passk_training(k=4)", "passk_training", {"k": 4}),
    EstimatorSpec("loo_max", "loo_max"),
]


def objective_value(objective: Objective | None, probs: torch.Tensor, values: torch.Tensor,
                    n: int) -> torch.Tensor:
    """The closed form of ``objective`` (``None`` -> best@1) at group size ``n``:
    ``sum_k c_k best@k`` over its terms, from :func:`bestk.lab.common.exact.best_at_k_exact`."""
    ks, coefs = zip(*(objective or best_at(1)).terms(n), strict=True)
    b = best_at_k_exact(probs, values, list(ks))
    return (b * torch.tensor(coefs, dtype=b.dtype, device=b.device)).sum(-1)


def objective_gradient(objective: Objective | None, logits: torch.Tensor,
                       values: torch.Tensor, n: int) -> torch.Tensor:
    """``grad_theta J(softmax(theta))`` by autograd of the closed form."""
    theta = logits.detach().clone().requires_grad_(True)
    j = objective_value(objective, torch.softmax(theta, -1), values, n)
    (g,) = torch.autograd.grad(j, theta)
    return g


# ---------------------------------------------------------------------------------------------
# exact enumeration


def multisets(k_arms: int, n: int) -> torch.Tensor:
    """All count vectors ``c`` with ``K`` non-negative entries summing to ``n``:
    ``(C(n+K-1, K-1), K)`` long tensor (stars and bars; setup code, not a hot path)."""
    if k_arms < 1 or n < 1:
        raise ValueError(f"need K >= 1 arms and n >= 1 draws, got K={k_arms}, n={n}")
    bars = torch.tensor(list(itertools.combinations(range(n + k_arms - 1), k_arms - 1)),
                        dtype=torch.long).reshape(-1, k_arms - 1)
    m = bars.shape[0]
    edges = torch.cat([torch.full((m, 1), -1), bars, torch.full((m, 1), n + k_arms - 1)], 1)
    return edges[:, 1:] - edges[:, :-1] - 1


def _draws_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """``(M, N)`` sorted arm indices of each multiset (arm ``a`` repeated ``c_a`` times)."""
    n = int(counts[0].sum())
    cum = counts.cumsum(1)
    pos = torch.arange(n).expand(counts.shape[0], n).contiguous()
    return torch.searchsorted(cum, pos, right=True)


def exact_moments(spec: EstimatorSpec, logits: torch.Tensor, values: torch.Tensor,
                  n: int) -> dict[str, torch.Tensor]:
    """Exact mean ``(K,)`` and covariance trace of ``g_hat`` over all draws of ``n`` arms."""
    k_arms = logits.shape[0]
    probs = torch.softmax(logits.to(torch.float64), -1)
    counts = multisets(k_arms, n)
    draws = _draws_from_counts(counts)  # (M, n)
    log_w = (math.lgamma(n + 1) - torch.lgamma(counts.to(torch.float64) + 1).sum(1)
             + (counts.to(torch.float64) * probs.log()).sum(1))
    weight = log_w.exp()  # (M,)
    rewards = values[draws]  # (M, n)
    adv = advantages(spec.name, rewards, **spec.options)  # (M, n) float64 tensor
    onehot_sum = torch.zeros(draws.shape[0], k_arms, dtype=torch.float64)
    onehot_sum.scatter_add_(1, draws, adv)
    g = (onehot_sum - adv.sum(1, keepdim=True) * probs) / n  # (M, K)
    mean = (weight[:, None] * g).sum(0)
    var = (weight * ((g - mean) ** 2).sum(1)).sum()
    return {"mean": mean, "var": var, "total_prob": weight.sum()}


def ordered_moments(spec: EstimatorSpec, logits: torch.Tensor, values: torch.Tensor,
                    n: int) -> dict[str, torch.Tensor]:
    """Same as :func:`exact_moments` by brute force over all ``K^n`` ordered draws (small
    cases only; the independent check of the multiset reduction)."""
    k_arms = logits.shape[0]
    if k_arms**n > 2_000_000:
        raise ValueError(f"K^n = {k_arms}^{n} ordered draws is too many for brute force")
    probs = torch.softmax(logits.to(torch.float64), -1)
    draws = torch.cartesian_prod(*[torch.arange(k_arms)] * n).reshape(-1, n)
    weight = probs[draws].prod(1)
    adv = advantages(spec.name, values[draws], **spec.options)
    score = torch.nn.functional.one_hot(draws, k_arms).to(torch.float64) - probs  # (M, n, K)
    g = (adv[..., None] * score).sum(1) / n
    mean = (weight[:, None] * g).sum(0)
    var = (weight * ((g - mean) ** 2).sum(1)).sum()
    return {"mean": mean, "var": var, "total_prob": weight.sum()}


def bias_row(spec: EstimatorSpec, bandit: Bandit, n: int,
             logits: torch.Tensor | None = None) -> BiasRow:
    """Exact bias / variance of one estimator on one bandit at group size ``n``."""
    values = bandit.values()
    logits = bandit.init_logits() if logits is None else logits
    mom = exact_moments(spec, logits, values, n)
    mean = mom["mean"]
    objective = spec.objective
    ref = objective_gradient(objective, logits, values, n)
    ref_norm = float(ref.norm())
    mean_norm = float(mean.norm())
    row: BiasRow = {
        "estimator": spec.label,
        "name": spec.name,
        "options": dict(spec.options),
        "N": n,
        "objective": "none" if objective is None else objective.name,
        "unbiased_claim": objective is not None,
        "rel_bias": float((mean - ref).norm()) / ref_norm,
        "abs_bias": float((mean - ref).norm()),
        "cosine": float(mean @ ref) / (mean_norm * ref_norm) if mean_norm > 0 else 0.0,
        "var": float(mom["var"]),
        "var_over_signal": float(mom["var"]) / mean_norm**2 if mean_norm > 0 else float("inf"),
        "expected_grad": mean.tolist(),
        "objective_grad": ref.tolist(),
    }
    if bandit.binary:
        # Implied prompt weight omega: E[g_hat] = omega * grad p (exact for binary rewards).
        grad_p = objective_gradient(best_at(1), logits, values, n)
        row["implied_weight"] = float(mean @ grad_p) / float(grad_p @ grad_p)
        row["pass_rate"] = float(best_at_k_exact(torch.softmax(logits, -1), values, [1])[0])
        row["theory_weight"] = theory_weight(spec, row["pass_rate"], n)
    return row


def theory_weight(spec: EstimatorSpec, p: float, n: int) -> float | None:
    """The binary prompt weight ``omega(p)`` the registry predicts for ``spec`` at group size
    ``n``, in the lab's ``(1/N) sum_i A_i S_i`` scaling
    (:meth:`bestk.estimators.EstimatorInfo.binary_prompt_weight`: from the claimed objective,
    e.g. MaxRL's ``(1-(1-p)^N)/p`` for ``J_N`` (SoftmaxGRPO Table 1), or from the estimator's
    own closed form, SoftmaxGRPO's Eq. 4); ``None`` if it has neither."""
    return spec.info.binary_prompt_weight(p, n, spec.options)


def bias_table(bandits: Sequence[Bandit], ns: Sequence[int],
               specs: Sequence[EstimatorSpec] = BIAS_SPECS) -> list[BiasRow]:
    """:func:`bias_row` for every applicable (bandit, N, estimator)."""
    rows = []
    for b in bandits:
        for n in ns:
            for s in specs:
                if s.applies(b, n):
                    rows.append({"bandit": b.name, **bias_row(s, b, n)})
    return rows


# ---------------------------------------------------------------------------------------------
# learning curves


def learning_curves(bandit: Bandit, specs: Sequence[EstimatorSpec], *, n: int, steps: int,
                    seeds: int, lr: float | dict[str, float],
                    ks: Sequence[int], eval_every: int, seed: int = 0,
                    progress: Callable[..., object] | None = None) -> Curves:
    """Train the softmax policy with each estimator (Adam on the logits, ``steps`` groups of
    ``n`` rollouts, ``seeds`` independent runs batched) and record the exact best@k.

    ``lr`` is one learning rate for every spec or a mapping label -> rate. Every
    (estimator, seed) draws its own rollouts, so an A/A copy of an estimator sees independent
    sampling noise. Returns ``{"rollouts": [...], "ks": [...], "lr": {label: rate},
    "curves": {label: (n_evals, seeds, len(ks)) list}}``.
    """
    specs = [s for s in specs if s.applies(bandit, n)]
    if isinstance(lr, dict):
        rates = [float(lr[s.label]) for s in specs]
    elif isinstance(lr, (int, float)):
        rates = [float(lr)] * len(specs)
    else:
        raise ValueError(f"lr must be one learning rate or a mapping label -> rate, got "
                         f"{type(lr).__name__}")
    values = bandit.values()
    k_arms = values.shape[0]
    n_est = len(specs)
    theta = bandit.init_logits().expand(n_est, seeds, k_arms).clone().requires_grad_(True)
    opt = SlotAdam([theta], torch.tensor(rates, dtype=torch.float64)[:, None, None])
    gen = torch.Generator().manual_seed(seed)
    evals: list[torch.Tensor] = []
    rollouts: list[int] = []

    def record(step: int) -> None:
        with torch.no_grad():
            evals.append(best_at_k_exact(torch.softmax(theta, -1), values, ks))
        rollouts.append(step * n)

    record(0)
    for step in range(1, steps + 1):
        with torch.no_grad():
            probs = torch.softmax(theta, -1)
            draws = torch.multinomial(probs.reshape(-1, k_arms), n, replacement=True,
                                      generator=gen).reshape(n_est, seeds, n)
            rewards = values[draws]
            adv = torch.stack([
                advantages(s.name, rewards[e], **s.options) for e, s in enumerate(specs)
            ])  # (E, S, n)
            onehot_sum = torch.zeros_like(probs).scatter_add_(2, draws, adv)
            g = (onehot_sum - adv.sum(2, keepdim=True) * probs) / n
        opt.zero_grad()
        theta.grad = -g  # gradient ascent on the estimated objective
        opt.step()
        if step % eval_every == 0 or step == steps:
            record(step)
        if progress is not None:
            progress()
    stacked = torch.stack(evals)  # (T, E, S, len(ks))
    return {
        "rollouts": rollouts,
        "ks": list(ks),
        "lr": {s.label: r for s, r in zip(specs, rates, strict=True)},
        "curves": {s.label: stacked[:, e].tolist() for e, s in enumerate(specs)},
    }


def curve_metrics(curves: Curves, label: str, binary: bool) -> dict[str, dict[str, list[float]]]:
    """Per-seed metrics of one estimator's learning curve: ``end`` = best@k (and pass@k on
    binary rewards) averaged over the recorded points of the curve (the area under the
    learning curve divided by its length, so every budget counts), ``start`` = the initial
    policy's values."""
    arr = np.asarray(curves["curves"][label])  # (T, S, K)
    auc, first = arr.mean(0), arr[0]
    out: dict[str, dict[str, list[float]]] = {"start": {}, "end": {}}
    names = ("best", "pass") if binary else ("best",)
    for j, k in enumerate(curves["ks"]):
        for name in names:
            out["end"][metric_key(name, k)] = auc[:, j].tolist()
            out["start"][metric_key(name, k)] = first[:, j].tolist()
    return out


def sweep_learning_rates(bandit: Bandit, specs: Sequence[EstimatorSpec], config: BanditConfig,
                         seed: int) -> BanditSweep:
    """Each estimator's learning rate from ``config.lr_grid``, extended until the chosen rate
    is interior (:func:`bestk.lr_sweep.sweep_until_interior`): the rate with the highest
    mean over k of the curve-averaged best@k on ``config.sweep_seeds`` seeds of their own (a
    stream disjoint from the test seeds); A/A controls take their estimator's rate."""
    specs = [s for s in specs if s.applies(bandit, config.curve_n)]
    tuned = {s.label: s for s in specs if s.control_of is None}

    def score(want: Mapping[str, Sequence[float]]) -> dict[str, dict[float, float]]:
        got: dict[str, dict[float, float]] = {lb: {} for lb in want}
        for j in range(max(len(v) for v in want.values())):
            labels = [lb for lb, v in want.items() if len(v) > j]
            rates = {lb: float(want[lb][j]) for lb in labels}
            cur = learning_curves(bandit, [tuned[lb] for lb in labels], n=config.curve_n,
                                  steps=config.steps, seeds=config.sweep_seeds, lr=rates,
                                  ks=config.ks, eval_every=config.eval_every, seed=seed)
            for lb in labels:
                got[lb][rates[lb]] = float(np.asarray(cur["curves"][lb]).mean())
        return got

    if len(config.lr_grid) == 1:
        only = float(config.lr_grid[0])
        sweep = fixed_rate(list(tuned), only)
    else:
        sweep = sweep_until_interior(score, list(tuned), config.lr_grid,
                                     max_extensions=config.max_extensions,
                                     tol=config.sweep_tolerance)
    selected = dict(sweep["selected"])
    for s in specs:
        if s.control_of is not None:
            selected[s.label] = selected[s.control_of]
    return {**sweep, "seeds": config.sweep_seeds,
            "select_by": "mean over k of the curve-averaged best@k (independent seeds)",
            "selected": selected}


def merge_sweeps(first: BanditSweep, second: BanditSweep) -> BanditSweep:
    """One sweep record of two sweeps over disjoint learners (the exploratory arms' own sweep
    after the claimed arms'): the per-learner tables united, the shared fields the first's."""
    out: dict[str, Any] = dict(first)
    for key, value in second.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        elif key not in out:
            out[key] = value
    return out  # type: ignore[return-value]  # the keys of a BanditSweep, united


# ---------------------------------------------------------------------------------------------
# the command


@schema_dataclass
class BanditConfig(SchemaChecks):
    """Knobs of ``bestk lab bandit``.

    Attributes
    ----------
    bandits: names from :data:`BANDITS` to run.
    ns: group sizes for the exact bias / variance table.
    curve_n: group size used by the learning curves.
    steps: optimisation steps per learning curve (rollouts = steps * curve_n).
    seeds: independent runs per estimator (batched).
    lr_grid: Adam learning rates on the logits; each estimator takes the best of them on
        ``sweep_seeds`` seeds of their own, the grid extended past an edge until the best
        rate is interior (:mod:`bestk.lr_sweep`; one value: no sweep).
    max_extensions: most rates added past the grid's edges for one estimator.
    sweep_tolerance: rates scoring within this of the best count as tied (the smaller wins):
        on the binary bandit every fast enough rate reaches pass@k ~ 1 and the score
        saturates.
    sweep_seeds: runs per (estimator, learning rate) of the sweep.
    ks: k values of the recorded best@k.
    eval_every: steps between two recorded points.
    seed: base RNG seed (the whole run is deterministic given it).
    threads: torch CPU threads during the run (0 keeps torch's default; 1 is fastest here).
    """

    bandits: tuple[str, ...] = ("binary", "graded", "negative")
    ns: tuple[Int, ...] = (4, 8)
    curve_n: Int = Field(8, ge=1)
    steps: Int = Field(300, ge=1)
    seeds: Int = Field(64, ge=1)
    lr_grid: tuple[float, ...] = (0.003, 0.01, 0.03)
    max_extensions: Int = Field(4, ge=0)
    sweep_tolerance: float = Field(1e-3, ge=0)
    sweep_seeds: Int = Field(8, ge=2)
    ks: tuple[Int, ...] = (1, 2, 4, 8, 16, 32)
    eval_every: Int = Field(10, ge=1)
    seed: Int = 0
    threads: Int = 1

    @field_validator("bandits")
    @classmethod
    def _known_bandits(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [b for b in v if b not in BANDITS]
        if unknown:
            raise ValueError(f"unknown bandit(s) {unknown}; valid: {', '.join(BANDITS)}")
        return v

    @field_validator("ns")
    @classmethod
    def _group_sizes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or min(v) < 2:
            raise ValueError(f"ns must be group sizes >= 2, got {v}")
        return v

    @field_validator("ks")
    @classmethod
    def _positive_ks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or min(v) < 1:
            raise ValueError(f"ks must be positive, got {v}")
        return v

    @field_validator("lr_grid", mode="before")
    @classmethod
    def _positive_lrs(cls, v: object) -> object:
        if not isinstance(v, (list, tuple)) or not v or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                and math.isfinite(x) for x in v):
            raise ValueError(f"lr_grid must be positive numbers, got {v}")
        return v

    @classmethod
    def fast(cls) -> BanditConfig:
        """Seconds-long settings for tests."""
        return cls(ns=(4,), curve_n=4, steps=20, seeds=4, eval_every=5, ks=(1, 4),
                   lr_grid=(0.01, 0.05), sweep_seeds=2)


def _summary_rows(curves: Curves, t: int) -> list[list[str]]:
    """``mean ± CI`` of best@k over seeds at recorded point ``t`` for each estimator."""
    ks = curves["ks"]
    rows = []
    for label, c in curves["curves"].items():
        final = np.asarray(c[t])  # (S, len(ks))
        cells = []
        for j in range(len(ks)):
            m, h = mean_ci(final[:, j])
            cells.append(f"{m:.3f} ± {h:.3f}")
        rows.append([label, *cells])
    return rows


def render_markdown(result: BanditResult) -> str:
    """The markdown report of a bandit run (bias table + final best@k)."""
    cfg = result["config"]
    out = ["# bestk lab bandit\n",
           "Exact enumeration over all multisets of N draws of a softmax policy "
           "(the initial policy of each bandit). `rel. bias` = |E[g] - grad J| / |grad J| "
           "against the gradient of the objective in column 2 (autograd of its closed form); "
           "`none` means the estimator claims no objective and is compared with best@1. "
           "`var` = trace of Cov[g_hat]; `var/‖E g‖²` is scale free. On binary rewards "
           "E[g] = ω(p) grad p exactly; `implied weight` is that ω measured from the "
           "enumeration, `predicted ω(p)` the closed form the estimator registry gives (from the "
           "claimed objective, SoftmaxGRPO Table 1, or SoftmaxGRPO Eq. 4) in the same (1/N) "
           "scaling.\n"]
    for bname in cfg["bandits"]:
        b = BANDITS[bname]
        out.append(f"## {bname}: {b.description}\n")
        out.append(f"rewards {list(b.rewards)}, initial policy {list(b.init_probs)}\n")
        rows = [r for r in result["bias"] if r["bandit"] == bname]
        header = ["N", "estimator", "unbiased for", "rel. bias", "cos(E g, grad J)", "var",
                  "var/‖E g‖²"]
        if b.binary:
            header += ["implied weight ω(p)", "predicted ω(p)"]
        body = []
        for r in rows:
            line = [r["N"], r["estimator"], r["objective"], fmt(r["rel_bias"]),
                    fmt(r["cosine"], 4), fmt(r["var"]), fmt(r["var_over_signal"])]
            if b.binary:
                tw = r.get("theory_weight")
                line += [fmt(r["implied_weight"]), "–" if tw is None else fmt(tw)]
            body.append(line)
        out.append(markdown_table(header, body))
        cur = result["curves"][bname]
        sw = result.get("sweep", {}).get(bname)
        if sw:
            out.append(f"\nLearning rate per estimator (sweep over {sw['grid']} on "
                       f"{sw['seeds']} seeds of their own; {sw['select_by']}): "
                       + ", ".join(f"{lb} {v}" for lb, v in sw["selected"].items()) + "\n")
        n_points = len(cur["rollouts"])
        for t in sorted({n_points // 2, n_points - 1}):
            out.append(f"\nbest@k after {cur['rollouts'][t]} rollouts "
                       f"(N={cfg['curve_n']}, Adam with each estimator's selected learning "
                       f"rate, mean ± 95% CI over {cfg['seeds']} seeds):\n")
            out.append(markdown_table(["estimator", *[f"best@{k}" for k in cur["ks"]]],
                                      _summary_rows(cur, t)))
        out.append("")
    return "\n".join(out)


def plot_curves(result: BanditResult, path: Path) -> None:
    """One row per bandit, one column per plotted k: mean best@k vs rollouts."""
    plt = pyplot(extra="lab")

    cfg = result["config"]
    names = cfg["bandits"]
    ks = cfg["ks"]
    show = [k for k in (1, 4, 16) if k in ks] or list(ks)[:3]
    cmap = plt.get_cmap("tab10")
    color = {s.label: cmap(i % 10)
             for i, s in enumerate([*CURVE_SPECS, *EXPLORATORY_SPECS])}
    fig, axes = plt.subplots(len(names), len(show), figsize=(4.2 * len(show), 3.2 * len(names)),
                             squeeze=False)
    for i, bname in enumerate(names):
        cur = result["curves"][bname]
        x = cur["rollouts"]
        for j, k in enumerate(show):
            ax = axes[i][j]
            kj = cur["ks"].index(k)
            for label, c in cur["curves"].items():
                arr = np.asarray(c)[:, :, kj]  # (T, S)
                m = arr.mean(1)
                se = arr.std(1, ddof=1) / math.sqrt(arr.shape[1]) if arr.shape[1] > 1 else 0 * m
                c = color.get(label)
                ax.plot(x, m, label=label, color=c)
                ax.fill_between(x, m - 1.96 * se, m + 1.96 * se, alpha=0.15, color=c)
            ax.set_title(f"{bname}: best@{k}")
            ax.set_xlabel("rollouts")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def testbed_data(result: BanditResult) -> dict[str, TestbedData]:
    """Per-seed data for the claims: one testbed per bandit (``bandit-<name>``; metrics from
    :func:`curve_metrics`) and ``bandit-exact`` (the bias / variance table without the
    gradient vectors)."""
    cfg = result["config"]
    out: dict[str, TestbedData] = {}
    for bname, cur in result["curves"].items():
        b = BANDITS[bname]
        methods = {}
        for spec in [*CURVE_SPECS, *EXPLORATORY_SPECS]:
            if spec.label not in cur["curves"]:
                continue
            m = curve_metrics(cur, spec.label, b.binary)
            methods[spec.label] = {
                "config": {
                    "exploratory": spec in EXPLORATORY_SPECS,
                    "estimator": spec.name, "options": dict(spec.options), "reward": bname,
                    "prompts": f"bandit {bname}: rewards {list(b.rewards)}, initial policy "
                               f"{list(b.init_probs)}",
                    "rollouts": cfg["curve_n"] * cfg["steps"], "lr": cur["lr"][spec.label],
                    "control_of": spec.control_of,
                    "sampling": "independent (A/A control of " + spec.control_of + ")"
                    if spec.control_of else "per-run draws",
                },
                **m,
            }
        sweep = {k: v for k, v in result.get("sweep", {}).get(bname, {}).items()
                 if k != "selected"}
        out[f"bandit-{bname}"] = {"ks": list(cur["ks"]), "seeds": list(range(cfg["seeds"])),
                                  "n": cfg["curve_n"], "methods": methods, "sweep": sweep}
    out["bandit-exact"] = {"bias": [{k: v for k, v in r.items()
                                     if k not in ("expected_grad", "objective_grad")}
                                    for r in result["bias"]]}
    return out


def run_bandit(config: BanditConfig, out: str | Path, *, progress: bool = True) -> BanditResult:
    """Run the bias table and the learning curves; write ``results.json``, ``results.md``
    and ``curves.png`` under ``out``. Returns the result dictionary."""
    config.validate()
    with torch_threads(config.threads):
        return _run_bandit(config, Path(out), progress=progress)


def _run_bandit(config: BanditConfig, out: Path, *, progress: bool) -> BanditResult:
    t0 = time.perf_counter()
    bandits = [BANDITS[b] for b in config.bandits]
    result: BanditResult = {"config": asdict(config), "bias": bias_table(bandits, config.ns),
                              "curves": {}}
    with Progress(disable=not progress, transient=True) as bar:
        for i, b in enumerate(bandits):
            task = bar.add_task(f"bandit {b.name}", total=config.steps)
            sweep = sweep_learning_rates(b, CURVE_SPECS, config,
                                         seed=LAB_BANDIT_SWEEP.seed(config.seed, bandit=i))
            curves = learning_curves(
                b, CURVE_SPECS, n=config.curve_n, steps=config.steps, seeds=config.seeds,
                lr=sweep["selected"], ks=config.ks, eval_every=config.eval_every,
                seed=LAB_BANDIT_CURVES.seed(config.seed, bandit=i),
                progress=lambda t=task: bar.advance(t))
            extra = [s for s in EXPLORATORY_SPECS if s.applies(b, config.curve_n)]
            if extra:  # their own batch and seed streams: the curves above stay as they are
                more = sweep_learning_rates(b, extra, config,
                                            seed=LAB_BANDIT_EXPLORATORY_SWEEP.seed(config.seed, i))
                more_curves = learning_curves(
                    b, extra, n=config.curve_n, steps=config.steps, seeds=config.seeds,
                    lr=more["selected"], ks=config.ks, eval_every=config.eval_every,
                    seed=LAB_BANDIT_EXPLORATORY_CURVES.seed(config.seed, i))
                sweep = merge_sweeps(sweep, more)
                curves["lr"].update(more_curves["lr"])
                curves["curves"].update(more_curves["curves"])
            result.setdefault("sweep", {})[b.name] = sweep
            result["curves"][b.name] = curves
    result["wall_seconds"] = time.perf_counter() - t0
    write_json_atomic(out / "results.json", result)
    write_text_atomic(out / "results.md", render_markdown(result))
    plot_curves(result, out / "curves.png")
    return result
