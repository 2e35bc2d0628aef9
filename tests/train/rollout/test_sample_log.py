"""bestk.train.rollout.sample_log: the few evaluated samples a user reads to check the template
and the reward (records, samples.jsonl lines, a Markdown table, W&B columns)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bestk.train.rollout.sample_log import (
    append_samples,
    sample_records,
    samples_table,
    table_columns_rows,
)


def _eval(P=3, n=3):
    examples = [{"id": 10 + i, "prompt": f"<|user|>q{i}|x\n<|assistant|>"} for i in range(P)]
    texts = [f"c{i}{j}" for i in range(P) for j in range(n)]
    rewards = np.arange(P * n, dtype=float).reshape(P, n) / 10
    return examples, texts, rewards


def test_records_are_the_first_prompts_and_completions():
    examples, texts, rewards = _eval()
    recs = sample_records(7, examples, texts, rewards, num_prompts=2, per_prompt=2,
                          success=rewards >= 0.4)
    assert [(r["prompt_id"], r["completion"], r["reward"]) for r in recs] == [
        (10, "c00", 0.0), (10, "c01", 0.1), (11, "c10", 0.3), (11, "c11", 0.4)]
    assert all(r["step"] == 7 for r in recs) and recs[0]["prompt"] == examples[0]["prompt"]
    assert [r["success"] for r in recs] == [False, False, False, True]
    assert len(sample_records(0, examples, texts, rewards, num_prompts=10, per_prompt=10)) == 9
    assert sample_records(0, examples, texts, rewards, num_prompts=0) == []


def test_per_function_values_none_as_null(tmp_path):
    examples, texts, rewards = _eval(2, 2)
    cols = {"fmt": np.array([[1.0, 0.0], [1.0, 1.0]]),
            "boxed": np.array([[np.nan, 1.0], [0.0, np.nan]])}
    recs = sample_records(3, examples, texts, rewards, columns=cols, per_prompt=2)
    assert recs[0]["rewards"] == {"fmt": 1.0, "boxed": None}
    path = tmp_path / "samples.jsonl"
    append_samples(path, recs[:1])
    append_samples(path, recs[1:])
    append_samples(path, [])
    lines = path.read_text().splitlines()
    assert [json.loads(x) for x in lines] == recs and "NaN" not in path.read_text()
    columns, rows = table_columns_rows(recs)
    assert columns == ["step", "prompt_id", "prompt", "completion", "reward", "reward/fmt",
                       "reward/boxed"]
    assert rows[0][-2:] == [1.0, None]
    table = samples_table(recs).splitlines()
    assert table[0] == ("| step | prompt_id | prompt | completion | reward | reward/fmt | "
                        "reward/boxed |")
    assert table[2] == "| 3 | 10 | <\\|user\\|>q0\\|x⏎<\\|assistant\\|> | c00 | 0 | 1 |  |"
    assert len(table) == 2 + len(recs)  # one line per sample


def test_shapes_are_checked():
    examples, texts, rewards = _eval()
    with pytest.raises(ValueError, match="rewards must be \\(prompts, n\\) = \\(3, n\\)"):
        sample_records(0, examples, texts, rewards.reshape(-1))
    with pytest.raises(ValueError, match="8 completions for 3 prompts x 3 samples"):
        sample_records(0, examples, texts[:-1], rewards)
    with pytest.raises(ValueError, match=">= 0"):
        sample_records(0, examples, texts, rewards, per_prompt=-1)


def test_drop_samples_after_keeps_the_steps_a_resume_does_not_redo(tmp_path):
    import json

    from bestk.train.rollout.sample_log import drop_samples_after

    path = tmp_path / "samples.jsonl"
    drop_samples_after(path, 3)  # no file: nothing happens
    assert not path.exists()
    lines = [json.dumps({"step": s, "prompt": "p"}) for s in (0, 2, 4)]
    path.write_text("\n".join(lines) + '\n{"step": 6, "pro')  # a line torn by a crash
    drop_samples_after(path, 2)
    assert path.read_text() == lines[0] + "\n" + lines[1] + "\n"


def test_eval_samples_of_an_evaluation_result():
    from types import SimpleNamespace

    from bestk.tasks import load_task
    from bestk.train.rollout.sample_log import eval_samples

    task = load_task("strings", {"num_train": 8, "num_eval": 4})
    exs = task.eval[:2]
    res = SimpleNamespace(examples=exs, texts=[exs[0]["answer"], "x", "y", exs[1]["answer"]],
                          rewards=np.array([[1.0, 0.0], [0.0, 1.0]]), columns={})
    recs = eval_samples(5, res, task, num_prompts=2, per_prompt=2)
    assert [(r["step"], r["prompt"], r["success"]) for r in recs] == [
        (5, exs[0]["prompt"], True), (5, exs[0]["prompt"], False),
        (5, exs[1]["prompt"], False), (5, exs[1]["prompt"], True)]
    assert all("rewards" not in r for r in recs)
