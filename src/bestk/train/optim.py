"""The optimizer of the embedded trainer: AdamW over the trainable parameters.
"""

from __future__ import annotations

from typing import Any

import torch

from bestk.train.config import TrainConfig

__all__ = ["make_optimizer"]


def make_optimizer(model: Any, cfg: TrainConfig, lr: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters) with ``optim``'s betas,
    weight decay and kernel (``optim.implementation``)."""
    o = cfg.optim
    kernel = {"auto": {}, "foreach": {"foreach": True}, "for-loop": {"foreach": False},
              "fused": {"fused": True}}[o.implementation]
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, **kernel,
    )
