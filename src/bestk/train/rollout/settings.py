"""The sampling settings of a resolved run, as the rollout engines and the run header take them.

* :func:`sampling_header` -- the run header's ``sampling:`` line (which value came from the
  model's ``generation_config``);
* :func:`sampling_options` -- the temperature / top-p / top-k and length cap of a section
  (``rollout`` or ``eval``) as the engines' keyword arguments;
* :func:`eval_noise_seed` -- the seed of the held-out evaluations' sampling noise.

How a config's ``null`` sampling keys are filled (the config, else the model's
``generation_config``, else the defaults) is :mod:`bestk.train.config.sampling`'s.
"""

from __future__ import annotations

from typing import TypedDict

from bestk.train.config import (
    ResolvedEvalConfig,
    ResolvedRolloutConfig,
    ResolvedTrainConfig,
)
from bestk.train.config.sampling import DEFAULTS

__all__ = ["sampling_header", "sampling_options", "SamplingOptions", "eval_noise_seed"]

def sampling_header(cfg: ResolvedTrainConfig) -> str:
    """The run header's ``sampling:`` line of a resolved config: each training value, marked
    ``(generation_config)`` when the model's generation config (as the resolution read it,
    ``cfg.generation_config``) sets that same value, else ``(config)``; the evaluation's
    values when they differ."""
    gen = cfg.generation_config

    def line(sec: ResolvedRolloutConfig | ResolvedEvalConfig) -> str:
        parts = []
        for name in DEFAULTS:
            value = getattr(sec, name)
            same = gen is not None and getattr(gen, name, None) is not None and \
                getattr(gen, name) == value
            parts.append(f"{name}={value} ({'generation_config' if same else 'config'})")
        return " ".join(parts)

    head = f"sampling: {line(cfg.rollout)}"
    if any(getattr(cfg.rollout, k) != getattr(cfg.eval, k) for k in DEFAULTS):
        head += f"; eval: {line(cfg.eval)}"
    return head


class SamplingOptions(TypedDict):
    """The sampling keyword arguments of a resolved config (:func:`sampling_options`)."""

    temperature: float
    top_p: float
    top_k: int
    max_prompt_length: int | None
    prompt_truncation: str


def sampling_options(cfg: ResolvedTrainConfig, section: str = "rollout") -> SamplingOptions:
    """The keyword arguments of :func:`bestk.train.rollout.sampler.sample` (and
    :func:`bestk.train.rollout.evaluate.evaluate`) for the training (``rollout``) or held-out
    (``eval``) sampling of a resolved config: temperature, top-p, top-k and the prompt
    length limit."""
    sec = getattr(cfg, section)
    return {"temperature": sec.temperature, "top_p": sec.top_p, "top_k": sec.top_k or 0,
            "max_prompt_length": cfg.rollout.max_prompt_length,
            "prompt_truncation": cfg.rollout.prompt_truncation}


def eval_noise_seed(cfg: ResolvedTrainConfig) -> int:
    """The seed of a run's evaluation noise: ``eval.seed``, else ``sampling_seed``, else
    ``seed`` (a fixed ``eval.seed`` gives every run the same held-out samples of a policy)."""
    if cfg.eval.seed is not None:
        return int(cfg.eval.seed)
    return int(cfg.seed if cfg.sampling_seed is None else cfg.sampling_seed)
