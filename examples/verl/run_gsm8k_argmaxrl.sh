#!/usr/bin/env bash
# GSM8K with verl + bestk: the usual verl GRPO recipe, with the advantage estimator switched to
# ArgMaxRL (or any bestk estimator). verl finds bestk's estimators by itself: `pip install
# "bestk[verl]"` declares a `verl.plugins` entry point that `import verl` loads.
#
#   bash examples/verl/run_gsm8k_argmaxrl.sh                        # argmaxrl, 1 node x 8 GPUs
#   ESTIMATOR=softmax_grpo bash examples/verl/run_gsm8k_argmaxrl.sh +algorithm.bestk.tau=0.1
#   ESTIMATOR=pkpo bash examples/verl/run_gsm8k_argmaxrl.sh +algorithm.bestk.k=4
#   DRY_RUN=1 bash examples/verl/run_gsm8k_argmaxrl.sh              # check config, no GPU
#   DRY_RUN=print bash examples/verl/run_gsm8k_argmaxrl.sh          # print the overrides
#
# Environment knobs: DATA, MODEL, ESTIMATOR, N, GPUS, NODES, KL_COEF, EXPERIMENT.
# Extra arguments are Hydra overrides appended to the command line; bestk options go under
# `+algorithm.bestk.<option>` (the `+` is needed: `algorithm` is a struct config in verl).
# Data: verl's GSM8K preprocessing (examples/data_preprocess/gsm8k.py in the verl repository)
# writes $DATA/train.parquet and $DATA/test.parquet.
set -euo pipefail

DATA=${DATA:-$HOME/data/gsm8k}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
ESTIMATOR=${ESTIMATOR:-argmaxrl}
N=${N:-8}                     # samples per prompt: the group size the @k estimators use
GPUS=${GPUS:-8}
NODES=${NODES:-1}
KL_COEF=${KL_COEF:-0.001}     # actor KL loss coefficient
EXPERIMENT=${EXPERIMENT:-${ESTIMATOR}_n${N}}

ARGS=(
  algorithm.adv_estimator="$ESTIMATOR"
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA/train.parquet"
  data.val_files="$DATA/test.parquet"
  data.train_batch_size=256
  data.max_prompt_length=512
  data.max_response_length=1024
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=64
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16
  actor_rollout_ref.actor.use_kl_loss=True
  actor_rollout_ref.actor.kl_loss_coef="$KL_COEF"
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="$N"
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
  trainer.critic_warmup=0
  trainer.logger='["console"]'
  trainer.project_name=bestk_gsm8k
  trainer.experiment_name="$EXPERIMENT"
  trainer.n_gpus_per_node="$GPUS"
  trainer.nnodes="$NODES"
  trainer.save_freq=50
  trainer.test_freq=10
  trainer.total_epochs=15
)

if [[ "${DRY_RUN:-0}" == print ]]; then
  # The Hydra overrides this script hands verl, one per line (for tests and scripting).
  printf '%s\n' "${ARGS[@]}" "$@"
  exit 0
fi
if [[ "${DRY_RUN:-0}" == 1 ]]; then
  # Composes verl's own config with these overrides, checks the estimator is registered and
  # runs it on a toy batch with your algorithm.bestk options. No GPU, no data needed.
  exec python3 -m bestk.integrations.verl "${ARGS[@]}" "$@"
fi
exec python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
