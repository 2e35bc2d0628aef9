"""In-run KAPPO calibration (``bestk.train.reference.bank``) and the ``kappo`` config section: the
bank's prompts, kinds, files and their round trip, ``kappo.calibration`` files (used as given,
or a one-line error naming the mismatch before any work), ``pg`` + ``kappo_grpo`` in-run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bestk.kappo import Calibration, calibrate
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.reference.bank import (
    ReferenceBank,
    bank_examples,
    load_reference,
    resolve_kind,
    save_reference,
)
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer
from bestk.train.validation import resolve_defaults
from tests.conftest import KAPPO_TINY, invoke, kappo_config, one_line_error, set_args

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_bank_examples_are_a_seeded_subset_in_order():
    exs = [{"id": i} for i in range(100)]
    a = bank_examples(exs, 10, seed=5)
    assert len(a) == 10 and a == bank_examples(exs, 10, seed=5)
    ids = [e["id"] for e in a]
    assert ids == sorted(ids) and len(set(ids)) == 10
    assert ids != [e["id"] for e in bank_examples(exs, 10, seed=6)]
    assert bank_examples(exs, None, seed=5) == exs and bank_examples(exs, 500, seed=5) == exs


@pytest.mark.parametrize("kind, binary_only, graded, expected", [
    ("auto", False, True, "winrate"), ("auto", False, False, "binary"),
    ("auto", True, True, "binary"), ("binary", False, True, "binary"),
    ("winrate", False, False, "winrate"),
])
def test_resolve_kind(kind, binary_only, graded, expected):
    assert resolve_kind(kind, binary_only=binary_only, graded=graded) == expected


def test_rollout_n_and_out_follow_the_algorithm_until_set():
    """``None`` = the algorithm's default, resolved once when the run starts
    (:func:`resolve_defaults`, from the algorithm's spec); a value set is kept."""
    def resolved(cfg):
        r = resolve_defaults(cfg)
        return r.rollout.n, r.out

    for algorithm, n, out in (("pg", 8, "runs/bestk"), ("apo", 1, "runs/bestk-apo"),
                              ("dpo", 1, "runs/bestk-dpo")):
        assert resolved(TrainConfig(algorithm=algorithm)) == (n, out)
        assert resolved(apply_overrides(TrainConfig(), [f"algorithm={algorithm}"])) == (n, out)
    cfg = apply_overrides(TrainConfig(), ["rollout.n=8", "out=x", "algorithm=apo"])
    assert resolved(cfg) == (8, "x")  # explicit values stay
    cfg = apply_overrides(TrainConfig(), ["rollout={top_p: 0.9}", "algorithm=apo"])
    assert resolved(cfg)[0] == 1  # a section mapping without n leaves n to the algorithm
    cfg = apply_overrides(TrainConfig(), ["rollout={n: 8}", "algorithm=apo", "algorithm=pg"])
    assert resolved(cfg)[0] == 8
    cfg = apply_overrides(TrainConfig(), ["rollout.n=3", "rollout.n=null", "algorithm=apo"])
    assert resolved(cfg)[0] == 1  # null: the algorithm's default again
    cfg = TrainConfig()
    cfg.algorithm = "apo"  # assigned as an attribute: the same
    assert cfg.rollout.n is None and resolved(cfg)[0] == 1
    cfg.rollout.n = 4
    assert resolved(cfg)[0] == 4
    from bestk.train.config.io import config_from_dict, config_to_dict

    stored = config_to_dict(resolve_defaults(TrainConfig(algorithm="apo")))  # config.yaml
    assert stored["rollout"]["n"] == 1 and stored["out"] == "runs/bestk-apo"
    assert config_to_dict(config_from_dict(stored)) == stored


def test_save_and_load_the_reference_files(tmp_path):
    bank = ReferenceBank(
        prompt_ids=np.array([3, 7]), rewards=np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
        texts=[["a", "b", "c"], ["d", "e", "f"]],
        completion_ids=torch.arange(12).reshape(6, 2), completion_mask=torch.ones(6, 2),
        ref_logps=torch.linspace(-3, -1, 6, dtype=torch.float64),
    )
    cal = calibrate({3: [1, 0, 0], 7: [0, 0, 1]}, k=2, beta=0.1)
    save_reference(tmp_path, cal, bank)
    got_cal, got = load_reference(tmp_path, completions=True)
    assert got_cal.checksum == cal.checksum and got.texts == bank.texts
    np.testing.assert_array_equal(got.rewards, bank.rewards)
    torch.testing.assert_close(got.ref_logps, bank.ref_logps, rtol=0, atol=0)
    rows = [json.loads(x) for x in (tmp_path / "bank.jsonl").read_text().splitlines()]
    assert rows[1] == {"prompt_id": 7, "rewards": [0.0, 0.0, 1.0], "texts": ["d", "e", "f"]}
    edited = (tmp_path / "bank.jsonl").read_text().replace("[0.0, 0.0, 1.0]", "[1.0, 0.0, 1.0]")
    (tmp_path / "bank.jsonl").write_text(edited)
    with pytest.raises(ValueError, match="bank_tokens.safetensors does not belong to"):
        load_reference(tmp_path, completions=True)
    (tmp_path / "calibration.json").unlink()
    with pytest.raises(ValueError, match="calibration.json is missing"):
        load_reference(tmp_path, completions=False)


@pytest.fixture
def cal_file(tmp_path) -> Path:
    """A binary calibration (k = 2, beta = 0.1) of the training prompts 0..11 of KAPPO_TINY's
    task, half of each bank a success."""
    path = tmp_path / "cal.json"
    calibrate({i: [1, 0, 1, 0] for i in range(12)}, k=2, beta=0.1).save(path)
    return path


def _cli(out: Path, *extra: str):
    args = ["train", "--out", str(out), "--quiet", "--max-steps", "1"]
    args += set_args(*KAPPO_TINY, *extra)
    return invoke(*args)


@pytest.mark.parametrize("extra, match", [
    (["kappo.k=4"], "was made for k=2, beta=0.1, but the run has kappo.k=4, kappo.beta=0.1"),
    (["kappo.k=2", "kappo.beta=0.2"], "but the run has kappo.k=2, kappo.beta=0.2"),
    (["kappo.k=2", "kappo.kind=winrate"], "is a binary calibration, but kappo.kind is 'winrate'"),
    (["kappo.k=2", "task.options={num_train: 8, num_eval: 4, max_len: 3, graded: false}"],
     "4 of its 12 prompt ids are not training prompts of the task \\(first: 8\\)"),
])
def test_a_mismatched_calibration_file_is_a_one_line_error(tmp_path, cal_file, extra, match):
    out = tmp_path / "run"
    line = one_line_error(_cli(out, "algorithm=apo", f"kappo.calibration={cal_file}", *extra))
    assert __import__("re").search(match, line), line
    assert not out.exists()


def test_dpo_refuses_a_win_rate_calibration_file(tmp_path):
    path = tmp_path / "w.json"
    calibrate({i: [0.1, 0.5, 0.9] for i in range(12)}, k=2, beta=0.1, kind="winrate").save(path)
    out = tmp_path / "run"
    line = one_line_error(_cli(out, "algorithm=dpo", "kappo.k=2", f"kappo.calibration={path}"))
    assert "algorithm 'dpo' needs a binary calibration" in line and not out.exists()


def test_apo_with_a_calibration_file_uses_it_as_given(tmp_path, cal_file):
    tr = Trainer(kappo_config(tmp_path / "a", "algorithm=apo", "kappo.k=2", "max_steps=1",
                              f"kappo.calibration={cal_file}"))
    assert sorted(e["id"] for e in tr.rl_prompts) == list(range(12))
    tr.run(progress=False)
    run_copy = Calibration.load(tmp_path / "a/calibration.json")
    assert run_copy.checksum == Calibration.load(cal_file).checksum
    assert not (tmp_path / "a/bank.jsonl").exists()  # nothing sampled: the file is the bank
    assert f"from the file `{cal_file}`" in (tmp_path / "a/report.md").read_text()


def test_dpo_with_a_calibration_file_samples_pairs_on_its_prompts(tmp_path, cal_file):
    tr = Trainer(kappo_config(tmp_path / "d", "algorithm=dpo", "kappo.k=2", "max_steps=1",
                              f"kappo.calibration={cal_file}", "kappo.bank_prompts=6"))
    tr.run(progress=False)
    ids = tr.bank.prompt_ids
    assert len(ids) == 6 and set(ids.tolist()) <= set(range(12))
    file_cal = Calibration.load(cal_file)
    np.testing.assert_array_equal(tr.algo.beta_eff, file_cal.get("dpo_beta_eff", ids))


def test_a_changed_calibration_file_on_resume_keeps_the_runs_copy(tmp_path, cal_file, capsys):
    cfg = kappo_config(tmp_path / "r", "algorithm=apo", "kappo.k=2", "max_steps=2",
                       "checkpoint_every=1", f"kappo.calibration={cal_file}")

    def stop(step, metrics):
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, on_step=stop).run(progress=False)
    before = (tmp_path / "r/calibration.json").read_bytes()
    calibrate({i: [1, 1, 1, 0] for i in range(12)}, k=2, beta=0.1).save(cal_file)
    capsys.readouterr()
    again = Trainer(cfg)
    assert "changed since the run started; continuing with the run's own copy" in \
        capsys.readouterr().err
    again.run(progress=False)
    assert (tmp_path / "r/calibration.json").read_bytes() == before


def test_pg_kappo_grpo_calibrates_in_run(tmp_path):
    tr = Trainer(kappo_config(tmp_path / "g", "estimator=kappo_grpo", "rollout.n=4",
                              "max_steps=2", "kappo.k=2"))
    assert tr.plan is not None and tr.binary_advantages  # binary task -> binary calibration, 0/1
    assert tr.cfg.out == str(tmp_path / "g")
    tr.run(progress=False)
    assert isinstance(tr.estimator_options["calibration"], Calibration)
    assert tr.calibration.kind == "binary" and tr.calibration.num_prompts == 16
    bank_ids = {json.loads(x)["prompt_id"] for x in
                (tmp_path / "g/bank.jsonl").read_text().splitlines()}
    assert bank_ids == {e["id"] for e in tr.rl_prompts}
    rows = [r for r in read_metrics(tmp_path / "g/metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    assert "KAPPO calibration (binary, in-run" in (tmp_path / "g/report.md").read_text()
