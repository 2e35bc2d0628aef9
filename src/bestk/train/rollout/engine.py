"""Rollout engines: where a run's completions come from.

A :class:`RolloutEngine` turns prompts into a :class:`~bestk.train.rollout.batch.Rollout`
(``n`` completions per prompt, their tokens, masks, sampling-time log-probabilities and
entropies) with one run section's sampling settings (``rollout`` for training, ``eval`` for
held-out evaluation). The trainer asks its engine for every batch, tells it after every
optimizer step that the policy changed (:meth:`RolloutEngine.sync`), so rollouts always come
from the current policy, and closes it at the end.

Engines are registered in :data:`ENGINES` by name with an :class:`EngineSpec` saying how to
build one and which optional extra it needs; code elsewhere asks the spec, never compares
engine names. The built-in engine:

* ``hf`` (:class:`HFEngine`) -- samples the live policy module itself with the KV-cache loop
  of :func:`bestk.train.rollout.sampler.sample` (explicit ``torch.Generator`` per draw, so a
  resumed run repeats an uninterrupted one bit for bit); :meth:`HFEngine.sync` has nothing to
  do.

Adding an engine: a class with ``sample``, ``sync`` and ``close`` as below, built by a
``make(model, tokenizer, options)`` function, and an entry in :data:`ENGINES` (with the extra
that installs its package); ``docs/design.md`` has the recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.sampler import sample
from bestk.train.rollout.settings import SamplingOptions

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = ["RolloutEngine", "EngineSpec", "ENGINES", "HFEngine", "make_engine",
           "plain_sampling"]


class RolloutEngine(Protocol):
    """What the trainer, the evaluation and ``bestk eval`` need of a sampler."""

    @property
    def device(self) -> torch.device:
        """The device of the generators :meth:`sample` draws from."""
        ...

    def sample(self, prompts: Sequence[str], *, n: int, max_new_tokens: int,
               generator: torch.Generator, batch_size: int | None = None) -> Rollout:
        """``n`` completions per prompt (sample ``i`` answers prompt ``i // n``), at most
        ``max_new_tokens`` tokens each, the noise drawn from ``generator``; ``batch_size``
        bounds the completions sampled at once (``None``: all)."""
        ...

    def sync(self) -> None:
        """Make the engine sample from the policy's current weights (called after every
        optimizer step)."""
        ...

    def close(self) -> None:
        """Free what the engine holds (called once, at the end of the run)."""
        ...


def plain_sampling() -> SamplingOptions:
    """Sampling from the model's own distribution: temperature 1, no top-p / top-k, no prompt
    length limit (the defaults of :func:`~bestk.train.rollout.sampler.sample`)."""
    return {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_prompt_length": None,
            "prompt_truncation": "left"}


@dataclass
class HFEngine:
    """The ``hf`` engine: the policy module itself, sampled with
    :func:`~bestk.train.rollout.sampler.sample` (``options``: a section's sampling settings,
    :func:`~bestk.train.rollout.settings.sampling_options`)."""

    model: Policy
    tokenizer: PreTrainedTokenizerBase
    options: SamplingOptions = field(default_factory=plain_sampling)

    @property
    def device(self) -> torch.device:
        """The policy's device."""
        return next(self.model.parameters()).device

    def sample(self, prompts: Sequence[str], *, n: int, max_new_tokens: int,
               generator: torch.Generator, batch_size: int | None = None) -> Rollout:
        return sample(self.model, self.tokenizer, prompts, n=n, max_new_tokens=max_new_tokens,
                      generator=generator, batch_size=batch_size, **self.options)

    def sync(self) -> None:
        """Nothing to do: the engine samples the live module."""

    def close(self) -> None:
        """Nothing to free."""


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: ``make(model, tokenizer, options)`` builds it; ``extra`` is the
    pip extra that installs what it needs (``None``: nothing beyond ``bestk[train]``);
    ``description`` is its line in the docs."""

    make: Callable[[Policy, PreTrainedTokenizerBase, SamplingOptions], RolloutEngine]
    extra: str | None
    description: str


#: The rollout engines by name.
ENGINES: dict[str, EngineSpec] = {
    "hf": EngineSpec(HFEngine, None, "the policy module itself, KV-cache sampling loop"),
}


def make_engine(name: str, model: Policy, tokenizer: PreTrainedTokenizerBase,
                options: SamplingOptions) -> RolloutEngine:
    """The engine ``name`` of :data:`ENGINES` over ``model`` with ``options``."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; choose one of {sorted(ENGINES)}")
    return ENGINES[name].make(model, tokenizer, options)
