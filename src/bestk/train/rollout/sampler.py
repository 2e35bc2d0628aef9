"""Batched sampling with a KV cache: the loop of the ``hf`` rollout engine.

:func:`sample` left-pads the prompts, repeats each ``n`` times, runs one prefill forward, then
one single-token forward per new token reusing the model's KV cache (temperature, top-k, nucleus
top-p, stop at any of the model's stop ids (:func:`bestk.train.model.hf.stop_token_ids`), a length
cap; prompts longer than ``max_prompt_length`` tokens cut from the left or refused,
:mod:`bestk.train.rollout.prompts`). It is a loop over *tokens* only; everything per token is one
batched forward. The prefill needs the logits of the last prompt position only and asks for
those alone (``logits_to_keep=1``; for a float32 model only when ``trim_logits`` says so,
:func:`bestk.train.model.hf.logits_to_keep`). The update recomputes the log-probabilities of
the sampled completions with gradients (:func:`bestk.train.model.logprobs.sequence_logprobs`).

Why a hand-written loop and not ``model.generate``: (1) every draw comes from an explicit
``torch.Generator`` seeded by ``(seed, step)``, so a resumed run repeats the uninterrupted one
bit for bit and an A/A control changes only the sampling noise (``generate`` samples from the
global RNG and takes no generator); (2) each distinct prompt is prefilled once and its ``n``
samples share the KV cache (``num_return_sequences`` expands the prompts before the prefill);
(3) the log-probability of every sampled token under the distribution it was drawn from
(:func:`sampling_logprobs`: tempered, top-k / top-p renormalised -- what vLLM's
``processed_logprobs`` returns, so both engines' ``Rollout.logprobs`` mean the same) and the
entropy of the tempered policy come out of the same loop (from ``generate`` they would be
rebuilt from its returned logits). The loop is short, batched per token, and tested against a
full forward pass (``tests/train/rollout/test_sampler.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from bestk.losses import entropy_from_logits
from bestk.train.model.hf import (
    cache_kwarg,
    logits_to_keep,
    output_cache,
    positions,
    stop_token_ids,
)
from bestk.train.rollout.batch import Rollout, concat_rollouts
from bestk.train.rollout.prompts import encode_prompts

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = ["sample", "sampling_logprobs", "top_k_filter", "top_p_filter"]




def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to ``-inf`` the logits outside the smallest set of tokens with mass ``>= top_p``
    (the most likely token is always kept)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, -1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))








@torch.no_grad()
def sample(
    model: Policy,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    generator: torch.Generator | None = None,
    top_k: int = 0,
    max_prompt_length: int | None = None,
    prompt_truncation: str = "left",
    batch_size: int | None = None,
    trim_logits: bool | None = None,
) -> Rollout:
    """Sample ``n`` completions for each prompt (see the module docstring); ``top_k`` 0 and
    ``max_prompt_length`` ``None`` are off.

    ``batch_size`` (``rollout.sample_batch_size``) bounds the completions sampled at once:
    the prompts go through in consecutive chunks of ``max(1, batch_size // n)`` (whole
    groups), each with its own prefill and KV cache, drawing from the same ``generator`` in
    order, and the chunks are joined (:func:`concat_rollouts`). The KV cache and the per-token
    logits then scale with ``batch_size``, not with ``len(prompts) * n``. ``None`` (or a
    chunk holding every prompt) samples all at once.

    ``trim_logits``: the prefill computes the last position's logits only (``None``: when the
    model's weights are not float32; :func:`bestk.train.model.hf.logits_to_keep`)."""
    if not prompts:
        raise ValueError("sample: no prompts")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if batch_size is not None:
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"sample: batch_size must be a positive integer, got {batch_size!r}")
        per_chunk = max(1, int(batch_size) // n)
        if per_chunk < len(prompts):
            opts = dict(n=n, temperature=temperature, top_p=top_p,
                        max_new_tokens=max_new_tokens, generator=generator, top_k=top_k,
                        max_prompt_length=max_prompt_length,
                        prompt_truncation=prompt_truncation, trim_logits=trim_logits)
            parts = [sample(model, tokenizer, prompts[i:i + per_chunk], **opts)  # type: ignore[arg-type]
                     for i in range(0, len(prompts), per_chunk)]
            return concat_rollouts(parts, pad_id=_pad_id(model, tokenizer))
    device = next(model.parameters()).device
    enc = encode_prompts(tokenizer, prompts, max_length=max_prompt_length,
                         truncation=prompt_truncation)
    uniq_ids = enc.input_ids.to(device)
    uniq_mask = enc.attention_mask.to(device)
    prompt_ids = uniq_ids.repeat_interleave(n, 0)
    prompt_mask = uniq_mask.repeat_interleave(n, 0)
    stop = torch.tensor(stop_token_ids(model, tokenizer), device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(stop[0])

    was_training = model.training
    model.eval()
    try:  # the caller's mode comes back whatever happens (an error, a stop, Ctrl-C)
        toks, lps, ents, masks, done = _decode(
            model, uniq_ids, uniq_mask, prompt_ids, prompt_mask, n=n, temperature=temperature,
            top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens, generator=generator,
            stop=stop, pad=pad, trim_logits=trim_logits)
    finally:
        model.train(was_training)
    completion_ids = torch.stack(toks, 1)
    completion_mask = torch.stack(masks, 1)
    texts = tokenizer.batch_decode(completion_ids.cpu(), skip_special_tokens=True)
    return Rollout(
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask.to(prompt_mask.dtype),
        texts,
        torch.stack(lps, 1) * completion_mask,
        torch.stack(ents, 1) * completion_mask,
        done,
        {} if max_prompt_length is None else {"prompts_truncated": float(enc.cut)},
    )


def _decode(model: Policy, uniq_ids: torch.Tensor, uniq_mask: torch.Tensor,
            prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, n: int,
            temperature: float, top_p: float, top_k: int, max_new_tokens: int,
            generator: torch.Generator | None, stop: torch.Tensor, pad: int,
            trim_logits: bool | None) -> tuple[list[torch.Tensor], list[torch.Tensor],
                                               list[torch.Tensor], list[torch.Tensor],
                                               torch.Tensor]:
    """:func:`sample`'s KV-cache loop on a model in eval mode: prefill each distinct prompt
    once, copy its cache to its ``n`` samples, then draw up to ``max_new_tokens`` tokens
    (temperature, top-k, top-p) until every sequence has stopped. Returns the per-step
    tokens, their log-probabilities under the distribution they were drawn from (tempered,
    then top-k / top-p filtered and renormalised: :func:`sampling_logprobs`), the entropies
    of the full tempered distribution, the per-step completion masks and the final ``done``
    flags."""
    device = prompt_ids.device
    B = prompt_ids.shape[0]
    cache_kw = cache_kwarg(model)
    last_only = logits_to_keep(model, 1, trim_logits)  # the prefill uses its last logits
    # Prefill each distinct prompt once, then give each of its n samples a copy of the cache.
    pos = positions(uniq_mask)
    out = model(input_ids=uniq_ids, attention_mask=uniq_mask, position_ids=pos, use_cache=True,
                **last_only)
    past = output_cache(out)
    next_logits = out.logits[:, -1, :]
    if n > 1:
        if hasattr(past, "batch_repeat_interleave"):
            assert past is not None  # None has no batch_repeat_interleave
            past.batch_repeat_interleave(n)
            next_logits = next_logits.repeat_interleave(n, 0)
            pos = pos.repeat_interleave(n, 0)
        else:  # a cache without the helper: prefill every copy
            pos = positions(prompt_mask)
            out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=pos,
                        use_cache=True, **last_only)
            past = output_cache(out)
            next_logits = out.logits[:, -1, :]
    attn = prompt_mask
    last_pos = pos[:, -1]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    toks, lps, ents, masks = [], [], [], []
    for t in range(max_new_tokens):
        z = next_logits.float() / temperature
        ents.append(entropy_from_logits(z))
        zf = top_p_filter(top_k_filter(z, top_k), top_p)
        probs = torch.softmax(zf, -1)
        tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, pad), tok)
        toks.append(tok)
        # log pi_sampler(tok): the distribution drawn from, top-k / top-p renormalised; 0 on
        # the padding after a stop (a filtered-out pad would be -inf, and -inf * 0 is nan)
        lp = torch.log_softmax(zf, -1).gather(-1, tok[:, None]).squeeze(-1)
        lps.append(torch.where(done, torch.zeros_like(lp), lp))
        masks.append(~done)
        done = done | torch.isin(tok, stop)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype, device=device)], 1)
        last_pos = last_pos + 1
        out = model(
            input_ids=tok[:, None],
            attention_mask=attn,
            position_ids=last_pos[:, None],
            use_cache=True,
            **{cache_kw: past},
        )
        past = output_cache(out)
        next_logits = out.logits[:, -1, :]
    return toks, lps, ents, masks, done


def _pad_id(model: Policy, tokenizer: PreTrainedTokenizerBase) -> int:
    pad = tokenizer.pad_token_id
    return int(pad) if pad is not None else stop_token_ids(model, tokenizer)[0]








def sampling_logprobs(logits: torch.Tensor, tokens: torch.Tensor, *, temperature: float,
                      top_k: int | None = 0, top_p: float = 1.0) -> torch.Tensor:
    """``log pi_sampler(token)``: the log-probability of each of ``tokens`` (``(...,)``) under
    the distribution a rollout engine draws it from, given the policy's ``logits``
    (``(..., V)``): ``log_softmax(top_p(top_k(logits / temperature)))``, the filtered tokens
    removed and the rest renormalised -- vLLM's ``processed_logprobs``. Every engine's
    ``Rollout.logprobs`` means this (the sampler contract); with top-k and top-p off it is the
    tempered policy's log-probability, which the trainer recomputes."""
    z = top_p_filter(top_k_filter(logits.float() / temperature, top_k), top_p)
    return torch.log_softmax(z, -1).gather(-1, tokens[..., None]).squeeze(-1)


def top_k_filter(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Set to ``-inf`` the logits below the ``top_k``-th largest of each row (ties with it are
    kept, as Hugging Face's ``TopKLogitsWarper`` keeps them). ``top_k`` 0 or ``None``, or at
    least the vocabulary size, returns ``logits`` itself (nothing filtered)."""
    if not top_k or top_k >= logits.shape[-1]:
        return logits
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))
