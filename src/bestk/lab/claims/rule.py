"""The verdict rule of one arm, and why a design or an experiment cannot support a verdict.

For one arm (claim x testbed), with the per-seed values of ``a`` and ``b`` paired by seed
(:mod:`bestk.lab.claims.evaluate` computes the tests and calls the rule):

* primary: two-sided paired t-test of ``a - b`` (:func:`bestk.stats.paired_test`; when the
  differences do not vary the exact sign-flip answer: p = 1 if they are 0, ``2 / 2^n``
  otherwise, never 0) and its 95% interval; the p-value is Holm-adjusted across the *family*
  = the primary tests of every evaluated trained arm in the claims file (A/A controls
  included, pending arms excluded). Beside it the exact sign-flip permutation p (``p_perm``,
  :func:`bestk.stats.sign_flip_p`), Holm-adjusted over the same family;
* secondaries: the same tests per secondary metric, Holm-adjusted within the arm;
* SESOI: every claim declares its smallest effect size of interest (when, against each
  testbed's data: :data:`~bestk.lab.claims.table.RULE_DECLARED`), with its
  source (:data:`~bestk.lab.claims.table.SESOI`: the smallest effect its sources report, or
  0.02 absolute where they report none), in the primary metric's units, counted in the
  claimed direction; an A/A control has none;
* power: ``mde`` = the difference the paired t-test detects with 80% power at ``ALPHA`` /
  family size (Holm's first step) from the observed SD of the paired differences
  (:func:`bestk.stats.paired_mde`); ``paper_effect`` from
  :data:`~bestk.lab.claims.table.PAPER_EFFECTS` (None with the reason where the source
  reports none); ``headroom`` = distance of b's mean to the metric's bound in the claimed
  direction; ``seeds_needed`` = pairs for ``mde <= SESOI`` at the observed SD
  (:func:`bestk.stats.seeds_needed`).

The verdict (:func:`verdict`), in this order; "significant" means Holm-adjusted p < ``ALPHA``
= 0.05, and x, [lo, hi] are the primary difference and its 95% interval counted in the
claimed direction:

1. **inconclusive** when the design cannot support any verdict (:func:`design_reasons`: a
   method's learning rate at the edge of its grid, a testbed that did not train, b's primary
   starting outside the testbed's range, a sharpening claim whose b does not sharpen): the
   comparison itself is not valid, whatever the primary shows (the reason says what it
   showed);
2. **contradicted** when the primary is significant in the opposite direction, whatever the
   MDE or b's progress: a power guard (steps 3-4) protects against an exaggerated result in
   the claimed direction and never hides a significant result against the claim;
3. a claim that b fails to train (:attr:`~bestk.lab.claims.specs.ClaimSpec.claims_b_stalls`)
   has that premise judged as part of it (:func:`stall_premise`): **not reproduced** when b
   is shown to train (its progress interval lies at or above the SESOI), **inconclusive**
   when b's progress is undecided, and judged on a - b as below where b is shown not to
   train;
4. significant in the claimed direction: **inconclusive** when the MDE exceeds the paper's
   effect (:func:`type_m_reasons`: the significant estimate of such a design overstates the
   effect, a type M error); otherwise **not reproduced** when a secondary is significantly
   worse (Holm-adjusted p < 0.05 in the metric's bad direction) or, for Pareto claims, the
   95% interval of the pass@1 (best@1) difference does not lie above ``-margin`` with its
   point estimate beyond it too (non-inferiority; that metric is judged by the margin only,
   never also as a "significantly worse" secondary); **inconclusive** when the margin fails
   only because its interval is wide (the point estimate lies inside the margin); otherwise
   **reproduced**, or **significant, below SESOI** when its estimate is smaller than the
   SESOI (a real effect, smaller than any of interest; not for non-inferiority primaries);
5. not significant: **inconclusive** when the experiment cannot show the absence of an
   effect of interest (:func:`inconclusive_reasons`: b's headroom -- on its mean and on its
   median seed, :func:`seed_headroom` -- is below the SESOI, or b did not move from its
   start); otherwise **not reproduced** only when ``hi < SESOI``
   (equivalence-style: the interval excludes every effect of interest), and **inconclusive**
   when it does not (an effect of interest is still possible).

An A/A control is never inconclusive and has no SESOI: significant either way it is judged as
in steps 2 and 4 (and listed in ``controls.failed``: :func:`check_controls` fails the file),
otherwise **not reproduced**.

``robust`` (:func:`robust_flag`) is true when the sign-flip test, put through the same rule,
gives the same verdict, false (said in ``why``) when it does not, and ``"n/a (cannot reach α
with n seeds)"`` when even the sign-flip test's smallest p with n seeds (``2 / 2^n``, all signs
agreeing) would not be significant after Holm over the family, the other arms' p as observed
(:func:`sign_flip_floor_holm`): its agreement then says nothing.

Non-inferiority primaries (``ClaimSpec.margin``, "a matches b"): the claim is that ``a`` is
at most ``margin`` worse than ``b`` on the primary metric; the rule judges the tested quantity
``a - b + margin`` (its t-test, two-sided, Holm over the family; its interval; its SESOI the
margin), so **reproduced** means the 95% interval of ``a - b`` lies above ``-margin`` (a
one-sided 2.5% non-inferiority test), **contradicted** that ``a`` is significantly inferior
by more than the margin, and **not reproduced** that the interval of ``a - b`` ends below 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bestk.lab.claims.specs import GREATER, LESS, ClaimsDoc
from bestk.lab.common.io import fmt
from bestk.stats import holm

ALPHA = 0.05
#: The verdict of a significant arm whose estimate is smaller than its SESOI.
BELOW_SESOI = "significant, below SESOI"
#: The power at which the minimum detectable effect (``mde``) of every arm is computed.
POWER = 0.8
#: Every verdict the rule can give, with its definition (rendered in docs/results.md).
VERDICTS: dict[str, str] = {
    "reproduced": "the primary difference is significant in the claimed direction after Holm "
                  "correction over the family, the design could detect the paper's effect "
                  "(else a significant estimate overstates it), no secondary metric is "
                  "significantly worse (Holm within the arm) and, for Pareto claims, pass@1 "
                  "/ best@1 is non-inferior within the stated margin",
    "not reproduced": "the primary difference is not significant after Holm correction and "
                      "its 95% interval ends below the claim's SESOI (the smallest effect of "
                      "interest the claim declares): every effect of interest is "
                      "excluded; or it is significant but a secondary metric is "
                      "significantly worse or the Pareto margin fails beyond doubt",
    "inconclusive": "not evidence against the claim (the arm says how many seeds it would "
                    "need): the design cannot support a verdict (a method's learning rate "
                    "sits at the edge of its grid, the testbed did not train, b's primary "
                    "started too close to a bound, or the claim is that a sharpens less than b "
                    "and b does not sharpen); or the claim is that b fails to train and "
                    "b did not train; or the primary is significant in the claimed direction "
                    "but its minimum detectable effect exceeds the paper's effect (the "
                    "estimate overstates it); or the primary is not significant and its 95% "
                    "interval reaches the SESOI, b's headroom is below the SESOI, or b did "
                    "not move from its start; or the Pareto margin's interval is too wide to "
                    "decide",
    "significant, below SESOI": "the primary difference is significant in the claimed "
                                "direction and every other condition of reproduced holds, but "
                                "its estimate is smaller than the claim's SESOI: a real effect, "
                                "smaller than the smallest effect of interest (not counted as "
                                "reproduced)",
    "contradicted": "the primary difference is significant in the direction opposite to the "
                    "claim after Holm correction, whatever the minimum detectable effect (only "
                    "a design that cannot support any verdict makes it inconclusive)",
    "pending": "the testbed has not produced (enough) seeds yet; the arm is not judged and not "
               "in the family",
    "not comparable": "the two methods did not see the same reward, prompts or rollout budget "
                      "(read from their run configurations; the budget may differ only where "
                      "the claim compares budgets by design); not judged, not in the family",
    "dropped": "an amendment of the testbed's pre-registration took a method out of the grid "
               "after its first seed (TestbedSpec.dropped, with why); not judged, its test "
               "counted as not rejected (p = 1) in the family's declared size",
}


def significantly_worse(diff: float, p_holm: float, better: str, alpha: float = ALPHA) -> bool:
    """Whether a secondary metric's difference a - b is significant (``p_holm < alpha``) and in
    the wrong direction (below 0 when ``better`` is greater, above 0 when it is less)."""
    return p_holm < alpha and (diff < 0 if better == GREATER else diff > 0)


def _sign(direction: str) -> float:
    if direction not in (GREATER, LESS):
        raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")
    return 1.0 if direction == GREATER else -1.0


def _check_sesoi(sesoi: float | None, who: str) -> None:
    if sesoi is not None and not (math.isfinite(sesoi) and sesoi > 0):
        raise ValueError(f"{who}: sesoi must be a finite effect > 0, got {sesoi}")


def claimed_interval(ci95: Sequence[float], direction: str) -> tuple[float, float]:
    """A 95% interval of ``a - b`` counted in the claimed direction (for ``less`` claims the
    interval of ``b - a``). Raises ``ValueError`` unless it is two finite numbers, low first."""
    if len(ci95) != 2 or not all(math.isfinite(v) for v in ci95) or ci95[0] > ci95[1]:
        raise ValueError(f"ci95 must be two finite numbers low <= high, got {list(ci95)}")
    lo, hi = float(ci95[0]), float(ci95[1])
    return (lo, hi) if _sign(direction) > 0 else (-hi, -lo)


def verdict(primary_diff: float, primary_p_holm: float, direction: str,
            secondaries: Sequence[tuple[str, float, float, str]] = (),
            noninferiority: tuple[str, float, float] | None = None,
            alpha: float = ALPHA, *, ci95: Sequence[float] | None = None,
            sesoi: float | None = None, underpowered: Sequence[str] = (),
            noninferiority_diff: float | None = None, control: bool = False,
            design: Sequence[str] = (), type_m: Sequence[str] = (),
            premise: tuple[str, str] | None = None,
            margin_claim: bool = False) -> tuple[str, str]:
    """The verdict of one arm and the reason (the rule, steps 1-5: module docstring).

    ``primary_diff`` and ``ci95`` are the tested difference ``a - b`` (plus the margin on a
    non-inferiority claim) and its 95% interval, ``sesoi`` the claim's smallest effect of
    interest (> 0, counted in the claimed direction); a non-significant primary of an arm that
    is not an A/A control needs both. ``secondaries``: ``(metric, diff, p_holm, better)`` per
    secondary metric (``p_holm`` adjusted within the arm). ``noninferiority``: ``(metric,
    ci_low, margin)`` of a Pareto claim, ``noninferiority_diff`` its point estimate.
    ``design`` (:func:`design_reasons`): the comparison is not valid, any outcome is
    inconclusive. ``premise`` (:func:`stall_premise`, a claim that b fails to train):
    ``("holds", why)`` judges the comparison as any other, ``("refuted", why)`` (b trained)
    makes it not reproduced and ``("undecided", why)`` inconclusive, unless significantly
    opposite. ``margin_claim``: the primary is a non-inferiority one (its estimate is not
    compared with the SESOI). ``type_m`` (:func:`type_m_reasons`):
    a significant result in the claimed direction is inconclusive. ``underpowered``
    (:func:`inconclusive_reasons`): a non-significant primary is inconclusive. ``control``:
    an A/A control is never inconclusive (it has no effect to detect). Raises ``ValueError``
    on a direction other than greater / less, a p-value outside [0, 1], a bad interval or
    SESOI, or a non-significant claim arm without them.

    The steps are tried in the rule's order, the first that decides giving the verdict:
    :func:`_design_step` (1), :func:`_opposite_step` (2), :func:`_premise_step` (3), then
    :func:`_not_significant_step` (5) or :func:`_significant_step` (4) (exclusive).
    """
    sign = _sign(direction)
    if not 0.0 <= primary_p_holm <= 1.0:
        raise ValueError(f"primary_p_holm must lie in [0, 1], got {primary_p_holm}")
    _check_sesoi(sesoi, "verdict")
    interval = None if ci95 is None else claimed_interval(ci95, direction)
    pr = _Primary(significant=primary_p_holm < alpha, x=sign * primary_diff,
                  where=f"Holm p = {fmt(primary_p_holm)}", sign=sign)
    decided = _design_step(pr, design, control)
    if decided is not None:
        return decided
    premise_status, premise_why = premise if premise is not None else (None, "")
    decided = (_opposite_step(pr, type_m, premise_status, premise_why, control)
               or _premise_step(pr, premise_status, premise_why, control))
    if decided is not None:
        return decided
    if not pr.significant:
        return _not_significant_step(pr, interval, sesoi, underpowered, control)
    return _significant_step(pr, secondaries, noninferiority, alpha, sesoi=sesoi,
                             noninferiority_diff=noninferiority_diff, control=control,
                             type_m=type_m, premise=(premise_status, premise_why),
                             margin_claim=margin_claim)


@dataclass(frozen=True)
class _Primary:
    """What the rule's steps read of the primary test: ``significant`` (Holm p < alpha), ``x``
    (the difference counted in the claimed direction), ``where`` (the Holm p in words) and
    ``sign`` (+1 for ``greater`` claims, -1 for ``less``)."""

    significant: bool
    x: float
    where: str
    sign: float

    def shown(self, way: str) -> str:
        """The primary's outcome in words, ``way`` the direction a significant one went."""
        return (f"primary significant in the {way} direction ({self.where})" if self.significant
                else f"primary not significant ({self.where})")


def _design_step(pr: _Primary, design: Sequence[str], control: bool) -> tuple[str, str] | None:
    """Step 1: **inconclusive** when the design cannot support a verdict (not for controls)."""
    if design and not control:
        return "inconclusive", pr.shown("claimed" if pr.x > 0 else "opposite") + \
            "; the design cannot support a verdict: " + "; ".join(design)
    return None


def _opposite_step(pr: _Primary, type_m: Sequence[str], premise_status: str | None,
                   premise_why: str, control: bool) -> tuple[str, str] | None:
    """Step 2: **contradicted** when significant in the opposite direction; the power and
    premise guards that would apply in the claimed direction are named, never applied."""
    if not (pr.significant and pr.x < 0):
        return None
    why = (f"primary significantly {'worse' if pr.sign > 0 else 'higher'} than claimed "
           f"({pr.where})")
    guards = [] if control else list(type_m)
    if premise_status is not None and premise_status != "holds" and not control:
        guards.append(premise_why)
    if guards:
        why += ("; contradicted whatever the power: " + "; ".join(guards)
                + " only guards a result in the claimed direction")
    return "contradicted", why


def _premise_step(pr: _Primary, premise_status: str | None, premise_why: str,
                  control: bool) -> tuple[str, str] | None:
    """Step 3: a claim that b fails to train is **not reproduced** when b is shown to train,
    **inconclusive** when that is undecided (not for controls)."""
    if premise_status not in ("refuted", "undecided") or control:
        return None
    shown = pr.shown("claimed")
    if premise_status == "refuted":
        return "not reproduced", shown + "; the claim's premise, that b fails to train, " \
                                         "is refuted: " + premise_why
    return "inconclusive", shown + "; the claim's premise, that b fails to train, is " \
                                   "neither shown nor refuted: " + premise_why


def _not_significant_step(pr: _Primary, interval: tuple[float, float] | None,
                          sesoi: float | None, underpowered: Sequence[str],
                          control: bool) -> tuple[str, str]:
    """Step 5: a control is **not reproduced**; an arm that cannot show absence
    (``underpowered``) **inconclusive**; otherwise **not reproduced** iff the interval's upper
    end lies below the SESOI, else **inconclusive**."""
    why = f"primary not significant ({pr.where})"
    if control:
        return "not reproduced", why
    if underpowered:
        return "inconclusive", why + "; the experiment cannot show the absence of an " \
                                     "effect of interest: " + "; ".join(underpowered)
    if interval is None or sesoi is None:
        raise ValueError("verdict: a non-significant primary is judged by its 95% interval "
                         "against the SESOI: pass ci95 and sesoi")
    if interval[1] < sesoi:
        return "not reproduced", why + (f"; its 95% interval in the claimed direction ends "
                                        f"at {fmt(interval[1])} < SESOI {fmt(sesoi)}: "
                                        "every effect of interest is excluded")
    return "inconclusive", why + (f"; its 95% interval in the claimed direction reaches "
                                  f"{fmt(interval[1])} >= SESOI {fmt(sesoi)}: an effect "
                                  "of interest is not excluded")


def _significant_step(pr: _Primary, secondaries: Sequence[tuple[str, float, float, str]],
                      noninferiority: tuple[str, float, float] | None, alpha: float, *,
                      sesoi: float | None, noninferiority_diff: float | None, control: bool,
                      type_m: Sequence[str], premise: tuple[str | None, str],
                      margin_claim: bool) -> tuple[str, str]:
    """Step 4, significant in the claimed direction: **inconclusive** on a type M risk, then
    the secondaries (:func:`_worse_secondaries`) and the Pareto margin
    (:func:`_margin_outcome`), then **reproduced** or **significant, below SESOI**."""
    if type_m and not control:
        return "inconclusive", (f"primary significant in the claimed direction ({pr.where}); "
                                "the design cannot support it: " + "; ".join(type_m)
                                + ", so a significant difference from it overstates the "
                                  "effect (type M)")
    premise_status, premise_why = premise
    worse = _worse_secondaries(secondaries, noninferiority, alpha,
                               b_untrained=premise_status == "holds" and not control)
    if worse:
        return "not reproduced", ("primary significant, but significantly worse on "
                                  + ", ".join(worse))
    if noninferiority is not None:
        failed = _margin_outcome(noninferiority, noninferiority_diff, control)
        if failed is not None:
            return failed
    why = f"primary significant ({pr.where})"
    if premise_status == "holds":
        why += ("; the claim's premise holds: " + premise_why
                + " (b's secondaries, an untrained policy's, judge nothing)")
    if not control and not margin_claim and sesoi is not None and pr.x < sesoi:
        return BELOW_SESOI, why + (f"; its estimate {fmt(pr.x)} in the claimed direction is "
                                   f"below the SESOI {fmt(sesoi)}: a real effect, smaller "
                                   "than the smallest effect of interest")
    return "reproduced", why


def _worse_secondaries(secondaries: Sequence[tuple[str, float, float, str]],
                       noninferiority: tuple[str, float, float] | None, alpha: float, *,
                       b_untrained: bool) -> list[str]:
    """The secondaries significantly worse (:func:`significantly_worse`), the Pareto margin's
    metric excluded (judged by its margin only); none where b is shown not to train
    (``b_untrained``: b's secondaries, an untrained policy's whose spread wins pass@k at large
    k, judge nothing)."""
    if b_untrained:
        return []
    ni_metric = None if noninferiority is None else noninferiority[0]
    return [m for m, d, p, better in secondaries
            if m != ni_metric and significantly_worse(d, p, better, alpha)]


def _margin_outcome(noninferiority: tuple[str, float, float], point: float | None,
                    control: bool) -> tuple[str, str] | None:
    """The Pareto margin (None: it holds, 95% CI low > -margin): **inconclusive** when the
    point estimate lies inside the margin (the interval too wide to decide; not for
    controls), else **not reproduced**."""
    metric, lo, margin = noninferiority
    if lo > -margin:
        return None
    why = (f"primary significant, but {metric} non-inferiority fails (95% CI low "
           f"{fmt(lo)} <= -{margin})")
    if point is not None and point > -margin and not control:
        return "inconclusive", why + (f"; its point estimate {fmt(point)} "
                                      "lies inside the margin: the interval is too "
                                      "wide to decide")
    return "not reproduced", why


def type_m_reasons(mde: float | None, paper_effect: float | None) -> list[str]:
    """Why a significant result in the claimed direction cannot stand (empty: it can):
    ``mde > paper_effect``, the design detects the paper's effect with less than 80% power,
    so a significant difference from it overstates the effect (a type M error). It never
    applies to a significant result against the claim (:func:`verdict`, step 2). ``mde`` is
    None when the differences do not vary (no t-test): then there is nothing to compare."""
    if mde is None:
        return []
    if not (math.isfinite(mde) and mde >= 0):
        raise ValueError(f"type_m_reasons: mde must be finite and >= 0, got {mde}")
    if paper_effect is not None and mde > paper_effect:
        return [f"MDE {fmt(mde)} > the paper's effect {fmt(paper_effect)}"]
    return []


def inconclusive_reasons(headroom: float | None, b_moved: bool | None,
                         sesoi: float | None, *, margin_claim: bool = False) -> list[str]:
    """Why a non-significant primary cannot show that an effect of interest is absent (empty
    list: its 95% interval against the SESOI decides), each checked on its own:

    * ``headroom < sesoi`` (not for "a matches b" claims, ``margin_claim``, whose tested
      quantity ``a - b + margin`` is not bounded by b's headroom): b is so close to the
      metric's bound that no effect of interest fits, so excluding one shows nothing;
    * ``b_moved is False``: b's primary metric did not move from its start value (95% interval
      of end - start contains 0), so the comparison is between runs that did not train.
    """
    _check_sesoi(sesoi, "inconclusive_reasons")
    out = []
    if headroom is not None and sesoi is not None and not margin_claim and headroom < sesoi:
        out.append(f"the headroom {headroom:.4g} left to b (its mean or median seed) is "
                   f"below the SESOI {sesoi:.4g}: no effect of interest fits")
    if b_moved is False:
        out.append("b did not move from its start value (95% CI of end − start contains 0)")
    return out


def stall_premise(progress_ci95: Sequence[float] | None, sesoi: float | None,
                  better: str) -> tuple[str, str] | None:
    """The premise of a claim that b fails to train (make progress), judged from the 95%
    interval of b's progress end − start on the primary metric, counted in the metric's
    ``better`` direction: ``("holds", why)`` when it ends below the SESOI (b's progress is
    shown to be smaller than the smallest effect of interest), ``("refuted", why)`` when it
    starts at or above the SESOI (b made progress of interest), ``("undecided", why)``
    otherwise; ``None`` without a start to compare with. The premise is part of the claim:
    :func:`verdict` judges a - b only where it holds."""
    _check_sesoi(sesoi, "stall_premise")
    if progress_ci95 is None or sesoi is None:
        return None
    lo, hi = claimed_interval(progress_ci95, better)
    span = f"b's progress from its start, {fmt(lo)} to {fmt(hi)} (95% CI),"
    if hi < sesoi:
        return "holds", f"{span} stays below the SESOI {fmt(sesoi)}"
    if lo >= sesoi:
        return "refuted", f"{span} lies at or above the SESOI {fmt(sesoi)}"
    return "undecided", f"{span} contains the SESOI {fmt(sesoi)}"


def seed_headroom(per_seed_b: Sequence[float], bounds: Sequence[float], direction: str
                  ) -> float:
    """b's room to the metric's bound in the claimed direction, on its mean *and* on its
    median seed, whichever is smaller (>= 0): a mean pulled away from the bound by a few low
    seeds overstates the room the typical seed has, and a null there is a ceiling, not
    evidence against the claim (:func:`inconclusive_reasons`)."""
    vals = [float(v) for v in per_seed_b]
    if not vals:
        raise ValueError("seed_headroom: b has no seeds")
    lo, hi = float(bounds[0]), float(bounds[1])
    mean = math.fsum(vals) / len(vals)
    srt = sorted(vals)
    mid = len(srt) // 2
    median = srt[mid] if len(srt) % 2 else (srt[mid - 1] + srt[mid]) / 2
    room = [hi - mean, hi - median] if _sign(direction) > 0 else [mean - lo, median - lo]
    return max(0.0, min(room))


def design_reasons(lr_edges: Sequence[str] = (), not_training: Sequence[str] = ()) -> list[str]:
    """Why an arm's design cannot support a verdict whatever its outcome (empty: it can),
    which makes a significant result either way inconclusive too:

    * ``lr_edges``: a method's learning rate sits at the edge of its grid (it may be
      untuned; :func:`~bestk.lab.claims.evaluate.learning_rates`);
    * ``not_training``: the testbed's checks failed: it did not train
      (:attr:`TestbedSpec.trains_if`), b's primary started outside
      :attr:`TestbedSpec.start_range`, or b does not sharpen on a claim that needs it to
      (:attr:`~bestk.lab.claims.specs.ClaimSpec.precondition`).
    """
    return list(lr_edges) + list(not_training)


def sign_flip_floor_holm(p_perm: Sequence[float], index: int, floor: float) -> float:
    """The smallest Holm-adjusted sign-flip p arm ``index`` of a family can have: its own p
    set to ``floor`` (the test's smallest p with its seeds, ``2 / 2^n`` exactly), the other
    arms' ``p_perm`` as observed (Holm's adjusted p of one test falls with its own p)."""
    if not 0 <= index < len(p_perm):
        raise ValueError(f"sign_flip_floor_holm: index {index} outside a family of "
                         f"{len(p_perm)}")
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"sign_flip_floor_holm: floor must lie in (0, 1], got {floor}")
    ps = list(p_perm)
    ps[index] = floor
    return holm(ps)[index]


def robust_flag(verdict_t: str, verdict_perm: str, floor_p_holm: float, n: int,
                alpha: float = ALPHA) -> bool | str:
    """``robust`` of an arm: ``"n/a (cannot reach α with n seeds)"`` when the sign-flip test
    cannot be significant at any outcome (``floor_p_holm``, its smallest Holm-adjusted p with
    ``n`` seeds, :func:`sign_flip_floor_holm`, is not below ``alpha``), else whether the
    t-test's and the sign-flip test's verdicts agree."""
    if int(n) != n or n < 1:
        raise ValueError(f"robust_flag: n must be a positive number of seeds, got {n}")
    if not floor_p_holm < alpha:
        return f"n/a (cannot reach α with {n} seeds)"
    return verdict_t == verdict_perm


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
