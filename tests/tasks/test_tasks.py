"""bestk.tasks: every reward function against hand-computed values, and the task builders."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest

from bestk.tasks import REWARDS, get_reward, load_task, task_options
from bestk.tasks.rewards import (
    arithmetic_last_reward,
    arithmetic_reward,
    exact_reward,
    math_verify_reward,
    positional_reward,
    similarity_reward,
    squad_f1,
)
from tests.conftest import TINY_MODEL


def test_exact_reward():
    assert exact_reward("p", " 42 ", answer="42") == 1.0
    assert exact_reward("p", "420", answer="42") == 0.0


def test_arithmetic_last_reward_reads_the_last_integer_not_an_echo():
    assert arithmetic_last_reward("q", "35 + 77 = 112.", answer="112") == 1.0
    assert arithmetic_last_reward("q", "35-77=-42", answer="-42") == 1.0
    assert arithmetic_last_reward("q", "35 - 77 = -42", answer=-42) == 1.0
    # an echo of the question is its last operand, not the result (math_verify accepts it)
    assert arithmetic_last_reward("q", "To calculate 35 + 77, we need", answer="112") == (
        pytest.approx(1 / 36))
    assert arithmetic_last_reward("q", "35 + 77 = 111", answer="112") == pytest.approx(1 / 2)
    assert arithmetic_last_reward("q", "no number here", answer="112") == 0.0
    assert get_reward("arithmetic_last").graded


def test_arithmetic_reward_closeness():
    assert arithmetic_reward("1+1=", "2", answer="2") == 1.0
    assert arithmetic_reward("1+1=", "3", answer="2") == pytest.approx(1 / 2)
    assert arithmetic_reward("1+1=", "-2", answer="2") == pytest.approx(1 / 5)
    assert arithmetic_reward("1+1=", "12x", answer="2") == pytest.approx(1 / 11)
    assert arithmetic_reward("1+1=", "x", answer="2") == 0.0
    assert arithmetic_reward("1+1=", "", answer="2") == 0.0


def test_positional_reward():
    assert positional_reward("p", "1234", answer="1234") == 1.0
    assert positional_reward("p", "1294", answer="1234") == pytest.approx(3 / 4)
    assert positional_reward("p", "12", answer="1234") == pytest.approx(2 / 4)
    assert positional_reward("p", "123456", answer="1234") == pytest.approx(4 / 6)
    assert positional_reward("p", "", answer="1") == 0.0


def test_squad_f1_by_hand():
    # normalisation drops case, punctuation and articles
    assert squad_f1("The Cat, sat!", "cat sat") == 1.0
    # pred: {cat, sat, down} ref: {cat, sat, on, mat}: common 2, P=2/3, R=2/4
    p, r = 2 / 3, 2 / 4
    assert squad_f1("cat sat down", "the cat sat on a mat") == pytest.approx(2 * p * r / (p + r))
    assert squad_f1("", "") == 1.0
    assert squad_f1("x", "") == 0.0
    assert squad_f1("dog", "cat") == 0.0


def test_similarity_reward_is_06_f1_plus_04_rougeL():
    # ROUGE-L by hand: ref "the cat sat on the mat" (6 tokens), pred "the cat sat" (3 tokens),
    # LCS = 3 -> P = 1, R = 1/2, F = 2/3.  F1_SQuAD after dropping articles: pred {cat, sat},
    # ref {cat, sat, on, mat} -> P = 1, R = 1/2, F1 = 2/3.
    r = similarity_reward("q", "the cat sat", answer="the cat sat on the mat")
    assert r == pytest.approx(0.6 * (2 / 3) + 0.4 * (2 / 3))
    assert similarity_reward("q", "a b c", answer="a b c") == pytest.approx(1.0)
    assert similarity_reward("q", "zzz", answer="a b c") == 0.0


def test_math_verify_reward():
    assert math_verify_reward("q", "The answer is $\\frac{1}{2}$", answer="0.5") == 1.0
    assert math_verify_reward("q", "so \\boxed{4}", answer="4") == 1.0
    assert math_verify_reward("q", "\\boxed{5}", answer="4") == 0.0
    assert math_verify_reward("q", "no idea", answer="4") == 0.0


def test_reasoning_gym_task_and_reward():
    task = load_task(
        "reasoning_gym", {"dataset": "basic_arithmetic", "size": 5, "num_eval": 3}, seed=1
    )
    assert len(task.train) == 5 and len(task.eval) == 3
    ex = task.train[0]
    good = task.score([ex, ex, ex], [ex["answer"], "no number", ex["answer"] + "7"])
    assert good[:2].tolist() == [1.0, 0.0]
    assert 0.0 <= good[2] < 1.0  # the dataset's own partial credit, never success
    assert task.success(good).tolist() == [True, False, False]
    assert task.graded
    with pytest.raises(ValueError, match="no_such_dataset"):
        load_task("reasoning_gym", {"dataset": "no_such_dataset"})


def test_arithmetic_task_answers_and_split():
    task = load_task("arithmetic", {"digits": 1, "ops": "+-", "num_eval": 20}, seed=3)
    assert len(task.train) + len(task.eval) == 200
    train_p = {e["prompt"] for e in task.train}
    assert not train_p & {e["prompt"] for e in task.eval}
    for e in task.train[:50] + task.eval:
        assert str(eval(e["prompt"][:-1])) == e["answer"]  # noqa: S307 (digits and +/- only)
    assert task.graded
    exact = load_task("arithmetic", {"digits": 1, "graded": False, "num_eval": 5})
    assert not exact.graded
    assert exact.score([exact.eval[0]], ["-999"]).tolist() == [0.0]


def test_arithmetic_split_seed_fixes_the_held_out_problems_across_run_seeds():
    opts = {"digits": 2, "b_digits": 1, "ops": "+-", "num_eval": 40}
    a = load_task("arithmetic", {**opts, "split_seed": 7}, seed=1)
    b = load_task("arithmetic", {**opts, "split_seed": 7}, seed=2)
    assert [e["prompt"] for e in a.eval] == [e["prompt"] for e in b.eval]
    assert [e["prompt"] for e in a.train] == [e["prompt"] for e in b.train]
    # None: the run's seed draws the split (as before), so two seeds differ
    c = load_task("arithmetic", opts, seed=1)
    d = load_task("arithmetic", opts, seed=2)
    assert {e["prompt"] for e in c.eval} != {e["prompt"] for e in d.eval}
    # the split with split_seed s is the one a run with seed s and no split_seed draws
    e = load_task("arithmetic", opts, seed=7)
    assert [x["prompt"] for x in e.eval] == [x["prompt"] for x in a.eval]
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="split_seed must be a non-negative integer"):
            load_task("arithmetic", {**opts, "split_seed": bad})


def test_arithmetic_question_format_asks_the_same_problems_in_words():
    eq = load_task("arithmetic", {"digits": 2, "ops": "+-", "num_eval": 30}, seed=5)
    qu = load_task("arithmetic", {"digits": 2, "ops": "+-", "num_eval": 30, "format": "question"},
                   seed=5)
    for a, b in zip(eq.eval + eq.train[:40], qu.eval + qu.train[:40], strict=True):
        x, op, y = re.fullmatch(r"What is (\d+) ([-+]) (\d+)\?", b["prompt"]).groups()
        assert a["prompt"] == f"{x}{op}{y}=" and a["answer"] == b["answer"]
    assert set("What is?") <= set(qu.alphabet)
    with pytest.raises(ValueError, match="format must be one of"):
        load_task("arithmetic", {"format": "latex"})


def test_arithmetic_format_may_be_a_template_of_one_s_own():
    own = "Compute {x} {op} {y}. Reply with the number only."
    eq = load_task("arithmetic", {"digits": 2, "ops": "+-", "num_eval": 30}, seed=2)
    t = load_task("arithmetic", {"digits": 2, "ops": "+-", "num_eval": 30, "format": own}, seed=2)
    for a, b in zip(eq.eval + eq.train[:40], t.eval + t.train[:40], strict=True):
        x, op, y = re.fullmatch(r"Compute (\d+) ([-+]) (\d+)\. Reply with the number only\.",
                                b["prompt"]).groups()
        assert a["prompt"] == f"{x}{op}{y}=" and a["answer"] == b["answer"]
    assert set("Compute.Rly") <= set(t.alphabet)
    for bad in ("{x} {op} {x}", "{x} {op}", "{x} {op} {y} {z}", "{x} {op} {y} {"):
        with pytest.raises(ValueError, match="format"):
            load_task("arithmetic", {"format": bad})
    with pytest.raises(ValueError, match="format must be text"):
        load_task("arithmetic", {"format": 3})


def test_arithmetic_b_digits_bounds_the_second_operand():
    t = load_task("arithmetic", {"digits": 2, "b_digits": 1, "ops": "+-", "num_eval": 100})
    assert len(t.train) + len(t.eval) == 2 * 100 * 10
    pairs = {tuple(int(v) for v in re.split(r"[-+]", e["prompt"][:-1])) for e in t.train + t.eval}
    assert {b for _, b in pairs} == set(range(10)) and {a for a, _ in pairs} == set(range(100))
    with pytest.raises(ValueError, match="b_digits must be in \\[1, digits=2\\]"):
        load_task("arithmetic", {"digits": 2, "b_digits": 3})


def test_strings_task():
    task = load_task("strings", {"op": "sort", "num_train": 50, "num_eval": 10}, seed=0)
    for e in task.train + task.eval:
        s = e["prompt"][4:-1]
        assert e["answer"] == "".join(sorted(s))
    assert not {e["prompt"] for e in task.train} & {e["prompt"] for e in task.eval}
    assert set(task.alphabet) >= set("".join(e["prompt"] + e["answer"] for e in task.train))
    with pytest.raises(ValueError, match="op must be one of"):
        load_task("strings", {"op": "shuffle"})


def test_jsonl_math_and_similarity_tasks(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"question": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(10)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    m = load_task("math", {"path": str(path), "num_eval": 2})
    assert len(m.train) == 8 and not m.graded
    ex = m.train[0]
    assert m.score([ex], [f"\\boxed{{{ex['answer']}}}"]).tolist() == [1.0]
    s = load_task("similarity", {"path": str(path), "prompt_field": "question", "num_eval": 2})
    assert s.graded and s.score([s.eval[0]], [s.eval[0]["answer"]]).tolist() == [1.0]
    with pytest.raises(ValueError, match="has no field 'prompt'"):
        load_task("jsonl", {"path": str(path), "num_eval": 2})


def test_custom_reward_module_function(monkeypatch):
    mod = types.ModuleType("my_rewards_mod")
    mod.length_reward = lambda prompt, completion, **ex: float(len(completion))
    monkeypatch.setitem(sys.modules, "my_rewards_mod", mod)
    spec = get_reward("my_rewards_mod:length_reward")
    assert spec.graded
    opts = {"digits": 1, "num_eval": 5}
    task = load_task("arithmetic", opts, reward="my_rewards_mod:length_reward")
    assert task.score(task.eval[:2], ["abc", ""]).tolist() == [3.0, 0.0]


def test_errors_name_the_problem(monkeypatch):
    with pytest.raises(ValueError, match="unknown reward 'nope'; valid: .*exact"):
        get_reward("nope")
    with pytest.raises(ValueError, match="cannot load reward function"):
        get_reward("no_such_module_xyz:f")
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        load_task("nope")
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'digit' for task 'arithmetic'"):
        load_task("arithmetic", {"digit": 2})
    assert "digits" in task_options("arithmetic")
    mod = types.ModuleType("bad_rewards_mod")
    mod.nan_reward = lambda prompt, completion, **ex: float("nan")
    monkeypatch.setitem(sys.modules, "bad_rewards_mod", mod)
    opts = {"digits": 1, "num_eval": 5}
    task = load_task("arithmetic", opts, reward="bad_rewards_mod:nan_reward")
    with pytest.raises(ValueError, match="returned nan for prompt"):
        task.score(task.eval[:1], ["1"])


def test_registry_lists_builtins():
    names = {"exact", "arithmetic", "arithmetic_last", "positional", "math_verify", "similarity",
             "reasoning_gym"}
    assert names <= set(REWARDS)


def test_permute_task_has_many_correct_answers():
    from itertools import permutations

    from bestk.tasks.builtin import multiset_reward

    t = load_task("permute", {"min_len": 4, "max_len": 5, "num_train": 200, "num_eval": 20})
    assert len(t.train) == 200 and len(t.eval) == 20 and t.graded
    assert not {e["letters"] for e in t.train} & {e["letters"] for e in t.eval}
    ex = t.train[0]
    s = ex["letters"]
    assert sorted(ex["answer"]) == sorted(s) and ex["prompt"] == f"per:{s}="
    perms = sorted({"".join(p) for p in permutations(s)})
    assert t.score([ex] * len(perms), perms).tolist() == [1.0] * len(perms)
    assert bool(t.success(t.score([ex], [s[::-1]]))[0])
    # graded: the share of symbols in common over the longer length
    assert multiset_reward("", "1123", letters="1234") == pytest.approx(3 / 4)
    assert multiset_reward("", "12345", letters="1234") == pytest.approx(4 / 5)
    assert multiset_reward("", "", letters="1234") == 0.0
    b = load_task("permute", {"num_train": 50, "num_eval": 5, "graded": False})
    assert not b.graded and b.score([b.eval[0]], [b.eval[0]["letters"]]).tolist() == [1.0]
    with pytest.raises(ValueError, match="too many"):
        load_task("permute", {"min_len": 1, "max_len": 1, "num_train": 50})


def test_validation_task_holds_out_training_prompts():
    full = load_task("strings", {"num_train": 100, "num_eval": 10}, seed=3)
    val = load_task("validation", {"task": "strings", "options": {"num_train": 100,
                                                                  "num_eval": 10},
                                   "size": 20}, seed=3)
    assert [e["id"] for e in val.train] == [e["id"] for e in full.train[:80]]
    assert [e["id"] for e in val.eval] == [e["id"] for e in full.train[80:]]
    assert not {e["id"] for e in val.eval} & {e["id"] for e in full.eval}
    with pytest.raises(ValueError, match="size must be"):
        load_task("validation", {"task": "strings", "options": {"num_train": 10}, "size": 10})
    with pytest.raises(ValueError, match="needs option task"):
        load_task("validation", {})


def test_evaluation_counts_distinct_correct_completions(tmp_path):
    """distinct_correct from evaluate() against a recount of its own samples."""
    import numpy as np

    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.rollout.engine import HFEngine
    from bestk.train.rollout.evaluate import evaluate
    from bestk.train.trainer import Trainer

    cfg = TrainConfig()
    apply_overrides(cfg, ["threads=1", *(f"model.{k}={v}" for k, v in TINY_MODEL.items()),
                          "task.name=permute",
                          "task.options={min_len: 2, max_len: 3, num_train: 64, num_eval: 6}",
                          "sft.steps=30", "sft.batch_size=32", f"out={tmp_path / 'run'}"])
    tr = Trainer(cfg)
    tr.sft()
    res = evaluate(HFEngine(tr.model, tr.tokenizer), tr.task, tr.task.eval, n=16, max_new_tokens=5,
                   seed=1)
    texts = np.asarray(res.texts, dtype=object).reshape(6, 16)
    ok = tr.task.success(res.rewards)
    want = np.mean([len({t.strip() for t, o in zip(row, oks, strict=True) if o})
                    for row, oks in zip(texts, ok, strict=True)])
    assert res.metrics["distinct_correct"] == pytest.approx(want)
    assert res.metrics["distinct_correct"] <= res.metrics["distinct"]
