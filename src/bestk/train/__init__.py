"""The embedded trainer: SFT warm-up + @k-aware RL of a (tiny or local) HF causal LM.

``bestk train`` drives :class:`Trainer`; see ``docs/training.md``. Submodules: ``config`` (the
pydantic schema, YAML, ``--set``), ``validation`` (the checks against the registries and the
device; the algorithm's defaults), ``policy`` (model + tokenizer), ``hf`` (chat templates,
LoRA, autocast for Hugging Face models), ``rollout`` (KV-cache sampling), ``loop`` (the
trainer: run state), ``algorithms`` (``pg``, ``apo`` = @k-A*PO, ``dpo`` = @k-DPO: one module
each), ``reference`` (in-run KAPPO calibration and its files), ``reference_plan`` (a run's
calibration, planned before any work), ``setup`` (a run's task, device and policy), ``sft``
(the SFT warm-up), ``console`` (progress bar, Ctrl-C), ``checkpoint`` (atomic safetensors),
``rundir`` (lock, resume policy), ``evaluate`` (pass@k / best@k curves), ``reporters``
(TensorBoard / W&B), ``report`` (report.md + plots), ``compare`` (matched runs), ``commands``
(CLI).

The names below load on first use (PEP 562, :mod:`bestk._lazy`), so importing
``bestk.train.commands`` (the CLI) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bestk._lazy import lazy_attributes

_LAZY: dict[str, str] = {
    "TrainConfig": "bestk.train.config",
    "apply_overrides": "bestk.train.config.io",
    "load_config": "bestk.train.config.io",
    "validate": "bestk.train.validation",
    "Trainer": "bestk.train.trainer",
    "train": "bestk.train.trainer",
}

__all__ = ["TrainConfig", "Trainer", "train", "apply_overrides", "load_config", "validate"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides, load_config
    from bestk.train.trainer import Trainer, train
    from bestk.train.validation import validate


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
