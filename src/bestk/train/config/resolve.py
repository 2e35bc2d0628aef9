"""The resolution of a run config: the fields it leaves to the algorithm and to the model,
filled in once (:func:`fill_defaults`), giving the
:class:`~bestk.train.config.schema.ResolvedTrainConfig` every command runs with.

The facts it needs from above the config room are passed in: the algorithm's defaults (any
object with ``default_n`` and ``out_suffix``, e.g. an
:class:`~bestk.train.algorithms.AlgorithmSpec`) and a reader of the model's files
(:class:`ModelFacts`). :func:`bestk.train.validation.resolve_defaults` looks both up and
calls :func:`fill_defaults`; :func:`bestk.train.validation.resolve_config` checks the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Protocol

from bestk.train.config.io import config_to_dict, resolved_from_dict
from bestk.train.config.sampling import fill_sampling
from bestk.train.config.schema import (
    DEFAULT_OUT,
    DEFAULT_SFT_STEPS,
    ResolvedTrainConfig,
    TrainConfig,
)

__all__ = ["AlgorithmDefaults", "ModelFacts", "fill_defaults"]


class AlgorithmDefaults(Protocol):
    """What the resolution reads of an algorithm: its group size when the config sets none
    (``rollout.n``) and the suffix of its default run directory (``out``)."""

    @property
    def default_n(self) -> int: ...

    @property
    def out_suffix(self) -> str: ...


@dataclass(frozen=True)
class ModelFacts:
    """What the resolution reads of ``model.path``, once: the sampling values of its
    ``generation_config.json`` (``None``: no file, or no ``model.path``) and its vocabulary
    size (``None``: unknown, or the tiny default model)."""

    generation_config: SimpleNamespace | None
    vocab_size: int | None


def fill_defaults(cfg: TrainConfig, algorithm: AlgorithmDefaults,
                  read_model: Callable[[str | None], ModelFacts]) -> ResolvedTrainConfig:
    """The :class:`~bestk.train.config.schema.ResolvedTrainConfig` of ``cfg``: the fields it
    leaves ``None`` filled in -- ``rollout.n`` (``algorithm.default_n``: 8 for ``pg``, 1 for
    ``apo`` and ``dpo``), ``out`` (``runs/bestk`` + ``algorithm.out_suffix``: ``runs/bestk``,
    ``runs/bestk-apo``, ``runs/bestk-dpo``), ``sft.steps`` (100 for the tiny model, 0 for a
    ``model.path``), the ``auto`` speed settings (``model.lora.dtype`` from the model's dtype,
    ``loss.chunked_logprobs`` from its vocabulary) and the ``null`` sampling keys (the model's
    ``generation_config``: :func:`~bestk.train.config.sampling.fill_sampling`). A value set
    explicitly is kept, whatever the order it was set in; a leading ``~`` of ``out`` and
    ``model.path`` is expanded to the home directory before the model is read, once
    (``read_model`` of the expanded ``model.path``). ``cfg`` itself is not changed."""
    out = cfg.model_copy(deep=True)
    if out.rollout.n is None:
        out.rollout.n = algorithm.default_n
    if out.out is None:
        out.out = DEFAULT_OUT + algorithm.out_suffix
    if out.sft.steps is None:  # a pretrained model.path is not warmed up unless asked to
        out.sft.steps = 0 if out.model.path is not None else DEFAULT_SFT_STEPS
    if out.out.startswith("~"):
        out.out = os.path.expanduser(out.out)
    if out.model.path is not None and out.model.path.startswith("~"):
        out.model.path = os.path.expanduser(out.model.path)
    facts = read_model(out.model.path)
    fill_sampling(out, facts.generation_config)  # null keys: generation_config, else defaults
    out.model.lora.dtype = out.model.lora.resolved_dtype(out.model.dtype)
    out.loss.chunked_logprobs = out.loss.resolved_chunked(facts.vocab_size)
    return resolved_from_dict(config_to_dict(out), generation_config=facts.generation_config)
