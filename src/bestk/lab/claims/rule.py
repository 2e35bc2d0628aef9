"""The verdict rule of one arm, and why a design or an experiment cannot support a verdict.

For one arm (claim x testbed), with the per-seed values of ``a`` and ``b`` paired by seed
(:mod:`bestk.lab.claims.evaluate` computes the tests and calls the rule):

* primary: two-sided paired t-test of ``a - b`` (:func:`bestk.stats.paired_test`; when the
  differences do not vary the exact sign-flip answer: p = 1 if they are 0, ``2 / 2^n``
  otherwise, never 0); its p-value is Holm-adjusted across the *family* = the primary tests
  of every evaluated trained arm in the claims file (A/A controls included, pending arms
  excluded). Beside it the exact sign-flip permutation p (``p_perm``,
  :func:`bestk.stats.sign_flip_p`), Holm-adjusted over the same family;
* secondaries: the same tests per secondary metric, Holm-adjusted within the arm;
* power: ``mde`` = the difference the paired t-test detects with 80% power at ``ALPHA`` /
  family size (Holm's first step) from the observed SD of the paired differences
  (:func:`bestk.stats.paired_mde`); ``paper_effect`` from
  :data:`~bestk.lab.claims.table.PAPER_EFFECTS` (None with the reason where the source
  reports none); ``headroom`` = distance of b's mean to the metric's bound in the claimed
  direction; ``seeds_needed`` = pairs for ``mde <= paper_effect`` (or the headroom) at the
  observed SD (:func:`bestk.stats.seeds_needed`);
* **reproduced** when the primary's Holm-adjusted p is below ``ALPHA`` = 0.05 with the mean
  difference in the claimed direction, no secondary is significantly worse (Holm-adjusted
  p < 0.05 in the metric's bad direction) and, for Pareto claims, the 95% interval of the
  pass@1 (best@1) difference lies above ``-margin`` (non-inferiority; that metric is judged
  by the margin only, never also as a "significantly worse" secondary);
* **contradicted** when the primary is significant in the opposite direction;
* **inconclusive** when the primary is not significant and the experiment could not have
  detected the claimed effect (``mde > paper_effect``, ``mde > headroom``, or b did not move
  from its start: :func:`inconclusive_reasons`), when the design cannot support any verdict
  (:func:`design_reasons`), or when a Pareto margin fails only because its interval is wide
  (the point estimate lies inside the margin); never for an A/A control;
* **not reproduced** otherwise (the ``why`` field says which condition);
* ``robust`` is false when the sign-flip test gives a different verdict (said in ``why``);
* an A/A control whose Holm-adjusted t-test or sign-flip p is below ``ALPHA`` (either
  direction) is listed in ``controls.failed`` and :func:`check_controls` fails the file.

Non-inferiority primaries (``ClaimSpec.margin``, "a matches b"): the claim is that ``a`` is
at most ``margin`` worse than ``b`` on the primary metric; the test is the paired t-test of
``a - b + margin`` (two-sided, Holm over the family), so **reproduced** means the 95% interval
of ``a - b`` lies above ``-margin`` (a one-sided 2.5% non-inferiority test) and
**contradicted** that it lies below ``-margin`` (``a`` is inferior by more than the margin).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bestk.lab.claims.specs import GREATER, LESS, ClaimsDoc
from bestk.lab.io import fmt

ALPHA = 0.05
#: The power at which the minimum detectable effect (``mde``) of every arm is computed.
POWER = 0.8
#: Every verdict the rule can give, with its definition (rendered in docs/results.md).
VERDICTS: dict[str, str] = {
    "reproduced": "the primary difference is significant in the claimed direction after Holm "
                  "correction over the family, no secondary metric is significantly worse "
                  "(Holm within the arm) and, for Pareto claims, pass@1 / best@1 is "
                  "non-inferior within the stated margin",
    "not reproduced": "tested with enough power and not found: the primary difference is not "
                      "significant after Holm correction although the experiment could detect "
                      "the paper's effect (or, without one, an effect within the metric's "
                      "headroom), or it is significant but a secondary metric is "
                      "significantly worse or the Pareto margin fails beyond doubt",
    "inconclusive": "the design cannot support a verdict, whatever the primary shows: its "
                    "minimum detectable effect exceeds the paper's effect, a method's learning "
                    "rate sits at the edge of its grid, or the testbed did not train; or the "
                    "primary is not significant and its minimum detectable effect exceeds the "
                    "headroom left to b, or b did not move from its start, or the Pareto "
                    "margin's interval is too wide to decide; not evidence against the claim "
                    "(the arm says how many seeds it would need)",
    "contradicted": "the primary difference is significant in the direction opposite to the "
                    "claim after Holm correction",
    "pending": "the testbed has not produced (enough) seeds yet; the arm is not judged and not "
               "in the family",
    "not comparable": "the two methods did not see the same reward, prompts or rollout budget "
                      "(read from their run configurations; the budget may differ only where "
                      "the claim compares budgets by design); not judged, not in the family",
}



def significantly_worse(diff: float, p_holm: float, better: str, alpha: float = ALPHA) -> bool:
    """Whether a secondary metric's difference a - b is significant (``p_holm < alpha``) and in
    the wrong direction (below 0 when ``better`` is greater, above 0 when it is less)."""
    return p_holm < alpha and (diff < 0 if better == GREATER else diff > 0)


def verdict(primary_diff: float, primary_p_holm: float, direction: str,
            secondaries: Sequence[tuple[str, float, float, str]] = (),
            noninferiority: tuple[str, float, float] | None = None,
            alpha: float = ALPHA, *, underpowered: Sequence[str] = (),
            noninferiority_diff: float | None = None, control: bool = False,
            design: Sequence[str] = ()) -> tuple[str, str]:
    """The verdict of one arm and the reason (the rule: module docstring).

    ``secondaries``: ``(metric, diff, p_holm, better)`` per secondary metric (``p_holm``
    adjusted within the arm). ``noninferiority``: ``(metric, ci_low, margin)`` of a Pareto
    claim; its metric is judged by the margin only, never also as a "significantly worse"
    secondary. ``underpowered``: why the experiment could not detect the claimed effect
    (:func:`inconclusive_reasons`); a non-significant primary is then **inconclusive**
    instead of **not reproduced**. ``noninferiority_diff``: the point estimate of the margin
    metric's difference; a margin that fails only because the interval is wide (the point
    estimate lies inside ``-margin``) is inconclusive too. ``design``: why the design cannot
    support any verdict (:func:`design_reasons`); the arm is then **inconclusive** whatever
    the primary shows (the reason says what it showed). ``control``: an A/A control is
    never inconclusive (it has no effect to detect).
    """
    if direction not in (GREATER, LESS):
        raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")
    sign = 1.0 if direction == GREATER else -1.0
    if design and not control:
        if primary_p_holm < alpha:
            way = "claimed" if sign * primary_diff > 0 else "opposite"
            shown = (f"primary significant in the {way} direction "
                     f"(Holm p = {fmt(primary_p_holm)})")
        else:
            shown = f"primary not significant (Holm p = {fmt(primary_p_holm)})"
        return "inconclusive", shown + "; the design cannot support a verdict: " + \
            "; ".join(design)
    if primary_p_holm < alpha and sign * primary_diff < 0:
        return "contradicted", (f"primary significantly {'worse' if sign > 0 else 'higher'} "
                                f"than claimed (Holm p = {fmt(primary_p_holm)})")
    if not (primary_p_holm < alpha and sign * primary_diff > 0):
        why = f"primary not significant (Holm p = {fmt(primary_p_holm)})"
        if underpowered and not control:
            return "inconclusive", why + "; the experiment could not detect the claimed " \
                                         "effect: " + "; ".join(underpowered)
        return "not reproduced", why
    ni_metric = None if noninferiority is None else noninferiority[0]
    worse = [m for m, d, p, better in secondaries
             if m != ni_metric and significantly_worse(d, p, better, alpha)]
    if worse:
        return "not reproduced", ("primary significant, but significantly worse on "
                                  + ", ".join(worse))
    if noninferiority is not None:
        metric, lo, margin = noninferiority
        if not lo > -margin:
            why = (f"primary significant, but {metric} non-inferiority fails (95% CI low "
                   f"{fmt(lo)} <= -{margin})")
            if noninferiority_diff is not None and noninferiority_diff > -margin and \
                    not control:
                return "inconclusive", why + (f"; its point estimate {fmt(noninferiority_diff)} "
                                              "lies inside the margin: the interval is too "
                                              "wide to decide")
            return "not reproduced", why
    return "reproduced", f"primary significant (Holm p = {fmt(primary_p_holm)})"


def inconclusive_reasons(mde: float | None, paper_effect: float | None,
                         headroom: float | None, b_moved: bool | None, *,
                         margin_claim: bool = False, p_floor: float | None = None,
                         alpha: float | None = None) -> list[str]:
    """Why an arm's experiment could not detect the effect its claim is about (empty list:
    it could). The reasons, each checked on its own:

    * ``mde > paper_effect``: the minimum detectable effect (80% power at the arm's
      Holm-adjusted level) exceeds the effect the source reports;
    * ``mde > headroom`` (not for "a matches b" claims, ``margin_claim``, whose tested
      quantity ``a - b + margin`` is not bounded by b's headroom): even lifting b to the
      metric's bound would not be detected;
    * ``mde is None`` (the differences do not vary, so there is no t-test) and the sign-flip
      test's smallest p, ``p_floor = 2 / 2^n``, is not below ``alpha``: no outcome could be
      significant;
    * ``b_moved is False``: b's primary metric did not move from its start value (95% interval
      of end - start contains 0), so the comparison is between runs that did not train.
    """
    out = []
    if mde is None:
        if p_floor is not None and alpha is not None and not p_floor < alpha:
            out.append(f"the differences do not vary and the sign-flip test's smallest p "
                       f"{fmt(p_floor)} is not below the arm's level {fmt(alpha)}")
    else:
        if not (math.isfinite(mde) and mde >= 0):
            raise ValueError(f"inconclusive_reasons: mde must be finite and >= 0, got {mde}")
        if paper_effect is not None and mde > paper_effect:
            out.append(f"MDE {fmt(mde)} > the paper's effect {fmt(paper_effect)}")
        if headroom is not None and not margin_claim and mde > headroom:
            out.append(f"MDE {fmt(mde)} > the headroom {fmt(headroom)} left to b")
    if b_moved is False:
        out.append("b did not move from its start value (95% CI of end − start contains 0)")
    return out


def design_reasons(mde: float | None, paper_effect: float | None,
                   lr_edges: Sequence[str] = (), not_training: Sequence[str] = ()) -> list[str]:
    """Why an arm's design cannot support a verdict whatever its outcome (empty: it can),
    which makes a significant result inconclusive too:

    * ``mde > paper_effect``: the design detects the paper's effect with less than 80%
      power, so a significant difference from it overstates the effect (a type M error)
      and a non-significant one is no evidence against it;
    * ``lr_edges``: a method's learning rate sits at the edge of its grid (it may be
      untuned; :func:`learning_rates`);
    * ``not_training``: the testbed's checks failed: it did not train
      (:attr:`TestbedSpec.trains_if`) or b's primary started outside
      :attr:`TestbedSpec.start_range`.
    """
    # the MDE-vs-paper comparison (and the check of mde) is inconclusive_reasons' own
    weak = [] if mde is None else inconclusive_reasons(mde, paper_effect, None, None)
    return [r + " (a significant difference from this design would overstate it)"
            for r in weak] + list(lr_edges) + list(not_training)


class ControlFailed(ValueError):
    """An A/A control came out significant: the verdict rule is not trustworthy on this data,
    so the whole results file fails."""


def check_controls(doc: ClaimsDoc) -> None:
    """Raise :class:`ControlFailed` when any A/A control of a claims document is significant
    (Holm-adjusted t-test or sign-flip p below ``alpha``, either direction)."""
    failed = doc["controls"]["failed"]
    if failed:
        raise ControlFailed("A/A control(s) came out significant, so the results file fails: "
                            + "; ".join(f"{e['id']} (Holm p = {fmt(e['primary']['p_holm'])}, "
                                        f"Holm p_perm = {fmt(e['primary']['p_perm_holm'])})"
                                        for e in doc["claims"] if e["id"] in failed))

