"""The embedded trainer: SFT warm-up + @k-aware RL of a (tiny or local) HF causal LM.

``bestk train`` drives :class:`Trainer`; see ``docs/training.md``. Submodules: ``config``
(dataclasses, YAML, ``--set``), ``policy`` (model + tokenizer), ``hf`` (chat templates, LoRA,
autocast for Hugging Face models), ``rollout`` (KV-cache sampling), ``loop`` (the trainer: run
state), ``algorithms`` (``pg``, ``apo`` = @k-A*PO, ``dpo`` = @k-DPO: one module each),
``reference`` (in-run KAPPO calibration and its files), ``checkpoint`` (atomic safetensors),
``rundir`` (lock, resume policy), ``evaluate`` (pass@k / best@k curves), ``reporters``
(TensorBoard / W&B), ``report`` (report.md + plots), ``compare`` (matched runs), ``commands``
(CLI).

The names below load on first use (PEP 562), so importing ``bestk.train.commands`` (the CLI)
does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "TrainConfig": "bestk.train.config",
    "apply_overrides": "bestk.train.config",
    "load_config": "bestk.train.config",
    "validate": "bestk.train.config",
    "Trainer": "bestk.train.loop",
    "train": "bestk.train.loop",
}

__all__ = ["TrainConfig", "Trainer", "train", "apply_overrides", "load_config", "validate"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk.train.config import TrainConfig, apply_overrides, load_config, validate
    from bestk.train.loop import Trainer, train


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'bestk.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later lookups bypass __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
