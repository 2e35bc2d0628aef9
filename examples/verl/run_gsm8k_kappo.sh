#!/usr/bin/env bash
# KAPPO @k-GRPO in stock verl, reward side (KAPPO Cor. 4.4): verl's own RLOO (or Dr.GRPO) on
# the prompt-adaptive reward a_k(x)·R that bestk's custom reward function computes from a
# reference calibration. No change to verl: only the reward function and the estimator.
#
#   bash examples/verl/kappo_calibrate.sh                 # once: writes $HOME/data/gsm8k_kappo/cal.json
#   bash examples/verl/run_gsm8k_kappo.sh                 # RLOO on a_k(x)·R, 1 node x 8 GPUs
#   ESTIMATOR=grpo bash examples/verl/run_gsm8k_kappo.sh  # Dr.GRPO centring (no std division)
#   DRY_RUN=1 bash examples/verl/run_gsm8k_kappo.sh       # check config + calibration, no GPU
#
# The KL coefficient is the calibration's beta (the @k optimum is defined for that beta); with
# ESTIMATOR=grpo the centring uses the group mean including the sample itself, which scales
# the update by (N-1)/N, so the KL coefficient becomes beta (N-1)/N. verl's standardised GRPO
# would cancel a_k(x) (KAPPO Eq. 139) and is refused by the DRY_RUN check.
# Extra arguments are Hydra overrides, as in run_gsm8k_argmaxrl.sh (whose environment knobs
# DATA, MODEL, N, GPUS, NODES apply too).
set -euo pipefail

CAL=${CAL:-$HOME/data/gsm8k_kappo/cal.json}
ESTIMATOR=${ESTIMATOR:-rloo}
N=${N:-8}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ ! -f "$CAL" ]]; then
  echo "error: calibration $CAL not found (run examples/verl/kappo_calibrate.sh or set CAL)" >&2
  exit 2
fi
read -r K BETA < <(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["k"], c["beta"])' "$CAL")

ARGS=(
  reward.custom_reward_function.path=pkg://bestk.integrations.verl
  reward.custom_reward_function.name=kappo_compute_score
  +reward.custom_reward_function.reward_kwargs.calibration="$CAL"
)
case "$ESTIMATOR" in
  rloo) KL_COEF=$BETA ;;
  grpo)
    KL_COEF=$(python3 -c "print($BETA * ($N - 1) / $N)")
    ARGS+=(algorithm.norm_adv_by_std_in_grpo=False)
    ;;
  *) echo "error: ESTIMATOR must be rloo or grpo (Dr.GRPO), got $ESTIMATOR" >&2; exit 2 ;;
esac

export ESTIMATOR N KL_COEF EXPERIMENT="kappo_${ESTIMATOR}_k${K}_n${N}"
exec bash "$HERE/run_gsm8k_argmaxrl.sh" "${ARGS[@]}" "$@"
