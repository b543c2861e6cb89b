#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU and PyTorch's libraries (no Rust toolchain
# needed there: the binaries are built where cargo is and carried over).
#
#   scripts/gpu-check.sh build [DIR]   where cargo is: builds, in release, `rlc` with its runtime,
#                                      the GPU tests and the model benchmarks, and copies them
#                                      into DIR (default .gpu/, git-ignored); prints DIR
#   scripts/gpu-check.sh run [DIR]     on the GPU machine, from the repository root: runs them
#   scripts/gpu-check.sh               both
#
# What `run` does, printing figures (RLC_REQUIRE_GPU is set: no usable GPU is a failure, not a
# skipped test):
#   1. kernels: every std.algo fn (and the scalar ones' derivatives) as CUDA C through NVRTC on
#      the driver, against the CPU JIT (compiler/kernel/tests/cuda_gpu.rs: largest difference,
#      NVRTC time, both back ends' times at B=1024, T=512), then on libtorch's CUDA tensors
#      inside the runtime (runtime/tests/kernels_fused.rs, cuda_tensors_match_the_cpu_jit);
#   2. training on the GPU: `rlc run examples/grpo_digits.rl --device cuda` for a few steps
#      (the CPU example: models, rollouts, kernels and updates on the GPU), the same steps on
#      the CPU, and runtime/tests/exec.rs's CUDA-vs-CPU run;
#   3. benchmarks: the training step and generation (runtime/benches/train_step.rs, rollout.rs)
#      and the fused kernels against libtorch's CUDA kernels (runtime/benches/kernels.rs)
#      on CUDA for the example's model and a GPT-2-small-sized one (`cargo bench` gives the CPU's).
#
# Libraries: `rlc` links libtorch_cpu.so and opens libtorch_cuda.so from the same folder when
# CUDA is asked for; LD_LIBRARY_PATH gets PyTorch's lib folder (python3's torch, or $LIBTORCH/lib)
# and every site-packages/nvidia/*/lib (cuBLAS, cuDNN, NVRTC…). NVRTC: cudarc opens `libnvrtc.so`
# (or .so.12); for a CUDA 13 install, whose library is libnvrtc.so.13, `run` points a
# `libnvrtc.so` link in a temporary folder at it. libcuda.so.1 comes with the driver.
set -euo pipefail
cd "$(dirname "$0")/.."
step="${1:-all}"

# Test and bench binaries: "Executable tests/NAME.rs (target/release/deps/NAME-<hash>)".
executable() { sed -n "s|.*Executable $1 (\(.*\))\$|\1|p" | tail -1; }

build() {
  local dir="${1:-.gpu}" out
  mkdir -p "$dir"
  LIBTORCH="${LIBTORCH:-$(bash scripts/setup-libtorch.sh)}"
  export LIBTORCH
  echo "== cargo build --release --features runtime" >&2
  cargo build --release --locked --quiet --features runtime
  cp target/release/rlc "$dir/rlc"
  echo "== test and bench binaries (release)" >&2
  out="$(cargo test -p rlc-kernel --release --locked --test cuda_gpu --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  cp "$(echo "$out" | executable tests/cuda_gpu.rs)" "$dir/cuda_gpu"
  out="$(cargo test -p rlc-runtime --release --locked --test kernels_fused --test exec --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  cp "$(echo "$out" | executable tests/kernels_fused.rs)" "$dir/kernels_fused"
  cp "$(echo "$out" | executable tests/exec.rs)" "$dir/exec"
  out="$(cargo bench -p rlc-runtime --locked --bench train_step --bench rollout --bench kernels --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  for bench in train_step rollout kernels; do
    cp "$(echo "$out" | executable "benches/$bench.rs")" "$dir/$bench"
  done
  # Without symbols and compressed they travel in about 25 MB.
  strip "$dir"/*
  gzip -9 -f "$dir"/*
  echo "$dir"
}

# PyTorch's lib folder and the NVIDIA wheels' lib folders, one per line.
library_dirs() {
  if [[ -n "${LIBTORCH:-}" ]]; then echo "$LIBTORCH/lib"; fi
  command -v python3 >/dev/null || return 0
  python3 - <<'EOF' 2>/dev/null || true
import glob, importlib.util, os
torch = importlib.util.find_spec("torch")
if torch and torch.origin:
    print(os.path.join(os.path.dirname(torch.origin), "lib"))
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for d in sorted(glob.glob(os.path.join(root, "*", "lib"))):
        print(d)
EOF
}

# A folder with `libnvrtc.so` pointing at the newest NVRTC found (empty output: none found).
nvrtc_shim() {
  local found="" d f shim
  for d in $(library_dirs) /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    for f in "$d"/libnvrtc.so.[0-9]*; do
      [[ -e "$f" && "$f" != *builtins* ]] && found="$f"
    done
  done
  [[ -n "$found" ]] || return 0
  shim="$(mktemp -d)"
  ln -s "$found" "$shim/libnvrtc.so"
  echo "$shim:$(dirname "$found")"
}

section() { echo; echo "======== $* ========"; }

run() {
  local dir="${1:-.gpu}" shim
  [[ -f "$dir/rlc.gz" ]] || { echo "no binaries in $dir (run '$0 build' where cargo is)" >&2; exit 1; }
  local bin
  bin="$(mktemp -d)"
  for f in "$dir"/*.gz; do gunzip -c "$f" >"$bin/$(basename "$f" .gz)"; done
  chmod +x "$bin"/*
  dir="$bin"
  LD_LIBRARY_PATH="$(library_dirs | paste -sd: -)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  shim="$(nvrtc_shim)"
  [[ -z "$shim" ]] || LD_LIBRARY_PATH="$shim:$LD_LIBRARY_PATH"
  export LD_LIBRARY_PATH RLC_REQUIRE_GPU=1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  local status=0
  section "1a. kernels: CUDA C (NVRTC, driver) vs the CPU JIT"
  "$dir/cuda_gpu" --nocapture --test-threads=1 || status=1
  section "1b. kernels on libtorch CUDA tensors vs the CPU JIT"
  "$dir/kernels_fused" --nocapture --test-threads=1 cuda || status=1
  section "2a. examples/grpo_digits.rl, 20 steps on CUDA"
  "$dir/rlc" run examples/grpo_digits.rl --device cuda --stop-after 20 --out /tmp/rlc-gpu-run || status=1
  section "2b. the same 20 steps on the CPU"
  "$dir/rlc" run examples/grpo_digits.rl --device cpu --threads 2 --stop-after 20 --out /tmp/rlc-cpu-run || status=1
  section "2c. runtime/tests/exec.rs"
  "$dir/exec" --test-threads=1 || status=1
  for model in example medium; do
    section "3. benchmarks: $model model on CUDA"
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model "$dir/train_step" --bench || status=1
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model "$dir/rollout" --bench || status=1
  done
  section "3. benchmarks: fused kernels on CUDA (CUDA C) vs libtorch's CUDA kernels vs a device copy"
  RLC_BENCH_DEVICE=cuda "$dir/kernels" --bench || status=1
  section "done: $([[ $status == 0 ]] && echo 'all passed' || echo 'SOME FAILED')"
  return $status
}

case "$step" in
  build) build "${2:-}" ;;
  run) run "${2:-}" ;;
  all) run "$(build "${2:-}")" ;;
  *) echo "usage: $0 [build [DIR] | run [DIR]]" >&2; exit 2 ;;
esac
