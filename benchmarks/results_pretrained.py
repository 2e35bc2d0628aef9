"""The pretrained testbed's grid (``smollm2``) beyond a language grid: the shared warm start, the
KAPPO calibration made once from it, the rate check on the grid's first seed, and the grid's
status (which runs are done, what is left, an ETA).

    python benchmarks/make_results.py --testbed smollm2          # everything, resumable
    python benchmarks/make_results.py --status smollm2           # the status, from the disk

The order, every step resumable and cached under ``runs/lab/smollm2/`` (results_specs.py's
``PRETRAINED`` says what each step runs; docs/results/smollm2-preregistration.md why):

1. :func:`warm_start`: one ``bestk train`` run of GRPO from the base model (``_warm/``); its
   merged ``final/`` is every grid run's ``model.path``, with fresh LoRA on top.
2. :func:`shared_calibration`: KAPPO's calibration of the warm start, once
   (``_calibration/shared.json``), given to every seed's @k-GRPO run as its file.
3. the grid's first seed of every method, then :func:`rate_check` (each method must move its
   held-out pass@1 or pass@16 from the shared start by ``min_move``; recorded in
   ``docs/results/data/pilots/<name>-rate-check.json``; the grid stops where one does not).
4. the power pilot's seeds, the plan, the grid's seeds (``make_results.power_pilot``), one
   seed at a time, :func:`write_status` after each.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bestk.compare import Method, method_slug
from bestk.compare.jobs import calibration_job, execute
from bestk.compare.methods import base_config
from bestk.lab.io import write_json_atomic
from bestk.train.config_io import config_to_dict
from bestk.train.run.directory import finished_step, read_metrics
from bestk.train.validation import resolve_defaults

#: The option value of a method whose calibration is the grid's shared file.
SHARED = "shared"
RATE_FORMAT = "bestk.results.rate-check"
#: The held-out metrics a warm start's record keeps per evaluation.
_WARM_KEEP = ("pass@1", "pass@16", "pass@32", "entropy", "distinct", "distinct_correct",
              "response_len")


def _value(overrides: list[str], key: str) -> str | None:
    """The last ``key=value`` override's value (later overrides win), else ``None``."""
    vals = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return vals[-1] if vals else None


def warm_start(name: str, runs: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume, or find finished) the grid's warm start in ``runs/<name>/_warm``
    with ``bestk train`` in a child process (its memory is freed when it ends) and return its
    record: the ``final/`` path, its overrides, its held-out evaluations by step and its
    training curve."""
    out = runs / name / "_warm"
    sets = list(spec["warm_start"]["overrides"])
    steps = int(_value(sets, "max_steps") or 0)
    if finished_step(out) != steps or not (out / "final" / "config.json").exists():
        print(f"{name}: warm start ({steps} GRPO steps) in {out}", flush=True)
        cmd = [sys.executable, "-m", "bestk", "train", "--out", str(out)]
        subprocess.run(cmd + [x for o in sets for x in ("--set", o)], check=True)
    return warm_record(name, runs, spec)


def warm_record(name: str, runs: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """The record of the finished warm start in ``runs/<name>/_warm`` (:func:`warm_start`),
    read without training; ``SystemExit`` when it is not finished."""
    out = runs / name / "_warm"
    sets = list(spec["warm_start"]["overrides"])
    steps = int(_value(sets, "max_steps") or 0)
    if finished_step(out) != steps or not (out / "final" / "config.json").exists():
        raise SystemExit(f"error: the {name} warm start in {out} is not finished "
                         f"(run --testbed {name})")
    rows = read_metrics(out / "metrics.jsonl")
    evals = {str(r["step"]): {k: r[k] for k in _WARM_KEEP if k in r}
             for r in rows if r.get("phase") == "eval"}
    train = [r for r in rows if r.get("phase") == "train"]
    return {"path": str(out / "final"),
            "overrides": [o for o in sets if not o.startswith("model.path=")],
            "steps": steps, "evaluations": evals,
            "train_curve": {k: [r[k] for r in train] for k in ("success_rate",
                                                              "group_any_success", "entropy")
                            if train and all(k in r for r in train)},
            "step_seconds_median": statistics.median(
                r["time/generate_s"] + r["time/update_s"] + r.get("time/sync_s", 0.0)
                for r in train) if train and all("time/update_s" in r for r in train) else None}


def grid_overrides(spec: dict[str, Any], warm: dict[str, Any]) -> list[str]:
    """The grid runs' overrides: the spec's, on the warm start's weights."""
    return [f"model.path={warm['path']}", *spec["overrides"]]


def shared_calibration(name: str, runs: Path, spec: dict[str, Any],
                       overrides: list[str]) -> str:
    """KAPPO's calibration of the warm start (``overrides``' model), made once into
    ``runs/<name>/_calibration/shared.json`` (:func:`bestk.compare.jobs.calibration_job`:
    ``bank_n`` samples of every training prompt from the run's rollout engine, with the
    grid's rollout settings and seed 0, in a process of its own); returns its path."""
    path = runs / name / "_calibration" / "shared.json"
    if not path.exists():
        kp = spec["kappo_calibration"]
        print(f"{name}: KAPPO calibration of the warm start ({kp['bank_n']} samples of every "
              f"training prompt) -> {path}", flush=True)
        cfg = resolve_defaults(base_config(None, None, [*overrides, "estimator=grpo",
                                                        "seed=0"]))
        fields = {k: kp[k] for k in ("k", "beta", "bank_n", "kind")}
        execute([(calibration_job, config_to_dict(cfg), fields, str(path))], 1, False,
                "KAPPO calibration", isolate=True)  # vLLM's memory freed when it ends
    return str(path)


def with_calibration(methods: list[Method], path: str) -> list[Method]:
    """``methods`` with the shared calibration file in place of the option ``"shared"``."""
    return [Method(m.label, m.estimator,
                   {**m.options, "calibration": path}
                   if m.options.get("calibration") == SHARED else dict(m.options),
                   m.overrides, m.control_of) for m in methods]


def rate_check(starts: dict[str, dict[str, float]], ends: dict[str, dict[str, float]],
               metrics: list[str], min_move: float) -> dict[str, Any]:
    """Whether each method trains at the common rate, judged on one seed: its largest
    ``|end - start|`` over ``metrics`` (held-out pass@1, pass@16) is at least ``min_move``.
    ``starts`` / ``ends``: ``{method: {metric: value}}``. Returns ``{"methods": {label:
    {"moves": {metric: end - start}, "largest": ..., "trains": bool}}, "passed": all of
    them train, "failed": [labels]}``; ``ValueError`` on a method or metric missing."""
    if not metrics or not min_move > 0:
        raise ValueError(f"rate_check needs metrics and min_move > 0, got {metrics}, "
                         f"{min_move}")
    out: dict[str, Any] = {}
    for label in sorted(ends):
        if label not in starts:
            raise ValueError(f"rate_check: {label!r} has an end but no start evaluation")
        missing = [k for k in metrics if k not in ends[label] or k not in starts[label]]
        if missing:
            raise ValueError(f"rate_check: {label!r} lacks {missing}")
        moves = {k: float(ends[label][k] - starts[label][k]) for k in metrics}
        largest = max(abs(v) for v in moves.values())
        out[label] = {"moves": moves, "largest": largest, "trains": bool(largest >= min_move)}
    failed = [lb for lb, r in out.items() if not r["trains"]]
    return {"methods": out, "passed": not failed, "failed": failed,
            "rule": f"a method trains at the common rate when its held-out "
                    f"{' or '.join(metrics)} moves by at least {min_move:g} (either "
                    "direction) from the shared start on the grid's first seed"}


def rate_check_file(name: str, docs: Path) -> Path:
    """Where the rate check of grid ``name`` is recorded (committed)."""
    return docs / "results" / "data" / "pilots" / f"{name}-rate-check.json"


def judge_first_seed(name: str, out: Path, spec: dict[str, Any], labels: list[str],
                     docs: Path, commit: str) -> dict[str, Any]:
    """:func:`rate_check` on seed 0 of every method of ``out`` (their ``result.json``),
    recorded in :func:`rate_check_file`; returns the record."""
    rc = spec["rate_check"]
    starts, ends = {}, {}
    for lb in labels:
        res = json.loads((out / method_slug(lb) / "seed0" / "result.json").read_text())
        starts[lb], ends[lb] = res["start"], res["end"]
    rec = {"format": RATE_FORMAT, "version": 1, "testbed": name, "commit": commit,
           "lr": _value(spec["overrides"], "optim.lr"), "seed": 0,
           **rate_check(starts, ends, rc["metrics"], rc["min_move"])}
    write_json_atomic(rate_check_file(name, docs), rec)
    return rec


def status(name: str, runs: Path, labels: list[str], seeds: int) -> dict[str, Any]:
    """The grid's state from the disk: the warm start, the calibration and every (method,
    seed) run of its first ``seeds`` seeds (done: its ``result.json`` exists), with the median
    wall seconds of the finished runs and the ETA of the rest at that pace."""
    out = runs / name
    done, todo, walls = [], [], []
    for i in range(seeds):
        for lb in labels:
            p = out / method_slug(lb) / f"seed{i}" / "result.json"
            if p.exists():
                done.append(f"{lb}/seed{i}")
                walls.append(float(json.loads(p.read_text())["run"]["wall_seconds"]))
            else:
                todo.append(f"{lb}/seed{i}")
    per = statistics.median(walls) if walls else None
    return {"testbed": name, "updated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "warm_start_done": (out / "_warm" / "final" / "config.json").exists(),
            "calibration_done": (out / "_calibration" / "shared.json").exists(),
            "seeds": seeds, "done": len(done), "remaining": len(todo),
            "median_run_seconds": per,
            "eta_seconds": None if per is None else per * len(todo),
            "done_runs": done, "remaining_runs": todo}


def write_status(name: str, runs: Path, labels: list[str], seeds: int) -> dict[str, Any]:
    """:func:`status` written to ``runs/<name>/status.json`` and printed on one line."""
    st = status(name, runs, labels, seeds)
    write_json_atomic(runs / name / "status.json", st)
    eta = "unknown" if st["eta_seconds"] is None else f"{st['eta_seconds'] / 3600:.1f} h"
    print(f"{name}: {st['done']} runs done, {st['remaining']} remaining of {seeds} seeds "
          f"x {len(labels)} arms; ETA {eta} at the median run's pace", flush=True)
    return st
