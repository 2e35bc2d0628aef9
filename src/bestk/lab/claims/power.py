r"""Seeds from power: how many paired seeds a testbed's grid needs, from a pilot of a few.

A *power pilot* runs the first few seeds of a grid (every method, the same learning-rate
sweep) and judges them with the same rule as the full grid
(:func:`bestk.lab.claims.evaluate_claims`, the pilot's testbed beside every committed one so
that each arm's level :math:`\alpha / m` is that of the real Holm family of :math:`m`
tests). For each claim arm on the testbed (A/A controls excluded: they look for false
positives, not effects) the pilot gives the SD :math:`s` of the paired differences
:math:`d_i = a_i - b_i` of the primary metric, and the pairs needed for a two-sided paired
t-test at level :math:`\alpha / m` to detect the arm's smallest effect size of interest
(SESOI) with probability :data:`~bestk.lab.claims.rule.POWER`
(:func:`bestk.stats.seeds_needed`: the least :math:`n` with
:math:`\mathrm{MDE}(s, n) \le \mathrm{SESOI}`). The grid then runs

.. math:: n = \max\Big(n_{\min},\ \max_{\text{arms}} \mathrm{seeds\_needed}\Big),

:math:`n_{\min}` the testbed's declared minimum (:attr:`TestbedSpec.min_seeds`). An arm
whose SESOI cannot be reached (more than :math:`10^7` pairs) or whose SD is 0 or undefined is
listed with the reason and does not set :math:`n`. Each arm also carries the pilot's verdict
and its ``why`` (e.g. a failed precondition), so the plan says where more seeds cannot help.
"""

from __future__ import annotations

import math
from typing import Any

from bestk.lab.claims.specs import ClaimsDoc
from bestk.stats import seeds_needed

__all__ = ["power_plan"]


def power_plan(doc: ClaimsDoc, testbed: str, minimum: int) -> dict[str, Any]:
    """The seeds plan of ``testbed`` from a pilot's ``claims.json`` document ``doc`` (module
    docstring): ``{"testbed", "pilot_seeds", "minimum", "arms": [...], "seeds",
    "set_by"}``, each arm ``{"arm", "claim_id", "a", "b", "metric", "sesoi", "alpha",
    "power", "diffs", "sd_diff", "seeds_needed", "why", "verdict", "verdict_why"}``
    (``diffs``: the pilot's paired differences a - b, seed by seed); ``seeds`` is
    the grid's seed count and ``set_by`` the arm that sets it (``None``: the minimum).

    ``ValueError`` when the testbed has no judged claim arm in ``doc`` (a pilot that has not
    finished a seed of every method, or a testbed without claims) or the pilot arms ran
    different numbers of seeds, or ``minimum < 2``."""
    if minimum < 2:
        raise ValueError(f"power_plan: the minimum number of seeds must be >= 2, got {minimum}")
    arms = [e for e in doc["claims"] if e["testbed"] == testbed and not e["control"]
            and e["kind"] == "trained"]
    judged = [e for e in arms if e.get("power")]
    if not judged:
        raise ValueError(f"power_plan: no judged claim arm on testbed {testbed!r} (the pilot "
                         f"must finish every method of >= 2 seeds; arms: "
                         f"{[e['id'] for e in arms] or 'none'})")
    ns = {e["power"]["n"] for e in judged}
    if len(ns) != 1:
        raise ValueError(f"power_plan: the pilot's arms ran different numbers of seeds {ns}")
    rows = []
    for e in judged:
        pw, sesoi = e["power"], e["sesoi"]
        sd = pw["sd_diff"]
        need: int | None = None
        if sesoi is None:
            why = "no SESOI"
        elif not math.isfinite(sd):  # NaN: fewer than two seeds
            why = "SD undefined"
        elif sd == 0:
            why = ("the pilot's differences are all equal (SD 0): no t-test power to size; "
                   "the minimum stands")
        else:
            try:
                need = seeds_needed(sd, sesoi, pw["alpha"], pw["power"])
                why = (f"pairs for a two-sided paired t-test at alpha {pw['alpha']:.3g} to "
                       f"detect {sesoi:g} with power {pw['power']:g} at SD {sd:.4g}")
            except ValueError as err:
                why = f"not reachable: {err}"
        p = e["primary"]
        rows.append({"arm": e["id"], "claim_id": e["claim_id"], "a": e["a"], "b": e["b"],
                     "metric": p["metric"], "sesoi": sesoi, "alpha": pw["alpha"],
                     "power": pw["power"],
                     "diffs": [a - b for a, b in zip(p["per_seed_a"], p["per_seed_b"],
                                                     strict=True)],
                     "sd_diff": sd, "seeds_needed": need, "why": why,
                     "verdict": e["verdict"], "verdict_why": e["why"]})
    sized = [r for r in rows if r["seeds_needed"] is not None]
    top = max(sized, key=lambda r: r["seeds_needed"], default=None)
    seeds, set_by = minimum, None
    if top is not None and top["seeds_needed"] > minimum:
        seeds, set_by = top["seeds_needed"], top["arm"]
    return {"testbed": testbed, "pilot_seeds": ns.pop(), "minimum": minimum, "arms": rows,
            "seeds": seeds, "set_by": set_by}
