"""KAPPO in TRL, end to end: reference bank -> calibration -> @k-GRPO or @k-DPO.

    python examples/trl/kappo.py grpo    # TRL's own GRPOTrainer on KAPPO's adaptive reward
    python examples/trl/kappo.py dpo     # BestkDPOTrainer: @k-DPO with beta_eff(x)
    python examples/trl/kappo.py grpo --k 8 --beta 0.05 --model /path/to/Qwen2.5-0.5B-Instruct

1. The reference policy (the initial model) samples ``--bank-size`` completions for each
   training prompt (one-digit additions ``"a+b="``); a completion succeeds when its first number
   is the answer. That is the reference bank of KAPPO's calibration (the paper uses M = 30).
2. ``bestk.kappo.calibrate`` turns it into a binary calibration (Algorithm 1), saved to
   ``OUT/calibration.json`` -- the same file ``bestk calibrate`` writes.
3. ``grpo``: stock ``trl.GRPOTrainer`` with ``KappoReward`` (the reward a_k(x)·R, KAPPO Cor. 4.4),
   ``scale_rewards="none"`` (GRPO's std division would cancel a_k, Eq. 139) and the KL
   coefficient ``beta (n-1)/n`` (the group-mean centring scales the update by (n-1)/n).
   ``dpo``: ``BestkDPOTrainer`` on (success, failure) pairs from the bank with the per-prompt
   coefficient min(beta / a_k(N/(M+0.5)), 2) (Eqs. 13, 149).

By default a tiny Qwen2 and a character tokenizer are built locally (nothing is downloaded) and
it runs on a CPU in about a minute; ``--model DIR`` uses any Hugging Face causal LM.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The tiny Qwen2, its character tokenizer and the additions task of the sibling GRPO example.
from grpo_argmaxrl import additions, tiny_policy  # noqa: E402


def correct(completions, answer, **_):
    """Binary reward: 1 if the first number of the completion is the answer."""
    out = []
    for text, ans in zip(completions, answer, strict=True):
        m = re.search(r"\d+", text)
        out.append(float(m is not None and int(m.group()) == ans))
    return out


@torch.no_grad()
def reference_bank(model, tok, rows, m: int, max_new_tokens: int, seed: int = 0):
    """``{prompt_id: [(completion, reward), ...]}``: M samples per prompt from the reference."""
    torch.manual_seed(seed)
    model.eval()
    tok.padding_side = "left"
    bank = {}
    for row in rows:
        enc = tok([row["prompt"]] * m, return_tensors="pt", padding=True)
        out = model.generate(
            **enc, do_sample=True, temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id,
        )
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        rewards = correct(texts, [row["answer"]] * m)
        bank[row["prompt_id"]] = list(zip(texts, rewards, strict=True))
    model.train()
    return bank


def preference_pairs(rows, bank, per_prompt: int) -> list[dict]:
    """(success, failure) pairs from the bank: chosen = a correct sample, rejected = a wrong one."""
    pairs = []
    for row in rows:
        good = [t for t, r in bank[row["prompt_id"]] if r == 1]
        bad = [t for t, r in bank[row["prompt_id"]] if r == 0]
        for j in range(min(per_prompt, len(good), len(bad))):
            pairs.append({"prompt": row["prompt"], "chosen": good[j], "rejected": bad[j],
                          "prompt_id": row["prompt_id"]})
    return pairs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["grpo", "dpo"])
    ap.add_argument("--k", type=int, default=4, help="the @k objective")
    ap.add_argument("--beta", type=float, default=0.1, help="KL strength of the objective")
    ap.add_argument("--bank-size", type=int, default=16, help="reference samples per prompt (M)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--pairs-per-prompt", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--model", default=None, help="HF causal-LM directory (default: tiny)")
    ap.add_argument("--out", default="runs/trl_kappo")
    args = ap.parse_args(argv)

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bestk.kappo import calibrate

    out = Path(args.out)
    if args.model is None:
        model, tok = tiny_policy()
        args.model = str(out / "init")  # TRL builds the reference model from this path
        model.save_pretrained(args.model)
        tok.save_pretrained(args.model)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model)
        tok = AutoTokenizer.from_pretrained(args.model)
    rows = additions(args.prompts)
    bank = reference_bank(model, tok, rows, args.bank_size, max_new_tokens=3)
    cal = calibrate({pid: [r for _, r in s] for pid, s in bank.items()}, args.k, args.beta)
    cal_path = cal.save(out / "calibration.json")
    solved = sum(any(r for _, r in s) for s in bank.values())
    print(f"calibration: {cal!r} ({solved}/{len(rows)} prompts solved by the reference) "
          f"-> {cal_path}")
    common = dict(
        output_dir=str(out / args.mode), max_steps=args.max_steps, logging_steps=5,
        save_strategy="no", report_to="none", use_cpu=not torch.cuda.is_available(), bf16=False,
    )
    if args.mode == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        from bestk.integrations.trl import KappoReward

        n = args.num_generations
        trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=[KappoReward(correct, cal, prompt_id_column="prompt_id")],
            args=GRPOConfig(
                num_generations=n, per_device_train_batch_size=4 * n, max_completion_length=3,
                learning_rate=3e-4 if args.model.endswith("init") else 1e-6,
                scale_rewards="none", beta=args.beta * (n - 1) / n, **common,
            ),
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
        )
    else:
        from trl import DPOConfig

        from bestk.integrations.trl import BestkDPOTrainer

        pairs = preference_pairs(rows, bank, args.pairs_per_prompt)
        if not pairs:
            raise SystemExit("error: the reference bank has no prompt with both a success and a "
                             "failure; raise --bank-size or --prompts")
        trainer = BestkDPOTrainer(
            model=args.model,
            args=DPOConfig(per_device_train_batch_size=8, beta=args.beta,
                           learning_rate=1e-3 if args.model.endswith("init") else 1e-6,
                           **common),
            train_dataset=Dataset.from_list(pairs),
            processing_class=tok,
            calibration=cal,
            prompt_id_column="prompt_id",
        )
    trainer.train()
    losses = [round(h["loss"], 4) for h in trainer.state.log_history if "loss" in h]
    print(f"{args.mode}: loss per logging window {losses}")


if __name__ == "__main__":
    main()
