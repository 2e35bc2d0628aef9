"""``bestk.train.run.data``: a run on a dataset file records what the file held, and a resume
on other data is refused; runs of built-in tasks record nothing new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bestk.tasks import load_task
from bestk.train.run.data import data_digest
from bestk.train.run.directory import read_metrics
from bestk.train.runtime.files import checkpoint_state, latest_checkpoint
from bestk.train.trainer import Trainer
from tests.conftest import Crash, gsm8k_rows, tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _write(path: Path, rows: list[dict], *, reorder: bool = False) -> None:
    path.write_text("".join(
        json.dumps(dict(reversed(list(r.items()))) if reorder else r) + "\n" for r in rows))


def _files(d: Path) -> dict[Path, bytes]:
    return {p.relative_to(d): p.read_bytes() for p in d.rglob("*")
            if p.is_file() and p.name != ".lock"}


def test_a_dataset_file_replaced_between_stop_and_resume_is_refused(tmp_path):
    """The run stops after step 1; its data file is replaced by other rows: the resume (which
    once continued silently on the new rows) is refused in one line naming the file and the
    fix, touching nothing; the same rows again (even written with their keys in another order)
    resume it to the end."""
    data = tmp_path / "data.jsonl"
    rows = gsm8k_rows(24)
    _write(data, rows)
    out = tmp_path / "run"
    cfg = tiny_config(out, "task.name=dataset", f"task.options={{path: {data}, num_eval: 4}}",
                      "max_steps=2", "checkpoint_every=1", "rollout.max_new_tokens=4")

    def crash(step, metrics):
        if step == 1:
            raise Crash

    with pytest.raises(Crash):
        Trainer(cfg, on_step=crash).run(progress=False)
    recorded = checkpoint_state(latest_checkpoint(out / "checkpoints"))["data"]
    assert len(recorded) == 16

    _write(data, gsm8k_rows(24, offset=3))
    before = _files(out)
    with pytest.raises(ValueError) as e:
        Trainer.resume(out)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"the data of run '{out}' changed since its "
                                              "checkpoint step_0000001.safetensors was written")
    assert f"task.options.path '{data}' now holds other rows (data digest {recorded} there" in msg
    assert msg.endswith("restore the file(s) as they were, or start a new run with another --out")
    assert _files(out) == before

    _write(data, rows, reorder=True)  # the same rows
    Trainer.resume(out).run(progress=False)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train"] \
        == [1, 2]
    assert checkpoint_state(latest_checkpoint(out / "checkpoints"))["data"] == recorded


def test_a_built_in_task_records_no_data_digest(tmp_path):
    """Its prompts are made from the config, which the run identity records: nothing new in
    its checkpoints (the default run's files are as before)."""
    cfg = tiny_config(tmp_path / "run")
    task = load_task(cfg.task.name, cfg.task.options, seed=cfg.seed)
    assert data_digest(cfg, task) is None
