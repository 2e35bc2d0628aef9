"""Verdict rules of bestk.lab.claims on synthetic lab outputs (no training needed)."""

from __future__ import annotations

import pytest

from bestk.lab.claims import Diff, _dominance_verdict, evaluate_claims, paired_diff, render_claims
from bestk.lab.digits import BIN_LABELS


def _stat(seeds):
    return {"mean": sum(seeds) / len(seeds), "ci95": 0.0, "seeds": list(seeds)}


def _setting(base: float, slope: float, alloc_top: float):
    ks = ["1", "4", "16"]
    jitter = [0.0, 0.001, -0.001]
    metric = {k: _stat([min(1.0, base + slope * i) + j for j in jitter])
              for i, k in enumerate(ks)}
    rest = (1 - alloc_top) / 4
    alloc = {b: _stat([rest] * 3) for b in BIN_LABELS[:-1]}
    alloc[BIN_LABELS[-1]] = _stat([alloc_top] * 3)
    return {"test_accuracy": metric["1"], "pass@k": metric, "best@k": metric,
            "allocation": alloc}


def _digits(better: float):
    learners = {"ml": (0.95, 0.0, 0.0), "grpo": (0.9, 0.02, 0.3), "rloo": (0.9, 0.02, 0.3),
                "reinforce": (0.5, 0.02, 0.3), "maxrl": (0.9 + better, 0.03, 0.1),
                "argmaxrl": (0.9 + better, 0.03, 0.1),
                "softmax_grpo(tau=0.1)": (0.94, 0.02, 0.1),
                "pkpo(k=4)": (0.8, 0.09, 0.0), "kappo_grpo(k=4)": (0.8, 0.09, 0.0)}
    out = {}
    for lb, (b, s, a) in learners.items():
        sets = {f"{r}/N={n}": _setting(b, s, a) for r in ("binary", "graded") for n in (4, 8)}
        out[lb] = {"test_accuracy": b, "pass@k": {}, "settings": sets}
    return out


def test_paired_diff_and_dominance_rules():
    d = paired_diff({"seeds": [1.0, 2.0, 3.0]}, {"seeds": [0.0, 1.0, 2.0]})
    assert d.mean == pytest.approx(1.0) and d.ci95 == pytest.approx(0.0) and d.better
    assert _dominance_verdict([Diff(0.1, 0.01, 3)])[0] == "reproduced"
    assert _dominance_verdict([Diff(0.1, 0.01, 3), Diff(-0.1, 0.01, 3)])[0] == "partly"
    assert _dominance_verdict([Diff(0.1, 0.5, 3)])[0] == "not reproduced"
    assert _dominance_verdict([Diff(-0.1, 0.01, 3)])[0] == "not reproduced"


def test_claim_verdicts_follow_the_data():
    good = {c.title: c.verdict for c in evaluate_claims(None, _digits(better=0.02))}
    bad = {c.title: c.verdict for c in evaluate_claims(None, _digits(better=-0.02))}
    assert good["MaxRL Pareto-dominates GRPO across k"] == "reproduced"
    assert bad["MaxRL Pareto-dominates GRPO across k"] == "not reproduced"
    assert good["ArgMaxRL improves best@k on graded rewards"] == "reproduced"
    assert bad["ArgMaxRL improves best@k on graded rewards"] == "not reproduced"
    assert good["SoftmaxGRPO moves gradient away from near-solved prompts"] == "reproduced"
    # REINFORCE 0.45 below ML and SoftmaxGRPO closer to ML than GRPO at every N
    assert good["SoftmaxGRPO tracks exact ML where GRPO lags and REINFORCE fails"] == "reproduced"
    assert good["@k training with k > 1 raises pass@k at large k"] == "reproduced"
    md = render_claims(evaluate_claims(None, _digits(better=0.02)))
    assert md.startswith("## Summary") and "**reproduced**" in md


def _compare_results(delta: float, names=("grpo", "argmaxrl", "pkpo")):
    def ev(shift):
        out = {}
        for k in (1, 2, 4, 8):
            out[f"pass@{k}"] = min(1.0, 0.1 * k + shift)
            out[f"best@{k}"] = min(1.0, 0.5 + 0.05 * k + shift)
        out["distinct"] = 3.0 + 10 * shift
        out["entropy"] = 0.5 + shift
        out["n"], out["num_prompts"] = 8.0, 16.0
        return out

    res = {}
    for name in names:
        shift = 0.0 if name == "grpo" else delta
        res[name] = {f"seed{s}": {"start": ev(0.01 * s), "end": ev(shift + 0.01 * s + 1e-3 * (
            s % 2) * (name != "grpo"))} for s in range(3)}
    spec = {"estimators": list(names), "seeds": 3}
    return {"results": res, "spec": spec, "wall_seconds": 60.0}


def test_language_claims_follow_the_compare_results():
    up = {c.title: c for c in evaluate_claims(None, None, _compare_results(0.05))}
    down = {c.title: c for c in evaluate_claims(None, None, _compare_results(-0.05))}
    t_arg = "Language task: ArgMaxRL improves best@k over GRPO (graded rewards)"
    t_pk = "Language task: PKPO (k=4) raises pass@k at large k over GRPO"
    assert up[t_arg].verdict == "reproduced" and up[t_pk].verdict == "reproduced"
    assert down[t_arg].verdict == "not reproduced" and down[t_pk].verdict == "not reproduced"
    assert "must be 0" in up[t_arg].tables[0]
    assert "16 prompts × 8 samples" in up[t_arg].testbed


def test_language_claims_for_all_six_estimators_and_diversity():
    names = ("grpo", "argmaxrl", "maxrl", "softmax_grpo", "pkpo", "kappo_grpo")
    up = evaluate_claims(None, None, _compare_results(0.05, names))
    down = evaluate_claims(None, None, _compare_results(-0.05, names))
    assert len(up) == 6  # one claim per learner vs grpo + diversity
    assert all(c.verdict == "reproduced" for c in up), [(c.title, c.verdict) for c in up]
    assert all(c.verdict == "not reproduced" for c in down)
    div = up[-1]
    assert "diverse" in div.title and "distinct" in div.tables[0] and "entropy" in div.tables[0]
    # the diversity verdict follows 'distinct' alone: raise it for one @k learner only
    mixed = _compare_results(0.0, names)
    for s, r in mixed["results"]["pkpo"].items():
        r["end"]["distinct"] += 1.0 + 0.01 * int(s[-1])
    assert evaluate_claims(None, None, mixed)[-1].verdict == "partly"
    # no learner but grpo: only the diversity claim, "not measured"
    only = evaluate_claims(None, None, _compare_results(0.05, ("grpo",)))
    assert [c.verdict for c in only] == ["not measured"]
