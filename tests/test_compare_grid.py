"""``bestk.compare.grid``: every run of a comparison -- each method, seed and sweep rate -- is
checked as its trainer will check it before any work (no SFT, no file)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.compare import Method, run_compare
from tests import conftest

TINY = [*conftest.TINY, "checkpoint_every=1"]


@pytest.mark.parametrize("methods, overrides, match", [
    # a 0/1-reward estimator on a graded task's raw rewards (bestk train refuses it up front)
    (["grpo", "maxrl"], ["advantage_reward=raw"],
     "method 'maxrl': estimator 'maxrl' needs 0/1 rewards, but task 'strings/reverse' is graded"),
    # one method's own override: more prompts per step than the task has
    (["grpo", Method("big", "grpo", overrides=("rollout.prompts_per_step=65",))], [],
     r"method 'big': rollout.prompts_per_step \(65\) exceeds the 64 training prompts"),
    # a calibration made later by the comparison (auto), checked as what it will be: binary
    (["grpo", Method("kappo", "kappo_grpo", {"calibration": "auto"})],
     ["advantage_reward=raw"], "method 'kappo': estimator 'kappo_grpo' needs 0/1 rewards"),
])
def test_every_run_is_checked_before_any_work(tmp_path, methods, overrides, match):
    from bestk.compare import KappoAuto

    out = tmp_path / "c"
    with pytest.raises(ValueError, match=match):
        run_compare(methods, seeds=2, out=out, max_steps=1, overrides=[*TINY, *overrides],
                    progress=False, kappo=KappoAuto(k=2, bank_n=4))
    assert not out.exists()  # no SFT, no file


def test_the_sweeps_runs_are_checked_before_any_work(tmp_path):
    """The sweep's runs (the validation split of the training prompts) are checked too: a
    split that leaves too few training prompts for a step is refused before the sweep."""
    out = tmp_path / "s"
    with pytest.raises(ValueError, match=r"prompts_per_step \(40\) exceeds the 32 training"):
        run_compare(["grpo"], seeds=1, out=out, max_steps=1, progress=False,
                    overrides=[*TINY, "rollout.prompts_per_step=40"], lr_sweep=[1e-3, 3e-3],
                    val_prompts=32)
    assert not out.exists()


def test_compare_cli_refuses_a_bad_cell_in_one_line_before_any_work(tmp_path):
    out = tmp_path / "c"
    args = ["compare", "--estimators", "maxrl", "--seeds", "1", "--max-steps", "1",
            "--out", str(out), "--quiet", "--set", "advantage_reward=raw"]
    for s in TINY:
        args += ["--set", s]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: method 'maxrl': estimator 'maxrl' "
                                                   "needs 0/1 rewards")
    assert not out.exists()
