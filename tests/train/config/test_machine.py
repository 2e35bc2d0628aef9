"""``bestk.train.config.machine``: a resolved config checked against this machine (paths,
device, threads, the tiny model's memory, the bound on every batch a run holds)."""

from __future__ import annotations

import os

import pytest
import torch

from bestk.train.config import machine
from bestk.train.validation import resolve_defaults
from tests.conftest import tiny_config


def test_an_unusable_out_path_is_refused_in_one_line(tmp_path):
    cfg = resolve_defaults(tiny_config(tmp_path))
    cfg.out = "x" * 300  # one name over NAME_MAX
    with pytest.raises(ValueError, match=r"--out 'x{57}\.\.\.' has a name of 300 bytes"):
        machine.check_paths(cfg)
    cfg.out = "  "
    with pytest.raises(ValueError, match="is empty"):
        machine.check_paths(cfg)
    cfg.out = str(tmp_path / "run")
    machine.check_paths(cfg)  # a plain path passes


def test_the_tiny_models_parameter_bound_is_below_its_real_count(tmp_path):
    """The bound leaves out the embedding (tied to the output): the model the trainer builds
    has at least that many parameters, and no more than the bound plus its embedding."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = resolve_defaults(tiny_config(tmp_path))
    m = cfg.model
    vocab = 64
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=vocab, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_heads, tie_word_embeddings=True))
    real = sum(p.numel() for p in model.parameters())
    assert machine.tiny_model_parameters(cfg) == real - vocab * m.hidden_size


def test_a_batch_beyond_memory_is_refused_naming_its_keys(monkeypatch):
    monkeypatch.setattr(machine, "_memory_bytes", lambda device: 2**20)  # a 1 MiB machine
    machine.refuse_batches("cpu", [(1000, 64, "small", "a.key")])  # 64 KB fits
    with pytest.raises(ValueError) as e:
        machine.refuse_batches("cpu", [(1000, 64, "small", "a.key"),
                                       (10**6, 64, "rollout.n=1000000", "rollout.n")])
    msg = str(e.value)
    assert msg.startswith("rollout.n=1000000 need at least 61.0 MiB (64 bytes each")
    assert "more than the 1.0 MiB of memory of this machine; lower rollout.n" in msg


def test_more_threads_than_cpus_is_refused(tmp_path):
    cfg = resolve_defaults(tiny_config(tmp_path))
    cfg.threads = (os.cpu_count() or 1) + 1
    with pytest.raises(ValueError, match=r"config key 'threads' is \d+, more than this "):
        machine.check_machine(cfg)


def test_a_device_that_is_not_here_is_refused():
    machine.check_device("cpu")
    with pytest.raises(ValueError, match="must be a torch device"):
        machine.check_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no cuda device is available"):
            machine.check_device("cuda:0")
