"""The papers' claims, declared as data, and the rule that judges them (when each part was
declared against each testbed's data: ``RULE_DECLARED``, ``TestbedSpec.first_data``).

Where each part lives (every name below is importable from ``bestk.lab.claims``):

* :mod:`~bestk.lab.claims.specs` -- what a claim, an arm, a metric and a testbed may say
  (:class:`Metric`, :class:`Arm`, :class:`ClaimSpec`, :class:`TestbedSpec`, :func:`arm_id`);
* :mod:`~bestk.lab.claims.table` -- the declared claims and testbeds (:data:`CLAIMS`,
  :data:`TESTBEDS`, :data:`PAPER_EFFECTS`, each claim's smallest effect size of interest
  :data:`SESOI`): a new claim or testbed goes here;
* :mod:`~bestk.lab.claims.rule` -- the verdict rule of one arm (:func:`verdict`) and why a
  design or an experiment cannot support one (:func:`design_reasons`, :func:`stall_premise`,
  :func:`type_m_reasons`, :func:`inconclusive_reasons`), the robust flag
  (:func:`robust_flag`), the A/A control check (:func:`check_controls`);
* :mod:`~bestk.lab.claims.exact` -- the rules of the claims decided by exact computation;
* :mod:`~bestk.lab.claims.evaluate` -- ``claims.json`` from the per-seed data
  (:func:`evaluate_claims`: tests, Holm correction, power, learning rates, testbed checks);
* :mod:`~bestk.lab.claims.power` -- the seeds a grid needs, from a power pilot's
  ``claims.json`` (:func:`power_plan`);
* :mod:`~bestk.lab.claims.render` -- reading a ``claims.json`` document: its markdown
  (:func:`render_claims`), each arm's outcome, the verdict counts.

The layers inside the package run one way: ``specs`` <- ``table``, ``rule``, ``exact`` <-
``evaluate``; ``power`` and ``render`` read ``table`` and ``rule``.

The package's public names are those of :data:`__all__` (the API of the single module it
replaced); the other names live in their module (``bestk.lab.claims.specs.GREATER``, ...).
"""

from __future__ import annotations

from bestk.lab.claims.evaluate import derived_metrics, evaluate_claims, learning_rates
from bestk.lab.claims.power import power_plan
from bestk.lab.claims.render import (
    arm_outcome,
    bimodal_arms,
    counts,
    render_claims,
    render_declared,
)
from bestk.lab.claims.rule import (
    ALPHA,
    POWER,
    VERDICTS,
    ControlFailed,
    check_controls,
    design_reasons,
    inconclusive_reasons,
    robust_flag,
    seed_headroom,
    stall_premise,
    type_m_reasons,
    verdict,
)
from bestk.lab.claims.specs import (
    BUDGETS,
    DIVERSITY,
    Arm,
    ClaimSpec,
    Metric,
    NonInferiority,
    Sharpening,
    TestbedSpec,
    arm_id,
)
from bestk.lab.claims.table import (
    CLAIMS,
    DEFAULT_SESOI,
    PAPER_EFFECTS,
    SESOI,
    TESTBEDS,
    check_registry,
)

__all__ = [
    "ALPHA",
    "Metric",
    "NonInferiority",
    "Sharpening",
    "Arm",
    "ClaimSpec",
    "TestbedSpec",
    "BUDGETS",
    "arm_id",
    "arm_outcome",
    "CLAIMS",
    "TESTBEDS",
    "verdict",
    "evaluate_claims",
    "render_claims",
    "render_declared",
    "VERDICTS",
    "POWER",
    "PAPER_EFFECTS",
    "SESOI",
    "DEFAULT_SESOI",
    "inconclusive_reasons",
    "design_reasons",
    "seed_headroom",
    "stall_premise",
    "type_m_reasons",
    "robust_flag",
    "bimodal_arms",
    "learning_rates",
    "derived_metrics",
    "DIVERSITY",
    "ControlFailed",
    "check_controls",
    "counts",
    "power_plan",
]

def _check_registry() -> None:
    """:func:`~bestk.lab.claims.table.check_registry` of the registry this package exposes
    now: its ``CLAIMS`` as currently bound (a test swaps it in to see the check fail)."""
    check_registry(CLAIMS)
