"""benchmarks/smollm2_allocation.py, smollm2_pilot.py and smollm2_steps.py: the pretrained
testbed's scripts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bestk import advantages
from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def alloc():
    return benchmark_script("smollm2_allocation")


def _naive_shares(succ, tok, group, estimator, options):
    """Per prompt, in a plain loop: the group's budget and the bin of the other samples' rate."""
    edges = [0.0, 0.2, 0.5, 0.7, 0.9, 1.0]
    mass = np.zeros(5)
    for s, t in zip(succ, tok, strict=True):
        a = np.asarray(advantages(estimator, [float(x) for x in s[:group]], **options))
        rate = float(np.mean(s[group:]))
        b = 4 if rate >= 0.9 else next(i for i in range(5) if edges[i] <= rate < edges[i + 1])
        mass[b] += float(np.sum(np.abs(a) * np.asarray(t[:group], dtype=float)))
    return mass / mass.sum()


def test_allocation_equals_a_per_prompt_loop_and_bins_by_the_other_samples(alloc):
    rng = np.random.default_rng(3)
    p = rng.beta(0.5, 0.5, size=60)
    succ = (rng.random((60, 20)) < p[:, None]).astype(int)
    tok = rng.integers(2, 30, size=(60, 20))
    out = alloc.allocation({"success": succ.tolist(), "tokens": tok.tolist()}, 8, boot=50)
    for label, (est, opts) in alloc.METHODS.items():
        assert out["methods"][label]["share"] == pytest.approx(
            _naive_shares(succ, tok, 8, est, opts), abs=1e-12)
    # the point difference is the [0.9, 1] shares' difference
    shares = [out["methods"][lb]["share"][-1] for lb in alloc.METHODS]
    assert out["near_solved_diff"] == pytest.approx(shares[0] - shares[1], abs=1e-12)
    lo, hi = out["near_solved_ci95"]
    assert lo <= out["near_solved_diff"] <= hi


def test_a_prompt_solved_in_its_other_samples_is_near_solved_whatever_its_group(alloc):
    # group 7/8 (GRPO gives it budget), other samples all correct: bin [0.9, 1]
    succ = [[1] * 7 + [0] + [1] * 8, [1, 0] * 4 + [0] * 8]
    tok = [[5] * 16, [5] * 16]
    out = alloc.allocation({"success": succ, "tokens": tok}, 8, boot=10)
    assert out["methods"]["grpo"]["prompts"] == [1, 0, 0, 0, 1]
    assert out["methods"]["grpo"]["share"][-1] > out["methods"]["softmax_grpo(tau=0.1)"][
        "share"][-1] > 0


def test_allocation_refuses_bad_samples(alloc):
    with pytest.raises(ValueError, match="must be in \\[2, 3\\]"):
        alloc.allocation({"success": [[1, 0, 1, 0]], "tokens": [[1, 1, 1, 1]]}, 4)
    with pytest.raises(ValueError, match="must be \\(prompts, n\\)"):
        alloc.allocation({"success": [[1, 0, 1, 0]], "tokens": [[1, 1, 1]]}, 2)
    with pytest.raises(ValueError, match="0/1"):
        alloc.allocation({"success": [[1, 0.5, 1, 0]], "tokens": [[1, 1, 1, 1]]}, 2)


def test_pilot_window_and_candidates():
    pilot = benchmark_script("smollm2_pilot")
    assert pilot.qualifies({"pass@1": 0.2, "pass@16": 0.85})
    assert not pilot.qualifies({"pass@1": 0.236, "pass@16": 0.961})
    assert not pilot.qualifies({"pass@1": 0.05, "pass@16": 0.5})
    c = pilot.parse_candidate("q|arithmetic|{digits: 2, format: question}|math_verify")
    assert c == {"name": "q", "task": "arithmetic", "reward": "math_verify",
                 "options": {"digits": 2, "format": "question"}}
    with pytest.raises(ValueError, match="expected name\\|task\\|options"):
        pilot.parse_candidate("q|arithmetic")


@pytest.fixture(scope="module")
def steps():
    return benchmark_script("smollm2_steps")


def test_steps_rule_levels_off_only_with_room_after(steps):
    s = [0, 10, 20, 30, 40, 50, 60, 70, 80]
    flat = [0.14, 0.15, 0.18, 0.29, 0.43, 0.50, 0.52, 0.51, 0.53]  # gain 0.39
    r = steps.levels_off(s, flat)
    # 90% of 0.39 over 0.14 is 0.491: first reached at step 50; 30 steps follow, none
    # above 0.50 + 0.03
    assert r["step"] == 50 and r["levelled"] and r["gain"] == pytest.approx(0.39)
    assert not steps.levels_off(s[:7], flat[:7])["levelled"]  # step 50 of 60: 10 after
    rising = [*flat[:8], 0.60]  # the last evaluation sets the gain: its own step, none after
    r = steps.levels_off(s, rising)
    assert r["step"] == 80 and not r["levelled"] and "run longer" in r["why"]
    jump = [0.10, 0.52, 0.45, 0.45, 0.56, 0.50, 0.50]  # 90% of 0.46 by step 10, then 0.56
    r = steps.levels_off(s[:7], jump)
    assert r["step"] == 10 and not r["levelled"] and "exceeds" in r["why"]
    r = steps.levels_off(s[:3], [0.2, 0.1, 0.2])
    assert r["step"] is None and not r["levelled"]


def test_steps_rule_refuses_bad_curves(steps):
    with pytest.raises(ValueError, match=">= 2 evaluations"):
        steps.levels_off([0], [0.1])
    with pytest.raises(ValueError, match="must increase"):
        steps.levels_off([0, 10, 10], [0.1, 0.2, 0.3])


def test_steps_reads_a_run_s_curve(steps, tmp_path):
    rows = [{"phase": "eval", "step": 0, "pass@1": 0.1, "pass@16": 0.4, "entropy": 0.8},
            {"phase": "train", "step": 1, "time/generate_s": 3.0, "time/update_s": 20.0,
             "time/sync_s": 1.0},
            {"phase": "train", "step": 2, "time/generate_s": 4.0, "time/update_s": 30.0},
            {"phase": "eval", "step": 2, "pass@1": 0.2, "pass@16": 0.5, "entropy": 0.7}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = steps.read_curve(tmp_path)
    assert c["steps"] == [0, 2] and c["pass@1"] == [0.1, 0.2] and c["pass@16"] == [0.4, 0.5]
    assert c["train_steps"] == 2 and c["median_step_s"] == 34.0
