#!/usr/bin/env bash
# Classic three-stage RLHF on two CPU ranks, the stages chained by checkpoints:
#   1. examples/rlhf_sft.rl     supervised fine-tuning on demonstrations  → runs/rlhf/sft
#   2. examples/rlhf_reward.rl  a reward model on preference pairs         → runs/rlhf/reward
#   3. examples/rlhf_ppo.rl     PPO with a critic against that reward model → runs/rlhf/ppo
# Each later stage's models start from `hf("../runs/rlhf/<stage>/checkpoints/…")`, the folders
# the earlier stages write (paths relative to examples/), so run it from any directory: it
# works in the repository root. Builds rlc with the runtime first (libtorch into .deps/ when
# missing). Extra arguments go to every `rlc run` (e.g. `--seed 3`, `--threads 2`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${RLC:-}" ]]; then
  LIBTORCH="$(bash scripts/build-runtime.sh)"
  export LIBTORCH
  RLC=target/release/rlc
fi
for stage in sft reward ppo; do
  example="examples/rlhf_$stage.rl"
  echo "== rlc run $example → runs/rlhf/$stage" >&2
  start=$(date +%s)
  "$RLC" run "$example" --out "runs/rlhf/$stage" "$@"
  echo "== $stage: $(( $(date +%s) - start )) s" >&2
done
