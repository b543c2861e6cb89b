#!/usr/bin/env bash
# Tool use (#24): a small policy learns four-digit addition with a calculator it calls through
# an environment (examples/envs/calc.py; python3 must be on PATH). Stage 1
# (examples/tool_calc_sft.rl) is a supervised warm-up on demonstrations of whole episodes; stage
# 2 (examples/tool_calc.rl) is GRPO against the calculator, starting from stage 1's checkpoint.
# Results in runs/tool_calc/sft and runs/tool_calc/rl. Builds rlc with the runtime first
# (libtorch into .deps/ when missing). Extra arguments go to both `rlc run`s (e.g. `--seed 3`).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/build-runtime.sh)"
export LIBTORCH
rlc=target/release/rlc
for stage in sft rl; do
  example="examples/tool_calc.rl"
  [[ $stage == sft ]] && example="examples/tool_calc_sft.rl"
  echo "== rlc run $example → runs/tool_calc/$stage" >&2
  "$rlc" run "$example" --out "runs/tool_calc/$stage" "$@"
done
