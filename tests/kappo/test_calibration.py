"""bestk.kappo.calibration: Calibration objects, files, transforms, the kappo_grpo estimator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import bestk
from bestk.kappo import (
    Calibration,
    binary_calibration,
    calibrate,
    dpo_beta_eff,
    winrate_table,
)


def binary_bank(P=12, M=30, seed=0):
    rng = np.random.default_rng(seed)
    bank = {f"prompt-{i}": (rng.random(M) < i / (P - 1)).astype(float) for i in range(P)}
    return bank


def winrate_bank(P=8, M=30, seed=0, ints=True):
    rng = np.random.default_rng(seed)
    return {(i if ints else f"x{i}"): rng.normal(i * 0.1, 1.0, M).round(2) for i in range(P)}


# -- binary --------------------------------------------------------------------------------


def test_binary_values_follow_algorithm1():
    bank = binary_bank()
    cal = calibrate(bank, 4, 0.1)
    assert cal.kind == "binary" and cal.M == 30 and cal.num_prompts == 12
    for pid, rewards in bank.items():
        n = int(rewards.sum())
        ref = binary_calibration(n / 30, 4, 0.1)
        assert cal.get("n_success", [pid])[0] == n
        assert cal.get("a_k", [pid])[0] == pytest.approx(float(ref.a_k), rel=1e-12)
        assert cal.get("beta_log_z", [pid])[0] == pytest.approx(float(ref.beta_log_z), rel=1e-12)
        assert cal.get("p_star", [pid])[0] == pytest.approx(float(ref.p_star), rel=1e-12)
        assert cal.get("dpo_beta_eff", [pid])[0] == pytest.approx(
            float(dpo_beta_eff(n, 30, 4, 0.1)), rel=1e-12
        )
    # the extreme prompts hit the Eq. 148 boundaries
    assert cal.get("a_k", ["prompt-0"])[0] == 4.0
    assert cal.get("a_k", ["prompt-11"])[0] == 0.0


def test_binary_transform_and_target():
    cal = calibrate(binary_bank(), 2, 0.2)
    ids = ["prompt-3", "prompt-3", "prompt-7", "prompt-0"]
    r = np.array([1.0, 0.0, 1.0, 1.0])
    a = cal.get("a_k", ids)
    np.testing.assert_allclose(cal.transform(ids, r), a * r)
    np.testing.assert_allclose(cal.regression_target(ids, r), a * r - cal.get("beta_log_z", ids))
    out = cal.transform(ids, torch.tensor(r, dtype=torch.float32))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    with pytest.raises(ValueError, match="0/1"):
        cal.transform(ids, [1.0, 0.5, 0.0, 0.0])


# -- win-rate ------------------------------------------------------------------------------


def loop_winrate(cal_bank, k, beta, ids, rewards):
    out = []
    for pid, r in zip(ids, rewards, strict=True):
        ref = np.asarray(cal_bank[pid])
        j = sum(1 for x in ref if x <= r)  # inclusive empirical CDF
        out.append(winrate_table(len(ref), k, beta)[j])
    return np.array(out)


def test_winrate_transform_matches_loop_including_ties():
    bank = winrate_bank()
    cal = calibrate(bank, 4, 0.1, kind="winrate")
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 8, 50).tolist()
    r = rng.normal(0, 1.5, 50).round(2)  # rounding makes ties with the bank likely
    r[:3] = [bank[ids[0]][0], -100.0, 100.0]
    got = cal.transform(ids, r)
    np.testing.assert_allclose(got, loop_winrate(bank, 4, 0.1, ids, r), rtol=1e-13)
    table = winrate_table(30, 4, 0.1)
    assert got[1] == table[0] and got[2] == table[-1]  # Eq. 150 endpoints
    np.testing.assert_allclose(cal.regression_target(ids, r), got)  # Z = 1


def test_ragged_bank_sizes_use_their_own_tables():
    bank = {"a": [0.1, 0.2, 0.3], "b": list(np.linspace(0, 1, 10)), "c": [0.5, 0.5]}
    cal = calibrate(bank, 2, 0.3, kind="winrate")
    assert cal.M == [2, 3, 10]
    ids = ["a", "b", "c", "c"]
    r = np.array([0.25, 0.5, 0.5, 0.4])
    np.testing.assert_allclose(cal.transform(ids, r), loop_winrate(bank, 2, 0.3, ids, r))


# -- persistence ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["binary", "winrate"])
def test_save_load_round_trip(tmp_path, kind):
    bank = binary_bank() if kind == "binary" else winrate_bank(ints=False)
    cal = calibrate(bank, 3, 0.05, kind=kind)
    path = cal.save(tmp_path / "sub" / "cal.json")
    assert [p.name for p in path.parent.iterdir()] == ["cal.json"]  # no temp file left
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["kind"] == kind
    assert data["k"] == 3 and data["beta"] == 0.05 and data["M"] == 30
    assert data["bank_checksum"] == cal.checksum
    back = Calibration.load(path)
    assert back.kind == kind and back.k == 3 and back.beta == 0.05 and back.checksum == cal.checksum
    np.testing.assert_array_equal(back.prompt_ids, cal.prompt_ids)
    for name, arr in cal.values.items():
        np.testing.assert_array_equal(back.values[name], arr)
    ids = list(bank)[:4] * 2
    r = np.array([0, 1, 1, 0, 1, 0, 0, 1], dtype=float)
    np.testing.assert_array_equal(back.transform(ids, r), cal.transform(ids, r))


def test_checksum_identifies_the_bank():
    bank = binary_bank()
    c1 = calibrate(bank, 2, 0.1).checksum
    c2 = calibrate(dict(reversed(list(bank.items()))), 2, 0.1).checksum  # order-independent
    assert c1 == c2 and c1.startswith("sha256:")
    bank["prompt-5"] = 1 - bank["prompt-5"]
    assert calibrate(bank, 2, 0.1).checksum != c1


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(format="other"), "not a bestk calibration"),
        (lambda d: d.update(kind="nope"), "unknown kind"),
        (lambda d: d["values"].pop("a_k"), "a_k"),
        (lambda d: d["values"]["a_k"].pop(), "length"),
        (lambda d: d.pop("k"), "malformed"),
    ],
)
def test_load_rejects_bad_files(tmp_path, mutate, match):
    data = calibrate(binary_bank(), 2, 0.1).to_dict()
    mutate(data)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        Calibration.load(path)


def test_load_rejects_non_json_and_missing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Calibration.load(bad)
    with pytest.raises(ValueError, match="does not exist"):
        Calibration.load(tmp_path / "missing.json")


# -- bad banks / lookups -------------------------------------------------------------------


@pytest.mark.parametrize(
    "bank,kind,match",
    [
        ({}, "binary", "empty"),
        ([1, 2], "binary", "must map"),
        ({"a": [1.0]}, "binary", "needs >= 2"),
        ({"a": [1.0, 0.5]}, "binary", "0/1"),
        ({"a": [1.0, float("nan")]}, "winrate", "non-finite"),
        ({"a": ["x", "y"]}, "winrate", "numbers"),
        ({"a": [1.0, 0.0]}, "other", "unknown calibration kind"),
    ],
)
def test_calibrate_bad_bank(bank, kind, match):
    with pytest.raises(ValueError, match=match):
        calibrate(bank, 2, 0.1, kind=kind)


def test_calibrate_bad_parameters():
    with pytest.raises(ValueError, match="k must"):
        calibrate(binary_bank(), 0, 0.1)
    with pytest.raises(ValueError, match="beta"):
        calibrate(binary_bank(), 2, -0.1)


def test_missing_prompt_is_named():
    cal = calibrate(binary_bank(), 2, 0.1)
    with pytest.raises(ValueError, match="prompt 'unknown-7' is not in the calibration"):
        cal.transform(["prompt-1", "unknown-7"], [1.0, 0.0])


def test_int_ids_match_string_labels():
    cal = calibrate({2: [0, 1], 10: [1, 1], 7: [0, 0]}, 2, 0.1)
    np.testing.assert_array_equal(cal.index_of(np.array([10, 2, 7])), [2, 0, 1])
    np.testing.assert_array_equal(cal.index_of(["10", "2", "7"]), [2, 0, 1])
    with pytest.raises(ValueError, match="'3'"):
        cal.index_of(["3"])


# -- kappo_grpo estimator ------------------------------------------------------------------


def loop_kappo_grpo(cal, bank, rewards, ids):
    rewards = np.asarray(rewards, dtype=float)
    out = np.zeros_like(rewards)
    for pid in set(ids):
        idx = [i for i, x in enumerate(ids) if x == pid]
        r = rewards[idx]
        if cal.kind == "binary":
            mult = binary_calibration(np.mean(bank[pid]), cal.k, cal.beta).a_k
            s = r
        else:
            mult = 1.0
            s = loop_winrate(bank, cal.k, cal.beta, [pid] * len(idx), r)
        if len(idx) == 1:
            continue
        std = np.std(s, ddof=1)
        out[idx] = mult * (s - s.mean()) / (std + 1e-6)
    return out


def test_kappo_grpo_binary_vs_loop():
    bank = binary_bank()
    cal = calibrate(bank, 4, 0.1)
    rng = np.random.default_rng(5)
    ids = [f"prompt-{i}" for i in rng.integers(0, 12, 64)]  # ragged, non-contiguous groups
    r = (rng.random(64) < 0.5).astype(float)
    got = bestk.advantages("kappo_grpo", r, ids, calibration=cal)
    np.testing.assert_allclose(got, loop_kappo_grpo(cal, bank, r, ids), rtol=1e-12, atol=1e-15)


def test_kappo_grpo_winrate_vs_loop_and_tensor_io():
    bank = winrate_bank()
    cal = calibrate(bank, 2, 0.2, kind="winrate")
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 8, 40)
    r = rng.normal(0.3, 1.0, 40)
    got = bestk.advantages(
        "kappo_grpo", torch.tensor(r, dtype=torch.float32), torch.tensor(ids), calibration=cal
    )
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    r32 = torch.tensor(r, dtype=torch.float32).double().numpy()
    expected = loop_kappo_grpo(cal, bank, r32, ids.tolist())
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_kappo_grpo_binary_multiplier_is_applied_after_standardising():
    # Two prompts with identical online groups: advantages differ exactly by a_k(x) (Eq. 140).
    bank = {"easy": [1] * 27 + [0] * 3, "hard": [1] * 3 + [0] * 27}
    cal = calibrate(bank, 4, 0.1)
    r = [1, 0, 0, 1, 1, 0, 0, 1]
    ids = ["easy"] * 4 + ["hard"] * 4
    a = bestk.advantages("kappo_grpo", r, ids, calibration=cal)
    grpo = bestk.advantages("grpo", r, ids)
    a_k = cal.get("a_k", ids)
    np.testing.assert_allclose(a, a_k * grpo, rtol=1e-12)
    assert a_k[4] > 10 * a_k[0]  # hard prompts get more pressure


def test_kappo_grpo_single_sample_group_is_zero():
    cal = calibrate(binary_bank(), 2, 0.1)
    a = bestk.advantages("kappo_grpo", [1.0, 1.0, 0.0], ["prompt-1", "prompt-2", "prompt-2"],
                         calibration=cal)
    assert a[0] == 0.0 and np.all(np.isfinite(a))


def test_kappo_grpo_bad_input():
    cal = calibrate(binary_bank(), 2, 0.1)
    with pytest.raises(ValueError, match="requires option"):
        bestk.advantages("kappo_grpo", [1.0, 0.0], ["prompt-1"] * 2)
    with pytest.raises(ValueError, match="must be a bestk.kappo.Calibration"):
        bestk.advantages("kappo_grpo", [1.0, 0.0], ["prompt-1"] * 2, calibration={"a": 1})
    with pytest.raises(ValueError, match="0/1"):
        bestk.advantages("kappo_grpo", [1.0, 0.3], ["prompt-1"] * 2, calibration=cal)
    with pytest.raises(ValueError, match="'nope' is not in the calibration"):
        bestk.advantages("kappo_grpo", [1.0, 0.0], ["nope"] * 2, calibration=cal)
    with pytest.raises(ValueError, match="finite"):
        bestk.advantages("kappo_grpo", [1.0, math.nan], ["prompt-1"] * 2, calibration=cal)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", ["binary", "winrate"])
def test_kappo_grpo_cuda_matches_cpu(kind):
    bank = binary_bank() if kind == "binary" else winrate_bank(ints=False)
    cal = calibrate(bank, 4, 0.1, kind=kind)
    rng = np.random.default_rng(7)
    ids = [list(bank)[i] for i in rng.integers(0, len(bank), 64)]
    r = (rng.random(64) < 0.5).astype(float) if kind == "binary" else rng.normal(size=64)
    cpu = bestk.advantages("kappo_grpo", torch.tensor(r), ids, calibration=cal)
    gpu = bestk.advantages("kappo_grpo", torch.tensor(r, device="cuda"), ids, calibration=cal)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-12, atol=1e-12)
