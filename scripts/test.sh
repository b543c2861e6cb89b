#!/usr/bin/env bash
# The whole test suite, as CI runs it (`.ci/run` calls this). Does its own setup: Rust crates
# from crates.io; the editor tests install their npm packages and the tree-sitter CLI when
# missing. Takes about 25 minutes on a 2-core machine (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "format and lints (compiler, CLI)"
cargo fmt --all -- --check
# Without `--workspace`: the default members, everything but the libtorch runtime.
cargo clippy --all-targets --locked -- -D warnings

step "compiler and CLI tests (unit, UI, property, snapshot)"
INSTA_UPDATE=no cargo test --locked

if [[ -x scripts/test-editors.sh ]]; then
  step "editor grammars"
  bash scripts/test-editors.sh
fi

step "runtime and rlc run (libtorch; installed into .deps/ when missing)"
LIBTORCH="$(bash scripts/setup-libtorch.sh)"
export LIBTORCH
cargo clippy --workspace --all-targets --locked --features rlc/runtime -- -D warnings
cargo test --locked -p rlc-runtime
INSTA_UPDATE=no cargo test --locked -p rlc --features runtime --test run
INSTA_UPDATE=no cargo test --locked -p rlc --features runtime --test plan_calibrate
