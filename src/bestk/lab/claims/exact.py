"""The rules of the exact claims: a deterministic threshold on an exactly computed quantity.

An exact claim (``ClaimSpec.kind == "exact"``) names its rule (``ClaimSpec.exact_rule``), a
key of :data:`EXACT_RULES`. A rule reads the testbed's data (exact enumeration, no sampling,
no test; or a deterministic computation on committed samples) and the claim's SESOI (``None``
where it declares none) and returns ``(value, ok, text, rule)``: the decisive quantity, whether
the claim is reproduced (``True`` / ``False``, or a verdict of
:data:`bestk.lab.claims.rule.VERDICTS` by name where the data can also leave it undecided or
contradict it), what the data show, and the rule in words; a rule on samples appends the
value's 95% interval ``[lo, hi]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from bestk.lab.common.io import BiasRow, TestbedData, fmt


def _rel_weight_errors(rows: list[BiasRow]) -> list[tuple[int, str, float, float, float]]:
    out = []
    binary = [r for r in rows if r["bandit"] == "binary"]
    for n in sorted({r["N"] for r in binary}):
        by = {r["estimator"]: r for r in binary if r["N"] == n}
        ref = by.get("argmaxrl(mean)")
        for lb in ("softmax_grpo(tau=1)", "softmax_grpo(tau=0.1)"):
            if ref is not None and lb in by:
                w, wr = by[lb]["implied_weight"], ref["implied_weight"]
                out.append((n, lb, w, wr, abs(w / wr - 1)))
    return out


def _exact_unbiased(tb: TestbedData, sesoi: float | None = None
                    ) -> tuple[float, bool, str, str]:
    rows = tb["bias"]
    claimed = [r for r in rows if r["unbiased_claim"] and " vs " not in r["estimator"]]
    worst = max(r["rel_bias"] for r in claimed)
    grpo = [r for r in rows if r["estimator"] == "grpo"]
    mean_jn = [r for r in rows if r["estimator"] == "argmaxrl(mean) vs J_N"]
    ok = worst < 1e-9 and all(r["rel_bias"] > 1e-3 for r in grpo + mean_jn)
    text = (f"largest relative bias among the {len(claimed)} (bandit, N, estimator) claims: "
            f"{fmt(worst)} (float64 round-off); GRPO (std) is biased for best@1 (rel. bias "
            f"{fmt(min(r['rel_bias'] for r in grpo))}–{fmt(max(r['rel_bias'] for r in grpo))});"
            " argmaxrl with the mean baseline is unbiased for J_(N-1), not J_N (rel. bias vs "
            f"J_N {fmt(min(r['rel_bias'] for r in mean_jn))}–"
            f"{fmt(max(r['rel_bias'] for r in mean_jn))})")
    rule = ("reproduced when every claimed objective has relative bias < 1e-9 and GRPO and "
            "argmaxrl(mean)-vs-J_N show a visible (> 1e-3) bias")
    return worst, ok, text, rule


def _exact_softmax_limit(tb: TestbedData, sesoi: float | None = None
                         ) -> tuple[float, bool, str, str]:
    errs = [e for n, lb, *_, e in _rel_weight_errors(tb["bias"]) if lb.endswith("0.1)")]
    worst = max(errs)
    text = (f"at tau = 0.1 the exact implied prompt weights of SoftmaxGRPO and of ArgMaxRL with "
            f"the mean baseline (MaxRL with T = N-1) differ by a relative {fmt(worst)} at most")
    return worst, worst < 0.01, text, ("reproduced when the relative difference at tau = 0.1 "
                                       "is below 1% for every N")


#: What the KAPPO closed-form claim must cover: methods per reward kind, and the k values.
KAPPO_EXACT_METHODS = {"binary": ("apo", "dpo", "rloo", "drgrpo"),
                       "winrate": ("apo", "rloo", "drgrpo")}
KAPPO_EXACT_KS = (1, 2, 4)
KAPPO_EXACT_TOL = 1e-3


def _exact_kappo(tb: TestbedData, sesoi: float | None = None
                 ) -> tuple[float, bool, str, str]:
    cases = tb["cases"]
    claimed = [c for c in cases if c["claims_closed_form"] and c["method"] != "direct"]
    have = {(c["kind"], c["k"], c["method"]) for c in claimed}
    want = {(kind, k, m) for kind, ms in KAPPO_EXACT_METHODS.items() for k in KAPPO_EXACT_KS
            for m in ms}
    missing = sorted(want - have)
    worst = max((c["closed_form_error"] for c in claimed), default=float("inf"))
    failed = [c for c in claimed if not (c["converged"] and c["closed_form_error"] <=
                                         KAPPO_EXACT_TOL and c["error"] <= KAPPO_EXACT_TOL)]
    ok = not missing and not failed
    by: dict[tuple[str, str], float] = {}
    for c in claimed:
        key = (c["kind"], c["method"])
        by[key] = max(by.get(key, 0.0), c["closed_form_error"])
    parts = [f"{m} ({kind}) {fmt(v)}" for (kind, m), v in by.items()]
    grpo = [c for c in cases if c["method"] == "kappo_grpo"]
    text = (f"largest total-variation distance to the closed form over the {len(claimed)} "
            f"claimed cases (k = {', '.join(map(str, sorted({c['k'] for c in claimed})))}): "
            f"{fmt(worst)}; per method: " + ", ".join(parts))
    if failed:
        text += "; failed: " + ", ".join(f"{c['method']} {c['kind']} k={c['k']}"
                                         for c in failed)
    if missing:
        text += "; not run: " + ", ".join(f"{m} {kind} k={k}" for kind, k, m in missing)
    if grpo:
        text += ("; std-normalised @k-GRPO (Eq. 140, not claimed to reach it) converges to "
                 f"its own stationary point (error {fmt(max(c['error'] for c in grpo))}), "
                 f"at distance up to {fmt(max(c['closed_form_error'] for c in grpo))} from "
                 "the pass@k optimum")
    rule = (f"reproduced when every claimed (kind, k, method) case converged and is within "
            f"{KAPPO_EXACT_TOL:g} of both its derived limit and the closed form")
    return worst, ok, text, rule


def _exact_allocation(tb: TestbedData, sesoi: float | None = None
                      ) -> tuple[float, str, str, str, list[float]]:
    """SoftmaxGRPO's Table 3 on a model's own rollouts (``benchmarks/smollm2_allocation.py``):
    the difference ``GRPO's share - SoftmaxGRPO's share`` of the gradient budget on prompts
    with pass rate in [0.9, 1], with its bootstrap interval over prompts."""
    if sesoi is None:
        raise ValueError("the allocation rule needs the claim's SESOI")
    d = float(tb["near_solved_diff"])
    lo, hi = (float(x) for x in tb["near_solved_ci95"])
    shares = {lb: m["share"][-1] for lb, m in tb["methods"].items()}
    headroom = float(shares["grpo"])  # GRPO's own share: the most a method can take from it
    verdict = ("reproduced" if lo > 0 else "contradicted" if hi < 0
               else "inconclusive" if headroom < sesoi
               else "not reproduced" if hi < sesoi else "inconclusive")
    text = ("share of the budget on p in [0.9, 1]: " + ", ".join(
        f"{lb} {100 * v:.1f}%" for lb, v in shares.items()) + f"; difference {fmt(d)} "
            f"[{fmt(lo)}, {fmt(hi)}] (95% bootstrap over {tb['prompts']} prompts, groups of "
            f"{tb['group']}, pass rate from {tb['measure_samples']} other samples each)")
    if headroom < sesoi and lo <= 0 <= hi:
        near = tb["methods"]["grpo"]["prompts"][-1]
        text += (f"; GRPO itself gives near-solved prompts {100 * headroom:.1f}% of the budget "
                 f"({near} of {tb['prompts']} prompts have p in [0.9, 1]), less than the SESOI "
                 "SoftmaxGRPO could take from it: this model's rollouts cannot show the effect")
    rule = (f"reproduced when the interval lies above 0; contradicted when below 0; "
            f"inconclusive when GRPO's own share is below the SESOI {sesoi:g} (no room for "
            f"the effect); not reproduced when the interval's upper end is below the SESOI; "
            f"else inconclusive")
    return d, verdict, text, rule, [lo, hi]


ExactRule: TypeAlias = Callable[..., tuple]
EXACT_RULES: dict[str, ExactRule] = {
    "unbiased": _exact_unbiased, "softmax_limit": _exact_softmax_limit,
    "kappo_closed_form": _exact_kappo, "allocation": _exact_allocation}
