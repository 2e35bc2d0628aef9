"""The vocabulary of a claim: metrics, arms, claim and testbed specs (what a spec may say).

A claim is a :class:`ClaimSpec`: its id, the claim in words, the source, ``kind``
(``"exact"``: decided by exact enumeration; ``"trained"``: decided from seeded training runs),
the arms it runs on (:class:`Arm`: a testbed and the two methods ``a`` and ``b`` compared
there), the reward each method sees, the primary metric and its claimed direction, the
secondary metrics and, for "Pareto dominates" claims, a non-inferiority margin
(:class:`NonInferiority`). Metrics are :class:`Metric` objects (``pass@k`` / ``best@k`` with an
explicit k or the testbed's largest k, or a plain per-seed quantity), never strings to parse. A
testbed is a :class:`TestbedSpec`. The declared claims and testbeds themselves are in
:mod:`bestk.lab.claims.table`, beside each claim's smallest effect size of interest (its
SESOI, :data:`bestk.lab.claims.table.SESOI`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from string import Formatter
from typing import Any, TypeAlias

from bestk.lab.common.io import metric_key

#: One arm's entry of ``claims.json`` (:func:`bestk.lab.claims.evaluate_claims`): its id, the
#: claim's fields, ``primary`` / ``secondary`` tests, ``noninferiority``, ``power``, the
#: learning rates, the matching of reward / prompts / budget, ``verdict`` and ``why``.
ArmEntry: TypeAlias = dict[str, Any]
#: A ``claims.json`` document: ``family``, ``controls``, ``verdicts`` and ``claims`` (its
#: :data:`ArmEntry` s), read by key.
ClaimsDoc: TypeAlias = dict[str, Any]

#: The two directions of a metric's improvement, or of a claimed difference ``a - b``.
GREATER, LESS = "greater", "less"


@dataclass(frozen=True)
class Metric:
    """A per-seed metric of a testbed.

    ``name`` is ``"pass"`` or ``"best"`` (then ``k`` is the k, ``None`` = the testbed's largest
    k, and ``every=True`` expands to every k of the testbed) or a plain per-seed quantity
    (``at_k=False``, e.g. ``"distinct_correct"``). ``better`` is the direction of improvement.
    """

    name: str
    k: int | None = None
    at_k: bool = True
    better: str = GREATER
    every: bool = False

    def keys(self, ks: Sequence[int], primary_k: int | None = None) -> list[str]:
        """The data keys this metric stands for on a testbed with k values ``ks`` ("the
        largest k" is ``primary_k`` when the testbed sets one: :attr:`TestbedSpec.primary_k`)."""
        if not self.at_k:
            return [self.name]
        if self.every:
            return [metric_key(self.name, k) for k in ks]
        top = max(ks) if primary_k is None else min(primary_k, max(ks))
        return [metric_key(self.name, self.k if self.k is not None else top)]

    @property
    def label(self) -> str:
        if not self.at_k:
            return self.name
        if self.every:
            return f"{self.name}@k (every k)"
        return f"{self.name}@{'k_max' if self.k is None else self.k}"


PASS_MAX, BEST_MAX = Metric("pass"), Metric("best")
#: Accuracy-normalised diversity: distinct correct completions per correct sample, per seed
#: ``distinct_correct / (n * pass@1)`` (both averaged over the held-out prompts, n samples
#: each), in [0, 1]; raw ``distinct_correct`` follows accuracy (it grows with the number of
#: correct samples), this does not (:func:`derived_metrics`).
DIVERSITY = "distinct_per_correct"
PASS1, BEST1 = Metric("pass", 1), Metric("best", 1)
PASS_EVERY, BEST_EVERY = Metric("pass", every=True), Metric("best", every=True)


def plain(name: str, better: str = GREATER) -> Metric:
    return Metric(name, at_k=False, better=better)


@dataclass(frozen=True)
class NonInferiority:
    """``a`` may be worse than ``b`` on ``metric`` by less than ``margin`` (absolute): the 95%
    interval of ``a - b`` must lie above ``-margin``."""

    metric: Metric
    margin: float


@dataclass(frozen=True)
class Sharpening:
    """The precondition of a claim that ``a`` sharpens less than ``b``: on the arm's testbed
    ``b`` sharpens, i.e. the mean over seeds of its ``wide`` metric (pass@k at a large k) ends
    less than ``tolerance`` above its start value (``tolerance = 0``: it must fall below the
    start, the policy RL starts from) and, when ``narrow`` is given (pass@1), its mean
    ``narrow`` rises. Where ``b`` does not sharpen there is no sharpening to lessen: the arm
    is inconclusive whatever its outcome, with the numbers as the reason
    (:func:`bestk.lab.claims.evaluate.sharpening_check`)."""

    wide: str = "pass@16"
    tolerance: float = 0.0
    narrow: str | None = None

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ValueError(f"Sharpening: tolerance must be >= 0, got {self.tolerance}")


@dataclass(frozen=True)
class Arm:
    """One place a claim is tested: a testbed and the two methods (labels in its data).
    ``tag`` tells apart several arms of one claim on the same testbed (the arm's id is
    ``claim@testbed[tag]``)."""

    testbed: str
    a: str | None = None
    b: str | None = None
    tag: str | None = None


@dataclass(frozen=True)
class ClaimSpec:
    """A claim, declared as data (this module's docstring; the rule:
    :mod:`bestk.lab.claims.rule`)."""

    id: str
    claim: str
    source: str
    kind: str
    arms: tuple[Arm, ...]
    reward: str
    primary: Metric
    direction: str = GREATER
    secondary: tuple[Metric, ...] = ()
    noninferiority: NonInferiority | None = None
    control: bool = False
    status: str | None = None
    exact_rule: str | None = None
    #: Non-inferiority primary: ``a`` at most this much worse than ``b``
    #: (:mod:`bestk.lab.claims.rule`).
    margin: float | None = None
    #: ``"matched"``: the two methods must use the same rollout budget; ``"by design"``: the
    #: claim compares different budgets on purpose (both are recorded).
    budget: str = "matched"
    #: The claim is that b fails to train (e.g. REINFORCE makes no progress with a sparse
    #: reward) and a beats it: the premise is part of the claim
    #: (:func:`bestk.lab.claims.rule.stall_premise`): where b is shown to train the arm is
    #: not reproduced, where its progress is undecided inconclusive (a significant opposite
    #: result is contradicted either way), and a - b is judged where the premise holds.
    claims_b_stalls: bool = False
    #: The claim is about sharpening (``a`` sharpens less than ``b``): the arm's ``b`` must
    #: sharpen on the testbed (:class:`Sharpening`), else the arm is inconclusive.
    precondition: Sharpening | None = None


BUDGETS = ("matched", "by design")


@dataclass(frozen=True)
class PilotValue:
    """A number that a testbed's ``why`` quotes from a committed pilot record: the
    ``{name}`` field of the text is ``fmt`` applied to the value at ``path`` in ``file``
    (relative to ``docs/results/data``). ``path`` walks the JSON one segment at a time: a
    dict key (a segment with ``*`` matches the one key that fits it as a glob, for keys
    such as a pilot's JSON-encoded settings), or a list index in digits."""

    name: str
    file: str
    path: tuple[str, ...]
    fmt: str = "{:.3f}"

    def read(self, data_dir: Path) -> str:
        """The formatted value; a :class:`ValueError` naming the file and the path when the
        file or a segment of the path is missing."""
        where = f"pilot value {self.name!r}: {self.file} {'/'.join(self.path)!r}"
        try:
            node: Any = json.loads((data_dir / self.file).read_text())
        except FileNotFoundError:
            raise ValueError(f"{where}: no file {data_dir / self.file}") from None
        for i, seg in enumerate(self.path):
            at = "/".join(self.path[:i]) or "the top"
            if isinstance(node, dict):
                keys = [seg] if seg in node else \
                    [k for k in node if "*" in seg and fnmatchcase(k, seg)]
                if len(keys) != 1:
                    raise ValueError(f"{where}: {len(keys) or 'no'} keys match {seg!r} at {at}")
                node = node[keys[0]]
            elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
                node = node[int(seg)]
            else:
                raise ValueError(f"{where}: no item {seg!r} at {at}")
        try:
            return self.fmt.format(node)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {node!r} does not format as {self.fmt!r}") from e


@dataclass(frozen=True)
class TestbedSpec:
    """A testbed: where its data comes from, how many seeds it needs, why it fits."""

    id: str
    kind: str
    title: str
    why: str
    min_seeds: int
    data: str
    command: str
    #: The range of one reward on this testbed: the bound of best@k (pass@k lies in [0, 1]).
    reward_range: tuple[float, float] = (0.0, 1.0)
    #: The k of "pass@k / best@k at the largest k" here (``None``: the largest measured k):
    #: a k whose start value leaves room to move (``TestbedSpec.why`` says how it was chosen).
    primary_k: int | None = None
    #: ``(method, metric, factor)``: the testbed trains only if that method's mean end value
    #: is at least ``factor`` times its start value (e.g. GRPO's pass@1 doubles); otherwise
    #: every claim arm on it is inconclusive (:func:`inconclusive_reasons`).
    trains_if: tuple[str, str, float] | None = None
    #: ``(low, high)``: b's start value of a "pass@k / best@k at the primary k" primary must
    #: lie inside, so the metric can move either way (near a bound it cannot show much).
    start_range: tuple[float, float] | None = None
    #: Why the testbed has no committed data, when it has none (its arms stay pending).
    pending_why: str | None = None
    #: The Holm family its arms are corrected in (declared before its runs): ``"toy"`` for
    #: the from-scratch testbeds, a family of its own for a testbed whose question is another
    #: (the pretrained model's), so the two do not dilute each other.
    family: str = "toy"
    #: The commit that declared the testbed's design before any of its runs (its
    #: pre-registration), ``None`` where the design was not committed before its data.
    preregistered_at: str | None = None
    #: ``(commit, ISO time)`` of the first commit holding per-seed data of the testbed (its
    #: data file added), ``None`` while it has none: the parts of the verdict rule declared
    #: after it (:data:`bestk.lab.claims.table.RULE_DECLARED`) were not declared before its
    #: data were seen, and claims.json says so per arm.
    first_data: tuple[str, str] | None = None
    #: The pilot numbers ``why`` quotes, read from their committed records: its ``{name}``
    #: fields (:class:`PilotValue`; :meth:`why_text` fills them). ``why`` has a field for
    #: each and no other (a literal brace is written ``{{`` / ``}}``).
    pilot_values: tuple[PilotValue, ...] = ()
    #: ``(method, why)`` of each method an amendment of the pre-registration took out of the
    #: grid after its first seed: every claim arm with it is ``dropped`` (judges nothing).
    dropped: tuple[tuple[str, str], ...] = ()
    #: The number of tests its Holm family was declared with, where an amendment later
    #: dropped some (``None``: the family is the arms judged): a dropped test counts as not
    #: rejected (p = 1), so the rest keep the level declared before the runs.
    family_tests: int | None = None

    def dropped_why(self, method: str | None) -> str | None:
        """Why an amendment dropped ``method`` from this testbed (``None``: it did not)."""
        return dict(self.dropped).get(method) if method is not None else None

    def __post_init__(self) -> None:
        fields = [f for _, f, _, _ in Formatter().parse(self.why) if f is not None]
        names = [p.name for p in self.pilot_values]
        if sorted(set(fields)) != sorted(names) or len(set(names)) != len(names):
            raise ValueError(f"TestbedSpec {self.id}: the fields of why {sorted(set(fields))} "
                             f"are not the pilot values declared {names}")

    def why_text(self, data_dir: Path) -> str:
        """``why`` with its pilot numbers filled from the records under ``data_dir``
        (``docs/results/data``): :class:`PilotValue`."""
        return self.why.format_map({p.name: p.read(data_dir) for p in self.pilot_values})


def arm_id(spec: ClaimSpec, arm: Arm) -> str:
    """The id of an arm in claims.json: ``claim@testbed`` (``[tag]`` appended when set)."""
    return f"{spec.id}@{arm.testbed}" + (f"[{arm.tag}]" if arm.tag else "")

