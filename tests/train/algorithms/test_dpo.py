"""``bestk train`` with ``algorithm: dpo`` (@k-DPO, KAPPO Eq. 13): pairs from the reference
bank, beta_eff(x) (k = 1: plain DPO with beta), the loss against an independent computation
for both label models, the bank files, resume, and the errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from bestk.cli import app
from bestk.train.algorithms.dpo import P_SUCCESS_WINS, pair_rows
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer
from tests.conftest import (
    KAPPO_TINY,
    assert_same_run,
    crash_then_resume,
    kappo_config,
    set_args,
)

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_pair_rows_enumerate_each_success_and_failure():
    rng = np.random.default_rng(3)
    success = rng.random((6, 7)) < 0.4
    success[0] = [True, False, False, True, False, False, False]
    s = success.sum(1)
    prompts = np.flatnonzero((s > 0) & (s < 7))
    for p in prompts:
        succ_cols = np.flatnonzero(success[p])
        fail_cols = np.flatnonzero(~success[p])
        u_w = (np.arange(len(succ_cols)) + 0.5) / len(succ_cols)
        u_l = (np.arange(len(fail_cols)) + 0.5) / len(fail_cols)
        k = max(len(u_w), len(u_l))
        w, lo = pair_rows(success, np.full(k, p), np.resize(u_w, k), np.resize(u_l, k))
        assert list(w[: len(u_w)]) == list(p * 7 + succ_cols)  # each success once, in order
        assert list(lo[: len(u_l)]) == list(p * 7 + fail_cols)
    # u at the top of [0, 1) stays in range
    w, lo = pair_rows(success, prompts, np.full(len(prompts), 1 - 1e-16), np.zeros(len(prompts)))
    assert success.reshape(-1)[w].all() and not success.reshape(-1)[lo].any()


def at_reference(out: Path, *extra: str) -> Trainer:
    tr = Trainer(kappo_config(out, "algorithm=dpo", "max_steps=0", *extra))
    tr.run(progress=False)
    return tr


@pytest.fixture(scope="module")
def k1(tmp_path_factory) -> Trainer:
    return at_reference(tmp_path_factory.mktemp("dpo") / "k1", "kappo.k=1", "kappo.beta=0.3",
                        "rollout.prompts_per_step=4", "kappo.dpo_pairs=2")


def independent_logps(model, tokenizer, prompts: list[str], comp_ids: torch.Tensor,
                      comp_mask: torch.Tensor) -> torch.Tensor:
    """sum_t log pi(y_t | x, y_<t) by one plain forward per sequence (no padding, no cache)."""
    out = []
    for p, ids, m in zip(prompts, comp_ids, comp_mask, strict=True):
        x = tokenizer(p, add_special_tokens=False)["input_ids"]
        y = ids[m.bool()].tolist()
        seq = torch.tensor([x + y])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, len(x) - 1 : -1].double()
        out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(y)[:, None]).sum())
    return torch.stack(out)


def test_bank_keeps_completions_and_reference_logprobs(k1):
    out = Path(k1.out)
    rows = [json.loads(line) for line in (out / "bank.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(len(r["rewards"]) == len(r["texts"]) == 8 for r in rows)
    bank = k1.bank
    tok = k1.tokenizer
    decoded = tok.batch_decode(bank.completion_ids, skip_special_tokens=True)
    assert decoded == [t for r in rows for t in r["texts"]]
    # reference log-probs stored with the bank == an independent forward of the reference
    by_id = {e["id"]: e["prompt"] for e in k1.rl_prompts}
    pick = torch.arange(0, 16 * 8, 13)
    prompts = [by_id[int(bank.prompt_ids[i // 8])] for i in pick]
    ind = independent_logps(k1.model, tok, prompts, bank.completion_ids[pick],
                            bank.completion_mask[pick])
    torch.testing.assert_close(bank.ref_logps[pick], ind, rtol=0, atol=2e-5)
    from safetensors import safe_open

    with safe_open(str(sorted((out / "checkpoints").iterdir())[0]), framework="pt") as f:
        assert not any(k.startswith("ref.") for k in f.keys())  # no reference model kept


def test_k1_beta_eff_is_beta_so_k1_is_plain_dpo(k1, tmp_path):
    assert np.all(k1.algo.beta_eff == 0.3)
    capped = at_reference(tmp_path / "cap", "kappo.k=1", "kappo.beta=5.0")
    assert np.all(capped.algo.beta_eff == 2.0)  # Eq. 149's cap


@pytest.mark.parametrize("labels", ["hard", "bradley_terry"])
def test_loss_matches_an_independent_computation(k1, labels, tmp_path):
    """After a few updates (margins no longer 0) the logged loss of a step equals Eq. 13
    computed from independent log-probs: -log sigmoid(beta (d_w - d_l)) for hard labels,
    and sigma(1) of that + sigma(-1) of the flipped pair for Bradley-Terry labels."""
    tr = at_reference(tmp_path / labels, "kappo.k=1", "kappo.beta=0.3",
                      f"kappo.dpo_labels={labels}", "rollout.prompts_per_step=4",
                      "kappo.dpo_pairs=2", "optim.lr=3e-3")
    for s in range(1, 4):
        tr.algo.update(tr.algo.batch(s))
    b = tr.algo.batch(7)
    by_id = {e["id"]: e["prompt"] for e in tr.rl_prompts}
    prompts = [by_id[int(i)] for i in b.prompt_ids for _ in range(2)]
    lp = independent_logps(tr.model, tr.tokenizer, prompts, b.completion_ids.cpu(),
                           b.completion_mask.cpu())
    d = (lp[0::2] - b.ref_chosen.double()) - (lp[1::2] - b.ref_rejected.double())
    z = 0.3 * d
    assert b.beta_eff.shape == (8,) and torch.all(b.beta_eff == 0.3)
    if labels == "hard":
        expected = -F.logsigmoid(z).mean()
    else:
        p = P_SUCCESS_WINS
        expected = (-p * F.logsigmoid(z) - (1 - p) * F.logsigmoid(-z)).mean()
        assert P_SUCCESS_WINS == pytest.approx(1 / (1 + math.exp(-1)))
    assert abs(float(d.abs().max())) > 1e-3  # not at the reference any more
    stats = tr.algo.update(b)
    assert stats["loss"] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    assert stats["reward_margin"] == pytest.approx(float(z.mean()), rel=1e-3, abs=1e-5)
    assert stats["reward_accuracy"] == pytest.approx(float((z > 0).double().mean()))


def test_run_metrics_report_and_exact_resume(tmp_path):
    extra = ["algorithm=dpo", "kappo.k=2", "max_steps=4", "checkpoint_every=2"]
    ref = Trainer(kappo_config(tmp_path / "a", *extra))
    assert ref.cfg.rollout.n == 1 and ref.kappo_kind == "binary"
    ref.run(progress=False)
    rows = [r for r in read_metrics(tmp_path / "a/metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in ("loss", "reward_chosen", "reward_rejected", "reward_margin", "reward_accuracy",
                "beta_eff_mean", "pairs", "grad_norm"):
        assert all(np.isfinite(r[key]) for r in rows), key
    report = (tmp_path / "a/report.md").read_text()
    assert "`dpo` (@k-DPO" in report and "binary, in-run" in report and "k = 2" in report
    assert (tmp_path / "a/training.png").is_file()
    assert_same_run(ref, crash_then_resume(kappo_config(tmp_path / "b", *extra), at=3))


def test_damaged_bank_tokens_on_resume_is_a_one_line_error(tmp_path):
    out = tmp_path / "d"
    Trainer(kappo_config(out, "algorithm=dpo", "max_steps=2", "checkpoint_every=1")).run(
        progress=False)
    (out / "final").rename(out / "final-old")  # not complete: a resume must load the bank
    (out / ".finished").unlink()
    (out / "bank_tokens.safetensors").write_bytes(b"junk")
    with pytest.raises(ValueError, match="bank_tokens.safetensors is missing or unreadable"):
        Trainer(kappo_config(out, "algorithm=dpo", "max_steps=3", "checkpoint_every=1"))


def test_too_few_pairs_warns_and_no_pairs_is_a_one_line_error(tmp_path, capsys):
    tr = Trainer(kappo_config(tmp_path / "few", "algorithm=dpo", "max_steps=1",
                              "rollout.prompts_per_step=16"))
    tr.run(progress=False)
    err = capsys.readouterr().err
    pool = tr.algo.pool.size
    assert 0 < pool < 16 and f"only {pool} of the 16 bank prompts" in err
    row = [r for r in read_metrics(tmp_path / "few/metrics.jsonl") if r["phase"] == "train"][0]
    assert row["pairs"] == pool
    args = ["train", "--out", str(tmp_path / "none"), "--quiet", "--max-steps", "1"]
    args += set_args(*KAPPO_TINY, "algorithm=dpo", "sft.steps=0")  # untrained: never succeeds
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "none of the 16 bank prompts has both a success" in lines[0]
