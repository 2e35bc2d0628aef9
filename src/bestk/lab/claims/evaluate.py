"""``claims.json`` from the testbeds' per-seed data: each arm's tests, power and verdict.

:func:`evaluate_claims` builds one entry per arm: the paired tests of the primary and
secondary metrics (Holm-adjusted over the family and within the arm), the claim's declared
SESOI and its source (``sesoi``, ``sesoi_source``), the power fields (``mde``,
``paper_effect``, ``headroom``, ``seeds_needed``), the learning rates and the testbed's
checks, the verdict of :func:`bestk.lab.claims.rule.verdict` and ``robust``
(:func:`bestk.lab.claims.rule.robust_flag`).

Exact claims are decided by a deterministic threshold on an exactly computed quantity
(:mod:`bestk.lab.claims.exact`; no sampling, no test). Arms whose testbed has no data yet, or
fewer seeds than the testbed needs, are **pending**; arms whose two methods did not see the
same reward, prompts and rollout budget (read from the run configurations) are **not
comparable**. Both stay out of the family. A claim that compares budgets on purpose
(``ClaimSpec.budget = "by design"``, e.g. @k-A*PO with one on-policy completion per prompt
against PKPO with eight) says so: its arms record both budgets and ``budget_matched`` is
false, and only reward and prompts must match.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypedDict

import numpy as np

from bestk.lab.claims.exact import EXACT_RULES
from bestk.lab.claims.rule import (
    ALPHA,
    POWER,
    VERDICTS,
    design_reasons,
    inconclusive_reasons,
    robust_flag,
    seed_headroom,
    sign_flip_floor_holm,
    stall_premise,
    type_m_reasons,
    verdict,
)
from bestk.lab.claims.specs import (
    DIVERSITY,
    Arm,
    ArmEntry,
    ClaimsDoc,
    ClaimSpec,
    NonInferiority,
    Sharpening,
    arm_id,
)
from bestk.lab.claims.table import CLAIMS, PAPER_EFFECTS, RULE_DECLARED, SESOI, TESTBEDS
from bestk.lab.common.io import MethodData, TestbedData, fmt
from bestk.lr_sweep import is_interior
from bestk.stats import (
    EXACT_MAX_N,
    MC_DRAWS,
    bimodality_coefficient,
    holm,
    paired_mde,
    paired_test,
    seeds_needed,
    sign_flip_min_p,
    sign_flip_p,
)


class _PairedTestKeys(TypedDict):
    diff: float
    ci95: list[float]
    p: float


class PairedTest(_PairedTestKeys, total=False):
    """A paired test in ``claims.json``: the mean difference ``a - b``, its 95% interval, the
    t-test's p and (``perm``) the sign-flip p (:func:`_test_json`)."""

    p_perm: float


class SecondaryTest(PairedTest, total=False):
    """A secondary metric's test in an arm: its key, its better direction, the
    :class:`PairedTest` and the p-values Holm-adjusted within the arm."""

    metric: str
    better: str
    p_holm: float
    p_perm_holm: float


class TrainsCheck(TypedDict):
    """:attr:`~bestk.lab.claims.specs.TestbedSpec.trains_if` on the data: ``method``'s mean
    ``metric`` at the start and the end, their ratio and the ``factor`` it must reach."""

    method: str
    metric: str
    start: float
    end: float
    ratio: float
    factor: float
    trains: bool


def _matched(tb: TestbedData, a: str, b: str) -> dict[str, object]:
    """The matching fields of an arm: same reward, prompts and budget, and both budgets."""
    ca, cb = tb["methods"][a]["config"], tb["methods"][b]["config"]
    return {"reward_matched": ca["reward"] == cb["reward"],
            "prompt_matched": ca["prompts"] == cb["prompts"],
            "budget_matched": ca["rollouts"] == cb["rollouts"],
            "budget": {side: {"rollouts": c["rollouts"], "bank": c.get("bank", 0)}
                       for side, c in (("a", ca), ("b", cb))}}



def _test_json(a: Sequence[float], b: Sequence[float], *, perm: bool = False,
               shift: float = 0.0) -> PairedTest:
    """Difference, 95% interval and p of the paired t-test of ``a - b``; with ``perm`` also
    the sign-flip p. ``shift`` (a non-inferiority margin) is added to ``a - b`` for the
    p-values only: the difference and interval stay those of ``a - b``."""
    t = paired_test(a, b)
    out: PairedTest = {"diff": t.diff, "ci95": [t.ci95[0], t.ci95[1]], "p": t.p}
    if shift:
        out["p"] = paired_test(np.add(a, shift), b).p
    if perm:
        out["p_perm"] = sign_flip_p(np.subtract(a, b) + shift)
    return out


def _trained_entry(spec: ClaimSpec, arm: Arm, tb: TestbedData | None,
                   min_seeds: int | None = None) -> ArmEntry:
    """An arm's entry with its tests (no verdict yet: ``pending`` until judged): ``dropped``,
    or left pending with the reason when the testbed has no data, lacks a method, has fewer
    than ``min_seeds`` seeds (default the testbed's own) or does not measure the primary
    metric; ``not comparable`` when the two methods did not see the same reward, prompts
    and (unless the claim compares budgets) budget."""
    tspec = TESTBEDS[arm.testbed]
    need = tspec.min_seeds if min_seeds is None else min_seeds
    e = _blank_entry(spec, arm)
    why_dropped = tspec.dropped_why(arm.a) or tspec.dropped_why(arm.b)
    if why_dropped is not None:
        e["verdict"], e["why"] = "dropped", why_dropped
        return e
    if tb is None or arm.a not in tb.get("methods", {}) or arm.b not in tb.get("methods", {}):
        e["why"] = (tspec.pending_why or "no data for this testbed yet") if tb is None else \
            f"methods {arm.a!r} / {arm.b!r} not in the testbed data"
        return e
    assert arm.a is not None and arm.b is not None  # None is no testbed's method
    n_seeds = len(tb["seeds"])
    e["seeds"] = n_seeds
    if n_seeds < need:
        e["why"] = f"{n_seeds} of {need} seeds done"
        return e
    e.update(_matched(tb, arm.a, arm.b))
    e.update(learning_rates(tb, arm.a, arm.b))
    ma, mb = tb["methods"][arm.a], tb["methods"][arm.b]
    ks = tb["ks"]
    (key,) = spec.primary.keys(ks, tspec.primary_k)
    if key not in ma["end"] or key not in mb["end"]:
        e["why"] = f"metric {key} not measured on this testbed"
        return e
    e["primary"]["test_perm"] = _perm_test_text(n_seeds)
    e["primary"].update(metric=key, per_seed_a=list(ma["end"][key]),
                        per_seed_b=list(mb["end"][key]),
                        **_test_json(ma["end"][key], mb["end"][key], perm=True,
                                     shift=spec.margin or 0.0))  # margin: H1 a - b > -margin
    if key in ma.get("start", {}):
        e["change_from_start"] = {side: _test_json(m["end"][key], m["start"][key])
                                  for side, m in (("a", ma), ("b", mb))}
    e["secondary"] = _secondary_tests(spec, key, ks, tspec.primary_k, ma, mb)
    if spec.noninferiority is not None:
        e["noninferiority"] = _noninferiority_test(spec.noninferiority, ks, tspec.primary_k,
                                                   ma, mb)
    unmatched = _unmatched(e)
    if unmatched:
        e["verdict"] = "not comparable"
        e["why"] = unmatched + " not matched"
    return e


def _blank_entry(spec: ClaimSpec, arm: Arm) -> ArmEntry:
    """An arm's entry before any data: what the claim and testbed declare (SESOI and its
    source, the primary test), every measured field None, verdict ``pending``."""
    sesoi, sesoi_source = SESOI.get(spec.id, (None, "an exact claim is decided by a threshold "
                                                    "on an exact quantity, not by an effect "
                                                    "size"))
    return {
        "id": arm_id(spec, arm), "claim_id": spec.id, "claim": spec.claim,
        "source": spec.source, "testbed": arm.testbed, "kind": spec.kind, "a": arm.a,
        "b": arm.b, "reward": spec.reward, "seeds": 0,
        "primary": {"metric": spec.primary.label, "direction": spec.direction,
                    "per_seed_a": [], "per_seed_b": [], "diff": None, "ci95": None, "p": None,
                    "p_holm": None, "p_perm": None, "p_perm_holm": None,
                    "margin": spec.margin,
                    "test": "paired t-test of a - b" if spec.margin is None else
                            f"non-inferiority: paired t-test of a - b + {spec.margin}",
                    "test_perm": None},
        "secondary": [], "noninferiority": None, "change_from_start": None,
        "sesoi": sesoi, "sesoi_source": sesoi_source,
        "mde": None, "paper_effect": None, "paper_effect_why": None, "headroom": None,
        "seeds_needed": None, "power": None, "robust": None,
        "lr_a": None, "lr_b": None, "lr_grid": None, "lr_interior": None, "lr_rule": None,
        "reward_matched": None, "prompt_matched": None, "budget_matched": None,
        "budget_by_design": spec.budget == "by design", "budget": None,
        "control": spec.control, "status": spec.status, "verdict": "pending", "why": "",
        "command": TESTBEDS[arm.testbed].command,
    }


def _perm_test_text(n_seeds: int) -> str:
    """How the sign-flip test of ``n_seeds`` paired differences is computed: exact up to
    ``EXACT_MAX_N`` seeds, else Monte Carlo."""
    return (f"two-sided sign-flip permutation test of the same differences: exact over all "
            f"2^{n_seeds} sign patterns" if n_seeds <= EXACT_MAX_N else
            f"two-sided sign-flip permutation test of the same differences: Monte Carlo over "
            f"{MC_DRAWS} sign patterns (numpy default_rng(0))")


def _secondary_tests(spec: ClaimSpec, key: str, ks: Sequence[int], primary_k: int | None,
                     ma: MethodData, mb: MethodData) -> list[SecondaryTest]:
    """The paired tests (t and sign-flip, each Holm-adjusted within the arm) of every
    secondary metric key both methods measured, the primary's ``key`` excluded."""
    sec: list[SecondaryTest] = []
    for metric in spec.secondary:
        for k2 in metric.keys(ks, primary_k):
            if k2 == key or k2 not in ma["end"] or k2 not in mb["end"]:
                continue
            sec.append({"metric": k2, "better": metric.better,
                        **_test_json(ma["end"][k2], mb["end"][k2], perm=True)})
    for s, p, pp in zip(sec, holm([s["p"] for s in sec]), holm([s["p_perm"] for s in sec]),
                        strict=True):
        s["p_holm"], s["p_perm_holm"] = p, pp
    return sec


def _noninferiority_test(ni: NonInferiority, ks: Sequence[int], primary_k: int | None,
                         ma: MethodData, mb: MethodData) -> dict[str, object] | None:
    """A Pareto claim's margin on its metric: the difference a - b, its 95% interval and
    whether the interval lies above ``-margin`` (None when a method did not measure it)."""
    (k3,) = ni.metric.keys(ks, primary_k)
    if k3 not in ma["end"] or k3 not in mb["end"]:
        return None
    t = _test_json(ma["end"][k3], mb["end"][k3])
    return {"metric": k3, "margin": ni.margin, "diff": t["diff"], "ci95": t["ci95"],
            "holds": bool(t["ci95"][0] > -ni.margin)}


def _unmatched(e: ArmEntry) -> str:
    """What the arm's two methods did not share (``"reward, budget"``; empty when all
    matched): reward, prompts and, unless the claim compares budgets, budget."""
    matches = ["reward_matched", "prompt_matched"] + ([] if e["budget_by_design"] else
                                                      ["budget_matched"])
    if all(e[k] for k in matches):
        return ""
    return ", ".join(k for k in matches if not e[k]).replace("_matched", "")


def _exact_entry(spec: ClaimSpec, arm: Arm, tb: TestbedData | None) -> ArmEntry:
    if spec.exact_rule is None or spec.exact_rule not in EXACT_RULES:
        raise ValueError(f"exact claim {spec.id} has exact_rule {spec.exact_rule!r}; "
                         f"known: {sorted(EXACT_RULES)}")
    e = _trained_entry(spec, arm, None)
    e.update(reward_matched=True, prompt_matched=True, budget_matched=True)
    if tb is None:
        return e
    value, ok, text, rule, *interval = EXACT_RULES[spec.exact_rule](tb, sesoi=e["sesoi"])
    e["primary"].update(diff=value, ci95=interval[0] if interval else [value, value])
    e["verdict"] = ok if isinstance(ok, str) else "reproduced" if ok else "not reproduced"
    e["why"] = f"{text}; rule: {rule}"
    return e


def _lr_grid(tb: TestbedData, label: str) -> list[float]:
    """The grid a method's learning rate was chosen from (an A/A control: its method's)."""
    cfg = tb["methods"][label]["config"]
    if cfg.get("lr_grid"):
        return [float(v) for v in cfg["lr_grid"]]
    sweep = tb.get("sweep") or {}
    tuned = sweep.get("common_lr_from") or cfg.get("control_of") or label
    grid = (sweep.get("grids") or {}).get(tuned) or sweep.get("grid")
    return [float(v) for v in grid] if grid else [float(cfg["lr"])]


def learning_rates(tb: TestbedData, a: str, b: str) -> dict[str, object]:
    """An arm's learning rates: ``lr_a``, ``lr_b``, the grids they were chosen from
    (``lr_grid``), whether each is interior to its grid (``lr_interior``; ``None`` for a rate
    set by hand, which has no grid to be interior to) and how they were chosen
    (``lr_rule``)."""
    grids: dict[str, list[float]] = {}
    interior: dict[str, bool | None] = {}
    out: dict[str, object] = {"lr_grid": grids, "lr_interior": interior}
    for side, label in (("a", a), ("b", b)):
        lr = float(tb["methods"][label]["config"]["lr"])
        grid = _lr_grid(tb, label)
        out[f"lr_{side}"] = lr
        grids[side] = grid
        interior[side] = is_interior(lr, grid) if len(grid) > 1 else None
    sweep = tb.get("sweep") or {}
    if sweep.get("common_lr_from"):
        out["lr_rule"] = (f"one rate for every method: the rate of "
                          f"{sweep['common_lr_from']} chosen by a validation sweep over "
                          f"{sweep.get('seeds')} seed(s), score: {sweep.get('select_by')}; "
                          "grid extended until the chosen rate is interior")
    elif sweep:
        out["lr_rule"] = (f"per method, validation sweep over {sweep.get('seeds')} seed(s), "
                          f"score: {sweep.get('select_by', 'see the testbed')}"
                          + ("; grid extended until the chosen rate is interior"
                             if "grids" in sweep else "; fixed grid"))
    else:
        out["lr_rule"] = "as configured"
    return out


def _lr_reasons(e: ArmEntry) -> list[str]:
    """A learning rate at the edge of its grid: the method may be untuned, so the
    comparison says nothing about the method."""
    out = []
    for side in ("a", "b"):
        if (e.get("lr_interior") or {}).get(side) is False:
            out.append(f"the learning rate of {e[side]} ({e[f'lr_{side}']:g}) is at the edge "
                       f"of its grid {e['lr_grid'][side]}")
    return out


def _trains_reason(testbed: str, tb: TestbedData) -> tuple[list[str], TrainsCheck | None]:
    """:attr:`TestbedSpec.trains_if` checked on the data: ``([reason], record)``."""
    rule = TESTBEDS[testbed].trains_if
    if rule is None:
        return [], None
    method, key, factor = rule
    m = tb.get("methods", {}).get(method)
    if m is None or key not in m.get("end", {}) or key not in m.get("start", {}):
        return [f"the training check ({method} {key}) cannot be made: not in the data"], None
    start, end = float(np.mean(m["start"][key])), float(np.mean(m["end"][key]))
    ratio = end / start if start > 0 else math.inf
    rec: TrainsCheck = {"method": method, "metric": key, "start": start, "end": end, "ratio": ratio,
           "factor": factor, "trains": bool(ratio >= factor)}
    if ratio >= factor:
        return [], rec
    return [f"the testbed did not train enough: {method} {key} {fmt(start)} -> {fmt(end)} "
            f"(x{ratio:.2f} < {factor:g})"], rec


class SharpeningCheck(TypedDict):
    """:class:`~bestk.lab.claims.specs.Sharpening` on the data: ``method`` (the arm's b), the
    mean start and end of its ``wide`` (and ``narrow``) metric, the 95% t-interval over seeds
    of the change of each (``None`` with fewer than two seeds), and whether it sharpens."""

    method: str
    wide: str
    wide_start: float
    wide_end: float
    wide_change_ci95: list[float] | None
    narrow_change_ci95: list[float] | None
    tolerance: float
    narrow: str | None
    narrow_start: float | None
    narrow_end: float | None
    sharpens: bool


def sharpening_check(pre: Sharpening, method: str, tb: TestbedData
                     ) -> tuple[list[str], SharpeningCheck | None]:
    """``([reason], record)`` of a claim's sharpening precondition on testbed data ``tb``:
    ``method`` (the arm's b) sharpens when its mean end ``wide`` lies less than
    ``pre.tolerance`` above its mean start and, with ``pre.narrow``, its mean ``narrow`` rises;
    the reason is empty when it does."""
    m = tb.get("methods", {}).get(method, {})
    keys = [pre.wide] + ([pre.narrow] if pre.narrow else [])
    if any(k not in m.get("start", {}) or k not in m.get("end", {}) for k in keys):
        return [f"the sharpening precondition ({method} {', '.join(keys)} at the start and the "
                "end) cannot be checked: not in the data"], None

    def means(key: str) -> tuple[float, float]:
        return float(np.mean(m["start"][key])), float(np.mean(m["end"][key]))

    def change_ci(key: str | None) -> list[float] | None:
        if key is None or len(m["end"][key]) < 2:
            return None
        return [float(v) for v in paired_test(m["end"][key], m["start"][key]).ci95]

    w0, w1 = means(pre.wide)
    n0, n1 = means(pre.narrow) if pre.narrow else (None, None)
    wide_ok = w1 - w0 < pre.tolerance
    narrow_ok = n0 is None or n1 is None or n1 > n0
    rec: SharpeningCheck = {"method": method, "wide": pre.wide, "wide_start": w0,
                            "wide_end": w1, "wide_change_ci95": change_ci(pre.wide),
                            "narrow_change_ci95": change_ci(pre.narrow),
                            "tolerance": pre.tolerance, "narrow": pre.narrow,
                            "narrow_start": n0, "narrow_end": n1,
                            "sharpens": bool(wide_ok and narrow_ok)}
    out = []
    if not wide_ok:
        bound = "below its start" if pre.tolerance == 0 else \
            f"less than {fmt(pre.tolerance)} above its start"
        ci = rec["wide_change_ci95"]
        out.append(f"the precondition fails: {method} does not sharpen ({pre.wide} "
                   f"{fmt(w0)} -> {fmt(w1)}"
                   + ("" if ci is None else f", change 95% CI [{fmt(ci[0])}, {fmt(ci[1])}]")
                   + f", not {bound}), so there is no sharpening to lessen")
    if n0 is not None and n1 is not None and not narrow_ok:
        out.append(f"the precondition fails: {method} does not sharpen ({pre.narrow} "
                   f"{fmt(n0)} -> {fmt(n1)} does not rise)")
    return out, rec


def _start_reason(e: ArmEntry, spec: ClaimSpec, tb: TestbedData) -> list[str]:
    """:attr:`TestbedSpec.start_range` checked for an arm whose primary is pass@k / best@k at
    the testbed's primary k (a pass@1 accuracy claim is judged by the training check)."""
    rng = TESTBEDS[e["testbed"]].start_range
    key = e["primary"]["metric"]
    start = tb["methods"][e["b"]].get("start", {}).get(key)
    if rng is None or not spec.primary.at_k or spec.primary.k is not None or start is None:
        return []
    s0 = float(np.mean(start))
    if rng[0] <= s0 <= rng[1]:
        return []
    return [f"b's start value of {key} is {fmt(s0)}, outside [{rng[0]:g}, {rng[1]:g}]: the "
            "primary starts too close to a bound to show the effect"]


def derived_metrics(tb: TestbedData) -> TestbedData:
    """A copy of a testbed's data with the derived per-seed metrics added: :data:`DIVERSITY`
    = ``distinct_correct / (n * pass@1)`` where both are measured and every pass@1 > 0."""
    n = tb.get("n")
    if not n or "methods" not in tb:
        return tb
    methods = {}
    for label, m in tb["methods"].items():
        m = {**m}
        for when in ("start", "end"):
            vals = m.get(when)
            if not vals or "distinct_correct" not in vals or "pass@1" not in vals:
                continue
            p1 = np.asarray(vals["pass@1"], dtype=float)
            if not (p1 > 0).all():
                continue
            m[when] = {**vals, DIVERSITY: (np.asarray(vals["distinct_correct"], dtype=float)
                                           / (n * p1)).tolist()}
        methods[label] = m
    return {**tb, "methods": methods}


def _bounds(key: str, testbed: str, tb: TestbedData) -> tuple[float, float] | None:
    """The range of a per-seed metric: pass@k and allocation shares in [0, 1], best@k in the
    testbed's reward range, distinct correct completions in [0, samples per prompt]."""
    if key.startswith("pass@") or key.startswith("alloc"):
        return 0.0, 1.0
    if key.startswith("best@"):
        return TESTBEDS[testbed].reward_range
    if key == "distinct_correct" and tb.get("n"):
        return 0.0, float(tb["n"])
    if key == DIVERSITY:
        return 0.0, 1.0
    return None


class Guards(TypedDict):
    """Why an arm's outcome cannot support a verdict, by the step of the rule each guards
    (:func:`bestk.lab.claims.rule.verdict`): ``design`` any outcome, ``premise`` (a claim
    that b fails to train: :func:`~bestk.lab.claims.rule.stall_premise`, ``None`` for other
    claims) all but a significant opposite one, ``type_m`` a significant one in the claimed
    direction, ``underpowered`` a non-significant one."""

    design: list[str]
    premise: tuple[str, str] | None
    type_m: list[str]
    underpowered: list[str]


def _power_fields(e: ArmEntry, spec: ClaimSpec, tb: TestbedData, alpha: float) -> Guards:
    """Fill an evaluated arm's ``mde``, ``paper_effect``, ``headroom``, ``seeds_needed`` and
    ``power`` (details); return the reasons the rule needs (:class:`Guards`)."""
    p = e["primary"]
    d = np.subtract(p["per_seed_a"], p["per_seed_b"])
    n = int(d.size)
    sd = float(d.std(ddof=1))
    constant = paired_test(p["per_seed_a"], p["per_seed_b"]).exact
    mde = None if constant else paired_mde(sd, n, alpha, POWER)
    effect, effect_why = PAPER_EFFECTS.get(spec.id, (None, "no entry in PAPER_EFFECTS"))
    sesoi = e["sesoi"]
    mean_b = float(np.mean(p["per_seed_b"]))
    rng = _bounds(p["metric"], e["testbed"], tb)
    headroom = None if rng is None else seed_headroom(p["per_seed_b"], rng, spec.direction)
    cfs = e["change_from_start"]
    b_moved = None
    if cfs is not None:
        lo, hi = cfs["b"]["ci95"]
        b_moved = not (lo <= 0.0 <= hi)
    margin_claim = spec.margin is not None
    guards: Guards = {"design": [], "premise": None, "type_m": [], "underpowered": []}
    trains, trains_rec = _trains_reason(e["testbed"], tb)
    trains += _start_reason(e, spec, tb)
    sharp_rec = None
    if spec.precondition is not None:
        sharp, sharp_rec = sharpening_check(spec.precondition, e["b"], tb)
        trains += sharp
    if not spec.control:
        guards["design"] = design_reasons(_lr_reasons(e), trains)
        guards["type_m"] = type_m_reasons(mde, effect)
        guards["underpowered"] = inconclusive_reasons(headroom, b_moved, sesoi,
                                                      margin_claim=margin_claim)
        if spec.claims_b_stalls and cfs is not None:
            guards["premise"] = stall_premise(cfs["b"]["ci95"], sesoi, spec.primary.better)
    need, need_why = None, None
    refuted = guards["premise"] is not None and guards["premise"][0] == "refuted"
    if guards["design"] or refuted:
        need_why = ("not reachable by more seeds: " + ("the design cannot support a verdict"
                                                       if guards["design"] else
                                                       "the claim's premise (b fails to "
                                                       "train) is refuted: b trained"))
    elif sesoi is not None and not constant:
        if headroom is not None and not margin_claim and headroom < sesoi:
            need_why = (f"not reachable: b's headroom {fmt(headroom)} is below the SESOI "
                        f"{fmt(sesoi)}, so no number of seeds shows an effect of interest here")
        else:
            try:
                need = seeds_needed(sd, sesoi, alpha, POWER)
                need_why = f"seeds for MDE <= the SESOI {fmt(sesoi)} at the observed SD"
            except ValueError as err:  # beyond 10^7 seeds
                need_why = f"not reachable: {err}"
    e.update(mde=mde, paper_effect=effect, paper_effect_why=effect_why, headroom=headroom,
             seeds_needed=need)
    floor = sign_flip_min_p(n) if n <= EXACT_MAX_N else 1.0 / (1 + MC_DRAWS)
    e["power"] = {
        "alpha": alpha, "power": POWER, "sd_diff": sd, "n": n, "b_end_mean": mean_b,
        "bounds": None if rng is None else list(rng), "b_moved": b_moved,
        "sign_flip_min_p": floor, "seeds_needed_for": need_why,
        "mde_definition": "two-sided paired t-test, noncentral t: the mean difference "
                          f"detected with probability {POWER} at the arm's level alpha = "
                          "ALPHA / family size (Holm's first step) from the observed SD of "
                          "the paired differences" + (" (not defined: the differences do "
                                                      "not vary)" if constant else ""),
        "powered": None if mde is None or effect is None else bool(mde <= effect),
        "trains": trains_rec,
        "sharpening": sharp_rec,
        "bimodality": {side: bimodality_coefficient(p[f"per_seed_{side}"]) if n >= 4 else None
                       for side in ("a", "b")},
        "design_reasons": guards["design"],
        "premise": None if guards["premise"] is None else {
            "status": guards["premise"][0], "why": guards["premise"][1]},
        "type_m_reasons": guards["type_m"],
        "inconclusive_reasons": guards["underpowered"],
    }
    return guards


#: The Holm family of the testbeds that declare none of their own (:attr:`TestbedSpec.family`):
#: the toy testbeds (bandits, digits, sparse, the tiny language models).
MAIN_FAMILY = "toy"
FAMILY_DEFINITION = ("the primary tests of every evaluated trained arm on the family's "
                     "testbeds (TestbedSpec.family; A/A controls included; pending and "
                     "not-comparable arms excluded), Holm-corrected together (t-test and "
                     "sign-flip p-values separately); alpha_per_arm = alpha / size is the "
                     "level each arm's MDE is computed at")


def _judge_family(name: str, family: list[ArmEntry], claims: Sequence[ClaimSpec],
                  data: Mapping[str, TestbedData], failed: list[str]) -> dict[str, object]:
    """Holm over one family's primary tests, then each arm's power fields and verdict (in
    place); a significant A/A control's id is appended to ``failed``. Returns the family's
    ``{"size", "members", "not_rejected_by_amendment", "alpha_per_arm"}``: its size is the
    declared one (:attr:`TestbedSpec.family_tests`) where an amendment dropped tests, which
    enter Holm as p = 1."""
    # a declared size above the arms judged (tests an amendment dropped): those count as p = 1
    declared = max([TESTBEDS[e["testbed"]].family_tests or 0 for e in family] + [len(family)])
    pad = [1.0] * (declared - len(family))
    alpha_arm = ALPHA / max(1, declared)
    p_perm = [e["primary"]["p_perm"] for e in family] + pad
    p_holm = holm([e["primary"]["p"] for e in family] + pad)[:len(family)]
    for i, (e, p, pp) in enumerate(zip(family, p_holm, holm(p_perm)[:len(family)],
                                       strict=True)):
        e["primary"]["p_holm"], e["primary"]["p_perm_holm"] = p, pp
        e["family"] = name
        spec = next(c for c in claims if c.id == e["claim_id"])
        guards = _power_fields(e, spec, data[e["testbed"]], alpha_arm)
        ni = e["noninferiority"]
        shift = spec.margin or 0.0  # a non-inferiority claim tests a - b + margin
        results = []
        for p_key, s_key in (("p_holm", "p_holm"), ("p_perm_holm", "p_perm_holm")):
            results.append(verdict(
                e["primary"]["diff"] + shift, e["primary"][p_key], spec.direction,
                [(s["metric"], s["diff"], s[s_key], s["better"]) for s in e["secondary"]],
                None if ni is None else (ni["metric"], ni["ci95"][0], ni["margin"]),
                ci95=[v + shift for v in e["primary"]["ci95"]], sesoi=e["sesoi"],
                underpowered=guards["underpowered"], control=spec.control,
                design=guards["design"], type_m=guards["type_m"], premise=guards["premise"],
                margin_claim=spec.margin is not None,
                noninferiority_diff=None if ni is None else ni["diff"]))
        (e["verdict"], e["why"]), (v_perm, _) = results
        e["verdict_perm"] = v_perm
        floor = sign_flip_floor_holm(p_perm, i, e["power"]["sign_flip_min_p"])
        e["power"]["sign_flip_floor_holm"] = floor
        e["robust"] = robust_flag(e["verdict"], v_perm, floor, e["seeds"])
        if spec.margin is not None:
            e["why"] += (f"; non-inferiority margin {spec.margin}: 95% CI of a - b "
                         f"[{fmt(e['primary']['ci95'][0])}, {fmt(e['primary']['ci95'][1])}]")
            if paired_test(e["primary"]["per_seed_a"], e["primary"]["per_seed_b"]).exact:
                e["why"] += ("; a - b does not vary across seeds, so a - b + margin is a "
                             "constant the margin alone makes positive: its p-values are the "
                             "exact sign-flip p 2/2^n, not a t-test")
        if e["robust"] is False:
            e["why"] += (f"; not robust: the sign-flip permutation test gives "
                         f"{v_perm} (Holm p_perm = {fmt(e['primary']['p_perm_holm'])})")
        if spec.control and (p < ALPHA or pp < ALPHA):
            failed.append(e["id"])
    return {"size": declared, "members": [e["id"] for e in family],
            "not_rejected_by_amendment": len(pad),
            "alpha_per_arm": alpha_arm if family else None}


def rule_parts(spec: ClaimSpec) -> list[str]:
    """The parts of :data:`~bestk.lab.claims.table.RULE_DECLARED` that judge ``spec``'s arms:
    the claims registry always; a trained claim the SESOI, the contradicted rule and the
    labels of the premise commit; the stall guard and the premise rule only a claim that b
    fails to train, the sharpening precondition only a claim that declares it."""
    if spec.kind != "trained":
        return ["claims"]
    parts = ["claims", "sesoi", "contradicted", "premise"]
    if spec.claims_b_stalls:
        parts.append("stall_guard")
    if spec.precondition is not None:
        parts.append("sharpening")
    return parts


def declared_record(spec: ClaimSpec, testbed: str) -> dict[str, object]:
    """When the rule that judges an arm was declared against its testbed's data:
    ``first_data`` (the testbed's, or ``None``), ``preregistered_at`` and
    ``declared_after_data`` (the parts of :func:`rule_parts` whose commit came after the
    testbed's first data: they were not declared before its data were seen)."""
    t = TESTBEDS[testbed]
    after = [] if t.first_data is None else [
        p for p in rule_parts(spec) if RULE_DECLARED[p][1] > t.first_data[1]]
    return {"first_data": None if t.first_data is None else {
                "commit": t.first_data[0], "date": t.first_data[1]},
            "preregistered_at": t.preregistered_at, "declared_after_data": after}


def evaluate_claims(data: Mapping[str, TestbedData], claims: Sequence[ClaimSpec] = CLAIMS,
                    *, min_seeds: int | None = None) -> ClaimsDoc:
    """``claims.json`` from the per-seed data of the testbeds (``{testbed id: data}``).

    ``min_seeds`` overrides every testbed's required seed count (smoke runs only; the
    committed file uses the testbeds' own minimum, at least 10 on the lab testbeds and 8 on
    the language tasks). Each Holm family (the arms of the testbeds that declare it,
    :attr:`TestbedSpec.family`; ``family`` is :data:`MAIN_FAMILY`'s, ``families`` every one)
    has its t-test and sign-flip p-values Holm-adjusted separately; the verdict follows the
    t-test, and ``robust`` says whether the sign-flip test gives the same one, or ``"n/a
    (cannot reach α with n seeds)"`` where its smallest p with the arm's seeds could not
    pass Holm over its family. A significant A/A control is listed in ``controls.failed``
    (:func:`check_controls` turns that into an error).
    """
    data = {k: derived_metrics(v) for k, v in data.items()}
    entries = []
    for spec in claims:
        for arm in spec.arms:
            tb = data.get(arm.testbed)
            entries.append(_exact_entry(spec, arm, tb) if spec.kind == "exact"
                           else _trained_entry(spec, arm, tb, min_seeds))
            entries[-1].update(declared_record(spec, arm.testbed))
    judged = [e for e in entries if e["kind"] == "trained" and e["primary"]["p"] is not None
              and e["verdict"] != "not comparable"]
    failed: list[str] = []
    families: dict[str, dict[str, object]] = {}
    for name in dict.fromkeys(TESTBEDS[e["testbed"]].family for e in judged):
        family = [e for e in judged if TESTBEDS[e["testbed"]].family == name]
        families[name] = _judge_family(name, family, claims, data, failed)
    main = families.get(MAIN_FAMILY, {"size": 0, "members": [], "alpha_per_arm": None})
    controls = [e for e in entries if e["control"]]
    return {
        "format": "bestk.claims", "version": 2, "alpha": ALPHA, "power": POWER,
        "min_seeds_override": min_seeds,
        "rule_declared": {part: {"commit": c, "date": t, "what": w}
                          for part, (c, t, w) in RULE_DECLARED.items()},
        "testbeds": {t.id: {"family": t.family, "first_data": None if t.first_data is None
                            else {"commit": t.first_data[0], "date": t.first_data[1]},
                            "preregistered_at": t.preregistered_at}
                     for t in TESTBEDS.values()},
        "family": {**main, "name": MAIN_FAMILY, "definition": FAMILY_DEFINITION},
        "families": {name: {**f, "name": name, "definition": FAMILY_DEFINITION}
                     for name, f in families.items()},
        "controls": {"arms": len(controls),
                     "judged": sum(e["verdict"] != "pending" for e in controls),
                     "failed": failed,
                     "rule": "an A/A control whose Holm-adjusted t-test or sign-flip p is "
                             "below alpha (either direction) fails the whole file"},
        "verdicts": VERDICTS,
        "claims": entries,
    }
