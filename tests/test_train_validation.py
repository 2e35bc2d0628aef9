"""Issue 19's config checks (``bestk.train.validation``): a ``.gguf`` ``model.path`` and its
extra; ``model.gradient_checkpointing`` reaches the loaded policy (``bestk.train.setup``)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_config


def test_model_path_may_be_a_gguf_file_with_a_gguf_header(tmp_path):
    from bestk.train.validation import validate

    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"NOPE" + bytes(16))
    with pytest.raises(ValueError, match="is not a GGUF file \\(no GGUF header\\)"):
        validate(tiny_config(tmp_path / "a", f"model.path={fake}"))
    with pytest.raises(ValueError, match="model file .*missing.gguf' is not a file"):
        validate(tiny_config(tmp_path / "b", f"model.path={tmp_path / 'missing.gguf'}"))
    with pytest.raises(ValueError, match="is not a directory"):
        validate(tiny_config(tmp_path / "c", f"model.path={tmp_path / 'nothing'}"))


def test_a_gguf_model_path_needs_the_gguf_extra(tmp_path, hide_modules):
    from bestk._optional import MissingDependency
    from bestk.train.validation import check_dependencies

    cfg = tiny_config(tmp_path / "a", f"model.path={tmp_path / 'm.gguf'}")
    check_dependencies(tiny_config(tmp_path / "b"))  # no GGUF: gguf is not asked for
    hide_modules("gguf")
    check_dependencies(tiny_config(tmp_path / "b"))
    with pytest.raises(MissingDependency, match="gguf"):
        check_dependencies(cfg)


@pytest.mark.parametrize("lora", ["0", "2"])
def test_gradient_checkpointing_reaches_the_policy(tmp_path, lora):
    from bestk.tasks import load_task
    from bestk.train.model.lora import is_peft_model
    from bestk.train.setup import load_run_policy

    cfg = tiny_config(tmp_path, "model.gradient_checkpointing=true", f"model.lora.r={lora}")
    task = load_task(cfg.task.name, cfg.task.options)
    model, _ = load_run_policy(cfg, task, torch.device("cpu"))
    base = model.get_base_model() if is_peft_model(model) else model
    assert base.is_gradient_checkpointing
    off, _ = load_run_policy(tiny_config(tmp_path), task, torch.device("cpu"))
    assert not off.is_gradient_checkpointing
