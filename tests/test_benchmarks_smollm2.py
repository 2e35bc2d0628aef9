"""benchmarks/smollm2_allocation.py and smollm2_pilot.py: the pretrained testbed's scripts."""

from __future__ import annotations

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
