"""Hugging Face model helpers of the embedded trainer: chat templates, LoRA through PEFT, the
reference policy, mixed precision and saving ``final/``.

* **Chat templates** (``model.chat_template``): with ``auto``, a tokenizer that has a chat
  template gets each text prompt as one user message and each list of chat messages as it is
  (after the task's system prompt, if any), rendered with
  ``apply_chat_template(..., add_generation_prompt=True)`` (:func:`render_task_prompts`).
* **LoRA** (``model.lora``): :func:`add_lora` wraps the policy in PEFT adapters; only the
  adapters train. The reference policy of the KL penalty is then the same network with its
  adapters disabled (:class:`AdaptersDisabled`, PEFT's ``disable_adapter()``), never a second
  copy of the weights (:func:`reference_policy`).
* **Mixed precision** (``model.autocast``): :func:`autocast` is bfloat16 autocast on CUDA.
* **Stopping** (:func:`stop_token_ids`): sampling ends at the tokenizer's EOS and at every
  end-of-turn id of the model's ``generation_config`` (whose ``eos_token_id`` may be a list).
* **Gradient checkpointing** (:func:`enable_gradient_checkpointing`): recompute activations
  in the backward pass, through transformers (and through PEFT with LoRA).
* **final/**: :func:`save_model` writes a plain Hugging Face model (a LoRA policy is saved
  with its adapters merged, plus the adapters alone in ``final/adapter/``).
"""

from __future__ import annotations

import contextlib
import copy
import re
from pathlib import Path
from typing import Any

import torch

from bestk._optional import require
from bestk.train.config import LoRAConfig

__all__ = [
    "AdaptersDisabled",
    "add_lora",
    "autocast",
    "chat_prompt",
    "chat_messages",
    "enable_gradient_checkpointing",
    "has_chat_template",
    "is_peft_model",
    "merged_state_dict",
    "reference_policy",
    "render_messages",
    "render_task_prompts",
    "save_model",
    "stop_token_ids",
]


# -- chat templates -----------------------------------------------------------------------------
def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer: Any, text: str) -> str:
    """``text`` as one user message, rendered by the tokenizer's chat template with the
    generation prompt appended (the text an instruct model continues)."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def render_messages(tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    """A list of chat messages rendered by the tokenizer's chat template as the text the model
    continues: with the generation prompt appended, or, when the last message is the
    assistant's (a prefilled reply), continuing that message (as TRL renders prompts)."""
    prefilled = messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=not prefilled,
        continue_final_message=prefilled,
    )


def chat_messages(prompt: str | list[dict[str, Any]],
                  system_prompt: str | None = None) -> list[dict[str, Any]]:
    """The chat messages of a task prompt: a text prompt as one user message, a list of
    messages as it is; ``system_prompt`` (when given) first, unless the messages already
    begin with a system message of their own (which is kept)."""
    messages = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                else [dict(m) for m in prompt])
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def render_task_prompts(task: Any, tokenizer: Any, mode: str) -> bool:
    """Apply ``model.chat_template`` to every example of ``task`` in place.

    ``mode`` ``"auto"``: when the tokenizer has a chat template, each example's ``prompt``
    becomes the rendering (:func:`render_messages`) of its chat messages
    (:func:`chat_messages`: a text prompt as one user message, TRL-style message lists as they
    are, ``task.system_prompt`` first when set); the user's own text is kept as
    ``user_prompt`` (the content of the last user message of a message list) and, for message
    lists and system prompts, the messages rendered as ``prompt_messages``. A reward function
    receives all of them (``prompt`` is what the model saw). A plain text prompt without a
    system prompt is exactly :func:`chat_prompt` of it. ``"none"``: nothing changes.

    Returns whether the template was applied. Raises ``ValueError`` (one line) when
    ``mode`` is neither, or when the task has message-list prompts or a system prompt but
    no chat template is applied (the model could not be shown them).
    """
    if mode not in ("auto", "none"):
        raise ValueError(f"model.chat_template must be auto or none, got {mode!r}")
    examples = [ex for ex in [*task.train, *task.eval] if "user_prompt" not in ex]  # idempotent
    system = getattr(task, "system_prompt", None)
    if mode == "none" or not has_chat_template(tokenizer):
        needs = ("task.system_prompt is set" if system else
                 "prompts are chat messages" if any(isinstance(ex["prompt"], list)
                                                    for ex in examples) else "")
        if needs:
            why = ("model.chat_template is none" if mode == "none"
                   else "the tokenizer has no chat template")
            raise ValueError(f"task {task.name!r}: {needs}, which only a chat template can show "
                             f"the model, but {why}; use an instruct model's tokenizer with "
                             f"model.chat_template auto")
        return False
    for ex in examples:
        prompt = ex["prompt"]
        if isinstance(prompt, str) and not system:
            ex["user_prompt"] = prompt
            ex["prompt"] = chat_prompt(tokenizer, prompt)
            continue
        messages = chat_messages(prompt, system)
        users = [m["content"] for m in messages if m["role"] == "user"]
        ex["user_prompt"] = prompt if isinstance(prompt, str) else (users[-1] if users else "")
        ex["prompt_messages"] = messages
        ex["prompt"] = render_messages(tokenizer, messages)
    return True


# -- LoRA ---------------------------------------------------------------------------------------
def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a PEFT model (has adapters that can be disabled)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def add_lora(model: Any, cfg: LoRAConfig, seed: int = 0) -> Any:
    """``model`` wrapped in LoRA adapters (``peft.get_peft_model``); only the adapters train.

    Rank ``cfg.r``, scaling ``cfg.alpha / cfg.r``, dropout ``cfg.dropout`` on the adapters'
    input, adapters on ``cfg.target_modules`` (PEFT's default for the architecture when
    ``None``). The adapters' random initialisation is drawn from ``seed`` (``B = 0``, so the
    wrapped model computes exactly what ``model`` did). Raises ``ValueError`` when no module
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
            return peft.get_peft_model(model, lora)
        except ValueError as e:  # "Target modules {...} not found in the base model"
            first = str(e).strip().splitlines()[0]
            raise ValueError(f"config key 'model.lora.target_modules': {first}") from None


class AdaptersDisabled(torch.nn.Module):
    """The base model of a PEFT model: every call runs with the adapters disabled.

    It owns no parameters (its ``state_dict()`` is empty), so a checkpoint stores no second
    copy: the reference weights are the frozen base weights inside the policy itself.
    """

    def __init__(self, model: Any):
        super().__init__()
        self._policy = (model,)  # a tuple: not registered as a submodule

    @property
    def policy(self) -> Any:
        return self._policy[0]

    def get_base_model(self) -> Any:
        return self.policy.get_base_model()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)


def reference_policy(model: Any) -> torch.nn.Module:
    """The frozen reference policy of the KL penalty: the adapters-disabled view of a LoRA
    policy (no copy), else a frozen deep copy of ``model`` as it is now."""
    if is_peft_model(model):
        return AdaptersDisabled(model)
    return copy.deepcopy(model).eval().requires_grad_(False)


# -- mixed precision ------------------------------------------------------------------------------
def autocast(device: torch.device | str, mode: str = "auto") -> contextlib.AbstractContextManager:
    """The mixed-precision context of forward passes (``model.autocast``).

    ``"bf16"``: ``torch.autocast("cuda", dtype=torch.bfloat16)``; ``"auto"``: the same on a
    CUDA device that supports bfloat16, no autocast elsewhere; ``"none"``: no autocast.
    Log-probabilities are still computed in float32 (the rollout and the loss cast logits).
    """
    device = torch.device(device)
    if mode not in ("auto", "bf16", "none"):
        raise ValueError(f"model.autocast must be auto, bf16 or none, got {mode!r}")
    if mode == "none" or device.type != "cuda":
        if mode == "bf16":
            raise ValueError(f"model.autocast bf16 needs a CUDA device, got {str(device)!r}")
        return contextlib.nullcontext()
    if mode == "auto" and not torch.cuda.is_bf16_supported():
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16)


# -- saving -----------------------------------------------------------------------------------
_BASE_LAYER = re.compile(r"\.base_layer(?=\.)")


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
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


def save_model(model: Any, path: str | Path) -> None:
    """Save ``model`` as a Hugging Face model directory loadable with ``AutoModelForCausalLM``.

    A PEFT model is saved with its adapters merged into the weights (:func:`merged_state_dict`)
    and, in ``path/adapter``, its adapters alone (``PeftModel.from_pretrained`` on the base
    model reloads them).
    """
    path = Path(path)
    if not is_peft_model(model):
        model.save_pretrained(path)
        return
    require("transformers", extra="train")
    from transformers import AutoModelForCausalLM

    base = model.get_base_model()
    state = merged_state_dict(model)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(base.config)
    plain.load_state_dict(state, strict=True, assign=True)
    if getattr(base.config, "tie_word_embeddings", False):
        plain.tie_weights()
    if getattr(base, "generation_config", None) is not None:
        plain.generation_config = base.generation_config
    plain.save_pretrained(path)
    model.save_pretrained(path / "adapter")



# -- stopping and gradient checkpointing ----------------------------------------------------------
def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The token ids that end a completion: the tokenizer's EOS, then every id of the model's
    ``generation_config.eos_token_id`` (an int or a list: instruct models often list several
    end-of-turn ids, e.g. Llama 3's ``<|eot_id|>`` and ``<|end_of_text|>``), without
    repeats, in that order. ``model`` may be a PEFT model (its base model's config is used).
    Raises ``ValueError`` when there is none.
    """
    ids: list[int] = []

    def add(value: Any) -> None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is not None and int(v) not in ids:
                ids.append(int(v))

    add(getattr(tokenizer, "eos_token_id", None))
    if is_peft_model(model):
        model = model.get_base_model()
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        add(getattr(gen, "eos_token_id", None))
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation_config has an EOS id")
    return ids


def enable_gradient_checkpointing(model: Any) -> Any:
    """Turn on gradient checkpointing (``model.gradient_checkpointing``) and return ``model``.

    Each decoder layer's activations are recomputed in the backward pass instead of being
    kept: memory of the update falls from O(layers x tokens x width) to about one layer's,
    for about one extra forward pass of time. Gradients are those without it (same
    operations, recomputed). Uses transformers' ``gradient_checkpointing_enable`` with
    ``use_reentrant=False`` (non-reentrant ``torch.utils.checkpoint``: correct when the
    layers' inputs do not require grad, as with frozen embeddings under LoRA, and with
    keyword arguments). A PEFT model enables it on its base model and also calls
    ``enable_input_require_grads`` (the embeddings' output requires grad), as PEFT's own
    ``prepare_model_for_kbit_training`` does. Raises ``ValueError`` for a model that does not
    support it.
    """
    base = model.get_base_model() if is_peft_model(model) else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"model.gradient_checkpointing: {type(base).__name__} does not support it"
        )
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if is_peft_model(model):
        base.enable_input_require_grads()
    return model
