"""A batch of sampled completions (:class:`Rollout`), what every rollout engine returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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
    logprobs: ``(B, T)`` log-probabilities of the sampled tokens under the distribution they
        were drawn from, by every engine (the sampler contract,
        :func:`bestk.train.rollout.sampler.sampling_logprobs`): temperature-scaled, then top-k
        / top-p filtered and renormalised -- the tempered policy's own with both filters off.
        ``loss.sampler_importance_cap`` divides by it.
    entropy: ``(B, T)`` entropy of the temperature-scaled next-token distribution.
    finished: ``(B,)`` whether the completion ended with EOS (not cut by the length cap).
    metrics: per-batch values logged with the step: ``prompts_truncated`` (distinct prompts
        cut to ``max_prompt_length``, when a limit is set) and, once scored with several
        reward functions, ``rewards/<name>/mean``.
    policy_logprobs: ``(B, T)`` log-probabilities of the sampled tokens under the policy
        module (the trainer's own numbers), when the sampler is something else (the ``vllm``
        engine); ``None`` for the ``hf`` engine, which samples from the policy module itself.
    pending_policy: the policy module's no-grad forward over the batch that gives
        ``(policy_logprobs, entropy)``, when the engine was asked to defer it
        (``defer_policy_pass``): until then ``policy_logprobs`` is ``None`` and ``entropy``
        holds zeros. Either the caller's own forward of the policy over every row fills them
        (:meth:`fill_policy`, what an exactly on-policy update does, so the step forwards the
        policy once instead of twice) or :meth:`resolve_policy` runs the pass.
    pending_policy_rows: the same pass over some rows only, ``(index, group_size)`` ->
        ``(len(index), T)`` log-probs and entropies (``index`` in groups of ``group_size``
        rows answering one prompt), when the engine can run it so
        (:meth:`policy_entropy_of`); ``None``: it cannot.
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
    pending_policy: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None
    pending_policy_rows: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]] | None \
        = None
    _filled: torch.Tensor | None = field(default=None, repr=False)

    def resolve_policy(self) -> None:
        """Run the pending policy pass, if any (its seconds are added to ``metrics`` as
        ``time/logprobs_s``): after it ``policy_logprobs`` and ``entropy`` are the policy's."""
        if self.pending_policy is None:
            return
        t0 = time.perf_counter()
        logprobs, entropy = self.pending_policy()
        m = self.completion_mask.to(logprobs.dtype)
        self.policy_logprobs, self.entropy = logprobs * m, entropy * m
        self.pending_policy, self.pending_policy_rows, self._filled = None, None, None
        self.metrics["time/logprobs_s"] = (self.metrics.get("time/logprobs_s", 0.0)
                                           + time.perf_counter() - t0)

    def fill_policy(self, rows: slice, logprobs: torch.Tensor, entropy: torch.Tensor) -> None:
        """Record the policy module's own ``(len(rows), T)`` log-probs and entropies of rows
        ``rows``, computed by the caller's forward with the weights that sampled the batch
        (detached here); once every row is filled nothing is pending any more."""
        if self.pending_policy is None:
            raise ValueError("fill_policy: this rollout has no pending policy pass")
        B = self.completion_ids.shape[0]
        idx = range(B)[rows]
        if logprobs.shape != (len(idx), self.completion_ids.shape[1]) or \
                entropy.shape != logprobs.shape:
            raise ValueError(f"fill_policy: rows {rows} take ({len(idx)}, "
                             f"{self.completion_ids.shape[1]}) values; got "
                             f"{tuple(logprobs.shape)} and {tuple(entropy.shape)}")
        if self.policy_logprobs is None or self._filled is None:
            self.policy_logprobs = torch.zeros(self.completion_ids.shape, dtype=torch.float32,
                                               device=self.completion_ids.device)
            self.entropy = torch.zeros_like(self.policy_logprobs)
            self._filled = torch.zeros(B, dtype=torch.bool)
        m = self.completion_mask[rows].to(torch.float32)
        self.policy_logprobs[rows] = logprobs.detach().float() * m
        self.entropy[rows] = entropy.detach().float() * m
        self._filled[rows] = True
        if bool(self._filled.all()):
            self.pending_policy, self.pending_policy_rows, self._filled = None, None, None

    def policy_entropy_of(self, index: torch.Tensor, group_size: int) -> torch.Tensor:
        """The policy's ``(len(index), T)`` token entropies of rows ``index`` (masked), in
        groups of ``group_size`` rows that answer one prompt. A pending pass runs on those rows
        only when the engine can (:attr:`pending_policy_rows`, its seconds added to
        ``time/logprobs_s``; nothing is resolved), else over every row
        (:meth:`resolve_policy`); with nothing pending, the stored entropies."""
        index = torch.as_tensor(index, dtype=torch.long)
        if index.ndim != 1 or group_size < 1 or index.numel() % group_size:
            raise ValueError(f"policy_entropy_of: a 1-d index in whole groups of {group_size} "
                             f"rows, got shape {tuple(index.shape)}")
        m = self.completion_mask[index].to(torch.float32)
        if self.pending_policy_rows is not None and self._filled is None:
            t0 = time.perf_counter()
            _, entropy = self.pending_policy_rows(index, group_size)
            self.metrics["time/logprobs_s"] = (self.metrics.get("time/logprobs_s", 0.0)
                                               + time.perf_counter() - t0)
            return entropy.float() * m
        self.resolve_policy()
        return self.entropy[index].float() * m


def concat_rollouts(parts: Sequence[Rollout], *, pad_id: int) -> Rollout:
    """One :class:`Rollout` of the rows of ``parts`` in order: prompts re-padded on the left
    and completions on the right (``pad_id``, mask 0, log-prob and entropy 0) to the longest
    of the parts. The positions a model sees depend only on the masks, so each row means what
    it meant in its part. ``metrics`` add up (``prompts_truncated`` counts prompts). A part's
    pending policy pass runs first (:meth:`Rollout.resolve_policy`)."""
    if not parts:
        raise ValueError("concat_rollouts: no rollouts")
    for r in parts:
        r.resolve_policy()
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
