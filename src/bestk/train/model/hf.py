"""Hugging Face model helpers of the embedded trainer: mixed precision, stop tokens, gradient
checkpointing, the KV-cache arguments of a forward pass and saving ``final/``.

* **Mixed precision** (``model.autocast``): :func:`autocast` is bfloat16 autocast on CUDA.
* **Stopping** (:func:`stop_token_ids`): sampling ends at the tokenizer's EOS and at every
  end-of-turn id of the model's ``generation_config`` (whose ``eos_token_id`` may be a list).
* **Gradient checkpointing** (:func:`enable_gradient_checkpointing`): recompute activations
  in the backward pass, through transformers (and through PEFT with LoRA).
* **KV cache** (:func:`cache_kwarg`, :func:`output_cache`, :func:`positions`): the cache
  argument's name across transformers versions, the cache a forward returned, and the
  position ids of a left-padded batch -- what the sampler and the training forward share.
* **Logits used** (:func:`logits_to_keep`): a forward that needs only its last positions'
  logits (the sampler's prefill, the update's completion positions) asks for those alone.
* **final/**: :func:`save_model` writes a plain Hugging Face model (a LoRA policy is saved
  with its adapters merged, plus the adapters alone in ``final/adapter/``; a model read from a
  GGUF file without the file's quantization record, :func:`as_plain_model`).

Chat templates are :mod:`bestk.train.model.chat`'s, LoRA and the reference policy
:mod:`bestk.train.model.lora`'s.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bestk._atomic import respect_umask, temporary_name
from bestk._optional import require
from bestk.train.model.lora import is_peft_model, merged_state_dict
from bestk.train.runtime.errors import as_os_error

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.cache_utils import Cache

    from bestk.train.model.policy import Policy

__all__ = ["QUANTIZER_ATTRIBUTES", "as_plain_model", "autocast", "cache_kwarg",
           "enable_gradient_checkpointing", "gguf_quantization", "logits_to_keep", "output_cache",
           "positions", "save_final", "save_model", "stop_token_ids", "transformers_progress"]




















# -- mixed precision ------------------------------------------------------------------------------
def autocast(device: torch.device | str, mode: str = "auto"
             ) -> contextlib.AbstractContextManager[object]:
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






def gguf_quantization(model: torch.nn.Module) -> object | None:
    """The GGUF quantization record transformers left on ``model`` (a PEFT model: on its base
    model), or ``None``: its ``config.quantization_config`` when that names ``quant_method``
    ``gguf`` (a dict, or a ``GgufConfig`` whose ``quant_method`` is a ``str`` enum).

    transformers versions that load a GGUF file through a GGUF quantizer (``GgufHfQuantizer``)
    keep this record, and the quantizer as ``model.hf_quantizer``, even when they dequantized
    every weight into a float tensor, which bestk's loading does (``model.dtype``)."""
    base = model.get_base_model() if is_peft_model(model) else model
    qc = getattr(getattr(base, "config", None), "quantization_config", None)
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    return qc if str(getattr(method, "value", method)).lower() == "gguf" else None


#: What a transformers quantizer sets on the model it loads (``HfQuantizer.preprocess_model``
#: and ``from_pretrained``) and drops when it removes the quantization
#: (``HfQuantizer.remove_quantization_config``), besides ``config.quantization_config``.
QUANTIZER_ATTRIBUTES = ("hf_quantizer", "is_quantized", "quantization_method")


@contextlib.contextmanager
def as_plain_model(model: torch.nn.Module) -> Iterator[None]:
    """Inside: ``model`` (a PEFT model: its base model) without a GGUF quantization record
    (:func:`gguf_quantization`): no ``config.quantization_config``, ``hf_quantizer`` ``None``,
    ``is_quantized`` false, no ``quantization_method`` (:data:`QUANTIZER_ATTRIBUTES`), as
    transformers' own ``remove_quantization_config`` leaves a model; all come back on exit, so
    the live model is as it was. ``save_pretrained`` then writes the plain float model the
    weights are (a ``config.json`` with ``"quantization_config": {"quant_method": "gguf"}`` makes
    TRL and every transformers ``Trainer`` refuse the directory: "cannot perform fine-tuning on
    purely quantized models"), and TRL's trainers take the model itself. A model without the
    record is left alone."""
    if gguf_quantization(model) is None:
        yield
        return
    # the causal LM (PEFT annotates get_base_model() as a plain Module)
    base: PreTrainedModel = model.get_base_model() if is_peft_model(model) else model  # type: ignore[assignment]
    config = base.config
    record = getattr(config, "quantization_config")  # noqa: B009 - not a declared attribute
    saved = {name: vars(base)[name] for name in QUANTIZER_ATTRIBUTES if name in vars(base)}
    delattr(config, "quantization_config")
    setattr(base, "hf_quantizer", None)  # noqa: B010 - not declared by every version
    setattr(base, "is_quantized", False)  # noqa: B010
    if "quantization_method" in saved:
        delattr(base, "quantization_method")
    try:
        yield
    finally:
        setattr(config, "quantization_config", record)  # noqa: B010
        for name in QUANTIZER_ATTRIBUTES:
            if name in saved:
                setattr(base, name, saved[name])
            elif name in vars(base):
                delattr(base, name)


def save_model(model: Policy, path: str | Path) -> None:
    """Save ``model`` as a Hugging Face model directory loadable with ``AutoModelForCausalLM``.

    A PEFT model is saved with its adapters merged into the weights (:func:`merged_state_dict`)
    and, in ``path/adapter``, its adapters alone (``PeftModel.from_pretrained`` on the base
    model reloads them). A model read from a GGUF file is saved as the plain float model it is
    (:func:`as_plain_model`).
    """
    path = Path(path)
    with as_plain_model(model):
        if not is_peft_model(model):
            # a PreTrainedModel here (a TypeGuard does not narrow this branch), takes a path
            model.save_pretrained(path)  # type: ignore[arg-type]  # PEFT's annotation says str
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
        with warnings.catch_warnings():
            # PEFT looks for the base model's config.json beside a GGUF file to see whether
            # the vocabulary was resized; it never is here (no embedding trains)
            warnings.filterwarnings("ignore", message="Could not find a config file")
            model.save_pretrained(path / "adapter")  # type: ignore[arg-type]  # annotated str



# -- stopping and gradient checkpointing ----------------------------------------------------------
def save_final(out: Path, model: Policy, tokenizer: PreTrainedTokenizerBase, *,
               progress: bool = False) -> None:
    """Save ``out/final/`` (HF model + tokenizer; a LoRA policy merged, + ``final/adapter/``).

    ``final/`` is written to ``.bestk-tmp-final.new.bestk-tmp`` and swapped in with two renames,
    so a crash leaves the previous ``final/`` (or, between the renames,
    ``.bestk-tmp-final.old.bestk-tmp``) intact. ``progress``:
    transformers' own progress bars on or off meanwhile.
    """
    final = out / "final"
    tmp, old = out / temporary_name("final", "new"), out / temporary_name("final", "old")
    for leftover in (tmp, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    try:
        with transformers_progress(progress):
            save_model(model, tmp)
            tokenizer.save_pretrained(tmp)
    except Exception as e:  # safetensors reports I/O failures as SafetensorError
        shutil.rmtree(tmp, ignore_errors=True)
        raise as_os_error(e, tmp) from None
    respect_umask(tmp)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def stop_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The token ids that end a completion: the tokenizer's EOS, then every id of the model's
    ``generation_config.eos_token_id`` (an int or a list: instruct models often list several
    end-of-turn ids, e.g. Llama 3's ``<|eot_id|>`` and ``<|end_of_text|>``), without
    repeats, in that order. ``model`` may be a PEFT model (its base model's config is used).
    Raises ``ValueError`` when there is none.
    """
    ids: list[int] = []

    def add(value: int | list[int] | tuple[int, ...] | None) -> None:
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


def enable_gradient_checkpointing(model: Policy) -> Policy:
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
    # the causal LM itself: PEFT annotates get_base_model() as a plain Module, and a TypeGuard
    # leaves the else branch a Policy
    base: PreTrainedModel = model.get_base_model() if is_peft_model(model) else model  # type: ignore[assignment]
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"model.gradient_checkpointing: {type(base).__name__} does not support it"
        )
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if is_peft_model(model):
        base.enable_input_require_grads()
    return model


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in transformers >= 5.2x,
    ``past_key_values`` before)."""
    if hasattr(model, "get_base_model"):  # a PEFT model forwards **kwargs to its base model
        # a PEFT model or the reference view; torch types other attributes Tensor | Module
        model = model.get_base_model()  # type: ignore[operator]
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def logits_to_keep(model: torch.nn.Module, n: int, trim: bool | None = None, *,
                   index: bool = False) -> dict[str, int | torch.Tensor]:
    """Keyword arguments of a forward pass of ``model`` that uses the logits of its last
    ``n`` positions only: ``{"logits_to_keep": n}`` when ``trim`` and the forward takes that
    argument (transformers' causal LMs; a PEFT model or the reference view: their base
    model's), else ``{}`` (every position's logits; the caller slices the last ``n``).

    ``trim=None`` decides by the weights: trimmed when any floating parameter of the model is
    not float32 (a ``model.dtype: bfloat16`` policy, a LoRA over one), not for a float32
    model. Why not always: the output projection over fewer rows is a matmul of another shape,
    which the CPU kernels round differently (measured: the prefill's last-position logits
    and the gradient of the tied embedding change in the last bits), so a float32 run keeps
    the full computation and stays bit-identical to bestk's before trimming existed. The
    values are the same up to that rounding.

    ``index``: pass the positions as an index tensor (``torch.arange(-n, 0)``, which
    transformers' causal LMs take in place of the count) rather than as ``n``. A count makes
    the model project the strided slice ``hidden[:, -n:, :]`` of a batch of several rows; when
    that slice requires grad (a training forward), ``torch.matmul`` does not fold it into one
    matrix product but broadcasts the output weight to a ``(batch, hidden, vocab)`` copy
    for a batched product, in the forward and again in the backward pass (SmolLM2's tied
    head: 226 MB per prompt-prefill of 4 rows, 1.8 GB for a one-forward batch of 32). The
    index gathers the rows into a contiguous tensor first: one matrix product, the same
    logits and gradients bit for bit (measured on the CPU, bfloat16).
    """
    base = model
    if hasattr(model, "get_base_model"):  # a PEFT model forwards **kwargs to its base model
        # a PEFT model or the reference view; torch types other attributes Tensor | Module
        base = model.get_base_model()  # type: ignore[operator]
    if trim is None:
        trim = any(p.dtype != torch.float32 for p in base.parameters() if p.is_floating_point())
    if not trim or "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return {}
    if index:
        device = next((p.device for p in base.parameters()), torch.device("cpu"))
        return {"logits_to_keep": torch.arange(-int(n), 0, device=device)}
    return {"logits_to_keep": int(n)}


def output_cache(out: object) -> Cache | None:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


@contextlib.contextmanager
def transformers_progress(enabled: bool) -> Iterator[None]:
    """transformers' own progress bars (e.g. "Writing model shards") on or off meanwhile: on
    only where asked and stderr is a terminal (in a log a redrawn bar is noise) and the
    libraries' bars were not turned off for the process (``bestk train --quiet``)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    on = enabled and was and sys.stderr.isatty()
    (hf_logging.enable_progress_bar if on else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
