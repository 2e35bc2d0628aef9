"""benchmarks/results_pretrained.py: the pretrained grid's rate check, shared calibration
option and status, on synthetic inputs (the grid itself: test_results_claims.py's slow
end-to-end test)."""

from __future__ import annotations

import json

import pytest

from bestk.compare import Method
from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def rp():
    return benchmark_script("results_pretrained")


def test_a_method_trains_when_either_metric_moves_enough_either_way(rp):
    starts = {m: {"pass@1": 0.50, "pass@16": 0.80} for m in ("a", "b", "c", "d")}
    ends = {"a": {"pass@1": 0.53, "pass@16": 0.80},    # pass@1 up 0.03
            "b": {"pass@1": 0.50, "pass@16": 0.775},   # pass@16 down 0.025
            "c": {"pass@1": 0.51, "pass@16": 0.81},    # neither moves 0.02
            "d": {"pass@1": 0.52, "pass@16": 0.79}}    # exactly the threshold on pass@1
    rec = rp.rate_check(starts, ends, ["pass@1", "pass@16"], 0.02)
    got = {m: r["trains"] for m, r in rec["methods"].items()}
    assert got == {"a": True, "b": True, "c": False, "d": True}
    assert rec["failed"] == ["c"] and rec["passed"] is False
    assert rec["methods"]["b"]["moves"]["pass@16"] == pytest.approx(-0.025)
    assert rec["methods"]["c"]["largest"] == pytest.approx(0.01)
    ok = rp.rate_check(starts, {"a": ends["a"]}, ["pass@1"], 0.02)
    assert ok["passed"] and ok["failed"] == []


def test_the_rate_check_refuses_missing_inputs(rp):
    s = {"a": {"pass@1": 0.5}}
    with pytest.raises(ValueError, match="lacks"):
        rp.rate_check(s, {"a": {"pass@1": 0.6}}, ["pass@1", "pass@16"], 0.02)
    with pytest.raises(ValueError, match="no start"):
        rp.rate_check(s, {"b": {"pass@1": 0.6}}, ["pass@1"], 0.02)
    with pytest.raises(ValueError, match="min_move > 0"):
        rp.rate_check(s, {"a": {"pass@1": 0.6}}, ["pass@1"], 0.0)


def test_the_shared_calibration_replaces_only_the_shared_option(rp):
    ms = [Method("grpo", "grpo"), Method("k", "kappo_grpo", {"calibration": rp.SHARED}),
          Method("p", "pkpo", {"k": 16}), Method("own", "kappo_grpo", {"calibration": "x.json"})]
    got = rp.with_calibration(ms, "/c/shared.json")
    assert [m.options for m in got] == [{}, {"calibration": "/c/shared.json"}, {"k": 16},
                                        {"calibration": "x.json"}]
    assert [m.label for m in got] == [m.label for m in ms]


def test_the_status_counts_finished_runs_and_paces_the_rest(rp, tmp_path):
    out = tmp_path / "g"
    for lb, i, wall in (("grpo", 0, 600.0), ("maxrl", 0, 400.0), ("grpo", 1, 500.0)):
        p = out / lb / f"seed{i}" / "result.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps({"run": {"wall_seconds": wall}}))
    (out / "_calibration").mkdir()
    (out / "_calibration" / "shared.json").write_text("{}")
    st = rp.write_status("g", tmp_path, ["grpo", "maxrl"], 3)
    assert st["done"] == 3 and st["remaining"] == 3
    assert st["remaining_runs"] == ["maxrl/seed1", "grpo/seed2", "maxrl/seed2"]
    assert st["median_run_seconds"] == 500.0 and st["eta_seconds"] == 1500.0
    assert st["calibration_done"] and not st["warm_start_done"]
    assert json.loads((out / "status.json").read_text())["done_runs"] == st["done_runs"]


def test_an_unfinished_warm_start_is_not_read_as_one(rp, tmp_path):
    spec = {"warm_start": {"overrides": ["max_steps=3"]}}
    with pytest.raises(SystemExit, match="warm start .* is not finished"):
        rp.warm_record("g", tmp_path, spec)
