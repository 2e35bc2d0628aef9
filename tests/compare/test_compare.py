"""``bestk compare``: matched methods, A/A controls, per-method overrides, the learning-rate
sweep on a validation split, KAPPO on the same prompts, workers, atomic results and resume."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from bestk._seeds import CONTROL_SAMPLING
from bestk.cli import app
from bestk.compare import KappoAuto, Method, grid, keys, run_compare
from bestk.compare.methods import make_methods, method_slug, run_config
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.run.directory import read_metrics
from bestk.train.trainer import Trainer
from tests import conftest

TINY = [*conftest.TINY, "checkpoint_every=1"]


def _ends(res: dict) -> dict:
    return {lb: {s: (r["start"], r["end"]) for s, r in runs.items()} for lb, runs in res.items()}


def test_sampling_seed_changes_only_the_sampling_noise(tmp_path):
    def run(name, *extra):
        cfg = TrainConfig()
        apply_overrides(cfg, [*TINY, f"out={tmp_path / name}", "max_steps=2", *extra])
        tr = Trainer(cfg)
        init = {k: v.clone() for k, v in tr.model.state_dict().items()}
        tr.run(progress=False)
        rows = [r for r in read_metrics(tmp_path / name / "metrics.jsonl")
                if r["phase"] == "train"]
        return init, [{k: v for k, v in r.items() if not conftest.is_timing(k)} for r in rows]

    init_a, a = run("a")
    init_b, b = run("b", "sampling_seed=0")  # = seed: the default, bit for bit
    init_c, c = run("c", "sampling_seed=7")
    assert a == b
    assert all((init_a[k] == init_c[k]).all() for k in init_a)  # same initial weights
    assert a != c  # different sampled completions


def test_estimator_options_come_from_the_registry(tmp_path):
    """An estimator that is not the base config's takes its registered ``default_options``
    (``pkpo``: k = 4), and a ``group_bounded`` option is clamped to the group size."""
    base = TrainConfig()
    apply_overrides(base, [*TINY, "rollout.n=2"])
    cfg = run_config(base, Method("pkpo", "pkpo"), 0, 0, tmp_path / "a")
    assert cfg.estimator_options == {"k": 2}  # default 4, at most rollout.n = 2
    apply_overrides(base, ["rollout.n=8"])
    cfg = run_config(base, Method("pkpo", "pkpo"), 0, 0, tmp_path / "b")
    assert cfg.estimator_options == {"k": 4}
    cfg = run_config(base, Method("p3", "pkpo", {"k": 3}), 0, 0, tmp_path / "c")
    assert cfg.estimator_options == {"k": 3}


def test_controls_overrides_and_matched_configs(tmp_path):
    run_compare([Method("grpo", "grpo"),
                 Method("grpo (success)", "grpo", overrides=("advantage_reward=success",)),
                 "maxrl"], seeds=2, out=tmp_path / "cmp", max_steps=1, overrides=TINY,
                progress=False, controls=["grpo"])
    res = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert list(res) == ["grpo", "grpo (success)", "maxrl", "grpo (A/A)"]
    reward = {lb: {r["run"]["reward"] for r in runs.values()} for lb, runs in res.items()}
    assert reward == {"grpo": {"graded"}, "grpo (success)": {"success"}, "maxrl": {"success"},
                      "grpo (A/A)": {"graded"}}
    for s in ("seed0", "seed1"):
        runs = {lb: res[lb][s]["run"] for lb in res}
        assert len({r["prompts"] for r in runs.values()}) == 1  # same prompt set
        assert len({r["rollouts"] for r in runs.values()}) == 1  # same budget
        assert runs["grpo (A/A)"]["seed"] == runs["grpo"]["seed"]
        assert runs["grpo (A/A)"]["sampling_seed"] == CONTROL_SAMPLING.seed(runs["grpo"]["seed"])
        assert res["grpo (A/A)"][s]["end"] != res["grpo"][s]["end"]  # not bit-identical
        # every non-control method starts RL from the same weights: same step-0 evaluation
        assert res["maxrl"][s]["start"] == res["grpo"][s]["start"]
    cfg = yaml.safe_load((tmp_path / "cmp" / "grpo_A_A" / "seed1" / "config.yaml").read_text())
    assert cfg["sampling_seed"] == 1 + 100_003 and cfg["seed"] == 1  # the committed offset
    with pytest.raises(ValueError, match="may not change"):
        run_compare([Method("x", "grpo", overrides=("model.hidden_size=64",))], seeds=1,
                    out=tmp_path / "bad", max_steps=1, overrides=TINY, progress=False)
    with pytest.raises(ValueError, match="--control 'nope'"):
        run_compare(["grpo"], seeds=1, out=tmp_path / "bad", max_steps=1, overrides=TINY,
                    progress=False, controls=["nope"])


def test_resume_skips_finished_runs_and_continues_an_interrupted_one(tmp_path, monkeypatch):
    kw = dict(seeds=1, max_steps=3, overrides=TINY, progress=False)
    ref = run_compare(["grpo", "pkpo"], out=tmp_path / "ref", **kw)
    assert ref
    ref_res = json.loads((tmp_path / "ref" / "results.json").read_text())

    real = Trainer.rl_step
    calls = {"n": 0}

    def dying(self, step):
        if self.cfg.estimator == "pkpo" and step == 3:
            raise KeyboardInterrupt  # a kill in the middle of the second run
        calls["n"] += 1
        return real(self, step)

    monkeypatch.setattr(Trainer, "rl_step", dying)
    with pytest.raises(KeyboardInterrupt):
        run_compare(["grpo", "pkpo"], out=tmp_path / "cut", **kw)
    done = tmp_path / "cut" / "grpo" / "seed0" / "result.json"
    assert done.exists() and not (tmp_path / "cut" / "pkpo" / "seed0" / "result.json").exists()
    stamp = done.stat().st_mtime_ns
    monkeypatch.setattr(Trainer, "rl_step", real)
    steps = []
    monkeypatch.setattr(Trainer, "rl_step", lambda self, step: steps.append(step) or real(
        self, step))
    run_compare(["grpo", "pkpo"], out=tmp_path / "cut", **kw)
    assert done.stat().st_mtime_ns == stamp  # the finished run was not redone
    assert steps == [3]  # the interrupted run continued from its step-2 checkpoint
    res = json.loads((tmp_path / "cut" / "results.json").read_text())
    assert _ends(res) == _ends(ref_res)  # bit-identical to the uninterrupted grid


@pytest.mark.slow
def test_workers_give_the_results_of_one_process(tmp_path):
    kw = dict(seeds=2, max_steps=1, overrides=TINY, progress=False, controls=["grpo"])
    run_compare(["grpo", "argmaxrl"], out=tmp_path / "one", **kw)
    run_compare(["grpo", "argmaxrl"], out=tmp_path / "two", workers=2, **kw)
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert _ends(one) == _ends(two)


def test_learning_rate_sweep_on_a_validation_split(tmp_path):
    run_compare(["grpo", "pkpo"], seeds=1, out=tmp_path / "cmp", max_steps=1, overrides=TINY,
                progress=False, lr_sweep=[1e-3, 3e-3], sweep_seeds=1, val_prompts=8,
                controls=["grpo"])
    sel = json.loads((tmp_path / "cmp" / "sweep" / "selection.json").read_text())
    assert set(sel["selected"]) == {"grpo", "pkpo", "grpo (A/A)"}
    assert sel["selected"]["grpo (A/A)"] == sel["selected"]["grpo"]
    from bestk.lr_sweep import best_rate, is_interior

    for lb, rows in sel["scores"].items():
        lrs = [r["lr"] for r in rows]
        # the starting grid, then rates past an edge until the choice is interior (or 3 more)
        assert {1e-3, 3e-3} <= set(lrs) and lrs == sorted(lrs) == sel["grids"][lb]
        assert sel["selected"][lb] == best_rate({r["lr"]: r["score"] for r in rows})
        assert sel["interior"][lb] == is_interior(sel["selected"][lb], lrs)
        assert sel["interior"][lb] or len(lrs) == 2 + 3
    res = json.loads((tmp_path / "cmp" / "results.json").read_text())
    for lb in ("grpo", "pkpo", "grpo (A/A)"):
        assert res[lb]["seed0"]["run"]["lr"] == sel["selected"][lb]
    # the sweep trains on the validation task: its held-out prompts are training prompts of
    # the test runs, never their test prompts
    cfg = yaml.safe_load((tmp_path / "cmp" / "sweep" / "lr0.001" / "grpo" / "seed0" /
                          "config.yaml").read_text())
    assert cfg["task"]["name"] == "validation" and cfg["task"]["options"]["size"] == 8
    from bestk.tasks import load_task

    val = load_task("validation", cfg["task"]["options"], seed=cfg["seed"])
    full = load_task("strings", cfg["task"]["options"]["options"], seed=cfg["seed"])
    assert {e["id"] for e in val.eval} <= {e["id"] for e in full.train}
    assert not {e["id"] for e in val.train} & {e["id"] for e in val.eval}


def test_validation_runs_are_the_sweeps_runs_at_that_rate(tmp_path):
    """validation_runs (a pilot) trains exactly what one rate of the sweep trains: same split,
    seed and SFT start, so the same validation metrics; bad arguments are refused."""
    run_compare(["grpo"], seeds=1, out=tmp_path / "cmp", max_steps=1, overrides=TINY,
                progress=False, lr_sweep=[1e-3], sweep_seeds=1, val_prompts=8)
    swept = json.loads((tmp_path / "cmp" / "sweep" / "lr0.001" / "grpo" / "seed0" /
                        "result.json").read_text())
    got = grid.validation_runs([Method("grpo", "grpo")], lr=1e-3, out=tmp_path / "pilot",
                              overrides=[*TINY, "max_steps=1"], val_prompts=8)
    assert set(got) == {"grpo"} and set(got["grpo"]) == {"seed0"}
    assert got["grpo"]["seed0"]["end"] == swept["end"]
    assert got["grpo"]["seed0"]["start"] == swept["start"]
    assert (tmp_path / "pilot" / "lr0.001" / "grpo" / "seed0" / "result.json").exists()
    for kw, msg in (({"lr": 0.0}, "lr must be > 0"), ({"lr": 1e-3, "seeds": 0}, "seeds"),
                    ({"lr": 1e-3, "workers": 0}, "workers")):
        with pytest.raises(ValueError, match=msg):
            grid.validation_runs([Method("grpo", "grpo")], out=tmp_path / "bad", **kw)
    with pytest.raises(ValueError, match="at least one method"):
        grid.validation_runs([], lr=1e-3, out=tmp_path / "bad")


def test_kappo_auto_calibrates_on_every_training_prompt(tmp_path):
    run_compare(["grpo", Method("kappo", "kappo_grpo", {"calibration": "auto"})], seeds=1,
                out=tmp_path / "cmp", max_steps=1, overrides=TINY, progress=False,
                kappo=KappoAuto(k=2, beta=0.1, bank_n=4))
    from bestk.kappo import Calibration

    cal = Calibration.load(tmp_path / "cmp" / "_calibration" / "seed0.json")
    assert cal.num_prompts == 64 and cal.k == 2  # every training prompt of the task
    res = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert res["kappo"]["seed0"]["run"]["prompts"] == res["grpo"]["seed0"]["run"]["prompts"]
    assert res["kappo"]["seed0"]["run"]["reward"] == "success"
    with pytest.raises(ValueError, match="calibration 'auto'"):
        run_compare(["grpo", Method("kappo", "kappo_grpo", {"calibration": "auto"})], seeds=1,
                    out=tmp_path / "bad", max_steps=1, overrides=TINY, progress=False)


def test_compare_cli(tmp_path):
    runner = CliRunner()
    args = ["compare", "--estimators", "grpo,grpo_s=grpo", "--set-for",
            "grpo_s:advantage_reward=success", "--control", "grpo", "--seeds", "1",
            "--max-steps", "1", "--out", str(tmp_path / "c"), "--quiet"]
    for s in TINY:
        args += ["--set", s]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert set(res) == {"grpo", "grpo_s", "grpo (A/A)"}
    assert res["grpo_s"]["seed0"]["run"]["reward"] == "success"
    bad = runner.invoke(app, ["compare", "--estimators", "grpo", "--set-for", "nope:x=1",
                              "--out", str(tmp_path / "d")])
    assert bad.exit_code == 2 and "error:" in bad.output and "Traceback" not in bad.output
    bad = runner.invoke(app, ["compare", "--estimators", "grpo", "--workers", "0",
                              "--out", str(tmp_path / "d")])
    assert bad.exit_code == 2 and "--workers" in bad.output
    bad = runner.invoke(app, ["compare", "--estimators", "grpo", "--max-extensions", "-1",
                              "--out", str(tmp_path / "e")])
    assert bad.exit_code == 2 and "--max-extensions" in bad.output
    bad = runner.invoke(app, ["compare", "--estimators", "grpo", "--select-by", "pass@1",
                              "--out", str(tmp_path / "f")])
    assert bad.exit_code == 2 and "need an lr_sweep" in bad.output
    bad = runner.invoke(app, ["compare", "--estimators", "grpo", "--lr-sweep", "1e-3,3e-3",
                              "--common-lr-from", "nope", "--out", str(tmp_path / "g")])
    assert bad.exit_code == 2 and "common_lr_from 'nope'" in bad.output


@pytest.mark.parametrize("args, line", [
    (["--estimators", "grpo,grpo", "--max-steps", "1"],
     "--estimators lists 'grpo' twice; give each method once (a variant of an estimator gets a "
     "label of its own: grpo,grpo_2=grpo)"),
    (["--estimators", "grpo", "--max-steps", "2", "--set", "max_steps=1"],
     "--max-steps 2 and --set max_steps=1 disagree; give one of them"),
    (["--estimators", "grpo", "--set", "seed=1", "--set", "seed=2"],
     "--set seed=1 and --set seed=2 both set 'seed'; give it once"),
    (["--estimators", "grpo", "--set-for", "grpo:optim.lr=1e-3", "--set-for", "grpo:optim.lr=0.01"],
     "--set-for grpo:optim.lr=1e-3 and --set-for grpo:optim.lr=0.01 both set 'optim.lr'; give it "
     "once"),
])
def test_compare_refuses_a_method_twice_and_a_flag_its_set_contradicts(tmp_path, args, line):
    from tests.conftest import one_line_error

    out = tmp_path / "c"
    sets = [x for s in TINY for x in ("--set", s)]
    r = CliRunner().invoke(app, ["compare", "--seeds", "1", "--out", str(out), "--quiet",
                                 *sets, *args])
    assert one_line_error(r) == f"error: {line}"
    assert not out.exists()


def test_method_slugs_are_distinct_directory_names():
    assert method_slug("grpo (A/A)") == "grpo_A_A"
    assert method_slug("softmax_grpo(tau=0.1)") == "softmax_grpo_tau=0.1"
    with pytest.raises(ValueError, match="same directory"):
        make_methods([Method("a b", "grpo"), Method("a_b", "grpo")], None, ())


def test_run_keys_ignore_config_keys_left_at_their_defaults():
    """A config key added later with a default must not change the keys of finished runs
    (they stay resumable); a changed value must."""
    from bestk.compare.keys import non_default

    old_defaults = {"optim": {"lr": 3e-4}, "estimator_options": {}}
    new_defaults = {"optim": {"lr": 3e-4, "new_knob": 1}, "estimator_options": {}, "extra": {}}
    run = {"optim": {"lr": 1e-3}, "estimator_options": {"tau": 0.3}}
    assert non_default(run, old_defaults) == {"optim": {"lr": 1e-3},
                                               "estimator_options": {"tau": 0.3}}
    assert non_default({**run, "optim": {"lr": 1e-3, "new_knob": 1}, "extra": {}},
                        new_defaults) == non_default(run, old_defaults)
    assert non_default({**run, "optim": {"lr": 1e-3, "new_knob": 2}}, new_defaults) != \
        non_default(run, old_defaults)
    assert non_default(old_defaults, old_defaults) is None


def test_kappo_runs_of_a_seed_share_one_reference_bank(tmp_path):
    """@k-A*PO (k = 1, 2, and an A/A control) and @k-DPO runs of a seed read one bank, sampled
    once with the completions @k-DPO needs; every run is the run that samples its own bank."""
    from bestk.kappo import Calibration
    from tests.conftest import KAPPO_TINY

    methods = [Method("apo(k=1)", "grpo", overrides=("algorithm=apo", "kappo.k=1")),
               Method("apo(k=2)", "grpo", overrides=("algorithm=apo", "kappo.k=2")),
               Method("dpo(k=2)", "grpo", overrides=("algorithm=dpo", "kappo.k=2"))]
    kw = dict(seeds=1, max_steps=1, overrides=KAPPO_TINY, progress=False,
              controls=["apo(k=1)"])
    run_compare(methods, out=tmp_path / "shared", **kw)
    run_compare(methods, out=tmp_path / "own", share_bank=False, **kw)
    banks = sorted((tmp_path / "shared" / "_bank").iterdir())
    assert len(banks) == 1 and {p.name for p in banks[0].iterdir()} == {
        "bank.jsonl", "bank_tokens.safetensors", "calibration.json", "bank.key"}
    assert not (tmp_path / "own" / "_bank").exists()
    shared = json.loads((tmp_path / "shared" / "results.json").read_text())
    own = json.loads((tmp_path / "own" / "results.json").read_text())
    assert _ends(shared) == _ends(own)
    for lb, runs in shared.items():
        a, b = runs["seed0"]["run"], own[lb]["seed0"]["run"]
        assert a["bank_shared"] and not b["bank_shared"]
        assert a["bank"] == b["bank"] == 16 * 8 and a["reward"] == "success"
        assert a["estimator"] is None and a["prompts"] == shared["apo(k=1)"]["seed0"]["run"][
            "prompts"]
        slug = method_slug(lb)
        ca, cb = (Calibration.load(tmp_path / d / slug / "seed0" / "calibration.json")
                  for d in ("shared", "own"))
        assert ca.checksum == cb.checksum and ca.k == cb.k
    assert shared["apo(k=1)"]["seed0"]["run"]["rollouts"] == 1 * 2 * 1  # steps x prompts x n
    assert shared["dpo(k=2)"]["seed0"]["run"]["rollouts"] == 0
    # a rerun reuses the bank and the finished runs
    bank_mtime = (banks[0] / "bank.jsonl").stat().st_mtime_ns
    run_compare(methods, out=tmp_path / "shared", **kw)
    assert (banks[0] / "bank.jsonl").stat().st_mtime_ns == bank_mtime


def test_one_common_rate_chosen_by_one_methods_validation_metric(tmp_path):
    out = tmp_path / "cmp"
    run_compare(["grpo", "pkpo"], seeds=1, out=out, max_steps=1, overrides=TINY,
                progress=False, lr_sweep=[1e-3, 3e-3], sweep_seeds=1, val_prompts=8,
                select_by="pass@1", common_lr_from="grpo", max_extensions=0)
    sel = json.loads((out / "sweep" / "selection.json").read_text())
    assert list(sel["scores"]) == ["grpo"] and sel["common_lr_from"] == "grpo"
    assert sel["select_by"] == "validation pass@1"
    for row in sel["scores"]["grpo"]:  # the score is the sweep runs' mean validation pass@1
        res = json.loads((out / "sweep" / f"lr{row['lr']:g}" / "grpo" / "seed0" /
                          "result.json").read_text())
        assert row["score"] == pytest.approx(res["end"]["pass@1"])
    res = json.loads((out / "results.json").read_text())
    assert res["pkpo"]["seed0"]["run"]["lr"] == res["grpo"]["seed0"]["run"]["lr"] == \
        sel["selected"]["grpo"]
    with pytest.raises(ValueError, match="common_lr_from 'nope'"):
        run_compare(["grpo"], seeds=1, out=tmp_path / "x", max_steps=1, overrides=TINY,
                    progress=False, lr_sweep=[1e-3, 3e-3], common_lr_from="nope")
    with pytest.raises(ValueError, match="need an lr_sweep"):
        run_compare(["grpo"], seeds=1, out=tmp_path / "y", max_steps=1, overrides=TINY,
                    progress=False, select_by="pass@1")


def test_weights_digest_reads_the_tensors_not_the_file(tmp_path):
    import torch

    state = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(2),
             "steps": torch.tensor(3), "empty": torch.zeros(0)}  # 0-dim and empty tensors too
    torch.save(state, tmp_path / "one.pt")
    torch.save({"empty": torch.zeros(0), "steps": torch.tensor(3), "a": torch.ones(2),
                "b": state["b"].clone()}, tmp_path / "two.pt")
    assert keys.weights_digest(tmp_path / "one.pt") == keys.weights_digest(tmp_path / "two.pt")
    nudged = state["b"].clone()
    nudged[1, 2] = torch.nextafter(nudged[1, 2], torch.tensor(10.0))  # one ulp
    torch.save({**state, "b": nudged}, tmp_path / "ulp.pt")
    torch.save({**state, "b": state["b"].double()}, tmp_path / "f64.pt")
    torch.save({**state, "b": state["b"].reshape(3, 2)}, tmp_path / "shape.pt")
    digests = {keys.weights_digest(tmp_path / f"{n}.pt") for n in ("one", "ulp", "f64", "shape")}
    assert len(digests) == 4


def test_runs_and_banks_made_from_other_sft_weights_are_redone(tmp_path):
    """A grid resumed where the seed's SFT weights came out different in the last bits (they
    were recomputed on another machine) redoes what was made from the old weights, so the
    runs of a seed stay paired; with unchanged weights nothing is redone."""
    import torch

    from tests.conftest import KAPPO_TINY

    methods = [Method("apo(k=1)", "grpo", overrides=("algorithm=apo", "kappo.k=1"))]
    kw = dict(seeds=1, max_steps=1, overrides=KAPPO_TINY, progress=False)
    out = tmp_path / "cmp"
    run_compare(methods, out=out, **kw)
    sft = out / "_sft" / "seed0.pt"
    result = out / method_slug("apo(k=1)") / "seed0" / "result.json"
    bank = next((out / "_bank").iterdir()) / "bank.jsonl"
    first = json.loads(result.read_text())
    assert first["run"]["reference_weights"] == keys.weights_digest(sft)
    stamps = (result.stat().st_mtime_ns, bank.stat().st_mtime_ns)
    run_compare(methods, out=out, **kw)
    assert (result.stat().st_mtime_ns, bank.stat().st_mtime_ns) == stamps  # nothing redone

    state = torch.load(sft)
    name = next(n for n, t in state.items() if t.is_floating_point() and t.numel())
    flat = state[name].view(-1)
    flat[0] = torch.nextafter(flat[0], flat[0] + 1)  # what a different CPU's kernels can do
    torch.save(state, sft)  # the SFT key beside it is unchanged: same configuration
    run_compare(methods, out=out, **kw)
    again = json.loads(result.read_text())
    assert again["run"]["reference_weights"] == keys.weights_digest(sft) != first[
        "run"]["reference_weights"]
    assert again["key"] != first["key"]
    assert result.stat().st_mtime_ns != stamps[0] and bank.stat().st_mtime_ns != stamps[1]


def test_recomputed_sft_weights_get_a_new_kappo_calibration(tmp_path):
    from bestk.kappo import Calibration, calibrate

    kw = dict(seeds=1, out=tmp_path / "cmp", max_steps=1, overrides=TINY, progress=False,
              kappo=KappoAuto(k=2, beta=0.1, bank_n=4))
    methods = [Method("kappo", "kappo_grpo", {"calibration": "auto"})]
    run_compare(methods, **kw)
    cal = tmp_path / "cmp" / "_calibration" / "seed0.json"
    want = Calibration.load(cal).checksum
    (tmp_path / "cmp" / "_sft" / "seed0.pt.json").unlink()  # the weights must be recomputed
    # ... so a calibration left from the old ones must not survive
    calibrate({0: [0.0, 1.0]}, k=2, beta=0.1, kind="binary").save(cal)
    assert Calibration.load(cal).checksum != want
    run_compare(methods, **kw)
    assert Calibration.load(cal).checksum == want
