#!/usr/bin/env bash
# The main job: the GRPO example (examples/grpo_digits.rl) on two CPU devices. Builds rlc, checks
# the program, lowers it to its execution plan and draws the plan (what runs where, and what
# moves between devices). Training itself arrives with `rlc run`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
rlc=target/release/rlc
example=examples/grpo_digits.rl
echo "== rlc check $example"
"$rlc" check "$example"
echo "ok: no diagnostics"
if "$rlc" build --help >/dev/null 2>&1; then
  echo
  echo "== rlc build $example"
  "$rlc" build "$example" -o target/grpo_digits.plan.json
  echo
  echo "== rlc graph $example --format mermaid"
  "$rlc" graph "$example" --format mermaid
fi
