r"""``bestk lab kappo``: KAPPO's @k methods on exact softmax bandits reach the closed-form optimum.

Every case trains the logits :math:`\theta` of a softmax policy :math:`\pi = \mathrm{softmax}
(\theta)` on a bandit with the method's *expected* update (full enumeration, no sampling
noise), from :math:`\pi = \pi_{ref}`, until the update vanishes, and compares the policy with
the closed-form optimum of the KL-regularised @k objective
:math:`J_k(\pi) = V_k(\pi) - \beta\,\mathrm{KL}(\pi\|\pi_{ref})` (KAPPO, *@k Adaptive Pressure
for Policy Optimization*):

* **binary** (pass@k, Props. 4.1/4.2): :math:`\pi^* = \pi_{ref}\,e^{a_k R/\beta}/Z`, pass rate
  :math:`p^*(q; k, \beta)` the root of Eq. 6, :math:`a_k = k(1-p^*)^{k-1}`. Each "prompt" is a
  bandit with 2 success and 3 failure arms whose reference pass rate is exactly
  :math:`q = N/M` of a reference bank, so ``bestk.kappo.calibrate`` is exact for it.
* **win-rate** (max@k of the reference win rate, Prop. 4.7): :math:`\pi^* = \pi_{ref}\,
  e^{T(Q)/\beta}`, :math:`Q = F_{ref}(R)`. The bandit has ``K`` arms, equiprobable under
  :math:`\pi_{ref}`, with distinct rewards: arm j (by rank) stands for the reference quantile
  cell :math:`((j-1)/K, j/K]`, and the closed form's mass on it is :math:`G(j/K) - G((j-1)/K)`
  (:func:`bestk.kappo.winrate_G`). The calibration is ``calibrate`` of the K rewards (M = K,
  so the empirical CDF is exact) and the adaptive reward is the library's table,
  :math:`S_j = T(j/K)` (inclusive CDF, Algorithm 2).

Error: the total-variation distance :math:`\tfrac12\sum_a|\pi_a - \hat\pi_a|` (max over
prompts) between the trained policy and (``error``) the method's exact limit on this bandit
derived below, and (``closed_form_error``) the closed form above; binary cases also report
:math:`\max|p - p^*|`. Both errors must be at most 1e-3 where the limit is the closed form.

Fixed points (per prompt; :math:`\nabla_\theta\log\pi(a) = e_a - \pi`,
:math:`\ell = \log(\pi/\pi_{ref})`, so :math:`\nabla E_\pi[S] = \pi\odot(S - E_\pi S)` and
:math:`\nabla\mathrm{KL} = \pi\odot(\ell - E_\pi\ell)`):

(L) *Reward-side lemma.* An expected update :math:`c\,\nabla E_\pi[S] - \beta'\nabla\mathrm{KL}`
    (:math:`c, \beta' > 0`) vanishes iff :math:`cS - \beta'\ell` is constant over the arms, i.e.
    :math:`\pi \propto \pi_{ref}e^{cS/\beta'}`: the unique maximiser of the strictly concave
    :math:`cE_\pi[S] - \beta'\mathrm{KL}`.

``apo`` -- @k-A*PO, Eq. 14 on the adaptive reward, on-policy (:math:`\pi_{old} = \pi`, held
    fixed in the gradient): :math:`L = \sum_a \pi_{old}(a)(t_a - \beta\ell_a)^2`,
    :math:`\nabla_\theta L = -2\beta\,\pi\odot(r - E_\pi r)`, :math:`r = t - \beta\ell`: zero iff
    :math:`r` is constant, i.e. :math:`\pi \propto \pi_{ref}e^{t/\beta}`. Binary
    :math:`t = a_kR - \beta\log Z` gives :math:`\pi^*`; win-rate :math:`t = T_j` (Z = 1) gives
    :math:`\pi \propto \pi_{ref}e^{T_j/\beta}` (the Z = 1 convention shifts r by a constant).
    Loss: :func:`bestk.kappo.kappo_apo_loss` with ``Calibration.regression_target``.
``dpo`` -- @k-DPO, Eq. 13 with population pairs (binary only; the paper's @k-DPO is pass@k):
    :math:`y_w \sim \pi_{ref}(\cdot|R=1)`, :math:`y_l \sim \pi_{ref}(\cdot|R=0)`, labelled by the
    Bradley-Terry model of the reward, :math:`P(y_w \succ y_l) = \sigma(R_w - R_l) = \sigma(1)`.
    The expected loss :math:`\sum\rho_w\rho_l[\sigma(1)\lambda(\beta_{eff}d_{wl}) +
    \sigma(-1)\lambda(-\beta_{eff}d_{wl})]`, :math:`\lambda(x) = -\log\sigma(x)`,
    :math:`d_{wl} = \ell_w - \ell_l`, is a sum of strictly convex terms each minimised at
    :math:`\beta_{eff}d_{wl} = 1`; all are at once when :math:`\ell` is constant on successes
    and on failures with gap :math:`1/\beta_{eff} = a_k/\beta`, so the unique minimiser is
    :math:`\pi^*` (Cor. 4.3). :math:`\beta_{eff} = \beta/a_k(q)` is the population value
    (Eq. 5), not Eq. 149's finite-bank estimate. With deterministic labels (the success always
    preferred) the loss decreases in every :math:`d_{wl}` and has no minimiser: the policy
    collapses onto the successes (p -> 1), which is why the population uses Bradley-Terry
    labels. Loss: :func:`bestk.kappo.kappo_dpo_loss`.
``rloo`` / ``drgrpo`` -- reward-side @k-GRPO, the verl/TRL recipe: the adaptive reward
    (:func:`bestk.kappo.transform_rewards`) fed to bestk's ``rloo`` or to ``grpo`` with
    ``scale="none"`` (Dr.GRPO centring), group size n, plus the exact KL gradient. Both are
    linear in the group's rewards with zero row sums, :math:`A = Wr`, so
    :math:`E[A_1|y_1=a] = W_{11}(S_a - E_\pi S)` and the expected update is
    :math:`W_{11}\nabla E_\pi[S]`: :math:`W_{11} = 1` for RLOO, :math:`1 - 1/n` for Dr.GRPO (the
    mean includes the sample itself). With KL coefficient :math:`W_{11}\beta` -- :math:`\beta`
    for RLOO, :math:`\beta(n-1)/n` for Dr.GRPO, as ``examples/verl/run_gsm8k_kappo.sh`` sets it
    -- (L) gives :math:`\pi\propto\pi_{ref}e^{S/\beta}`: :math:`\pi^*` (binary) or the A*PO
    limit (win-rate). Binary cases enumerate the success count (below) with the estimators'
    own advantages; win-rate cases read :math:`W` off the estimators (advantages of the basis
    reward vectors) and check it is linear.
``kappo_grpo`` -- @k-GRPO as registered (Eq. 140, std-normalised), binary only. For any
    advantage :math:`A_i = A^\pm(s)` that depends on the sample's reward and the group's success
    count s, the expected update is :math:`\omega(p)\nabla p` with
    :math:`\omega(p) = E_s[(sA^+(s)/p - (n-s)A^-(s)/(1-p))/n]` -- given the rewards the
    completions are independent draws of :math:`\pi(\cdot|R)`, and
    :math:`E[\nabla\log\pi(y)|R=1] = \nabla p/p`, :math:`E[\cdot|R=0] = -\nabla p/(1-p)`. With
    the KL term the stationary point is :math:`\pi\propto\pi_{ref}e^{\omega(p)R/\beta}`, p the
    root of :math:`\beta(\mathrm{logit}\,p - \mathrm{logit}\,q) = \omega(p)` in :math:`(q, 1)`.
    For RLOO :math:`\omega = a_k` and this is Eq. 6; for Eq. 140,
    :math:`\omega = a_k\,\omega_{std}(p)` with the z-scores
    :math:`z^+(s) = (1 - s/n)/(\sigma_s + 10^{-6})`, :math:`z^-(s) = -(s/n)/(\sigma_s + 10^{-6})`,
    :math:`\sigma_s = \sqrt{s(n-s)/(n(n-1))}`: **not** Eq. 6 -- std-normalised @k-GRPO converges
    to this other point (tested against it; its distance from :math:`p^*` is reported as
    ``closed_form_error``). On win-rate rewards its update depends on the (n-1)-fold
    distribution of the other samples' transformed rewards under the current policy, and its
    stationary point :math:`\pi\propto\pi_{ref}e^{h_\pi(S)/\beta}` with a policy-dependent
    :math:`h_\pi` has no closed form (Eq. 144 holds only at initialisation): not run.
``direct`` -- the exact gradient of :math:`J_k` itself by autograd, a check of the closed forms
    independent of the calibration code: binary :math:`V = 1 - (1 - p)^k`, limit Prop. 4.1;
    win-rate :math:`V` = max@k of :math:`Q_j = j/K`, limit the exact discrete optimum
    (:func:`bestk.kappo.reconstruct_max_at_k`), within :math:`O(K^{-2})` of Prop. 4.7.

Discretisation: the win-rate reward-side limit :math:`\pi\propto e^{T(j/K)/\beta}` is a
right-endpoint rule for the continuum and differs from Prop. 4.7's cell masses by
:math:`O(1/K)` in total variation (about 1e-3 x 1024/K for k = 4, beta = 0.25; exact for k = 1,
where :math:`e^{T/\beta}` is an exponential); ``K`` is chosen so this stays below 1e-3.

Training: natural-gradient descent :math:`\theta \leftarrow \theta - \eta\,g/\pi` on the
method's expected update g (the preconditioner :math:`1/\pi` is positive, so the fixed points
are those of g), per prompt: for the centred updates (A*PO, the GRPO family) with
:math:`\eta = 0.5/c`, c the log-ratio coefficient of :math:`g/\pi` (:math:`2\beta^2` for A*PO,
the KL coefficient for the GRPO family) -- a damped soft-policy iteration
:math:`\ell \leftarrow \ell/2 + h/(2c)`; for the population losses (DPO, direct) with a step
that grows by 1.2 after a loss decrease and halves otherwise. Converged when
:math:`\sum_a|g_a| <` ``tol`` (1e-9); ``steps`` counts every step (see
:func:`natural_descent`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeAlias, TypedDict

import numpy as np
import torch
from rich.progress import Progress
from rich.table import Table

from bestk._atomic import write_text_atomic
from bestk._inputs import Numbers
from bestk.estimators import advantages
from bestk.kappo import (
    calibration_kind,
    kappo_apo_loss,
    kappo_dpo_loss,
    reconstruct_max_at_k,
    transform_rewards,
)
from bestk.lab.common.exact import best_at_k_exact
from bestk.lab.common.io import fmt, markdown_table, write_json_atomic
from bestk.lab.common.optim import torch_threads
from bestk.lab.kappo_bandits import (
    BINARY_ONLY,
    KINDS,
    METHODS,
    TOLERANCE,
    KappoLabConfig,
    KappoProblem,
    binary_problem,
    is_run,
    winrate_problem,
)

__all__ = [
    "KINDS",
    "METHODS",
    "TOLERANCE",
    "KappoLabConfig",
    "KappoProblem",
    "binary_problem",
    "winrate_problem",
    "Dynamics",
    "expected_update",
    "predicted_limit",
    "natural_descent",
    "grpo_std_weight",
    "kappo_convergence",
    "run_kappo",
    "render_markdown",
    "rich_table",
]

_GRPO_EPS = 1e-6  # kappo_grpo's epsilon in (S - mean) / (std + eps)

#: A ``bestk lab kappo`` result: ``cases`` (:class:`KappoCase` s) and ``skipped`` (kind,
#: method, reason), and from :func:`run_kappo` also ``config``, ``tolerance``, ``metric`` and
#: ``wall_seconds``; JSON values, read by key.
KappoResult: TypeAlias = dict[str, Any]


class _KappoCaseKeys(TypedDict):
    kind: str
    k: int
    beta: float
    method: str
    limit: str
    claims_closed_form: bool
    error: float
    closed_form_error: float
    limit_vs_closed_form: float
    pass_rate_error: float | None
    steps: int
    converged: bool


class KappoCase(_KappoCaseKeys, total=False):
    """One trained (kind, k, method) case (:func:`kappo_convergence` says what each key is)."""

    passed: bool


# ---------------------------------------------------------------------------------------------
# expected updates


def _kl_grad(pi: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    ell = pi.log() - ref.log()
    return pi * (ell - (pi * ell).sum(-1, keepdim=True))


@dataclass(frozen=True)
class Dynamics:
    """A method's expected update: ``field(theta) -> g`` (descent direction, ``(P, K)``) and
    either ``loss(theta) -> (P,)``, the population loss g is the gradient of, or ``scale``:
    for centred updates ``g / pi = -(h - E_pi h) + scale (ell - E_pi ell)`` (up to a per-row
    constant), the coefficient of the log-ratio ``ell = log(pi / pi_ref)``."""

    field: Callable[[torch.Tensor], torch.Tensor]
    loss: Callable[[torch.Tensor], torch.Tensor] | None = None
    scale: float | None = None

    def __post_init__(self) -> None:
        if (self.loss is None) == (self.scale is None):
            raise ValueError("Dynamics needs exactly one of loss and scale")


def _loss_dynamics(loss_fn: Callable[[torch.Tensor], torch.Tensor]) -> Dynamics:
    """Dynamics of a per-row loss ``(P,)``: its exact gradient, the loss as the merit."""

    def field(theta: torch.Tensor) -> torch.Tensor:
        th = theta.detach().requires_grad_(True)
        return torch.autograd.grad(loss_fn(th).sum(), th)[0]

    def loss(theta: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return loss_fn(theta)

    return Dynamics(field, loss)


def _binary_count_advantages(
    problem: KappoProblem, name: str, n: int, transform: bool, **options: Any
) -> tuple[np.ndarray, np.ndarray]:
    """``A+(s)``, ``A-(s)`` (P, n+1): the estimator's advantage of a success / failure in a
    group of n with s successes (0 where there is none)."""
    plus = np.zeros((len(problem.prompt_ids), n + 1))
    minus = np.zeros_like(plus)
    for i, pid in enumerate(problem.prompt_ids):
        for s in range(n + 1):
            r = np.array([1.0] * s + [0.0] * (n - s))
            x = transform_rewards(problem.calibration, [pid] * n, r) if transform else r
            adv = np.asarray(advantages(name, x, group=[pid] * n, **options))
            if s > 0:
                plus[i, s] = adv[0]
            if s < n:
                minus[i, s] = adv[-1]
    return plus, minus


def _omega(p: torch.Tensor, plus: torch.Tensor, minus: torch.Tensor) -> torch.Tensor:
    """omega(p) = E_s[(s A+(s)/p - (n-s) A-(s)/(1-p))/n], s ~ Bin(n, p), vectorised over rows."""
    n = plus.shape[-1] - 1
    s = torch.arange(n + 1, dtype=p.dtype)
    comb = torch.tensor([math.comb(n, j) for j in range(n + 1)], dtype=p.dtype)
    pp, qq = p[:, None], 1 - p[:, None]
    # s C(n,s) p^(s-1) (1-p)^(n-s) and (n-s) C(n,s) p^s (1-p)^(n-s-1), without dividing by p.
    w_plus = s * comb * pp.pow((s - 1).clamp(min=0)) * qq.pow(n - s)
    w_minus = (n - s) * comb * pp.pow(s) * qq.pow((n - s - 1).clamp(min=0))
    return ((w_plus * plus - w_minus * minus).sum(-1)) / n


def _linear_weight(name: str, n: int, **options: Any) -> float:
    """W_11 of an estimator linear in the group's rewards with zero row sums (checked)."""
    eye = torch.eye(n, dtype=torch.float64)
    w = advantages(name, eye, **options).T  # column g: advantages of rewards e_g
    if not torch.allclose(w.sum(1), torch.zeros(n, dtype=torch.float64), atol=1e-12):
        raise ValueError(f"{name} is not shift-invariant (rows of W do not sum to 0)")
    x = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    if not torch.allclose(advantages(name, x, **options), x @ w.T, atol=1e-10):
        raise ValueError(f"{name} is not linear in the rewards")
    return float(w[0, 0])


# (estimator, options) of each GRPO-family lab method; it runs on the transformed rewards.
_GRPO_FAMILY: dict[str, tuple[str, dict[str, str]]] = {
    "rloo": ("rloo", {}),
    "drgrpo": ("grpo", {"scale": "none"}),
}


def expected_update(method: str, problem: KappoProblem, cfg: KappoLabConfig) -> Dynamics:
    r"""``method``'s expected update on ``problem`` as :class:`Dynamics`.

    ``dpo`` and ``direct`` are the exact gradients of their population losses (returned as the
    merit too); ``apo`` is the on-policy semi-gradient of Eq. 14 (:math:`\pi_{old}` held
    fixed: not the gradient of a fixed function); the GRPO family is minus its expected ascent
    update with the exact KL gradient. One builder per method (the module docstring derives
    each): :func:`_apo_dynamics`, :func:`_dpo_dynamics`, :func:`_direct_dynamics`,
    :func:`_kappo_grpo_dynamics`, :func:`_grpo_family_dynamics`.
    """
    if not is_run(problem.kind, method):
        raise ValueError(f"{method} is not run on {problem.kind} rewards: {BINARY_ONLY[method]}")
    n = cfg.group_size
    if method == "apo":
        return _apo_dynamics(problem)
    if method == "dpo":
        return _dpo_dynamics(problem)
    if method == "direct":
        return _direct_dynamics(problem)
    if method == "kappo_grpo":
        return _kappo_grpo_dynamics(problem, n)
    if method in _GRPO_FAMILY:
        return _grpo_family_dynamics(method, problem, n)
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")


def _apo_dynamics(problem: KappoProblem) -> Dynamics:
    r"""@k-A*PO on-policy: the gradient of :math:`L = \sum_a \pi_{old}(a)(t_a - \beta\ell_a)^2`
    with :math:`\pi_{old} = \pi` held fixed (:func:`bestk.kappo.kappo_apo_loss`, targets
    ``Calibration.regression_target``); :math:`g/\pi = -2\beta(t - \beta\ell - \mathrm{mean})`,
    so ``scale`` = :math:`2\beta^2`."""
    ref, beta = problem.ref, problem.beta
    log_ref = ref.log()
    ids = np.repeat(np.asarray(problem.prompt_ids, dtype=object), ref.shape[1])
    raw = problem.rewards.expand_as(ref).reshape(-1).numpy()
    targets = torch.as_tensor(problem.calibration.regression_target(ids, raw))

    def apo(theta: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        per = kappo_apo_loss(
            logp.reshape(-1), log_ref.reshape(-1), targets, beta, reduction="none"
        ).reshape(logp.shape)
        return (per * logp.exp().detach()).sum(-1)

    # g / pi = -2 beta (t - beta ell - mean): h = 2 beta t, scale 2 beta^2.
    return Dynamics(_loss_dynamics(apo).field, scale=2 * beta * beta)


def _dpo_dynamics(problem: KappoProblem) -> Dynamics:
    r"""@k-DPO's population loss (binary): every (success w, failure l) pair weighted
    :math:`\rho_w\rho_l = \pi_{ref}(w|R=1)\,\pi_{ref}(l|R=0)`, labelled by Bradley-Terry,
    :math:`\sigma(1)\lambda(\beta_{eff}d_{wl}) + \sigma(-1)\lambda(-\beta_{eff}d_{wl})`
    (:func:`bestk.kappo.kappo_dpo_loss`, :math:`\beta_{eff}` from the calibration)."""
    ref, log_ref = problem.ref, problem.ref.log()
    succ = torch.nonzero(problem.rewards == 1)[:, 0]
    fail = torch.nonzero(problem.rewards == 0)[:, 0]
    w, lo = torch.cartesian_prod(succ, fail).T
    q = torch.from_numpy(problem.q)[:, None]
    weight = (ref[:, w] / q) * (ref[:, lo] / (1 - q))  # rho_w rho_l
    beta_eff = torch.from_numpy(problem.calibration.get("beta_eff", problem.prompt_ids))
    be = beta_eff[:, None].expand_as(weight).reshape(-1)
    up = 1.0 / (1.0 + math.exp(-1.0))  # Bradley-Terry: P(success preferred) = sigma(1)

    def dpo(theta: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        cw, cl = logp[:, w].reshape(-1), logp[:, lo].reshape(-1)
        rw, rl = log_ref[:, w].reshape(-1), log_ref[:, lo].reshape(-1)
        fwd = kappo_dpo_loss(cw, cl, rw, rl, be, reduction="none")
        bwd = kappo_dpo_loss(cl, cw, rl, rw, be, reduction="none")
        return (weight * (up * fwd + (1 - up) * bwd).reshape(weight.shape)).sum(-1)

    return _loss_dynamics(dpo)


def _direct_dynamics(problem: KappoProblem) -> Dynamics:
    r"""Minus :math:`J_k(\pi) = V_k(\pi) - \beta\,\mathrm{KL}(\pi\|\pi_{ref})` by autograd:
    binary :math:`V = 1 - (1 - p)^k`, win-rate :math:`V` = max@k of :math:`Q_j = j/K`."""
    ref, beta, k = problem.ref, problem.beta, problem.k
    log_ref = ref.log()
    if problem.calibration.kind_spec.binary:
        def value(pi: torch.Tensor) -> torch.Tensor:
            return 1 - (1 - (pi * problem.rewards).sum(-1)) ** k
    else:
        wins = torch.arange(1, ref.shape[1] + 1, dtype=torch.float64) / ref.shape[1]

        def value(pi: torch.Tensor) -> torch.Tensor:
            return best_at_k_exact(pi, wins, [k])[..., 0]

    def direct(theta: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(theta, -1)
        pi = logp.exp()
        return -(value(pi) - beta * (pi * (logp - log_ref)).sum(-1))

    return _loss_dynamics(direct)


def _kappo_grpo_dynamics(problem: KappoProblem, n: int) -> Dynamics:
    """@k-GRPO as registered (Eq. 140, binary): the success-count update
    (:func:`_count_dynamics`) of its own advantages, KL coefficient beta."""
    plus, minus = _binary_count_advantages(
        problem, "kappo_grpo", n, False, calibration=problem.calibration
    )
    return _count_dynamics(problem, plus, minus, problem.beta)


def _grpo_family_dynamics(method: str, problem: KappoProblem, n: int) -> Dynamics:
    """Reward-side @k-GRPO (``rloo``, ``drgrpo``): the estimator on the adaptive reward, KL
    coefficient ``beta W_11`` (``W_11`` = 1 for RLOO, (n-1)/n for Dr.GRPO,
    :func:`_linear_weight`); binary by the success count (:func:`_count_dynamics`), win-rate
    by linearity, ``W_11 (pi * (S - E_pi S))``."""
    name, options = _GRPO_FAMILY[method]
    c = _linear_weight(name, n, **options)
    kl_coef = problem.beta * c  # beta (n-1)/n for Dr.GRPO
    if problem.calibration.kind_spec.binary:
        plus, minus = _binary_count_advantages(problem, name, n, True, **options)
        return _count_dynamics(problem, plus, minus, kl_coef)
    ref, s_arm = problem.ref, problem.adaptive

    def linear(theta: torch.Tensor) -> torch.Tensor:
        pi = torch.softmax(theta, -1)
        up = c * pi * (s_arm - (pi * s_arm).sum(-1, keepdim=True))
        return -(up - kl_coef * _kl_grad(pi, ref))

    return Dynamics(linear, scale=kl_coef)


def _count_dynamics(problem: KappoProblem, plus: np.ndarray, minus: np.ndarray,
                    kl_coef: float) -> Dynamics:
    """The expected update of an advantage ``A+-(s)`` that depends on the sample's 0/1 reward
    and the group's success count s: ``omega(p) grad p - kl_coef grad KL`` with ``grad p =
    pi * (R - p)`` and ``omega`` from :func:`_omega`."""
    plus_t, minus_t = torch.from_numpy(plus), torch.from_numpy(minus)
    ref, r = problem.ref, problem.rewards

    def counts(theta: torch.Tensor) -> torch.Tensor:
        pi = torch.softmax(theta, -1)
        p = (pi * r).sum(-1)
        up = _omega(p, plus_t, minus_t)[:, None] * pi * (r - p[:, None])
        return -(up - kl_coef * _kl_grad(pi, ref))

    return Dynamics(counts, scale=kl_coef)


# ---------------------------------------------------------------------------------------------
# predicted limits


def grpo_std_weight(p: Numbers, n: int, eps: float = _GRPO_EPS) -> np.ndarray:
    """omega_std(p) of std-normalised GRPO on 0/1 rewards, group size n (independent formula).

    ``E_s[(s z+(s)/p - (n-s) z-(s)/(1-p))/n]``, s ~ Bin(n, p), with
    ``z+(s) = (1 - s/n)/(sigma_s + eps)``, ``z-(s) = -(s/n)/(sigma_s + eps)``,
    ``sigma_s = sqrt(s(n-s)/(n(n-1)))`` (std with n - 1); groups with s in {0, n} contribute 0.
    """
    p = np.asarray(p, dtype=np.float64)
    total = np.zeros_like(p)
    for s in range(1, n):
        sigma = math.sqrt(s * (n - s) / (n * (n - 1)))
        z_plus, z_minus = (1 - s / n) / (sigma + eps), -(s / n) / (sigma + eps)
        c = math.comb(n, s)
        total += c * s * p ** (s - 1) * (1 - p) ** (n - s) * z_plus
        total -= c * (n - s) * p**s * (1 - p) ** (n - s - 1) * z_minus
    return total / n


def _stationary_logodds(t_q: float, omega: Callable[[np.ndarray], np.ndarray], beta: float):
    """The unique root t of beta (t - t_q) = omega(sigmoid(t)), t > t_q (raises if not unique)."""
    grid_p = 1 / (1 + np.exp(-np.linspace(-40, 40, 8001)))
    hi = t_q + float(np.max(omega(grid_p))) / beta + 1.0
    t = np.linspace(t_q, hi, 20001)
    f = beta * (t - t_q) - omega(1 / (1 + np.exp(-t)))
    sign = np.flatnonzero(np.diff(np.sign(f)) != 0)
    if sign.size != 1:
        raise ValueError(f"expected one stationary point, found {sign.size}")
    lo, up = t[sign[0]], t[sign[0] + 1]
    for _ in range(200):
        mid = 0.5 * (lo + up)
        if (beta * (mid - t_q) - omega(np.array([1 / (1 + np.exp(-mid))]))[0]) < 0:
            lo = mid
        else:
            up = mid
    return 0.5 * (lo + up)


def predicted_limit(method: str, problem: KappoProblem, cfg: KappoLabConfig) -> tuple[
    torch.Tensor, str
]:
    r"""``(policy, label)``: where ``method``'s expected update converges (module docstring).

    Labels: ``"closed form"`` (Prop. 4.1), ``"std point"`` (std-normalised @k-GRPO's
    stationary point, :math:`\beta(\mathrm{logit}\,p - \mathrm{logit}\,q) = a_k\,
    \omega_{std}(p)`), ``"exp(T_j/beta)"`` (win-rate reward-side limit
    :math:`\pi\propto\pi_{ref}e^{T_j/\beta}`), ``"discrete opt."`` (exact max@k optimum of the
    discrete win rate, App. 15).
    """
    ref, beta = problem.ref, problem.beta
    if problem.calibration.kind_spec.binary:
        if method in ("apo", "dpo", "rloo", "drgrpo", "direct"):
            return problem.closed_form, "closed form"
        if method == "kappo_grpo":
            a = problem.calibration.get("a_k", problem.prompt_ids)
            n = cfg.group_size
            assert problem.q is not None  # binary problems carry their reference pass rates
            shift = np.empty(len(a))
            for i, (ai, qi) in enumerate(zip(a, problem.q, strict=True)):
                t_q = math.log(qi / (1 - qi))

                def omega(x: np.ndarray, ai: float = ai) -> np.ndarray:
                    return ai * grpo_std_weight(x, n)

                t = _stationary_logodds(t_q, omega, beta)
                shift[i] = t - t_q
            logits = ref.log() + torch.from_numpy(shift)[:, None] * problem.rewards
            return torch.softmax(logits, -1), "std point"
        raise ValueError(f"unknown method {method!r}")
    if method in ("apo", "rloo", "drgrpo"):
        return torch.softmax(ref.log() + problem.adaptive / beta, -1), "exp(T_j/beta)"
    if method == "direct":
        n_arms = ref.shape[1]
        rec = reconstruct_max_at_k(np.arange(1, n_arms + 1) / n_arms, ref[0].numpy(), problem.k,
                                   beta)
        return torch.from_numpy(rec.p)[None, :], "discrete opt."
    raise ValueError(f"{method} is not run on {problem.kind} rewards: {BINARY_ONLY[method]}")


# ---------------------------------------------------------------------------------------------
# training


def natural_descent(
    dynamics: Dynamics,
    theta0: torch.Tensor,
    *,
    step: float = 0.5,
    tol: float = 1e-9,
    max_steps: int = 5000,
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Natural-gradient descent ``theta <- theta - eta g / softmax(theta)`` to a fixed point.

    ``1/pi`` is a positive preconditioner, so the fixed points are the method's. Step sizes:

    * centred updates (:attr:`Dynamics.scale` ``= c``): ``eta = step / c``, i.e. the damped
      soft-policy iteration ``ell <- (1 - step) ell + step h / c`` (+ a per-row constant) --
      one exact step for a fixed ``h`` at ``step = 1``; a row whose update turns non-finite
      halves its step;
    * population losses: per row, ``eta`` grows by 1.2 after a step that lowers the loss (or
      leaves it equal up to rounding and lowers the residual) and halves, rejecting the step,
      otherwise.

    A row has converged when its residual ``sum_a |g_a|`` is below ``tol``, or when it has
    stalled at a float64 fixed point -- a step no longer changes any of its ``theta`` -- with
    a mean residual ``sum_a |g_a| / A`` below ``tol`` (the residual of ``A`` arms cannot fall
    below their accumulated rounding; with 2,048 win-rate arms it stops near 1e-9 on some
    CPUs). Returns ``(theta, steps, converged)`` with per-row step counts (rejected steps
    included) and flags.
    """
    theta = theta0.clone()
    rows = theta.shape[0]
    fixed = dynamics.scale is not None
    init = step / dynamics.scale if dynamics.scale is not None else step
    eta = torch.full((rows, 1), float(init), dtype=theta.dtype)

    def evaluate(th: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = dynamics.field(th)
        nat = g / torch.softmax(th, -1)
        resid = g.abs().sum(-1)
        merit = resid if dynamics.loss is None else dynamics.loss(th)  # one of the two
        bad = ~torch.isfinite(nat).all(-1) | ~torch.isfinite(merit)
        inf = torch.full_like(resid, math.inf)
        return nat, torch.where(bad, inf, resid), torch.where(bad, inf, merit)

    nat, resid, merit = evaluate(theta)
    if not bool(torch.isfinite(merit).all()):
        raise ValueError("the expected update is not finite at the reference policy")
    steps = np.full(rows, max_steps)
    done = (resid < tol).numpy()
    steps[done] = 0
    eps = torch.finfo(theta.dtype).eps
    for t in range(1, max_steps + 1):
        if done.all():
            break
        cand = theta - eta * nat
        nat_c, resid_c, merit_c = evaluate(cand)
        if fixed:
            ok = torch.isfinite(resid_c)
        else:
            tie = merit_c <= merit + 4 * eps * merit.abs()
            ok = (merit_c < merit) | (tie & (resid_c <= resid))
        theta = torch.where(ok[:, None], cand, theta)
        nat = torch.where(ok[:, None], nat_c, nat)
        resid = torch.where(ok, resid_c, resid)
        merit = torch.where(ok, merit_c, merit)
        grow = 1.0 if fixed else 1.2
        eta = torch.where(ok[:, None], eta * grow, eta * 0.5)
        stalled = (cand == theta).all(-1) & (resid < tol * theta.shape[-1])
        now = ((resid < tol) | stalled).numpy() & ~done
        steps[now] = t
        done |= now
    return theta, steps, done


def _tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(0.5 * (a - b).abs().sum(-1).max())


def _run_case(method: str, problem: KappoProblem, cfg: KappoLabConfig) -> KappoCase:
    dynamics = expected_update(method, problem, cfg)
    limit, description = predicted_limit(method, problem, cfg)
    theta, steps, done = natural_descent(
        dynamics, problem.ref.log(), step=cfg.step_size, tol=cfg.tol, max_steps=cfg.max_steps
    )
    pi = torch.softmax(theta, -1)
    error = _tv(pi, limit)
    out: KappoCase = {
        "kind": problem.kind,
        "k": problem.k,
        "beta": problem.beta,
        "method": method,
        "limit": description,
        "claims_closed_form": method != "kappo_grpo",
        "error": error,
        "closed_form_error": _tv(pi, problem.closed_form),
        "limit_vs_closed_form": _tv(limit, problem.closed_form),
        "pass_rate_error": None,
        "steps": int(steps.max()),
        "converged": bool(done.all()),
    }
    if problem.calibration.kind_spec.binary:
        p = (pi * problem.rewards).sum(-1).numpy()
        out["pass_rate_error"] = float(np.abs(p - problem.p_star).max())
    closed = out["claims_closed_form"]
    out["passed"] = bool(
        out["converged"] and error <= TOLERANCE
        and (not closed or out["closed_form_error"] <= TOLERANCE)
    )
    return out


def kappo_convergence(
    cfg: KappoLabConfig | None = None, *, progress: Callable[[str], None] | None = None
) -> KappoResult:
    """Train every (kind, k, method) case; returns ``{"cases": [...], "skipped": [...]}``.

    Each case is a dict: ``kind``, ``k``, ``beta``, ``method``, ``limit`` (what the method
    converges to, derived in the module docstring), ``claims_closed_form`` (every method but
    the std-normalised ``kappo_grpo`` is claimed to reach the closed form), ``error`` (TV
    distance, max over prompts, trained policy vs that limit), ``closed_form_error`` (vs the
    closed form of Props. 4.1 / 4.7), ``limit_vs_closed_form`` (the limit's own distance from
    the closed form: discretisation, or std-GRPO's offset), ``pass_rate_error`` (binary:
    max |p - p*|), ``steps``, ``converged`` and ``passed`` (converged, ``error`` <=
    :data:`TOLERANCE` and, where the limit is the closed form, ``closed_form_error`` <=
    :data:`TOLERANCE`). ``skipped`` lists (kind, method, reason) pairs not run. ``progress``
    is called with a label before each case.
    """
    cfg = cfg or KappoLabConfig()
    cfg.validate()
    return _convergence(cfg, progress)


def _convergence(
    cfg: KappoLabConfig, progress: Callable[[str], None] | None
) -> KappoResult:
    """:func:`kappo_convergence` of a validated ``cfg``."""
    cases: list[KappoCase] = []
    skipped = [{"kind": kind, "method": method, "reason": BINARY_ONLY[method]}
               for kind in cfg.kinds for method in cfg.methods if not is_run(kind, method)]
    with torch_threads(1):  # tiny tensors: threads only add overhead
        for kind in cfg.kinds:
            for k in cfg.ks:
                binary = calibration_kind(kind).binary
                problem = binary_problem(cfg, k) if binary else winrate_problem(cfg, k)
                for method in cfg.methods:
                    if not is_run(kind, method):
                        continue
                    if progress is not None:
                        progress(f"{kind} k={k} {method}")
                    cases.append(_run_case(method, problem, cfg))
    return {"cases": cases, "skipped": skipped}


# ---------------------------------------------------------------------------------------------
# output


def render_markdown(result: KappoResult) -> str:
    """The results as markdown (one table per reward kind)."""
    lines = [
        "# KAPPO on exact softmax bandits",
        "",
        "Trained policy vs the method's derived limit (`error`) and vs the closed-form optimum "
        "(Props. 4.1/4.2 binary, 4.7 win-rate; `closed form`), total variation, max over "
        f"prompts. Tolerance {TOLERANCE:g}. Derivations: `bestk.lab.kappo`.",
        "",
    ]
    for kind in KINDS:
        rows = [c for c in result["cases"] if c["kind"] == kind]
        if not rows:
            continue
        lines.append(f"## {kind}\n")
        header = ["k", "method", "limit", "error", "closed form", "pass-rate error", "steps",
                  "ok"]
        body = [
            [c["k"], c["method"], c["limit"], fmt(c["error"]), fmt(c["closed_form_error"]),
             "–" if c["pass_rate_error"] is None else fmt(c["pass_rate_error"]), c["steps"],
             "yes" if c["passed"] else "NO"]
            for c in rows
        ]
        lines.append(markdown_table(header, body))
    if result.get("skipped"):
        lines.append("Not run:\n")
        lines += [f"- {s['method']} on {s['kind']}: {s['reason']}" for s in result["skipped"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def rich_table(result: KappoResult) -> Table:
    """The cases as a ``rich.table.Table`` (what ``bestk lab kappo`` prints)."""
    table = Table(title=f"KAPPO on exact softmax bandits (total variation; tolerance "
                        f"{TOLERANCE:g})")
    for col in ("kind", "k", "method", "limit", "error", "closed form", "Δp", "steps", "ok"):
        table.add_column(col, justify="right" if col in ("k", "steps") else "left")
    for c in result["cases"]:
        table.add_row(
            c["kind"], str(c["k"]), c["method"], c["limit"], f"{c['error']:.1e}",
            f"{c['closed_form_error']:.1e}",
            "–" if c["pass_rate_error"] is None else f"{c['pass_rate_error']:.1e}",
            str(c["steps"]), "[green]yes[/green]" if c["passed"] else "[red]NO[/red]",
        )
    return table


def run_kappo(
    cfg: KappoLabConfig, out: str | Path, *, progress: bool = True
) -> KappoResult:
    """Run :func:`kappo_convergence`; write ``OUT/results.json`` and ``OUT/results.md``
    atomically. Returns the result dict (``config``, ``tolerance``, ``cases``, ``skipped``,
    ``wall_seconds``)."""
    cfg.validate()
    out = Path(out)
    t0 = time.perf_counter()
    with Progress(disable=not progress, transient=True) as bar:
        n_cases = sum(
            is_run(kind, method) for kind in cfg.kinds for method in cfg.methods
        ) * len(cfg.ks)
        task = bar.add_task("kappo bandits", total=n_cases)

        def tick(label: str) -> None:
            bar.update(task, advance=1, description=label)

        res = _convergence(cfg, progress=tick)  # cfg validated above
    result: KappoResult = {
        "config": asdict(cfg),
        "tolerance": TOLERANCE,
        "metric": "total variation 0.5 sum |pi - pi_hat|, max over prompts",
        **res,
        "wall_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "results.json", result)
    write_text_atomic(out / "results.md", render_markdown(result))
    return result
