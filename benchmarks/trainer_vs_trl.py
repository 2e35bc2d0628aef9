"""Completions per second of one RL step (generate + score + update): bestk vs TRL GRPOTrainer.

Same tiny model (the default Qwen2 of ``bestk train``, ~0.86 M parameters, char tokenizer),
same prompts (the ``strings`` reverse task), 32 prompts x N = 8 completions per step, at most
16 new tokens (stop at EOS), temperature 1, same reward (positional), one optimizer step per
generation batch, CPU, the same number of torch threads. Each trainer runs ``--warmup`` steps
that are not timed, then ``--steps`` timed steps; we report the median step time.

    python benchmarks/trainer_vs_trl.py [--steps 5] [--threads 1]

TRL settings that would otherwise make it slower for reasons unrelated to the loop are turned
off (gradient checkpointing, logging, saving). Generation in TRL uses ``model.generate``;
bestk uses its own KV-cache sampling loop (``bestk.train.rollout.sample``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

PROMPTS = 32
N = 8
MAX_NEW = 16


def _bestk_times(model_dir: Path, steps: int, warmup: int, out: Path) -> list[float]:
    from bestk.train.config import TrainConfig, apply_overrides
    from bestk.train.loop import Trainer

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


def _trl_times(model_dir: Path, steps: int, warmup: int, out: Path) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
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
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.train()
    durations = [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]
    return durations[warmup:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from bestk.tasks import load_task
    from bestk.train.config import ModelConfig
    from bestk.train.policy import count_parameters, load_policy

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
