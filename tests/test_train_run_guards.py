"""bestk.train.run.guards: a non-finite loss or gradient norm stops the run at that step, before
the optimizer step, naming the step, its reward range and the fix; the log stays
strict JSON."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from bestk.cli import app
from bestk.train.run.directory import read_metrics
from bestk.train.run.guards import NonFiniteUpdate, check_sft_update, check_update
from bestk.train.run.log import append_record
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
