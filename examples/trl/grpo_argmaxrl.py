"""TRL GRPO with a bestk estimator: swap `GRPOTrainer` for `BestkGRPOTrainer`, pick `estimator`.

Runs as is on a CPU in about a minute: by default it builds a tiny Qwen2 and a character
tokenizer locally (nothing is downloaded) and trains on small additions ``"a+b="`` with a
graded reward, ``1 - |prediction - answer| / 10`` (0 when no number), the kind of reward
ArgMaxRL's best@k objective is made for. Point ``--model`` at any Hugging Face causal-LM
directory for a real run.

    python examples/trl/grpo_argmaxrl.py                                  # argmaxrl
    python examples/trl/grpo_argmaxrl.py --estimator softmax_grpo --option tau=0.1
    python examples/trl/grpo_argmaxrl.py --estimator pkpo --option k=4
    python examples/trl/grpo_argmaxrl.py --model /path/to/Qwen2.5-0.5B-Instruct --max-steps 200
"""

from __future__ import annotations

import argparse
import json
import random
import re

import torch

ALPHABET = "0123456789+= "


def tiny_policy(seed: int = 0):
    """A tiny Qwen2 + a character tokenizer built with `tokenizers` (no download)."""
    from bestk.train.config import ModelConfig
    from bestk.train.model.policy import build_char_tokenizer, build_tiny_model

    tok = build_char_tokenizer(ALPHABET)
    cfg = ModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, max_positions=64)
    torch.manual_seed(seed)
    return build_tiny_model(cfg, tok, seed=seed), tok


def additions(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"{a}+{b}=", "answer": a + b, "prompt_id": i})
    return rows


def closeness(completions, answer, **_):
    """Graded reward in [0, 1]: 1 - |first number - answer| / 10, 0 without a number."""
    out = []
    for text, ans in zip(completions, answer, strict=True):
        m = re.search(r"\d+", text)
        out.append(0.0 if m is None else max(0.0, 1.0 - abs(int(m.group()) - ans) / 10))
    return out


def parse_option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"error: --option wants key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--estimator", default="argmaxrl", help="a bestk estimator name")
    ap.add_argument("--option", action="append", default=[], help="estimator option key=value")
    ap.add_argument("--model", default=None, help="HF causal-LM directory (default: tiny)")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--out", default="runs/trl_bestk")
    args = ap.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from bestk.integrations.trl import BestkGRPOTrainer

    if args.model is None:
        model, tok = tiny_policy()
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model)
        tok = AutoTokenizer.from_pretrained(args.model)
    config = GRPOConfig(
        output_dir=args.out,
        num_generations=args.num_generations,
        per_device_train_batch_size=4 * args.num_generations,  # 4 prompts per step
        max_completion_length=4,
        max_steps=args.max_steps,
        learning_rate=3e-4 if args.model is None else 1e-6,
        beta=0.0,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
    )
    trainer = BestkGRPOTrainer(
        model=model,
        reward_funcs=closeness,
        args=config,
        train_dataset=Dataset.from_list(additions(256)),
        processing_class=tok,
        estimator=args.estimator,
        estimator_options=dict(parse_option(o) for o in args.option),
    )
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"{args.estimator}: mean reward per logging window {[round(r, 3) for r in rewards]}")


if __name__ == "__main__":
    main()
