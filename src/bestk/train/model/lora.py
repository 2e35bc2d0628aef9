"""Low-rank adapters (``model.lora``) through PEFT, and the frozen reference policy.

:func:`add_lora` wraps the policy in PEFT adapters; only the adapters train. The reference
policy of the KL penalty is then the same network with its adapters disabled
(:class:`AdaptersDisabled`, PEFT's ``disable_adapter()``), never a second copy of the weights
(:func:`reference_policy`). :func:`merged_state_dict` is the plain model with the adapters
merged (what ``final/`` holds).
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, TypeGuard

import torch

from bestk._optional import require
from bestk.train.config import LoRAConfig

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers and PEFT are optional)
    from typing import TypeAlias

    from peft import PeftModel
    from transformers import PreTrainedModel
    from transformers.utils import ModelOutput

    #: A policy network: a Hugging Face causal LM (:func:`~bestk.train.model.policy.load_policy`),
    #: or one wrapped in PEFT LoRA adapters (``model.lora``, :func:`add_lora`).
    Policy: TypeAlias = PreTrainedModel | PeftModel
    #: The frozen reference of a run (:func:`reference_policy`): a frozen copy of the policy,
    #: or a LoRA policy's adapters-disabled view.
    Reference: TypeAlias = "Policy | AdaptersDisabled"

__all__ = ["is_peft_model", "add_lora", "AdaptersDisabled", "reference_policy", "merged_state_dict"]


# -- LoRA ---------------------------------------------------------------------------------------
def is_peft_model(model: object) -> TypeGuard[PeftModel]:
    """Whether ``model`` is a PEFT model (has adapters that can be disabled)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def add_lora(model: PreTrainedModel, cfg: LoRAConfig, seed: int = 0) -> PeftModel:
    """``model`` wrapped in LoRA adapters (``peft.get_peft_model``); only the adapters train.

    Rank ``cfg.r``, scaling ``cfg.alpha / cfg.r``, dropout ``cfg.dropout`` on the adapters'
    input, adapters on ``cfg.target_modules`` (PEFT's default for the architecture when
    ``None``). The adapters' random initialisation is drawn from ``seed`` (``B = 0``, so the
    wrapped model computes exactly what ``model`` did). The adapters are float32, or in
    ``model``'s dtype with ``cfg.dtype`` ``model`` (``auto``: :meth:`~bestk.train.config.
    LoRAConfig.resolved_dtype`). Raises ``ValueError`` when no module
    matches ``target_modules``.
    """
    if cfg.r < 1:
        raise ValueError(f"model.lora.r must be >= 1 to add adapters, got {cfg.r}")
    peft = require("peft", extra="train")
    lora = peft.LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
        target_modules=copy.copy(cfg.target_modules), task_type="CAUSAL_LM", bias="none",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            # PEFT upcasts low-precision adapters to float32 unless told not to
            float32 = cfg.resolved_dtype("bfloat16" if model.dtype == torch.bfloat16
                                         else "float32") == "float32"
            return peft.get_peft_model(model, lora, autocast_adapter_dtype=float32)
        except ValueError as e:  # "Target modules {...} not found in the base model"
            first = str(e).strip().splitlines()[0]
            raise ValueError(f"config key 'model.lora.target_modules': {first}") from None


class AdaptersDisabled(torch.nn.Module):
    """The base model of a PEFT model: every call runs with the adapters disabled.

    It owns no parameters (its ``state_dict()`` is empty), so a checkpoint stores no second
    copy: the reference weights are the frozen base weights inside the policy itself.
    """

    def __init__(self, model: PeftModel):
        super().__init__()
        self._policy = (model,)  # a tuple: not registered as a submodule

    @property
    def policy(self) -> PeftModel:
        return self._policy[0]

    def get_base_model(self) -> torch.nn.Module:
        return self.policy.get_base_model()

    def forward(self, *args: object, **kwargs: object) -> ModelOutput:
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)


def reference_policy(model: Policy) -> Reference:
    """The frozen reference policy of the KL penalty: the adapters-disabled view of a LoRA
    policy (no copy), else a frozen deep copy of ``model`` as it is now."""
    if is_peft_model(model):
        return AdaptersDisabled(model)
    return copy.deepcopy(model).eval().requires_grad_(False)


def merged_state_dict(model: PeftModel) -> dict[str, torch.Tensor]:
    """The plain Hugging Face state dict (CPU tensors) of a PEFT LoRA model with its active
    adapters merged, ``W + (alpha / r) B A`` per adapted layer, computed without modifying
    ``model`` (PEFT's ``get_delta_weight``)."""
    base = model.get_base_model()
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_A", {}) or adapter in getattr(
                        module, "lora_embedding_A", {}):
                    d = module.get_delta_weight(adapter).detach()
                    deltas[name] = deltas[name] + d if name in deltas else d
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, value in base.state_dict().items():
            if ".lora_" in key:
                continue
            clean = _BASE_LAYER.sub("", key)
            owner = key.rsplit(".base_layer.", 1)[0] if ".base_layer." in key else None
            if owner in deltas and key.endswith(".base_layer.weight"):
                value = value + deltas[owner].to(value.dtype)
            state[clean] = value.detach().to("cpu").clone()
    return state


# -- saving -----------------------------------------------------------------------------------
_BASE_LAYER = re.compile(r"\.base_layer(?=\.)")
