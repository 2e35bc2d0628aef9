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


@pytest.mark.parametrize("kwargs, match", [
    # a count past the bound made and checked every run first: 10**20 filled the memory
    (dict(seeds=10**20), r"--seeds must be an integer in \[1, 1000\]"),
    (dict(seeds=1001), r"--seeds must be an integer in \[1, 1000\] \(the sweep's seeds start"),
    (dict(seeds=1, lr_sweep=[1e-3], sweep_seeds=10**20), r"--sweep-seeds must be an integer"),
    # a seed whose grid passes 2**63 - 1: named, not a config error on a seed never given
    (dict(seeds=2, overrides=[*TINY, f"seed={2**63 - 1}"]),
     r"seed=9223372036854775807 is too large for this grid: its runs' seeds reach"),
    (dict(seeds=1, overrides=[*TINY, f"seed={2**63 - 10}"], controls=["grpo"]),
     "is too large for this grid"),
], ids=["seeds-1e20", "seeds-1001", "sweep-seeds-1e20", "seed-max", "seed-max-control"])
def test_seed_counts_and_seeds_past_the_range_are_refused_at_once(tmp_path, kwargs, match):
    out = tmp_path / "c"
    kwargs = {"overrides": TINY, **kwargs}
    with pytest.raises(ValueError, match=match):
        run_compare(["grpo"], out=out, max_steps=1, progress=False, **kwargs)
    assert not out.exists()


@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_lr_sweep_is_refused_not_skipped(tmp_path, value):
    """``--lr-sweep ''`` ran the grid without any sweep, rc 0."""
    from tests.conftest import invoke, one_line_error

    out = tmp_path / "c"
    line = one_line_error(invoke("compare", "--estimators", "grpo", "--seeds", "1", "--out", out,
                                 "--lr-sweep", value, *conftest.set_args(*TINY)))
    assert f"--lr-sweep {value!r} lists no learning rate" in line
    assert not out.exists()


def test_select_by_a_k_beyond_eval_n_is_refused_before_the_sweep(tmp_path):
    """``--select-by pass@99`` with eval.n = 4 was refused only after the sweep's runs."""
    with pytest.raises(ValueError, match=r"select_by 'pass@99': .* k = 1\.\.4"):
        run_compare(["grpo"], seeds=1, out=tmp_path / "cmp", max_steps=1,
                    overrides=conftest.TINY, progress=False, lr_sweep=[1e-3, 3e-3],
                    select_by="pass@99")
    assert not (tmp_path / "cmp").exists()
