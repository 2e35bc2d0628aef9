"""bestk.train.guards: a non-finite loss or gradient norm stops the run at that step, before
the optimizer step, naming the step, its reward range and the fix; the log stays
strict JSON. And the guard of user code in a run (:mod:`bestk.tasks.guard`): a reward that
calls ``sys.exit(0)`` is a one-line error (not a silent status 0), one that changes the working
directory has it changed back, and one that hangs cannot hold a run past its SIGTERM."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bestk.cli import app
from bestk.train.guards import NonFiniteUpdate, check_sft_update, check_update
from bestk.train.run.directory import read_metrics
from bestk.train.run.log import append_record
from bestk.train.runtime.files import latest_checkpoint
from bestk.train.trainer import Trainer
from tests.conftest import TINY, tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _strict(line: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"non-strict JSON constant {constant} in {line!r}")

    return json.loads(line, parse_constant=refuse)


@pytest.fixture
def huge_reward(tmp_path):
    """A reward file scoring completions -R, 0 or +R by their length (R set per test)."""
    def make(scale: str) -> str:
        path = tmp_path / "huge.py"
        path.write_text(f"def huge(prompt, completion, **_):\n"
                        f"    return {scale} * (len(completion) % 3 - 1)\n")
        return f"{path}:huge"
    return make


@pytest.mark.parametrize("estimator, scale, bad", [
    ("argmaxrl", "1e20", "the gradient norm is inf"),
    ("reinforce", "1e20", "the gradient norm is inf"),
    ("argmaxrl", "1e300", "the loss is nan"),
])
def test_huge_rewards_stop_the_run_at_the_step_naming_the_cause(
        tmp_path, huge_reward, estimator, scale, bad):
    out = tmp_path / "run"
    tr = Trainer(tiny_config(out, "max_steps=3", f"estimator={estimator}",
                             f"task.reward={huge_reward(scale)}"))
    with pytest.raises(NonFiniteUpdate) as e:
        tr.run(progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"RL step 1: {bad}")
    assert f"with rewards in [-{float(scale):.6g}, {float(scale):.6g}]" in msg
    assert "rescale the task's rewards" in msg and "grpo" in msg
    # no weight update: the policy is still the step-0 checkpoint's
    from safetensors.torch import load_file

    ck = load_file(out / "checkpoints" / "step_0000000.safetensors")
    for name, p in tr.model.state_dict().items():
        key = next(k for k in ck if k.endswith(name))
        torch.testing.assert_close(p, ck[key], rtol=0, atol=0)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [_strict(ln)["phase"] for ln in lines] == ["sft", "eval"]  # the bad step unlogged


def test_the_cli_says_it_in_one_line(tmp_path, huge_reward):
    args = ["train", "--out", str(tmp_path / "run"), "--quiet", "--max-steps", "3"]
    for s in [*TINY, f"task.reward={huge_reward('1e20')}"]:
        args += ["--set", s]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in r.output
    assert errors[0].startswith("error: RL step 1: the gradient norm is inf with rewards in")


def test_a_diverging_sft_stops_naming_the_sft_step(tmp_path):
    tr = Trainer(tiny_config(tmp_path / "run", "max_steps=1", "sft.lr=1e30", "sft.steps=5"))
    with pytest.raises(NonFiniteUpdate, match=r"^SFT step \d of 5: the loss is nan.*sft\.lr"):
        tr.run(progress=False)


def test_check_update_passes_finite_values_and_names_nan_and_inf():
    check_update(3, torch.tensor(1.5), torch.tensor(2.0), [0.0, 1.0])
    check_sft_update(1, 10, torch.tensor(0.5), None)
    with pytest.raises(NonFiniteUpdate, match=r"^RL step 7: the loss is inf and the gradient "
                       r"norm is nan with rewards in \[-2, 5\];"):
        check_update(7, torch.tensor(math.inf), torch.tensor(math.nan), [5.0, -2.0])
    with pytest.raises(NonFiniteUpdate, match=r"^RL step 2: the gradient norm is inf; stopped"):
        check_update(2, 0.1, math.inf)  # no rewards known: no range named


def test_the_metrics_log_is_strict_json(tmp_path):
    log = tmp_path / "metrics.jsonl"
    append_record(log, {"phase": "train", "step": 1, "loss": math.nan, "grad_norm": math.inf,
                        "lr": 1e-3})
    line = log.read_text().splitlines()[0]
    assert _strict(line) == {"phase": "train", "step": 1, "loss": None, "grad_norm": None,
                             "lr": 1e-3}
    assert read_metrics(log)[0]["loss"] is None


def _sets(*items: str) -> list[str]:
    """``--set`` of :data:`TINY` and ``items`` (an item replaces TINY's value of its key)."""
    keys = {i.partition("=")[0] for i in items}
    kept = [s for s in TINY if s.partition("=")[0] not in keys]
    return [x for s in [*kept, *items] for x in ("--set", s)]


def test_a_reward_that_exits_mid_run_is_a_one_line_error(tmp_path):
    """``sys.exit(0)`` in a reward function, once the run is under way, used to end ``bestk
    train`` with status 0, no message and no finished run; now it is one ``error:`` line
    naming the function and ``SystemExit(0)``, status 2."""
    out = tmp_path / "run"
    reward = tmp_path / "leaving.py"
    reward.write_text(f"import os, sys\n\n\ndef bye(prompt, completion, **_):\n"
                      f"    if os.path.exists({str(out / 'metrics.jsonl')!r}):\n"
                      f"        sys.exit(0)\n    return 0.0\n")
    r = CliRunner().invoke(app, ["train", "--out", str(out), "--quiet", "--max-steps", "2",
                                 *_sets(f"task.reward={reward}:bye")])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert errors[0].startswith("error: reward function 'bye' of task 'strings/reverse' raised "
                                "SystemExit(0) for prompt ")
    assert not (out / ".finished").exists()


def test_a_reward_that_changes_the_working_directory_has_it_changed_back(
        tmp_path, monkeypatch, capsys):
    """Every call of a reward that calls ``os.chdir`` starts in the directory the run started
    in, the run's files stay in the relative ``--out`` there, and one warning names it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    seen = tmp_path / "seen.txt"
    reward = tmp_path / "wandering.py"
    reward.write_text(f"import os\n\n\ndef wander(prompt, completion, **_):\n"
                      f"    with open({str(seen)!r}, 'a') as f:\n"
                      f"        f.write(os.getcwd() + '\\n')\n"
                      f"    os.chdir({str(tmp_path / 'elsewhere')!r})\n"
                      f"    return float(len(completion) % 2)\n")
    Trainer(tiny_config(Path("run"), "max_steps=2", f"task.reward={reward}:wander")).run(
        progress=False)
    assert set(seen.read_text().splitlines()) == {str(tmp_path)}
    assert os.getcwd() == str(tmp_path)
    assert not list((tmp_path / "elsewhere").iterdir())
    for name in ("config.yaml", "metrics.jsonl", "report.md", "final", ".finished"):
        assert (tmp_path / "run" / name).exists(), name
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "working directory" in ln]
    assert warnings == [f"warning: reward function 'wander' of task 'strings/reverse' changed "
                        f"the working directory to '{tmp_path / 'elsewhere'}'; bestk changed it "
                        f"back to '{tmp_path}' (and does after every call)"]


HANGING = """
import os
import time


def hang(prompt, completion, **_):
    if os.path.exists({flag!r}):
        open({mark!r}, "w").close()
        while True:
            time.sleep(1)
    return float(len(completion) % 2)
"""


def _wait_for(what, proc: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None and not what():
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]


def test_sigterm_stops_a_run_whose_reward_hangs_and_the_run_resumes(tmp_path):
    """SIGTERM while a reward function hangs used to be acknowledged and never honoured (the
    step never ends); now it stops the run at once -- status 143, the note and one line naming
    the intact checkpoint -- and the run continues from that checkpoint."""
    out, flag, mark = tmp_path / "run", tmp_path / "hang", tmp_path / "hanging"
    reward = tmp_path / "hanging.py"
    reward.write_text(HANGING.format(flag=str(flag), mark=str(mark)))
    args = [sys.executable, "-m", "bestk", "train", "--out", str(out), "--quiet",
            "--max-steps", "400", *_sets("checkpoint_every=1", "eval.every=1000",
                                         f"task.reward={reward}:hang")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def trained() -> bool:
            last = latest_checkpoint(out / "checkpoints")
            return last is not None and last.name != "step_0000000.safetensors"

        _wait_for(trained, proc)
        flag.touch()  # the next reward call hangs
        _wait_for(mark.exists, proc)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        took = time.time() - sent
    finally:
        proc.kill()
        proc.wait()
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert rc == 143 and took < 30, (took, err)
    assert "note: SIGTERM while reward function 'hang' of task 'strings/reverse' was running: " \
        "stopping at once" in err
    last = latest_checkpoint(out / "checkpoints")
    assert last is not None, (err, sorted(p.name for p in (out / "checkpoints").iterdir()))
    assert f"interrupted; the last checkpoint in {out}, {last.name}, is intact" in err
    assert "Traceback" not in err and "error:" not in err, err
    flag.unlink()
    step = int(last.stem.split("_")[1])
    tr = Trainer.resume(out, overrides={"max_steps": step + 1})
    tr.run(progress=False)
    assert tr.step == step + 1 and not tr.interrupted
