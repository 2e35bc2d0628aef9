r"""``pg``: PPO-clip on the advantages of any bestk estimator (the default algorithm).

One step:

1. :math:`x \sim D`: ``rollout.prompts_per_step`` training prompts (a function of
   ``(seed, step)`` only);
2. :math:`y_1..y_n \sim \pi_{old}(\cdot|x)`: ``rollout.n`` completions per prompt;
3. :math:`R_i = R(y_i, x)`, the task's reward, or its 0/1 success for estimators that need
   binary rewards (``advantage_reward``);
4. :math:`A = ` ``bestk.advantages(estimator, R, group=prompt ids, **estimator_options)``;
5. minimise the PPO-clip surrogate (``bestk.losses.ppo_clip_loss``, ratio clipped to
   :math:`[1 - \epsilon_{low}, 1 + \epsilon_{high}]`, aggregation ``loss.agg``)
   :math:`+\ c_{KL}\,\mathrm{KL}(\pi\|\pi_{ref}) - c_H\,H` for ``loss.ppo_epochs`` passes of
   ``loss.minibatches`` minibatches (one of each = exactly on-policy).

What the estimator needs is read from its registry properties
(:class:`bestk.estimators.EstimatorInfo`): an estimator of the ``calibrated`` reward domain
(``kappo_grpo``, @k-GRPO) takes its KAPPO calibration from ``estimator_options.calibration``
(a file; RL then draws only its prompts) or, without one, from the run's ``kappo`` section
(in-run calibration, :mod:`bestk.train.reference.bank`); one of the ``binary`` domain, or a
calibrated one with a binary calibration, sees the 0/1 success (``advantage_reward: auto``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from bestk.estimators import EstimatorInfo, advantages, estimator_info, resolve_options
from bestk.kappo import Calibration
from bestk.losses import aggregate, kl_penalty, ppo_clip_loss
from bestk.train.algorithms._base import (
    AlgorithmSpec,
    RunContext,
    StepMetrics,
)
from bestk.train.algorithms.update import micro_slices, optimizer_steps
from bestk.train.config import ResolvedTrainConfig
from bestk.train.model.logprobs import sequence_logprobs
from bestk.train.reference.bank import ReferenceBank
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.metrics import rollout_metrics, rollout_stats, rollout_time

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.train.model.policy import Policy, Reference

__all__ = ["PolicyGradient", "SPEC"]


class PolicyGradient:
    """PPO-clip with ``bestk.advantages`` (module docstring). ``run`` is the run (the Trainer)."""

    def __init__(self, run: RunContext):
        self.run = run
        cfg = run.cfg
        self.info = estimator_info(cfg.estimator)
        self.options = resolve_options(cfg.estimator, cfg.estimator_options)
        # a file in estimator_options: RL draws only its prompts (the run's rl_prompts already)
        cal = self.options.get("calibration") if self.info.calibrated else None
        kind = cal.kind if cal is not None else run.kappo_kind
        self.binary = binary_advantages(cfg.advantage_reward, self.info, kind)
        #: one PPO epoch of one minibatch: the update's forward sees the weights that sampled
        #: the batch, so it also gives the policy's own log-probs and entropies of the rollout
        #: (an engine that samples with something else then skips its own pass over them)
        self.on_policy = cfg.loss.ppo_epochs == 1 and cfg.loss.minibatches == 1

    def prepare(self, calibration: Calibration, bank: ReferenceBank | None) -> None:
        """Receive the run's in-run (or ``kappo.calibration``) calibration."""
        self.options = {**self.options, "calibration": calibration}

    def step(self, step: int) -> StepMetrics:
        """One RL step (module docstring); returns its logged metrics."""
        run, cfg, r = self.run, self.run.cfg, self.run.cfg.rollout
        t0 = time.perf_counter()
        exs = run.draw_prompts(step)                                # x ~ D
        ro = run.sample_completions(exs, step, r.n,                 # y_i ~ pi_old(.|x)
                                    defer_policy_pass=self.on_policy)
        t_gen = time.perf_counter()
        rewards, prompt_ids = run.score_rollout(exs, ro, r.n)       # R(y_i, x)
        succ = run.task.success(rewards)
        adv_input = succ.astype(np.float64) if self.binary else rewards
        adv = advantages(                                           # A_i
            cfg.estimator, torch.from_numpy(adv_input), group=torch.from_numpy(prompt_ids),
            **self.options,
        ).to(torch.float32).to(run.device)
        t_score = time.perf_counter()
        stats = self.update(ro, adv)
        t_upd = time.perf_counter()
        mask = ro.completion_mask.float()
        return {
            "phase": "train",
            "step": step,
            "reward_mean": float(rewards.mean()),
            "reward_max_mean": float(rewards.reshape(-1, r.n).max(1).mean()),
            "success_rate": float(succ.mean()),
            "group_any_success": float(succ.reshape(-1, r.n).any(1).mean()),
            "adv_abs_mean": float(adv.abs().mean()),
            **rollout_metrics(ro),
            **rollout_stats(rewards, r.n, mask.sum(1).cpu().numpy(), ro.finished.cpu().numpy(),
                            signal=adv_input),
            **stats,
            **rollout_time(ro, t_gen - t0),
            "time/score_s": t_score - t_gen,
            "time/update_s": t_upd - t_score,
            "completions_per_s": len(ro.texts) / (t_upd - t0),
        }

    def update(self, ro: Rollout, adv: torch.Tensor) -> dict[str, float]:
        """Minimise PPO-clip (+ KL, - entropy) over the batch; mean metrics of the passes
        (:func:`~bestk.train.algorithms.update.optimizer_steps`).

        With ``loss.micro_batch_size`` each minibatch's loss is the sum of its micro-batches'
        shares (aggregated with the minibatch's token and sequence counts), backpropagated one
        micro-batch at a time into the minibatch's one optimizer step. A batch whose
        advantages are all 0 (with no KL or entropy term) runs no backward pass
        (:func:`~bestk.train.algorithms.update.optimizer_steps`' ``zero_gradient``)."""
        run, lc = self.run, self.run.cfg.loss
        B = adv.shape[0]
        old_logp = None if self.on_policy else self._frozen_logprobs(run.model, ro, B)
        ref_logp = None
        if lc.kl_coef > 0:
            assert run.ref_model is not None  # the spec keeps one when kl_coef > 0
            ref_logp = self._frozen_logprobs(run.ref_model, ro, B)

        def loss_of(rows: slice, minibatch: slice | None
                    ) -> tuple[dict[str, float], torch.Tensor]:
            if minibatch is None:
                return self._loss(ro, adv, rows, old_logp, ref_logp, None, None)
            counts = (int(ro.completion_mask[minibatch].sum()), len(range(B)[minibatch]))
            return self._loss(ro, adv, rows, old_logp, ref_logp, *counts)

        # every A_i = 0 and no KL or entropy term: the loss has no gradient, so no backward
        no_gradient = lc.kl_coef == 0 and lc.entropy_coef == 0 and not bool(adv.any())
        stats = optimizer_steps(run, B, loss_of, lc.micro_batch_size, zero_gradient=no_gradient)
        assert ro.pending_policy is None  # every row's forward filled it before the step
        return stats

    def _frozen_logprobs(self, model: Policy | Reference, ro: Rollout, B: int) -> torch.Tensor:
        """``(B, T)`` log-probs of the completions under ``model`` without gradients, in
        micro-batches of ``loss.micro_batch_size`` rows when it is set."""
        cfg = self.run.cfg
        mb = cfg.loss.micro_batch_size
        with torch.no_grad():
            out = [sequence_logprobs(
                model, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
                ro.completion_mask[sl], temperature=cfg.rollout.temperature,
                group_size=cfg.rollout.n, chunked=cfg.loss.chunked_logprobs,
            )[0] for sl in micro_slices(slice(0, B), mb, B)]
        return out[0] if len(out) == 1 else torch.cat(out)

    def _loss(self, ro: Rollout, adv: torch.Tensor, sl: slice, old_logp: torch.Tensor | None,
              ref_logp: torch.Tensor | None, num_tokens: int | None, num_seqs: int | None
              ) -> tuple[dict[str, float], torch.Tensor]:
        """``(metrics, loss)`` of rows ``sl``: PPO-clip + KL - entropy, aggregated over ``sl``
        itself or, given them, with a minibatch's ``num_tokens`` / ``num_seqs`` (a
        micro-batch's share). ``old_logp`` ``None``: exactly on-policy (the ratio's
        denominator is the detached log-probability itself)."""
        cfg, lc = self.run.cfg, self.run.cfg.loss
        mask = ro.completion_mask[sl]
        fill = ro.pending_policy is not None and old_logp is None
        logp, ent = sequence_logprobs(
            self.run.model, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
            mask, temperature=cfg.rollout.temperature,
            with_entropy=lc.entropy_coef > 0 or fill, group_size=cfg.rollout.n,
            chunked=lc.chunked_logprobs,
        )
        if fill:  # the engine's pending pass: these are the weights that sampled the batch
            assert ent is not None  # asked for
            ro.fill_policy(sl, logp, ent)
        counts = {"num_tokens": num_tokens, "num_seqs": num_seqs}
        old = logp.detach() if old_logp is None else old_logp[sl]
        weights = None
        if lc.sampler_importance_cap is not None and ro.policy_logprobs is not None:
            # truncated importance weights min(pi_old / pi_sampler, cap) of the tokens
            weights = torch.exp(old - ro.logprobs[sl]).clamp(max=lc.sampler_importance_cap)
        loss, st = ppo_clip_loss(
            logp, old, adv[sl], mask, clip_low=lc.clip_low, clip_high=lc.clip_high,
            agg=lc.agg, weights=weights, **counts,
        )
        pg = loss.item()
        if ref_logp is not None:
            kl = aggregate(kl_penalty(logp, ref_logp[sl], lc.kl_estimator), mask, lc.agg,
                           **counts)
            loss = loss + lc.kl_coef * kl
            st["kl_ref"] = kl.item()
        if ent is not None and lc.entropy_coef > 0:
            loss = loss - lc.entropy_coef * aggregate(ent, mask, lc.agg, **counts)
        st.update(loss=loss.item(), pg_loss=pg)
        return st, loss

    @staticmethod
    def describe(m: StepMetrics) -> str:
        """The progress bar's summary of a step."""
        return f"RL reward={m['reward_mean']:.3f} success={m['success_rate']:.3f}"


def binary_advantages(mode: str, info: EstimatorInfo, calibration_kind: str | None) -> bool:
    """Whether the estimator sees the 0/1 success (``advantage_reward`` ``mode``; ``auto``:
    when its reward domain needs 0/1 rewards, e.g. ``maxrl``, or ``kappo_grpo`` with a
    binary calibration)."""
    if mode != "auto":
        return mode == "success"
    return info.binary_rewards(calibration_kind)


def _given_calibration(cfg: ResolvedTrainConfig) -> tuple[Calibration, str] | None:
    """The calibration file of ``estimator_options`` (an estimator of the ``calibrated`` reward
    domain), loaded, and ``"calibration 'PATH'"``; ``None`` without one. The options are
    resolved (:func:`~bestk.estimators.resolve_options`: a file that does not load is a
    ``ValueError``) whether or not they give one."""
    options = resolve_options(cfg.estimator, cfg.estimator_options)
    cal = options.get("calibration") if estimator_info(cfg.estimator).calibrated else None
    if cal is None:
        return None
    return cal, f"calibration {str(cfg.estimator_options['calibration'])!r}"


def _calibrated(cfg: ResolvedTrainConfig) -> bool:
    """The run calibrates from its ``kappo`` section: the estimator takes a calibration and
    ``estimator_options`` gives none."""
    return estimator_info(cfg.estimator).calibrated and "calibration" not in cfg.estimator_options


SPEC = AlgorithmSpec(
    name="pg",
    title="PPO-clip policy gradient",
    make=PolicyGradient,
    default_n=8,
    calibrated=_calibrated,
    keeps_reference=lambda cfg: cfg.loss.kl_coef > 0,
    given_calibration=_given_calibration,
    uses_estimator=True,
)
