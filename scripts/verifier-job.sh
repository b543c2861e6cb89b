#!/usr/bin/env bash
# The main job with its reward from a Python verifier (examples/grpo_verifier.rl, scored by
# examples/verifiers/digits.py in a pool of sandboxed workers; python3 must be on PATH);
# results in runs/grpo_verifier/ (scripts/run-example.sh does the setup, build and run).
# Extra arguments go to `rlc run` (e.g. `--seed 3`, `--resume`).
set -euo pipefail
exec bash "$(dirname "$0")/run-example.sh" examples/grpo_verifier.rl "$@"
