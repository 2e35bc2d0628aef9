"""``bestk lab bandit|digits`` end to end through the CLI (fast modes)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from bestk.cli import app

runner = CliRunner()


def test_lab_bandit_fast(tmp_path):
    res = runner.invoke(app, ["lab", "bandit", "--fast", "--quiet", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["curves"]) == {"binary", "graded", "negative"}
    claimed = [r for r in data["bias"] if r["objective"] != "none" and "vs" not in r["estimator"]]
    assert claimed and all(r["rel_bias"] < 1e-9 for r in claimed)
    grpo = [r for r in data["bias"] if r["estimator"] == "grpo"]
    assert grpo and all(r["rel_bias"] > 0.1 for r in grpo)
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "| N | estimator |" in (tmp_path / "results.md").read_text()


def test_lab_digits_fast(tmp_path):
    res = runner.invoke(app, ["lab", "digits", "--fast", "--quiet", "--rewards", "binary",
                              "--learners", "ml,grpo,softmax_grpo(tau=0.1)",
                              "--lr-grid", "0.003", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "testbeds.json").read_text())
    assert set(data) == {"digits-binary"}
    methods = data["digits-binary"]["methods"]
    assert set(methods) == {"ml", "grpo", "softmax_grpo(tau=0.1)"}
    assert all(m["config"]["lr"] == 0.003 for m in methods.values())  # one rate: no sweep
    assert (tmp_path / "digits.png").stat().st_size > 0


def test_lab_sparse_fast(tmp_path):
    res = runner.invoke(app, ["lab", "sparse", "--fast", "--quiet", "--learners",
                              "ml,grpo,grpo (A/A)", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "testbeds.json").read_text())
    assert set(data["sparse-n4"]["methods"]) == {"ml", "grpo", "grpo (A/A)"}


def test_lab_bad_input_is_a_one_line_error(tmp_path):
    res = runner.invoke(app, ["lab", "digits", "--fast", "--learners", "nope",
                              "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "unknown learner" in res.output
    res = runner.invoke(app, ["lab", "bandit", "--fast", "--ns", "4,x", "--out", str(tmp_path)])
    assert res.exit_code != 0
    res = runner.invoke(app, ["lab", "digits", "--fast", "--lr-grid", "0.1,x",
                              "--out", str(tmp_path)])
    assert res.exit_code != 0
    res = runner.invoke(app, ["lab", "sparse", "--fast", "--learners", "ml,grpo (A/A)",
                              "--out", str(tmp_path)])
    assert res.exit_code == 2 and "A/A control" in res.output
