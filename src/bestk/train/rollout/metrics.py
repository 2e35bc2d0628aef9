"""What a rollout batch measured: the numbers of its sampled completions that an RL step logs.

* :func:`rollout_metrics` -- token entropy, completion length, the rollout's own metrics and,
  for a sampler that is not the policy module, :func:`sampler_mismatch`;
* :func:`rollout_stats` -- the reward and length statistics TRL's ``GRPOTrainer`` logs too;
* :func:`rollout_time` -- the time split of sampling (generate, sync, log-probs);
* :func:`is_timing` -- which logged keys measure time or speed, not the run.
"""

from __future__ import annotations

import numpy as np
import torch

from bestk.train.rollout.batch import Rollout

__all__ = ["rollout_metrics", "rollout_stats", "rollout_time", "sampler_mismatch", "is_timing"]


def rollout_metrics(ro: Rollout) -> dict[str, float]:
    """A step's metrics of its sampled completions: ``entropy``, the mean token entropy over
    the completion tokens, and ``response_len``, the mean completion length in tokens; then
    the rollout's own ``metrics`` (``prompts_truncated`` with a prompt length limit,
    ``rewards/<name>/mean`` with several reward functions); for a sampler that is not the
    policy module (``Rollout.policy_logprobs`` set), :func:`sampler_mismatch`."""
    mask = ro.completion_mask.float()
    return {
        "entropy": float((ro.entropy * mask).sum() / mask.sum().clamp_min(1)),
        "response_len": float(mask.sum(1).mean()),
        **{k: v for k, v in getattr(ro, "metrics", {}).items() if not is_timing(k)},
        **sampler_mismatch(ro),
    }


def is_timing(key: str) -> bool:
    """Whether a logged metric measures time or speed (``time/...``, ``completions_per_s``,
    ``pairs_per_s``), not the run: what two identical runs may differ in."""
    return key.startswith("time/") or key in ("completions_per_s", "pairs_per_s")


def rollout_time(ro: Rollout, seconds: float) -> dict[str, float]:
    """The time split of sampling ``ro`` in ``seconds`` (wall clock of the call):
    ``time/sync_s`` (pushing the policy's weights into the engine), ``time/logprobs_s`` (the
    policy's recomputation of the sampled tokens' log-probs, ``vllm`` engine; 0 when the
    update's own forward gave them, its time then in ``time/update_s``) and
    ``time/generate_s``, the rest."""
    sync = ro.metrics.get("time/sync_s", 0.0)
    logprobs = ro.metrics.get("time/logprobs_s", 0.0)
    return {"time/generate_s": max(0.0, seconds - sync - logprobs), "time/sync_s": sync,
            "time/logprobs_s": logprobs}


def sampler_mismatch(ro: Rollout) -> dict[str, float]:
    """How far the sampler's log-probs are from the policy module's, over the completion
    tokens (``{}`` when the sampler is the policy module): ``rollout/logprob_mismatch``, the
    mean ``|log pi(y_t) - log q(y_t)|``, and ``rollout/logprob_kl``, the mean k3 estimate of
    ``KL(q || pi)`` from the sampled tokens, ``r - 1 - log r`` with ``r = pi(y_t) / q(y_t)``
    (``q`` the sampler, ``pi`` the policy module)."""
    if ro.policy_logprobs is None:
        return {}
    mask = ro.completion_mask.float()
    tokens = mask.sum().clamp_min(1)
    d = (ro.policy_logprobs.float() - ro.logprobs.float()) * mask
    k3 = (torch.expm1(d.clamp(-20, 20)) - d) * mask
    return {"rollout/logprob_mismatch": float(d.abs().sum() / tokens),
            "rollout/logprob_kl": float(k3.sum() / tokens)}


def rollout_stats(rewards: np.ndarray, n: int, lengths: np.ndarray,
                  finished: np.ndarray, *, signal: np.ndarray | None = None
                  ) -> dict[str, float]:
    """Statistics of one rollout batch that TRL's ``GRPOTrainer`` logs too.

    ``rewards``: ``(G * n,)`` rewards in groups of ``n``; ``lengths``: completion lengths in
    tokens; ``finished``: whether each completion ended with EOS; ``signal``: what the
    estimator sees, when not the rewards (the 0/1 success of ``advantage_reward=success``).
    Returns ``reward_std`` (the std of the rewards over the batch, with Bessel's correction
    as TRL's ``nanstd``; 0 for one completion), ``frac_reward_zero_std`` (share of groups
    whose ``signal`` -- else rewards -- are all equal: the groups a group baseline learns
    nothing from, whichever reward the estimator reads),
    ``response_len_min`` / ``_max`` and ``truncated_rate`` (share cut by the length cap).
    """
    r = np.asarray(rewards, dtype=np.float64)
    seen = (r if signal is None else np.asarray(signal, dtype=np.float64)).reshape(-1, n)
    lengths = np.asarray(lengths, dtype=np.float64)
    return {
        "reward_std": float(r.std(ddof=1)) if r.size > 1 else 0.0,
        "frac_reward_zero_std": float((seen.max(1) == seen.min(1)).mean()),
        "response_len_min": float(lengths.min()),
        "response_len_max": float(lengths.max()),
        "truncated_rate": float(1.0 - np.asarray(finished, dtype=np.float64).mean()),
    }
