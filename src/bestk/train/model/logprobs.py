"""The training forward: log-probabilities (and entropies) of sampled completions under a model.

:func:`sequence_logprobs` recomputes the ``(B, T)`` token log-probabilities of completions
given their prompts in one forward pass (sharing each distinct prompt's KV cache between its
``n`` completions), which the updates differentiate; :func:`completion_logprobs` sums them
into sequence log-probabilities. The per-token kernels (log-softmax gather, entropy, the
chunked variant) are :mod:`bestk.losses`'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bestk.losses import chunked_token_logprobs, entropy_from_logits, token_logprobs
from bestk.train.model.hf import cache_kwarg, logits_to_keep, output_cache, positions

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from bestk.train.model.policy import Policy, Reference

__all__ = ["sequence_logprobs", "completion_logprobs"]


def sequence_logprobs(
    model: Policy | Reference,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    group_size: int = 1,
    chunked: bool = False,
    trim_logits: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(B, T)`` log-probs of ``completion_ids`` given the prompts (temperature-scaled), and
    optionally the ``(B, T)`` token entropies (differentiable).

    With ``group_size = n > 1`` and rows in groups of ``n`` identical prompts (the layout of
    :func:`sample`), each distinct prompt is encoded once and its KV cache shared by its ``n``
    completions (gradients flow back through the shared prompt encoding); otherwise one
    forward pass over ``prompt + completion``. Both give the same values.

    ``chunked``: compute them with :func:`bestk.losses.chunked_token_logprobs` (no float32
    copy of the whole ``(B, T, V)`` logits; equal up to float32 rounding), as runs with
    ``loss.micro_batch_size`` set do.

    ``trim_logits``: compute only the logits used -- the prompt encoding's last position in
    the shared branch, the last ``T + 1`` positions of the one forward otherwise
    (``logits_to_keep``); ``None``: when the model's weights are not float32
    (:func:`bestk.train.model.hf.logits_to_keep`, which says why). Values are unchanged up
    to rounding.
    """
    P = prompt_ids.shape[1]
    B, T = completion_ids.shape
    mask = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], 1)
    pos = positions(mask)
    n = group_size
    shared = n > 1 and B % n == 0
    if shared:
        uniq_ids = prompt_ids[::n]
        grouped = prompt_ids.view(B // n, n, P)
        shared = bool((grouped == uniq_ids[:, None, :]).all())
    if shared:
        uniq_mask = prompt_mask[::n]
        out = model(input_ids=uniq_ids, attention_mask=uniq_mask, position_ids=pos[::n, :P],
                    use_cache=True, **logits_to_keep(model, 1, trim_logits, index=True))
        cache = output_cache(out)
        shared = cache is not None and hasattr(cache, "batch_repeat_interleave")
    if shared:
        assert cache is not None  # shared: the prefill returned a cache with the helper
        cache.batch_repeat_interleave(n)
        first = out.logits[:, -1:, :].repeat_interleave(n, 0)
        if T > 1:
            out2 = model(
                input_ids=completion_ids[:, :-1],
                attention_mask=mask[:, :-1],
                position_ids=pos[:, P:-1],
                use_cache=True,
                **{cache_kwarg(model): cache},
            )
            logits = torch.cat([first, out2.logits], 1)
        else:
            logits = first
    else:
        ids = torch.cat([prompt_ids, completion_ids], 1)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                    **logits_to_keep(model, T + 1, trim_logits, index=True))
        logits = out.logits[:, -(T + 1) : -1, :]  # positions P - 1 .. P + T - 2
    if chunked:
        return chunked_token_logprobs(logits, completion_ids, temperature=temperature,
                                      with_entropy=with_entropy)
    logits = logits.float() / temperature
    logp = token_logprobs(logits, completion_ids)
    ent = entropy_from_logits(logits) if with_entropy else None
    return logp, ent


def completion_logprobs(
    model: Policy | Reference,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    group_size: int = 1,
    chunked: bool = False,
) -> torch.Tensor:
    """``(B,)`` sequence log-probabilities :math:`\\log\\pi(y|x) = \\sum_t \\log\\pi(y_t|x,
    y_{<t})` of the completions (tokens where ``completion_mask`` is 1; temperature-scaled):
    :func:`sequence_logprobs` summed over the completion (differentiable)."""
    logp, _ = sequence_logprobs(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask,
        temperature=temperature, group_size=group_size, chunked=chunked,
    )
    return (logp * completion_mask.to(logp.dtype)).sum(-1)
