#!/usr/bin/env bash
# The main job (examples/grpo_digits.rl) side by side with a plain PyTorch eager implementation
# of it (benches/pytorch/grpo_digits.py), run alternately in one invocation: rlc N steps, PyTorch
# N steps, and again, each one process with the same CPU threads (2 by default). Prints the
# median step and its phases (generate / forward / kernel / train / other) of both, the ratio,
# and the steps and seconds each needs to reach a rolling-10 mean reward of 0.8.
#
# Setup (first run only, a few minutes): PyTorch from PyPI (torch 2.11.0, the libtorch version rlc
# links, and numpy) into the git-ignored virtual environment .deps/pytorch-venv (~4.7 GB), and
# libtorch for rlc's own build. Not part of CI or scripts/test.sh: a benchmark, not a test.
#
#     bash scripts/bench-vs-pytorch.sh                      # 300 steps each, turns of 50
#     bash scripts/bench-vs-pytorch.sh --steps 100 --chunk 25 --seed 1
#
# Arguments go to benches/pytorch/grpo_digits.py (`--help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/pytorch-venv
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
    echo "== installing PyTorch from PyPI into $venv (first time: a few minutes, ~4.7 GB)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch==2.11.0 numpy
fi
LIBTORCH="$(bash scripts/build-runtime.sh)"
export LIBTORCH
exec "$venv/bin/python" benches/pytorch/grpo_digits.py --rlc target/release/rlc-run "$@"
