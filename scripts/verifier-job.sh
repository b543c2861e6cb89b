#!/usr/bin/env bash
# The main job with its reward from a Python verifier (examples/grpo_verifier.rl, scored by
# examples/verifiers/digits.py in a pool of sandboxed workers; python3 must be on PATH): a small
# policy trains on two CPU ranks. Installs libtorch into .deps/ when missing, builds rlc with its
# runtime (`rlc` and, next to it, `rlc-run`, which `rlc run` becomes), checks the program, then
# runs it: a progress line per step, and in runs/grpo_verifier/ the per-step metrics
# (metrics.jsonl), the reward/KL curve (curves.png), a summary table and checkpoints.
# Extra arguments go to `rlc run` (e.g. `--seed 3`, `--resume`).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/setup-libtorch.sh)"
export LIBTORCH
echo "== building rlc with the runtime (first time: a few minutes)" >&2
cargo build --release --locked --quiet --features runtime
rlc=target/release/rlc
example=examples/grpo_verifier.rl
echo "== rlc check $example" >&2
"$rlc" check "$example"
echo "== rlc run $example" >&2
"$rlc" run "$example" "$@"
