"""The lab's learning-rate protocol: a validation sweep whose grid grows until the chosen rate
is interior.

Every method is scored at every rate of a starting grid (on validation data, over several
seeds: the caller's ``score`` averages them). When a method's best rate is the smallest or
the largest it was tried at, the grid is extended one geometric step past that edge: the
next rate is ``min / r`` or ``max * r`` (3 significant digits), ``r`` the ratio of the two
rates nearest that edge, and only that method is scored there. This repeats until every
method's best rate has a tried rate on each side, or ``max_extensions`` steps were taken on
its behalf (then it is recorded as not interior, and the claims that use it say so). The
best rate is the smallest whose score is within ``tol`` of the highest (ties, and a
saturated objective, go to the smaller rate):

    best(m) = min {lr in grid(m) : score(m, lr) >= max_grid(m) score(m, .) - tol},
    interior(m) = min grid(m) < best(m) < max grid(m).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

__all__ = ["best_rate", "fixed_rate", "is_interior", "next_rate", "sweep_until_interior",
           "SweepRecord", "RateScore"]


class RateScore(TypedDict):
    """One rate a method was tried at, and its validation score."""

    lr: float
    score: float


class _SweepKeys(TypedDict):
    #: The starting grid.
    grid: list[float]
    #: Per method: the sorted rates it was tried at.
    grids: dict[str, list[float]]
    #: Per method: its :class:`RateScore` s, by rate (empty for an unscored fixed rate).
    scores: dict[str, list[RateScore]]
    #: Per method: its chosen rate.
    selected: dict[str, float]
    #: Per method: whether the chosen rate is interior to its grid (``None``: one rate).
    interior: dict[str, bool | None]
    #: Rounds of extension past the grid's edges.
    extensions: int


class SweepRecord(_SweepKeys, total=False):
    """The record of a learning-rate sweep (:func:`sweep_until_interior`, :func:`fixed_rate`)."""

    #: Scores within this of the best count as tied (:func:`best_rate`); not in a fixed rate's.
    tolerance: float


def _check_grid(grid: Sequence[float]) -> list[float]:
    rates = sorted(float(v) for v in grid)
    if len(rates) < 2:
        raise ValueError(f"a learning-rate grid to extend needs >= 2 rates, got {list(grid)}")
    if not all(math.isfinite(v) and v > 0 for v in rates):
        raise ValueError(f"learning rates must be positive and finite, got {list(grid)}")
    if len(set(rates)) != len(rates):
        raise ValueError(f"learning-rate grid has repeated rates: {list(grid)}")
    return rates


def best_rate(scores: Mapping[float, float], tol: float = 0.0) -> float:
    """The smallest rate whose score is within ``tol`` of the highest (``tol = 0``: the
    highest, ties to the smaller rate). Scores must be finite; a saturated objective (every
    rate past some point scores the same up to ``tol``) thus picks where it saturates."""
    if not scores:
        raise ValueError("no scores to choose a learning rate from")
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be finite and >= 0, got {tol}")
    bad = {lr: s for lr, s in scores.items() if not math.isfinite(s)}
    if bad:
        raise ValueError(f"learning-rate scores must be finite, got {bad}")
    top = max(scores.values())
    return min(lr for lr, s in scores.items() if s >= top - tol)


def is_interior(rate: float, grid: Sequence[float]) -> bool:
    """``min(grid) < rate < max(grid)``: the chosen rate has a tried rate on each side."""
    return min(grid) < rate < max(grid)


def next_rate(scores: Mapping[float, float], tol: float = 0.0) -> float | None:
    """The rate to try next for one method, or ``None`` when its best rate is interior: one
    geometric step below the smallest rate (best at the bottom) or above the largest (best at
    the top), the step being the ratio of the two rates nearest that edge."""
    rates = _check_grid(list(scores))
    best = best_rate(scores, tol)
    if best == rates[0]:
        return _round(rates[0] * rates[0] / rates[1])
    if best == rates[-1]:
        return _round(rates[-1] * rates[-1] / rates[-2])
    return None


def _round(rate: float) -> float:
    """``rate`` to 3 significant digits (0.25000000000000006 -> 0.25), so the extended grid
    reads like the starting one."""
    return float(f"{rate:.3g}")


def sweep_until_interior(
    score: Callable[[Mapping[str, Sequence[float]]], Mapping[str, Mapping[float, float]]],
    labels: Sequence[str], grid: Sequence[float], *, max_extensions: int = 3,
    tol: float = 0.0,
) -> SweepRecord:
    """Run the protocol (module docstring) for ``labels``.

    ``score({label: [rates]})`` trains each named method at each listed rate on the
    validation data and returns ``{label: {rate: score}}`` for exactly those pairs; the first
    call asks for the whole ``grid`` for every label, later calls only for the extensions.

    Returns ``{"grid": starting grid, "grids": {label: sorted rates tried}, "scores": {label:
    [{"lr", "score"}] sorted by lr}, "selected": {label: rate}, "interior": {label: bool},
    "extensions": number of extra rounds}``.
    """
    rates = _check_grid(grid)
    if max_extensions < 0:
        raise ValueError(f"max_extensions must be >= 0, got {max_extensions}")
    labels = list(labels)
    if len(set(labels)) != len(labels):
        raise ValueError(f"repeated method labels: {labels}")
    table: dict[str, dict[float, float]] = {lb: {} for lb in labels}

    def ask(want: dict[str, list[float]]) -> None:
        got = score(want)
        for lb, lrs in want.items():
            for lr in lrs:
                if lb not in got or lr not in got[lb]:
                    raise ValueError(f"the sweep's scorer returned no score for {lb!r} at "
                                     f"lr={lr:g}")
                table[lb][lr] = float(got[lb][lr])

    ask({lb: list(rates) for lb in labels})
    rounds = 0
    for _ in range(max_extensions):
        want = {lb: [nxt] for lb in labels if (nxt := next_rate(table[lb], tol)) is not None}
        if not want:
            break
        ask(want)
        rounds += 1
    selected = {lb: best_rate(table[lb], tol) for lb in labels}
    return {
        "grid": rates,
        "grids": {lb: sorted(table[lb]) for lb in labels},
        "scores": {lb: [{"lr": lr, "score": table[lb][lr]} for lr in sorted(table[lb])]
                   for lb in labels},
        "selected": selected,
        "interior": {lb: is_interior(selected[lb], list(table[lb])) for lb in labels},
        "extensions": rounds,
        "tolerance": tol,
    }


def fixed_rate(labels: Sequence[str], rate: float,
               scores: Mapping[str, float] | None = None) -> SweepRecord:
    """The record of a one-rate "sweep": every method of ``labels`` runs at ``rate``, nothing
    is extended, and ``interior`` is ``None`` (one rate has no sides). ``scores``, when the
    caller scored the rate anyway, is ``{label: score}``; without it ``scores`` is empty.
    Same keys as :func:`sweep_until_interior`'s result."""
    labels = list(labels)
    if len(set(labels)) != len(labels):
        raise ValueError(f"repeated method labels: {labels}")
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"learning rates must be positive and finite, got {rate}")
    rate = float(rate)
    if scores is not None and set(scores) != set(labels):
        raise ValueError(f"scores are for {sorted(scores)}, not the methods {sorted(labels)}")
    return {
        "grid": [rate],
        "grids": {lb: [rate] for lb in labels},
        "scores": ({} if scores is None else
                   {lb: [{"lr": rate, "score": float(scores[lb])}] for lb in labels}),
        "selected": {lb: rate for lb in labels},
        "interior": {lb: None for lb in labels},
        "extensions": 0,
    }
