r"""``apo``: @k-A*PO, least-squares regression on KAPPO's adaptive reward (KAPPO Sec. 5, Eq. 14).

A*PO (Brantley et al., *Accelerating RL for LLM Reasoning with Optimal Advantage Regression*,
2025, arXiv:2505.20686) fits the KL-regularised optimum
:math:`\pi^* \propto \pi_{ref}\,e^{R/\beta}` directly: with :math:`V^*(x) = \beta\log
E_{\pi_{ref}}[e^{R/\beta}]` estimated once from reference samples, it minimises, over
completions from the current policy,

.. math:: L(\theta) = E_{x\sim D,\,y\sim\pi_{old}(\cdot|x)}\Big[\big(R(y,x) - V^*(x)
          - \beta\log\tfrac{\pi_\theta(y|x)}{\pi_{ref}(y|x)}\big)^2\Big] .

@k-A*PO substitutes KAPPO's calibrated target :math:`t(y, x)` for :math:`R - V^*` (the
reference calibration is the value estimate):

* binary (0/1 success): :math:`t = \hat a_k(x) R - \beta\log\hat Z(x)`, the pass@k optimum of
  Prop. 4.1 (``Calibration.regression_target``; boundaries of Eq. 148). At k = 1,
  :math:`a_1 = 1` and :math:`\beta\log\hat Z = \beta\log(1 - \hat q + \hat q e^{1/\beta}) =
  \beta\log\frac1M\sum_j e^{R_j/\beta}` over the bank: plain A*PO;
* win-rate (graded rewards): :math:`t = T_j`, the reference win-rate transform of Algorithm 2
  with :math:`Z = 1` (Prop. 4.7's max@k optimum).

One step: draw ``rollout.prompts_per_step`` calibrated prompts, sample ``rollout.n`` (default 1,
as the paper) completions per prompt from the current policy, score them, look up the
targets, take :math:`\log\pi_{ref}` from the frozen reference (the policy after SFT), and
minimise the mean squared residual :func:`bestk.kappo.kappo_apo_loss` over sequence
log-probabilities, for ``loss.ppo_epochs`` passes of ``loss.minibatches`` minibatches. It is a
regression, not a policy-gradient estimator: for any sampling policy with full support its
minimiser is :math:`\pi_{ref}e^{t/\beta}` (see ``bestk lab kappo``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from bestk.kappo import Calibration, kappo_apo_loss
from bestk.train.algorithms._base import (
    AlgorithmSpec,
    RunContext,
    StepMetrics,
    refuse_pg_options,
)
from bestk.train.algorithms.update import items_in, optimizer_steps
from bestk.train.model.logprobs import completion_logprobs
from bestk.train.reference.bank import ReferenceBank, calibration_values
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.metrics import rollout_metrics, rollout_time

__all__ = ["APO", "APOBatch", "SPEC"]


@dataclass
class APOBatch:
    """One step's data: ``B = prompts x n`` on-policy samples, their rewards, the calibrated
    targets and the reference sequence log-probabilities (all ``(B,)``)."""

    rollout: Rollout
    prompt_ids: np.ndarray
    rewards: np.ndarray
    success: np.ndarray
    targets: torch.Tensor
    ref_logps: torch.Tensor


class APO:
    """@k-A*PO (module docstring). ``run`` is the run (the Trainer)."""

    def __init__(self, run: RunContext):
        self.run = run
        self.calibration: Calibration | None = None

    def prepare(self, calibration: Calibration, bank: ReferenceBank | None) -> None:
        """Receive the run's calibration (its targets are the regression's)."""
        self.calibration = calibration

    def batch(self, step: int) -> APOBatch:
        """Sample and score the step's completions and look up their targets."""
        run, r, cal = self.run, self.run.cfg.rollout, self.calibration
        assert cal is not None and run.ref_model is not None  # prepare() gave it; spec keeps one
        exs = run.draw_prompts(step)                                # x ~ D
        ro = run.sample_completions(exs, step, r.n)                 # y ~ pi_old(.|x)
        rewards, ids = run.score_rollout(exs, ro, r.n)              # R(y, x)
        values = calibration_values(run.task, cal.kind, rewards)    # 0/1 or raw R
        targets = torch.from_numpy(cal.regression_target(ids, values))    # a_k R - b log Z | T_j
        with torch.no_grad():
            ref = completion_logprobs(                              # log pi_ref(y|x)
                run.ref_model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                ro.completion_mask, temperature=r.temperature, group_size=r.n,
            )
        return APOBatch(ro, ids, rewards, run.task.success(rewards), targets.to(run.device), ref)

    def update(self, b: APOBatch) -> dict[str, float]:
        """Minimise Eq. 14 over the batch; mean metrics of the optimizer steps. With
        ``loss.micro_batch_size`` each micro-batch's share is its summed squared residuals over
        the minibatch's row count, backpropagated one micro-batch at a time."""
        size = b.targets.shape[0]
        return optimizer_steps(
            self.run, size, lambda sl, mb: self._loss(b, sl, items_in(mb, size)),
            self.run.cfg.loss.micro_batch_size)

    def _loss(self, b: APOBatch, sl: slice, rows: int | None
              ) -> tuple[dict[str, float], torch.Tensor]:
        """``(metrics, loss)`` of rows ``sl``: Eq. 14's mean over ``sl``, or, given ``rows``
        (a minibatch's row count), the sum over ``sl`` divided by ``rows`` (a share)."""
        assert self.calibration is not None  # given by prepare()
        cfg, beta, ro = self.run.cfg, self.calibration.beta, b.rollout
        logp = completion_logprobs(                                     # log pi_theta(y|x)
            self.run.model, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
            ro.completion_mask[sl], temperature=cfg.rollout.temperature,
            group_size=cfg.rollout.n, chunked=cfg.loss.chunked_logprobs,
        )
        if rows is None:
            loss = kappo_apo_loss(logp, b.ref_logps[sl], b.targets[sl], beta)   # Eq. 14
        else:
            loss = kappo_apo_loss(logp, b.ref_logps[sl], b.targets[sl], beta,
                                  reduction="sum") / rows
        with torch.no_grad():
            log_ratio = logp.detach() - b.ref_logps[sl]
            resid = b.targets[sl].to(log_ratio) - beta * log_ratio
        def mean(x: torch.Tensor) -> float:  # over sl, or its share of the minibatch's
            return float(x.mean()) if rows is None else float(x.sum()) / rows

        return {
            "loss": loss.item(), "residual_mean": mean(resid),
            "residual_abs_mean": mean(resid.abs()), "log_ratio_mean": mean(log_ratio),
        }, loss

    def step(self, step: int) -> StepMetrics:
        """One @k-A*PO step; returns its logged metrics."""
        t0 = time.perf_counter()
        b = self.batch(step)
        t_batch = time.perf_counter()
        stats = self.update(b)
        t_upd = time.perf_counter()
        ro = b.rollout
        return {
            "phase": "train",
            "step": step,
            "reward_mean": float(b.rewards.mean()),
            "success_rate": float(b.success.mean()),
            "target_mean": float(b.targets.mean()),
            "target_std": float(b.targets.std()) if b.targets.numel() > 1 else 0.0,
            **rollout_metrics(ro),
            **stats,
            **rollout_time(ro, t_batch - t0),
            "time/update_s": t_upd - t_batch,
            "completions_per_s": len(ro.texts) / (t_upd - t0),
        }

    @staticmethod
    def describe(m: StepMetrics) -> str:
        """The progress bar's summary of a step."""
        return (f"@k-A*PO reward={m['reward_mean']:.3f} success={m['success_rate']:.3f} "
                f"|resid|={m['residual_abs_mean']:.3f}")


SPEC = AlgorithmSpec(
    name="apo",
    title="@k-A*PO (KAPPO Eq. 14)",
    make=APO,
    default_n=1,
    calibrated=lambda cfg: True,
    keeps_reference=lambda cfg: True,
    check=refuse_pg_options,
    out_suffix="-apo",
)
