"""Turn M reference samples per prompt into a KAPPO reference bank for `bestk calibrate`.

Input: the parquet that verl's generation server writes
(``python3 -m verl.trainer.main_generation_server ... actor_rollout_ref.rollout.n=30
+data.output_path=ref.parquet``): verl's GSM8K columns (``reward_model.ground_truth``,
``extra_info.index``) plus ``responses``, a list of M sampled responses per prompt. Each
response is scored with verl's own GSM8K scorer (``verl.utils.reward_score.gsm8k``; 1 correct,
0 otherwise), and one JSONL row per prompt is written:
``{"prompt_id": <extra_info.index>, "rewards": [r_1, ..., r_M]}`` -- the bank format of
``bestk calibrate``.

    python examples/verl/make_kappo_bank.py ref.parquet bank.jsonl [--id-key index]
"""

from __future__ import annotations

import argparse
import json

import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("generations", help="parquet with a `responses` column (M per prompt)")
    ap.add_argument("bank", help="output JSONL bank")
    ap.add_argument("--id-key", default="index", help="key of extra_info holding the prompt id")
    args = ap.parse_args()

    from verl.utils.reward_score.gsm8k import compute_score

    df = pd.read_parquet(args.generations)
    for col in ("responses", "reward_model", "extra_info"):
        if col not in df.columns:
            raise SystemExit(f"error: {args.generations} has no column {col!r}")
    n_rows = 0
    with open(args.bank, "w") as f:
        for responses, rm, extra in zip(
            df["responses"], df["reward_model"], df["extra_info"], strict=True
        ):
            truth = rm["ground_truth"]
            rewards = [float(compute_score(str(r), truth)) for r in responses]
            f.write(json.dumps({"prompt_id": extra[args.id_key], "rewards": rewards}) + "\n")
            n_rows += 1
    print(f"wrote {n_rows} prompts to {args.bank}")


if __name__ == "__main__":
    main()
