#!/usr/bin/env python3
"""What bounds one decode step of `decode.py`'s models on a GPU: the step's matrix products
alone (every layer's projections and MLP, and the head, at batch B, one token per row) in
float32, in TF32 and in bfloat16, and the sampler's passes over the vocabulary in float64 (as
rlc samples, for the same tokens on every device) and in float32. Each is timed with CUDA
events (median of 20 after 5 warm-ups), beside the step's bytes over the memory bandwidth
given (the weights' part of the roofline `decode.py` and `runtime/benches/decode.rs` print).

    python benches/pytorch/decode_floor.py --model medium --batch 256 --bandwidth-gbs 4800
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import MODELS  # noqa: E402


def timed(f):
    """Median milliseconds of `f` over 20 calls, after 5 warm-ups."""
    for _ in range(5):
        f()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def step_matmuls(shape, batch, dtype):
    """A function running one decode step's matrix products at `batch` rows in `dtype`."""
    d, head_dim = shape["hidden"], shape["hidden"] // shape["heads"]
    kv = shape["kv_heads"] * head_dim
    layer = [(d, d), (d, kv), (d, kv), (d, d), (d, shape["ffn"]), (d, shape["ffn"]),
             (shape["ffn"], d)]
    weights = [[torch.randn(i, o, device="cuda", dtype=dtype) * 0.02 for i, o in layer]
               for _ in range(shape["layers"])]
    head = torch.randn(d, shape["vocab"], device="cuda", dtype=dtype) * 0.02
    x = torch.randn(batch, d, device="cuda", dtype=dtype)
    f = torch.randn(batch, shape["ffn"], device="cuda", dtype=dtype)

    def run():
        for w in weights:
            for m in w[:-1]:
                (x @ m)
            f @ w[-1]
        x @ head
    return run


def sampler(shape, batch, dtype):
    """Softmax over the vocabulary, its running sum and a search for a uniform number: the
    passes inverse-CDF sampling makes."""
    logits = torch.randn(batch, shape["vocab"], device="cuda")
    u = torch.rand(batch, 1, device="cuda", dtype=dtype)

    def run():
        p = torch.softmax(logits.to(dtype), -1)
        torch.searchsorted(p.cumsum(-1), u)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="medium")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--bandwidth-gbs", type=float, default=4800.0)
    args = ap.parse_args()
    shape = MODELS[args.model]
    torch.manual_seed(0)
    d, head_dim = shape["hidden"], shape["hidden"] // shape["heads"]
    kv = shape["kv_heads"] * head_dim
    matmul_params = shape["layers"] * (2 * d * d + 2 * d * kv + 3 * d * shape["ffn"]) \
        + d * shape["vocab"]
    flops = 2 * matmul_params * args.batch
    # The head is the embedding (tied): its weights are read once.
    floor = 4.0 * matmul_params / (args.bandwidth_gbs * 1e9) * 1e3
    print(f"decode step floor ({args.model} model, batch {args.batch}, "
          f"{torch.cuda.get_device_name()}): {flops / 1e9:.1f} GFLOP of matrix products; "
          f"float32 weights over {args.bandwidth_gbs:g} GB/s: {floor:.3f} ms")
    for name, dtype, tf32 in [("float32", torch.float32, False), ("TF32", torch.float32, True),
                              ("bfloat16", torch.bfloat16, False)]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = timed(step_matmuls(shape, args.batch, dtype))
        print(f"  matrix products in {name:<8}: {ms:7.3f} ms ({flops / ms / 1e9:6.1f} TFLOP/s)")
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dtype in [("float64", torch.float64), ("float32", torch.float32)]:
        ms = timed(sampler(shape, args.batch, dtype))
        print(f"  sampling passes in {name}: {ms:7.3f} ms")


if __name__ == "__main__":
    main()
