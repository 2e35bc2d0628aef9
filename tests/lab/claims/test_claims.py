"""The claims registry and the verdict rule of bestk.lab.claims, on synthetic per-seed data."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from bestk.lab.claims import (
    ALPHA,
    CLAIMS,
    DIVERSITY,
    PAPER_EFFECTS,
    TESTBEDS,
    VERDICTS,
    ControlFailed,
    arm_outcome,
    check_controls,
    counts,
    evaluate_claims,
    inconclusive_reasons,
    render_claims,
    verdict,
)
from bestk.stats import holm, paired_mde, sign_flip_p
from tests.lab.claims.conftest import synthetic_data


def test_verdict_rule_flips_both_ways():
    assert verdict(0.05, 0.001, "greater")[0] == "reproduced"
    # not significant: its 95% interval against the SESOI decides
    null = {"ci95": (-0.01, 0.015), "sesoi": 0.02}
    assert verdict(0.002, 0.2, "greater", **null)[0] == "not reproduced"
    assert verdict(-0.05, 0.001, "greater")[0] == "contradicted"
    assert verdict(-0.05, 0.001, "less")[0] == "reproduced"
    assert verdict(0.05, 0.001, "less")[0] == "contradicted"
    # exactly at alpha is not significant
    assert verdict(0.002, 0.05, "greater", **null)[0] == "not reproduced"
    # a significantly worse secondary blocks "reproduced", a non-significant one does not
    bad = [("pass@1", -0.02, 0.01, "greater")]
    v, why = verdict(0.05, 0.001, "greater", bad)
    assert v == "not reproduced" and "pass@1" in why
    assert verdict(0.05, 0.001, "greater", [("pass@1", -0.02, 0.2, "greater")])[0] == \
        "reproduced"
    # "worse" follows the metric's own direction
    assert verdict(0.05, 0.001, "greater", [("alloc", 0.1, 0.01, "less")])[0] == \
        "not reproduced"
    assert verdict(0.05, 0.001, "greater", [("alloc", -0.1, 0.01, "less")])[0] == "reproduced"
    # non-inferiority: the CI low bound must lie above -margin
    v, why = verdict(0.05, 0.001, "greater", noninferiority=("pass@1", -0.03, 0.02))
    assert v == "not reproduced" and "non-inferiority" in why
    assert verdict(0.05, 0.001, "greater", noninferiority=("pass@1", -0.01, 0.02))[0] == \
        "reproduced"
    with pytest.raises(ValueError, match="direction"):
        verdict(0.1, 0.01, "up")


def _by_id(doc):
    return {e["id"]: e for e in doc["claims"]}


def test_registry_is_well_formed_and_cites_the_right_figures():
    assert len({c.id for c in CLAIMS}) == len(CLAIMS)
    kinds = {TESTBEDS[a.testbed].kind for c in CLAIMS if c.kind == "trained" for a in c.arms}
    control_kinds = {TESTBEDS[a.testbed].kind for c in CLAIMS if c.control for a in c.arms}
    assert control_kinds == kinds  # an A/A control on every trained testbed kind
    for c in CLAIMS:
        if any("kappo_grpo" in (a.a or "") for a in c.arms):
            # KAPPO Fig. 2 is @k-A*PO / @k-DPO: never the source of an @k-GRPO result
            assert "@k-GRPO" in c.claim
            assert "Appendix 18" in c.source or "Figure 4 right" in c.source
            assert "Figure 2a" not in c.source and "Figure 2b" not in c.source
        if any((a.a or "").startswith(("apo(", "dpo(")) for a in c.arms) and not c.control:
            assert "Figure 2" in c.source or "Figure 3" in c.source
        assert c.status is None  # no KAPPO row awaits a rerun any more
    for t in TESTBEDS.values():
        if t.kind == "language":
            assert t.min_seeds >= 8
        elif t.kind != "exact":
            assert t.min_seeds >= 10


def test_claims_follow_the_data_both_ways():
    up = _by_id(evaluate_claims(synthetic_data(0.05)))
    down = _by_id(evaluate_claims(synthetic_data(-0.05)))
    null = _by_id(evaluate_claims(synthetic_data(0.0)))
    for cid, e in up.items():
        if e["kind"] != "trained":
            continue
        if e["verdict"] == "dropped":  # by an amendment, whatever the data
            assert down[cid]["verdict"] == null[cid]["verdict"] == "dropped", cid
            continue
        if e["control"]:
            assert e["verdict"] == "not reproduced", cid
            assert down[cid]["verdict"] == "not reproduced", cid
            continue
        premise = (e["power"].get("premise") or {}).get("status")
        if premise == "refuted":  # a claim that b fails to train, where b trains
            assert e["verdict"] == "not reproduced" and "refuted" in e["why"], cid
        else:
            assert e["verdict"] == "reproduced", (cid, e["why"])
        assert down[cid]["verdict"] == "contradicted", (cid, down[cid]["why"])
        if e["primary"]["margin"] is None:
            assert null[cid]["verdict"] != "reproduced", cid
        else:  # "a matches b": equal methods are non-inferior
            assert null[cid]["verdict"] == "reproduced", (cid, null[cid]["why"])
        assert e["reward_matched"] and e["prompt_matched"] and e["budget_matched"]


def test_a_worse_secondary_or_a_failed_non_inferiority_blocks_reproduced():
    data = synthetic_data(0.05)
    tb = data["digits-binary"]
    # MaxRL higher at pass@16 but clearly lower at pass@1: not Pareto-dominant
    tb["methods"]["maxrl"]["end"]["pass@1"] = (np.asarray(
        tb["methods"]["grpo"]["end"]["pass@1"]) - 0.05).tolist()
    e = _by_id(evaluate_claims(data))["maxrl-pareto@digits-binary"]
    assert e["verdict"] == "not reproduced"
    assert "pass@1" in e["why"] and e["noninferiority"]["holds"] is False


def test_pending_and_not_comparable_arms_stay_out_of_the_family():
    data = synthetic_data(0.05)
    full = evaluate_claims(data)
    few = copy.deepcopy(data)
    tb = few["language-permute"]
    tb["seeds"] = tb["seeds"][:5]
    for m in tb["methods"].values():
        for part in ("start", "end"):
            m[part] = {k: v[:5] for k, v in m[part].items()}
    doc = evaluate_claims(few)
    e = _by_id(doc)["maxrl-pareto@language-permute"]
    assert e["verdict"] == "pending" and "5 of 8" in e["why"]
    assert doc["family"]["size"] < full["family"]["size"]
    assert e["id"] not in doc["family"]["members"]
    # a reward mismatch read from the run configurations
    mixed = copy.deepcopy(data)
    mixed["language-permute"]["methods"]["grpo (success)"]["config"]["reward"] = "graded"
    e = _by_id(evaluate_claims(mixed))["maxrl-pareto@language-permute"]
    assert e["verdict"] == "not comparable" and e["reward_matched"] is False
    # no data at all
    e = _by_id(evaluate_claims({}))["maxrl-pareto@digits-binary"]
    assert e["verdict"] == "pending" and e["seeds"] == 0


def test_holm_over_the_family_and_the_json_fields():
    doc = evaluate_claims(synthetic_data(0.01, noise=0.01))
    fam = [e for e in doc["claims"] if e["id"] in doc["family"]["members"]]
    assert len(fam) == doc["family"]["size"] > 30
    adj = holm([e["primary"]["p"] for e in fam])
    for e, p in zip(fam, adj, strict=True):
        assert e["primary"]["p_holm"] == pytest.approx(p) and p >= e["primary"]["p"]
        d = np.subtract(e["primary"]["per_seed_a"], e["primary"]["per_seed_b"])
        assert e["primary"]["diff"] == pytest.approx(d.mean())
        lo, hi = e["primary"]["ci95"]
        assert lo <= e["primary"]["diff"] <= hi and lo < hi
        for s in e["secondary"]:
            assert {"metric", "diff", "ci95", "p", "p_holm"} <= set(s)
        assert e["verdict"] in VERDICTS
    md = render_claims(doc)
    assert md.startswith("## Summary") and "aa-control" in md and "p (Holm)" in md


def test_the_a_a_control_rarely_comes_out_reproduced():
    """The A/A arms under a true null: over 25 synthetic files the share of A/A arms judged
    reproduced stays near the one-sided 2.5% of an uncorrected test (and below it with Holm)."""
    hits = total = 0
    for s in range(25):
        doc = evaluate_claims(synthetic_data(0.05, seed=100 + s, noise=0.01))
        for e in doc["claims"]:
            if e["control"] and e["verdict"] != "pending":
                total += 1
                hits += e["verdict"] == "reproduced"
    assert total == 25 * sum(len(c.arms) for c in CLAIMS if c.control)
    assert hits / total < 0.025


def test_non_inferiority_primary_and_budgets_by_design():
    """"a matches b within a margin": the test is of a - b + margin; equal methods pass, a
    method worse by about the margin does not, one worse by much more is contradicted. A
    claim comparing budgets on purpose stays comparable when the budgets differ; any other
    claim does not."""
    arm = "kappo-apo-matches-pkpo@language-permute-kappo[n=2]"
    spec = next(c for c in CLAIMS if c.id == "kappo-apo-matches-pkpo")
    assert spec.margin == 0.02 and spec.budget == "by design"

    def judge(shift: float, rollouts: int = 1000) -> dict:
        data = synthetic_data(0.0, seeds=8, noise=0.003)
        tb = data["language-permute-kappo"]
        m = tb["methods"]["apo(k=4,n=2)"]
        # the primary is pass@k at k_eval = k_train = 4
        m["end"]["pass@4"] = (np.asarray(tb["methods"]["pkpo(k=4)"]["end"]["pass@4"])
                              + shift + np.random.default_rng(1).normal(0, 0.003, 8)).tolist()
        m["config"]["rollouts"] = rollouts
        return _by_id(evaluate_claims(data))

    same = judge(0.0)[arm]
    assert same["verdict"] == "reproduced" and same["primary"]["margin"] == 0.02
    assert same["primary"]["test"].startswith("non-inferiority")
    assert judge(-0.02)[arm]["verdict"] == "not reproduced"
    worse = judge(-0.1)[arm]
    assert worse["verdict"] == "contradicted" and worse["primary"]["diff"] < -0.02
    fewer = judge(0.0, rollouts=250)
    e = fewer[arm]
    assert e["verdict"] == "reproduced" and e["budget_matched"] is False
    assert e["budget_by_design"] and e["budget"]["a"]["rollouts"] == 250
    assert e["budget"]["b"]["rollouts"] == 1000
    # a claim that needs matched budgets is not judged on different ones
    data = synthetic_data(0.05, seeds=8)
    data["language-permute-kappo"]["methods"]["apo(k=4)"]["config"]["rollouts"] = 250
    e = _by_id(evaluate_claims(data))["kappo-apo-sharpening@language-permute-kappo[k=4]"]
    assert e["verdict"] == "not comparable" and "budget" in e["why"]


def test_arm_ids_tags_and_registry_checks():
    from bestk.lab.claims import Arm, ClaimSpec, Metric, _check_registry, arm_id

    ids = [arm_id(c, a) for c in CLAIMS for a in c.arms]
    assert len(ids) == len(set(ids))
    assert "kappo-apo-sharpening@language-permute-kappo[k=2]" in ids
    assert "maxrl-pareto@digits-binary" in ids  # untagged arms keep their ids
    bad = ClaimSpec("x", "x", "x", "trained", (Arm("digits-binary", "a", "b"),
                                                Arm("digits-binary", "c", "b")), "r",
                    Metric("pass", 1))
    import bestk.lab.claims as claims_mod

    saved = claims_mod.CLAIMS
    try:
        claims_mod.CLAIMS = (*saved, bad)
        with pytest.raises(ValueError, match="distinct tags"):
            _check_registry()
        claims_mod.CLAIMS = (*saved, ClaimSpec("y", "y", "y", "trained",
                                               (Arm("digits-binary", "a", "b"),), "r",
                                               Metric("pass", 1), budget="sometimes"))
        with pytest.raises(ValueError, match="budget"):
            _check_registry()
    finally:
        claims_mod.CLAIMS = saved


def test_kappo_closed_form_rule_flips_both_ways():
    """The exact KAPPO claim on the fast lab configuration: reproduced as computed; one case
    off by more than the tolerance, or a claimed case missing, makes it not reproduced."""
    from bestk.lab.kappo import KappoLabConfig, kappo_convergence

    res = kappo_convergence(KappoLabConfig.fast())
    tb = {"cases": res["cases"], "skipped": res["skipped"]}
    e = _by_id(evaluate_claims({"kappo-exact": tb}))["kappo-closed-form@kappo-exact"]
    assert e["verdict"] == "reproduced", e["why"]
    assert e["primary"]["diff"] <= 1e-3 and "@k-GRPO" in e["why"]
    broken = copy.deepcopy(tb)
    case = next(c for c in broken["cases"] if c["method"] == "dpo" and c["k"] == 4)
    case["closed_form_error"] = 2e-3
    e = _by_id(evaluate_claims({"kappo-exact": broken}))["kappo-closed-form@kappo-exact"]
    assert e["verdict"] == "not reproduced" and "failed: dpo binary k=4" in e["why"]
    short = copy.deepcopy(tb)
    short["cases"] = [c for c in short["cases"] if not (c["method"] == "apo"
                                                       and c["kind"] == "winrate")]
    e = _by_id(evaluate_claims({"kappo-exact": short}))["kappo-closed-form@kappo-exact"]
    assert e["verdict"] == "not reproduced" and "not run: apo winrate" in e["why"]


def test_allocation_rule_on_a_model_s_rollouts_all_four_ways():
    """The training-free allocation arm (benchmarks/smollm2_allocation.py's record): the
    interval above 0 reproduces, below 0 contradicts, within (-inf, SESOI) with 0 inside is
    "not reproduced" only when its upper end is below the SESOI (0.045) and GRPO's own share
    leaves room for such an effect, else inconclusive."""
    from tests.conftest import benchmark_script

    alloc = benchmark_script("smollm2_allocation")
    rng = np.random.default_rng(0)
    p = rng.beta(0.6, 0.6, size=400)
    succ = (rng.random((400, 32)) < p[:, None]).astype(int)
    tok = rng.integers(3, 17, size=(400, 32))
    tb = alloc.allocation({"success": succ.tolist(), "tokens": tok.tolist()}, 8, boot=200)
    key = "softmax-allocation-pretrained@smollm2-rollouts"
    e = _by_id(evaluate_claims({"smollm2-rollouts": tb}))[key]
    assert tb["near_solved_ci95"][0] > 0 and e["verdict"] == "reproduced", e["why"]
    assert e["primary"]["ci95"] == tb["near_solved_ci95"] and e["sesoi"] == 0.045
    for ci, want in (([-0.03, -0.01], "contradicted"), ([-0.01, 0.03], "not reproduced"),
                     ([-0.01, 0.06], "inconclusive")):
        e = _by_id(evaluate_claims({"smollm2-rollouts": {
            **tb, "near_solved_diff": sum(ci) / 2, "near_solved_ci95": ci}}))[key]
        assert e["verdict"] == want and e["primary"]["ci95"] == ci, (ci, e["why"])
    assert _by_id(evaluate_claims({}))[key]["verdict"] == "pending"
    # GRPO's own share on [0.9, 1] below the SESOI: no room for the effect, inconclusive
    # (the base SmolLM2's rollouts on the pretrained task: 1 of 512 prompts near-solved)
    low = copy.deepcopy(tb)
    for m, share in zip(low["methods"].values(), (0.01, 0.005), strict=True):
        m["share"][-1] = share
    e = _by_id(evaluate_claims({"smollm2-rollouts": {
        **low, "near_solved_diff": 0.005, "near_solved_ci95": [-0.002, 0.012]}}))[key]
    assert e["verdict"] == "inconclusive" and "cannot show the effect" in e["why"], e["why"]


def test_an_exact_claim_without_a_known_rule_is_refused():
    from bestk.lab.claims import Arm, ClaimSpec, Metric

    for rule in (None, "no_such_rule"):
        spec = ClaimSpec("z", "z", "z", "exact", (Arm("kappo-exact"),), "r", Metric("pass", 1),
                         exact_rule=rule)
        with pytest.raises(ValueError, match="exact claim z has exact_rule"):
            evaluate_claims({}, [spec])


def test_a_pareto_margin_applies_once_not_also_as_a_worse_secondary():
    """argmaxrl-bestk@bandit-graded in the committed data: best@1 -0.0098, inside the 0.02
    margin and significant; the margin decides, the secondary check does not repeat it."""
    sec = [("best@1", -0.0098, 1e-6, "greater"), ("best@4", 0.01, 0.001, "greater")]
    ni = ("best@1", -0.015, 0.02)
    v, why = verdict(0.007, 0.001, "greater", sec, ni, noninferiority_diff=-0.0098)
    assert v == "reproduced", why
    # another metric significantly worse still blocks it
    v, why = verdict(0.007, 0.001, "greater", [*sec, ("best@2", -0.01, 0.001, "greater")], ni)
    assert v == "not reproduced" and "best@2" in why and "best@1" not in why
    # the margin itself: beyond it (point estimate too) not reproduced, a wide interval
    # around a point estimate inside it inconclusive
    v, _ = verdict(0.007, 0.001, "greater", sec, ("best@1", -0.04, 0.02),
                   noninferiority_diff=-0.03)
    assert v == "not reproduced"
    v, why = verdict(0.007, 0.001, "greater", sec, ("best@1", -0.04, 0.02),
                     noninferiority_diff=-0.005)
    assert v == "inconclusive" and "too wide" in why
    # end to end: a significant pass@1 drop inside the margin on synthetic data
    data = synthetic_data(0.05, noise=0.001)
    tb = data["digits-binary"]
    tb["methods"]["maxrl"]["end"]["pass@1"] = (np.asarray(
        tb["methods"]["grpo"]["end"]["pass@1"]) - 0.008
        + np.random.default_rng(5).normal(0, 0.001, len(tb["seeds"]))).tolist()
    e = _by_id(evaluate_claims(data))["maxrl-pareto@digits-binary"]
    s1 = next(s for s in e["secondary"] if s["metric"] == "pass@1")
    assert s1["p_holm"] < ALPHA and s1["diff"] < 0  # significantly worse as a secondary
    assert e["noninferiority"]["holds"] and e["verdict"] == "reproduced", e["why"]


def test_inconclusive_reasons_each_condition():
    assert inconclusive_reasons(0.5, True, 0.02) == []
    r = inconclusive_reasons(0.01, True, 0.02)
    assert len(r) == 1 and "headroom" in r[0] and "SESOI" in r[0]
    assert inconclusive_reasons(0.01, True, 0.02, margin_claim=True) == []
    r = inconclusive_reasons(0.5, False, 0.02)
    assert len(r) == 1 and "did not move" in r[0]
    assert len(inconclusive_reasons(0.01, False, 0.02)) == 2
    assert inconclusive_reasons(None, None, None) == []  # nothing to compare with
    with pytest.raises(ValueError, match="sesoi"):
        inconclusive_reasons(0.5, True, float("nan"))
    # the rule: a non-significant primary with a reason is inconclusive, never a control
    v, why = verdict(0.01, 0.3, "greater", underpowered=["b did not move"])
    assert v == "inconclusive" and "did not move" in why
    assert verdict(0.01, 0.3, "greater", underpowered=["x"], control=True)[0] == \
        "not reproduced"
    # a significant primary is judged as before
    assert verdict(0.05, 0.001, "greater", underpowered=["x"])[0] == "reproduced"
    assert verdict(-0.05, 0.001, "greater", underpowered=["x"])[0] == "contradicted"


def p_dir(e: dict) -> str:
    return e["primary"]["direction"]


def test_power_fields_of_every_evaluated_arm():
    """mde from the observed paired SD at alpha / family size (recomputed), paper effect
    and SESOI from the registry, headroom to the metric's bound, seeds needed for the SESOI;
    a null arm whose interval reaches the SESOI is inconclusive, one whose interval ends below
    it not reproduced."""
    doc = evaluate_claims(synthetic_data(0.0, noise=0.03))
    assert doc["family"]["alpha_per_arm"] == pytest.approx(ALPHA / doc["family"]["size"])
    members = {m: name for name, f in doc["families"].items() for m in f["members"]}
    for e in doc["claims"]:
        if e["id"] not in members:
            assert e["mde"] is None
            continue
        assert e["family"] == members[e["id"]]
        fam = doc["families"][e["family"]]
        alpha = ALPHA / fam["size"]
        assert fam["alpha_per_arm"] == pytest.approx(alpha)
        d = np.subtract(e["primary"]["per_seed_a"], e["primary"]["per_seed_b"])
        assert e["mde"] == pytest.approx(paired_mde(d.std(ddof=1), d.size, alpha))
        assert (e["paper_effect"], e["paper_effect_why"]) == PAPER_EFFECTS[e["claim_id"]]
        b = np.asarray(e["primary"]["per_seed_b"])
        assert e["headroom"] == pytest.approx(max(0.0, min(1 - b.mean(), 1 - np.median(b)))) \
            if e["primary"]["metric"].startswith("pass@") and p_dir(e) == "greater" else True
        if not e["control"] and e["seeds_needed"] is None:  # only where no seeds can help
            assert e["power"]["premise"]["status"] == "refuted", e["id"]
        elif not e["control"]:
            assert e["seeds_needed"] >= 2
            assert paired_mde(d.std(ddof=1), e["seeds_needed"], alpha) <= e["sesoi"]
        if e["control"]:
            assert e["verdict"] == "not reproduced" and e["seeds_needed"] is None
    # every null arm without a guard is judged by its 95% interval against the SESOI; with
    # noise 0.03 per method some intervals reach it, others end below it
    seen = set()
    for e in doc["claims"]:
        p = e["primary"]
        if e["id"] not in members or e["control"] or p["p_holm"] < ALPHA or \
                any(e["power"][k] for k in ("design_reasons", "inconclusive_reasons")) or \
                (e["power"]["premise"] or {}).get("status") in ("refuted", "undecided"):
            continue
        sign = 1.0 if p["direction"] == "greater" else -1.0
        hi = max(sign * (v + (p["margin"] or 0.0)) for v in p["ci95"])
        assert e["verdict"] == ("not reproduced" if hi < e["sesoi"] else "inconclusive"), e["id"]
        assert "SESOI" in e["why"]
        seen.add(e["verdict"])
    assert seen == {"not reproduced", "inconclusive"}
    # softmax-vs-grpo (SESOI 0.004): with noise 0.001 its interval ends below the SESOI
    quiet = _by_id(evaluate_claims(synthetic_data(0.0, noise=0.001)))
    e = quiet["softmax-vs-grpo@digits-binary"]
    assert e["primary"]["ci95"][1] < 0.004 and e["verdict"] == "not reproduced", e["why"]
    assert e["seeds_needed"] <= 40


def test_b_that_did_not_move_makes_a_null_arm_inconclusive():
    data = synthetic_data(0.0, noise=0.001)
    tb = data["digits-binary"]
    g = tb["methods"]["grpo"]
    g["start"]["pass@1"] = list(g["end"]["pass@1"])  # GRPO never moved from its start
    e = _by_id(evaluate_claims(data))["softmax-vs-grpo@digits-binary"]
    assert e["power"]["b_moved"] is False
    assert e["verdict"] == "inconclusive" and "did not move" in e["why"]


def test_zero_variance_equal_runs_are_not_a_pass():
    """All-equal per-seed values (e.g. every run at 0 in a smoke run) give no t-test: an
    ordinary claim is not significant; a non-inferiority claim's constant a - b + margin gets
    the exact sign-flip p 2/2^n, so 8 seeds in a family cannot pass, and the reason says so."""
    data = synthetic_data(0.0, seeds=8, noise=0.003)
    tb = data["language-permute-kappo"]
    for lb in tb["methods"]:
        for key in ("pass@4", "pass@64"):  # the two primaries: pass@k_train, pass@k_max
            tb["methods"][lb]["end"][key] = [0.0] * 8
    doc = evaluate_claims(data)
    for n in (1, 2, 4, 8):
        e = _by_id(doc)[f"kappo-apo-matches-pkpo@language-permute-kappo[n={n}]"]
        assert e["primary"]["p"] == pytest.approx(2 / 2**8) == e["primary"]["p_perm"]
        assert e["verdict"] != "reproduced" and "constant" in e["why"], e["why"]
        assert e["mde"] is None
    e = _by_id(doc)["kappo-apo-sharpening@language-permute-kappo[k=4]"]
    assert e["primary"]["p"] == 1.0 and e["verdict"] != "reproduced"


def test_p_perm_is_holm_corrected_and_robustness_is_reported():
    doc = evaluate_claims(synthetic_data(0.05))
    fam = [e for e in doc["claims"] if e["id"] in doc["family"]["members"]]
    assert [e["primary"]["p_perm_holm"] for e in fam] == pytest.approx(
        holm([e["primary"]["p_perm"] for e in fam]))
    for e in fam:
        shift = e["primary"]["margin"] or 0.0
        d = np.subtract(e["primary"]["per_seed_a"], e["primary"]["per_seed_b"]) + shift
        assert e["primary"]["p_perm"] == pytest.approx(sign_flip_p(d))
        for s in e["secondary"]:
            assert "p_perm" in s and "p_perm_holm" in s
        floor = e["power"]["sign_flip_floor_holm"]
        if floor < ALPHA:
            assert e["robust"] == (e["verdict_perm"] == e["verdict"])
        else:
            assert e["robust"] == f"n/a (cannot reach α with {e['seeds']} seeds)"
        if e["robust"] is False:
            assert "not robust" in e["why"]
    # 10 seeds (sparse before its 16-seed rerun): the smallest sign-flip p 2/1024 cannot
    # survive Holm over the family, while the t-test's tails still pass: robust is n/a
    data = synthetic_data(0.05)
    tb = data["sparse-n16"]
    tb["seeds"] = tb["seeds"][:10]
    for m in tb["methods"].values():
        for when in ("start", "end"):
            m[when] = {k: v[:10] for k, v in m[when].items()}
    e = _by_id(evaluate_claims(data, min_seeds=10))["softmax-sparse-vs-grpo@sparse-n16"]
    assert e["seeds"] == 10 and e["verdict"] == "reproduced"
    assert e["robust"] == "n/a (cannot reach α with 10 seeds)"
    assert e["verdict_perm"] != "reproduced" and "not robust" not in e["why"]
    # 24 seeds: both tests agree
    e = _by_id(evaluate_claims(synthetic_data(0.05, seeds=24)))[
        "softmax-sparse-vs-grpo@sparse-n16"]
    assert e["verdict"] == e["verdict_perm"] == "reproduced" and e["robust"] is True


def test_a_significant_a_a_control_fails_the_file():
    data = synthetic_data(0.0, noise=0.002)
    assert evaluate_claims(data)["controls"]["failed"] == []
    check_controls(evaluate_claims(data))  # passes silently
    m = data["bandit-graded"]["methods"]["grpo (A/A)"]
    m["end"] = {k: (np.asarray(v) + 0.05).tolist() for k, v in m["end"].items()}
    doc = evaluate_claims(data)
    assert doc["controls"]["failed"] == ["aa-control@bandit-graded"]
    with pytest.raises(ControlFailed, match="aa-control@bandit-graded"):
        check_controls(doc)
    c = counts(doc)
    arms = sum(len(spec.arms) for spec in CLAIMS if spec.control)
    assert c["controls"]["failed"] == 1 and c["controls"]["passed"] == arms - 1
    # a control claims nothing: its outcome reads passed / FAILED, never its raw verdict
    by_id = {e["id"]: e for e in doc["claims"]}
    assert arm_outcome(by_id["aa-control@bandit-graded"], doc) == "control FAILED"
    assert arm_outcome(by_id["aa-control@digits-binary"], doc) == "control passed"
    first = next(e for e in doc["claims"] if not e["control"])
    assert arm_outcome(first, doc) == first["verdict"]
    assert c["exact"] == {"pending": 4}  # no exact testbed in the synthetic data


def test_counts_keep_claims_controls_and_exact_checks_apart():
    doc = evaluate_claims(synthetic_data(0.05))
    c = counts(doc)
    n_ctrl = sum(len(x.arms) for x in CLAIMS if x.control)
    n_exact = sum(len(x.arms) for x in CLAIMS if x.kind == "exact")
    assert sum(c["controls"].values()) == n_ctrl == c["controls"]["passed"]
    assert sum(c["exact"].values()) == n_exact
    assert sum(c["claims"].values()) == len(doc["claims"]) - n_ctrl - n_exact


def test_design_reasons_make_any_outcome_inconclusive():
    """A method at the edge of its learning-rate grid, or a testbed whose GRPO did not train:
    inconclusive whatever the primary shows, and the reason says what it showed; a design
    that cannot detect the paper's effect only keeps a significant result in the claimed
    direction from standing (type M)."""
    from bestk.lab.claims import design_reasons, type_m_reasons

    assert design_reasons() == []
    assert design_reasons(["lr edge"], ["no training"]) == ["lr edge", "no training"]
    assert type_m_reasons(0.01, 0.023) == [] and type_m_reasons(None, 0.023) == []
    assert "paper's effect" in type_m_reasons(0.03, 0.023)[0]
    with pytest.raises(ValueError, match="mde"):
        type_m_reasons(float("nan"), 0.1)
    v, why = verdict(0.5, 1e-9, "greater", type_m=["MDE 0.04 > the paper's effect 0.023"])
    assert v == "inconclusive" and "significant in the claimed direction" in why
    v, why = verdict(0.5, 1e-9, "greater", design=["lr edge"])
    assert v == "inconclusive" and "significant in the claimed direction" in why
    v, why = verdict(-0.5, 1e-9, "greater", design=["x"])
    assert v == "inconclusive" and "opposite direction" in why
    assert verdict(0.5, 1e-9, "greater", design=["x"], control=True)[0] == "reproduced"

    data = synthetic_data(0.05, seeds=40, noise=0.003)
    tb = data["digits-binary"]
    for m in tb["methods"].values():
        m["config"]["lr_grid"] = [3e-4, 1e-3, 3e-3]
    tb["methods"]["grpo"]["config"]["lr_grid"] = [1e-3, 3e-3]  # 1e-3 is its smallest rate
    lang = data["language-permute"]["methods"]["grpo"]
    lang["end"]["pass@1"] = (np.asarray(lang["start"]["pass@1"]) * 1.5).tolist()
    doc = _by_id(evaluate_claims(data))
    e = doc["maxrl-pareto@digits-binary"]
    assert (e["lr_a"], e["lr_b"]) == (1e-3, 1e-3)
    assert e["lr_grid"] == {"a": [3e-4, 1e-3, 3e-3], "b": [1e-3, 3e-3]}
    assert e["lr_interior"] == {"a": True, "b": False}
    assert e["verdict"] == "inconclusive" and "edge of its grid" in e["why"], e["why"]
    assert "primary significant in the claimed direction" in e["why"]
    # the A/A control keeps its verdict: it has no effect to detect
    assert doc["aa-control@digits-binary"]["verdict"] == "not reproduced"
    # GRPO's pass@1 grew x1.5 < 2 on language-permute: every claim arm there is inconclusive
    e = doc["argmaxrl-bestk@language-permute"]
    assert e["verdict"] == "inconclusive" and "did not train enough" in e["why"]
    assert e["power"]["trains"]["trains"] is False
    assert e["power"]["trains"]["ratio"] == pytest.approx(1.5)
    assert doc["argmaxrl-bestk@digits-graded"]["power"]["trains"] is None  # no check there
    # a language primary whose b starts outside [0.2, 0.8] cannot show much either
    data = synthetic_data(0.05, seeds=40, noise=0.003)
    grpo = data["language-permute"]["methods"]["grpo"]
    grpo["start"]["best@8"] = [0.9] * len(grpo["start"]["best@8"])
    e = _by_id(evaluate_claims(data))["argmaxrl-bestk@language-permute"]
    assert e["verdict"] == "inconclusive" and "outside [0.2, 0.8]" in e["why"], e["why"]


def test_a_sharpening_claim_needs_its_baseline_to_sharpen():
    """The KAPPO sharpening claims (a sharpens less than b) hold only where b sharpens: b's
    pass@16 ends below its start. Where it rises, the arm is inconclusive whatever the
    primary shows, the numbers are the reason and the check is recorded; with a tolerance and
    a narrow metric (the pretrained testbed's form) both conditions are checked."""
    from bestk.lab.claims import Sharpening
    from bestk.lab.claims.evaluate import sharpening_check

    data = synthetic_data(0.05, seeds=40, noise=0.003)
    doc = _by_id(evaluate_claims(data))
    e = doc["kappo-apo-sharpening@language-permute-kappo[k=4]"]
    assert e["verdict"] == "reproduced", e["why"]
    assert e["power"]["sharpening"]["sharpens"] is True
    assert doc["kappo-dpo-sharpening@language-permute-kappo"]["verdict"] == "reproduced"
    assert doc["maxrl-pareto@digits-binary"]["power"]["sharpening"] is None  # no precondition
    apo = data["language-permute-kappo"]["methods"]["apo(k=1)"]
    apo["end"]["pass@16"] = (np.asarray(apo["start"]["pass@16"]) + 0.01).tolist()
    doc = _by_id(evaluate_claims(data))
    for arm in ("k=4", "k=2"):
        e = doc[f"kappo-apo-sharpening@language-permute-kappo[{arm}]"]
        assert e["verdict"] == "inconclusive", e["why"]
        assert "apo(k=1) does not sharpen (pass@16" in e["why"]
        assert "not below its start" in e["why"]
        rec = e["power"]["sharpening"]
        assert rec["sharpens"] is False and rec["method"] == "apo(k=1)"
        assert rec["wide_end"] - rec["wide_start"] == pytest.approx(0.01)
    assert doc["kappo-dpo-sharpening@language-permute-kappo"]["verdict"] == "reproduced"

    tb = {"methods": {"grpo": {"start": {"pass@1": [0.2, 0.2], "pass@16": [0.6, 0.6]},
                               "end": {"pass@1": [0.4, 0.4], "pass@16": [0.61, 0.61]}}}}
    pre = Sharpening("pass@16", tolerance=0.02, narrow="pass@1")
    assert sharpening_check(pre, "grpo", tb)[0] == []  # +0.01 < 0.02, pass@1 up
    tb["methods"]["grpo"]["end"]["pass@16"] = [0.63, 0.63]
    why, rec = sharpening_check(pre, "grpo", tb)
    assert "less than 0.020 above its start" in why[0] and rec["sharpens"] is False
    tb["methods"]["grpo"]["end"]["pass@1"] = [0.2, 0.1]
    assert len(sharpening_check(pre, "grpo", tb)[0]) == 2
    assert "does not rise" in sharpening_check(pre, "grpo", tb)[0][1]
    why, rec = sharpening_check(pre, "nope", tb)
    assert rec is None and "cannot be checked" in why[0]
    with pytest.raises(ValueError, match="tolerance"):
        Sharpening(tolerance=-0.1)


def test_learning_rates_of_common_rate_and_swept_testbeds():
    from bestk.lab.claims import learning_rates

    tb = {"methods": {"a": {"config": {"lr": 3e-4}}, "b": {"config": {"lr": 3e-4}}}}
    out = learning_rates(tb, "a", "b")  # rates set by hand, no sweep
    assert out["lr_grid"] == {"a": [3e-4], "b": [3e-4]}
    assert out["lr_interior"] == {"a": None, "b": None}  # no grid to be interior to
    assert out["lr_rule"] == "as configured"
    common = {"sweep": {"grid": [1e-4, 3e-4], "grids": {"a": [1e-4, 3e-4, 1e-3]}, "seeds": 3,
                        "select_by": "validation pass@1", "common_lr_from": "a"},
              "methods": {"a": {"config": {"lr": 3e-4}}, "b": {"config": {"lr": 3e-4}}}}
    out = learning_rates(common, "a", "b")  # one rate for all, chosen on a's sweep
    assert out["lr_grid"] == {"a": [1e-4, 3e-4, 1e-3], "b": [1e-4, 3e-4, 1e-3]}
    assert out["lr_interior"] == {"a": True, "b": True}
    assert out["lr_rule"].startswith("one rate for every method")
    tb = {"sweep": {"grid": [1e-3, 3e-3, 1e-2], "grids": {"g": [3e-4, 1e-3, 3e-3, 1e-2]},
                    "seeds": 3, "select_by": "s"},
          "methods": {"g": {"config": {"lr": 3e-4}},
                      "g (A/A)": {"config": {"lr": 3e-4, "control_of": "g"}},
                      "h": {"config": {"lr": 3e-3}}}}
    out = learning_rates(tb, "g (A/A)", "h")  # a control uses its method's grid
    assert out["lr_grid"] == {"a": [3e-4, 1e-3, 3e-3, 1e-2], "b": [1e-3, 3e-3, 1e-2]}
    assert out["lr_interior"] == {"a": False, "b": True}
    assert "extended until the chosen rate is interior" in out["lr_rule"]


def test_primary_k_and_accuracy_normalised_diversity():
    from bestk.lab.claims import Metric, derived_metrics

    assert Metric("pass").keys([1, 4, 16], TESTBEDS["digits-binary"].primary_k) == ["pass@4"]
    assert Metric("pass").keys([1, 4, 16]) == ["pass@16"]
    assert Metric("pass").keys([1, 2], 8) == ["pass@2"]  # never beyond the measured k
    tb = {"n": 16, "methods": {"m": {"end": {"pass@1": [0.5, 0.25], "distinct_correct":
                                             [4.0, 2.0]},
                                     "start": {"pass@1": [0.0, 0.1], "distinct_correct":
                                               [0.0, 1.0]}}}}
    out = derived_metrics(tb)
    # distinct correct per correct sample: 4 / (16 x 0.5), 2 / (16 x 0.25)
    assert out["methods"]["m"]["end"][DIVERSITY] == pytest.approx([0.5, 0.5])
    assert DIVERSITY not in out["methods"]["m"]["start"]  # a pass@1 of 0: undefined
    assert DIVERSITY not in tb["methods"]["m"]["end"]  # the input is not changed
    # no claim compares methods on a single-context bandit where it cannot show
    for c in CLAIMS:
        if not c.control:
            assert "bandit-binary" not in {a.testbed for a in c.arms}, c.id


def test_an_arm_an_amendment_dropped_judges_nothing_and_the_family_keeps_its_declared_size():
    """smollm2's pre-registration amendment 2 dropped pkpo(k=16) after seed 0: its arm is
    'dropped' (why: the amendment), outside the family, and the family keeps its declared 5
    tests -- Holm over the judged arms' p plus p = 1 for the dropped one, alpha / 5 each."""
    data = synthetic_data(0.02, noise=0.01)
    doc = evaluate_claims(data)
    e = _by_id(doc)["atk-passk-pretrained@smollm2[pkpo]"]
    assert e["verdict"] == "dropped" and "amendment 2" in e["why"]
    assert "dropped" in VERDICTS
    fam = doc["families"]["pretrained"]
    assert e["id"] not in fam["members"] and len(fam["members"]) == 4
    assert fam["size"] == TESTBEDS["smollm2"].family_tests == 5
    assert fam["not_rejected_by_amendment"] == 1
    assert fam["alpha_per_arm"] == pytest.approx(ALPHA / 5)
    members = [x for x in doc["claims"] if x["id"] in fam["members"]]
    want = holm([x["primary"]["p"] for x in members] + [1.0])[:4]
    assert [x["primary"]["p_holm"] for x in members] == pytest.approx(want)
    # without the declared size the same arms would be corrected over 4 tests only
    assert want != pytest.approx(holm([x["primary"]["p"] for x in members]))
