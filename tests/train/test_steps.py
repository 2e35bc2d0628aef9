"""The trainer's public steps (``bestk.train.steps``), which ``bestk compare`` runs outside a
Trainer: ``check_run`` (a ``RunSetup``, nothing written), ``save_weights`` (atomic),
``sampled_calibration``, ``samples_bank`` / ``reference_bank`` / ``bank_complete``,
``resumable``, ``run_summary`` (``Trainer.summary``) and ``StopRequest.request``."""

from __future__ import annotations

import signal

import pytest
import torch

from bestk.kappo import calibrate
from bestk.train.steps import (
    RunSetup,
    Stopped,
    StopRequest,
    bank_complete,
    check_run,
    load_weights,
    reference_bank,
    resumable,
    run_summary,
    sampled_calibration,
    samples_bank,
    save_weights,
)
from bestk.train.trainer import Trainer
from bestk.train.validation import resolve_config
from tests.conftest import kappo_config, tiny_config


def test_check_run_returns_the_run_setup_and_writes_nothing(tmp_path):
    setup = check_run(tiny_config(tmp_path / "r", "max_steps=3"))
    assert isinstance(setup, RunSetup) and not isinstance(setup, Trainer)
    assert setup.cfg.max_steps == 3 and setup.cfg.rollout.n == 4  # resolved
    assert setup.out == tmp_path / "r"
    assert setup.task.name.startswith("strings") and len(setup.task.train) == 64
    assert setup.rl_prompts == list(setup.task.train) and len(setup.eval_examples) == 4
    assert setup.plan is None and setup.kappo_kind is None and setup.bank_samples == 0
    assert setup.sampling_seed == setup.cfg.seed
    # a task given (bestk compare loads each seed's once) is used as it is
    assert check_run(tiny_config(tmp_path / "s"), task=setup.task).task is setup.task
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra, match", [
    (("rollout.prompts_per_step=100",), "exceeds the 64 training prompts"),
    (("estimator=maxrl", "advantage_reward=raw"), "needs 0/1 rewards"),
    (("estimator=kappo_grpo", "estimator_options={calibration: nowhere.json}"),
     "cannot load calibration"),
])
def test_check_run_refuses_a_bad_run_before_its_directory_exists(tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        check_run(tiny_config(tmp_path / "r", *extra))
    assert not (tmp_path / "r").exists()


def test_a_given_calibration_restricts_the_rl_prompts(tmp_path):
    """``pg`` with a ``kappo_grpo`` calibration file (the spec's ``given_calibration``): RL
    draws only the calibration's prompts, as a Trainer does; none in common is refused."""
    train = check_run(tiny_config(tmp_path / "r")).task.train
    ids = [int(e["id"]) for e in train[:6]]
    calibrate({i: [0.0, 1.0, 1.0, 0.0] for i in ids}, k=2, beta=0.1,
              kind="binary").save(tmp_path / "cal.json")
    opts = (f"estimator_options={{calibration: {tmp_path / 'cal.json'}}}",
            "estimator=kappo_grpo", "advantage_reward=success")
    setup = check_run(tiny_config(tmp_path / "r", *opts))
    assert [int(e["id"]) for e in setup.rl_prompts] == ids
    tr = Trainer(tiny_config(tmp_path / "t", *opts))
    try:
        assert tr.rl_prompts == setup.rl_prompts
        assert getattr(tr.estimator_options["calibration"], "kind", None) == "binary"
    finally:
        tr.close()
    calibrate({10**6: [0.0, 1.0]}, k=2, beta=0.1, kind="binary").save(tmp_path / "other.json")
    with pytest.raises(ValueError, match="shares no prompt id"):
        check_run(tiny_config(tmp_path / "u", "estimator=kappo_grpo", "advantage_reward=success",
                              f"estimator_options={{calibration: {tmp_path / 'other.json'}}}"))


def test_save_weights_is_atomic(tmp_path):
    path = tmp_path / "w.pt"
    weights = {"a": torch.arange(4.0), "b": torch.ones(2, 2)}
    save_weights(weights, path)
    back = load_weights(path)
    assert back.keys() == weights.keys() and all(torch.equal(back[k], weights[k]) for k in back)
    before = path.read_bytes()
    with pytest.raises(Exception):  # noqa: B017 - whatever torch.save raises for a lambda
        save_weights({"a": lambda: None}, path)  # type: ignore[dict-item]
    assert path.read_bytes() == before  # the old file is left whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt"]  # no temporary left


def test_bank_complete_and_samples_bank(tmp_path):
    assert not bank_complete(tmp_path, False)
    (tmp_path / "calibration.json").write_text("{}")
    assert bank_complete(tmp_path, False) and not bank_complete(tmp_path, True)
    (tmp_path / "bank_tokens.safetensors").write_bytes(b"")
    assert bank_complete(tmp_path, True)
    resolved = {a: resolve_config(kappo_config(tmp_path / a, f"algorithm={a}"))
                for a in ("pg", "apo", "dpo")}
    assert samples_bank(resolved["pg"]) == (False, False)  # grpo: no calibration
    assert samples_bank(resolved["apo"]) == (True, False)
    assert samples_bank(resolved["dpo"]) == (True, True)


def test_reference_bank_is_the_runs_own(tmp_path):
    """The bank an apo run would sample in-run, into a directory a run reads through
    ``kappo.bank``; a config that samples none is refused."""
    cfg = resolve_config(kappo_config(tmp_path / "r", "algorithm=apo", "sft.steps=0"))
    out = reference_bank(cfg, tmp_path / "bank")
    assert out == tmp_path / "bank" and bank_complete(out, False)
    assert sorted(p.name for p in out.iterdir()) == ["bank.jsonl", "calibration.json"]
    assert not (tmp_path / "bank.work").exists()
    own = Trainer(kappo_config(tmp_path / "own", "algorithm=apo", "sft.steps=0", "max_steps=1"))
    own.run(progress=False)
    assert (out / "bank.jsonl").read_bytes() == (own.out / "bank.jsonl").read_bytes()
    assert (out / "calibration.json").read_bytes() == \
        (own.out / "calibration.json").read_bytes()
    with pytest.raises(ValueError, match="samples no reference bank"):
        reference_bank(resolve_config(kappo_config(tmp_path / "g")), tmp_path / "none")


def test_sampled_calibration_covers_every_training_prompt_and_stops(tmp_path):
    cfg = resolve_config(kappo_config(tmp_path / "r", "sft.steps=0"))
    cal = sampled_calibration(cfg, k=2, beta=0.1, kind="binary", samples=2)
    assert cal.num_prompts == 64 and cal.k == 2 and cal.kind == "binary"
    with pytest.raises(Stopped):
        sampled_calibration(cfg, k=2, beta=0.1, kind="binary", samples=2,
                            should_stop=lambda: True)


def test_resumable_and_the_run_summary(tmp_path):
    out = tmp_path / "r"
    assert not resumable(out)
    tr = Trainer(tiny_config(out, "max_steps=2"))
    tr.run(progress=False)
    assert resumable(out)
    s = tr.summary()
    assert list(s) == ["estimator", "options", "reward", "task", "train_prompt_ids",
                       "eval_prompt_ids", "algorithm", "rollouts", "bank", "bank_shared", "lr",
                       "seed", "sampling_seed", "evaluations", "train"]
    assert s["estimator"] == tr.cfg.estimator == "argmaxrl" and s["options"] == {}
    assert s["reward"] == "graded"  # argmaxrl on the graded strings task
    assert s["algorithm"] == "pg" and s["rollouts"] == 2 * 2 * 4 and s["bank"] == 0
    assert s["train_prompt_ids"] == sorted(int(e["id"]) for e in tr.task.train)
    assert [r["step"] for r in s["evaluations"]] == [0, 2]
    assert [r["step"] for r in s["train"]] == [1, 2]
    # the same from a RunSetup of the run's config (no Trainer needed)
    assert run_summary(check_run(tiny_config(out, "max_steps=2")), {}, False) == s


def test_stop_request_asks_once():
    stop = StopRequest()
    stop.request(signal.SIGTERM)
    assert stop.should_stop() and stop.exit_status == 128 + signal.SIGTERM
    stop.request(signal.SIGINT)  # a stop already requested is kept
    assert stop.signum == signal.SIGTERM
    other = StopRequest()
    other.request()
    assert other.requested and other.exit_status == 130


def test_check_run_is_no_half_built_trainer():
    """No ``__new__`` in train/ or compare/: ``check_run`` builds a RunSetup, which a Trainer
    starts as."""
    from pathlib import Path

    import bestk.train as train_package

    src = Path(train_package.__file__).parents[1]
    hits = [p for d in ("train", "compare") for p in (src / d).rglob("*.py")
            if "__new__" in p.read_text()]
    assert hits == []
    assert issubclass(Trainer, RunSetup)
