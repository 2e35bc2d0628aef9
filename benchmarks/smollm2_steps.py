"""Steps per run of the pretrained testbed: GRPO's held-out pass@1 against RL steps.

    python benchmarks/smollm2_steps.py --lr 3e-5 [--steps 80] [--every 10] [--prompts 128] \\
        [--n 16] [--run DIR] [--set KEY=VALUE ...]
    python benchmarks/smollm2_steps.py --lr 3e-5 --run DIR --collect   # record a finished run

Trains GRPO at one learning rate (seed 0) with the smollm2 grid's settings
(``results_specs.PRETRAINED["smollm2"]``: model, LoRA, task, rollouts, vLLM; ``--set`` adds or
replaces overrides) for ``--steps`` steps, evaluating the first ``--prompts`` held-out prompts
x ``--n`` samples every ``--every`` steps (``bestk train``: a killed pilot resumes when the
command is run again), then records the curve (pass@1, pass@16 and token entropy per
evaluated step; the seconds per step) and where pass@1 levels off (:func:`levels_off`) in
``--out`` (default ``docs/results/data/pilots/smollm2-steps.json``, keyed by learning rate
and the ``--set`` overrides,
with the run's overrides and the commit the command started from; ``--note`` keeps a
provenance note, e.g. the commits of a pilot resumed to more steps).

The rule (declared before the pilot's numbers were read): the run's steps are the first
evaluated step at which GRPO's pass@1 has made ``FRACTION`` (90%) of its largest gain over
step 0; it has *levelled off* only if at least ``AFTER`` (20) more steps were evaluated
after it without pass@1 exceeding that level by more than ``TOLERANCE`` (0.03, about the
standard error of pass@1 on 128 x 16 held-out samples); otherwise the record says it is
still rising and the pilot must run longer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bestk.lab.common.io import write_json_atomic
from bestk.train.config.io import last_of_each_key

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "data" / "pilots" / "smollm2-steps.json"
FRACTION = 0.9
AFTER = 20
TOLERANCE = 0.03


def levels_off(steps: list[int], pass1: list[float], *, fraction: float = FRACTION,
               after: int = AFTER, tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Where pass@1 levels off (module docstring): ``{"step", "levelled", "gain", "why"}``.
    ``step``: the first evaluated step whose gain over ``steps[0]`` is at least ``fraction``
    of the largest gain (``None`` without a gain); ``levelled``: whether ``after`` more steps
    follow it, none above its pass@1 by more than ``tolerance``. ``ValueError`` on fewer than
    two evaluations, mismatched lengths or steps that do not increase."""
    if len(steps) != len(pass1) or len(steps) < 2:
        raise ValueError(f"levels_off needs >= 2 evaluations with one pass@1 each, got "
                         f"{len(steps)} steps and {len(pass1)} values")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError(f"levels_off: the steps must increase, got {steps}")
    gains = [p - pass1[0] for p in pass1]
    top = max(gains)
    if top <= 0:
        return {"step": None, "levelled": False, "gain": top,
                "why": "pass@1 never rose above its start"}
    i = next(j for j, g in enumerate(gains) if g >= fraction * top)
    later = [(s, p) for s, p in zip(steps, pass1, strict=True) if s > steps[i]]
    span = steps[-1] - steps[i]
    if span < after:
        return {"step": steps[i], "levelled": False, "gain": top,
                "why": f"{fraction:.0%} of the gain by step {steps[i]}, but only {span} "
                       f"evaluated steps after it (< {after}): still rising, run longer"}
    over = [(s, p) for s, p in later if p > pass1[i] + tolerance]
    if over:
        return {"step": steps[i], "levelled": False, "gain": top,
                "why": f"pass@1 {over[-1][1]:.3f} at step {over[-1][0]} exceeds its level "
                       f"{pass1[i]:.3f} at step {steps[i]} by more than {tolerance}: still "
                       "rising"}
    return {"step": steps[i], "levelled": True, "gain": top,
            "why": f"{fraction:.0%} of the largest gain ({top:.3f}) by step {steps[i]}, no "
                   f"later evaluation above it by more than {tolerance} over {span} steps"}


def _specs() -> Any:
    """``benchmarks/results_specs.py`` (the grid's spec, the commit helper), imported when
    needed: it loads torch, which ``levels_off`` and ``--help`` do not need. A sibling module,
    found as every benchmark script finds one: its folder is first on ``sys.path``."""
    import results_specs

    return results_specs


def overrides(a: argparse.Namespace) -> list[str]:
    """The pilot's ``bestk train`` overrides: the grid's, with its own evaluation, steps,
    learning rate, GRPO and seed 0, then ``--set``."""
    specs = _specs()
    mine = {"eval.n": a.n, "eval.num_prompts": a.prompts, "eval.every": a.every,
            "max_steps": a.steps, "checkpoint_every": a.every, "threads": a.threads,
            "estimator": "grpo", "optim.lr": a.lr, "seed": 0, "out": a.run}
    spec = specs.PRETRAINED["smollm2"]
    grid = [o for o in spec["overrides"] if o.split("=", 1)[0] not in mine]
    return [f"model.path={specs.smollm2_gguf()}", *grid,
            *(f"{k}={v}" for k, v in mine.items()), *a.set]


def read_curve(run: Path) -> dict[str, Any]:
    """The evaluated steps of ``run/metrics.jsonl``: pass@1, pass@16, entropy per step, and
    the median seconds of a training step."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    evals = sorted({r["step"]: r for r in rows if r.get("phase") == "eval"}.values(),
                   key=lambda r: r["step"])
    train = [r for r in rows if r.get("phase") == "train"]
    secs = sorted(r["time/generate_s"] + r["time/update_s"] + r.get("time/sync_s", 0.0)
                  for r in train)
    return {"steps": [r["step"] for r in evals], "pass@1": [r["pass@1"] for r in evals],
            "pass@16": [r.get("pass@16") for r in evals],
            "entropy": [r.get("entropy") for r in evals],
            "train_steps": len(train), "median_step_s": secs[len(secs) // 2] if secs else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--run", type=Path, default=None,
                    help="the run directory (default runs/pilots/smollm2-steps-lr<LR>)")
    ap.add_argument("--set", action="append", default=[], help="one more override")
    ap.add_argument("--collect", action="store_true", help="record --run without training")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--note", default=None, help="a provenance note kept in the record")
    a = ap.parse_args(argv)
    head = _specs().git_commit()  # the commit this command starts from
    a.run = a.run or ROOT / "runs" / "pilots" / f"smollm2-steps-lr{a.lr:g}"
    sets = overrides(a)
    if not a.collect:
        cmd = [sys.executable, "-m", "bestk", "train"] + [
            x for o in last_of_each_key(sets) for x in ("--set", o)]
        subprocess.run(cmd, check=True)
    curve = read_curve(a.run)
    rule = levels_off(curve["steps"], curve["pass@1"])
    record = json.loads(a.out.read_text()) if a.out.exists() else {}
    key = " ".join([f"grpo lr {a.lr:g}", *a.set])  # a variant (--set) has its own entry
    record[key] = {
        "overrides": [o for o in sets if not o.startswith(("model.path=", "out="))],
        "curve": curve, "levels_off": rule, "commit": head,
        "rule": {"fraction": FRACTION, "after": AFTER, "tolerance": TOLERANCE},
        "command": "python benchmarks/smollm2_steps.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        **({"note": a.note} if a.note else {})}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(a.out, record)
    print(f"{key}: pass@1 " + ", ".join(
        f"{s}: {p:.3f}" for s, p in zip(curve["steps"], curve["pass@1"], strict=True))
        + f"; {rule['why']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
