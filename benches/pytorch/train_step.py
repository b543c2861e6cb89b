#!/usr/bin/env python3
"""PyTorch eager's training step beside `runtime/benches/train_step.rs`: the same model, batch,
loss and optimiser, the same figures (ms a step, response tokens trained a second, model FLOPs
utilisation counted by the same formula).

The decoder of `decode.py` (RMSNorm, rotary positions, grouped-query attention, SwiGLU, a tied
head; float32, random weights) run over whole sequences with causal attention
(`scaled_dot_product_attention`), the head at the positions whose next token the loss reads,
the PPO clipped loss of `std.algo.ppo_clip` (dual clip, eps 0.2) averaged over the response
tokens, backward, `clip_grad_norm_` to 1 and `torch.optim.AdamW(fused=True)` on CUDA (the
multi-tensor `foreach` path on the CPU), with the runtime's AdamW settings. `--bf16` runs the
forward pass and the loss under `torch.autocast(dtype=torch.bfloat16)`, mixed precision as a
hand-written PyTorch loop does it (float32 weights, gradients and optimiser).

    python benches/pytorch/train_step.py --model medium --device cuda --rows 32 --prompt 64 \
        --response 192 --peak-tflops 67
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import MODELS, bench_model  # noqa: E402

LR = 1e-3


def response_logprobs(model, ids, prompt, response):
    """`[rows, response]`: the log-probability of each response token."""
    b, t = ids.shape
    positions = torch.arange(t, device=ids.device).expand(b, t)
    x = model.embed(ids)
    group = model.heads // model.kv_heads
    for blk in model.blocks:
        h = model.rms(x, blk.norm1)
        q = blk.q(h).view(b, t, model.heads, model.head_dim).transpose(1, 2)
        k = blk.k(h).view(b, t, model.kv_heads, model.head_dim).transpose(1, 2)
        v = blk.v(h).view(b, t, model.kv_heads, model.head_dim).transpose(1, 2)
        q, k = model.rope(q, positions), model.rope(k, positions)
        if group > 1:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + blk.o(a.transpose(1, 2).reshape(b, t, -1))
        h = model.rms(x, blk.norm2)
        x = x + blk.down(F.silu(blk.gate(h)) * blk.up(h))
    x = model.rms(x[:, prompt - 1:prompt - 1 + response], model.norm)
    logits = x @ model.embed.weight.T
    targets = ids[:, prompt:prompt + response, None]
    return logits.log_softmax(-1).gather(-1, targets).squeeze(-1)


def ppo_clip(logp, old_logp, adv, eps):
    ratio = (logp - old_logp).exp()
    plain = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps))
    dual = torch.minimum(-adv * 3.0, plain)
    return torch.where(adv < 0, dual, plain)


def model_flops(shape, rows, prompt, response):
    """As `runtime/benches/train_step.rs::model_flops` counts them: 3 x the forward's matrix
    products, every layer at every position (attention over the whole width), the head at the
    positions read."""
    d, head_dim = shape["hidden"], shape["hidden"] // shape["heads"]
    q, kv, width = d, shape["kv_heads"] * head_dim, prompt + response
    per_position = 2 * (d * q + 2 * d * kv + q * d + 3 * d * shape["ffn"]) + 2 * 2 * width * q
    head = 2 * d * shape["vocab"] * rows * response
    return 3 * (shape["layers"] * per_position * rows * width + head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="example")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=6)
    ap.add_argument("--response", type=int, default=4)
    ap.add_argument("--peak-tflops", type=float,
                    help="the device's peak for matrix products (float32; bfloat16 with --bf16)")
    ap.add_argument("--seconds", type=float, default=3.0, help="time to measure (median step)")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and loss under torch.autocast(bfloat16)")
    args = ap.parse_args()
    device = torch.device(args.device)
    shape, model = bench_model(args.model, device)
    cuda = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.01, fused=cuda, foreach=not cuda)
    rows, prompt, response = args.rows, args.prompt, args.response
    ids = torch.randint(shape["vocab"], (rows, prompt + response), device=device)
    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    with torch.no_grad(), autocast():
        old_logp = response_logprobs(model, ids, prompt, response).float()
    adv = torch.randn(rows, response, device=device)
    mask = torch.ones(rows, response, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        optimizer.zero_grad()
        with autocast():
            logp = response_logprobs(model, ids, prompt, response)
            loss = (ppo_clip(logp, old_logp, adv, 0.2) * mask).sum() / mask.sum()
        value = loss.item()
        assert value == value, "the loss is NaN"
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        sync()

    for _ in range(3):
        step()
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < args.seconds:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    line = (f"PyTorch {torch.__version__} eager train step ({rows} rows x ({prompt} prompt + "
            f"{response} response) tokens, {args.model} model, {device}, "
            f"{'bfloat16 autocast, ' if args.bf16 else ''}AdamW "
            f"{'fused' if cuda else 'foreach'}, median of {len(times)} steps): "
            f"{seconds * 1e3:.1f} ms/step, {rows * response / seconds:.0f} tokens/s trained")
    if args.peak_tflops:
        flops = model_flops(shape, rows, prompt, response)
        line += (f"; {flops / 1e12:.2f} TFLOP a step, {flops / seconds / 1e12:.1f} TFLOP/s: MFU "
                 f"{100 * flops / seconds / (args.peak_tflops * 1e12):.1f} % of "
                 f"{args.peak_tflops:g} TFLOP/s")
    print(line)


if __name__ == "__main__":
    main()
