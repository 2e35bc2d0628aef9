"""The ``dataset`` task: local parquet / JSONL / CSV through ``datasets``, the field mapping,
held-out splits, one-line errors, and the math-verify check with GSM8K's ``####`` answers."""

from __future__ import annotations

import csv
import json
import re

import pytest

from bestk.tasks import load_task
from bestk.tasks.dataset import read_rows
from bestk.tasks.rewards import final_answer, math_verify_reward
from tests.conftest import gsm8k_rows


def _write(tmp_path, rows, fmt):
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_each_format_reads_the_same_rows(tmp_path, fmt):
    rows = gsm8k_rows(12)
    assert read_rows(str(_write(tmp_path, rows, fmt))) == rows


def test_gsm8k_parquet_task(gsm8k_parquet):
    train_path, test_path = gsm8k_parquet
    task = load_task("dataset", {"path": str(train_path), "eval_path": str(test_path),
                                 "template": "Q: {prompt}\nA:"})
    assert len(task.train) == 40 and len(task.eval) == 8
    assert [e["id"] for e in task.train] == list(range(40))
    assert [e["id"] for e in task.eval] == list(range(40, 48))  # ids after the training rows'
    ex = task.train[3]
    row = gsm8k_rows(40)[3]
    assert ex["prompt"] == f"Q: {row['question']}\nA:"
    assert ex["answer"] == row["answer"]  # the worked solution: the SFT reference completion
    assert not task.graded and task.success_threshold == 1.0
    # the math-verify reward reads GSM8K's final answer on both sides
    result = row["answer"].rsplit("#### ", 1)[1]
    got = task.score([ex] * 5, [
        f"blah\n#### {result}",            # GSM8K's own format
        f"The answer is \\boxed{{{result}}}.",
        f"{result}",
        f"#### {int(result) + 1}",
        "I do not know",
    ])
    assert got.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_field_mapping_and_a_seeded_held_out_split(tmp_path):
    rows = [{"problem": f"{i}+{i}", "solution": f"\\boxed{{{2 * i}}}", "level": i % 3}
            for i in range(30)]
    path = _write(tmp_path, rows, "jsonl")
    opts = {"path": str(path), "prompt_field": "problem", "answer_field": "solution",
            "num_eval": 5, "template": "{prompt} (level {level})"}
    a, b = load_task("dataset", opts, seed=1), load_task("dataset", opts, seed=1)
    c = load_task("dataset", opts, seed=2)
    assert [e["id"] for e in a.eval] == [e["id"] for e in b.eval] != [e["id"] for e in c.eval]
    assert len(a.train) == 25 and not {e["id"] for e in a.train} & {e["id"] for e in a.eval}
    ex = next(e for e in a.train if e["id"] == 4)
    assert ex["prompt"] == "4+4 (level 1)" and ex["answer"] == "\\boxed{8}" and ex["level"] == 1
    assert a.score([ex, ex], ["so \\boxed{8}", "\\boxed{9}"]).tolist() == [1.0, 0.0]


def test_errors_are_one_line_value_errors(tmp_path):
    with pytest.raises(ValueError, match="needs option path"):
        load_task("dataset", {})
    with pytest.raises(ValueError, match="'.*nope.parquet' is not a file or a directory "
                       "\\(it accepts a parquet"):
        load_task("dataset", {"path": str(tmp_path / "nope.parquet")})
    odd = tmp_path / "rows.txt"
    odd.write_text("x")
    with pytest.raises(ValueError, match="cannot tell the format.*set option format"):
        load_task("dataset", {"path": str(odd)})
    with pytest.raises(ValueError, match="format must be auto or one of"):
        load_task("dataset", {"path": str(odd), "format": "xml"})
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="cannot read .*bad.parquet.* as parquet") as info:
        load_task("dataset", {"path": str(bad)})
    assert "\n" not in str(info.value)
    path = _write(tmp_path, gsm8k_rows(10), "jsonl")
    with pytest.raises(ValueError, match="row 1 has no field 'problem' \\(it has 'question', "
                       "'answer'\\)"):
        load_task("dataset", {"path": str(path), "prompt_field": "problem"})
    with pytest.raises(ValueError, match="template '\\{nope\\}' does not fit"):
        load_task("dataset", {"path": str(path), "template": "{nope}"})
    with pytest.raises(ValueError, match="num_eval must be in \\[1, 9\\]"):
        load_task("dataset", {"path": str(path), "num_eval": 10})


def test_final_answer():
    assert final_answer("3 * 4 = <<3*4=12>>12 apples.\n#### 12") == "12"
    assert final_answer("#### 1,234,567 dollars\nmore text") == "1234567 dollars"
    assert final_answer("a #### 5 then #### 7") == "7"  # the last marker
    assert final_answer("so \\boxed{3}") == "so \\boxed{3}"  # no marker: unchanged
    assert final_answer("####") == ""
    assert math_verify_reward("p", "####", answer="#### 3") == 0.0
    assert math_verify_reward("p", "#### 1,234", answer="x = <<x=1234>>1234\n#### 1234") == 1.0


# -- data as people store it: save_to_disk, .arrow, directories of shards ---------------------
def _dataset(rows):
    import datasets

    return datasets.Dataset.from_list(rows)


def test_a_save_to_disk_directory_and_its_arrow_file(tmp_path):
    rows = gsm8k_rows(12)
    _dataset(rows).save_to_disk(str(tmp_path / "saved"))
    assert read_rows(str(tmp_path / "saved")) == rows
    arrow = sorted((tmp_path / "saved").glob("*.arrow"))
    assert len(arrow) == 1 and read_rows(str(arrow[0])) == rows  # the .arrow file alone
    task = load_task("dataset", {"path": str(tmp_path / "saved"), "num_eval": 2})
    assert task.name == "dataset/saved" and len(task.train) == 10


def test_a_saved_dataset_dict_gives_train_and_test(tmp_path):
    import datasets

    train, test = gsm8k_rows(10), gsm8k_rows(4, offset=500)
    d = tmp_path / "gsm8k"
    datasets.DatasetDict({"train": _dataset(train), "test": _dataset(test)}).save_to_disk(str(d))
    task = load_task("dataset", {"path": str(d), "eval_path": str(d)})
    assert [e["question"] for e in task.train] == [r["question"] for r in train]
    assert [e["question"] for e in task.eval] == [r["question"] for r in test]
    assert read_rows(str(d / "test")) == test  # a split's own directory
    odd = tmp_path / "odd"
    datasets.DatasetDict({"a": _dataset(train), "b": _dataset(test)}).save_to_disk(str(odd))
    with pytest.raises(ValueError, match="holds the splits a, b; give one of them: .*odd/a, "
                       ".*odd/b"):
        read_rows(str(odd))


def test_a_directory_of_parquet_shards(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = gsm8k_rows(9)
    d = tmp_path / "shards"
    d.mkdir()
    for i, part in enumerate((rows[:4], rows[4:7], rows[7:])):
        pq.write_table(pa.Table.from_pylist(part), d / f"train-{i:05d}-of-00003.parquet")
    (d / "README.md").write_text("not data")
    assert read_rows(str(d)) == rows  # shards in name order, other files ignored
    pq.write_table(pa.Table.from_pylist(rows[:2]), d / "test-00000-of-00001.parquet")
    with pytest.raises(ValueError, match="shards of several splits \\(test, train\\); give one "
                       "as a glob, e.g. '.*shards/test-\\*.parquet'"):
        read_rows(str(d))
    assert read_rows(str(d / "train-*.parquet")) == rows
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no data files; it accepts a parquet"):
        read_rows(str(tmp_path / "empty"))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write(mixed, rows, "jsonl")
    _write(mixed, rows, "csv")
    with pytest.raises(ValueError, match="mixes formats \\(csv, jsonl\\)"):
        read_rows(str(mixed))
    assert read_rows(str(mixed), "csv") == rows


# -- chat-format prompts ------------------------------------------------------------------------
def _chat_rows(n):
    rows = []
    for i, r in enumerate(gsm8k_rows(n)):
        msgs = [{"role": "user", "content": r["question"]}]
        if i % 2:
            msgs.insert(0, {"role": "system", "content": f"You are tutor {i}."})
        rows.append({"prompt": msgs, "answer": r["answer"], "level": i})
    return rows


def test_a_chat_format_jsonl(tmp_path):
    path = _write(tmp_path, _chat_rows(10), "jsonl")
    opts = {"path": str(path), "prompt_field": "prompt", "num_eval": 2}
    for name in ("dataset", "jsonl"):
        task = load_task(name, opts)
        ex = next(e for e in task.train if e["id"] == 3)
        assert ex["prompt"] == _chat_rows(10)[3]["prompt"]  # the messages, rendered later
        assert ex["answer"] == _chat_rows(10)[3]["answer"] and ex["level"] == 3
    task = load_task("dataset", {**opts, "template": "{prompt}\nAnswer after ####."})
    ex = next(e for e in task.train if e["id"] == 3)
    assert ex["prompt"][0] == {"role": "system", "content": "You are tutor 3."}
    assert ex["prompt"][1]["content"] == gsm8k_rows(10)[3]["question"] + "\nAnswer after ####."


def test_chat_messages_in_parquet_and_an_assistant_answer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": [{"role": "user", "content": f"q{i}", "name": "ann" if i == 0 else None}],
             "completion": [{"role": "assistant", "content": f"#### {i}"}]} for i in range(6)]
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)  # struct columns: missing keys are null
    task = load_task("dataset", {"path": str(path), "prompt_field": "prompt",
                                 "answer_field": "completion", "num_eval": 1})
    by_id = {e["id"]: e for e in [*task.train, *task.eval]}
    assert by_id[0]["prompt"] == [{"role": "user", "content": "q0", "name": "ann"}]
    assert by_id[1]["prompt"] == [{"role": "user", "content": "q1"}]  # null keys dropped
    assert by_id[4]["answer"] == "#### 4"  # TRL's conversational completion: the reply's text


@pytest.mark.parametrize("value, said", [
    ({"role": "user", "content": "x"}, "a dict"),
    (["just", "strings"], "a list whose item 1 is str, not a message dict"),
    ([{"role": "user"}], "a list whose message 1 lacks a text 'role' or 'content' \\(it has "
                         "'role'\\)"),
    ([{"role": "user", "content": [{"type": "text", "text": "x"}]}],
     "a list whose message 1 lacks a text"),
    ([], "an empty list"),
    (None, None),
])
def test_an_unreadable_prompt_column_is_one_line(tmp_path, value, said):
    rows = [{"q": "fine", "answer": "1"}, {"q": value, "answer": "2"}, {"q": "ok", "answer": "3"}]
    path = _write(tmp_path, rows, "jsonl")
    said = "is empty \\(null\\)" if said is None else f"holds {said}"
    with pytest.raises(ValueError, match=f"data.jsonl: row 2: column 'q' {said}.*; it accepts "
                       "text or a list of chat messages") as info:
        load_task("dataset", {"path": str(path), "prompt_field": "q", "num_eval": 1})
    assert "\n" not in str(info.value)


def test_an_answer_column_of_messages_needs_an_assistant_reply(tmp_path):
    rows = [{"q": "a", "answer": [{"role": "user", "content": "x"}]}] * 3
    path = _write(tmp_path, rows, "jsonl")
    with pytest.raises(ValueError, match="row 1: column 'answer' holds chat messages without "
                       "an assistant message"):
        load_task("dataset", {"path": str(path), "prompt_field": "q", "num_eval": 1})


@pytest.mark.parametrize("task", ["jsonl", "dataset", "math"])
def test_an_empty_jsonl_file_says_no_rows(tmp_path, task):
    """An empty (or blank) JSONL file is "holds no rows", naming it: not ``datasets``'
    ``StopIteration`` nor a ``num_eval`` range of ``[1, -1]``."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n \n")
    opts = {"path": str(path), **({"prompt_field": "prompt"} if task == "dataset" else {})}
    with pytest.raises(ValueError, match=f"'{re.escape(str(path))}' holds no rows"):
        load_task(task, opts)


@pytest.mark.parametrize("task", ["jsonl", "dataset"])
def test_a_file_that_is_not_utf8_is_named(tmp_path, task):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"prompt": "caf\xe9", "answer": "1"}\n'.encode("latin-1") * 8)
    opts = {"path": str(path), "num_eval": 2,
            **({"prompt_field": "prompt"} if task == "dataset" else {})}
    with pytest.raises(ValueError) as e:
        load_task(task, opts)
    msg = str(e.value)
    assert f"'{path}'" in msg and "is not UTF-8 text" in msg and "\n" not in msg
