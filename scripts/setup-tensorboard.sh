#!/usr/bin/env bash
# Installs TensorBoard 2.21.0 (with its dependencies: protobuf, numpy, grpcio, …) under
# .deps/tensorboard and prints that directory on stdout; progress goes to stderr. The tests put it
# on PYTHONPATH to read `rlc run`'s event files back with TensorBoard's own reader:
#
#     export RLC_TENSORBOARD_PYTHONPATH=$(scripts/setup-tensorboard.sh)
#
# Viewing a run needs the same directory: PYTHONPATH=$(scripts/setup-tensorboard.sh) python3 -m
# tensorboard.main --logdir runs/ (or any `pip install tensorboard`).
#
# Idempotent: when .deps/tensorboard/tensorboard/__init__.py exists it only prints the path. The
# packages are installed into a temporary directory and moved into place only when pip succeeds,
# so an interrupted install is never mistaken for a complete one.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$repo_root/.deps"
target="$deps/tensorboard"
marker="$target/tensorboard/__init__.py"

if [[ ! -f "$marker" ]]; then
    mkdir -p "$deps"
    # Two setups started at once (parallel CI jobs) install once: the second waits, then finds it.
    exec 9>"$deps/tensorboard.lock"
    flock 9
fi
if [[ ! -f "$marker" ]]; then
    # Leftovers of installs that were killed outright; the lock guarantees none is running.
    rm -rf "$deps"/tensorboard.partial.*
    # Same filesystem as the target, so the final `mv` is an atomic rename.
    staging="$(mktemp -d "$deps/tensorboard.partial.XXXXXX")"
    chmod 755 "$staging"
    trap 'rm -rf "$staging"' EXIT
    echo "setup-tensorboard: installing tensorboard 2.21.0 into $target (about 160 MB)" >&2
    python3 -m pip install --disable-pip-version-check --no-warn-script-location \
        --target "$staging" tensorboard==2.21.0 >&2
    if [[ ! -f "$staging/tensorboard/__init__.py" ]]; then
        echo "setup-tensorboard: pip finished but tensorboard/__init__.py is missing" >&2
        exit 1
    fi
    # A directory without the marker is a leftover of an older, interrupted layout.
    rm -rf "$target"
    mv "$staging" "$target"
    trap - EXIT
    echo "setup-tensorboard: done" >&2
fi

echo "$target"
