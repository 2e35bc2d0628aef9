"""``bestk train`` / ``bestk eval`` command behaviour: a failed resume leaves ``config.yaml``
as it was, ``--quiet`` shows no progress bar (the libraries' included), and how ``bestk eval``
builds its config (``--run``, ``-n`` versus ``--set eval.n``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bestk.cli import app
from bestk.train.commands import eval_config
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides, config_to_dict
from bestk.train.run.directory import write_run_config
from bestk.train.trainer import Trainer
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A tiny run stopped after 2 of 4 steps (it resumes)."""
    out = tmp_path_factory.mktemp("cmd") / "run"
    cfg = tiny_config(out, "max_steps=2", "checkpoint_every=2", "eval.every=2")
    Trainer(cfg).run(progress=False)
    (out / ".finished").unlink(missing_ok=True)
    return out


def test_a_failed_resume_leaves_config_yaml_as_it_was(stopped_run, monkeypatch):
    """``--resume DIR --set report_to=wandb`` without a W&B login stops (exit 2) before it
    records anything: validate first, write after; a plain resume then still works."""
    from bestk.train.run import reporters

    def no_login(self):
        raise ValueError("W&B could not start a run: no login")

    before = (stopped_run / "config.yaml").read_bytes()
    monkeypatch.setattr(reporters.Reporters, "open", no_login)
    res = CliRunner().invoke(app, ["train", "--resume", str(stopped_run), "--quiet",
                                   "--max-steps", "3", "--set", "report_to=wandb"])
    assert res.exit_code == 2 and "W&B could not start a run" in res.output, res.output
    assert (stopped_run / "config.yaml").read_bytes() == before
    monkeypatch.undo()
    res = CliRunner().invoke(app, ["train", "--resume", str(stopped_run), "--quiet",
                                   "--max-steps", "3"])
    assert res.exit_code == 0, res.output
    assert "max_steps: 3" in (stopped_run / "config.yaml").read_text()


def test_quiet_prints_no_progress_bar(tiny_hf_model, gsm8k_parquet, tmp_path):
    """No bar of bestk, transformers (loading, saving weights) or datasets (preparing the
    data) on stderr with ``--quiet``; without it, in a log (``bestk train > log 2>&1``: stderr
    a pipe), complete lines only -- bestk's step and evaluation lines, no carriage-return
    bar of any library, no truncated row."""
    train, test = gsm8k_parquet
    args = [sys.executable, "-m", "bestk", "train", "--out", str(tmp_path / "q"),
            "--set", f"model.path={tiny_hf_model}", "--set", "task.name=dataset",
            "--set", f"task.options={{path: {train}, eval_path: {test}, num_eval: 2}}",
            "--set", "sft.steps=1", "--set", "sft.batch_size=2", "--set", "max_steps=1",
            "--set", "rollout.prompts_per_step=2", "--set", "rollout.n=2",
            "--set", "rollout.max_new_tokens=3", "--set", "eval.n=2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    quiet = subprocess.run([*args, "--quiet"], capture_output=True, text=True, env=env,
                           timeout=600)
    assert quiet.returncode == 0, quiet.stderr
    assert "it/s" not in quiet.stderr and "%|" not in quiet.stderr, quiet.stderr
    loud = subprocess.run([*args, "--set", f"out={tmp_path / 'l'}", "--out",
                           str(tmp_path / "l")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert loud.returncode == 0, loud.stderr
    assert "step 1/1 RL reward=" in loud.stderr and re.search(
        r"evaluation: \d+ prompts x 2: \d+/\d+ \(100%\), elapsed", loud.stderr), loud.stderr
    assert "\r" not in loud.stderr and "…" not in loud.stderr and "it/s" not in loud.stderr, \
        loud.stderr
    assert "step 1/1" not in quiet.stderr


def test_eval_config_of_a_run_and_of_a_model(tmp_path):
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    cfg = apply_overrides(TrainConfig(), [
        f"out={run}", "task.name=arithmetic", "task.options={digits: 1}", "eval.n=5",
        "eval.num_prompts=7", "task.reward=exact", "model.lora.r=4", "seed=3"])
    write_run_config(run, cfg)
    got, adapter, base_seed = eval_config(None, None, None, [], 0, run)
    assert adapter is None and base_seed == 3 and got.seed == 0
    assert got.model.path == str(run / "final") and got.model.lora.r == 0
    want = config_to_dict(cfg)
    for key in ("task", "eval"):
        assert config_to_dict(got)[key] == want[key]
    got, _, _ = eval_config(None, None, None, ["eval.n=9"], 0, run)
    assert got.eval.n == 9
    got, _, _ = eval_config(None, None, 9, ["eval.n=9"], 0, run)
    assert got.eval.n == 9
    with pytest.raises(ValueError, match="-n 2 and --set eval.n=9 disagree"):
        eval_config(None, None, 2, ["eval.n=9"], 0, run)
    with pytest.raises(ValueError, match="--run reuses the run's task; drop --task strings"):
        eval_config(None, "strings", None, [], 0, run)
    with pytest.raises(ValueError, match="give --model DIR"):
        eval_config(None, None, None, [], 0, None)
    with pytest.raises(ValueError, match="is not a run directory"):
        eval_config(None, None, None, [], 0, tmp_path)
    plain, adapter, _ = eval_config(tmp_path, None, None, [], 1, None)
    assert plain.task.name == "strings" and plain.eval.n == 8 and plain.seed == 1


def _tiny_sets() -> list[str]:
    from tests.conftest import TINY

    return [x for s in TINY for x in ("--set", s)]


@pytest.mark.parametrize("flags, line", [
    (["--max-steps", "2", "--set", "max_steps=1"],
     "--max-steps 2 and --set max_steps=1 disagree; give one of them"),
    (["--estimator", "grpo", "--set", "estimator=rloo"],
     "--estimator 'grpo' and --set estimator='rloo' disagree; give one of them"),
])
def test_a_flag_and_a_set_that_disagree_are_refused(tmp_path, flags, line):
    """``--max-steps 20 --set max_steps=12``: one line, nothing written (as ``--out A --set
    out=B`` is); the same value twice is no conflict."""
    from tests.conftest import invoke, one_line_error

    out = tmp_path / "run"
    res = invoke("train", "--out", out, "--quiet", *_tiny_sets(), *flags)
    assert one_line_error(res) == f"error: {line}"
    assert not out.exists()


def test_flag_conflicts_compare_values_not_spellings(stopped_run):
    from bestk.train.commands import check_flag_conflicts
    from tests.conftest import invoke, one_line_error

    check_flag_conflicts([("--max-steps", "max_steps", 12)], ["max_steps=12", "seed=1"])
    check_flag_conflicts([("--max-steps", "max_steps", None)], ["max_steps=12"])
    check_flag_conflicts([("--out", "out", "runs/x")], ["out=runs/x/"])  # one directory
    with pytest.raises(ValueError, match="--set max_steps=12 and --set max_steps=13 both set "
                       "'max_steps'; give it once"):  # a key twice is refused first
        check_flag_conflicts([("--max-steps", "max_steps", 12)], ["max_steps=12",
                                                                  "max_steps=13"])
    with pytest.raises(ValueError, match="-n 4 and --set eval.n=8 disagree"):
        check_flag_conflicts([("-n", "eval.n", 4)], ["eval={n: 8}"])  # a section's mapping
    check_flag_conflicts([("-n", "eval.n", 4)], ["eval={n: 4, temperature: 0.5}"])
    before = (stopped_run / "config.yaml").read_bytes()
    res = invoke("train", "--resume", stopped_run, "--quiet", "--max-steps", "3", "--set",
                 "max_steps=4")
    assert one_line_error(res) == "error: --max-steps 3 and --set max_steps=4 disagree; give " \
        "one of them"
    assert (stopped_run / "config.yaml").read_bytes() == before


def test_eval_takes_threads(stopped_run):
    """``bestk eval --set threads=N`` runs torch on N threads (it was refused as training-only);
    more threads than the machine has CPUs is one line."""
    import torch

    from bestk.train.commands import check_eval_overrides
    from tests.conftest import invoke, one_line_error

    check_eval_overrides(["threads=1"])
    torch.set_num_threads(2)
    res = invoke("eval", "--run", stopped_run, "-n", "1", "--set", "eval.num_prompts=1",
                 "--set", "threads=1")
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 1
    line = one_line_error(invoke("eval", "--run", stopped_run, "--set",
                                 f"threads={(os.cpu_count() or 1) + 1}"))
    assert "config key 'threads'" in line and "more than this machine's" in line


@pytest.mark.parametrize("target", ["config.yaml", "metrics.jsonl", "checkpoints/x.json",
                                    "final/config.json", ".lock"])
def test_eval_refuses_to_write_over_a_file_of_the_run_it_reads(stopped_run, target):
    """``bestk eval --run r0 --json r0/config.yaml`` overwrote the run's config (then the run
    could neither resume nor be evaluated): every file and folder of the run is refused, in
    one line, before the model loads; a new file beside them is fine."""
    from tests.conftest import invoke, one_line_error

    before = {p: p.read_bytes() for p in stopped_run.rglob("*") if p.is_file()}
    for flag in ("--json", "--bank"):
        line = one_line_error(invoke("eval", "--run", stopped_run, flag, stopped_run / target))
        assert f"{flag} {str(stopped_run / target)!r} is a file of the run " \
            f"{str(stopped_run)!r}" in line, line
    assert {p: p.read_bytes() for p in stopped_run.rglob("*") if p.is_file()} == before
    line = one_line_error(invoke("eval", "--run", stopped_run, "--json", stopped_run / "e.json",
                                 "--bank", stopped_run / "e.json"))
    assert "is the --json file" in line


@pytest.mark.parametrize("where", ["sft", "rl_step"])
def test_an_abort_says_whether_a_checkpoint_is_there(tmp_path, monkeypatch, where):
    """A second Ctrl-C (``KeyboardInterrupt``) before the run's first checkpoint does not claim
    that "the last checkpoint is intact": there is none, and the same command starts over;
    after it, the message names the checkpoint to continue from."""
    from tests.conftest import invoke

    def abort(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, where, abort)
    out = tmp_path / "run"
    res = invoke("train", "--out", out, "--quiet", "--max-steps", "2", *_tiny_sets())
    assert res.exit_code == 130, res.output
    if where == "sft":
        assert "intact" not in res.output and "checkpoint" in res.output
        assert "interrupted before the run's first checkpoint: nothing to continue from; the " \
            "same command starts the run over" in res.output
    else:
        assert f"the last checkpoint in {out}, step_0000000.safetensors, is intact" in res.output


def test_eval_n_1_prints_pass_at_1_once(tmp_path):
    from tests.conftest import TINY, invoke, set_args

    sets = set_args(*TINY, "eval.n=1")
    res = invoke("train", "--out", tmp_path / "run", "--quiet", "--max-steps", "1", *sets)
    assert res.exit_code == 0, res.output
    done = [ln for ln in res.output.splitlines() if ln.startswith("done:")]
    assert len(done) == 1 and done[0].count("pass@1=") == 1, done


def _registered_estimators() -> list[str]:
    """Every estimator of the registry but the calibrated one (its runs need a reference bank:
    ``tests/train/reference/test_plan.py``)."""
    import bestk

    return sorted(n for n in bestk.ESTIMATORS if not bestk.estimator_info(n).calibrated)


@pytest.mark.parametrize("estimator", _registered_estimators())
def test_bestk_train_takes_every_registered_estimator(tmp_path, estimator):
    """``bestk train --estimator X`` trains the tiny default two steps with every registered
    estimator, with its required options from the registry's ``default_options`` fitted to the
    group size (``rollout.n=4``), and the reward domain it declares."""
    import json

    import bestk
    from tests.conftest import TINY

    info = bestk.estimator_info(estimator)
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--quiet", "--max-steps", "2", "--estimator", estimator]
    for s in TINY:
        args += ["--set", s]
    for key, value in info.fit_group(info.default_options, 4 - 1).items():
        args += ["--set", f"estimator_options.{key}={value}"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["phase"] == "train"]
    assert [row["step"] for row in train] == [1, 2]
    assert all(isinstance(row["adv_abs_mean"], float) for row in train)
    config = (out / "config.yaml").read_text()
    assert f"estimator: {estimator}" in config


def test_eval_run_refuses_a_final_model_of_another_step_and_a_comparisons_run(tmp_path):
    """``bestk eval --run R`` of a finished run extended to more steps (running, or stopped)
    evaluated the old final/ model as the run's, rc 0; a comparison's run (no final/ kept)
    was asked "is it finished?". Both one line now; ``--model R/final`` evaluates the old
    model on purpose."""
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    write_run_config(run, apply_overrides(TrainConfig(), [f"out={run}", "max_steps=40"]))
    (run / ".finished").write_text("4\n")
    with pytest.raises(ValueError, match=r"run '.*run' is not finished: its final/ model is of "
                                         r"step 4, but its config.yaml trains to max_steps=40"):
        eval_config(None, None, None, [], 0, run)
    got, _, _ = eval_config(run / "final", None, None, [], 0, run)
    assert got.model.path == str(run / "final")
    (run / ".finished").write_text("40\n")
    assert eval_config(None, None, None, [], 0, run)[0].model.path == str(run / "final")
    (run / "final").rmdir()
    (run / "result.json").write_text("{}")
    (run / "run.key").write_text("k")
    with pytest.raises(ValueError, match="is a run of a bestk comparison, which keeps only its "
                                         "result.json"):
        eval_config(None, None, None, [], 0, run)


def test_eval_names_an_unknown_key_as_one_not_as_training_only():
    """``bestk eval --set nonsense=1`` called the key "training-only"."""
    from bestk.train.commands import check_eval_overrides

    with pytest.raises(ValueError, match="unknown config key 'nonsense'; valid keys"):
        check_eval_overrides(["eval.n=2", "nonsense=1"])
    with pytest.raises(ValueError, match=r"does not use --set optim.lr \(training-only\)"):
        check_eval_overrides(["optim.lr=abc"])
