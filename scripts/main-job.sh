#!/usr/bin/env bash
# The main job: the GRPO example (examples/grpo_digits.rl) trains a small policy on two CPU
# ranks; results in runs/grpo_digits/ (scripts/run-example.sh does the setup, build and run).
# Extra arguments go to `rlc run` (e.g. `--seed 3`, `--resume`).
set -euo pipefail
exec bash "$(dirname "$0")/run-example.sh" examples/grpo_digits.rl "$@"
