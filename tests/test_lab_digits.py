"""The digits lab: batched MLP, exact evaluation, results.json schema, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bestk.lab import digits as dg
from bestk.lab.digits import BatchedMLP, DigitsConfig, reward_matrix, run_digits


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    cfg = DigitsConfig.fast()
    results = run_digits(cfg, out, progress=False)
    return cfg, out, results


def test_results_json_schema(fast_run):
    cfg, out, results = fast_run
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    expected = {lb for lb in cfg.learners
                if cfg.learner(lb).estimator in (None, *__import__("bestk").ESTIMATORS)}
    assert set(on_disk) == expected
    for label, entry in on_disk.items():
        assert 0.0 <= entry["test_accuracy"] <= 1.0, label
        ks = [str(k) for k in cfg.ks]
        assert list(entry["pass@k"]) == ks
        vals = [entry["pass@k"][k] for k in ks]
        assert all(0.0 <= v <= 1.0 for v in vals)
        assert vals == sorted(vals)  # pass@k is non-decreasing in k
        for tag, st in entry["settings"].items():
            assert len(st["test_accuracy"]["seeds"]) == cfg.seeds, (label, tag)
            if label == "ml":
                assert st["allocation"] is None
            else:
                shares = sum(st["allocation"][b]["mean"] for b in dg.BIN_LABELS)
                assert shares == pytest.approx(1.0)
    # maxrl only runs on binary rewards; pkpo(k=4) needs N >= 4 (fast mode uses N=4)
    assert set(on_disk["maxrl"]["settings"]) == {"binary/N=4"}
    assert set(on_disk["argmaxrl"]["settings"]) == {"binary/N=4", "graded/N=4"}
    for name in ("results.md", "digits.png", "config.json", "settings/binary_N4.json"):
        assert (out / name).stat().st_size > 0
    md = (out / "results.md").read_text()
    assert "Gradient allocation" in md and "[.9,1]" in md


def test_exact_ml_learns(fast_run):
    _, _, results = fast_run
    # 30 steps of cross-entropy on a random MLP: far above the 10% chance level.
    assert results["ml"]["test_accuracy"] > 0.3


def test_rerun_resumes_finished_settings(fast_run, monkeypatch):
    cfg, out, results = fast_run

    def boom(*a, **k):
        raise AssertionError("a finished setting was recomputed")

    monkeypatch.setattr(dg, "run_setting", boom)
    again = run_digits(cfg, out, progress=False)
    assert again == results


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
    """pass@k / best@k of _evaluate vs a Monte Carlo of the same policy."""
    g = torch.Generator().manual_seed(1)
    model = BatchedMLP([BatchedMLP.init(6, 8, 10, g)])
    x = torch.randn(20, 6, generator=g)
    y = torch.randint(0, 10, (20,), generator=g)
    rmat = reward_matrix("graded")
    ev = dg._evaluate(model, x, y, rmat, [1, 3])
    with torch.no_grad():
        probs = torch.softmax(model(x[None]).double(), -1)[0]
    draws = torch.multinomial(probs, 3 * 40_000, replacement=True, generator=g).view(20, -1, 3)
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
    with pytest.raises(ValueError, match="reward variant"):
        DigitsConfig(rewards=("binary", "x")).validate()
    with pytest.raises(ValueError, match="ns"):
        DigitsConfig(ns=(1,)).validate()
    with pytest.raises(ValueError, match="lr"):
        DigitsConfig(lr=float("nan")).validate()
    assert DigitsConfig().key() != DigitsConfig(steps=1).key()
    assert DigitsConfig().key() == DigitsConfig(threads=2).key()
    assert np.isfinite(DigitsConfig().lr)
