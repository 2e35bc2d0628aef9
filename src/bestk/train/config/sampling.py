"""The sampling settings a run config resolves to: each of ``temperature``, ``top_p`` and
``top_k`` of ``rollout`` and ``eval`` as the config sets it, else the model's
``generation_config`` (an instruct model ships its recommended ones, e.g. Qwen2.5-Instruct's
temperature 0.7, top-p 0.8, top-k 20), else the plain defaults 1.0 / 1.0 / 0.

* :func:`resolve_sampling` -- the three values and where each came from
  (:meth:`SamplingParams.describe`, for the run header);
* :func:`fill_sampling` -- fill a run config's ``null`` sampling keys once, when the run is
  resolved (:func:`bestk.train.config.resolve.fill_defaults`), so ``config.yaml`` records
  the values used.

The model's ``generation_config`` is read by :func:`bestk.train.model.source.
model_generation_config`; top-k / top-p filtering itself is the rollout's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from bestk.train.config.schema import TrainConfig

__all__ = ["SamplingParams", "resolve_sampling", "DEFAULTS", "fill_sampling"]

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


def fill_sampling(cfg: TrainConfig, generation_config: SimpleNamespace | None) -> None:
    """Fill, in place, the ``None`` sampling keys of ``cfg.rollout`` and ``cfg.eval``
    (``temperature``, ``top_p``, ``top_k``) with the model's ``generation_config`` value when
    it sets one (``generation_config``: what
    :func:`~bestk.train.model.source.model_generation_config` read of ``model.path``), else
    :data:`DEFAULTS` (:func:`resolve_sampling`). A key set in the config is kept."""
    for sec in (cfg.rollout, cfg.eval):
        got = resolve_sampling(sec.temperature, sec.top_p, sec.top_k, generation_config,
                               where=sec.key)
        for name in DEFAULTS:
            if getattr(sec, name) is None:
                setattr(sec, name, getattr(got, name))
