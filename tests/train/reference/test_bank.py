"""``kappo.bank``: a run that takes its reference bank from another directory instead of
sampling it is the run that samples it (same calibration, same steps, same weights), for
@k-A*PO and @k-DPO (whose pairs are the bank's completions); a bank of other prompts or sizes,
or a bank for a run that samples none, is refused before any work; resume is unchanged."""

from __future__ import annotations

import shutil

import pytest

from bestk.kappo import Calibration
from bestk.train.trainer import Trainer
from bestk.train.validation import validate
from tests.conftest import Crash, assert_same_run, kappo_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _run(out, *extra):
    tr = Trainer(kappo_config(out, "max_steps=2", *extra))
    tr.run(progress=False)
    return tr


@pytest.mark.parametrize("algorithm", ["apo", "dpo"])
def test_a_given_bank_reproduces_the_sampled_one(tmp_path, algorithm):
    own = _run(tmp_path / "own", f"algorithm={algorithm}", "kappo.k=2")
    # the bank directory may be any run of the same reference: here a k = 1 run's
    bank_dir = tmp_path / "bank"
    shutil.copytree(own.out, bank_dir, ignore=shutil.ignore_patterns("checkpoints", "final"))
    given = _run(tmp_path / "given", f"algorithm={algorithm}", "kappo.k=2",
                 f"kappo.bank={bank_dir}")
    assert_same_run(own, given)
    assert (own.out / "calibration.json").read_text() == \
        (given.out / "calibration.json").read_text()
    a = Calibration.load(own.out / "calibration.json")
    assert a.k == 2
    assert (own.out / "bank.jsonl").read_text() == (given.out / "bank.jsonl").read_text()
    assert any("from " + str(bank_dir) in n for n in given.notes)
    # another k calibrates the same bank with its own k
    other = _run(tmp_path / "k1", f"algorithm={algorithm}", "kappo.k=1",
                 f"kappo.bank={bank_dir}")
    c = Calibration.load(other.out / "calibration.json")
    assert c.k == 1 and c.checksum == a.checksum  # the same bank


def test_a_run_with_a_given_bank_resumes_from_its_own_copy(tmp_path):
    own = _run(tmp_path / "own", "algorithm=dpo")
    bank_dir = tmp_path / "bank"
    shutil.copytree(own.out, bank_dir, ignore=shutil.ignore_patterns("checkpoints", "final"))
    extra = ("algorithm=dpo", "max_steps=4", "checkpoint_every=2", f"kappo.bank={bank_dir}")
    ref = Trainer(kappo_config(tmp_path / "u", *extra))
    ref.run(progress=False)

    def crash(step, metrics):
        if step == 3:
            raise Crash

    with pytest.raises(Crash):
        Trainer(kappo_config(tmp_path / "r", *extra), on_step=crash).run(progress=False)
    shutil.rmtree(bank_dir)  # a shared bank may be gone by then: the run has its own copy
    resumed = Trainer.resume(tmp_path / "r")
    resumed.run(progress=False)
    assert_same_run(ref, resumed)


def test_a_bank_of_other_prompts_or_for_no_bank_is_refused(tmp_path):
    own = _run(tmp_path / "own", "algorithm=apo")
    with pytest.raises(ValueError, match="not the run's bank"):
        Trainer(kappo_config(tmp_path / "x", "algorithm=apo", "kappo.bank_prompts=8",
                             f"kappo.bank={own.out}"))
    assert not (tmp_path / "x").exists()  # refused before any work
    with pytest.raises(ValueError, match="not the run's bank"):
        Trainer(kappo_config(tmp_path / "y", "algorithm=apo", "kappo.bank_size=4",
                             f"kappo.bank={own.out}"))
    with pytest.raises(ValueError, match="bank.jsonl is missing"):
        Trainer(kappo_config(tmp_path / "z", "algorithm=apo", f"kappo.bank={tmp_path}"))
    # @k-DPO needs the completions, which an apo run's directory does not keep
    with pytest.raises(ValueError, match="bank_tokens.safetensors is missing"):
        Trainer(kappo_config(tmp_path / "w", "algorithm=dpo", f"kappo.bank={own.out}"))
    with pytest.raises(ValueError, match="samples no reference bank"):
        validate(kappo_config(tmp_path / "v", "estimator=grpo", f"kappo.bank={own.out}"))
    with pytest.raises(ValueError, match="samples no reference bank"):
        validate(kappo_config(tmp_path / "u", "algorithm=apo",
                              f"kappo.calibration={own.out / 'calibration.json'}",
                              f"kappo.bank={own.out}"))
