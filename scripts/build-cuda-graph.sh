#!/usr/bin/env bash
# Builds librlc_cuda_graph.so (runtime/cuda-graph/graph.cpp), the C API over ATen's CUDA graphs
# that generation on a GPU replays its decode steps with (runtime/src/cuda_graph.rs), and prints
# its path. No GPU needed.
#   TORCH_DIR  the `torch` folder of a CUDA build of PyTorch: the libtorch the runtime will run
#              with, of the same version (the API is C++). Default: $LIBTORCH, else the one
#              scripts/setup-libtorch.sh installs (2.11.0+cu130, what tch 0.24 expects).
#   OUT        where the library goes (default: target/cuda-graph).
# The CUDA runtime's headers come with PyTorch's wheels (nvidia/cu13/include); the nvcc headers
# they include (crt/) are NVIDIA's nvidia-cuda-crt wheel (134 KB), installed under .deps/cuda-crt
# when no copy is found (exit status 75 when PyPI cannot give it). Without the library,
# generation on a GPU decodes eagerly.
set -euo pipefail
cd "$(dirname "$0")/.."
torch_dir=${TORCH_DIR:-${LIBTORCH:-$(bash scripts/setup-libtorch.sh)}}
site=$(dirname "$torch_dir")
includes=()
for candidate in "$site"/nvidia/cu13/include "$site"/nvidia/cuda_runtime/include /usr/local/cuda/include; do
    if [[ -f $candidate/cuda_runtime_api.h ]]; then
        includes+=("-I$candidate")
    fi
done
if [[ ${#includes[@]} -eq 0 ]]; then
    echo "build-cuda-graph: no cuda_runtime_api.h beside $torch_dir (a CUDA build of PyTorch brings it)" >&2
    exit 1
fi
crt_found=""
for candidate in "$site"/nvidia/cu13/include "$site"/triton/backends/nvidia/include \
    /usr/local/cuda/include .deps/cuda-crt/nvidia/cu13/include; do
    if [[ -f $candidate/crt/host_config.h ]]; then
        crt_found=$candidate
        break
    fi
done
if [[ -z $crt_found ]]; then
    echo "build-cuda-graph: installing nvidia-cuda-crt 13.0.88 (nvcc's crt/ headers) into .deps/cuda-crt" >&2
    staging=$(mktemp -d)
    trap 'rm -rf "$staging"' EXIT
    if ! timeout "${RLC_CRT_TIMEOUT:-180}" python3 -m pip install --disable-pip-version-check \
        --no-cache-dir --no-deps --quiet --timeout 30 --retries 1 --target "$staging" \
        nvidia-cuda-crt==13.0.88 >&2; then
        echo "build-cuda-graph: nvidia-cuda-crt could not be installed from PyPI" >&2
        exit 75
    fi
    mkdir -p .deps
    rm -rf .deps/cuda-crt
    mv "$staging" .deps/cuda-crt
    trap - EXIT
    crt_found=.deps/cuda-crt/nvidia/cu13/include
fi
includes+=("-I$crt_found")
out=${OUT:-target/cuda-graph}
mkdir -p "$out"
# PyTorch's wheels are built with the C++11 string ABI since 2.7.
g++ -O2 -std=c++17 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 \
    -I"$torch_dir/include" "${includes[@]}" \
    runtime/cuda-graph/graph.cpp \
    -L"$torch_dir/lib" -ltorch_cuda -lc10_cuda -lc10 \
    -o "$out/librlc_cuda_graph.so"
echo "$out/librlc_cuda_graph.so"
