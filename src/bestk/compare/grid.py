"""The grid of a comparison: test runs of every method and seed, and the learning-rate sweeps
that precede them (:func:`run_compare`, :func:`validation_runs`); see :mod:`bestk.compare`.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bestk._atomic import write_text_atomic
from bestk._optional import require
from bestk._seeds import COMPARE_SEEDS, CONTROL_SAMPLING, MAX_GRID_SEEDS, SWEEP_SEEDS
from bestk.compare.directory import CompareDirectory, grid_record
from bestk.compare.jobs import (
    RunResult,
    SeedResult,
    bank_job,
    execute,
    rl_job,
    sft_job,
    stop_on_signals,
)
from bestk.compare.keys import (
    bank_key,
    config_key,
    fingerprint,
    sft_key,
    weights_digest,
)
from bestk.compare.methods import (
    KappoAuto,
    Method,
    base_config,
    make_methods,
    method_slug,
    run_config,
)
from bestk.compare.summary import summarize, write_summary
from bestk.estimators import estimator_info
from bestk.lr_sweep import fixed_rate, sweep_until_interior
from bestk.train.config import INT64_MAX, TrainConfig
from bestk.train.config.io import config_to_dict
from bestk.train.steps import check_run, samples_bank
from bestk.train.validation import resolve_defaults

__all__ = ["run_compare", "validation_runs", "Method", "KappoAuto", "summarize",
           "write_summary", "method_slug", "sweep_score"]


























# ---------------------------------------------------------------------------------------------
# jobs (module-level functions: they run in worker processes)




















# ---------------------------------------------------------------------------------------------
# the grid


def _checked_method(m: Method, kappo: KappoAuto | None) -> Method:
    """``m`` as a run that :func:`~bestk.train.steps.check_run` can check before any work.
    Its ``calibration: auto`` file is made later, from the seed's SFT weights, on every
    training prompt with ``kappo``'s kind: checked as the in-run calibration of that kind on
    every training prompt, which the trainer checks the same way."""
    if m.options.get("calibration") != "auto":
        return m
    if kappo is None:
        raise ValueError(f"method {m.label!r} has calibration 'auto' but no KAPPO calibration "
                         "was configured")
    options = {k: v for k, v in m.options.items() if k != "calibration"}
    overrides = (*m.overrides, f"kappo.kind={kappo.kind}", "kappo.bank_prompts=null")
    return Method(m.label, m.estimator, options, overrides, m.control_of)


def check_runs(methods: Sequence[Method], base: TrainConfig, seeds: Sequence[int], out: Path,
               kappo: KappoAuto | None = None, lrs: Sequence[float | None] = (None,)) -> None:
    """Check every run of a grid -- each method, seed and learning rate of ``lrs`` (``None``:
    the config's) -- as its trainer will (:func:`~bestk.train.steps.check_run`: config
    values, task, KAPPO plan, estimator options and reward domain, prompt pool), before any
    work: the first problem is a one-line ``ValueError`` naming the method. Each seed's task
    is loaded once (the methods share it: their overrides may not change it)."""
    for i, sid in enumerate(seeds):
        task = None
        for m in methods:
            for lr in lrs:
                cfg = run_config(base, _checked_method(m, kappo), i, sid,
                                 out / method_slug(m.label) / f"seed{i}", lr)
                try:
                    task = check_run(cfg, task=task).task  # the seed's task, loaded once
                except ValueError as e:
                    raise ValueError(f"method {m.label!r}: {e}") from None


def sweep_score(end: dict[str, float], n: int) -> float:
    """Mean over k = 1, 2, 4, ... <= n of pass@k (the learning-rate selection score)."""
    ks = [k for k in (2**i for i in range(20)) if k <= n]
    return float(np.mean([end[f"pass@{k}"] for k in ks]))


def _grid(methods: list[Method], base: TrainConfig, seeds: Sequence[int], out: Path,
          lrs: dict[str, float] | None, kappo: KappoAuto | None, workers: int,
          progress: bool, what: str, shared: Path | None = None,
          share_bank: bool = True, isolate: bool = False) -> dict[str, dict[str, RunResult]]:
    """SFT (and KAPPO calibration) per seed under ``shared`` (default ``out``), the seeds'
    shared reference banks, then every (method, seed) run under ``out``, runs that start alike
    sharing their step-0 evaluation under ``shared/_start`` (``eval.shared_start``); returns
    ``{label: {"seedS": result}}``."""
    shared = out if shared is None else shared
    sft_dir = shared / "_sft"
    sft_jobs, runs = [], []
    banks: dict[str, list[Any]] = {}  # bank dir -> [job config, sft path, key, completions]
    needs_cal = kappo is not None and any(
        estimator_info(m.estimator).calibrated and m.options.get("calibration") == "auto"
        for m in methods)
    sft_steps = resolve_defaults(base).sft.steps  # null: 100 for the tiny model, 0 for a path
    for i, sid in enumerate(seeds):
        sft_path = None
        cal_path = None
        if needs_cal:
            cal_path = str(shared / "_calibration" / f"seed{i}.json")
        if sft_steps > 0 or needs_cal:
            probe = copy.deepcopy(base)
            probe.seed = sid
            probe.out = str(sft_dir / f"work{i}")
            sft_path = str(sft_dir / f"seed{i}.pt")
            sft_jobs.append((sft_job, config_to_dict(resolve_defaults(probe)), sft_path,
                             None if kappo is None or not needs_cal else {
                                 "k": kappo.k, "beta": kappo.beta, "bank_n": kappo.bank_n,
                                 "kind": kappo.kind}, cal_path))
            if sft_steps == 0:
                sft_path = None
        for m in methods:
            mm = m
            if m.options.get("calibration") == "auto":
                if cal_path is None:
                    raise ValueError(f"method {m.label!r} has calibration 'auto' but no KAPPO "
                                     "calibration was configured")
                mm = Method(m.label, m.estimator, {**m.options, "calibration": cal_path},
                            m.overrides, m.control_of)
            cfg = run_config(base, mm, i, sid, out / method_slug(m.label) / f"seed{i}",
                              None if lrs is None else lrs[m.label])
            samples, completions = samples_bank(cfg)
            if share_bank and samples and cfg.kappo.bank is None:
                bkey = bank_key(cfg)
                bdir = str(shared / "_bank" / f"seed{i}-{bkey}")
                job = banks.setdefault(bdir, [cfg, sft_path, bkey, completions])
                if completions and not job[3]:  # sample the completions for the dpo runs
                    banks[bdir] = [cfg, sft_path, bkey, True]
                cfg = copy.deepcopy(cfg)
                cfg.kappo.bank = bdir
            key = fingerprint({"config": config_key(cfg), "sft": sft_key(cfg)})
            if cfg.eval.shared_start is None:  # outside the key: it changes no result
                cfg = copy.deepcopy(cfg)
                cfg.eval.shared_start = str(shared / "_start")
            runs.append((i, m.label, cfg, sft_path, key))
    execute(sft_jobs, workers, progress, f"{what}: SFT")
    # what was made from a seed's SFT weights is keyed by their digest too (weights_digest)
    digests = {p: weights_digest(p) for p in {sft for *_, sft, _ in runs} if p is not None}

    def with_weights(key: str, sft: str | None) -> str:
        return key if sft is None else fingerprint({"key": key, "weights": digests[sft]})

    execute([(bank_job, config_to_dict(c), sft, bdir, with_weights(bkey, sft), comp)
              for bdir, (c, sft, bkey, comp) in banks.items()], workers, progress,
             f"{what}: KAPPO banks")
    results = execute([(rl_job, config_to_dict(cfg), sft, label, with_weights(key, sft),
                         None if sft is None else digests[sft])
                        for _, label, cfg, sft, key in runs], workers, progress, f"{what}: RL",
                       isolate=isolate)
    grid: dict[str, dict[str, RunResult]] = {m.label: {} for m in methods}
    for (i, label, *_), res in zip(runs, results, strict=True):
        grid[label][f"seed{i}"] = res
    return grid


def run_compare(
    estimators: Sequence[str | Method],
    *,
    seeds: int = 3,
    out: str | Path = "runs/compare",
    config: Path | None = None,
    max_steps: int | None = None,
    overrides: list[str] | None = None,
    progress: bool = True,
    estimator_options: dict[str, dict[str, object]] | None = None,
    controls: Sequence[str] = (),
    workers: int = 1,
    lr_sweep: Sequence[float] | None = None,
    sweep_seeds: int = 2,
    val_prompts: int = 256,
    kappo: KappoAuto | None = None,
    resume: bool = True,
    share_bank: bool = True,
    max_extensions: int = 3,
    select_by: str | None = None,
    common_lr_from: str | None = None,
    isolate: bool = False,
    also: Sequence[str] = (),
) -> str:
    """Run the matched grid (module docstring); return the markdown table (also written to
    ``compare.md``).

    ``estimators`` are estimator names (each its own method) or :class:`Method` objects;
    ``estimator_options`` maps a label to options, e.g. ``{"kappo_grpo": {"calibration":
    "cal/seed{seed}.json"}}``; ``controls`` adds an A/A control of each named method;
    ``share_bank`` samples one KAPPO reference bank per seed for the runs that calibrate
    in-run (module docstring; ``False``: each run samples its own, with the same result).
    ``select_by`` names the validation metric the sweep maximises (e.g. ``"pass@1"``;
    default: the mean over k of pass@k); ``common_lr_from`` sweeps only that method and runs
    every method at its chosen rate (one rate for all, as when a paper compares its variants
    at one rate); ``isolate`` runs every test run in a fresh process (one worker too: memory
    a run leaves behind, e.g. a vLLM engine's, goes back to the system when it ends).

    ``out`` is a :class:`~bestk.compare.directory.CompareDirectory` (``also``: names the caller
    keeps there, folders ending in ``/``; ``resume=False`` keeps the earlier grid aside).
    """
    if not estimators:
        raise ValueError("--estimators is empty")
    _check_seed_counts(seeds, sweep_seeds if lr_sweep else None, workers, max_extensions)
    require("scipy.stats", extra="lab")  # the summary's intervals: before the grid, not after
    methods = make_methods(estimators, estimator_options, controls)
    out = Path(out)
    base = base_config(config, max_steps, list(overrides or []))
    _check_base(base, methods)
    _check_top_seed(base, seeds, sweep_seeds if lr_sweep else 0, bool(controls))
    test_seeds = [COMPARE_SEEDS.seed(base.seed, index=s) for s in range(seeds)]
    swept = _swept(methods, lr_sweep, common_lr_from, select_by, base.eval.n)
    # every run of the grid checked as its trainer will check it, before any work starts --
    # whatever the directory holds (finished runs are checked as if they were to run)
    resolve_defaults(base)  # the grid's SFT reads it
    check_runs(methods, base, test_seeds, out, kappo)
    if lr_sweep:
        check_runs(swept, _validation_config(base, val_prompts),
                   [SWEEP_SEEDS.seed(base.seed, index=j) for j in range(sweep_seeds)],
                   out / "sweep", kappo, [float(v) for v in lr_sweep])
    t0 = time.time()
    record = grid_record(base, [_method_record(m) for m in methods])
    with CompareDirectory(out, also) as directory, stop_on_signals():
        kept = directory.open(record, resume=resume)  # Ctrl-C / SIGTERM from here: every
        if kept is not None and progress:             # job stops at its next safe point
            print(f"note: the earlier grid's files are kept in {kept}", flush=True)
        grid, lrs = _run_grid(methods, base, test_seeds, out, kappo, workers, progress,
                              share_bank, isolate, lr_sweep, sweep_seeds, val_prompts,
                              max_extensions, select_by, common_lr_from)
        results: dict[str, dict[str, SeedResult]] = {
            label: {s: {"start": r["start"], "end": r["end"], "run": r["run"]}
                    for s, r in runs.items()} for label, runs in grid.items()}
        write_text_atomic(out / "results.json", json.dumps(results, indent=1))
        write_text_atomic(out / "compare.json", json.dumps({
            **directory.record, "seeds": seeds, "lr": lrs, "wall_seconds": time.time() - t0},
            indent=1, default=str))
        return write_summary(out, results, base.eval.n)


def _swept(methods: list[Method], lr_sweep: Sequence[float] | None,
           common_lr_from: str | None, select_by: str | None, n: int) -> list[Method]:
    """The methods a sweep tunes: all, or only ``common_lr_from`` (which must be one). A
    ``select_by`` of the form ``pass@k`` / ``best@k`` needs ``k <= eval.n`` (``n``): checked
    here, before the sweep's runs (other names are checked against the validation record)."""
    if not lr_sweep and (common_lr_from is not None or select_by is not None):
        raise ValueError("common_lr_from / select_by need an lr_sweep")
    at_k = re.fullmatch(r"(pass|best)@([0-9]+)", select_by or "")
    if at_k is not None and not 1 <= int(at_k[2]) <= n:
        raise ValueError(f"select_by {select_by!r}: the validation evaluation draws eval.n={n} "
                         f"samples per prompt, so {at_k[1]}@k exists for k = 1..{n}")
    if common_lr_from is None:
        return methods
    swept = [m for m in methods if m.label == common_lr_from]
    if not swept:
        raise ValueError(f"common_lr_from {common_lr_from!r} is not one of the methods "
                         f"{[m.label for m in methods]}")
    return swept


def _check_base(base: TrainConfig, methods: Sequence[Method]) -> None:
    """What the base config of a comparison may not hold: an ``out`` (each run goes under
    ``--out``), or ``estimator_options`` of an estimator not compared (they would be dropped:
    a method's options come from ``--set-for``)."""
    if base.out is not None:
        raise ValueError(f"the base config sets out={base.out!r}, which a comparison does not "
                         "use: it places each run under --out (OUT/<method>/seed<i>); drop "
                         "out and give --out")
    if base.estimator_options and base.estimator not in {m.estimator for m in methods}:
        raise ValueError(
            f"estimator_options {base.estimator_options} of the base config are options of "
            f"its estimator {base.estimator!r}, which is not compared (methods: "
            f"{', '.join(m.label for m in methods)}); give a method its options with "
            "--set-for LABEL:estimator_options.KEY=VALUE")


def _check_seed_counts(seeds: int, sweep_seeds: int | None, workers: int = 1,
                       max_extensions: int = 0) -> None:
    """``--seeds`` (and ``--sweep-seeds``, when a sweep runs) in ``[1, MAX_GRID_SEEDS]``: a
    count past it would make and check that many runs before any work (``--seeds 10**20``
    filled the memory), and test seeds past it are the sweep's; ``--workers`` >= 1,
    ``--max-extensions`` >= 0."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if max_extensions < 0:
        raise ValueError(f"--max-extensions must be >= 0, got {max_extensions}")
    for flag, n in (("--seeds", seeds), ("--sweep-seeds", sweep_seeds)):
        if n is not None and not 1 <= n <= MAX_GRID_SEEDS:
            why = f" (the sweep's seeds start at seed + {MAX_GRID_SEEDS})" * (flag == "--seeds")
            raise ValueError(f"{flag} must be an integer in [1, {MAX_GRID_SEEDS}]{why}, got {n}")


def _check_top_seed(base: TrainConfig, seeds: int, sweep_seeds: int, controls: bool) -> None:
    """The largest seed the grid derives from ``base.seed`` fits the seeds' range: a one-line
    error naming ``seed`` and the flag, not a config error about a seed the user never gave."""
    top = max(COMPARE_SEEDS.seed(base.seed, index=seeds - 1),
              SWEEP_SEEDS.seed(base.seed, index=sweep_seeds - 1) if sweep_seeds else 0)
    if controls:
        top = max(top, CONTROL_SAMPLING.seed(COMPARE_SEEDS.seed(base.seed, index=seeds - 1)))
    if top > INT64_MAX:
        raise ValueError(f"seed={base.seed} is too large for this grid: its runs' seeds reach "
                         f"{top}, past 2**63 - 1 (test seeds are seed + 0..{seeds - 1}, sweep "
                         "seeds seed + 1000 + j, A/A controls sample with seed + 100003); "
                         "lower seed")


def _method_record(m: Method) -> dict[str, object]:
    return {"label": m.label, "estimator": m.estimator, "options": m.options,
            "overrides": list(m.overrides), "control_of": m.control_of}


def _run_grid(methods: list[Method], base: TrainConfig, test_seeds: list[int], out: Path,
              kappo: KappoAuto | None, workers: int, progress: bool, share_bank: bool,
              isolate: bool, lr_sweep: Sequence[float] | None, sweep_seeds: int,
              val_prompts: int, max_extensions: int, select_by: str | None,
              common_lr_from: str | None
              ) -> tuple[dict[str, dict[str, RunResult]], dict[str, float] | None]:
    """The sweep (if any) then the test runs of :func:`run_compare`: ``({label: {"seedS":
    result}}, the learning rates the sweep chose or None)``."""
    lrs = None
    if lr_sweep:
        swept = methods if common_lr_from is None else \
            [m for m in methods if m.label == common_lr_from]
        lrs = _sweep(swept, base, out, [float(v) for v in lr_sweep], sweep_seeds, val_prompts,
                     kappo, workers, progress, share_bank, max_extensions, select_by,
                     common_lr_from)
        if common_lr_from is not None:
            lrs = {m.label: lrs[common_lr_from] for m in methods}
    return _grid(methods, base, test_seeds, out, lrs, kappo, workers, progress, "test",
                 share_bank=share_bank, isolate=isolate), lrs


def _validation_config(base: TrainConfig, val_prompts: int) -> TrainConfig:
    """``base`` on the validation split: its task's last ``val_prompts`` training prompts,
    held out from training (the ``validation`` task wrapper)."""
    val = copy.deepcopy(base)
    val.task.options = {"task": base.task.name, "options": dict(base.task.options),
                        "size": int(val_prompts)}
    val.task.name = "validation"
    return val


def validation_runs(
    methods: Sequence[Method],
    *,
    lr: float,
    out: str | Path,
    seeds: int = 1,
    config: Path | None = None,
    overrides: list[str] | None = None,
    val_prompts: int = 256,
    kappo: KappoAuto | None = None,
    workers: int = 1,
    progress: bool = False,
) -> dict[str, dict[str, RunResult]]:
    """Every method at one learning rate on the validation split, exactly as one rate of
    ``run_compare``'s sweep runs it (same split, sweep seeds, shared SFT weights and banks):
    a pilot of a testbed design before its grid, which never touches the test prompts.

    Returns ``{label: {"seedS": result}}`` (each ``OUT/lr<lr>/<label>/seedS/result.json``;
    finished runs are reused, interrupted ones resumed)."""
    if not methods:
        raise ValueError("validation_runs needs at least one method")
    _check_seed_counts(seeds, None)
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    base = base_config(config, None, list(overrides or []))
    val = _validation_config(base, val_prompts)
    out = Path(out)
    sweep_seeds = [SWEEP_SEEDS.seed(base.seed, index=j) for j in range(seeds)]
    check_runs(list(methods), val, sweep_seeds, out / f"lr{lr:g}", kappo, [float(lr)])
    with CompareDirectory(out) as directory, stop_on_signals():
        directory.open(None)
        return _grid(list(methods), val, sweep_seeds, out / f"lr{lr:g}",
                     {m.label: float(lr) for m in methods}, kappo, workers, progress,
                     f"validation lr={lr:g}", shared=out)


def _sweep(methods: list[Method], base: TrainConfig, out: Path, grid: list[float],
           sweep_seeds: int, val_prompts: int, kappo: KappoAuto | None, workers: int,
           progress: bool, share_bank: bool = True,
           max_extensions: int = 3, select_by: str | None = None,
           common_lr_from: str | None = None) -> dict[str, float]:
    """Each method's learning rate from ``grid`` on the validation split, the grid extended
    past an edge until the chosen rate is interior (module docstring,
    :mod:`bestk.lr_sweep`); writes ``OUT/sweep/selection.json``."""
    if sweep_seeds < 1:
        raise ValueError(f"sweep_seeds must be >= 1, got {sweep_seeds}")
    val = _validation_config(base, val_prompts)
    tuned = [m for m in methods if m.control_of is None]
    sdir = out / "sweep"
    seeds = [SWEEP_SEEDS.seed(base.seed, index=j) for j in range(sweep_seeds)]
    by_label = {m.label: m for m in tuned}

    def score(want: Mapping[str, Sequence[float]]) -> dict[str, dict[float, float]]:
        by_rate: dict[float, list[str]] = {}
        for lb, rates in want.items():
            for lr in rates:
                by_rate.setdefault(float(lr), []).append(lb)
        got: dict[str, dict[float, float]] = {}
        for lr, labels in sorted(by_rate.items()):
            ms = [by_label[lb] for lb in labels]
            res = _grid(ms, val, seeds, sdir / f"lr{lr:g}", {m.label: lr for m in ms}, kappo,
                        workers, progress, f"sweep lr={lr:g}", shared=sdir,
                        share_bank=share_bank)
            for m in ms:
                ends = [r["end"] for r in res[m.label].values()]
                if select_by is not None and any(select_by not in e for e in ends):
                    raise ValueError(f"select_by {select_by!r} is not a validation metric; "
                                     f"valid: {sorted(ends[0])}")
                vals = [e[select_by] if select_by is not None else
                        sweep_score(e, base.eval.n) for e in ends]
                got.setdefault(m.label, {})[lr] = float(np.mean(vals))
        return got

    if len(grid) == 1:
        got = score({lb: grid for lb in by_label})  # one batch of runs, as for a longer grid
        sweep = fixed_rate(list(by_label), grid[0], {lb: got[lb][grid[0]] for lb in by_label})
    else:
        sweep = sweep_until_interior(score, list(by_label), grid,
                                     max_extensions=max_extensions)
    selected = dict(sweep["selected"])
    for m in methods:
        if m.control_of is not None:
            selected[m.label] = selected[m.control_of]
    write_text_atomic(sdir / "selection.json", json.dumps(
        {**sweep, "seeds": sweep_seeds, "val_prompts": val_prompts,
         "select_by": (f"validation {select_by}" if select_by is not None else
                       "mean over k = 1, 2, 4, ... of validation pass@k"),
         "common_lr_from": common_lr_from, "selected": selected}, indent=1))
    return selected




