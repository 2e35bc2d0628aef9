"""The embedded trainer: SFT warm-up + @k-aware RL of a (tiny or local) HF causal LM.

``bestk train`` drives :class:`Trainer`; see ``docs/training.md``. Submodules: ``config``
(dataclasses, YAML, ``--set``), ``policy`` (model + tokenizer), ``rollout`` (KV-cache
sampling), ``loop`` (the trainer: run state), ``algorithms`` (``pg``, ``apo`` = @k-A*PO,
``dpo`` = @k-DPO: one module each), ``reference`` (in-run KAPPO calibration and its files),
``checkpoint`` (atomic safetensors), ``rundir`` (lock, resume policy), ``evaluate`` (pass@k /
best@k curves), ``report`` (report.md + plots), ``compare`` (matched runs), ``commands``
(CLI).
"""

from bestk.train.config import TrainConfig, apply_overrides, load_config, validate
from bestk.train.loop import Trainer, train

__all__ = ["TrainConfig", "Trainer", "train", "apply_overrides", "load_config", "validate"]
