"""A batch of sampled completions (:class:`Rollout`), what every rollout engine returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["Rollout", "concat_rollouts"]


@dataclass
class Rollout:
    """A batch of ``B = len(prompts) * n`` sampled completions (sample ``i`` answers prompt
    ``i // n``).

    Attributes
    ----------
    prompt_ids, prompt_mask: ``(B, P)`` left-padded prompt tokens and their attention mask.
    completion_ids, completion_mask: ``(B, T)`` sampled tokens (EOS included, padding after)
        and 1 on real completion tokens.
    texts: decoded completions without special tokens.
    logprobs: ``(B, T)`` log-probabilities of the sampled tokens at sampling time (under the
        temperature-scaled distribution).
    entropy: ``(B, T)`` entropy of the temperature-scaled next-token distribution.
    finished: ``(B,)`` whether the completion ended with EOS (not cut by the length cap).
    metrics: per-batch values logged with the step: ``prompts_truncated`` (distinct prompts
        cut to ``max_prompt_length``, when a limit is set) and, once scored with several
        reward functions, ``rewards/<name>/mean``.
    policy_logprobs: ``(B, T)`` log-probabilities of the sampled tokens under the policy
        module (the trainer's own numbers), when the sampler is something else (the ``vllm``
        engine); ``None`` when ``logprobs`` already are the policy module's (``hf``).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]
    logprobs: torch.Tensor
    entropy: torch.Tensor
    finished: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    policy_logprobs: torch.Tensor | None = None


def concat_rollouts(parts: Sequence[Rollout], *, pad_id: int) -> Rollout:
    """One :class:`Rollout` of the rows of ``parts`` in order: prompts re-padded on the left
    and completions on the right (``pad_id``, mask 0, log-prob and entropy 0) to the longest
    of the parts. The positions a model sees depend only on the masks, so each row means what
    it meant in its part. ``metrics`` add up (``prompts_truncated`` counts prompts)."""
    if not parts:
        raise ValueError("concat_rollouts: no rollouts")
    P = max(r.prompt_ids.shape[1] for r in parts)
    T = max(r.completion_ids.shape[1] for r in parts)

    def left(x: torch.Tensor, value: float) -> torch.Tensor:
        return torch.nn.functional.pad(x, (P - x.shape[1], 0), value=value)

    def right(x: torch.Tensor, value: float) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, T - x.shape[1]), value=value)

    metrics: dict[str, float] = {}
    for r in parts:
        for key, v in r.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + v
    return Rollout(
        torch.cat([left(r.prompt_ids, pad_id) for r in parts]),
        torch.cat([left(r.prompt_mask, 0) for r in parts]),
        torch.cat([right(r.completion_ids, pad_id) for r in parts]),
        torch.cat([right(r.completion_mask, 0) for r in parts]),
        [t for r in parts for t in r.texts],
        torch.cat([right(r.logprobs, 0.0) for r in parts]),
        torch.cat([right(r.entropy, 0.0) for r in parts]),
        torch.cat([r.finished for r in parts]),
        metrics,
        None if any(r.policy_logprobs is None for r in parts)
        else torch.cat([right(r.policy_logprobs, 0.0) for r in parts]),  # type: ignore[arg-type]
    )
