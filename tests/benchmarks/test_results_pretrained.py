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


def test_the_shared_artifacts_carry_to_a_new_machine(rp, tmp_path):
    """The warm start (the tiny model with LoRA, two GRPO steps) is cached as its adapter
    and the digest of its merged weights, with the calibration and start evaluations; on an
    empty runs folder they are restored, the warm start rebuilt from the base model and the
    adapter to the very same merged weights, and its record read back unchanged. A rebuilt
    start whose weights differ is refused."""
    specs = benchmark_script("results_specs")
    spec = specs.testbed_spec("smollm2", fast=True)
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    rec = rp.warm_start("smollm2", runs, spec)
    grid = runs / "smollm2"
    for rel in ("_calibration/shared.json", "_start/start-abc.json"):
        (grid / rel).parent.mkdir(parents=True, exist_ok=True)
        (grid / rel).write_text(json.dumps({"file": rel}))
    saved = rp.save_shared("smollm2", runs, cache)
    assert set(saved) == {"warm/adapter_model.safetensors", "warm/adapter_config.json",
                          "warm/metrics.jsonl", "warm/record.json",
                          "calibration/shared.json", "start/start-abc.json"}
    other = tmp_path / "runs2"
    got = rp.restore_shared("smollm2", other, spec, cache)
    assert set(got) == {"calibration", "start start-abc.json", "warm start"}
    assert rp.final_digest(other / "smollm2" / "_warm" / "final") == \
        rp.final_digest(grid / "_warm" / "final")
    assert rp.warm_record("smollm2", other, spec)["evaluations"] == rec["evaluations"]
    for rel in ("_calibration/shared.json", "_start/start-abc.json"):
        assert (other / "smollm2" / rel).read_bytes() == (grid / rel).read_bytes()
    assert rp.restore_shared("smollm2", other, spec, cache) == []  # nothing missing now
    # another merge (or another adapter) than the one the earlier seeds started from
    record = cache / "smollm2-shared" / "warm" / "record.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "digest": "0" * 16}))
    with pytest.raises(SystemExit, match="would not be paired"):
        rp.restore_shared("smollm2", tmp_path / "runs3", spec, cache)
def test_an_amendment_drops_or_waives_failed_methods_and_the_rest_still_stop_the_grid(rp):
    rec = rp.rate_check({"a": {"pass@1": 0.5}, "b": {"pass@1": 0.5}, "c": {"pass@1": 0.5}},
                        {"a": {"pass@1": 0.51}, "b": {"pass@1": 0.505}, "c": {"pass@1": 0.6}},
                        ["pass@1"], 0.02)
    assert rec["failed"] == ["a", "b"]
    assert rp.unexcused_failures(rec, dropped={"a"}, waived={"b"}) == []
    assert rp.unexcused_failures(rec, dropped={"a"}, waived=set()) == ["b"]
    assert rp.unexcused_failures(rec, dropped=set(), waived={"c"}) == ["a", "b"]
    ms = [Method("a", "grpo"), Method("b", "maxrl"), Method("c", "rloo")]
    assert [m.label for m in rp.seed_methods(ms, 1, {"a"})] == ["a", "b", "c"]
    assert [m.label for m in rp.seed_methods(ms, 2, {"a"})] == ["b", "c"]


def test_amendments_leave_the_grid_the_same_grid():
    """An amendment changes which arms go on, not the runs made: the run directory's spec stamp
    still matches (results_specs.same_grid), so the grid resumes."""
    specs = benchmark_script("results_specs")
    spec = specs.testbed_spec("smollm2", fast=False)
    plain = {k: v for k, v in spec.items() if k != "amendments"}
    assert specs.same_grid(plain, spec) and specs.same_grid(spec, plain)
    assert not specs.same_grid(spec, {**spec, "overrides": [*spec["overrides"], "seed=1"]})
    assert set(specs.dropped_arms(spec)) == {"pkpo(k=16)"}
    assert set(specs.waived_arms(spec)) == {"kappo_grpo(k=16)"}
    labels = {m["label"] for m in spec["methods"]}
    assert set(specs.dropped_arms(spec)) | set(specs.waived_arms(spec)) <= labels


def test_the_grid_and_the_claims_drop_the_same_arms():
    """The amendment lives in the grid's spec (which arms run) and in the testbed's claims
    spec (which arms judge nothing): both name the same methods."""
    from bestk.lab.claims.table import TESTBEDS

    specs = benchmark_script("results_specs")
    spec = specs.testbed_spec("smollm2", fast=False)
    assert set(specs.dropped_arms(spec)) == {m for m, _ in TESTBEDS["smollm2"].dropped}
