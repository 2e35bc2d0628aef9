"""bestk.lr_sweep: the grid grows past an edge until the chosen rate is interior."""

import math

import pytest

from bestk.lr_sweep import best_rate, fixed_rate, is_interior, next_rate, sweep_until_interior


def _bowl(centres):
    """A scorer whose score for label L peaks at rate centres[L] (log-quadratic), recording
    every (label, rate) it was asked for."""
    asked = []

    def score(want):
        out = {}
        for lb, rates in want.items():
            for lr in rates:
                asked.append((lb, lr))
                out.setdefault(lb, {})[lr] = -(math.log(lr) - math.log(centres[lb])) ** 2
        return out

    return score, asked


def test_extends_past_each_edge_until_interior():
    score, asked = _bowl({"low": 1e-4, "mid": 3e-3, "high": 0.2})
    res = sweep_until_interior(score, ["low", "mid", "high"], [1e-3, 3e-3, 1e-2],
                               max_extensions=5)
    assert res["selected"]["mid"] == 3e-3 and res["grids"]["mid"] == [1e-3, 3e-3, 1e-2]
    # one geometric step (the ratio of the two rates nearest the edge, 3 significant digits)
    assert res["grids"]["low"] == [3.7e-5, 1.11e-4, 3.33e-4, 1e-3, 3e-3, 1e-2]
    assert res["selected"]["low"] == 1.11e-4
    assert res["grids"]["high"] == [1e-3, 3e-3, 1e-2, 3.33e-2, 0.111, 0.37]
    assert res["selected"]["high"] == 0.111
    assert all(res["interior"].values())
    # the brute-force answer: the best of the tried rates
    for lb, rows in res["scores"].items():
        assert res["selected"][lb] == max(rows, key=lambda r: r["score"])["lr"]
    # each extension asked only for the label at an edge, each rate once
    assert len(asked) == len(set(asked)) == 9 + 3 + 3
    assert res["extensions"] == 3


def test_gives_up_after_max_extensions_and_says_so():
    score, _ = _bowl({"a": 1e-9})
    res = sweep_until_interior(score, ["a"], [1e-3, 1e-2], max_extensions=2)
    assert res["grids"]["a"] == [1e-5, 1e-4, 1e-3, 1e-2]
    assert res["selected"]["a"] == 1e-5 and res["interior"]["a"] is False
    res0 = sweep_until_interior(score, ["a"], [1e-3, 1e-2], max_extensions=0)
    assert res0["grids"]["a"] == [1e-3, 1e-2] and res0["interior"]["a"] is False


def test_tolerance_picks_where_a_saturated_score_levels_off():
    scores = {0.01: 0.5, 0.03: 0.9, 0.09: 0.9995, 0.27: 1.0}
    assert best_rate(scores) == 0.27
    assert best_rate(scores, tol=1e-3) == 0.09
    assert next_rate(scores, tol=1e-3) is None and next_rate(scores) == 0.81
    assert best_rate({0.1: 1.0, 0.01: 1.0}) == 0.01  # ties: the smaller rate
    assert is_interior(0.09, [0.01, 0.09, 0.27]) and not is_interior(0.27, [0.01, 0.27])


def test_bad_input_is_refused():
    score, _ = _bowl({"a": 1e-3})
    with pytest.raises(ValueError, match=">= 2 rates"):
        sweep_until_interior(score, ["a"], [1e-3])
    with pytest.raises(ValueError, match="positive"):
        sweep_until_interior(score, ["a"], [0.0, 1e-3])
    with pytest.raises(ValueError, match="repeated"):
        sweep_until_interior(score, ["a"], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="repeated method labels"):
        sweep_until_interior(score, ["a", "a"], [1e-3, 1e-2])
    with pytest.raises(ValueError, match="max_extensions"):
        sweep_until_interior(score, ["a"], [1e-3, 1e-2], max_extensions=-1)
    with pytest.raises(ValueError, match="finite"):
        best_rate({1e-3: float("nan"), 1e-2: 0.0})
    with pytest.raises(ValueError, match="tol"):
        best_rate({1e-3: 0.0}, tol=-1.0)
    with pytest.raises(ValueError, match="no score"):
        sweep_until_interior(lambda want: {}, ["a"], [1e-3, 1e-2])


def test_fixed_rate_has_the_sweeps_keys_and_no_sides():
    score, _ = _bowl({"a": 1e-3, "b": 1e-2})
    swept = sweep_until_interior(score, ["a", "b"], [1e-3, 3e-3, 1e-2])
    one = fixed_rate(["a", "b"], 3e-3)
    assert set(one) == set(swept) - {"tolerance"}
    assert one["selected"] == {"a": 3e-3, "b": 3e-3} and one["grids"]["b"] == [3e-3]
    assert one["interior"] == {"a": None, "b": None} and one["scores"] == {}
    scored = fixed_rate(["a", "b"], 3e-3, {"a": 0.5, "b": 0.25})
    assert scored["scores"]["b"] == [{"lr": 3e-3, "score": 0.25}]
    with pytest.raises(ValueError, match="positive and finite"):
        fixed_rate(["a"], 0.0)
    with pytest.raises(ValueError, match="repeated"):
        fixed_rate(["a", "a"], 1e-3)
    with pytest.raises(ValueError, match="not the methods"):
        fixed_rate(["a", "b"], 1e-3, {"a": 0.5})
