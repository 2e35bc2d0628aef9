"""``bestk.train.rollout.evaluate``: an evaluation on a progress bar, and ``bestk eval``'s."""

from __future__ import annotations

import pytest
import torch
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
    # counts are integers (metrics.jsonl: "n": 2, not 2.0)
    assert type(res.metrics["n"]) is int and type(res.metrics["num_prompts"]) is int
    assert (res.metrics["n"], res.metrics["num_prompts"]) == (2, 5)


def test_bestk_eval_shows_its_progress_with_the_time_left_in_a_terminal_and_a_log(
        tmp_path, monkeypatch):
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
        # the progress is on in both; a log gets complete lines instead of a bar
        assert seen == [("held-out prompts", True, True), ("bank (training prompts)", True, True)]
        if terminal == "0":
            assert "held-out prompts: 5 prompts x 2: 5/5 (100%), elapsed" in res.output
            assert not [x for x in res.output.splitlines() if "…" in x], res.output


class DeferringEngine:
    """The HF engine behind the interface of an engine that recomputes entropies after
    sampling (as ``vllm`` does): the rollout's policy pass is left pending, a pass over some
    rows only is available, and every pass is logged."""

    defers_policy_pass = True

    def __init__(self, inner):
        self.inner, self.device = inner, inner.device
        self.passes, self.rollouts, self.plain = [], [], []

    def sync(self):
        self.inner.sync()

    def sample(self, prompts, *, n, max_new_tokens, generator, defer_policy_pass=False):
        ro = self.inner.sample(prompts, n=n, max_new_tokens=max_new_tokens, generator=generator)
        self.plain.append((ro.entropy.clone(), ro.completion_mask.clone()))
        j = (torch.arange(ro.entropy.shape[0]) % n).float()[:, None]
        ent, lp = (ro.entropy + j) * ro.completion_mask, ro.logprobs.clone()
        self.rollouts.append((ent, ro.completion_mask.clone()))
        ro.entropy = torch.zeros_like(ent)

        def whole():
            self.passes.append(("all", ent.shape[0]))
            return lp, ent

        def rows(index, group):
            self.passes.append(("rows", index.tolist(), group))
            return lp[index], ent[index]

        ro.pending_policy, ro.pending_policy_rows = whole, rows
        if not defer_policy_pass:
            ro.resolve_policy()
        return ro


def _first_samples_entropy(rollouts, n, m):
    """Mean token entropy over the first ``m`` samples of each prompt, from whole passes."""
    num = den = 0.0
    for ent, mask in rollouts:
        keep = (torch.arange(ent.shape[0]) % n) < m
        num += float((ent * mask)[keep].sum())
        den += float(mask[keep].sum())
    return num / den


def test_entropy_on_the_first_samples_runs_the_policy_pass_on_those_rows_only():
    task = load_task("strings", OPTIONS, seed=0)
    model, tok = load_policy(ModelConfig(**TINY_MODEL), task.alphabet, seed=0)
    hf = HFEngine(model, tok)
    full = evaluate(hf, task, task.eval, n=3, max_new_tokens=4, batch_prompts=2, seed=7)
    eng = DeferringEngine(hf)
    some = evaluate(eng, task, task.eval, n=3, max_new_tokens=4, batch_prompts=2, seed=7,
                    entropy_samples=2)
    # prompts 0-1, 2-3 and 4: rows 0, 1 | 3, 4 of each batch, groups of 2; no whole pass
    assert eng.passes == [("rows", [0, 1, 3, 4], 2), ("rows", [0, 1, 3, 4], 2),
                          ("rows", [0, 1], 2)]
    want = _first_samples_entropy(eng.rollouts, 3, 2)
    assert some.metrics["entropy"] == pytest.approx(want, rel=1e-6)
    assert want < _first_samples_entropy(eng.rollouts, 3, 3) - 0.2  # the rows matter
    assert {k: v for k, v in some.metrics.items() if k != "entropy"} == \
        {k: v for k, v in full.metrics.items() if k != "entropy"}
    # every sample: the whole pass, as without the option
    eng.passes.clear()
    again = evaluate(eng, task, task.eval, n=3, max_new_tokens=4, batch_prompts=2, seed=7,
                     entropy_samples=3)
    assert [p[0] for p in eng.passes] == ["all"] * 3
    assert again.metrics["entropy"] == pytest.approx(
        _first_samples_entropy(eng.rollouts[-3:], 3, 3), rel=1e-6)
    assert _first_samples_entropy(eng.plain[-3:], 3, 3) == pytest.approx(
        full.metrics["entropy"], rel=1e-6)
    # an engine that measures entropies while sampling: the stored ones of those rows
    hf_some = evaluate(hf, task, task.eval, n=3, max_new_tokens=4, batch_prompts=2, seed=7,
                       entropy_samples=2)
    assert hf_some.metrics["entropy"] == pytest.approx(
        _first_samples_entropy(eng.plain[:3], 3, 2), rel=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_entropy_samples_must_be_a_positive_integer(bad):
    task = load_task("strings", OPTIONS, seed=0)
    model, tok = load_policy(ModelConfig(**TINY_MODEL), task.alphabet, seed=0)
    with pytest.raises(ValueError, match="entropy_samples must be an integer >= 1"):
        evaluate(HFEngine(model, tok), task, task.eval, n=2, max_new_tokens=4,
                 entropy_samples=bad)
