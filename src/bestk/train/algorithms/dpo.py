r"""``dpo``: @k-DPO on (success, failure) pairs of the reference bank (KAPPO Sec. 5, Eq. 13).

DPO (Rafailov et al., 2023) with a prompt-adaptive strength:

.. math:: L(\theta) = -E_{(x, y_w, y_l)}\Big[\log\sigma\Big(\beta_{eff}(x)\Big[
          \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} -
          \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}\Big]\Big)\Big],
   \qquad \beta_{eff}(x) = \min\{\beta / a_k(N/(M + 0.5)),\ 2\}

(Eq. 149: the failure pseudo-count 0.5 and the cap 2 of the paper's experiments; from the
binary calibration, ``Calibration.get("dpo_beta_eff", ids)``). At k = 1, :math:`a_1 = 1` and
:math:`\beta_{eff} = \min(\beta, 2)`: plain DPO with :math:`\beta` (for :math:`\beta \le 2`).

Data: the reference bank of the run (M completions of the frozen reference per prompt,
scored; :mod:`bestk.train.reference.bank`). A step draws ``rollout.prompts_per_step`` of the bank's
prompts that have at least one success and one failure, and for each ``kappo.dpo_pairs``
pairs :math:`(y_w, y_l)`, a success and a failure drawn uniformly (with replacement) from its
bank samples. :math:`\log\pi_{ref}` of the bank samples was computed when the bank was made, so
no reference model is kept. Nothing is sampled online while training.

Labels (``kappo.dpo_labels``). Cor. 4.3 reads Eq. 13 under the Bradley-Terry model of the
reward, :math:`P(y_w \succ y_l) = \sigma(R_w - R_l) = \sigma(1)` for a success over a failure.
With those labels (``bradley_terry``, the default) the expected loss is
:math:`\sigma(1)\,\ell(\beta_{eff}d) + \sigma(-1)\,\ell(-\beta_{eff}d)`,
:math:`\ell(z) = -\log\sigma(z)`, :math:`d` the log-ratio margin; it is minimised at
:math:`\beta_{eff}d = 1`, i.e. by the pass@k optimum :math:`\pi^* \propto
\pi_{ref}e^{a_kR/\beta}` -- the fixed point ``bestk lab kappo`` checks on exact bandits. With
``hard`` labels (the success always wins, TRL's and the usual DPO data) the loss decreases in
every margin and has no minimiser: the policy keeps moving mass onto the bank's successes for
as long as it trains, :math:`\beta_{eff}(x)` only setting how fast each prompt saturates, and
the result depends on the number of steps and the learning rate rather than on k alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bestk.kappo import Calibration, kappo_dpo_loss
from bestk.train.algorithms._base import AlgorithmSpec, RunContext, StepMetrics, refuse_pg_options
from bestk.train.algorithms.update import items_in, optimizer_steps
from bestk.train.config import ResolvedTrainConfig
from bestk.train.model.logprobs import completion_logprobs
from bestk.train.reference.bank import ReferenceBank
from bestk.train.rollout.prompts import encode_prompts

__all__ = ["DPO", "DPOBatch", "SPEC", "P_SUCCESS_WINS", "pair_rows"]

#: Bradley-Terry probability that a success (R = 1) is preferred to a failure (R = 0).
P_SUCCESS_WINS = 1.0 / (1.0 + math.exp(-1.0))


def pair_rows(
    success: np.ndarray, prompts: np.ndarray, u_win: np.ndarray, u_lose: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flat bank rows (``prompt * M + sample``) of a success and a failure of each prompt.

    ``success`` is the ``(P, M)`` boolean success table, ``prompts`` ``(B,)`` prompt rows that
    have both a success and a failure, ``u_win`` / ``u_lose`` ``(B,)`` uniforms in [0, 1):
    the winner is success number ``floor(u_win * s)`` of the prompt (s successes, in sample
    order), the loser failure number ``floor(u_lose * (M - s))``.
    """
    M = success.shape[1]
    order = np.argsort(~success[prompts], axis=1, kind="stable")  # successes first, in order
    s = success[prompts].sum(1)
    i_w = np.minimum((u_win * s).astype(np.int64), s - 1)
    i_l = s + np.minimum((u_lose * (M - s)).astype(np.int64), M - s - 1)
    rows = np.arange(len(prompts))
    return prompts * M + order[rows, i_w], prompts * M + order[rows, i_l]


@dataclass
class DPOBatch:
    """One step's pairs, interleaved ``[w_0, l_0, w_1, l_1, ...]`` in the sequence tensors;
    ``ref_chosen`` / ``ref_rejected`` / ``beta_eff`` / ``prompt_ids`` are ``(B,)`` per pair."""

    prompt_ids: np.ndarray
    input_ids: torch.Tensor
    input_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor
    beta_eff: torch.Tensor


class DPO:
    """@k-DPO (module docstring). ``run`` is the run (the Trainer)."""

    def __init__(self, run: RunContext):
        self.run = run
        self.calibration: Calibration | None = None

    def prepare(self, calibration: Calibration, bank: ReferenceBank | None) -> None:
        """Build the pair pool from the bank: the prompts with a success and a failure."""
        run = self.run
        assert bank is not None  # the spec's bank_completions: the run samples (or gets) one
        self.calibration = calibration
        self.bank = bank
        self.success = run.task.success(bank.rewards)  # (P, M)
        s = self.success.sum(1)
        self.pool = np.flatnonzero((s > 0) & (s < bank.size))
        if self.pool.size == 0:
            raise ValueError(
                f"none of the {bank.num_prompts} bank prompts has both a success and a failure "
                f"among its {bank.size} reference samples: @k-DPO has no pairs (raise "
                "kappo.bank_size or kappo.bank_prompts, or train the reference longer)"
            )
        if self.pool.size < run.cfg.rollout.prompts_per_step:
            run.say("warning", f"only {self.pool.size} of the {bank.num_prompts} bank prompts "
                     "have both a success and a failure; @k-DPO steps use "
                     f"{self.pool.size} prompts, not rollout.prompts_per_step = "
                     f"{run.cfg.rollout.prompts_per_step}")
        self.beta_eff = calibration.get("dpo_beta_eff", bank.prompt_ids)  # (P,) Eq. 149
        by_id = {e["id"]: e for e in run.rl_prompts}
        self.prompts = [by_id[int(i)]["prompt"] for i in bank.prompt_ids]

    def batch(self, step: int) -> DPOBatch:
        """Draw the step's prompts and pairs from the bank."""
        run, cfg = self.run, self.run.cfg
        rng = run.prompt_rng(step)
        size = min(cfg.rollout.prompts_per_step, self.pool.size)
        prompts = np.repeat(rng.choice(self.pool, size=size, replace=False), cfg.kappo.dpo_pairs)
        u = rng.random((2, prompts.size))
        win, lose = pair_rows(self.success, prompts, u[0], u[1])    # y_w, y_l ~ bank(x)
        rows = torch.from_numpy(np.stack([win, lose], 1).reshape(-1))
        enc = encode_prompts(run.tokenizer, [self.prompts[p] for p in prompts for _ in range(2)],
                             max_length=cfg.rollout.max_prompt_length,
                             truncation=cfg.rollout.prompt_truncation)
        assert self.bank.completion_ids is not None and self.bank.completion_mask is not None \
            and self.bank.ref_logps is not None  # bank_completions: kept with the bank
        mask = self.bank.completion_mask[rows]
        width = int(mask.sum(1).max())
        ref = self.bank.ref_logps[rows]                             # log pi_ref(y|x)
        dev = run.device
        return DPOBatch(
            prompt_ids=self.bank.prompt_ids[prompts],
            input_ids=enc.input_ids.to(dev), input_mask=enc.attention_mask.to(dev),
            completion_ids=self.bank.completion_ids[rows][:, :width].to(dev),
            completion_mask=mask[:, :width].to(dev),
            ref_chosen=ref[0::2].to(dev), ref_rejected=ref[1::2].to(dev),
            beta_eff=torch.from_numpy(self.beta_eff[prompts]).to(dev),  # beta_eff(x)
        )

    def loss(self, chosen: torch.Tensor, rejected: torch.Tensor, b: DPOBatch,
             sl: slice, reduction: str = "mean") -> torch.Tensor:
        """Eq. 13 on pairs ``sl`` with the configured labels (module docstring), their mean
        (or ``reduction="sum"``)."""
        args = (b.ref_chosen[sl], b.ref_rejected[sl])
        hard = kappo_dpo_loss(chosen, rejected, *args, b.beta_eff[sl], reduction=reduction)
        if self.run.cfg.kappo.dpo_labels == "hard":
            return hard
        flipped = kappo_dpo_loss(rejected, chosen, *args[::-1], b.beta_eff[sl],
                                 reduction=reduction)
        return P_SUCCESS_WINS * hard + (1.0 - P_SUCCESS_WINS) * flipped

    def update(self, b: DPOBatch) -> dict[str, float]:
        """Minimise Eq. 13 over the pairs; mean metrics of the optimizer steps. With
        ``loss.micro_batch_size`` (even) each micro-batch of ``micro_batch_size / 2`` pairs
        contributes its summed loss over the minibatch's pair count, backpropagated one
        micro-batch at a time."""
        micro = self.run.cfg.loss.micro_batch_size  # completions; pairs stay whole
        size = b.beta_eff.shape[0]
        return optimizer_steps(
            self.run, size, lambda sl, mb: self._loss(b, sl, items_in(mb, size)),
            None if micro is None else micro // 2)

    def _loss(self, b: DPOBatch, sl: slice, pairs: int | None
              ) -> tuple[dict[str, float], torch.Tensor]:
        """``(metrics, loss)`` of pairs ``sl``: Eq. 13's mean over ``sl``, or, given ``pairs``
        (a minibatch's pair count), the sum over ``sl`` divided by ``pairs`` (a share)."""
        cfg = self.run.cfg
        seq = slice(2 * sl.start, 2 * sl.stop)  # pair j is rows 2j (y_w) and 2j + 1 (y_l)
        logp = completion_logprobs(                                     # log pi_theta(y_w), (y_l)
            self.run.model, b.input_ids[seq], b.input_mask[seq], b.completion_ids[seq],
            b.completion_mask[seq], temperature=cfg.rollout.temperature, group_size=2,
            chunked=cfg.loss.chunked_logprobs,
        )
        chosen, rejected = logp[0::2], logp[1::2]
        if pairs is None:
            loss = self.loss(chosen, rejected, b, sl)                   # Eq. 13
        else:
            loss = self.loss(chosen, rejected, b, sl, reduction="sum") / pairs
        with torch.no_grad():
            be = b.beta_eff[sl].to(logp.dtype)
            r_w = be * (chosen - b.ref_chosen[sl].to(logp.dtype))
            r_l = be * (rejected - b.ref_rejected[sl].to(logp.dtype))

        def mean(x: torch.Tensor) -> float:  # over sl, or its share of the minibatch's
            return float(x.mean()) if pairs is None else float(x.sum()) / pairs

        return {
            "loss": loss.item(), "reward_chosen": mean(r_w), "reward_rejected": mean(r_l),
            "reward_margin": mean(r_w - r_l), "reward_accuracy": mean((r_w > r_l).double()),
        }, loss

    def step(self, step: int) -> StepMetrics:
        """One @k-DPO step; returns its logged metrics."""
        t0 = time.perf_counter()
        b = self.batch(step)
        stats = self.update(b)
        t_upd = time.perf_counter()
        return {
            "phase": "train",
            "step": step,
            "pairs": float(b.beta_eff.shape[0]),
            "beta_eff_mean": float(b.beta_eff.mean()),
            **stats,
            "time/update_s": t_upd - t0,
            "pairs_per_s": b.beta_eff.shape[0] / (t_upd - t0),
        }

    @staticmethod
    def describe(m: StepMetrics) -> str:
        """The progress bar's summary of a step."""
        return (f"@k-DPO loss={m['loss']:.3f} accuracy={m['reward_accuracy']:.3f} "
                f"margin={m['reward_margin']:.3f}")


def _batch_text(cfg: Mapping[str, Any]) -> str:
    """The report's description of a step's batch: pairs of the bank, not rollouts."""
    roll, kp = cfg.get("rollout", {}), cfg.get("kappo", {})
    return (f"{roll.get('prompts_per_step')} bank prompts x {kp.get('dpo_pairs')} "
            f"(success, failure) pair(s), {kp.get('dpo_labels')} labels")


def _check(cfg: ResolvedTrainConfig) -> None:
    refuse_pg_options(cfg)
    mb = cfg.loss.micro_batch_size
    if mb is not None and mb % 2:
        raise ValueError(
            f"config key 'loss.micro_batch_size' ({mb}) must be even with algorithm 'dpo': "
            "its micro-batches hold whole (success, failure) pairs"
        )
    if cfg.rollout.n != 1:
        raise ValueError(
            f"config key 'rollout.n' ({cfg.rollout.n}) is not used by algorithm 'dpo': it samples "
            "no completions while training (its pairs come from the reference bank; set "
            "kappo.dpo_pairs and kappo.bank_size instead)"
        )


SPEC = AlgorithmSpec(
    name="dpo",
    title="@k-DPO (KAPPO Eq. 13)",
    make=DPO,
    default_n=1,
    calibrated=lambda cfg: True,
    keeps_reference=lambda cfg: False,
    bank_completions=True,
    binary_only=True,
    online=False,
    check=_check,
    batch_text=_batch_text,
    pool_note=" (the pairs: those with both a success and a failure among their M samples)",
    out_suffix="-dpo",
)
