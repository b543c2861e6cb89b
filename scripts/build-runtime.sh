#!/usr/bin/env bash
# Builds rlc with its runtime (release, `--features runtime`: `rlc` and `rlc-run` beside it in
# target/release/), installing libtorch into .deps/ first when missing, and prints the LIBTORCH
# directory on stdout (progress on stderr). The job and benchmark scripts start with
#
#     LIBTORCH="$(bash scripts/build-runtime.sh)"
#     export LIBTORCH
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/setup-libtorch.sh)"
export LIBTORCH
echo "== building rlc with the runtime (first time: a few minutes)" >&2
cargo build --release --locked --quiet --features runtime >&2
echo "$LIBTORCH"
