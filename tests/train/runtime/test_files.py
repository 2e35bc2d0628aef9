"""Checkpoint files of a run (``bestk.train.runtime.files``): only the run's own checkpoints
count and rotate, and a weights file bestk saved that is damaged is one line naming it."""

from __future__ import annotations

import pytest
import torch

from bestk.train.runtime.files import (
    checksum_path,
    last_run_checkpoint,
    list_checkpoints,
    load_weights,
    run_checkpoints,
    save_checkpoint,
)


def _save(directory, step: int, digest: str | None, keep: int = 10):
    model = torch.nn.Linear(3, 2)
    state = {} if digest is None else {"run": {"digest": digest, "config": {}}}
    return save_checkpoint(directory, step, model, torch.optim.AdamW(model.parameters()), state,
                           keep=keep)


def test_rotation_keeps_the_runs_own_checkpoints_and_never_deletes_a_foreign_file(tmp_path):
    """``keep_checkpoints`` counts only the run's checkpoints: another run's checkpoint (copied
    in) and a random file named like one are neither rotated away nor counted, so they cannot
    push the run's own checkpoints out."""
    ck = tmp_path / "checkpoints"
    other = _save(ck, 99, "b" * 16)  # another run's checkpoint, at a step beyond this run's
    random_file = ck / "step_0000098.safetensors"
    random_file.write_bytes(b"\x00" * 100)
    foreign = {p: p.read_bytes() for p in (other, checksum_path(other), random_file)}
    for step in (1, 2, 3):
        _save(ck, step, "a" * 16, keep=2)
    names = [p.name for p in list_checkpoints(ck)]
    assert names == ["step_0000002.safetensors", "step_0000003.safetensors",
                     "step_0000098.safetensors", "step_0000099.safetensors"]
    assert {p: p.read_bytes() for p in foreign} == foreign  # untouched
    assert [p.name for p in run_checkpoints(ck, "a" * 16)] == names[:2]
    assert last_run_checkpoint(ck, "a" * 16).name == "step_0000003.safetensors"
    assert last_run_checkpoint(ck, "b" * 16).name == "step_0000099.safetensors"
    assert last_run_checkpoint(ck).name == "step_0000099.safetensors"  # any run's


def test_a_checkpoint_written_before_run_identities_counts_as_the_runs(tmp_path):
    ck = tmp_path / "checkpoints"
    _save(ck, 1, None)
    _save(ck, 2, "a" * 16)
    assert [p.name for p in run_checkpoints(ck, "a" * 16)] == [
        "step_0000001.safetensors", "step_0000002.safetensors"]


def test_a_checkpoint_renamed_to_another_step_is_not_the_runs(tmp_path):
    ck = tmp_path / "checkpoints"
    two = _save(ck, 2, "a" * 16)
    two.rename(ck / "step_0000005.safetensors")
    assert run_checkpoints(ck, "a" * 16) == [] and last_run_checkpoint(ck) is None


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "not_a_state_dict"])
def test_a_damaged_weights_file_is_one_line_naming_it(tmp_path, damage):
    """The SFT weights ``bestk compare`` caches (``_sft/seed0.pt``), a trainer's
    ``warm_start``: a ValueError naming the file and saying it is damaged, not a torch
    traceback."""
    path = tmp_path / "seed0.pt"
    weights = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(3)}
    torch.save(weights, path)
    assert load_weights(path).keys() == weights.keys()
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text("not weights\n")
    else:
        torch.save([1, 2, 3], path)
    with pytest.raises(ValueError, match=r"^weights file '.*seed0\.pt' is damaged") as e:
        load_weights(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="seed0.pt' does not exist"):
        load_weights(tmp_path / "missing" / "seed0.pt")
