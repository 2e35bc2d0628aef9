"""Rollout engines: where a run's completions come from.

A :class:`RolloutEngine` turns prompts into a :class:`~bestk.train.rollout.batch.Rollout`
(``n`` completions per prompt, their tokens, masks, sampling-time log-probabilities and
entropies) with one run section's sampling settings (``rollout`` for training, ``eval`` for
held-out evaluation). The trainer asks its engine for every batch, tells it after every
optimizer step that the policy changed (:meth:`RolloutEngine.sync`), so rollouts always come
from the current policy, and closes it at the end.

Engines are registered in :data:`ENGINES` by name with an :class:`EngineSpec` saying how to
build one and which optional extra it needs; code elsewhere asks the spec, never compares
engine names. A spec builds a backend once per run (:func:`open_engines`), from which the
``rollout`` and ``eval`` engines of that name are made with their own sampling settings. The
built-in engines:

* ``hf`` (:class:`HFEngine`) -- samples the live policy module itself with the KV-cache loop
  of :func:`bestk.train.rollout.sampler.sample` (explicit ``torch.Generator`` per draw, so a
  resumed run repeats an uninterrupted one bit for bit); :meth:`HFEngine.sync` has nothing to
  do.
* ``vllm`` (:class:`bestk.train.rollout.vllm_engine.VLLMEngine`) -- vLLM in the same process
  on the same device, the policy's weights pushed into it before a rollout whenever they
  changed.

Adding an engine: a class with ``device``, ``sample`` and ``sync`` as below, a backend
(``engine(options)``, ``close()``) built by a ``make(model, tokenizer, cfg, max_new_tokens)``
function, and an entry in :data:`ENGINES`; ``docs/design.md`` has the recipe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from bestk._optional import MissingDependency, available
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.sampler import sample
from bestk.train.rollout.settings import SamplingOptions, sampling_options
from bestk.train.rollout.vllm_engine import EXTRA as VLLM_EXTRAS
from bestk.train.rollout.vllm_engine import VLLMServer

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.train.config import ResolvedTrainConfig
    from bestk.train.model.policy import Policy

__all__ = ["RolloutEngine", "EngineBackend", "EngineSpec", "ENGINES", "HFEngine", "HFBackend",
           "Engines", "open_engines", "plain_sampling", "synced_sample"]


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
        bounds the completions sampled at once (``None``: all).

        Optional: an engine whose sampler is not the policy module, and which recomputes the
        policy's own log-probs and entropies of its samples, may set a class attribute
        ``defers_policy_pass = True`` and accept a keyword ``defer_policy_pass``: when the
        caller passes ``True`` it forwards the policy over every row itself before the
        weights change, so the engine leaves that pass pending
        (:attr:`~bestk.train.rollout.batch.Rollout.pending_policy`) for the caller to fill
        (:func:`synced_sample` passes the keyword only to such engines)."""
        ...

    def sync(self) -> None:
        """Make the next :meth:`sample` use the policy's current weights (the trainer calls
        it before every rollout and every evaluation)."""
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


class EngineBackend(Protocol):
    """What an engine spec builds once per run: :meth:`engine` gives the engine of one
    section's sampling settings (the ``rollout`` and ``eval`` engines of one name share the
    backend, e.g. one vLLM instance); :meth:`close` frees it."""

    def engine(self, options: SamplingOptions) -> RolloutEngine: ...

    def close(self) -> None: ...


@dataclass
class HFBackend:
    """The ``hf`` backend: the policy module and its tokenizer."""

    model: Policy
    tokenizer: PreTrainedTokenizerBase

    def engine(self, options: SamplingOptions) -> RolloutEngine:
        return HFEngine(self.model, self.tokenizer, options)

    def close(self) -> None:
        """Nothing to free."""


def _hf(model: Policy, tokenizer: PreTrainedTokenizerBase, cfg: ResolvedTrainConfig,
        max_new_tokens: int) -> EngineBackend:
    return HFBackend(model, tokenizer)


def _vllm(model: Policy, tokenizer: PreTrainedTokenizerBase, cfg: ResolvedTrainConfig,
          max_new_tokens: int) -> EngineBackend:
    return VLLMServer(model, tokenizer, cfg, max_new_tokens)


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: ``make(model, tokenizer, cfg, max_new_tokens)`` builds its
    backend for a run; ``module`` is the package it imports (``None``: nothing beyond
    ``bestk[train]``) and ``extras`` the pip extra (= distribution) that installs it, by device
    type (``cpu``, ``cuda``); ``description`` is its line in the docs."""

    make: Callable[[Policy, PreTrainedTokenizerBase, ResolvedTrainConfig, int], EngineBackend]
    module: str | None
    extras: dict[str, str]
    description: str

    def check_installed(self, name: str, device: str) -> None:
        """:class:`~bestk._optional.MissingDependency` naming the extra to install when the
        engine's package is missing (found on the path, not imported)."""
        if self.module is None or available(self.module):
            return
        kind = torch.device(device).type
        extra = self.extras.get(kind, self.extras["cuda"])
        raise MissingDependency(f"rollout engine {name!r} on {kind}", self.module, extra, extra,
                                "docs/training.md, Fast rollouts with vLLM")


#: The rollout engines by name (``rollout.engine``, ``eval.engine``).
ENGINES: dict[str, EngineSpec] = {
    "hf": EngineSpec(_hf, None, {}, "the policy module itself, KV-cache sampling loop"),
    "vllm": EngineSpec(_vllm, "vllm", VLLM_EXTRAS,
                       "vLLM in the same process, synced with the policy before each rollout"),
}


@dataclass
class Engines:
    """A run's two engines (``rollout``: training completions, ``eval``: held-out ones) and
    the backends they share; :meth:`close` frees them."""

    rollout: RolloutEngine
    eval: RolloutEngine
    backends: list[EngineBackend]

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
        self.backends = []


def open_engines(cfg: ResolvedTrainConfig, model: Policy, tokenizer: PreTrainedTokenizerBase,
                 max_new_tokens: int) -> Engines:
    """The engines of ``cfg.rollout.engine`` and ``cfg.eval.engine`` over ``model`` (one
    backend per distinct name), each with its section's sampling settings."""
    backends: dict[str, EngineBackend] = {}
    try:
        for name in dict.fromkeys((cfg.rollout.engine, cfg.eval.engine)):
            if name not in ENGINES:
                raise ValueError(
                    f"unknown rollout engine {name!r}; choose one of {sorted(ENGINES)}")
            backends[name] = ENGINES[name].make(model, tokenizer, cfg, max_new_tokens)
    except BaseException:
        for backend in backends.values():
            backend.close()
        raise
    return Engines(backends[cfg.rollout.engine].engine(sampling_options(cfg)),
                   backends[cfg.eval.engine].engine(sampling_options(cfg, "eval")),
                   list(backends.values()))


def synced_sample(engine: RolloutEngine, prompts: Sequence[str], *, n: int, max_new_tokens: int,
                  generator: torch.Generator, batch_size: int | None = None,
                  defer_policy_pass: bool = False) -> Rollout:
    """:meth:`RolloutEngine.sync`, then :meth:`RolloutEngine.sample` (``defer_policy_pass``
    passed on to an engine that ``defers_policy_pass``; others run their own pass, as ever);
    the seconds the sync took are the rollout's ``time/sync_s`` metric."""
    t0 = time.perf_counter()
    engine.sync()
    synced = time.perf_counter() - t0
    extra = {"defer_policy_pass": True} if defer_policy_pass and getattr(
        engine, "defers_policy_pass", False) else {}
    ro = engine.sample(prompts, n=n, max_new_tokens=max_new_tokens, generator=generator,
                       batch_size=batch_size, **extra)
    ro.metrics["time/sync_s"] = synced
    return ro
