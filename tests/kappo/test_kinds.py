"""Calibration kinds as classes (``bestk.kappo.calibration``): ``BinaryKind`` / ``WinrateKind``
hold what differs between kinds, code elsewhere asks them, and no module outside the kind
classes compares kind names."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest
import torch

import bestk
from bestk.estimators import estimator_info
from bestk.groups import make_groups
from bestk.kappo import (
    BINARY,
    KIND_SPECS,
    KINDS,
    WINRATE,
    BinaryKind,
    Calibration,
    CalibrationKind,
    WinrateKind,
    calibrate,
    calibration_kind,
)
from tests.conftest import ROOT

BANK = {"a": [1, 0, 0, 1, 0, 0], "b": [0, 0, 0, 0, 1, 0], "c": [1, 1, 1, 0, 1, 1]}
GRADED = {"a": [0.1, 0.5, 0.2, 0.9], "b": [0.3, 0.4, 0.35, 0.6], "c": [0.0, 0.05, 0.8, 0.2]}


# ---------------------------------------------------------------------------------------------
# the kinds


def test_one_class_per_kind_keyed_by_the_file_names():
    assert KINDS == ("binary", "winrate") and tuple(KIND_SPECS) == KINDS
    assert isinstance(KIND_SPECS["binary"], BinaryKind) and KIND_SPECS["binary"] is BINARY
    assert isinstance(KIND_SPECS["winrate"], WinrateKind) and KIND_SPECS["winrate"] is WINRATE
    for name, kind in KIND_SPECS.items():
        assert isinstance(kind, CalibrationKind) and kind.name == name
        assert calibration_kind(name) is kind and calibration_kind(kind) is kind
    assert (BINARY.binary, BINARY.metric, BINARY.std_cancels) == (True, "pass", True)
    assert (WINRATE.binary, WINRATE.metric, WINRATE.std_cancels) == (False, "best", False)
    assert repr(BINARY) == "BinaryKind()"


@pytest.mark.parametrize("bad", ["auto", "Binary", None, 1, ["binary"]])
def test_unknown_kind_is_a_value_error(bad):
    with pytest.raises(ValueError, match=r"unknown calibration kind .*; valid: binary, winrate"):
        calibration_kind(bad)
    with pytest.raises(ValueError, match="unknown --kind"):
        bestk.kappo.calibration.check_calibration_args(2, 0.1, bad, names=("--k", "--beta",
                                                                           "--kind"))


@pytest.mark.parametrize("name", KINDS)
def test_the_file_keeps_the_kind_name(tmp_path, name):
    bank = BANK if KIND_SPECS[name].binary else GRADED
    by_name = calibrate(bank, k=2, beta=0.1, kind=name)
    by_object = calibrate(bank, k=2, beta=0.1, kind=KIND_SPECS[name])
    assert by_name.to_dict() == by_object.to_dict()
    assert by_name.kind == name and by_name.kind_spec is KIND_SPECS[name]
    path = by_object.save(tmp_path / "cal.json")
    assert json.loads(path.read_text())["kind"] == name
    back = Calibration.load(path)
    assert back.kind == name and back.kind_spec is KIND_SPECS[name]


def test_bank_values_are_the_success_or_the_rewards():
    rewards = np.array([0.2, 0.9, 0.5])

    def success(r):
        return np.asarray(r) >= 0.5

    b = BINARY.bank_values(rewards, success)
    w = WINRATE.bank_values(rewards, success)
    assert b.dtype == w.dtype == np.float64
    np.testing.assert_array_equal(b, [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(w, rewards)


def test_only_the_binary_kind_needs_0_1_rewards():
    with pytest.raises(ValueError, match="binary bank needs 0/1"):
        calibrate(GRADED, k=2, beta=0.1, kind=BINARY)
    cal = calibrate(BANK, k=2, beta=0.1, kind=BINARY)
    with pytest.raises(ValueError, match="binary calibration needs 0/1"):
        cal.transform(["a"], [0.5])
    win = calibrate(GRADED, k=2, beta=0.1, kind=WINRATE)
    assert np.isfinite(win.transform(["a"], [0.5])).all()


def test_regression_target_subtracts_beta_log_z_only_where_z_is_not_1():
    cal = calibrate(BANK, k=3, beta=0.2, kind=BINARY)
    ids, r = ["a", "b", "c", "a"], [1.0, 0.0, 1.0, 0.0]
    want = cal.transform(ids, r) - cal.get("beta_log_z", ids)
    np.testing.assert_array_equal(cal.regression_target(ids, r), want)
    win = calibrate(GRADED, k=3, beta=0.2, kind=WINRATE)
    r = [0.3, 0.1, 0.9, 0.0]
    np.testing.assert_array_equal(win.regression_target(ids, r), win.transform(ids, r))


@pytest.mark.parametrize("kind", [BINARY, WINRATE], ids=KINDS)
def test_std_cancels_says_whether_std_normalisation_loses_the_adaptive_reward(kind):
    """``std_cancels``: GRPO on the adaptive rewards equals GRPO on the raw ones (KAPPO Eq. 139)
    exactly when the kind says so."""
    rng = np.random.default_rng(3)
    bank = BANK if kind.binary else GRADED
    cal = calibrate(bank, k=4, beta=0.1, kind=kind)
    ids = np.repeat(["a", "b", "c"], 6)
    r = rng.integers(0, 2, 18).astype(float) if kind.binary else rng.uniform(0, 1, 18)
    r[::6], r[1::6] = 0.0, 1.0  # no constant group
    raw = bestk.advantages("grpo", r, group=ids)
    adaptive = bestk.advantages("grpo", cal.transform(ids, r), group=ids)
    assert np.allclose(raw, adaptive, atol=1e-3) == kind.std_cancels  # eps 1e-6 aside


@pytest.mark.parametrize("kind", [BINARY, WINRATE], ids=KINDS)
def test_kappo_grpo_is_the_kinds_grpo_advantages(kind):
    rng = np.random.default_rng(5)
    bank = BANK if kind.binary else GRADED
    cal = calibrate(bank, k=2, beta=0.1, kind=kind)
    ids = np.array(["c", "a", "b", "a", "c", "b", "a"], dtype=object)
    r = rng.integers(0, 2, 7).astype(float) if kind.binary else rng.uniform(0, 1, 7)
    got = bestk.advantages("kappo_grpo", torch.tensor(r), group=ids, calibration=cal)
    groups = make_groups(ids, 7)
    rows = cal.index_of(groups.labels)
    want = kind.grpo_advantages(cal, rows, groups, torch.tensor(r), 1e-6)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if kind.binary:  # Eq. 140: a_k(x) times GRPO's standardised reward
        a_k = cal.get("a_k", ids)
        np.testing.assert_allclose(got.numpy(), a_k * bestk.advantages("grpo", r, group=ids),
                                   rtol=1e-12)


def test_the_registry_reads_the_kind():
    info = estimator_info("kappo_grpo")
    assert info.binary_rewards(BINARY) and info.binary_rewards("binary")
    assert not info.binary_rewards(WINRATE) and not info.binary_rewards("winrate")
    assert not info.binary_rewards(None)
    with pytest.raises(ValueError, match="unknown calibration kind"):
        info.binary_rewards("nope")
    assert estimator_info("maxrl").binary_rewards() and not estimator_info("grpo").binary_rewards()


# ---------------------------------------------------------------------------------------------
# no kind-name comparisons outside the kind classes

KIND_NAMES = set(KINDS)

#: Where a kind name may be compared: the kind classes themselves.
KIND_MODULES = {"bestk/kappo/calibration.py"}

#: Comparisons with the same strings that are not about a calibration kind:
#: ``{module: {the compared expression: why}}``.
NOT_A_KIND = {
    "bestk/estimators/_registry.py": {
        "self.reward_domain": "an estimator's reward domain (its registry property) 'binary'",
    },
    "bestk/kappo/sensitivity.py": {
        "quantity": "finite_bank_error's quantity 'winrate' (T(N/M)), a quantity name",
    },
    "bestk/lab/claims/exact.py": {
        "r['bandit']": "the exact bandit testbed 'binary' of bestk.lab.bandit, a testbed id",
    },
}


def kind_comparisons(source: str) -> list[tuple[int, str, list[str]]]:
    """``(line, text, other operands)`` of each comparison (``==``, ``!=``, ``in``, ``not in``,
    either side) with a string constant that is a kind name, alone or in a tuple / list / set
    literal."""
    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in KIND_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(named(x) for x in operands):
                others = [ast.unparse(x) for x in operands if not named(x)]
                out.append((node.lineno, ast.unparse(node), others))
    return out


def test_kind_comparison_finder_finds_them():
    src = ('if cal.kind == "binary":\n    pass\nok = "winrate" != kind\n'
           'fine = {"binary": 1}.get(kind)\nx = kind in ("binary", "x")\n'
           'call(kind="binary")\n')
    found = kind_comparisons(src)
    assert [line for line, _, _ in found] == [1, 3, 5]
    assert [others for _, _, others in found] == [["cal.kind"], ["kind"], ["kind"]]


def test_no_calibration_kind_comparisons_outside_the_kind_classes():
    bad, used = [], set()
    for path in sorted((ROOT / "src" / "bestk").rglob("*.py")):
        rel = path.relative_to(ROOT / "src").as_posix()
        if rel in KIND_MODULES:
            continue
        allowed = NOT_A_KIND.get(rel, {})
        for line, text, others in kind_comparisons(path.read_text()):
            if others and all(o in allowed for o in others):
                used.update((rel, o) for o in others)
                continue
            bad.append(f"{rel}:{line}: {text}")
    assert not bad, ("a calibration kind's behaviour belongs on its class in "
                     "bestk.kappo.calibration (ask cal.kind_spec / calibration_kind(name)):\n"
                     + "\n".join(bad))
    listed = {(m, o) for m, ops in NOT_A_KIND.items() for o in ops}
    assert listed <= used, f"exemptions no longer needed: {sorted(listed - used)}"
