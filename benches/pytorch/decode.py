#!/usr/bin/env python3
"""PyTorch eager's decoding beside `runtime/benches/decode.rs`: the same shapes, the same
figures, the same roofline.

A Llama/Qwen2 decoder written plainly in PyTorch (RMSNorm, rotary positions, grouped-query
attention with optional q/k/v biases, SwiGLU MLP, a tied LM head; float32 or `--dtype bfloat16`,
random weights) and
generation as Hugging Face's `generate` runs it with a static KV cache: the prompt prefilled
once, then one token per row a step, each step writing its keys and values into a
preallocated `[batch, kv_heads, prompt + new, head_dim]` buffer at its position and attending
over the whole buffer under a mask; softmax sampling at temperature 1.0, no EOS.

Prompts of 8 tokens, 64 new tokens per row, at batch 1, 16 and 256; a decode step's roofline
is every weight once plus the keys and values of the positions so far, over the memory
bandwidth given (`--bandwidth-gbs`, H200: 4800).

    python benches/pytorch/decode.py --model qwen2-0.5b --device cuda --bandwidth-gbs 4800
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

PROMPT = 8
NEW = 64

# The shapes of runtime/benches/common/mod.rs.
MODELS = {
    "example": dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=16,
                    rope_theta=10000.0, eps=1e-5, qkv_bias=False),
    "medium": dict(layers=12, hidden=768, heads=12, kv_heads=12, ffn=3072, vocab=32000,
                   rope_theta=10000.0, eps=1e-5, qkv_bias=False),
    "qwen2-0.5b": dict(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                       rope_theta=1e6, eps=1e-6, qkv_bias=True),
}


class Decoder(torch.nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, rope_theta, eps, qkv_bias):
        super().__init__()
        self.heads, self.kv_heads, self.eps = heads, kv_heads, eps
        self.head_dim = hidden // heads
        self.embed = torch.nn.Embedding(vocab, hidden)
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        d, kv = self.head_dim, kv_heads * self.head_dim
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.norm1 = torch.nn.Parameter(torch.ones(hidden))
            b.q = torch.nn.Linear(hidden, heads * d, bias=qkv_bias)
            b.k = torch.nn.Linear(hidden, kv, bias=qkv_bias)
            b.v = torch.nn.Linear(hidden, kv, bias=qkv_bias)
            b.o = torch.nn.Linear(heads * d, hidden, bias=False)
            b.norm2 = torch.nn.Parameter(torch.ones(hidden))
            b.gate = torch.nn.Linear(hidden, ffn, bias=False)
            b.up = torch.nn.Linear(hidden, ffn, bias=False)
            b.down = torch.nn.Linear(ffn, hidden, bias=False)
            self.blocks.append(b)
        self.norm = torch.nn.Parameter(torch.ones(hidden))
        self.inv_freq = 1.0 / rope_theta ** (torch.arange(0, d, 2).float() / d)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, positions):
        # x [B, H, T, d], positions [B, T]
        angles = positions[:, None, :, None].float() * self.inv_freq.to(x.device)
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).to(x.dtype)

    def forward(self, ids, positions, cache, at, keys_mask):
        """Logits after the last of `ids` [B, T]; writes the keys and values of these positions
        into `cache` (per layer [B, Hk, C, d] pairs) at columns at..at+T; `keys_mask` [B, C]."""
        b, t = ids.shape
        x = self.embed(ids)
        bias = torch.zeros(keys_mask.shape, device=ids.device, dtype=x.dtype)
        bias = bias.masked_fill(keys_mask == 0, -1e30)
        causal = torch.ones(t, keys_mask.shape[1], device=ids.device, dtype=torch.bool).tril(at)
        bias = bias[:, None, None, :].masked_fill(~causal, -1e30)
        group = self.heads // self.kv_heads
        for blk, (ck, cv) in zip(self.blocks, cache):
            h = self.rms(x, blk.norm1)
            q = blk.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
            k = blk.k(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = blk.v(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self.rope(q, positions), self.rope(k, positions)
            ck[:, :, at:at + t] = k
            cv[:, :, at:at + t] = v
            keys, values = ck, cv
            if group > 1:
                keys = keys.repeat_interleave(group, 1)
                values = values.repeat_interleave(group, 1)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias)
            x = x + blk.o(a.transpose(1, 2).reshape(b, t, -1))
            h = self.rms(x, blk.norm2)
            x = x + blk.down(F.silu(blk.gate(h)) * blk.up(h))
        x = self.rms(x[:, -1], self.norm)
        return x @ self.embed.weight.T


def bench_model(name, device, dtype=torch.float32):
    """The model `name` names (random weights, seed 0) on `device` in `dtype`, with its shape;
    libtorch on one thread, as the runtime's benches run it."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    shape = MODELS[name]
    return shape, Decoder(**shape).to(device=device, dtype=dtype)


@torch.no_grad()
def generate(model, ids, mask):
    b = ids.shape[0]
    capacity = PROMPT + NEW
    shape = (b, model.kv_heads, capacity, model.head_dim)
    dtype = model.embed.weight.dtype
    cache = [(torch.zeros(shape, device=ids.device, dtype=dtype),
              torch.zeros(shape, device=ids.device, dtype=dtype))
             for _ in model.blocks]
    keys_mask = torch.zeros(b, capacity, dtype=torch.long, device=ids.device)
    keys_mask[:, :PROMPT] = mask
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    logits = model(ids, positions, cache, 0, keys_mask)
    next_position = positions[:, -1:] + 1
    out = []
    for step in range(NEW):
        token = torch.multinomial(torch.softmax(logits.float(), -1), 1)
        out.append(token)
        if step + 1 == NEW:
            break
        keys_mask[:, PROMPT + step] = 1
        logits = model(token, next_position, cache, PROMPT + step, keys_mask)
        next_position = next_position + 1
    return torch.cat(out, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="example")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", default="1,16,256")
    ap.add_argument("--bandwidth-gbs", type=float, help="memory bandwidth for the roofline")
    ap.add_argument("--calls", type=int, default=3, help="timed calls per batch (median)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the weights' and KV cache's dtype")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    shape, model = bench_model(args.model, device, dtype)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"PyTorch {torch.__version__} eager decode ({args.model} model, {parameters} parameters "
          f"in {args.dtype}, "
          f"{device}, prompt {PROMPT}, {NEW} new tokens per row, static KV cache, median of "
          f"{args.calls} calls after a warm-up):")
    for batch in [int(b) for b in args.batches.split(",")]:
        ids = torch.tensor([[1 + (r * 7 + i * 3) % (shape["vocab"] - 1) for i in range(PROMPT)]
                            for r in range(batch)], device=device)
        mask = torch.ones_like(ids)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        generate(model, ids, mask)
        sync()
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            generate(model, ids, mask)
            sync()
            times.append(time.perf_counter() - start)
        call = statistics.median(times)
        tokens_per_s = batch * NEW / call
        line = f"  batch {batch:>3}: {tokens_per_s:>9.0f} tokens/s ({call / NEW * 1e3:.3f} ms a step)"
        if args.bandwidth_gbs:
            head_dim = shape["hidden"] // shape["heads"]
            kv = 2 * shape["layers"] * shape["kv_heads"] * head_dim * (PROMPT + NEW // 2) * batch
            bytes_ = dtype.itemsize * (parameters + kv)
            floor = bytes_ / (args.bandwidth_gbs * 1e9)
            roofline = batch / floor
            line += (f"; roofline {roofline:.0f} tokens/s ({floor * 1e3:.3f} ms a step: "
                     f"{bytes_ / 1e6:.0f} MB of weights and KV cache): "
                     f"{roofline / tokens_per_s:.1f}x the roofline's time")
        print(line)


if __name__ == "__main__":
    main()
