"""``bestk.train.rollout.evaluate``: an evaluation on a progress bar, and ``bestk eval``'s."""

from __future__ import annotations

import pytest
from rich.progress import Progress, TimeRemainingColumn
from typer.testing import CliRunner

from bestk.cli import app
from bestk.tasks import load_task
from bestk.train.config import ModelConfig
from bestk.train.model.policy import load_policy
from bestk.train.rollout import evaluate as evaluate_module
from bestk.train.rollout.engine import HFEngine
from bestk.train.rollout.evaluate import evaluate
from tests.conftest import TINY_MODEL

pytestmark = pytest.mark.usefixtures("restore_torch_threads")

OPTIONS = {"num_train": 64, "num_eval": 5, "max_len": 4}


class Recorder(Progress):
    """A progress bar that remembers what was done to it."""

    def __init__(self):
        super().__init__(disable=True)
        self.calls: list[tuple] = []

    def add_task(self, description, **kw):
        self.calls.append(("add", description, kw.get("total")))
        return super().add_task(description, **kw)

    def update(self, task_id, **kw):
        self.calls.append(("update", kw.get("advance")))
        super().update(task_id, **kw)

    def remove_task(self, task_id):
        self.calls.append(("remove",))
        super().remove_task(task_id)


def test_an_evaluation_advances_a_task_of_its_prompts_and_removes_it():
    task = load_task("strings", OPTIONS, seed=0)
    model, tok = load_policy(ModelConfig(**TINY_MODEL), task.alphabet, seed=0)
    bar = Recorder()
    engine = HFEngine(model, tok)
    plain = evaluate(engine, task, task.eval, n=2, max_new_tokens=4, batch_prompts=2)
    res = evaluate(engine, task, task.eval, n=2, max_new_tokens=4, batch_prompts=2,
                   progress=bar, description="held-out")
    assert bar.calls == [("add", "held-out: 5 prompts x 2", 5), ("update", 2), ("update", 2),
                         ("update", 1), ("remove",)]
    assert res.metrics == plain.metrics  # the bar changes nothing sampled


def test_bestk_eval_shows_a_progress_bar_with_the_time_left_in_a_terminal(tmp_path,
                                                                          monkeypatch):
    task = load_task("strings", OPTIONS, seed=0)
    model, tok = load_policy(ModelConfig(**TINY_MODEL), task.alphabet, seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    seen = []
    real = evaluate_module.evaluate

    def spy(*args, progress=None, description="", **kw):
        seen.append((description, not progress.disable, any(
            isinstance(c, TimeRemainingColumn) for c in progress.columns)))
        return real(*args, progress=progress, description=description, **kw)

    monkeypatch.setattr(evaluate_module, "evaluate", spy)
    args = ["eval", "--model", str(tmp_path / "m"), "--task", "strings", "-n", "2",
            "--set", "task.options={num_train: 64, num_eval: 5, max_len: 4}",
            "--bank", str(tmp_path / "bank.jsonl"), "--bank-prompts", "3"]
    for terminal in ("1", "0"):
        monkeypatch.setenv("TTY_COMPATIBLE", terminal)
        seen.clear()
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        on = terminal == "1"  # a log gets no bar
        assert seen == [("held-out prompts", on, True), ("bank (training prompts)", on, True)]
