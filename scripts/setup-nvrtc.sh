#!/usr/bin/env bash
# Installs NVIDIA's NVRTC (the CUDA C compiler as a library, no GPU or driver needed) from PyPI
# under .deps/nvrtc and prints its library folder on stdout; progress goes to stderr. The CUDA
# back end's test puts it on LD_LIBRARY_PATH to compile every emitted kernel to PTX:
#
#     LD_LIBRARY_PATH=$(scripts/setup-nvrtc.sh) cargo test -p rlc-kernel-exec --test cuda_nvrtc
#
# The wheel is nvidia-cuda-nvrtc-cu12 12.4.127 (a 25 MB download, 63 MB installed): cudarc, built
# with `cuda-12080` and dynamic loading, opens `libnvrtc.so` or `libnvrtc.so.12` (a CUDA 13
# `libnvrtc.so.13` is not among the names it tries), and 12.4 compiles for compute_90 (H100,
# H200) like 12.8 does, at a quarter of 12.8's 88 MB download.
#
# Never fatal for its caller's purpose: exits non-zero, saying why, when PyPI cannot be reached
# in time (pip's own timeout and one retry, the whole install bounded by RLC_NVRTC_TIMEOUT
# seconds, default 180), and the caller skips the check. Idempotent: when the library exists it
# only prints the folder; an install lands in a temporary folder first and is moved into place
# only when complete.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$repo_root/.deps"
target="$deps/nvrtc"
lib="$target/nvidia/cuda_nvrtc/lib"
marker="$lib/libnvrtc.so.12"
version="12.4.127"

if [[ ! -f "$marker" ]]; then
    mkdir -p "$deps"
    # Two setups started at once install once: the second waits, then finds it.
    exec 9>"$deps/nvrtc.lock"
    flock 9
fi
if [[ ! -f "$marker" ]]; then
    rm -rf "$deps"/nvrtc.partial.*
    staging="$(mktemp -d "$deps/nvrtc.partial.XXXXXX")"
    chmod 755 "$staging"
    trap 'rm -rf "$staging"' EXIT
    echo "setup-nvrtc: installing nvidia-cuda-nvrtc-cu12 $version into $target (25 MB download)" >&2
    if ! timeout "${RLC_NVRTC_TIMEOUT:-180}" python3 -m pip install --disable-pip-version-check \
        --no-cache-dir --no-deps --timeout 30 --retries 1 --target "$staging" \
        "nvidia-cuda-nvrtc-cu12==$version" >&2; then
        echo "setup-nvrtc: pip could not install the wheel (PyPI unreachable or too slow?)" >&2
        exit 1
    fi
    if [[ ! -f "$staging/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]]; then
        echo "setup-nvrtc: pip finished but nvidia/cuda_nvrtc/lib/libnvrtc.so.12 is missing" >&2
        exit 1
    fi
    rm -rf "$target"
    mv "$staging" "$target"
    trap - EXIT
    echo "setup-nvrtc: done" >&2
fi

echo "$lib"
