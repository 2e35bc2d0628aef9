"""The ``dataset`` task: local parquet / JSONL / CSV through ``datasets``, the field mapping,
held-out splits, one-line errors, and the math-verify check with GSM8K's ``####`` answers."""

from __future__ import annotations

import csv
import json

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
    with pytest.raises(ValueError, match="'.*nope.parquet' is not a file"):
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
