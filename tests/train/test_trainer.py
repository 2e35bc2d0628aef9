"""The embedded trainer end to end on a tiny model: a 2-step run, the run directory, resume
after a simulated crash (identical to an uninterrupted run), atomic checkpoints, config
errors, and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides, load_config
from bestk.train.run.directory import read_metrics
from bestk.train.runtime.files import latest_checkpoint, list_checkpoints, save_checkpoint
from bestk.train.trainer import Trainer
from bestk.train.validation import validate
from tests.conftest import (
    KAPPO_TINY,
    ROOT,
    TINY,
    Crash,
    assert_same_run,
    crash_then_resume,
    is_timing,
    kappo_config,
    set_args,
    tiny_config,
)

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def test_two_step_run_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    cfg = tiny_config(out, "max_steps=2", "estimator=argmaxrl")
    last = Trainer(cfg).run(progress=False)
    assert {"config.yaml", "metrics.jsonl", "report.md", "passk.png", "training.png"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "bestk.png").is_file()  # graded task -> best@k plot
    rows = read_metrics(out / "metrics.jsonl")
    evals = [r for r in rows if r["phase"] == "eval"]
    trains = [r for r in rows if r["phase"] == "train"]
    assert [r["step"] for r in evals] == [0, 2] and [r["step"] for r in trains] == [1, 2]
    for k in range(1, 5):
        assert 0.0 <= evals[-1][f"pass@{k}"] <= 1.0 and f"best@{k}" in evals[-1]
    assert evals[-1] == last
    # pass@k is non-decreasing in k, best@1 is the mean reward
    assert all(evals[-1][f"pass@{k}"] <= evals[-1][f"pass@{k + 1}"] + 1e-12 for k in range(1, 4))
    assert evals[-1]["best@1"] == pytest.approx(evals[-1]["reward_mean"])
    # final/ is a plain HF directory
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "final")
    tok = AutoTokenizer.from_pretrained(out / "final")
    assert tok.decode(tok("rev:12=")["input_ids"]) == "rev:12="
    assert model.config.model_type == "qwen2"
    ckpts = list_checkpoints(out / "checkpoints")
    assert [p.name for p in ckpts] == ["step_0000000.safetensors", "step_0000002.safetensors"]
    assert "pass@k" in (out / "report.md").read_text()


def test_off_policy_minibatches_and_entropy_bonus(tmp_path):
    cfg = tiny_config(
        tmp_path / "mb", "max_steps=1", "loss.ppo_epochs=2", "loss.minibatches=2",
        "loss.entropy_coef=0.01", "loss.agg=seq-mean-token-mean", "estimator=rloo",
        "rollout.top_p=0.9",
    )
    tr = Trainer(cfg)
    tr.run(progress=False)
    assert tr.optim.steps == 4  # 2 epochs x 2 minibatches
    row = [r for r in read_metrics(tmp_path / "mb/metrics.jsonl") if r["phase"] == "train"][0]
    assert 0.0 <= row["clipfrac"] <= 1.0 and row["grad_norm"] >= 0
    with pytest.raises(ValueError, match="'loss.minibatches' \\(3\\) must divide"):
        validate(tiny_config(tmp_path / "x", "loss.minibatches=3"))


def test_rollout_sample_batch_size_samples_the_step_in_chunks_of_whole_groups(
        tmp_path, monkeypatch):
    import bestk.train.rollout.engine as engine

    seen = []
    real = engine.sample

    def spy(*args, **kw):
        seen.append(kw.get("batch_size"))
        return real(*args, **kw)

    monkeypatch.setattr(engine, "sample", spy)
    tr = Trainer(tiny_config(tmp_path / "run", "max_steps=1", "rollout.sample_batch_size=16"))
    n = tr.cfg.rollout.n
    m = tr.rl_step(1)
    assert seen == [16] and m["response_len"] > 0 and m["grad_norm"] >= 0
    ro = tr.sample_completions(tr.draw_prompts(1), 1, n)
    assert ro.completion_ids.shape[0] == tr.cfg.rollout.prompts_per_step * n


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_resume_after_crash_matches_uninterrupted_run(tmp_path, monkeypatch):
    extra = ["max_steps=4", "checkpoint_every=2", "loss.kl_coef=0.05", "estimator=grpo"]
    ref = Trainer(tiny_config(tmp_path / "a", *extra))
    ref.run(progress=False)

    def crash(step, metrics):
        if step == 3:  # step 3 is logged but its checkpoint is not written yet
            raise Crash

    run = Trainer(tiny_config(tmp_path / "b", *extra), on_step=crash)
    with pytest.raises(Crash):
        run.run(progress=False)
    assert latest_checkpoint(tmp_path / "b" / "checkpoints").name == "step_0000002.safetensors"
    assert not (tmp_path / "b" / "final").exists()

    import bestk.train.run.directory as rundir_module

    reads = []
    real = rundir_module.read_run_config
    monkeypatch.setattr(rundir_module, "read_run_config",
                        lambda d: reads.append(d) or real(d))
    resumed = Trainer.resume(tmp_path / "b")
    assert resumed.step == 2 and len(reads) == 1  # config.yaml is read once on resume
    monkeypatch.undo()
    resumed.run(progress=False)
    a, b = _params(ref.model), _params(resumed.model)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    keys = ("step", "reward_mean", "loss", "kl_ref")
    ra = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "a/metrics.jsonl")
          if r["phase"] == "train"]
    rb = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "b/metrics.jsonl")
          if r["phase"] == "train"]
    assert ra == rb and [r["step"] for r in rb] == [1, 2, 3, 4]

    # A larger max_steps extends the finished run.
    more = Trainer.resume(tmp_path / "b", overrides=["max_steps=5"])  # as --set takes them
    assert more.step == 4
    more.run(progress=False)
    steps = [r["step"] for r in read_metrics(tmp_path / "b/metrics.jsonl") if r["phase"] == "train"]
    assert steps == [1, 2, 3, 4, 5]



def _records(out: Path) -> list[dict]:
    """Every ``metrics.jsonl`` record, timings left out."""
    return [{k: v for k, v in r.items() if not is_timing(k)}
            for r in read_metrics(out / "metrics.jsonl")]


def test_resume_with_max_steps_lowered_to_the_steps_done_evaluates_the_end(tmp_path):
    """A run stopped after step 3's checkpoint, where no evaluation was due, resumed with
    ``--max-steps 3`` (allowed: not below the steps done): step 3 is evaluated before final/
    and report.md, ``done:`` prints that evaluation (not step 0's), and the run ends as an
    uninterrupted 3-step run does, record for record and weight for weight."""
    from bestk.cli import app

    extra = ["checkpoint_every=3", "eval.every=6"]
    ref = tmp_path / "ref"
    Trainer(tiny_config(ref, "max_steps=3", *extra)).run(progress=False)
    out = tmp_path / "run"

    def crash(step, metrics):
        if step == 3:  # logged and checkpointed; the evaluation is due at 6
            raise Crash

    with pytest.raises(Crash):
        Trainer(tiny_config(out, "max_steps=6", *extra), on_step=crash).run(progress=False)
    r = CliRunner().invoke(app, ["train", "--resume", str(out), "--max-steps", "3", "--quiet"])
    assert r.exit_code == 0, r.output
    evals = [x for x in read_metrics(out / "metrics.jsonl") if x["phase"] == "eval"]
    assert [x["step"] for x in evals] == [0, 3]
    assert f"done: held-out pass@1={evals[-1]['pass@1']:.3f}" in r.output
    assert "end (step 3)" in (out / "report.md").read_text()
    assert _records(out) == _records(ref)
    a, b = (load_file(d / "final" / "model.safetensors") for d in (ref, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_whose_evaluation_is_missing_from_the_log_redoes_it(tmp_path):
    """Stopped after step 2's checkpoint but without that step's evaluation in the log (its
    record lost): the resumed run evaluates step 2 again, logs it once, and ends as the
    uninterrupted run does (records, samples, weights): the redone evaluation draws no
    randomness the training uses."""
    extra = ["max_steps=4", "checkpoint_every=2"]  # evaluations at 0, 2, 4 (eval.every=2)
    ref = Trainer(tiny_config(tmp_path / "ref", *extra))
    ref.run(progress=False)
    out = tmp_path / "run"

    def crash(step, metrics):
        if step == 2:
            raise Crash

    with pytest.raises(Crash):
        Trainer(tiny_config(out, *extra), on_step=crash).run(progress=False)
    log = out / "metrics.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in read_metrics(log)
                           if not (x["phase"] == "eval" and x["step"] == 2)))
    resumed = Trainer.resume(out)
    resumed.run(progress=False)
    assert [x["step"] for x in _records(out) if x["phase"] == "eval"] == [0, 2, 4]
    assert _records(out) == _records(ref.out)
    assert (out / "samples.jsonl").read_bytes() == (ref.out / "samples.jsonl").read_bytes()
    assert_same_run(ref, resumed)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    d = tmp_path / "ck"
    first = save_checkpoint(d, 1, model, opt, {"note": "one"})
    before = first.read_bytes()

    import safetensors.torch

    def torn_write(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")  # a crash in the middle of the write
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", torn_write)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(d, 2, model, opt, {"note": "two"})
    # no torn file, no temporary left; the checkpoint and its checksum file untouched
    assert sorted(p.name for p in d.iterdir()) == [first.name, "step_0000001.sha256"]
    assert first.read_bytes() == before
    # a stray temporary from a killed process is never taken for a checkpoint
    (d / ".bestk-tmp-step_0000003.safetensors.abcdefgh.bestk-tmp.safetensors").write_bytes(
        b"junk")
    assert latest_checkpoint(d) == first


def test_checkpoint_roundtrip_restores_optimizer_and_rng(tmp_path):
    from bestk.train.runtime.files import load_checkpoint

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        model(torch.randn(2, 4)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    path = save_checkpoint(tmp_path, 7, model, opt, {"extra": 1}, keep=1)
    expected_draw = torch.rand(3)
    model2 = torch.nn.Linear(4, 3)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.5)
    meta = load_checkpoint(path, model2, opt2)
    assert meta["step"] == 7 and meta["extra"] == 1
    torch.testing.assert_close(torch.rand(3), expected_draw)  # RNG restored
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        torch.testing.assert_close(p, q)
        s1, s2 = opt.state[p], opt2.state[q]
        torch.testing.assert_close(s1["exp_avg_sq"], s2["exp_avg_sq"])
    assert opt2.param_groups[0]["lr"] == 0.01


def test_checkpoint_roundtrip_restores_float32_masters(tmp_path):
    """A bfloat16 model's float32 masters are stored as ``master.<i>`` (float32) and restored
    into the optimizer's; a float32 model's checkpoint has none; a master of the wrong shape
    is refused by name."""
    from safetensors import safe_open

    from bestk.train.optim import PolicyOptimizer
    from bestk.train.runtime.files import load_checkpoint

    cfg = apply_overrides(TrainConfig(), ["optim.lr=0.01"])

    def trained(dtype):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3).to(dtype)
        opt = PolicyOptimizer(model, cfg)
        for _ in range(2):
            opt.step(model(torch.randn(2, 4).to(dtype)).float().pow(2).sum(), rl_step=1,
                     rewards=None)
        return model, opt

    model, opt = trained(torch.bfloat16)
    path = save_checkpoint(tmp_path / "bf16", 1, model, opt.optimizer, {},
                           masters=opt.masters())
    with safe_open(str(path), framework="pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys() if k.startswith("master.")}
    assert set(stored) == {"master.0", "master.1"}
    assert all(t.dtype == torch.float32 for t in stored.values())
    model2, opt2 = trained(torch.bfloat16)  # other weights, then the checkpoint's
    with torch.no_grad():
        model2.weight.add_(1)
    load_checkpoint(path, model2, opt2.optimizer, masters=opt2.masters())
    for i, master in opt.masters().items():
        assert torch.equal(opt2.masters()[i], master)
        assert torch.equal(opt2.optimizer.state[opt2.masters()[i]]["exp_avg"],
                           opt.optimizer.state[master]["exp_avg"])
    small = PolicyOptimizer(torch.nn.Linear(2, 3).to(torch.bfloat16), cfg)
    with pytest.raises(ValueError, match="master weights"):
        load_checkpoint(path, torch.nn.Linear(4, 3).to(torch.bfloat16),
                        masters=small.masters())
    model32, opt32 = trained(torch.float32)
    path32 = save_checkpoint(tmp_path / "f32", 1, model32, opt32.optimizer, {},
                             masters=opt32.masters())
    with safe_open(str(path32), framework="pt") as f:
        assert not [k for k in f.keys() if k.startswith("master.")]


def test_resume_of_a_bfloat16_run_is_bit_identical(tmp_path):
    """``model.dtype: bfloat16``: a run crashed after step 3 and resumed from its step-2
    checkpoint ends with the weights, float32 masters, AdamW moments and metrics of the
    uninterrupted run (the masters hold bits the bfloat16 weights do not)."""
    extra = ["max_steps=4", "checkpoint_every=2", "model.dtype=bfloat16", "estimator=grpo",
             "optim.lr=3e-3"]
    ref = Trainer(tiny_config(tmp_path / "a", *extra))
    ref.run(progress=False)
    resumed = crash_then_resume(tiny_config(tmp_path / "b", *extra), at=3)
    assert_same_run(ref, resumed)
    assert next(resumed.model.parameters()).dtype == torch.bfloat16
    ma, mb = ref.optim.masters(), resumed.optim.masters()
    assert ma and set(ma) == set(mb)
    for i in ma:
        assert ma[i].dtype == torch.float32 and torch.equal(ma[i], mb[i])
        sa, sb = ref.optim.optimizer.state[ma[i]], resumed.optim.optimizer.state[mb[i]]
        assert sa["exp_avg_sq"].dtype == torch.float32
        assert torch.equal(sa["exp_avg"], sb["exp_avg"])
        assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert any(not torch.equal(m, m.to(torch.bfloat16).float()) for m in ma.values())


def test_config_errors_name_the_key():
    cfg = TrainConfig()
    with pytest.raises(ValueError, match="unknown config key 'rollout.nn'.*rollout.n"):
        apply_overrides(cfg, ["rollout.nn=3"])
    with pytest.raises(ValueError, match="key 'bogus'; valid keys: algorithm, estimator,"):
        apply_overrides(cfg, ["bogus=1"])
    with pytest.raises(ValueError, match="'rollout.n' must be an integer"):
        apply_overrides(cfg, ["rollout.n=abc"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(cfg, ["rollout.n"])
    bad = TrainConfig(estimator="nope")
    with pytest.raises(ValueError, match="unknown estimator 'nope'; valid: .*argmaxrl"):
        validate(bad)
    bad = TrainConfig(estimator="softmax_grpo", estimator_options={"temp": 1})
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'temp' .*valid options: tau"):
        validate(bad)
    with pytest.raises(ValueError, match="requires option\\(s\\): k"):
        validate(TrainConfig(estimator="pkpo"))
    bad = TrainConfig()
    with pytest.raises(ValueError, match="'loss.agg' must be token-mean"):
        bad.loss.agg = "mean"  # the schema checks every assignment
    bad = TrainConfig()
    bad.task.name = "arithmetic"
    bad.task.options = {"digitz": 3}
    with pytest.raises(ValueError, match="'digitz' for task 'arithmetic'"):
        validate(bad)


def test_yaml_config_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("estimator: softmax_grpo\nestimator_options: {tau: 0.3}\nrollout: {n: 4}\n")
    cfg = load_config(p)
    assert cfg.estimator == "softmax_grpo" and cfg.estimator_options == {"tau": 0.3}
    assert cfg.rollout.n == 4
    assert cfg.rollout.prompts_per_step == TrainConfig().rollout.prompts_per_step
    import yaml

    from bestk.train.config.io import config_to_dict

    p.write_text(yaml.safe_dump(config_to_dict(TrainConfig())))  # config.yaml round trip
    assert config_to_dict(load_config(p)) == config_to_dict(TrainConfig())
    p.write_text("rollout: {nope: 4}\n")
    with pytest.raises(ValueError, match="unknown config key 'rollout.nope'"):
        load_config(p)


def test_cli_errors_exit_nonzero_with_one_line(tmp_path):
    from bestk.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["train", "--estimator", "nope", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2
    assert "unknown estimator 'nope'" in r.output and "argmaxrl" in r.output
    r = runner.invoke(app, ["train", "--set", "estimator_options.tau=1", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown option(s) 'tau' for estimator 'argmaxrl'" in r.output
    r = runner.invoke(app, ["train", "--set", "optim.lrr=1"])
    assert r.exit_code == 2 and "unknown config key 'optim.lrr'" in r.output
    r = runner.invoke(app, ["train", "--resume", str(tmp_path / "none")])
    assert r.exit_code == 2 and "not a run directory" in r.output


def test_cli_train_then_eval(tmp_path):
    from bestk.cli import app

    runner = CliRunner()
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--max-steps", "1", "--estimator", "softmax_grpo",
            "--quiet"]
    for s in TINY:
        args += ["--set", s]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "pass@1=" in r.output
    cfg = json.loads(json.dumps(__import__("yaml").safe_load((out / "config.yaml").read_text())))
    assert cfg["estimator"] == "softmax_grpo"
    r = runner.invoke(app, [
        "eval", "--model", str(out / "final"), "--task", "strings", "-n", "3",
        "--set", "task.options={num_train: 64, num_eval: 4, max_len: 4}",
        "--json", str(tmp_path / "m.json"),
    ])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "m.json").read_text())
    assert {"pass@1", "pass@3", "best@3", "distinct"} <= set(m)
    # resuming a finished run with a larger --max-steps extends it
    r = runner.invoke(app, ["train", "--resume", str(out), "--max-steps", "2", "--quiet"])
    assert r.exit_code == 0, r.output
    steps = [x["step"] for x in read_metrics(out / "metrics.jsonl") if x["phase"] == "train"]
    assert steps == [1, 2]


def test_kappo_grpo_with_a_calibration_made_from_an_eval_bank(tmp_path):
    from bestk.cli import app

    runner = CliRunner()
    exact = ["--set", "task.options={num_train: 64, num_eval: 4, max_len: 4, graded: false}"]
    base = [a for s in TINY if not s.startswith("task.options") for a in ("--set", s)] + exact
    out = tmp_path / "ref"
    r = runner.invoke(app, ["train", "--out", str(out), "--max-steps", "1", "--quiet", *base])
    assert r.exit_code == 0, r.output
    bank = tmp_path / "bank.jsonl"
    r = runner.invoke(app, ["eval", "--model", str(out / "final"), "--task", "strings", "-n", "4",
                            "--bank", str(bank), "--bank-prompts", "8", *exact])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in bank.read_text().splitlines()]
    assert len(rows) == 8 and all(len(x["rewards"]) == 4 for x in rows)
    cal = tmp_path / "cal.json"
    r = runner.invoke(app, ["calibrate", str(bank), "--k", "4", "--beta", "0.1", "--kind",
                            "binary", "-o", str(cal)])
    assert r.exit_code == 0, r.output
    run = tmp_path / "kappo"
    cfg = tiny_config(run, "max_steps=1", "estimator=kappo_grpo",
                      f"estimator_options.calibration={cal}",
                      "task.options={num_train: 64, num_eval: 4, max_len: 4, graded: false}")
    tr = Trainer(cfg)
    assert {e["id"] for e in tr.rl_prompts} == {x["prompt_id"] for x in rows}
    tr.run(progress=False)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["phase"] == "train"] == [1]


def test_compare_matched_runs(tmp_path):
    from bestk.compare import run_compare

    table = run_compare(
        ["grpo", "pkpo"], seeds=2, out=tmp_path / "cmp", max_steps=1, overrides=TINY,
        progress=False,
    )
    assert "| grpo |" in table and "| pkpo |" in table and "(start of RL)" in table
    res = json.loads((tmp_path / "cmp/results.json").read_text())
    assert set(res) == {"grpo", "pkpo"} and set(res["grpo"]) == {"seed0", "seed1"}
    # matched: per seed, both estimators start RL from the same weights -> same step-0 eval
    for s in ("seed0", "seed1"):
        assert res["grpo"][s]["start"] == res["pkpo"][s]["start"]
    assert res["grpo"]["seed0"]["start"] != res["grpo"]["seed1"]["start"]
    cfg = __import__("yaml").safe_load((tmp_path / "cmp/pkpo/seed0/config.yaml").read_text())
    assert cfg["estimator_options"] == {"k": 4}
    assert (tmp_path / "cmp/compare.png").is_file() and (tmp_path / "cmp/compare.md").is_file()
    with pytest.raises(ValueError, match="unknown estimator\\(s\\) 'nope'"):
        run_compare(["nope"], seeds=1, out=tmp_path / "x")


def test_compare_per_estimator_options_with_a_per_seed_calibration(tmp_path):
    from bestk.compare import run_compare
    from bestk.kappo import Calibration, calibrate

    for s, beta in ((0, 0.1), (1, 0.3)):  # one calibration per seed (ids 0..63 = train set)
        calibrate({i: [0, 1, 0, 0] for i in range(64)}, k=2, beta=beta, kind="binary").save(
            tmp_path / f"cal{s}.json")
    run_compare(
        ["grpo", "kappo_grpo"], seeds=2, out=tmp_path / "cmp", max_steps=1, overrides=TINY,
        progress=False,
        estimator_options={"kappo_grpo": {"calibration": str(tmp_path / "cal{seed}.json")}},
    )
    yaml = __import__("yaml")
    for s, beta in ((0, 0.1), (1, 0.3)):
        cfg = yaml.safe_load((tmp_path / f"cmp/kappo_grpo/seed{s}/config.yaml").read_text())
        assert cfg["estimator_options"] == {"calibration": str(tmp_path / f"cal{s}.json")}
        assert Calibration.load(cfg["estimator_options"]["calibration"]).beta == beta
        assert yaml.safe_load((tmp_path / f"cmp/grpo/seed{s}/config.yaml").read_text())[
            "estimator_options"] == {}
    res = json.loads((tmp_path / "cmp/results.json").read_text())
    assert res["kappo_grpo"]["seed1"]["start"] == res["grpo"]["seed1"]["start"]
    with pytest.raises(ValueError, match="estimator_options for 'pkpo'"):
        run_compare(["grpo"], seeds=1, out=tmp_path / "x", estimator_options={"pkpo": {"k": 2}})


def test_compare_runs_an_algorithm_variant(tmp_path):
    """``bestk compare --set algorithm=apo``: every run is an @k-A*PO run (one sample per
    prompt by default) that calibrates itself from the seed's shared SFT weights."""
    from bestk.compare import run_compare

    run_compare(["grpo", "rloo"], seeds=1, out=tmp_path / "cmp", max_steps=1,
                overrides=[*KAPPO_TINY, "algorithm=apo", "kappo.k=2"], progress=False)
    yaml = __import__("yaml")
    for name in ("grpo", "rloo"):
        run = tmp_path / "cmp" / name / "seed0"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["algorithm"] == "apo" and cfg["rollout"]["n"] == 1
        assert (run / "calibration.json").is_file()
    cal = [(tmp_path / "cmp" / n / "seed0/calibration.json").read_text() for n in ("grpo", "rloo")]
    assert cal[0] == cal[1]  # the same SFT weights -> the same reference bank


def test_maxrl_on_a_graded_task_uses_success_indicators(tmp_path):
    tr = Trainer(tiny_config(tmp_path / "m", "max_steps=1", "estimator=maxrl"))
    assert tr.binary_advantages
    tr.run(progress=False)
    from bestk.tasks import register_reward

    register_reward("half_for_test", graded=True)(lambda prompt, completion, **ex: 0.5)
    # raw graded rewards to maxrl: refused when the task loads, before any work
    with pytest.raises(ValueError, match="estimator 'maxrl' needs 0/1 rewards, but task "
                       ".* is graded and advantage_reward is 'raw'"):
        Trainer(tiny_config(tmp_path / "r", "max_steps=1", "estimator=maxrl",
                            "advantage_reward=raw", "task.reward=half_for_test"))
    assert not (tmp_path / "r").exists()


def test_ctrl_c_finishes_the_step_checkpoints_and_stops(tmp_path):
    def press_ctrl_c(step, metrics):
        if step == 1:
            tr.stop.requested = True  # what the SIGINT handler does on the first Ctrl-C

    tr = Trainer(tiny_config(tmp_path / "c", "max_steps=5", "checkpoint_every=4"),
                 on_step=press_ctrl_c)
    tr.run(progress=False)
    assert tr.interrupted and tr.step == 1
    assert latest_checkpoint(tmp_path / "c/checkpoints").name == "step_0000001.safetensors"
    again = Trainer.resume(tmp_path / "c")
    assert again.step == 1
    again.run(progress=False)
    assert again.step == 5 and not again.interrupted


def test_sigint_saves_and_exits_130(tmp_path):
    """A real Ctrl-C (SIGINT) to ``bestk train``: finish the step, checkpoint, exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "s"
    args = [sys.executable, "-m", "bestk", "train", "--out", str(out), "--max-steps", "400",
            "--quiet", *set_args(*TINY, "checkpoint_every=1000", "eval.every=1000")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        rows = read_metrics(out / "metrics.jsonl")
        if any(r.get("phase") == "train" and r["step"] >= 2 for r in rows):
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    try:
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert rc == 130, err
    assert "--resume" in err
    last = max(r["step"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train")
    assert latest_checkpoint(out / "checkpoints").name == f"step_{last:07d}.safetensors"


def _signal_run(args: list[str], sig: int, ready: Callable[[Path], bool], out: Path
                ) -> tuple[int, str, float]:
    """Start ``bestk ARGS``, send ``sig`` once ``ready(out)``; ``(exit status, stderr,
    seconds from the signal to the exit)``."""
    import os
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "bestk", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not ready(out):
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        sent = time.time()
        os.kill(proc.pid, sig)
        rc = proc.wait(timeout=60)
        took = time.time() - sent
    finally:
        proc.kill()
        proc.wait()
    return rc, proc.stderr.read().decode(), took


def _sft_logged(out: Path) -> bool:
    return any(r["phase"] == "sft" for r in read_metrics(out / "metrics.jsonl"))


@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_sft_is_acknowledged_and_stops_at_the_next_sft_step(
        tmp_path, signame, status):
    """Ctrl-C (or SIGTERM) at SFT step 10 of 3000 is acknowledged at once and
    stops the run at the next SFT step: no more SFT, no step-0 evaluation, no checkpoint."""
    import signal

    out = tmp_path / "s"
    args = ["train", "--out", str(out), "--quiet", "--max-steps", "3"]
    args += set_args(*TINY, "sft.steps=3000", "eval.every=1000")
    rc, err, took = _signal_run(args, getattr(signal, signame), _sft_logged, out)
    assert rc == status, err
    name = "Ctrl-C" if signame == "SIGINT" else "SIGTERM"
    assert f"note: {name}: stopping at the next SFT step" in err
    assert "interrupted during SFT step" in err and "starts the run over" in err
    assert "Traceback" not in err and took < 30
    rows = read_metrics(out / "metrics.jsonl")
    assert {r["phase"] for r in rows} == {"sft"} and len(rows) < 300  # far from 3000 steps
    assert not list_checkpoints(out / "checkpoints")


def test_sigterm_during_rl_checkpoints_exits_143_and_the_same_command_continues(tmp_path):
    """SIGTERM (a preemption) is Ctrl-C's twin: finish the step, checkpoint, exit 143; the same
    command then continues from that checkpoint."""
    import signal

    out = tmp_path / "t"

    def args(max_steps: int) -> list[str]:
        a = ["train", "--out", str(out), "--quiet", "--max-steps", str(max_steps)]
        a += set_args(*TINY, "checkpoint_every=1000", "eval.every=1000")
        return a

    def trained(o: Path) -> bool:
        return any(r["phase"] == "train" for r in read_metrics(o / "metrics.jsonl"))

    rc, err, _ = _signal_run(args(400), signal.SIGTERM, trained, out)
    assert rc == 143, err
    assert "note: SIGTERM: stopping" in err and "checkpoint saved" in err
    last = max(r["step"] for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "train")
    assert latest_checkpoint(out / "checkpoints").name == f"step_{last:07d}.safetensors"
    tr = Trainer.resume(out, overrides={"max_steps": last + 1})
    tr.run(progress=False)
    assert tr.step == last + 1 and not tr.interrupted


@pytest.mark.parametrize("kappo, where", [
    (False, "an evaluation (0 of 4 prompts)"),
    (True, "the KAPPO reference bank (0 of 16 prompts)"),
])
def test_a_stop_after_sft_stops_the_bank_or_the_step_0_evaluation(tmp_path, capsys, kappo,
                                                                   where):
    """A stop requested during the last SFT step is honoured at the first batch of what comes
    next (the KAPPO reference bank, else the step-0 evaluation): nothing after it runs."""
    cfg = (kappo_config(tmp_path / "k", "algorithm=apo", "kappo.k=2", "sft.steps=10")
           if kappo else tiny_config(tmp_path / "p", "sft.steps=10"))
    tr = Trainer(cfg)
    record = tr.log.record

    def record_then_press(rec):
        record(rec)
        if rec.get("sft_step") == 10:
            tr.stop.requested = True  # what the first Ctrl-C / SIGTERM does

    tr.log.record = record_then_press  # type: ignore[method-assign]
    tr.run(progress=False)
    assert tr.interrupted and tr.step == 0
    assert f"interrupted during {where}, before the run's first checkpoint" in \
        capsys.readouterr().err
    assert [r["phase"] for r in read_metrics(tr.out / "metrics.jsonl")] == ["sft"]
    assert not list_checkpoints(tr.out / "checkpoints")
    assert not (tr.out / "calibration.json").exists()


# ---------------------------------------------------------------------------------------------
# the Trainer is run state; the algorithms use it only through RunContext

ALGORITHM_MODULES = ROOT / "src" / "bestk" / "train" / "algorithms"


def _run_members_used(source: str) -> set[str]:
    """The attributes an algorithm module reads from its run: ``run.x`` / ``self.run.x``."""
    import ast

    used = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id == "run") or (
                isinstance(v, ast.Attribute) and v.attr == "run"
                and isinstance(v.value, ast.Name) and v.value.id == "self"):
            used.add(node.attr)
    return used


def test_the_algorithms_use_exactly_the_run_context(tmp_path):
    """``RunContext`` names what the algorithms use of the run, no more and no less, and the
    Trainer is one."""
    from bestk.train.algorithms._base import RunContext

    members = {n for n in vars(RunContext) if not n.startswith("_")} | set(
        RunContext.__annotations__)
    used = set().union(*(_run_members_used(p.read_text())
                         for p in ALGORITHM_MODULES.glob("*.py")))
    assert used == members, (used - members, members - used)
    assert _run_members_used("def f(self):\n    x = self.run.cfg.rollout\n    run.say('a')\n") \
        == {"cfg", "say"}
    tr = Trainer(tiny_config(tmp_path / "r", "max_steps=1"))
    try:
        assert isinstance(tr, RunContext)
    finally:
        tr.close()


def _takes_a_trainer(fn) -> bool:
    """Whether a function has a parameter annotated ``Trainer`` or named ``tr`` / ``trainer``."""
    import ast

    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return any(a.arg in ("tr", "trainer") or (a.annotation is not None and "Trainer" in {
        n.id for n in ast.walk(a.annotation) if isinstance(n, ast.Name)} | {
        n.value for n in ast.walk(a.annotation) if isinstance(n, ast.Constant)}) for a in args)


def test_the_trainer_class_stays_small():
    """The Trainer holds run state (config, policy, optimizer, run directory, log) and its
    methods own the loop; SFT, calibration planning, set-up, the optimizer's step, the log and
    the console live in their own modules, with state of their own where they have some. The
    size counted is the class plus every function in the package that takes a Trainer (a
    module-level function mutating one would be the class's code moved out, not gone)."""
    import ast

    import bestk.train.trainer as trainer_module

    tree = ast.parse(Path(trainer_module.__file__).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer"]
    size = cls.end_lineno - cls.lineno + 1
    outside = []
    for path in sorted((Path(trainer_module.__file__).parents[1]).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    _takes_a_trainer(node) and not (path == Path(trainer_module.__file__) and
                                                    cls.lineno <= node.lineno <= cls.end_lineno):
                outside.append(f"{path.name}:{node.name}")
                size += node.end_lineno - node.lineno + 1
    assert size <= 350, (size, outside)
    fake = ast.parse("def f(tr):\n    tr.step = 1\ndef g(x: 'Trainer'):\n    pass\n"
                     "def h(x: int):\n    pass\n")
    assert [_takes_a_trainer(n) for n in fake.body] == [True, True, False]
