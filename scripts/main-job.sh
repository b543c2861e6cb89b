#!/usr/bin/env bash
# The main job: the GRPO example (examples/grpo_digits.rl) trains a small policy on two CPU
# ranks. Installs libtorch into .deps/ when missing, builds rlc with its runtime (`rlc` and, next
# to it, `rlc-run`, which `rlc run` becomes), checks the program, then runs it: a progress line
# per step, and in runs/grpo_digits/ the per-step metrics (metrics.jsonl), the reward/KL curve
# (curves.png), a summary table and checkpoints.
# Extra arguments go to `rlc run` (e.g. `--seed 3`, `--resume`).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/setup-libtorch.sh)"
export LIBTORCH
echo "== building rlc with the runtime (first time: a few minutes)" >&2
cargo build --release --locked --quiet --features runtime
rlc=target/release/rlc
example=examples/grpo_digits.rl
echo "== rlc check $example" >&2
"$rlc" check "$example"
echo "== rlc run $example" >&2
"$rlc" run "$example" "$@"
