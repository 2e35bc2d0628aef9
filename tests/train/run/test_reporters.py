"""Live logging (``report_to``): TRL's semantics and metric names, TensorBoard events and
offline W&B run files read back after a run that crashed and resumed."""

from __future__ import annotations

import inspect
import statistics
from pathlib import Path

import numpy as np
import pytest

from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.rollout.metrics import rollout_stats
from bestk.train.run.directory import RESUME_FREE, check_resume, read_metrics
from bestk.train.run.reporters import TRL_NAMES, resolve_report_to, scalars
from bestk.train.trainer import Trainer
from tests._wandb_records import history, run_config
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    """W&B in offline mode with its config / cache under ``tmp_path`` (no network, no login)."""
    for key, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                       "WANDB_CONFIG_DIR": tmp_path / "wandb-config",
                       "WANDB_CACHE_DIR": tmp_path / "wandb-cache",
                       "WANDB_DATA_DIR": tmp_path / "wandb-data"}.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


# -- report_to semantics ------------------------------------------------------------------------
def test_default_report_to_is_trls(tmp_path):
    trl = pytest.importorskip("trl")
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert TrainConfig().report_to == "none"
    assert resolve_report_to(TrainConfig().report_to) == list(args.report_to) == []


def test_resolve_report_to(hide_modules):
    assert resolve_report_to("none") == resolve_report_to(None) == resolve_report_to([]) == []
    assert resolve_report_to(["none"]) == []
    assert resolve_report_to("tensorboard") == ["tensorboard"]
    assert resolve_report_to(["wandb", "tensorboard", "wandb"]) == ["wandb", "tensorboard"]
    assert resolve_report_to("all") == ["tensorboard", "wandb"]  # both installed here
    hide_modules("wandb")
    assert resolve_report_to("all") == ["tensorboard"]  # "all" = the installed ones
    with pytest.raises(ValueError, match="unknown integration\\(s\\) 'mlflow'.*valid: none, all"):
        resolve_report_to(["tensorboard", "mlflow"])
    with pytest.raises(ValueError, match="must be none, all, a name or a list"):
        resolve_report_to(3)


def test_config_accepts_trl_style_values_and_refuses_others():
    cfg = TrainConfig()
    apply_overrides(cfg, ["report_to=[tensorboard, wandb]", "run_name=exp1"])
    assert cfg.report_to == ["tensorboard", "wandb"] and cfg.run_name == "exp1"
    apply_overrides(cfg, ["report_to=tensorboard"])
    assert cfg.report_to == "tensorboard"
    from bestk.train.validation import check_values

    apply_overrides(cfg, ["report_to=neptune"])
    with pytest.raises(ValueError, match="'neptune'"):
        check_values(cfg)
    with pytest.raises(ValueError, match="must be a list of names"):
        apply_overrides(cfg, ["report_to=[1, 2]"])


def test_report_to_and_run_name_may_change_on_resume():
    old = TrainConfig()
    new = TrainConfig(report_to=["tensorboard", "wandb"], run_name="again")
    assert {"report_to", "run_name"} <= set(RESUME_FREE)
    notes = check_resume(old, new, 10, "runs/x")
    assert any(n.startswith("report_to:") for n in notes)


# -- TRL's names --------------------------------------------------------------------------------
def test_trl_names_are_the_ones_trl_logs():
    """Every mapped name is one TRL's GRPOTrainer (or the HF Trainer under it) logs."""
    pytest.importorskip("trl")
    from transformers import Trainer as HFTrainer
    from trl import GRPOTrainer

    grpo = inspect.getsource(GRPOTrainer)
    hf = inspect.getsource(HFTrainer)
    for ours, trls in TRL_NAMES.items():
        if trls in ("loss", "grad_norm", "learning_rate"):
            assert f'logs["{trls}"]' in hf, trls
        else:
            assert f'_metrics[mode]["{trls}"]' in grpo, (ours, trls)


def test_rollout_stats_against_a_direct_computation():
    rng = np.random.default_rng(3)
    n, groups = 4, 5
    rewards = rng.integers(0, 3, size=n * groups).astype(float)
    rewards[:n] = 1.0  # one group with zero spread
    lengths = rng.integers(1, 9, size=n * groups)
    finished = rng.random(n * groups) < 0.7
    st = rollout_stats(rewards, n, lengths, finished)
    assert st["reward_std"] == pytest.approx(statistics.stdev(rewards.tolist()))
    zero = [len(set(rewards[g * n:(g + 1) * n].tolist())) == 1 for g in range(groups)]
    assert st["frac_reward_zero_std"] == pytest.approx(sum(zero) / groups)
    assert st["response_len_min"] == min(lengths) and st["response_len_max"] == max(lengths)
    assert st["truncated_rate"] == pytest.approx(sum(not f for f in finished) / len(finished))


def test_scalars_use_trl_names_and_leave_out_bookkeeping():
    axis, step, vals = scalars({"phase": "train", "step": 7, "reward_mean": 0.5, "kl_ref": 0.1,
                                "clipfrac": 0.2, "success_rate": 0.25})
    assert (axis, step) == ("train", 7)
    assert vals == {"train/reward": 0.5, "train/kl": 0.1, "train/clip_ratio/region_mean": 0.2,
                    "train/success_rate": 0.25}
    axis, step, vals = scalars({"phase": "eval", "step": 0, "pass@1": 0.1, "pass@1_lo": 0.0,
                                "pass@1_hi": 0.3, "best@2": 0.4, "n": 4.0, "num_prompts": 8.0,
                                "reward_mean": 0.2})
    assert (axis, step, vals) == ("train", 0, {"eval/pass@1": 0.1, "eval/best@2": 0.4,
                                               "eval/reward": 0.2})
    assert scalars({"phase": "sft", "sft_step": 10, "loss": 1.5, "lr": 0.1}) == (
        "sft", 10, {"sft/loss": 1.5, "sft/learning_rate": 0.1})


# -- a run that crashes and resumes, read back ----------------------------------------------------
def _tb_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class Crash(RuntimeError):
    pass


def test_tensorboard_and_wandb_read_back_after_a_crash_and_resume(tmp_path, wandb_offline):
    out = tmp_path / "run"
    extra = ["max_steps=4", "checkpoint_every=2", "loss.kl_coef=0.05",
             "report_to=[tensorboard, wandb]", "run_name=crash-and-resume"]

    def crash(step, metrics):
        if step == 3:  # logged everywhere, but its checkpoint is not written
            raise Crash

    with pytest.raises(Crash):
        Trainer(tiny_config(out, *extra), on_step=crash).run(progress=False)
    run_id = (out / "wandb" / "bestk-run-id").read_text().strip()
    Trainer.resume(out).run(progress=False)
    assert (out / "wandb" / "bestk-run-id").read_text().strip() == run_id

    rows = read_metrics(out / "metrics.jsonl")
    train = [r for r in rows if r["phase"] == "train"]
    evals = [r for r in rows if r["phase"] == "eval"]
    sft = [r for r in rows if r["phase"] == "sft"]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and [r["step"] for r in evals] == [0, 2, 4]

    # TensorBoard: the resume purged the interrupted step 3, so each step shows once, with the
    # values of metrics.jsonl (float32 in the event file).
    tb = _tb_scalars(out / "tensorboard")
    for ours, trls in [("reward_mean", "reward"), ("reward_std", "reward_std"),
                       ("entropy", "entropy"), ("kl_ref", "kl"),
                       ("clipfrac", "clip_ratio/region_mean"),
                       ("response_len", "completions/mean_length"), ("lr", "learning_rate"),
                       ("success_rate", "success_rate")]:
        got = tb[f"train/{trls}"]
        assert [s for s, _ in got] == [1, 2, 3, 4], trls
        assert [v for _, v in got] == pytest.approx([r[ours] for r in train], rel=1e-6), trls
    for k in (1, 4):
        for metric in ("pass", "best"):
            got = tb[f"eval/{metric}@{k}"]
            assert [s for s, _ in got] == [0, 2, 4]
            assert [v for _, v in got] == pytest.approx([r[f"{metric}@{k}"] for r in evals],
                                                        rel=1e-6)
    assert not any(t.endswith(("_lo", "_hi")) for t in tb)
    sft_tb = _tb_scalars(out / "tensorboard" / "sft")
    assert [s for s, _ in sft_tb["sft/loss"]] == [r["sft_step"] for r in sft]
    assert [v for _, v in sft_tb["sft/loss"]] == pytest.approx([r["loss"] for r in sft], rel=1e-6)

    # W&B: two offline files of the same run id (before and after the resume); the last row of
    # each step holds metrics.jsonl's values, plotted against train/global_step.
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)
    assert run_config(files[0])["estimator"] == "argmaxrl"
    hist = [row for f in files for row in history(f)]
    last: dict[int, dict] = {}
    for row in hist:
        if "train/reward" in row:
            last[row["train/global_step"]] = row
    assert sorted(last) == [1, 2, 3, 4]
    for r in train:
        row = last[r["step"]]
        assert row["train/reward"] == pytest.approx(r["reward_mean"])
        assert row["train/kl"] == pytest.approx(r["kl_ref"])
        assert row["train/completions/mean_length"] == pytest.approx(r["response_len"])
    eval_rows = {row["train/global_step"]: row for row in hist if "eval/pass@1" in row}
    assert sorted(eval_rows) == [0, 2, 4]
    assert eval_rows[4]["eval/best@4"] == pytest.approx(evals[-1]["best@4"])
    sft_rows = [row for row in hist if "sft/loss" in row]
    assert [row["sft/step"] for row in sft_rows] == [r["sft_step"] for r in sft]


def test_a_new_run_in_a_reused_directory_starts_new_curves(tmp_path):
    """A run started over (killed before its first checkpoint) starts new TensorBoard curves
    instead of mixing two runs; the old events are kept with that attempt's files."""
    out = tmp_path / "run"
    cfg = tiny_config(out, "max_steps=1", "report_to=tensorboard")
    Trainer(cfg).close()  # started (config.yaml written), stopped before any checkpoint
    stale = out / "tensorboard"
    stale.mkdir()
    (stale / "events.out.tfevents.0.stale").write_bytes(b"")
    Trainer(cfg).run(progress=False)
    assert not (stale / "events.out.tfevents.0.stale").exists()
    assert (out / "previous-attempt" / "tensorboard" / "events.out.tfevents.0.stale").exists()
    assert [s for s, _ in _tb_scalars(stale)["train/reward"]] == [1]


def test_a_wandb_that_cannot_start_is_one_line(tmp_path, monkeypatch):
    import wandb

    from bestk.train.run.reporters import Reporters

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty). call wandb.login(key=...)"
                                      "\nmore detail")

    monkeypatch.setattr(wandb, "init", refuse)
    reporters = Reporters(["tensorboard", "wandb"], tmp_path / "run")
    with pytest.raises(ValueError, match="^W&B could not start a run: api_key not configured "
                       "\\(no-tty\\).*; run `wandb login`, or log offline with "
                       "WANDB_MODE=offline") as info:
        reporters.open()
    assert "\n" not in str(info.value)
    reporters.close()


def test_samples_go_to_tensorboard_as_a_text_table(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from bestk.train.run.reporters import Reporters

    records = [{"step": 3, "prompt_id": 7, "prompt": "rev:12=", "completion": "21",
                "reward": 1.0, "success": True, "rewards": {"fmt": 1.0, "len": None}}]
    rep = Reporters(["tensorboard"], tmp_path)
    rep.log_samples(3, records)
    rep.log_samples(4, [])  # nothing to show: no event
    rep.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("eval/samples/text_summary")
    assert [e.step for e in events] == [3]
    text = events[0].tensor_proto.string_val[0].decode()
    assert "| step | prompt_id | prompt | completion | reward | success | reward/fmt | " \
           "reward/len |" in text and "| 3 | 7 | rev:12= | 21 | 1 | True | 1 |  |" in text


def test_frac_reward_zero_std_reads_what_the_estimator_sees():
    """With ``advantage_reward=success`` a group of graded rewards 0.2, 0.5 (all failures)
    has spread in the rewards but none in the 0/1 success the estimator sees: it counts as a
    zero-spread group, as a group of equal rewards does without ``signal``."""
    rewards = np.array([0.2, 0.5, 1.0, 1.0, 0.3, 1.0])
    success = (rewards == 1.0).astype(float)
    ones, done = np.ones(6), np.ones(6, dtype=bool)
    assert rollout_stats(rewards, 2, ones, done)["frac_reward_zero_std"] == pytest.approx(1 / 3)
    st = rollout_stats(rewards, 2, ones, done, signal=success)
    assert st["frac_reward_zero_std"] == pytest.approx(2 / 3)
    assert st["reward_std"] == pytest.approx(statistics.stdev(rewards.tolist()))  # the rewards'
