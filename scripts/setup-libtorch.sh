#!/usr/bin/env bash
# Installs libtorch 2.11.0 (the version `tch = "=0.24.0"` expects) under .deps/libtorch and
# prints the LIBTORCH directory on stdout; progress goes to stderr. Use it as
#
#     export LIBTORCH=$(scripts/setup-libtorch.sh)
#
# from any directory. Idempotent: when .deps/libtorch/torch/lib/libtorch_cpu.so exists it only
# prints the path. download.pytorch.org is unreachable here, so libtorch comes from the PyPI wheel;
# the two NVIDIA wheels are the runtime libraries that libtorch_cpu.so finds by its own RUNPATH.
# The wheel is installed into a temporary directory and moved into place only when pip succeeds,
# so an interrupted install is never mistaken for a complete one.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$repo_root/.deps"
target="$deps/libtorch"
libtorch="$target/torch"

if [[ ! -f "$libtorch/lib/libtorch_cpu.so" ]]; then
    mkdir -p "$deps"
    # Two setups started at once (parallel CI jobs) install once: the second waits, then finds it.
    exec 9>"$deps/libtorch.lock"
    flock 9
fi
if [[ ! -f "$libtorch/lib/libtorch_cpu.so" ]]; then
    # Leftovers of installs that were killed outright; the lock guarantees none is running.
    rm -rf "$deps"/libtorch.partial.*
    # Same filesystem as the target, so the final `mv` is an atomic rename.
    staging="$(mktemp -d "$deps/libtorch.partial.XXXXXX")"
    chmod 755 "$staging"
    trap 'rm -rf "$staging"' EXIT
    echo "setup-libtorch: installing torch 2.11.0 into $target (about 540 MB)" >&2
    # No pip cache: a second copy of the 530 MB wheel is disk a small CI machine may not have.
    python3 -m pip install --no-cache-dir --no-deps --target "$staging" \
        torch==2.11.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 >&2
    if [[ ! -f "$staging/torch/lib/libtorch_cpu.so" ]]; then
        echo "setup-libtorch: pip finished but torch/lib/libtorch_cpu.so is missing" >&2
        exit 1
    fi
    # A directory without libtorch_cpu.so is a leftover of an older, interrupted layout.
    rm -rf "$target"
    mv "$staging" "$target"
    trap - EXIT
    echo "setup-libtorch: done" >&2
fi

echo "$libtorch"
