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
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bestk.compare import Method, method_slug
from bestk.compare.jobs import calibration_job, execute
from bestk.compare.methods import base_config
from bestk.lab.common.io import write_json_atomic
from bestk.train.config.io import config_to_dict, last_of_each_key
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
        subprocess.run(cmd + [x for o in last_of_each_key(sets) for x in ("--set", o)],
                       check=True)
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


def unexcused_failures(rec: dict[str, Any], dropped: Collection[str],
                       waived: Collection[str]) -> list[str]:
    """The methods of a rate-check record ``rec`` (:func:`rate_check`) that failed and that no
    amendment dropped from the grid or waived: the grid stops on any of them."""
    return [lb for lb in rec["failed"] if lb not in dropped and lb not in waived]


def seed_methods(methods: list[Method], n: int, dropped: Collection[str]) -> list[Method]:
    """The methods that run the first ``n`` seeds: all of them for the first seed (the rate
    check judges every one), then those no amendment dropped."""
    return list(methods) if n == 1 else [m for m in methods if m.label not in dropped]


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


# ---------------------------------------------------------------------------------------------
# what a grid shares, carried to the next working session (a new machine starts empty)

#: The files of a pretrained grid's shared artifacts in the grid cache
#: (``benchmarks/grid_cache/<name>-shared/``, committed): the warm start's LoRA adapter (a few
#: MB; the merged model is rebuilt from the base model's file and it), its metrics and the
#: digest of its merged weights, the shared calibration and the shared start evaluation.
WARM_FILES = ("adapter_model.safetensors", "adapter_config.json")


def shared_cache_dir(name: str, cache: Path) -> Path:
    """Where grid ``name``'s shared artifacts are cached: ``cache/<name>-shared``."""
    return cache / f"{name}-shared"


def final_digest(final: Path) -> str:
    """The digest of a saved model directory's weights (its safetensors files' tensors:
    names, dtypes, shapes and bytes; :func:`bestk.train.rollout.shared_start.state_digest`)."""
    from safetensors.torch import load_file

    from bestk.train.rollout.shared_start import state_digest

    state: dict[str, Any] = {}
    for p in sorted(final.glob("*.safetensors")):
        state.update(load_file(str(p)))
    if not state:
        raise ValueError(f"{final}: no safetensors weights")
    return state_digest(state)


def save_shared(name: str, runs: Path, cache: Path) -> list[str]:
    """Copy grid ``name``'s shared artifacts from ``runs/<name>`` into
    :func:`shared_cache_dir` (what exists of them); returns the files written."""
    src, dst = runs / name, shared_cache_dir(name, cache)
    written = []
    warm = src / "_warm"
    adapter = warm / "final" / "adapter"
    step = finished_step(warm)
    if step is not None:
        if not all((adapter / f).is_file() for f in WARM_FILES):
            raise SystemExit(f"error: {warm}/final has no LoRA adapter to cache (a warm start "
                             "without LoRA is not carried between sessions)")
        (dst / "warm").mkdir(parents=True, exist_ok=True)
        for f in WARM_FILES:
            shutil.copyfile(adapter / f, dst / "warm" / f)
        shutil.copyfile(warm / "metrics.jsonl", dst / "warm" / "metrics.jsonl")
        write_json_atomic(dst / "warm" / "record.json", {
            "steps": step, "digest": final_digest(warm / "final"),
            "note": "the warm start's merged weights are rebuilt from the base model and "
                    "this adapter; the digest is the merged weights' of the run that made it"})
        written += [f"warm/{f}" for f in (*WARM_FILES, "metrics.jsonl", "record.json")]
    cal = src / "_calibration" / "shared.json"
    if cal.is_file():
        (dst / "calibration").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cal, dst / "calibration" / "shared.json")
        written.append("calibration/shared.json")
    for p in sorted((src / "_start").glob("start-*.json")):
        (dst / "start").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst / "start" / p.name)
        written.append(f"start/{p.name}")
    return written


def restore_shared(name: str, runs: Path, spec: dict[str, Any], cache: Path) -> list[str]:
    """Put grid ``name``'s cached shared artifacts (:func:`save_shared`) back under
    ``runs/<name>`` where they are missing: the calibration and start evaluations as they
    are, the warm start rebuilt from the base model and its adapter (:func:`rebuild_warm`).
    Returns what it restored."""
    src, dst = shared_cache_dir(name, cache), runs / name
    done = []
    if not src.is_dir():
        return done
    cal = src / "calibration" / "shared.json"
    if cal.is_file() and not (dst / "_calibration" / "shared.json").exists():
        (dst / "_calibration").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cal, dst / "_calibration" / "shared.json")
        done.append("calibration")
    for p in sorted((src / "start").glob("start-*.json")):
        if not (dst / "_start" / p.name).exists():
            (dst / "_start").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst / "_start" / p.name)
            done.append(f"start {p.name}")
    if (src / "warm" / "record.json").is_file() and finished_step(dst / "_warm") is None:
        rebuild_warm(name, runs, spec, src / "warm")
        done.append("warm start")
    return done


def rebuild_warm(name: str, runs: Path, spec: dict[str, Any], cached: Path) -> None:
    """The warm start's run directory from its cached adapter: the base model loaded as the
    warm start's config loads it, the adapter's weights set, ``final/`` saved merged as the
    trainer saves it, its metrics and completion marker written. The merged weights' digest
    is compared with the cached one: equal, the grid goes on from the very weights its
    earlier seeds started from; different (another CPU's float kernels), ``SystemExit``,
    since runs from two different starts are not paired."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from bestk.train.model.hf import save_final
    from bestk.train.run.directory import mark_finished
    from bestk.train.setup import load_run_policy, load_run_task

    rec = json.loads((cached / "record.json").read_text())
    out = runs / name / "_warm"
    print(f"{name}: rebuilding the warm start in {out} from {cached}", flush=True)
    cfg = resolve_defaults(base_config(None, None, [*spec["warm_start"]["overrides"],
                                                    f"out={out}"]))
    task, device = load_run_task(cfg)
    model, tokenizer = load_run_policy(cfg, task, device)
    state = load_file(str(cached / "adapter_model.safetensors"))
    dtype = next(p for n, p in model.named_parameters() if "lora_" in n).dtype
    got = set_peft_model_state_dict(model, {k: v.to(dtype) for k, v in state.items()})
    missing = list(getattr(got, "unexpected_keys", []))
    if missing:
        raise SystemExit(f"error: the cached adapter has weights the model lacks: {missing[:3]}")
    out.mkdir(parents=True, exist_ok=True)
    save_final(out, model, tokenizer)
    digest = final_digest(out / "final")
    if digest != rec["digest"]:
        raise SystemExit(f"error: the rebuilt warm start's weights (digest {digest}) differ from "
                         f"those the grid's earlier runs started from ({rec['digest']}): this "
                         "machine merges them differently; runs from it would not be paired")
    shutil.copyfile(cached / "metrics.jsonl", out / "metrics.jsonl")
    mark_finished(out, int(rec["steps"]))
