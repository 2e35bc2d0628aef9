"""The claims registry and the verdict rule of bestk.lab.claims, on synthetic per-seed data."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from bestk.lab.claims import (
    CLAIMS,
    TESTBEDS,
    VERDICTS,
    evaluate_claims,
    render_claims,
    verdict,
)
from bestk.lab.digits import BIN_LABELS
from bestk.stats import holm

BASELINES = {"grpo", "grpo (success)", "grpo (A/A)"}
#: The reference arms of the KAPPO testbed (k = 1, and PKPO for the Fig. 3 claim).
KAPPO_BASELINES = {"apo(k=1)", "dpo(k=1)", "pkpo(k=4)", "apo(k=1) (A/A)"}


def test_verdict_rule_flips_both_ways():
    assert verdict(0.05, 0.001, "greater")[0] == "reproduced"
    assert verdict(0.05, 0.2, "greater")[0] == "not reproduced"
    assert verdict(-0.05, 0.001, "greater")[0] == "contradicted"
    assert verdict(-0.05, 0.001, "less")[0] == "reproduced"
    assert verdict(0.05, 0.001, "less")[0] == "contradicted"
    # exactly at alpha is not significant
    assert verdict(0.05, 0.05, "greater")[0] == "not reproduced"
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


def _methods_by_testbed() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in CLAIMS:
        for arm in c.arms:
            if c.kind == "trained":
                out.setdefault(arm.testbed, set()).update({arm.a, arm.b})
    return out


def synthetic_data(effect: float, *, seeds: int = 10, noise: float = 0.004,
                   seed: int = 0) -> dict:
    """Per-seed data for every trained testbed: baselines (GRPO, its success and A/A
    variants) at the base level, RLOO ``effect`` worse, every other method ``effect`` better
    on every metric (in the metric's own direction). Seeds share a per-seed offset (pairing)."""
    rng = np.random.default_rng(seed)
    data = {}
    for tid, methods in _methods_by_testbed().items():
        ks = [1, 4, 16] if TESTBEDS[tid].kind != "language" else [1, 2, 4, 8, 16, 32, 64]
        n = max(TESTBEDS[tid].min_seeds, seeds)
        keys = {f"{p}@{k}": ("greater", 0.3 + 0.02 * i) for p in ("pass", "best")
                for i, k in enumerate(ks)}
        keys.update({f"alloc{b}": ("greater", 0.2) for b in BIN_LABELS})
        keys["alloc[.9,1]"] = ("less", 0.2)
        keys["distinct_correct"] = ("greater", 5.0)
        offset = rng.normal(0, 0.02, n)
        tb = {"ks": ks, "seeds": list(range(n)), "methods": {}}
        baselines = BASELINES | (KAPPO_BASELINES if tid == "language-permute-kappo" else set())
        for lb in sorted(methods):
            e = 0.0 if lb in baselines else (-effect if lb == "rloo" else effect)
            end, start = {}, {}
            for key, (better, base) in keys.items():
                sign = 1.0 if better == "greater" else -1.0
                end[key] = (base + sign * e + offset + rng.normal(0, noise, n)).tolist()
                start[key] = (base - 0.05 + offset).tolist()
            reward = "success" if lb in ("maxrl", "grpo (success)", "kappo_grpo(k=4)") and \
                TESTBEDS[tid].kind == "language" else "binary"
            tb["methods"][lb] = {"config": {"reward": reward, "prompts": f"{tid}-prompts",
                                            "rollouts": 1000, "lr": 1e-3},
                                 "start": start, "end": end}
        data[tid] = tb
    return data


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
        if e["control"]:
            assert e["verdict"] == "not reproduced", cid
            assert down[cid]["verdict"] == "not reproduced", cid
            continue
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
        m["end"]["pass@64"] = (np.asarray(tb["methods"]["pkpo(k=4)"]["end"]["pass@64"])
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


def test_an_exact_claim_without_a_known_rule_is_refused():
    from bestk.lab.claims import Arm, ClaimSpec, Metric

    for rule in (None, "no_such_rule"):
        spec = ClaimSpec("z", "z", "z", "exact", (Arm("kappo-exact"),), "r", Metric("pass", 1),
                         exact_rule=rule)
        with pytest.raises(ValueError, match="exact claim z has exact_rule"):
            evaluate_claims({}, [spec])
