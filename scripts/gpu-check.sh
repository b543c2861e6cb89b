#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU and PyTorch's libraries (no Rust toolchain
# needed there: the binaries are built where cargo is and carried over).
#
#   scripts/gpu-check.sh build [DIR]   where cargo is: builds, in release, `rlc` with its runtime,
#                                      the GPU tests and the model benchmarks, and copies them
#                                      into DIR (default .gpu/, git-ignored); prints DIR. Where
#                                      MPI can be built against (scripts/setup-mpi.sh), also
#                                      `rlc-mpi` (feature mpi) and the NCCL test
#   scripts/gpu-check.sh run [DIR]     on the GPU machine, from the repository root: runs them
#   scripts/gpu-check.sh               both
#
# What `run` does, printing figures (RLC_REQUIRE_GPU is set: no usable GPU is a failure, not a
# skipped test):
#   1. kernels: every std.algo fn (and the scalar ones' derivatives) as CUDA C through NVRTC on
#      the driver, against the CPU JIT (runtime/kernel-exec/tests/cuda_gpu.rs: largest difference,
#      NVRTC time, both back ends' times at B=1024, T=512); the wide kernels (a block per row,
#      barriers finished on the device) on device memory against a device-to-device copy of
#      their bytes at B=512 and 4096, T=1024 (wide_kernels_against_copy_bandwidth: ms, GB/s,
#      % of copy bandwidth); then on libtorch's CUDA tensors inside the runtime
#      (runtime/tests/kernels_fused.rs, cuda_tensors_match_the_cpu_jit);
#   (with librlc_cuda_graph.so built, scripts/build-cuda-graph.sh, every run below decodes with
#   captured graphs; 2e and the decode benchmarks run again with RLC_CUDA_GRAPH_LIB=off, eagerly)
#   2. training on the GPU: `rlc run examples/grpo_digits.rl --device cuda` for a few steps
#      (the CPU example: models, rollouts, kernels and updates on the GPU), the same steps on
#      the CPU, and runtime/tests/exec.rs's CUDA-vs-CPU run; sampling on the device
#      (runtime/tests/sampling_device.rs): the Philox table computed on CUDA equals the CPU's
#      bit for bit, and a sampled generation on CUDA (stop flag read every 8 tokens) gives the
#      CPU's tokens, in one turn and in multi-turn episodes against an environment; the example
#      with `precision = bf16` and `policy.train` placed with dp, tp, fsdp and pp, 5 steps each;
#   3. benchmarks: the training step and generation (runtime/benches/train_step.rs, rollout.rs)
#      on CUDA for the example's model and a GPT-2-small-sized one (`cargo bench` gives the CPU's);
#      decode at batch 1, 16 and 256 for that one and a Qwen2-0.5B-shaped one, each beside its
#      roofline (weights and KV cache over BANDWIDTH_GBS, default 4800: an H200's HBM3e) and
#      beside PyTorch eager with a static KV cache (runtime/benches/decode.rs,
#      benches/pytorch/decode.py), in float32 and in bfloat16 (`precision = bf16`), and what bounds a step at batch 256 (its matrix products
#      alone in float32, TF32 and bf16; the sampler's passes: benches/pytorch/decode_floor.py);
#      and the fused kernels against libtorch eager's CUDA kernels and a device copy
#      (runtime/benches/kernels.rs: × eager, % of copy bandwidth) at B=512 and, out of cache,
#      B=4096 rows of T=1024 (issue #28's goals: ≥ 5× eager, ≥ 30 % of copy bandwidth);
#      a training step of GPU size (TRAIN_SHAPE="rows prompt response", default 32 64 192) for
#      the medium and the Qwen2-0.5B-shaped model, rlc (runtime/benches/train_step.rs) beside
#      PyTorch eager with AdamW(fused=True) (benches/pytorch/train_step.py): ms, tokens/s and
#      MFU against PEAK_TFLOPS (default 67: an H200's float32), and in bfloat16 against
#      PEAK_BF16_TFLOPS (default 989: its dense bfloat16);
#   4. ranks as processes on the GPU (needs `mpirun`, which PyTorch's wheels do not bring: without
#      it these are skipped, saying so, and the other steps still count): collectives of CUDA
#      tensors through NCCL against the host path under `mpirun -np 1` (and -np 2 on one GPU:
#      the host path; on two GPUs: NCCL), with a 64 MiB all-reduce timed both ways
#      (runtime/tests/collectives_nccl.rs); then `mpirun -np 2 rlc run examples/grpo_digits.rl
#      --device cuda --stop-after 3` (the example has two ranks) against the same run with ranks
#      as threads: the same metrics.
#
# Sections (the names RLC_GPU_CHECK_ONLY takes, in the order it gives; default all, in this
# order): kernels (1a, 1b), training (2a–2c), precision (2f), sampling (2d, 2e), benches,
# decode, fused, mfu (3), processes (4). Each command runs under RLC_GPU_STEP_TIMEOUT seconds (default 240).
#
# Libraries: `rlc` links libtorch_cpu.so and opens libtorch_cuda.so from the same folder when
# CUDA is asked for; LD_LIBRARY_PATH gets PyTorch's lib folder (python3's torch, or $LIBTORCH/lib)
# and every site-packages/nvidia/*/lib (cuBLAS, cuDNN, NVRTC…). NVRTC: cudarc opens `libnvrtc.so`
# (or .so.12); for a CUDA 13 install, whose library is libnvrtc.so.13, `run` points a
# `libnvrtc.so` link in a temporary folder at it. libcuda.so.1 comes with the driver. NCCL:
# `rlc` opens libnccl.so.2 (the nvidia-nccl wheel's lib folder is on LD_LIBRARY_PATH, and
# libtorch_cuda.so loads it anyway).
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
  # `rlc-run` is the whole command line linked with libtorch (what `rlc run` becomes): carried
  # alone as `rlc`, it runs the jobs itself.
  cp target/release/rlc-run "$dir/rlc"
  echo "== test and bench binaries (release)" >&2
  out="$(cargo test -p rlc-kernel-exec --release --locked --test cuda_gpu --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  cp "$(echo "$out" | executable tests/cuda_gpu.rs)" "$dir/cuda_gpu"
  out="$(cargo test -p rlc-runtime --release --locked --test kernels_fused --test exec --test sampling_device --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  cp "$(echo "$out" | executable tests/kernels_fused.rs)" "$dir/kernels_fused"
  cp "$(echo "$out" | executable tests/exec.rs)" "$dir/exec"
  cp "$(echo "$out" | executable tests/sampling_device.rs)" "$dir/sampling_device"
  out="$(cargo bench -p rlc-runtime --locked --bench train_step --bench rollout --bench decode --bench kernels --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
  for bench in train_step rollout decode kernels; do
    cp "$(echo "$out" | executable "benches/$bench.rs")" "$dir/$bench"
  done
  # Decode steps as captured CUDA graphs: the C API over ATen's graphs, built against the same
  # libtorch (PyTorch 2.11.0+cu130, the GPU machine's); beside the binaries, they use it.
  echo "== the CUDA graph library" >&2
  OUT="$dir" bash scripts/build-cuda-graph.sh >&2
  # Last, as they build the runtime with another feature: ranks as processes (MPI) and NCCL.
  rm -f "$dir/rlc-mpi" "$dir/rlc-mpi.gz" "$dir/collectives_nccl" "$dir/collectives_nccl.gz"
  if bash scripts/setup-mpi.sh; then
    echo "== cargo build --release --features mpi; the NCCL test" >&2
    cargo build --release --locked --quiet --features mpi
    cp target/release/rlc-run "$dir/rlc-mpi"
    out="$(cargo test -p rlc-runtime --release --locked --features mpi --test collectives_nccl --no-run 2>&1)" || { echo "$out" >&2; exit 1; }
    cp "$(echo "$out" | executable tests/collectives_nccl.rs)" "$dir/collectives_nccl"
  else
    echo "warning: no MPI to build against here: step 4 (processes, NCCL) is not built" >&2
  fi
  # Without symbols and compressed they travel in about 35 MB.
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

# Whether two runs' metrics.jsonl agree: every metric but the timings, step by step, within
# 1e-4 relative (threads and processes run the same math and the same collectives; CUDA's
# atomics may reorder a sum).
same_metrics() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
a, b = load(sys.argv[1]), load(sys.argv[2])
timing = lambda k: k in ("seconds", "tokens_per_s") or k.startswith("time/")
worst, bad = 0.0, []
if len(a) != len(b):
    bad.append(f"{len(a)} steps vs {len(b)}")
for x, y in zip(a, b):
    for k in sorted(set(x) | set(y)):
        if timing(k):
            continue
        u, v = x.get(k), y.get(k)
        if not isinstance(u, (int, float)) or not isinstance(v, (int, float)):
            if u != v:
                bad.append(f"step {x.get('step')} {k}: {u} vs {v}")
            continue
        d = abs(u - v) / max(1.0, abs(u))
        worst = max(worst, d)
        if d > 1e-4:
            bad.append(f"step {x.get('step')} {k}: {u} vs {v}")
print("metrics: " + ("identical" if worst == 0 and not bad else f"largest relative difference {worst:.3g}"))
for line in bad:
    print("  differs: " + line)
sys.exit(1 if bad else 0)
EOF
}

# Step 4: ranks as processes on the GPU; skipped, saying why, where this machine cannot start them.
section_processes() {
  local dir="$1" status=0
  section "4a. NCCL: collectives of CUDA tensors between processes vs the host path"
  if [[ ! -x "$dir/collectives_nccl" ]]; then
    echo "skipped: not built (no MPI where the binaries were built)"
    return 0
  fi
  if ! command -v mpirun >/dev/null; then
    echo "skipped: no mpirun on this machine (Open MPI is not in PyTorch's wheels; e.g." \
      "apt-get install openmpi-bin)"
    return 0
  fi
  # As the tests start jobs (runtime/src/collectives/processes.rs, local_mpirun): containers
  # often run as root and forbid the cross-memory attach of Open MPI's shared memory.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  if [[ "$(id -u)" == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  limit "$dir/collectives_nccl" --nocapture --test-threads=1 nccl_collectives_equal_the_host_path || status=1
  section "4b. mpirun -np 2 rlc run examples/grpo_digits.rl --device cuda, 3 steps, vs ranks as threads"
  rm -rf /tmp/rlc-gpu-threads /tmp/rlc-gpu-processes
  limit "$dir/rlc" run examples/grpo_digits.rl --device cuda --stop-after 3 --out /tmp/rlc-gpu-threads || status=1
  limit mpirun --oversubscribe -np 2 "$dir/rlc-mpi" run examples/grpo_digits.rl --device cuda \
    --stop-after 3 --out /tmp/rlc-gpu-processes 2>&1 | tee /tmp/rlc-gpu-processes.log || status=1
  if grep -q "note: NCCL is not used" /tmp/rlc-gpu-processes.log; then
    echo "(the processes' collectives went through host memory: see the note above)"
  else
    echo "(the processes' collectives of CUDA tensors went through NCCL)"
  fi
  if ! command -v python3 >/dev/null; then
    echo "metrics not compared: no python3"
  elif [[ -f /tmp/rlc-gpu-threads/metrics.jsonl && -f /tmp/rlc-gpu-processes/metrics.jsonl ]]; then
    same_metrics /tmp/rlc-gpu-threads/metrics.jsonl /tmp/rlc-gpu-processes/metrics.jsonl || status=1
  else
    echo "metrics not compared: a run wrote none"
    status=1
  fi
  return $status
}

# Each command of `run` under a time limit (a hang costs one step, not the machine's lease).
limit() { timeout --kill-after=10 "${RLC_GPU_STEP_TIMEOUT:-240}" "$@"; }

# A bench's arguments: each prints its own medians; criterion's sampled runs of every function
# (seconds each, minutes in all) only where RLC_GPU_CRITERION_FILTER names them (`.` for all).
bench() { limit "$1" --bench "${RLC_GPU_CRITERION_FILTER:-only-the-benches-own-medians}"; }

# The sections of `run`, in their default order; RLC_GPU_CHECK_ONLY="decode kernels …" runs
# the ones it names, in its order.
SECTIONS="kernels training precision sampling benches decode fused mfu processes"

section_kernels() {
  local dir="$1" status=0
  section "1a. kernels: CUDA C (NVRTC, driver) vs the CPU JIT"
  limit "$dir/cuda_gpu" --nocapture --test-threads=1 || status=1
  section "1b. kernels on libtorch CUDA tensors vs the CPU JIT"
  limit "$dir/kernels_fused" --nocapture --test-threads=1 cuda || status=1
  return $status
}

section_training() {
  local dir="$1" status=0
  section "2a. examples/grpo_digits.rl, 20 steps on CUDA"
  limit "$dir/rlc" run examples/grpo_digits.rl --device cuda --stop-after 20 --out /tmp/rlc-gpu-run || status=1
  section "2b. the same 20 steps on the CPU"
  limit "$dir/rlc" run examples/grpo_digits.rl --device cpu --threads 2 --stop-after 20 --out /tmp/rlc-cpu-run || status=1
  section "2c. runtime/tests/exec.rs, CUDA vs the CPU"
  limit "$dir/exec" --test-threads=1 cuda || status=1
  return $status
}

# `precision = bf16` under every layout: the example with its policy in bfloat16 and
# `policy.train` placed with each layout (the CPU's tests check the numbers:
# runtime/tests/layouts/precision.rs, tests/precision.rs; this checks that they run on CUDA).
section_precision() {
  local dir="$1" status=0 layout source
  for layout in dp tp fsdp pp; do
    source="/tmp/rlc-gpu-bf16-$layout.rl"
    sed -e 's/^  init  = random(seed: 7)$/&\n  precision = bf16/' \
      -e "s/^\(place policy.train  *on local\[0..2\] with \)dp(2)$/\1$layout(2)/" \
      examples/grpo_digits.rl >"$source"
    if ! grep -q "precision = bf16" "$source" || ! grep -q "with $layout(2)" "$source"; then
      echo "examples/grpo_digits.rl no longer has the lines this section edits" >&2
      return 1
    fi
    section "2f. precision = bf16, policy.train placed with $layout(2): 5 steps on CUDA"
    limit "$dir/rlc" run "$source" --device cuda --stop-after 5 --out "/tmp/rlc-gpu-bf16-$layout" ||
      status=1
  done
  return $status
}

section_sampling() {
  local dir="$1" status=0
  section "2d. sampling on CUDA (Philox on the device) vs the CPU: the same numbers, the same tokens"
  limit "$dir/sampling_device" --nocapture --test-threads=1 || status=1
  if [[ -f "$dir/librlc_cuda_graph.so" ]]; then
    section "2e. the same with eager decode steps (RLC_CUDA_GRAPH_LIB=off)"
    RLC_CUDA_GRAPH_LIB=off limit "$dir/sampling_device" --nocapture --test-threads=1 || status=1
  fi
  return $status
}

section_benches() {
  local dir="$1" status=0 model
  for model in example medium; do
    section "3. benchmarks: $model model on CUDA"
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model bench "$dir/train_step" || status=1
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model bench "$dir/rollout" || status=1
  done
  return $status
}

section_decode() {
  local dir="$1" status=0 model
  for model in medium qwen2-0.5b; do
    section "3. decode against its roofline: $model model on CUDA, rlc then PyTorch eager (static KV cache)"
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model RLC_BENCH_BANDWIDTH_GBS=$BANDWIDTH_GBS bench "$dir/decode" || status=1
    if [[ -f "$dir/librlc_cuda_graph.so" ]]; then
      RLC_CUDA_GRAPH_LIB=off RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model RLC_BENCH_BANDWIDTH_GBS=$BANDWIDTH_GBS bench "$dir/decode" || status=1
    fi
    limit python3 benches/pytorch/decode.py --model "$model" --device cuda --bandwidth-gbs "$BANDWIDTH_GBS" || status=1
    section "3. the same in bfloat16 (precision = bf16): rlc, then PyTorch eager"
    RLC_BENCH_PRECISION=bf16 RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model RLC_BENCH_BANDWIDTH_GBS=$BANDWIDTH_GBS bench "$dir/decode" || status=1
    limit python3 benches/pytorch/decode.py --model "$model" --device cuda --bandwidth-gbs "$BANDWIDTH_GBS" --dtype bfloat16 || status=1
    # What bounds a step at batch 256: its matrix products alone, in float32, TF32 and bf16.
    limit python3 benches/pytorch/decode_floor.py --model "$model" --batch 256 --bandwidth-gbs "$BANDWIDTH_GBS" || status=1
  done
  return $status
}

section_fused() {
  local dir="$1" status=0 rows
  for rows in 512 4096; do
    section "3. benchmarks: fused kernels on CUDA (wide CUDA C) vs libtorch eager vs a device copy, B=$rows"
    RLC_BENCH_DEVICE=cuda RLC_BENCH_ROWS=$rows bench "$dir/kernels" || status=1
  done
  return $status
}

# A training step of GPU size (TRAIN_SHAPE: rows prompt response), rlc then PyTorch eager with
# AdamW(fused=True): ms, tokens/s and MFU against PEAK_TFLOPS (float32 matrix products).
section_mfu() {
  local dir="$1" status=0 model rows prompt response
  read -r rows prompt response <<<"$TRAIN_SHAPE"
  for model in medium qwen2-0.5b; do
    section "3. a training step's MFU: $model model on CUDA, $rows x ($prompt + $response) tokens, rlc then PyTorch eager"
    RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model RLC_BENCH_ROWS=$rows RLC_BENCH_PROMPT=$prompt \
      RLC_BENCH_RESPONSE=$response RLC_BENCH_PEAK_TFLOPS=$PEAK_TFLOPS bench "$dir/train_step" || status=1
    limit python3 benches/pytorch/train_step.py --model "$model" --device cuda --rows "$rows" \
      --prompt "$prompt" --response "$response" --peak-tflops "$PEAK_TFLOPS" || status=1
    section "3. the same in bfloat16: rlc's precision = bf16, then PyTorch under autocast (MFU of $PEAK_BF16_TFLOPS TFLOP/s)"
    RLC_BENCH_PRECISION=bf16 RLC_BENCH_DEVICE=cuda RLC_BENCH_MODEL=$model RLC_BENCH_ROWS=$rows \
      RLC_BENCH_PROMPT=$prompt RLC_BENCH_RESPONSE=$response RLC_BENCH_PEAK_TFLOPS=$PEAK_BF16_TFLOPS \
      bench "$dir/train_step" || status=1
    limit python3 benches/pytorch/train_step.py --model "$model" --device cuda --rows "$rows" \
      --prompt "$prompt" --response "$response" --peak-tflops "$PEAK_BF16_TFLOPS" --bf16 || status=1
  done
  return $status
}

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
  local status=0 name
  # The decode rooflines' memory bandwidth, GB/s, and the float32 and bfloat16 peaks MFU is
  # counted against, TFLOP/s (an H200's HBM3e, CUDA cores and tensor cores, unless set); the
  # MFU section's batch.
  BANDWIDTH_GBS="${BANDWIDTH_GBS:-4800}"
  PEAK_TFLOPS="${PEAK_TFLOPS:-67}"
  PEAK_BF16_TFLOPS="${PEAK_BF16_TFLOPS:-989}"
  TRAIN_SHAPE="${TRAIN_SHAPE:-32 64 192}"
  for name in ${RLC_GPU_CHECK_ONLY:-$SECTIONS}; do
    if [[ " $SECTIONS " != *" $name "* ]]; then
      echo "unknown section '$name' (sections: $SECTIONS)" >&2
      return 2
    fi
    "section_$name" "$dir" || status=1
  done
  section "done: $([[ $status == 0 ]] && echo 'all passed' || echo 'SOME FAILED')"
  return $status
}

case "$step" in
  build) build "${2:-}" ;;
  run) run "${2:-}" ;;
  all) run "$(build "${2:-}")" ;;
  *) echo "usage: $0 [build [DIR] | run [DIR]]" >&2; exit 2 ;;
esac
