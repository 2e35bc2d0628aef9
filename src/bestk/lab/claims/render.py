"""Reading a ``claims.json`` document: its markdown, each arm's outcome, the verdict counts.

:func:`render_claims` is the claims part of ``docs/results.md``; :func:`arm_outcome`,
:func:`counts` and :func:`bimodal_arms` are what ``benchmarks/make_results.py`` says about
the document elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bestk.lab.claims.rule import significantly_worse
from bestk.lab.claims.specs import ArmEntry, ClaimsDoc
from bestk.lab.claims.table import PAPER_EFFECTS
from bestk.lab.common.io import fmt, markdown_table
from bestk.stats import BIMODAL_ABOVE


def _pm(t: Mapping[str, Any] | None) -> str:
    if t is None or t.get("diff") is None:
        return "–"
    lo, hi = t["ci95"]
    return f"{t['diff']:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def _control_outcome(e: ArmEntry, failed: set[str]) -> str:
    """An A/A control arm's outcome: ``pending``, ``failed`` (its id in ``failed``) or
    ``passed``."""
    if e["verdict"] == "pending":
        return "pending"
    return "failed" if e["id"] in failed else "passed"


def arm_outcome(e: ArmEntry, doc: ClaimsDoc) -> str:
    """What an arm of ``doc`` came to, in words: its verdict, or for an A/A control (which
    claims nothing) ``control passed`` / ``control FAILED`` (``pending`` while unjudged)."""
    if not e["control"]:
        return str(e["verdict"])
    out = _control_outcome(e, set(doc["controls"]["failed"]))
    return {"passed": "control passed", "failed": "control FAILED"}.get(out, out)


def counts(doc: ClaimsDoc) -> dict[str, dict[str, int]]:
    """Verdict counts kept apart: ``claims`` (trained arms of the papers' claims), ``controls``
    (A/A arms: ``passed`` = not significant, ``failed``, ``pending``) and ``exact`` (arms
    decided by exact computation)."""
    out: dict[str, dict[str, int]] = {"claims": {}, "controls": {}, "exact": {}}
    failed = set(doc["controls"]["failed"])
    for e in doc["claims"]:
        if e["control"]:
            group, v = "controls", _control_outcome(e, failed)
        else:
            group, v = ("exact" if e["kind"] == "exact" else "claims"), e["verdict"]
        out[group][v] = out[group].get(v, 0) + 1
    return out


def _verdict_cell(e: ArmEntry, doc: ClaimsDoc) -> str:
    out = arm_outcome(e, doc)
    if out == "control FAILED":
        return f"**control FAILED** ({e['verdict']})"
    return "control passed (not significant)" if out == "control passed" else f"**{out}**"


def _num(x: float | None) -> str:
    return "–" if x is None else fmt(x)


def _robust(r: bool | str | None) -> str:
    """The robust cell: ``–`` (not judged), ``yes``, ``**no**`` or the ``n/a (...)`` reason."""
    if r is None or isinstance(r, str):
        return r or "–"
    return "yes" if r else "**no**"


def _budget(b: Mapping[str, Mapping[str, int]] | None) -> str:
    if not b:
        return "–"

    def one(x: Mapping[str, int]) -> str:
        return f"{x['rollouts']:,}" + (f" + bank {x['bank']:,}" if x.get("bank") else "")

    return f"{one(b['a'])} / {one(b['b'])}"


def bimodal_arms(doc: ClaimsDoc) -> list[tuple[str, str, float]]:
    """``(arm id, method, coefficient)`` for every judged side whose per-seed primary values
    have Sarle's bimodality coefficient above 5/9 (:func:`bestk.stats.bimodality_coefficient`)."""
    out = []
    for e in doc["claims"]:
        bim = (e.get("power") or {}).get("bimodality") or {}
        for side in ("a", "b"):
            bc = bim.get(side)
            if bc is not None and bc > BIMODAL_ABOVE:
                out.append((e["id"], e[side], bc))
    return out


def _declared_when(e: ArmEntry) -> str:
    """When an arm's SESOI was declared against its testbed's data."""
    if e.get("preregistered_at"):
        return f"pre-registered at {e['preregistered_at']}, before the testbed's runs"
    return ("after the testbed's first data" if "sesoi" in e.get("declared_after_data", [])
            else "before the testbed's first data")


def render_declared(doc: ClaimsDoc) -> str:
    """Markdown: when each part of the verdict rule was declared (``rule_declared``) and which
    testbeds' first data it came after (``testbeds``); the per-arm lists are in claims.json
    (``declared_after_data``)."""
    tbs = doc.get("testbeds", {})
    rows = []
    for part, d in doc.get("rule_declared", {}).items():
        after = sorted(t for t, info in tbs.items() if info["first_data"] is not None
                       and d["date"] > info["first_data"]["date"])
        rows.append([f"`{part}`", d["what"], f"`{d['commit']}` ({d['date'][:10]})",
                     ", ".join(after) or "none"])
    pre = [f"{t} at `{info['preregistered_at']}`" for t, info in tbs.items()
           if info.get("preregistered_at")]
    return "\n".join([
        "## When the rule was declared\n",
        "Claims are declared in code (`bestk.lab.claims.CLAIMS`), but not every part of the "
        "rule that judges them preceded every testbed's data. Per part: the commit that "
        "declared it and the testbeds whose first per-seed data (`TestbedSpec.first_data`) "
        "were committed before it, i.e. seen when it was written. Each arm in claims.json "
        "lists the parts declared after its testbed's data (`declared_after_data`)"
        + (". Pre-registered (design, claim, rule and analysis committed before any of its "
           "runs): " + ", ".join(pre) + "." if pre else ".") + "\n",
        markdown_table(["part", "what", "declared", "after the first data of"], rows), ""])


def render_claims(doc: ClaimsDoc) -> str:
    """Markdown of a claims.json document: the verdict summary (:func:`_summary`), what the
    inconclusive arms would need (:func:`_inconclusive_needs`, when there are any), then one
    section per claim, in order of first appearance, with every arm (testbed) it ran on
    (:func:`_claim_section`)."""
    entries = doc["claims"]
    order: list[str] = []
    for e in entries:
        if e["claim_id"] not in order:
            order.append(e["claim_id"])
    out = _summary(doc) + _inconclusive_needs(entries)
    for cid in order:
        out += _claim_section(cid, [e for e in entries if e["claim_id"] == cid], doc)
    return "\n".join(out) + "\n"


def _summary(doc: ClaimsDoc) -> list[str]:
    """The summary section: how verdicts and the columns are defined (the α of each Holm
    family), then one row per arm."""
    fam = doc["family"]
    families = doc.get("families", {name_: fam for name_ in [fam.get("name", "toy")]})
    return ["## Summary\n",
            "One row per claim and testbed (an *arm*); the verdicts come from the rule in "
            "`bestk.lab.claims.verdict` (its guards: `design_reasons`, `stall_premise`, "
            "`type_m_reasons`, `inconclusive_reasons`), never by hand. SESOI: the smallest "
            "effect of interest the claim declares (after the toy testbeds' first data: see "
            "*When the rule was declared*; the smallest effect its "
            "sources report, else 0.02 absolute; – for an A/A control): a non-significant arm "
            "is *not reproduced* only when its 95% interval ends below it. MDE: the smallest "
            "difference the arm could detect (two-sided paired t-test, "
            f"{doc['power']:.0%} power at α / the size of the arm's Holm family ("
            + "; ".join(f"{name}: α / {f['size']} = "
                        f"{fmt(f['alpha_per_arm']) if f['alpha_per_arm'] else '–'}"
                        for name, f in families.items())
            + "), Holm's first step, "
            "from the observed SD of the paired differences); paper: the effect the source "
            "reports (– where it reports none); robust: the exact sign-flip permutation test "
            "(Holm-corrected the same way) gives the same verdict, *n/a* where even its "
            "smallest p with the arm's seeds (2/2^n, all signs agreeing) could not pass Holm "
            "over this family.\n",
            markdown_table(["claim", "testbed", "a − b", "primary metric", "diff [95% CI]",
                            "SESOI", "MDE", "paper", "verdict", "robust"],
                           [_summary_row(e, doc) for e in doc["claims"]])]


def _summary_row(e: ArmEntry, doc: ClaimsDoc) -> list[object]:
    """An arm's summary row (an exact arm has no a − b and no interval)."""
    return [e["claim_id"], e["testbed"], f"{e['a']} − {e['b']}" if e["a"] else "exact",
            e["primary"]["metric"], _pm(e["primary"]) if e["kind"] == "trained" else "–",
            _num(e.get("sesoi")), _num(e.get("mde")), _num(e.get("paper_effect")),
            _verdict_cell(e, doc) + (f" — {e['status']}" if e["status"] else ""),
            _robust(e.get("robust"))]


def _inconclusive_needs(entries: list[ArmEntry]) -> list[str]:
    """The section on what the inconclusive arms would need (seeds, headroom, why); empty
    when no arm is inconclusive."""
    need = [e for e in entries if e["verdict"] == "inconclusive"]
    if not need:
        return []
    return ["\n## What the inconclusive arms would need\n",
            "An inconclusive arm is not evidence against its claim: the experiment could "
            "neither show the effect the claim is about nor exclude every effect of "
            "interest, or its design cannot support a verdict. Seeds needed: paired seeds "
            "for the MDE to reach the SESOI at the SD observed here and the same α; a "
            "testbed with more headroom, a b that trains or a tuned learning rate is "
            "needed where the reason says so.\n",
            markdown_table(["arm", "seeds", "SESOI", "MDE", "paper", "headroom",
                            "seeds needed", "why inconclusive"], [
                [e["id"], e["seeds"], _num(e["sesoi"]), _num(e["mde"]),
                 _num(e["paper_effect"]), _num(e["headroom"]),
                 e["seeds_needed"] if e["seeds_needed"] is not None else
                 ("–" if not (e.get("power") or {}).get("seeds_needed_for") else
                  e["power"]["seeds_needed_for"]),
                 e["why"]]
                for e in need])]


def _claim_section(cid: str, arms: list[ArmEntry], doc: ClaimsDoc) -> list[str]:
    """One claim's section: the claim, its source, reward and status, then an exact claim's
    verdict per testbed, or a trained claim's test, paper effect, SESOI and budget lines
    (:func:`_trained_claim_lines`) and one table row per arm (:func:`_arm_row`)."""
    first = arms[0]
    out = [f"\n## {cid}\n", f"- Claim: {first['claim']}", f"- Source: {first['source']}",
           f"- Reward each method sees: {first['reward']}"]
    if first["status"]:
        out.append(f"- Status: **{first['status']}**")
    if first["kind"] == "exact":
        return out + [f"- {e['testbed']}: **{e['verdict']}** — {e['why']}" for e in arms]
    out += _trained_claim_lines(cid, first, doc)
    out.append("")
    out.append(markdown_table(
        ["testbed", "a − b", "seeds", "rollouts a / b", "metric", "diff [95% CI]", "p",
         "p (Holm)", "p_perm (Holm)", "MDE / paper / headroom", "seeds needed",
         "non-inferiority", "secondaries significantly worse", "change from start",
         "verdict"], [_arm_row(e, doc) for e in arms]))
    return out


def _trained_claim_lines(cid: str, first: ArmEntry, doc: ClaimsDoc) -> list[str]:
    """A trained claim's lines (``first``: its first arm): the primary test, the paper's
    effect (when the source reports one), the SESOI and when it was declared, and the budget
    note of a claim that compares budgets."""
    margin = first["primary"].get("margin")
    claimed = (f"greater for a, or worse by less than {margin} (non-inferiority: paired "
               f"t-test of a - b + {margin})" if margin is not None else
               f"{first['primary']['direction']} for a, paired t-test")
    out = [f"- Primary metric: {first['primary']['metric']} ({claimed}) by seed, Holm "
           f"over the family of {doc['family']['size']} primary tests; beside it the "
           "exact sign-flip permutation test, Holm-corrected the same way"]
    pe = PAPER_EFFECTS.get(cid)
    if pe is not None:
        out.append(f"- Paper's effect: {_num(pe[0])} — {pe[1]}")
    out.append(f"- SESOI (declared: {_declared_when(first)}): {_num(first.get('sesoi'))} — "
               f"{first.get('sesoi_source')}")
    if first.get("budget_by_design"):
        out.append("- Budget: different on purpose (the claim compares budgets); the "
                   "rollouts column gives each arm's on-policy completions and reference "
                   "bank, a / b")
    return out


def _arm_row(e: ArmEntry, doc: ClaimsDoc) -> list[object]:
    """A trained arm's row of its claim's table: tests, power, non-inferiority, the
    secondaries significantly worse (the non-inferiority metric excluded), the change from
    the start, the verdict and why."""
    p = e["primary"]
    ni = e["noninferiority"]
    sec_bad = [s["metric"] for s in e["secondary"]
               if significantly_worse(s["diff"], s["p_holm"], s["better"])
               and (ni is None or s["metric"] != ni["metric"])]
    cfs = e["change_from_start"] or {}
    return [
        e["testbed"], f"{e['a']} − {e['b']}", e["seeds"], _budget(e.get("budget")),
        p["metric"], _pm(p),
        fmt(p["p"]) if p["p"] is not None else "–",
        fmt(p["p_holm"]) if p["p_holm"] is not None else "–",
        _num(p.get("p_perm_holm")),
        f"{_num(e.get('mde'))} / {_num(e.get('paper_effect'))} / "
        f"{_num(e.get('headroom'))}",
        "–" if e.get("seeds_needed") is None else e["seeds_needed"],
        "–" if ni is None else (f"{ni['metric']} {_pm(ni)} "
                                f"{'holds' if ni['holds'] else 'fails'} "
                                f"(margin {ni['margin']})"),
        ", ".join(sec_bad) or ("none" if e["secondary"] else "–"),
        f"a {_pm(cfs.get('a'))}; b {_pm(cfs.get('b'))}" if cfs else "–",
        f"{_verdict_cell(e, doc)}: {e['why']}"]
