#!/usr/bin/env bash
# KAPPO reference calibration for GSM8K (KAPPO, Algorithm 1): sample M = 30 responses per
# training prompt from the reference (initial) policy with verl's generation server, score
# them, and turn the per-prompt pass rates into the @k multipliers a_k(x) with `bestk
# calibrate`. The resulting cal.json is versioned (k, beta, M, bank checksum) and reusable.
#
#   bash examples/verl/kappo_calibrate.sh            # writes $OUT/cal.json
#   K=8 BETA=0.05 bash examples/verl/kappo_calibrate.sh
#
# Step 1 needs GPUs (vLLM). Steps 2-3 run on a CPU.
set -euo pipefail

DATA=${DATA:-$HOME/data/gsm8k}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
OUT=${OUT:-$HOME/data/gsm8k_kappo}
M=${M:-30}
K=${K:-4}
BETA=${BETA:-0.1}
GPUS=${GPUS:-8}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# 1. M reference samples per prompt (verl writes them as a `responses` list column).
python3 -m verl.trainer.main_generation_server \
  data.train_files="$DATA/train.parquet" \
  +data.output_path="$OUT/reference.parquet" \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n="$M" \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  trainer.n_gpus_per_node="$GPUS" \
  trainer.nnodes=1

# 2. Score them with verl's GSM8K scorer -> JSONL bank {"prompt_id", "rewards": [M values]}.
python3 "$HERE/make_kappo_bank.py" "$OUT/reference.parquet" "$OUT/bank.jsonl"

# 3. Calibrate: p*(q), a_k, beta_eff, beta log Z per prompt.
bestk calibrate "$OUT/bank.jsonl" --k "$K" --beta "$BETA" --kind binary -o "$OUT/cal.json"
echo "calibration: $OUT/cal.json"
