#!/usr/bin/env bash
# The GPU back end (rlc-kernel's `cuda` module) against the CPU JIT, on a machine with an
# NVIDIA GPU: compiler/kernel/tests/cuda_gpu.rs runs every std.algo fn (and derivatives) through
# NVRTC and the driver and compares with the JIT within 1e-4, printing per kernel the largest
# difference, NVRTC's time and both back ends' times at B=1024, T=512. (Its NVRTC-only test also
# runs without a GPU: LD_LIBRARY_PATH=<site-packages>/nvidia/cuda_nvrtc/lib cargo test -p
# rlc-kernel --test cuda_gpu.)
#
#   scripts/gpu-check.sh build         where cargo is: builds the test binaries (release) and
#                                      prints the GPU test's path
#   scripts/gpu-check.sh run [BINARY]  on the GPU machine: runs it (default: the newest built
#                                      here); no Rust toolchain needed
#   scripts/gpu-check.sh               both
#
# Carrying the binary to a GPU machine without Rust: it holds std and the kernels, and loads
# CUDA at run time, so copying the one file is enough, e.g.
#   scp "$(scripts/gpu-check.sh build | tail -1)" gpu:/tmp/cuda_gpu
#   scp scripts/gpu-check.sh gpu:/tmp/ && ssh gpu /tmp/gpu-check.sh run /tmp/cuda_gpu
# It needs a glibc with the symbol versions it was linked against (GLIBC_2.34 for a build on
# Debian 12; `objdump -T BINARY | grep GLIBC_` lists them).
#
# Libraries: libcuda.so.1 comes with the NVIDIA driver (system-wide). NVRTC is not part of
# the driver: PyTorch's CUDA 12 wheels bring it as the pip package nvidia-cuda-nvrtc-cu12
# (site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 and its libnvrtc-builtins). The run
# step adds every site-packages/nvidia/*/lib folder that python3 can find to LD_LIBRARY_PATH;
# set LD_LIBRARY_PATH yourself for another location. Only CUDA 12 NVRTC is looked for (the
# names cudarc tries), and the driver must be at least as new as that NVRTC (it loads the PTX
# NVRTC writes). The run step sets RLC_REQUIRE_GPU, so that no usable GPU is a failure here,
# not a skipped test.
set -euo pipefail
cd "$(dirname "$0")/.."
step="${1:-all}"

build() {
  echo "== cargo test -p rlc-kernel --no-run --release" >&2
  local out
  out="$(cargo test -p rlc-kernel --no-run --release 2>&1)" || { echo "$out" >&2; exit 1; }
  # "Executable tests/cuda_gpu.rs (target/release/deps/cuda_gpu-<hash>)"
  echo "$out" | sed -n 's/.*Executable tests\/cuda_gpu\.rs (\(.*\))$/\1/p' | tail -1
}

nvidia_lib_dirs() {
  command -v python3 >/dev/null || return 0
  python3 - <<'EOF' 2>/dev/null || true
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for d in sorted(glob.glob(os.path.join(root, "*", "lib"))):
        print(d)
EOF
}

run() {
  local bin="${1:-}"
  if [[ -z "$bin" ]]; then
    bin="$(ls -t target/release/deps/cuda_gpu-* 2>/dev/null | grep -v '\.d$' | head -1 || true)"
  fi
  [[ -x "$bin" ]] || { echo "no test binary (run '$0 build' where cargo is, or pass its path)" >&2; exit 1; }
  local extra
  extra="$(nvidia_lib_dirs | paste -sd: -)"
  if [[ -n "$extra" ]]; then
    echo "== LD_LIBRARY_PATH += $extra" >&2
    export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >&2 || true
  echo "== $bin --nocapture" >&2
  RLC_REQUIRE_GPU=1 "$bin" --nocapture --test-threads=1
}

case "$step" in
  build) build ;;
  run) shift; run "${1:-}" ;;
  all) run "$(build)" ;;
  *) echo "usage: $0 [build | run [BINARY]]" >&2; exit 2 ;;
esac
