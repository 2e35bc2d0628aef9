"""The digits lab: batched MLP, exact evaluation, the validation sweep, the per-seed data,
pairing, the A/A control, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bestk.lab import digits as dg
from bestk.lab.digits import (
    LEARNERS,
    BatchedMLP,
    DigitsConfig,
    Problem,
    RunSpec,
    Slot,
    evaluate_slots,
    reward_matrix,
    run_digits,
    run_slots,
)


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    cfg = DigitsConfig.fast()
    results = run_digits(cfg, out, progress=False)
    return cfg, out, results


def test_testbed_data_schema(fast_run):
    cfg, out, results = fast_run
    data = json.loads((out / "testbeds.json").read_text())
    assert set(data) == {"digits-binary", "digits-graded"}
    for tid, tb in data.items():
        assert tb["ks"] == list(cfg.ks) and tb["seeds"] == list(range(cfg.seeds))
        reward = {"digits-binary": "binary", "digits-graded": "graded"}[tid]
        expected = {lb for lb in cfg.learners if LEARNERS[lb].applies(reward, cfg.n)}
        assert set(tb["methods"]) == expected
        for m in tb["methods"].values():
            for part in ("start", "end"):
                vals = [m[part][f"pass@{k}"] for k in cfg.ks]
                assert all(len(v) == cfg.seeds for v in vals)
                arr = np.asarray(vals)
                assert np.all((arr >= 0) & (arr <= 1))
                assert np.all(np.diff(arr, axis=0) >= -1e-12)  # non-decreasing in k
            if m["config"]["rollouts"] > 0:
                shares = sum(np.asarray(m["end"][f"alloc{b}"]) for b in dg.BIN_LABELS)
                assert np.allclose(shares, 1.0)
            assert m["config"]["lr"] in m["config"]["lr_grid"]
        # the A/A control takes GRPO's learning rate and is not a copy of GRPO's runs
        aa, grpo = tb["methods"]["grpo (A/A)"], tb["methods"]["grpo"]
        assert aa["config"]["lr"] == grpo["config"]["lr"]
        assert aa["config"]["control_of"] == "grpo"
        assert aa["start"] == grpo["start"]  # same initial weights per seed
        assert aa["end"]["pass@1"] != grpo["end"]["pass@1"]  # independent sampling noise
        # every learner of a seed starts from the same weights
        starts = {json.dumps(m["start"]["pass@1"]) for m in tb["methods"].values()}
        assert len(starts) == 1
        assert tb["sweep"]["grid"] == list(cfg.lr_grid)
        assert set(tb["sweep"]["scores"]) == {lb for lb in expected if lb != "grpo (A/A)"
                                              and not LEARNERS[lb].rate_of}
        # a learner at another learner's rate takes that rate (and its grid)
        common = tb["methods"]["softmax_grpo(tau=0.1) @ grpo's rate"]["config"]
        assert common["lr"] == grpo["config"]["lr"]
        assert common["lr_grid"] == grpo["config"]["lr_grid"]
    assert "maxrl" not in data["digits-graded"]["methods"]  # binary rewards only
    for name in ("results.md", "digits.png", "config.json", "results.json",
                 "settings/binary.json"):
        assert (out / name).stat().st_size > 0


def test_exact_ml_learns(fast_run):
    _, out, _ = fast_run
    ml = json.loads((out / "testbeds.json").read_text())["digits-binary"]["methods"]["ml"]
    # 30 steps of cross-entropy on a random MLP: far above the 10% chance level.
    assert min(ml["end"]["pass@1"]) > 0.3 > max(ml["start"]["pass@1"])


def test_rerun_resumes_finished_settings(fast_run, monkeypatch):
    cfg, out, results = fast_run

    def boom(*a, **k):
        raise AssertionError("a finished setting was recomputed")

    import bestk.lab.digits.run as run_mod

    monkeypatch.setattr(run_mod, "sweep_and_test", boom)
    again = run_digits(cfg, out, progress=False)
    assert again == json.loads(json.dumps(results))


def test_learning_rate_per_slot():
    """Two slots of one learner and seed differ only by their learning rate and sampling."""
    problem = dg.make_problem("binary", split="validation", test_fraction=0.3,
                              val_fraction=0.2, seed=0)
    spec = RunSpec(n=4, steps=5, batch_size=16, hidden=8, ks=(1,), eval_every=5, seed=0)
    ml = LEARNERS["ml"]
    res = run_slots(problem, [Slot(ml, 1e-4, 0), Slot(ml, 1e-1, 0), Slot(ml, 1e-4, 0)], spec)
    p = res["end"]["pass@1"]
    assert p[0] == pytest.approx(p[2], abs=1e-12)  # ML does not sample: same lr, same result
    assert abs(p[1] - p[0]) > 1e-3
    assert res["start"]["pass@1"][0] == res["start"]["pass@1"][1]


def test_validation_split_comes_from_the_training_images_only():
    kw = dict(test_fraction=0.3, val_fraction=0.2, seed=0)
    test = dg.make_problem("binary", split="test", **kw)
    val = dg.make_problem("binary", split="validation", **kw)
    train_rows = {tuple(r) for r in test.x_train.numpy().tolist()}
    assert val.x_train.shape[0] + val.x_eval.shape[0] == test.x_train.shape[0]
    for x in (val.x_train, val.x_eval):
        assert all(tuple(r) in train_rows for r in x.numpy().tolist())
    assert val.data_id != test.data_id


def test_batched_mlp_equals_separate_models():
    g = torch.Generator().manual_seed(0)
    inits = [BatchedMLP.init(5, 7, 3, g) for _ in range(3)]
    model = BatchedMLP(inits)
    x = torch.randn(3, 4, 5, generator=g)
    out = model(x)
    for i, p in enumerate(inits):
        ref = torch.relu(x[i] @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        torch.testing.assert_close(out[i], ref)


def test_exact_evaluation_matches_sampling():
    """pass@k / best@k of evaluate_slots vs a Monte Carlo of the same policy."""
    g = torch.Generator().manual_seed(1)
    model = BatchedMLP([BatchedMLP.init(6, 8, 10, g)])
    x = torch.randn(20, 6, generator=g)
    y = torch.randint(0, 10, (20,), generator=g)
    problem = Problem(x, y, x, y, "graded")
    ev = evaluate_slots(model, problem, [1, 3])
    with torch.no_grad():
        probs = torch.softmax(model(x[None]).double(), -1)[0]
    draws = torch.multinomial(probs, 3 * 40_000, replacement=True, generator=g).view(20, -1, 3)
    rmat = reward_matrix("graded")
    r = rmat[y[:, None, None].expand_as(draws), draws]
    assert float(ev["best"][0, 1]) == pytest.approx(float(r.max(-1).values.mean()), abs=5e-3)
    hit = (draws == y[:, None, None]).any(-1).double().mean()
    assert float(ev["pass"][0, 1]) == pytest.approx(float(hit), abs=5e-3)


def test_reward_matrix():
    b, gr = reward_matrix("binary"), reward_matrix("graded")
    assert torch.equal(b, torch.eye(10, dtype=torch.float64))
    assert float(gr[3, 3]) == 1.0 and float(gr[0, 9]) == 0.0
    assert float(gr[2, 5]) == pytest.approx(1 - 3 / 9)
    with pytest.raises(ValueError, match="reward variant"):
        reward_matrix("nope")


def test_config_validation():
    with pytest.raises(ValueError, match="unknown learner"):
        DigitsConfig(learners=("ml", "nope")).validate()
    with pytest.raises(ValueError, match="A/A control"):
        DigitsConfig(learners=("ml", "grpo (A/A)")).validate()
    with pytest.raises(ValueError, match="reward variant"):
        DigitsConfig(rewards=("binary", "x")).validate()
    with pytest.raises(ValueError, match="n must be"):
        DigitsConfig(n=1).validate()
    with pytest.raises(ValueError, match="learning rates"):
        DigitsConfig(lr_grid=(float("nan"),)).validate()
    assert DigitsConfig().key() != DigitsConfig(steps=1).key()
    assert DigitsConfig().key() == DigitsConfig(threads=2).key()


def test_plot_gives_each_learner_one_colour_and_every_panel_a_legend(tmp_path, monkeypatch):
    """The graded panel trains argmaxrl where the binary one trains maxrl: each line keeps its
    learner's colour and label in every panel, and each top panel has its own legend."""
    from bestk.lab.common.io import metric_key
    from bestk.lab.digits import LEARNERS, learner_colour, plot

    ks = [1, 2]
    learners = {"binary": ["grpo", "maxrl", "pkpo(k=4)"], "graded": ["grpo", "argmaxrl"]}
    results = {}
    for reward, lbs in learners.items():
        name = dg.REWARD_KINDS[reward].metric
        slots = [{"learner": lb} for lb in lbs]
        results[reward] = {"ks": ks, "n": 8, "learners": lbs, "test": {
            "slots": slots, "end": {metric_key(name, k): [0.5] * len(lbs) for k in ks},
            "curve_pass@1": [[0.1, 0.2]] * len(lbs), "curve_steps": [0, 1]}}
    captured = {}
    import bestk.lab.digits.report as report_mod

    monkeypatch.setattr(report_mod, "save_figure",
                        lambda fig, path: captured.setdefault("fig", fig))
    plot(results, tmp_path / "d.png")
    axes = captured["fig"].axes
    colours = {}
    for ax in axes:
        for line in ax.get_lines():
            colours.setdefault(line.get_label(), set()).add(line.get_color())
    assert set(colours) == {"grpo", "maxrl", "pkpo(k=4)", "argmaxrl"}
    for lb, cs in colours.items():
        assert cs == {learner_colour(lb)}, lb  # one colour per learner in every panel
    assert len({learner_colour(lb) for lb in LEARNERS}) == len(LEARNERS)  # all distinct
    top = axes[0], axes[1]  # row 0: binary, graded
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in top]
    assert legends == [learners["binary"], learners["graded"]]  # argmaxrl is labelled argmaxrl
    with pytest.raises(ValueError, match="unknown learner"):
        learner_colour("nope")


def test_a_learner_at_another_learners_rate_needs_that_learner():
    with pytest.raises(ValueError, match="another learner's rate"):
        DigitsConfig(learners=("ml", "softmax_grpo(tau=0.1) @ grpo's rate")).validate()
    DigitsConfig(learners=("grpo", "softmax_grpo(tau=0.1) @ grpo's rate")).validate()


def test_exploratory_learners_change_no_other_learners_numbers(fast_run, tmp_path):
    """The exploratory learners (no claim names them) train as a batch of their own with
    rollouts of their own: without them every other learner's per-seed data are the same,
    bit for bit; with them they start from the same weights and are marked exploratory."""
    cfg, out, _ = fast_run
    with_them = json.loads((out / "testbeds.json").read_text())
    explore = [lb for lb in cfg.learners if LEARNERS[lb].exploratory]
    assert explore and "loo_max" in explore
    from dataclasses import asdict

    without = DigitsConfig(**{**asdict(cfg),
                              "learners": tuple(lb for lb in cfg.learners if lb not in explore)})
    run_digits(without, tmp_path, progress=False)
    alone = json.loads((tmp_path / "testbeds.json").read_text())
    for tid, tb in with_them.items():
        assert set(tb["methods"]) - set(alone[tid]["methods"]) <= set(explore)
        for lb, m in alone[tid]["methods"].items():
            assert tb["methods"][lb] == m, (tid, lb)
            assert m["config"]["exploratory"] is False
        for lb in set(tb["methods"]) & set(explore):
            m = tb["methods"][lb]
            assert m["config"]["exploratory"] is True
            assert m["start"] == tb["methods"]["grpo"]["start"]  # paired: the same weights
            assert m["end"]["pass@1"] != tb["methods"]["grpo"]["end"]["pass@1"]
            assert m["config"]["lr"] in m["config"]["lr_grid"]
            assert lb in tb["sweep"]["scores"]
