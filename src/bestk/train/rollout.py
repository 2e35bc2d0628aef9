"""Batched sampling with a KV cache, and sequence log-probabilities for the update.

:func:`sample` left-pads the prompts, repeats each ``n`` times, runs one prefill forward, then
one single-token forward per new token reusing the model's KV cache (temperature, top-k, nucleus
top-p, stop at any of the model's stop ids (:func:`bestk.train.hf.stop_token_ids`), a length
cap; prompts longer than ``max_prompt_length`` tokens cut from the left or refused,
:mod:`bestk.train.prompts`). It is a loop over *tokens* only; everything per token is one
batched forward. :func:`sequence_logprobs` recomputes the log-probabilities (and token
entropies) of the sampled completions in one forward pass, which the PPO update
differentiates.

Why a hand-written loop and not ``model.generate``: (1) every draw comes from an explicit
``torch.Generator`` seeded by ``(seed, step)``, so a resumed run repeats the uninterrupted one
bit for bit and an A/A control changes only the sampling noise (``generate`` samples from the
global RNG and takes no generator); (2) each distinct prompt is prefilled once and its ``n``
samples share the KV cache (``num_return_sequences`` expands the prompts before the prefill);
(3) the log-probability and entropy of every sampled token under the temperature-scaled
distribution come out of the same loop (from ``generate`` they would be rebuilt from its
returned logits). The loop is short, batched per token, and tested against a full forward
pass (``tests/test_train_rollout.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from bestk.losses import chunked_token_logprobs, entropy_from_logits, token_logprobs
from bestk.train.hf import stop_token_ids
from bestk.train.prompts import encode_prompts
from bestk.train.sampling import top_k_filter

__all__ = ["Rollout", "sample", "concat_rollouts", "sequence_logprobs", "completion_logprobs",
           "top_p_filter"]


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


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in transformers >= 5.2x,
    ``past_key_values`` before)."""
    if hasattr(model, "get_base_model"):  # a PEFT model forwards **kwargs to its base model
        model = model.get_base_model()
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _out_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


@torch.no_grad()
def sample(
    model: Any,
    tokenizer: Any,
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
) -> Rollout:
    """Sample ``n`` completions for each prompt (see the module docstring); ``top_k`` 0 and
    ``max_prompt_length`` ``None`` are off.

    ``batch_size`` (``rollout.sample_batch_size``) bounds the completions sampled at once:
    the prompts go through in consecutive chunks of ``max(1, batch_size // n)`` (whole
    groups), each with its own prefill and KV cache, drawing from the same ``generator`` in
    order, and the chunks are joined (:func:`concat_rollouts`). The KV cache and the per-token
    logits then scale with ``batch_size``, not with ``len(prompts) * n``. ``None`` (or a
    chunk holding every prompt) samples all at once."""
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
                        prompt_truncation=prompt_truncation)
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
    B = prompt_ids.shape[0]
    stop = torch.tensor(stop_token_ids(model, tokenizer), device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(stop[0])

    was_training = model.training
    model.eval()
    cache_kw = _cache_kwarg(model)
    # Prefill each distinct prompt once, then give each of its n samples a copy of the cache.
    pos = _positions(uniq_mask)
    out = model(input_ids=uniq_ids, attention_mask=uniq_mask, position_ids=pos, use_cache=True)
    past = _out_cache(out)
    next_logits = out.logits[:, -1, :]
    if n > 1:
        if hasattr(past, "batch_repeat_interleave"):
            past.batch_repeat_interleave(n)
            next_logits = next_logits.repeat_interleave(n, 0)
            pos = pos.repeat_interleave(n, 0)
        else:  # a cache without the helper: prefill every copy
            pos = _positions(prompt_mask)
            out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=pos,
                        use_cache=True)
            past = _out_cache(out)
            next_logits = out.logits[:, -1, :]
    attn = prompt_mask
    last_pos = pos[:, -1]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    toks, lps, ents, masks = [], [], [], []
    for t in range(max_new_tokens):
        z = next_logits.float() / temperature
        logp_full = torch.log_softmax(z, -1)
        ents.append(entropy_from_logits(z))
        zf = top_p_filter(top_k_filter(z, top_k), top_p)
        probs = torch.softmax(zf, -1)
        tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, pad), tok)
        toks.append(tok)
        lps.append(logp_full.gather(-1, tok[:, None]).squeeze(-1))
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
        past = _out_cache(out)
        next_logits = out.logits[:, -1, :]
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


def _pad_id(model: Any, tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad) if pad is not None else stop_token_ids(model, tokenizer)[0]


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
    )


def sequence_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    group_size: int = 1,
    chunked: bool = False,
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
    """
    P = prompt_ids.shape[1]
    B, T = completion_ids.shape
    mask = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], 1)
    pos = _positions(mask)
    n = group_size
    shared = n > 1 and B % n == 0
    if shared:
        uniq_ids = prompt_ids[::n]
        grouped = prompt_ids.view(B // n, n, P)
        shared = bool((grouped == uniq_ids[:, None, :]).all())
    if shared:
        uniq_mask = prompt_mask[::n]
        out = model(input_ids=uniq_ids, attention_mask=uniq_mask, position_ids=pos[::n, :P],
                    use_cache=True)
        cache = _out_cache(out)
        shared = cache is not None and hasattr(cache, "batch_repeat_interleave")
    if shared:
        cache.batch_repeat_interleave(n)
        first = out.logits[:, -1:, :].repeat_interleave(n, 0)
        if T > 1:
            out2 = model(
                input_ids=completion_ids[:, :-1],
                attention_mask=mask[:, :-1],
                position_ids=pos[:, P:-1],
                use_cache=True,
                **{_cache_kwarg(model): cache},
            )
            logits = torch.cat([first, out2.logits], 1)
        else:
            logits = first
    else:
        ids = torch.cat([prompt_ids, completion_ids], 1)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos)
        logits = out.logits[:, P - 1 : -1, :]
    if chunked:
        return chunked_token_logprobs(logits, completion_ids, temperature=temperature,
                                      with_entropy=with_entropy)
    logits = logits.float() / temperature
    logp = token_logprobs(logits, completion_ids)
    ent = entropy_from_logits(logits) if with_entropy else None
    return logp, ent


def completion_logprobs(
    model: Any,
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
