"""Policy construction: a local Hugging Face causal LM, or a tiny one built from a config.

Nothing is downloaded. The default policy is a small model of a standard transformers
architecture (Qwen2 or Llama) with a character-level tokenizer built with ``tokenizers`` for
the task's alphabet; it saves and loads as a plain HF directory (``AutoModelForCausalLM`` /
``AutoTokenizer``).

``model.path`` may also name a GGUF file (:mod:`bestk.train.model.source`): transformers
dequantises its weights to ``model.dtype`` and rebuilds its tokenizer and chat template, and
the policy then saves as an ordinary Hugging Face directory (safetensors + tokenizer).
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bestk._optional import require
from bestk.train.config import ModelConfig
from bestk.train.model.lora import add_lora
from bestk.train.model.source import GGUF_MODULES, check_model_source, is_gguf

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers and PEFT are optional)
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

    # the policy's types live with the adapters (model/lora.py), below this module; named here
    # too, where the modules that annotate with them import them
    from bestk.train.model.lora import Policy as Policy
    from bestk.train.model.lora import Reference as Reference

__all__ = [
    "build_char_tokenizer",
    "build_tiny_model",
    "count_parameters",
    "load_policy",
    "repair_gguf_special_tokens",
]

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"


def build_char_tokenizer(alphabet: str | None) -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast``: one token per character of ``alphabet``
    (printable ASCII when ``None``) plus ``<pad>``, ``<eos>``, ``<unk>``.

    Built locally with ``tokenizers`` (WordLevel over single characters, a ``Fuse`` decoder);
    ``save_pretrained`` gives a directory ``AutoTokenizer`` loads.
    """
    require("tokenizers", extra="train")
    require("transformers", extra="train")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = alphabet if alphabet is not None else string.printable
    uniq = list(dict.fromkeys(chars))
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in uniq:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK
    )
    fast.padding_side = "left"
    return fast


def build_tiny_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0
                     ) -> PreTrainedModel:
    """A freshly initialised Qwen2 / Llama causal LM sized by ``cfg`` for ``tokenizer``."""
    require("transformers", extra="train")
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(
            f"model.hidden_size ({cfg.hidden_size}) must be divisible by model.num_heads "
            f"({cfg.num_heads})"
        )
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    conf = Qwen2Config(**common) if cfg.arch == "qwen2" else LlamaConfig(**common)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(conf, dtype=_dtype(cfg.dtype))
    return model


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def load_policy(cfg: ModelConfig, alphabet: str | None, seed: int = 0
                ) -> tuple[Policy, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: from ``cfg.path`` if set, else the tiny default for ``alphabet``;
    wrapped in LoRA adapters when ``cfg.lora.r > 0``
    (:func:`~bestk.train.model.lora.add_lora`, adapter initialisation drawn from ``seed``).

    A tokenizer without a pad token gets its EOS token as pad; padding is on the left (the
    rollout left-pads prompts).
    """
    model: Policy
    model, tok = _load_base(cfg, alphabet, seed)
    if cfg.lora.r > 0:
        model = add_lora(model, cfg.lora, seed)
    return model, tok


#: transformers' GGUF loader warns (>= 5.19) that a GGUF file loaded in bfloat16 is "fastest in
#: float32 ... the weights stay quantized regardless". On the CPU that is not what happens:
#: the loaded model's linear layers are plain ``nn.Linear`` with full bfloat16 weights (the
#: file's tensors dequantised; 326 MB for SmolLM2-135M; checked with transformers 5.10 and
#: 5.19), so bestk drops that one message (docs/training.md, "Real Hugging Face models").
GGUF_LOGGER = "transformers.quantizers.quantizer_gguf"
GGUF_PACKED_NOTE = "the weights stay quantized regardless"


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextmanager
def dropped_log_records(logger: str, text: str) -> Iterator[None]:
    """Within the block, the records of ``logger`` whose message contains ``text`` are
    dropped (a filter on that logger, where the records are made); the rest pass."""
    f = _DropMessage(text)
    log = logging.getLogger(logger)
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)


def _load_base(cfg: ModelConfig, alphabet: str | None, seed: int
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tok: PreTrainedTokenizerBase
    if cfg.path is None:
        tok = build_char_tokenizer(alphabet)
        return build_tiny_model(cfg, tok, seed), tok
    require("transformers", extra="train")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(cfg.path)
    check_model_source(path)
    gguf = is_gguf(path)
    if gguf:  # one line naming the extra, before transformers' own multi-line ImportError
        for module in GGUF_MODULES:
            require(module, extra="gguf", who="loading a GGUF model")
        where, kw = path.parent, {"gguf_file": path.name}
    else:
        where, kw = path, {}
    try:
        tok = AutoTokenizer.from_pretrained(where, local_files_only=True, **kw)
        with dropped_log_records(GGUF_LOGGER, GGUF_PACKED_NOTE):
            model = AutoModelForCausalLM.from_pretrained(
                where, local_files_only=True, dtype=_dtype(cfg.dtype), **kw
            )
    except Exception as e:  # OSError, ValueError, SafetensorError (damaged weights), ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load a causal LM from {cfg.path!r}: {first}") from None
    if gguf:
        repair_gguf_special_tokens(model, tok)
    if tok.eos_token_id is None:
        raise ValueError(f"the tokenizer in {cfg.path!r} has no EOS token")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


def repair_gguf_special_tokens(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
                               ) -> None:
    """Give a tokenizer rebuilt from a GGUF file the EOS and pad tokens the file declares.

    The file's ``tokenizer.ggml.eos_token_id`` / ``padding_token_id`` reach the model's config
    (transformers maps them), but transformers' GGUF tokenizer conversion may label another
    token EOS (transformers 5.10 makes SmolLM2's ``<|im_start|>`` both BOS and EOS, while the
    file says EOS = ``<|im_end|>``, the end of an assistant turn) and leave pad unset. The
    model's ids win: an EOS of the wrong token would end sampling at the start of the next
    turn and save a wrong ``tokenizer_config.json`` into ``final/``.
    """
    def first_id(value: int | list[int] | tuple[int, ...] | None) -> int | None:
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        return None if value is None else int(value)

    gen = getattr(model, "generation_config", None)
    eos = first_id(getattr(model.config, "eos_token_id", None))
    if eos is None and gen is not None:
        eos = first_id(gen.eos_token_id)
    pad = first_id(getattr(model.config, "pad_token_id", None))
    if pad is None and gen is not None:
        pad = first_id(gen.pad_token_id)
    vocab = len(tokenizer)
    if eos is not None and 0 <= eos < vocab and tokenizer.eos_token_id != eos:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    if pad is not None and 0 <= pad < vocab and tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad)


def count_parameters(model: torch.nn.Module, *, trainable: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once); with ``trainable`` only
    those that train (the adapters of a LoRA policy)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)
