"""Pilot a language testbed's design on the validation split before running its grid.

    python benchmarks/language_pilot.py --testbed language-permute-kappo --method "apo(k=1)" \\
        --lr 1e-4 --lr 3e-4 --set max_steps=320 --set rollout.prompts_per_step=128 \\
        --set kappo.beta=0.3 --workers 2

Each (method, rate, seed) runs as one rate of ``make_results.py``'s learning-rate sweep runs
it (:func:`bestk.compare.validation_runs`: the testbed's configuration plus the ``--set``
overrides, the last 256 training prompts held out as the validation split, sweep seeds, one SFT
policy and reference bank per seed), with held-out validation evaluations at four points of
RL, so the record shows whether and when a design trains. The test prompts are never used.

Every finished run is merged into ``docs/results/data/pilots/<testbed>.json`` (atomically,
keyed by method, overrides, rate and seed; the commit that ran it recorded), so pilots from
several sessions accumulate there and the design a testbed's ``TestbedSpec`` cites can be
checked against them. Runs go to ``runs/pilots/<testbed>/`` (not committed) and resume.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

import results_specs as specs  # the testbeds (a sibling module: this folder is on sys.path)
from bestk.compare import KappoAuto, method_slug, validation_runs
from bestk.lab.common.io import write_text_atomic
from bestk.train.config import TrainConfig
from bestk.train.config.io import apply_overrides
from bestk.train.run.directory import read_metrics

ROOT = Path(__file__).resolve().parents[1]
#: The validation metrics a record keeps of each evaluation.
KEEP_KS = (1, 2, 4, 8, 16)


def _eval_points(max_steps: int) -> int:
    """``eval.every`` that gives evaluations at a quarter, half, three quarters and the end."""
    return max(1, max_steps // 4)


def _metrics(rec: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in rec.items()
            if k.split("@")[0] in ("pass", "best") and "_" not in k
            and k.split("@")[-1].isdigit() and int(k.split("@")[-1]) in KEEP_KS}


def pilot(testbed: str, labels: list[str], lrs: list[float], *, seeds: int, sets: list[str],
          runs: Path, record: Path, workers: int = 1, fast: bool = False) -> list[dict]:
    """Run the pilots and merge their records into ``record``; returns the new records."""
    spec = specs.testbed_spec(testbed, fast)
    methods, _ = specs.grid_methods(testbed, spec)
    by_label = {m.label: m for m in methods}
    unknown = [lb for lb in labels if lb not in by_label]
    if unknown:
        raise ValueError(f"method(s) {unknown} are not in {testbed}; valid: {list(by_label)}")
    if not lrs:
        raise ValueError("give at least one --lr")
    overrides = [*spec["overrides"], *sets]
    probe = TrainConfig()
    apply_overrides(probe, overrides)  # a bad --set fails here, before any run
    if not any(s.startswith("eval.every=") for s in sets):
        overrides.append(f"eval.every={_eval_points(probe.max_steps)}")
    kp = spec.get("kappo_calibration")
    chosen = [by_label[lb] for lb in labels]
    out = runs / testbed
    commit = specs.git_commit(ROOT)
    new: list[dict] = []
    for lr in lrs:
        res = validation_runs(chosen, lr=lr, out=out, seeds=seeds, overrides=overrides,
                              val_prompts=spec["val_prompts"],
                              kappo=None if kp is None else KappoAuto(**kp), workers=workers,
                              progress=sys.stdout.isatty())
        for m in chosen:
            for seed, r in res[m.label].items():
                run_dir = out / f"lr{lr:g}" / method_slug(m.label) / seed
                evals = [e for e in read_metrics(run_dir / "metrics.jsonl")
                         if e["phase"] == "eval"]
                new.append({
                    "method": m.label, "overrides": sets, "lr": lr, "seed": seed,
                    "start": _metrics(r["start"]), "end": _metrics(r["end"]),
                    "trajectory": [{"step": int(e["step"]), **_metrics(e)} for e in evals],
                    "wall_seconds": float(r["run"]["wall_seconds"]), "commit": commit})
    merge_records(record, testbed, new, fast=fast)
    return new


def _key(r: dict[str, Any]) -> str:
    return json.dumps([r["method"], r["overrides"], r["lr"], r["seed"]])


def merge_records(path: Path, testbed: str, new: list[dict], *, fast: bool = False) -> None:
    """Add ``new`` to the record file (a record with the same key is replaced)."""
    doc: dict[str, Any] = {
        "testbed": testbed,
        "what": "validation-split pilots of this testbed's design (benchmarks/"
                "language_pilot.py): start, trajectory and end of validation pass@k / best@k "
                "per run; they choose a design, they judge no claim",
        "fast": fast, "runs": []}
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("testbed") != testbed:
            raise ValueError(f"{path} records testbed {doc.get('testbed')!r}, not {testbed!r}")
    runs = {_key(r): r for r in doc["runs"]}
    runs.update({_key(r): r for r in new})
    doc["runs"] = sorted(runs.values(), key=lambda r: (r["method"], json.dumps(r["overrides"]),
                                                       r["lr"], r["seed"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=1) + "\n")


def table(records: list[dict]) -> str:
    lines = ["| method | overrides | lr | seed | pass@1 start -> end | trajectory (pass@1) |",
             "|---|---|---|---|---|---|"]
    for r in records:
        traj = ", ".join(f"{t['step']}: {t.get('pass@1', float('nan')):.3f}"
                         for t in r["trajectory"])
        lines.append(f"| {r['method']} | {' '.join(r['overrides']) or '-'} | {r['lr']:g} | "
                     f"{r['seed']} | {r['start'].get('pass@1', float('nan')):.3f} -> "
                     f"{r['end'].get('pass@1', float('nan')):.3f} | {traj} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testbed", required=True, choices=[*specs.LANGUAGE, *specs.KAPPO_LANGUAGE])
    ap.add_argument("--method", action="append", required=True,
                    help="a method label of the testbed (repeatable)")
    ap.add_argument("--lr", action="append", type=float, required=True,
                    help="learning rate (repeatable)")
    ap.add_argument("--seeds", type=int, default=1, help="sweep seeds per (method, rate)")
    ap.add_argument("--set", action="append", default=[], dest="sets",
                    help="config override on top of the testbed's, e.g. max_steps=320")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "pilots")
    ap.add_argument("--record", type=Path, default=None,
                    help="record file (default docs/results/data/pilots/<testbed>.json)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--fast", action="store_true", help="the testbed's seconds-long spec")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    record = args.record or ROOT / "docs" / "results" / "data" / "pilots" / f"{args.testbed}.json"
    t0 = time.time()
    try:
        new = pilot(args.testbed, args.method, args.lr, seeds=args.seeds, sets=args.sets,
                    runs=args.runs, record=record, workers=args.workers, fast=args.fast)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(new))
    print(f"{len(new)} run(s) in {time.time() - t0:.0f} s; recorded in {record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
