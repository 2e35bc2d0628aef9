"""``bestk.samples`` and ``bestk metrics``: pass@k / best@k of a file of scored samples,
checked against brute force over every k-subset of each prompt's samples."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.samples import parse_where, read_samples, sample_metrics


def _brute_force(groups: list[list[float]], k: int, success=None) -> float:
    """Mean over the prompts with >= k samples of the mean, over every k-subset, of the
    subset's best reward (or of "some sample succeeds")."""
    per_prompt = []
    for rewards in groups:
        if len(rewards) < k:
            continue
        values = [max(s) if success is None else float(any(success(r) for r in s))
                  for s in itertools.combinations(rewards, k)]
        per_prompt.append(np.mean(values))
    return float(np.mean(per_prompt))


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def ragged(tmp_path) -> tuple[Path, list[list[float]]]:
    """Graded rewards, 3 to 7 samples a prompt, written one row per sample in shuffled order
    (the prompt ids are strings and integers)."""
    rng = np.random.default_rng(3)
    groups = [list(rng.choice([0.0, 0.25, 0.5, 1.0], size=n)) for n in (3, 7, 5, 4, 6)]
    rows = [{"prompt_id": p if p % 2 else f"q{p}", "reward": r}
            for p, rewards in enumerate(groups) for r in rewards]
    order = rng.permutation(len(rows))
    return _write_jsonl(tmp_path / "s.jsonl", [rows[i] for i in order]), groups


def _regroup(path: Path, groups: list[list[float]]) -> list[list[float]]:
    """``groups`` in the order :func:`read_samples` first meets the prompts."""
    seen = []
    for line in path.read_text().splitlines():
        pid = json.loads(line)["prompt_id"]
        if pid not in seen:
            seen.append(pid)
    return [groups[int(str(p).lstrip("q"))] for p in seen]


def test_ragged_best_and_pass_at_k_equal_brute_force(ragged):
    path, groups = ragged
    m = sample_metrics(read_samples(path), all_k=True, threshold=0.5)
    assert (m.num_prompts, m.num_samples, m.n_min, m.n_max) == (5, 25, 3, 7)
    assert [r.k for r in m.rows] == list(range(1, 8))
    for r in m.rows:
        assert r.prompts == sum(len(g) >= r.k for g in groups)
        assert r.best_at_k == pytest.approx(_brute_force(groups, r.k), abs=1e-12)
        assert r.pass_at_k == pytest.approx(
            _brute_force(groups, r.k, success=lambda x: x >= 0.5), abs=1e-12)
        assert r.best_lo <= r.best_at_k <= r.best_hi
        assert r.pass_lo <= r.pass_at_k <= r.pass_hi


def test_default_k_stops_at_the_smallest_group_and_graded_rewards_have_no_pass(ragged):
    path, _ = ragged
    m = sample_metrics(read_samples(path))
    assert [r.k for r in m.rows] == [1, 2, 3] and all(r.prompts == 5 for r in m.rows)
    assert not m.binary and all(r.pass_at_k is None for r in m.rows)


def test_binary_rewards_give_pass_equal_best_and_lists_expand(tmp_path):
    path = _write_jsonl(tmp_path / "b.jsonl", [
        {"doc_id": 0, "exact_match": [1, 0, 0, 1]},
        {"doc_id": 1, "exact_match": [False, False, True]},
        {"doc_id": 2, "exact_match": 0}, {"doc_id": 2, "exact_match": 0},
        {"doc_id": 2, "exact_match": 0},
    ])
    s = read_samples(path)
    assert (s.prompt_key, s.reward_key, s.binary) == ("doc_id", "exact_match", True)
    m = sample_metrics(s)
    groups = [[1, 0, 0, 1], [0, 0, 1], [0, 0, 0]]
    for r in m.rows:
        assert r.pass_at_k == pytest.approx(r.best_at_k, abs=1e-15)
        assert r.pass_at_k == pytest.approx(_brute_force(groups, r.k), abs=1e-12)


def test_intervals_are_seeded_and_narrow_with_more_prompts(tmp_path):
    rng = np.random.default_rng(0)
    def file(name: str, prompts: int) -> Path:
        return _write_jsonl(tmp_path / name, [
            {"prompt_id": p, "reward": rng.integers(0, 2, 8).tolist()} for p in range(prompts)])
    small, large = file("s.jsonl", 10), file("l.jsonl", 400)
    a, b = sample_metrics(read_samples(small), seed=1), sample_metrics(read_samples(small), seed=1)
    assert a.rows == b.rows
    assert sample_metrics(read_samples(small), seed=2).rows[0].best_lo != a.rows[0].best_lo
    wide = a.rows[0].best_hi - a.rows[0].best_lo
    narrow = sample_metrics(read_samples(large)).rows[0]
    assert narrow.best_hi - narrow.best_lo < wide / 3


def test_csv_and_parquet_read_as_jsonl(tmp_path, ragged):
    path, _ = ragged
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    with (tmp_path / "s.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["prompt_id", "reward"])
        w.writeheader()
        w.writerows(rows)
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"prompt_id": [str(r["prompt_id"]) for r in rows],
                      "reward": [r["reward"] for r in rows]})
    pq.write_table(table, tmp_path / "s.parquet")
    want = sample_metrics(read_samples(path)).rows
    assert sample_metrics(read_samples(tmp_path / "s.csv")).rows == want
    assert sample_metrics(read_samples(tmp_path / "s.parquet")).rows == want


def test_where_keeps_one_step_of_a_run_log_and_dotted_keys_read_nested_fields(tmp_path):
    path = _write_jsonl(tmp_path / "samples.jsonl", [
        {"step": 0, "prompt_id": 1, "m": {"ok": True}},
        {"step": 0, "prompt_id": 1, "m": {"ok": False}},
        {"step": 30, "prompt_id": 1, "m": {"ok": True}},
        {"step": 30, "prompt_id": 1, "m": {"ok": True}},
    ])
    s = read_samples(path, reward_key="m.ok", where=parse_where(["step=30"]))
    assert s.rewards.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="no row of 4 matches --where step=7"):
        read_samples(path, reward_key="m.ok", where={"step": "7"})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_where(["step"])
    with pytest.raises(ValueError, match="twice"):
        parse_where(["step=1", "step=2"])


@pytest.mark.parametrize(("lines", "message"), [
    ('{"prompt_id": 1, "reward": "0.5"}\n', r"row 1: the reward must be a number.*str '0.5'"),
    ('{"prompt_id": 1, "reward": NaN}\n', "row 1: the reward is nan"),
    ('{"prompt_id": 1, "reward": []}\n', "row 1: the reward list is empty"),
    ('{"prompt_id": 1, "reward": null}\n', "row 1: the reward is empty"),
    ('{"prompt_id": null, "reward": 1}\n', "row 1: the prompt id is empty"),
    ('{"prompt_id": 1, "reward": [1, [0]]}\n', "row 1 item 1: the reward must be"),
    ('{"prompt_id": 1, "reward": 1}\n{"prompt_id": 2}\n', "row 2: no 'reward' column"),
    ('{"prompt_id": 1, "reward": 1}\n[1, 2]\n', "s.jsonl: row 2: expected a JSON object"),
    ('{"prompt_id": 1, "reward": 1}\n{oops\n', "s.jsonl: row 2: invalid JSON"),
    ('{"text": "x", "reward": 1}\n', "no prompt column among prompt_id, doc_id.*--prompt"),
    ("", "no samples"),
])
def test_bad_input_names_the_row(tmp_path, lines, message):
    path = tmp_path / "s.jsonl"
    path.write_text(lines)
    with pytest.raises(ValueError, match=message):
        read_samples(path)


def test_bad_files_and_options(tmp_path, ragged):
    path, _ = ragged
    with pytest.raises(ValueError, match="cannot tell the format from the suffix '.txt'"):
        read_samples(tmp_path / "s.txt")
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        read_samples(path, fmt="xml")
    with pytest.raises(ValueError, match="no such file"):
        read_samples(tmp_path / "missing.jsonl")
    (tmp_path / "s.csv").write_text("prompt_id,reward\n1,yes\n")
    with pytest.raises(ValueError, match="row 1: the reward 'yes' is not a number"):
        read_samples(tmp_path / "s.csv")
    s = read_samples(path)
    with pytest.raises(ValueError, match="ci must be in"):
        sample_metrics(s, ci=1.5)
    with pytest.raises(ValueError, match="n_boot"):
        sample_metrics(s, n_boot=0)


def test_cli_prints_writes_json_and_plot_and_refuses_its_input(tmp_path, ragged):
    pytest.importorskip("matplotlib")
    path, _ = ragged
    out, png = tmp_path / "m.json", tmp_path / "m.png"
    res = CliRunner().invoke(app, ["metrics", str(path), "--threshold", "0.5", "--all-k",
                                   "--json", str(out), "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "5 prompts, 25 samples, 3..7 per prompt" in res.output
    assert "success: reward >= 0.5" in res.output and "…" not in res.output
    data = json.loads(out.read_text())
    want = sample_metrics(read_samples(path), all_k=True, threshold=0.5)
    assert data["rows"] == want.as_dict()["rows"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    res = CliRunner().invoke(app, ["metrics", str(path), "--json", str(path)])
    assert res.exit_code == 2 and "is the input file" in res.output
    res = CliRunner().invoke(app, ["metrics", str(path), "--json", str(out), "--plot", str(out)])
    assert res.exit_code == 2 and "is the --json file" in res.output
    res = CliRunner().invoke(app, ["metrics", str(path), "--reward", "nope"])
    assert res.exit_code == 2 and "no reward column 'nope'" in res.output


@pytest.mark.parametrize("name", ["s.jsonl", "s.csv"])
def test_bytes_that_are_not_utf8_are_one_line_naming_the_file(tmp_path, name):
    path = tmp_path / name
    good = (b'{"prompt_id": 1, "reward": 1}\n' if name.endswith("jsonl")
            else b"prompt_id,reward\n1,1\n")
    path.write_bytes(good + b"\xff\xfe\n")
    with pytest.raises(ValueError, match=r"s\.(jsonl|csv)' is not UTF-8 text.*0xff"):
        read_samples(path)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_device_or_a_directory_is_not_a_samples_file(tmp_path, fmt):
    """``bestk metrics /dev/zero`` is refused before a byte is read (once it said "no such
    file", which it is not); a missing file still says so."""
    for path in ("/dev/zero", "/dev/null"):
        with pytest.raises(ValueError, match=f"samples file '{path}' is not a regular file"):
            read_samples(path, fmt=fmt)
    with pytest.raises(ValueError, match="is a directory"):
        read_samples(tmp_path, fmt=fmt)
    with pytest.raises(ValueError, match="no such file"):
        read_samples(tmp_path / f"missing.{fmt}")
