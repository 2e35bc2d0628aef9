"""Learning rates from a sweep on the validation split, then the paired test run.

:func:`sweep_and_test` trains every learner at each rate of a grid on the validation split
(extended past an edge until the chosen rate is interior, :mod:`bestk.lr_sweep`; @k-GRPO's
KL strength swept with it), keeps each learner's best rate, and trains every learner at its
rate on the test split for the paired seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from bestk.lab.common.io import (
    metric_key,
)
from bestk.lab.digits.engine import (
    Problem,
    RunSpec,
    Slot,
    SlotResults,
    run_slots,
)
from bestk.lab.digits.settings import (
    REWARD_KINDS,
    SWEEP_SEED0,
    Learner,
    check_lrs,
)
from bestk.lr_sweep import SweepRecord, fixed_rate, sweep_until_interior

#: One finished setting (a reward variant of ``bestk lab digits``, a group size of ``bestk lab
#: sparse``) as ``results.json`` holds it: ``sweep`` (the :class:`~bestk.lr_sweep.SweepRecord`
#: and how it was scored), ``selected`` / ``beta`` (each learner's rate and KL strength) and
#: ``test`` (:data:`~bestk.lab.digits.engine.SlotResults`), plus what the command adds (the
#: setting, ``ks``, ``learners``, ``wall_seconds``, ``config_key``); JSON values, read by key.
SettingResult: TypeAlias = dict[str, Any]


def selection_score(result: SlotResults, reward: str, ks: Sequence[int]) -> np.ndarray:
    """Per slot: mean over ``ks`` of pass@k (binary) or best@k (graded) at the end."""
    name = REWARD_KINDS[reward].metric
    return np.mean([result["end"][metric_key(name, k)] for k in ks], axis=0)


#: A sweep arm's name -> (its learner, its KL strength: None unless the learner is calibrated).
_Arms: TypeAlias = dict[str, tuple[Learner, float | None]]
#: ``progress(description, total)`` -> a per-step callback, or None.
_Progress: TypeAlias = Callable[[str, int], Callable[[], None] | None]


def sweep_and_test(make: Callable[[str], Problem], learners: Sequence[Learner],
                   spec: RunSpec, *, seeds: int, lr_grid: Sequence[float], sweep_seeds: int,
                   progress: _Progress | None = None,
                   max_extensions: int = 3, kappo_betas: Sequence[float] = (1e-3,),
                   ) -> SettingResult:
    """Choose each learner's learning rate on ``make("validation")``, then train every learner
    with its rate on ``make("test")`` for ``seeds`` paired seeds.

    The sweep trains every rate of ``lr_grid`` x ``sweep_seeds`` seeds of its own and extends
    the grid past an edge until the chosen rate is interior (:mod:`bestk.lr_sweep`, at
    most ``max_extensions`` rates per learner); a calibrated learner (@k-GRPO) is swept at
    every KL strength of ``kappo_betas`` and keeps the (beta, rate) pair with the best score.
    A/A controls take their learner's rate.

    Returns ``{"sweep": {...}, "test": run_slots(...) result, "selected": {label: lr},
    "beta": {label: beta}}``.
    """
    check_lrs(lr_grid)
    tuned = [x for x in learners if x.control_of is None and x.rate_of is None]
    sweep: dict[str, Any]
    if len(lr_grid) == 1:
        sweep = {**fixed_rate([x.label for x in tuned], float(lr_grid[0])),
                 "seeds": sweep_seeds}
        selected = dict(sweep["selected"])
        betas = {x.label: float(kappo_betas[0]) for x in tuned if x.calibrated}
    else:
        sweep, selected, betas = _validation_sweep(
            make("validation"), tuned, spec, lr_grid=lr_grid, sweep_seeds=sweep_seeds,
            progress=progress, max_extensions=max_extensions, kappo_betas=kappo_betas)
    selected, betas = _borrowed_rates(learners, selected, betas)
    sweep["selected"] = dict(selected)
    if betas:
        sweep["selected_beta"] = dict(betas)
    problem = make("test")
    slots = [Slot(x, selected[x.label], s, betas.get(x.label)) for x in learners
             for s in range(seeds)]
    test = run_slots(problem, slots, spec,
                     progress(f"test {problem.reward}", spec.steps) if progress else None)
    test["data_id"] = problem.data_id
    return {"sweep": sweep, "selected": selected, "beta": betas, "test": test}


def _sweep_arms(tuned: Sequence[Learner], kappo_betas: Sequence[float]) -> _Arms:
    """One sweep arm per (learner, beta): a learner's label, or for a calibrated learner one
    ``"label|beta=B"`` per KL strength of ``kappo_betas``."""
    arms: _Arms = {}
    for x in tuned:
        if x.calibrated:
            for b in kappo_betas:
                arms[f"{x.label}|beta={b:g}"] = (x, float(b))
        else:
            arms[x.label] = (x, None)
    return arms


def _arm_scorer(problem: Problem, arms: _Arms, spec: RunSpec, sweep_seeds: int,
                progress: _Progress | None
                ) -> Callable[[Mapping[str, Sequence[float]]], dict[str, dict[float, float]]]:
    """The ``score`` of :func:`bestk.lr_sweep.sweep_until_interior`: every asked (arm, rate)
    trained on ``problem`` in one batch for ``sweep_seeds`` seeds (ids from ``SWEEP_SEED0``),
    scored by the mean over those seeds of :func:`selection_score`."""
    rounds = [0]

    def score(want: Mapping[str, Sequence[float]]) -> dict[str, dict[float, float]]:
        slots = [Slot(arms[a][0], float(v), SWEEP_SEED0 + j, arms[a][1])
                 for a, rates in want.items() for v in rates for j in range(sweep_seeds)]
        rounds[0] += 1
        tag = "" if rounds[0] == 1 else f" (extension {rounds[0] - 1})"
        res = run_slots(problem, slots, spec,
                        progress(f"sweep {problem.reward}{tag}", spec.steps)
                        if progress else None)
        sc = selection_score(res, problem.reward, spec.ks)
        got: dict[str, dict[float, float]] = {}
        for a, rates in want.items():
            for v in rates:
                mask = [i for i, s in enumerate(slots) if s.learner is arms[a][0]
                        and s.beta == arms[a][1] and s.lr == float(v)]
                got.setdefault(a, {})[float(v)] = float(np.mean(sc[mask]))
        return got

    return score


def _validation_sweep(problem: Problem, tuned: Sequence[Learner], spec: RunSpec, *,
                      lr_grid: Sequence[float], sweep_seeds: int, progress: _Progress | None,
                      max_extensions: int, kappo_betas: Sequence[float],
                      ) -> tuple[dict[str, Any], dict[str, float], dict[str, float]]:
    """The sweep of ``tuned`` on the validation ``problem``: ``(sweep record, {label: lr},
    {label: beta})``. Each learner keeps its arm of best score (ties: the smaller beta), and
    the record holds that arm's scores, grid and interior flag; a calibrated learner's record
    also lists every beta's arm under ``betas``."""
    arms = _sweep_arms(tuned, kappo_betas)
    raw = sweep_until_interior(_arm_scorer(problem, arms, spec, sweep_seeds, progress),
                               list(arms), lr_grid, max_extensions=max_extensions)
    sweep: dict[str, Any] = {"grid": raw["grid"], "seeds": sweep_seeds, "scores": {},
                             "grids": {}, "interior": {}, "extensions": raw["extensions"]}
    selected: dict[str, float] = {}
    betas: dict[str, float] = {}
    for x in tuned:
        mine = [a for a in arms if arms[a][0] is x]
        best = max(mine, key=lambda a: (_best_score(raw, a), -(arms[a][1] or 0.0)))
        selected[x.label] = raw["selected"][best]
        sweep["scores"][x.label] = raw["scores"][best]
        sweep["grids"][x.label] = raw["grids"][best]
        sweep["interior"][x.label] = raw["interior"][best]
        chosen_beta = arms[best][1]
        if chosen_beta is not None:  # calibrated learners: the KL strength of the pair
            betas[x.label] = chosen_beta
            sweep.setdefault("betas", {})[x.label] = [
                {"beta": arms[a][1], "lr": raw["selected"][a], "score": _best_score(raw, a),
                 "interior": raw["interior"][a], "grid": raw["grids"][a]} for a in mine]
    sweep["data_id"] = problem.data_id
    sweep["select_by"] = f"mean over k of validation {REWARD_KINDS[problem.reward].metric}@k"
    return sweep, selected, betas


def _best_score(raw: SweepRecord, arm: str) -> float:
    """An arm's best score over the rates it was trained at."""
    return max(r["score"] for r in raw["scores"][arm])


def _borrowed_rates(learners: Sequence[Learner], selected: Mapping[str, float],
                    betas: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """``selected`` and ``betas`` completed with the learners that take another's rate (A/A
    controls, ``"... @ x's rate"``): its rate, and its KL strength when calibrated."""
    selected, betas = dict(selected), dict(betas)
    for x in learners:
        source = x.control_of if x.control_of is not None else x.rate_of
        if source is not None:
            selected[x.label] = selected[source]
            if x.calibrated:
                betas[x.label] = betas[source]
    return selected, betas


def merge_settings(main: SettingResult, extra: SettingResult) -> SettingResult:
    """One setting result of two :func:`sweep_and_test` runs over disjoint learners (the
    exploratory learners' own batch after the others'): per-learner tables united, the test
    slots concatenated (main's first), shared fields (grid, data id, calibration) main's."""
    def unite(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for key, value in b.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = {**out[key], **value}
            elif key not in out:
                out[key] = value
        return out

    t, u = main["test"], extra["test"]
    if t["curve_steps"] != u["curve_steps"] or t["data_id"] != u["data_id"]:
        raise ValueError("merge_settings: the two runs used different data or curve steps")
    test = dict(t)
    test["slots"] = [*t["slots"], *u["slots"]]
    for key in ("start", "end", "allocation"):
        test[key] = {m: [*t[key][m], *u[key][m]] for m in t[key]}
    test["curve_pass@1"] = [*t["curve_pass@1"], *u["curve_pass@1"]]
    return {**main, "sweep": unite(main["sweep"], extra["sweep"]),
            "selected": {**main["selected"], **extra["selected"]},
            "beta": {**main["beta"], **extra["beta"]}, "test": test}
