"""Prompt length of the embedded trainer (``rollout.max_prompt_length``).

A prompt longer than ``max_prompt_length`` tokens is either cut from the left, keeping its
last ``max_prompt_length`` tokens (the end of the prompt, where the question and the
generation prompt of a chat template are; TRL cuts prompts the same way, its tokenizer's
``truncation_side="left"``), or refused (:data:`TRUNCATION`). Cutting happens on token ids,
never on text, so a completion continues exactly the tokens the model saw.

* :func:`left_truncate` -- the cut of one prompt's ids;
* :func:`encode_prompts` -- the left-padded batch that :func:`bestk.train.rollout.sampler.sample`
  feeds the model, with the number of prompts cut (logged per step); without a limit, or when
  no prompt exceeds it, exactly ``tokenizer(prompts, padding=True, return_tensors="pt",
  add_special_tokens=False)``;
* :func:`check_prompt_lengths` -- the whole task's prompts checked once, before any work: the
  number that will be cut, or one ``ValueError`` line in ``error`` mode;
* :func:`lengths_over` -- the prompts longer than a number of tokens (the model's context, in
  :func:`bestk.train.setup.check_context`), tokenizing only those that may be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

__all__ = ["TRUNCATION", "EncodedPrompts", "left_truncate", "encode_prompts",
           "prompt_lengths", "lengths_over", "check_prompt_lengths"]

#: What to do with a prompt longer than ``rollout.max_prompt_length`` tokens: ``left`` keeps its
#: last ``max_prompt_length`` tokens; ``error`` refuses the task before any work.
TRUNCATION = ("left", "error")


@dataclass(frozen=True)
class EncodedPrompts:
    """A batch of prompts as the model sees them.

    ``input_ids`` / ``attention_mask``: ``(B, L)`` token ids and mask, padded on the
    tokenizer's padding side (the trainer's is left); ``lengths``: each prompt's length in
    tokens before any cut; ``cut``: how many prompts were cut.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: list[int]
    cut: int


def _check_limit(max_length: int | None, truncation: str) -> None:
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                   or max_length < 1):
        raise ValueError(f"rollout.max_prompt_length must be a positive integer or null, got "
                         f"{max_length!r}")
    if truncation not in TRUNCATION:
        raise ValueError(f"rollout.prompt_truncation must be one of {', '.join(TRUNCATION)}, got "
                         f"{truncation!r}")


def left_truncate(ids: Sequence[int], max_length: int) -> list[int]:
    """The last ``max_length`` tokens of ``ids`` (all of them when it is not longer)."""
    ids = list(ids)
    return ids[-max_length:] if len(ids) > max_length else ids


def prompt_lengths(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[int]:
    """The length in tokens of each prompt (no special tokens added, as the trainer encodes)."""
    return [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]


def lengths_over(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], limit: int
                 ) -> list[int]:
    """The lengths in tokens of those of ``texts`` longer than ``limit`` tokens (no special
    tokens added). Only texts of more than ``limit - 2`` UTF-8 bytes are tokenized: a tokenizer
    makes at most one token per byte (a character tokenizer one per character, byte-level BPE
    at most one per byte; SentencePiece may add a leading one), so a short prompt costs
    nothing to check and a run of short prompts tokenizes none."""
    maybe = [t for t in texts if len(t.encode("utf-8")) + 2 > limit]
    return [n for n in prompt_lengths(tokenizer, maybe) if n > limit] if maybe else []


def _too_long(n_long: int, total: int, longest: int, max_length: int) -> ValueError:
    return ValueError(
        f"{n_long} of {total} prompts are longer than rollout.max_prompt_length = {max_length} "
        f"tokens (the longest has {longest}); raise it, or set rollout.prompt_truncation=left "
        f"to keep the last {max_length} tokens of each"
    )


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], *,
                   max_length: int | None = None, truncation: str = "left") -> EncodedPrompts:
    """The padded token ids of ``prompts``, each cut to its last ``max_length`` tokens.

    ``max_length=None`` (no limit), or no prompt longer than it: the tensors are exactly
    ``tokenizer(list(prompts), padding=True, return_tensors="pt", add_special_tokens=False)``
    (so a run without long prompts is unchanged). ``truncation="error"`` raises ``ValueError``
    (one line: how many prompts, the longest) instead of cutting.
    """
    _check_limit(max_length, truncation)
    if not prompts:
        raise ValueError("encode_prompts: no prompts")
    prompts = list(prompts)
    if max_length is None:  # one tokenizer call, as the trainer always made
        enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
        return EncodedPrompts(enc["input_ids"], enc["attention_mask"],
                              enc["attention_mask"].sum(-1).tolist(), 0)
    ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    lengths = [len(x) for x in ids]
    long = [n for n in lengths if n > max_length]
    if not long:
        enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
        return EncodedPrompts(enc["input_ids"], enc["attention_mask"], lengths, 0)
    if truncation == "error":
        raise _too_long(len(long), len(prompts), max(long), max_length)
    cut_ids = [left_truncate(x, max_length) for x in ids]
    enc = tokenizer.pad({"input_ids": cut_ids}, padding=True, return_tensors="pt",
                        return_attention_mask=True)
    return EncodedPrompts(enc["input_ids"], enc["attention_mask"], lengths, len(long))


def check_prompt_lengths(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                         max_length: int | None, truncation: str = "left") -> int:
    """How many of ``prompts`` (a task's rendered prompts, training and held-out) are longer
    than ``max_length`` tokens, i.e. will be cut; ``0`` without a limit. In ``error`` mode a
    long prompt raises ``ValueError`` (one line), so a run refuses before any work."""
    _check_limit(max_length, truncation)
    if max_length is None or not prompts:
        return 0
    long = [n for n in prompt_lengths(tokenizer, prompts) if n > max_length]
    if long and truncation == "error":
        raise _too_long(len(long), len(prompts), max(long), max_length)
    return len(long)
