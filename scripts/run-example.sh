#!/usr/bin/env bash
# Runs one example on the CPU: `bash scripts/run-example.sh examples/NAME.rl [rlc run arguments]`.
# Installs libtorch into .deps/ when missing, builds rlc with its runtime (`rlc` and, next to it,
# `rlc-run`, which `rlc run` becomes), checks the program, then runs it: a progress line per
# step, and in runs/NAME/ the per-step metrics (metrics.jsonl), the reward/KL curve
# (curves.png), a summary table and checkpoints. scripts/main-job.sh and
# scripts/verifier-job.sh call it with their example.
set -euo pipefail
cd "$(dirname "$0")/.."
example="${1:?usage: scripts/run-example.sh examples/NAME.rl [rlc run arguments]}"
shift
LIBTORCH="$(bash scripts/build-runtime.sh)"
export LIBTORCH
rlc=target/release/rlc
echo "== rlc check $example" >&2
"$rlc" check "$example"
echo "== rlc run $example" >&2
"$rlc" run "$example" "$@"
