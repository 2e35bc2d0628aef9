"""Sampling settings of the embedded trainer: top-k filtering and the model's own defaults.

* :func:`top_k_filter` -- keep the ``k`` most likely tokens (``rollout.top_k``; 0 = off, as
  TRL's ``top_k``). Applied after the temperature and before nucleus (top-p) filtering, the
  order of Hugging Face's ``generate`` (temperature -> top-k -> top-p warpers).
* :func:`resolve_sampling` -- the temperature, top-p and top-k a run samples with: the value of
  the config when it sets one, else the model's ``generation_config`` (an instruct model ships
  its recommended ones, e.g. Qwen2.5-Instruct's temperature 0.7, top-p 0.8, top-k 20), else
  the plain defaults 1.0 / 1.0 / 0; :meth:`SamplingParams.describe` says which came from where
  (for the run header);
* :func:`model_generation_config` -- the sampling values a local model directory's
  ``generation_config.json`` sets, and :func:`fill_sampling`, which fills a run config's
  ``null`` sampling keys (``rollout.`` and ``eval.`` ``temperature`` / ``top_p`` / ``top_k``)
  from them once, when the run starts (:func:`bestk.train.validation.resolve_defaults`), so
  ``config.yaml`` records the values used; :func:`sampling_header` is the run header's line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypedDict

from bestk.train.config import (
    ResolvedEvalConfig,
    ResolvedRolloutConfig,
    ResolvedTrainConfig,
    TrainConfig,
)

__all__ = ["SamplingParams", "resolve_sampling", "DEFAULTS", "model_generation_config",
           "fill_sampling", "sampling_header", "sampling_options", "SamplingOptions",
           "eval_noise_seed"]

#: The values used when neither the config nor the model's generation_config sets one.
DEFAULTS: dict[str, float | int] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}




@dataclass(frozen=True)
class SamplingParams:
    """Resolved sampling settings and where each came from (``config``, ``generation_config``
    or ``default``)."""

    temperature: float
    top_p: float
    top_k: int
    source: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``temperature=0.7 (generation_config) top_p=1.0 (config) top_k=0 (default)``."""
        return " ".join(f"{k}={getattr(self, k)} ({self.source.get(k, 'config')})"
                        for k in ("temperature", "top_p", "top_k"))


def _check(name: str, value: float, label: str) -> float | int:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok and name == "temperature":
        ok = value > 0
    elif ok and name == "top_p":
        ok = 0 < value <= 1
    elif ok and name == "top_k":
        ok = float(value).is_integer() and value >= 0
    if not ok:
        rule = {"temperature": "> 0", "top_p": "in (0, 1]", "top_k": "an integer >= 0 (0 = off)"}
        raise ValueError(f"{label} must be {rule[name]}, got {value!r}")
    return int(value) if name == "top_k" else float(value)


def resolve_sampling(temperature: float | None, top_p: float | None, top_k: int | None,
                     generation_config: object = None, *, where: str = "rollout"
                     ) -> SamplingParams:
    """The sampling settings of a run: each of ``temperature``, ``top_p``, ``top_k`` as given
    when it is not ``None``, else the model's ``generation_config`` value when it sets one
    (not ``None``), else :data:`DEFAULTS`. Values are checked (``temperature > 0``,
    ``0 < top_p <= 1``, ``top_k`` an integer >= 0); a bad one raises ``ValueError`` naming
    ``where`` (the config section, or ``the model's generation_config``)."""
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, value in given.items():
        if value is not None:
            values[name] = _check(name, value, f"config key '{where}.{name}'")
            source[name] = "config"
            continue
        model_value = getattr(generation_config, name, None) if generation_config else None
        if model_value is not None:
            values[name] = _check(name, model_value, f"the model's generation_config {name}")
            source[name] = "generation_config"
        else:
            values[name], source[name] = DEFAULTS[name], "default"
    return SamplingParams(values["temperature"], values["top_p"], values["top_k"], source)


def model_generation_config(model_path: str | None) -> SimpleNamespace | None:
    """The ``temperature`` / ``top_p`` / ``top_k`` that ``model_path/generation_config.json``
    sets (only the keys the file itself holds, not transformers' class defaults), or ``None``
    without a model directory or without the file. An unreadable file is a one-line
    ``ValueError`` naming it."""
    if not model_path:
        return None
    path = Path(model_path) / "generation_config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable generation config ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return SimpleNamespace(**{k: data.get(k) for k in DEFAULTS})


def fill_sampling(cfg: TrainConfig, generation_config: SimpleNamespace | None) -> None:
    """Fill, in place, the ``None`` sampling keys of ``cfg.rollout`` and ``cfg.eval``
    (``temperature``, ``top_p``, ``top_k``) with the model's ``generation_config`` value when
    it sets one (``generation_config``: :func:`model_generation_config` of ``model.path``, read
    by the caller), else :data:`DEFAULTS` (:func:`resolve_sampling`). A key set in the config
    is kept."""
    for sec in (cfg.rollout, cfg.eval):
        got = resolve_sampling(sec.temperature, sec.top_p, sec.top_k, generation_config,
                               where=sec.key)
        for name in DEFAULTS:
            if getattr(sec, name) is None:
                setattr(sec, name, getattr(got, name))


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
