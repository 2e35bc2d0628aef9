"""``bestk.kappo.transform_rewards``: KAPPO's reward-side transform (Cors. 4.4 / 4.6).

* binary: a_k(x)·R with a_k = k(1 - p*)^(k-1), p* solved independently here with scipy's
  ``brentq`` on Eq. 6; and Cor. 4.4 itself: the single-reward optimum of the transformed reward,
  pi_ref·exp(a_k R / beta) / Z, has pass rate p*;
* win-rate: T_j with j counted by brute force over the bank (inclusive CDF, Algorithm 2);
* layouts (B,) and (G, N), tensors keep dtype / device, and bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bestk.kappo import calibrate, transform_rewards, winrate_table
from tests._kappo_ref import a_k_ref, p_star_ref

M = 30
BANK = {"easy": [1] * 27 + [0] * 3, "mid": [1] * 12 + [0] * 18, "hard": [1] + [0] * 29}


@pytest.mark.parametrize("k", [1, 2, 4])
def test_binary_is_a_k_times_reward_and_gives_p_star(k):
    beta = 0.1
    cal = calibrate(BANK, k=k, beta=beta)
    ids = ["easy", "mid", "hard", "hard", "easy", "mid"]
    r = np.array([1, 1, 1, 0, 0, 1], dtype=float)
    got = transform_rewards(cal, ids, r)
    q = {p: sum(v) / M for p, v in BANK.items()}
    a = {p: a_k_ref(q[p], k, beta) for p in BANK}
    np.testing.assert_allclose(got, [a[i] * x for i, x in zip(ids, r, strict=True)], rtol=1e-9)
    assert got.dtype == np.float64
    # Cor. 4.4: the ordinary KL-regularised optimum of the transformed reward is the pass@k one.
    for p in BANK:
        a_p = transform_rewards(cal, [p], [1.0])[0]
        tilted = q[p] * math.exp(a_p / beta) / (1 - q[p] + q[p] * math.exp(a_p / beta))
        assert tilted == pytest.approx(p_star_ref(q[p], k, beta), abs=1e-10)


def test_winrate_is_table_entry_of_inclusive_rank():
    rng = np.random.default_rng(3)
    bank = {i: rng.integers(0, 7, M) / 6 for i in range(4)}  # ties on purpose
    cal = calibrate(bank, k=4, beta=0.1, kind="winrate")
    table = winrate_table(M, 4, 0.1)
    ids = rng.integers(0, 4, 40)
    r = rng.integers(-1, 9, 40) / 6  # below, inside and above the bank
    want = [table[sum(1 for x in bank[int(i)] if x <= v)] for i, v in zip(ids, r, strict=True)]
    np.testing.assert_allclose(transform_rewards(cal, ids, r), want, rtol=1e-12)


def test_group_layout_and_tensor_round_trip():
    cal = calibrate(BANK, k=4, beta=0.1)
    r = torch.tensor([[1, 0, 1], [0, 0, 1]], dtype=torch.float32)
    got = transform_rewards(cal, ["hard", "easy"], r)
    assert got.shape == (2, 3) and got.dtype == torch.float32
    flat = transform_rewards(cal, ["hard"] * 3 + ["easy"] * 3, r.reshape(-1).double().numpy())
    np.testing.assert_allclose(got.reshape(-1).numpy(), flat, rtol=1e-6)
    ids_t = torch.tensor([0, 2])
    cal_int = calibrate({0: [1, 0, 0, 0], 2: [1, 1, 0, 0]}, k=2, beta=0.5)
    out = transform_rewards(cal_int, ids_t, torch.ones(2, 2, dtype=torch.float64))
    assert out.dtype == torch.float64 and bool((out[0] > out[1]).all())  # harder prompt: larger a_k


def test_bad_input():
    cal = calibrate(BANK, k=4, beta=0.1)
    with pytest.raises(ValueError, match="Calibration"):
        transform_rewards({"easy": 1}, ["easy"], [1.0])
    with pytest.raises(ValueError, match="'nope' is not in the calibration"):
        transform_rewards(cal, ["easy", "nope"], [1.0, 0.0])
    with pytest.raises(ValueError, match="0/1"):
        transform_rewards(cal, ["easy"], [0.5])
    with pytest.raises(ValueError, match="lengths must match"):
        transform_rewards(cal, ["easy", "hard"], [1.0])
    with pytest.raises(ValueError, match="one per row"):
        transform_rewards(cal, ["easy"], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\(B,\) or \(G, N\)"):
        transform_rewards(cal, ["easy"], np.ones((1, 1, 1)))
    with pytest.raises(ValueError, match="finite"):
        transform_rewards(cal, ["easy"], [float("nan")])
