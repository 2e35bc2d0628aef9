"""``bestk train`` with ``algorithm: apo`` (@k-A*PO, KAPPO Eq. 14): the in-run calibration,
the regression targets against independent computations (k = 1 is plain A*PO: targets
R - beta log E_ref[exp(R / beta)] over the bank), the loss at the reference, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from bestk.kappo import Calibration, winrate_table
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer
from tests._kappo_ref import a_k_ref
from tests.conftest import Crash, assert_same_run, crash_then_resume, kappo_config, tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def read_bank(out: Path) -> dict[int, np.ndarray]:
    """``RUN/bank.jsonl`` as prompt id -> raw rewards."""
    rows = [json.loads(line) for line in (out / "bank.jsonl").read_text().splitlines()]
    return {r["prompt_id"]: np.asarray(r["rewards"], dtype=np.float64) for r in rows}


def at_reference(out: Path, *extra: str) -> Trainer:
    """A finished 0-step apo run: SFT, in-run calibration, step-0 evaluation; the policy is
    still the reference."""
    tr = Trainer(kappo_config(out, "algorithm=apo", "max_steps=0", *extra))
    tr.run(progress=False)
    return tr


def independent_binary_target(success: float, bank: np.ndarray, k: int, beta: float) -> float:
    """a_k R - beta log Z from the bank's pass rate, solving Eq. 6 with brentq (Algorithm 1's
    boundaries at q = 0 and q = 1)."""
    q = bank.mean()
    if q == 0:
        a, blogz = float(k), 0.0
    elif q == 1:
        a = 1.0 if k == 1 else 0.0
        blogz = a
    else:
        a = a_k_ref(q, k, beta)
        blogz = beta * np.log(1 - q + q * np.exp(a / beta))
    return a * success - blogz


@pytest.fixture(scope="module")
def k1(tmp_path_factory) -> Trainer:
    return at_reference(tmp_path_factory.mktemp("apo") / "k1", "kappo.k=1", "kappo.beta=0.25")


def test_k1_is_plain_apo_targets_against_the_bank(k1):
    """k = 1: the target of a sample is R - beta log (1/M) sum_j exp(R_j / beta), R_j the
    bank's rewards of its prompt -- A*PO's V* estimate (Brantley et al. 2025)."""
    out, beta = Path(k1.out), 0.25
    cal = Calibration.load(out / "calibration.json")
    assert (cal.kind, cal.k, cal.beta, cal.M, cal.num_prompts) == ("binary", 1, beta, 8, 16)
    bank = read_bank(out)
    assert sorted(bank) == sorted(e["id"] for e in k1.rl_prompts)  # RL draws the bank's prompts
    b = k1.algo.batch(1)
    assert b.targets.shape == (2,)  # rollout.n defaults to 1 for apo: one sample per prompt
    v_star = np.array([beta * logsumexp(bank[i] / beta, b=1 / len(bank[i])) for i in b.prompt_ids])
    np.testing.assert_allclose(b.targets.numpy(), b.rewards - v_star, rtol=0, atol=1e-12)
    some = [i for i in bank if 0 < bank[i].mean() < 1][:3]
    assert some, "the tiny reference should solve some bank prompts sometimes"
    for i in some:  # every (prompt, reward) pair, through the calibration the run saved
        for r in (0.0, 1.0):
            t = cal.regression_target([i], [r])[0]
            assert t == pytest.approx(r - beta * logsumexp(bank[i] / beta, b=1 / 8), abs=1e-12)


def test_loss_at_the_reference_is_the_mean_squared_target(k1):
    """Policy == reference at the start: log pi/pi_ref = 0, so Eq. 14 is mean(target^2)."""
    b = k1.algo.batch(1)
    stats = k1.algo.update(b)
    assert stats["loss"] == pytest.approx(float((b.targets**2).mean()), rel=1e-6, abs=1e-9)
    assert stats["log_ratio_mean"] == 0.0 and stats["residual_mean"] == pytest.approx(
        float(b.targets.mean()), abs=1e-7)


def test_k4_binary_targets_solve_eq6(tmp_path):
    tr = at_reference(tmp_path / "k4", "kappo.k=4", "rollout.n=4")
    bank = read_bank(Path(tr.out))
    cal = tr.calibration
    assert (cal.kind, cal.k, cal.beta) == ("binary", 4, 0.1)
    b = tr.algo.batch(1)
    assert b.targets.shape == (8,)  # 2 prompts x rollout.n = 4
    succ = b.rewards >= 1.0
    expected = [independent_binary_target(float(s), (bank[i] >= 1.0).astype(float), 4, 0.1)
                for s, i in zip(succ, b.prompt_ids, strict=True)]
    np.testing.assert_allclose(b.targets.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_graded_task_calibrates_win_rate_targets(tmp_path):
    """A graded task -> win-rate calibration on the raw rewards; the target of a reward r is
    T_j, j = #{bank rewards of the prompt <= r} (Algorithm 2)."""
    tr = Trainer(tiny_config(tmp_path / "w", "algorithm=apo", "rollout.n=null", "max_steps=0",
                             "kappo.bank_prompts=8", "kappo.bank_size=6", "kappo.k=2"))
    tr.run(progress=False)
    assert tr.kappo_kind == "winrate" and tr.cfg.rollout.n == 1
    bank = read_bank(Path(tr.out))
    table = winrate_table(6, 2, 0.1)
    np.testing.assert_array_equal(tr.calibration.tables[6], table)
    b = tr.algo.batch(1)
    j = [int((bank[i] <= r).sum()) for r, i in zip(b.rewards, b.prompt_ids, strict=True)]
    np.testing.assert_allclose(b.targets.numpy(), table[j], rtol=0, atol=0)


def test_updates_on_one_batch_drive_the_residuals_down(tmp_path):
    """The update descends Eq. 14: repeated steps on one batch shrink the squared residual."""
    tr = at_reference(tmp_path / "d", "kappo.k=2", "rollout.n=4", "optim.lr=3e-3")
    b = tr.algo.batch(1)
    first = tr.algo.update(b)["loss"]
    for _ in range(30):
        last = tr.algo.update(b)["loss"]
    assert first > 0 and last < 0.2 * first


def test_two_steps_then_resume_after_a_crash_is_exact(tmp_path):
    extra = ["algorithm=apo", "max_steps=4", "checkpoint_every=2", "kappo.k=2"]
    ref = Trainer(kappo_config(tmp_path / "a", *extra))
    ref.run(progress=False)
    rows = [r for r in read_metrics(tmp_path / "a/metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in ("loss", "residual_mean", "residual_abs_mean", "log_ratio_mean", "target_mean",
                "reward_mean", "success_rate", "grad_norm"):
        assert all(np.isfinite(r[key]) for r in rows), key
    report = (tmp_path / "a/report.md").read_text()
    assert "`apo` (@k-A*PO" in report and "k = 2, beta = 0.1, M = 8, 16 prompts" in report
    assert "RL drew these prompts only" in report
    resumed = crash_then_resume(kappo_config(tmp_path / "b", *extra), at=3)
    assert resumed.step == 4 and resumed.calibration.checksum == ref.calibration.checksum
    assert_same_run(ref, resumed)


def test_a_run_killed_during_calibration_starts_over(tmp_path, monkeypatch):
    """Killed after the calibration but before the step-0 checkpoint: the re-run starts over
    (SFT and the calibration again: the same, since both are seeded) and finishes."""
    cfg = kappo_config(tmp_path / "c", "algorithm=apo", "max_steps=1")
    tr = Trainer(cfg)
    monkeypatch.setattr(Trainer, "evaluate", lambda self, *args: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        tr.run(progress=False)
    first = (tmp_path / "c/calibration.json").read_bytes()
    monkeypatch.undo()
    again = Trainer(cfg)
    assert again.state.kind == "restart" and not (tmp_path / "c/calibration.json").exists()
    again.run(progress=False)
    assert (tmp_path / "c/calibration.json").read_bytes() == first
