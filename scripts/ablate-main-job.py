#!/usr/bin/env python3
"""Learning-efficiency ablations of the main job, standard library only. The variants edit the loop,
so they start from examples/grpo_digits_by_hand.rl, the main job with std.recipes.grpo's loop
written out (the same plan: tests/plans.rs).

Runs each variant × seed with `rlc run FILE --seed S --stop-after N --out DIR`, watches the run's
metrics.jsonl and prints, per variant, the steps each seed needs to reach a rolling mean reward
(window 10) of at least 0.8, or "not within N". A run is stopped as soon as it gets there.

Variants are either .rl files given on the command line, or names from VARIANTS below: each is
examples/grpo_digits_by_hand.rl with a few textual substitutions (every substitution must match, so a
variant never silently runs the unchanged example). `--list` prints the names. The variants were
ablated on the example's rotary form (`tiny_gpt`, lr 1e-3, before issue #23 item 3 switched it to
learned positions and lr 3e-3): ROTARY turns today's example back into that form first, so each
row keeps meaning what docs/benchmarks.md says; `current` runs the example as it is.

    python3 scripts/ablate-main-job.py --seeds 0,1 base beta2_099 lr_3e-3
    python3 scripts/ablate-main-job.py --seeds 0-4 examples/grpo_digits.rl my_variant.rl

Steps are counted from 1: "64" means the mean reward of steps 55..64 (1-based) is ≥ 0.8 and no
earlier window of 10 steps was. The rlc binary is target/release/rlc (built with
`cargo build --release --features runtime`, which puts the runtime `rlc-run` beside it), or --rlc
(e.g. a copy of `rlc-run` made before another build replaces it).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "grpo_digits_by_hand.rl"

# Today's example → its rotary form, on which the variants below were ablated.
ROTARY = [
    ("import std.models { tiny_gpt_abs }", "import std.models { tiny_gpt }"),
    ("arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)",
     "arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)"),
    ("optim = adamw(lr: 3e-3, warmup: 10)", "optim = adamw(lr: 1e-3, warmup: 10)"),
]

OPTIM = "optim = adamw(lr: 1e-3, warmup: 10)"
LOSS_TAIL = "+ 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp"
ARCH = "arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)"
GEN = "max_new: 4, temperature: 1.0)"


def optim(args):
    return [(OPTIM, f"optim = adamw({args})")]


def arch(args):
    return [(ARCH, f"arch  = {args}")]


def plain_arch(extra):
    """`arch(…)` with tiny_gpt's shape (2 × 64, 4 heads, ffn 256) and `extra` fields."""
    return arch(
        "arch(layers: 2, hidden: 64, heads: 4, kv_heads: 4, ffn: 256, vocab: reverse.vocab, "
        f"max_len: 16, {extra})"
    )


VARIANTS_LATE = {
    "ent01": [(LOSS_TAIL, "+ 0.05 * kl_k3(logp, ref_logp) + 0.1 * stop_grad(logp) * logp")],
    "nokl": [(LOSS_TAIL, "+ 0.05 * stop_grad(logp) * logp")],
    "h128": arch("tiny_gpt(layers: 2, hidden: 128, heads: 4, vocab: reverse.vocab, max_len: 16)"),
    "digits": [
        ("pipeline train", """/// Each response token's 1-based position.
fn pos(m: Mask[B, T]) -> f32[B, T] {
  scan forward over T with (i = 0.0) { t ->
    i = i + where(m[t], 1.0, 1.0)
    emit i
  }
}

/// The accuracy of answer digit `k` (1-based) over the batch.
fn digit(ok: f32[B, T], m: Mask[B, T], k: f32) -> f32 {
  let at = pos(m) == k
  sum(ok, mask: at) / count(at)
}

pipeline train"""),
        ("    log {\n      reward: mean(score),",
         "    let ok = f32(rollout.response == rollout.target)\n    log {\n      reward: mean(score),\n"
         "      d1: digit(ok, rollout.mask, 1.0), d2: digit(ok, rollout.mask, 2.0),\n"
         "      d3: digit(ok, rollout.mask, 3.0), d4: digit(ok, rollout.mask, 4.0),"),
    ],
}

# name -> (what it changes, substitutions on examples/grpo_digits.rl as it was ablated).
VARIANTS = {
    "current": ("examples/grpo_digits.rl as it is (tiny_gpt_abs untied, lr 3e-3)", []),
    "base": ("the rotary example as ablated (tiny_gpt, lr 1e-3)", []),
    # Optimiser
    "beta2_099": ("β2 0.99", optim("lr: 1e-3, warmup: 10, beta2: 0.99")),
    "wd_01": ("weight decay 0.1", optim("lr: 1e-3, warmup: 10, weight_decay: 0.1")),
    "eps_1e-6": ("Adam ε 1e-6", optim("lr: 1e-3, warmup: 10, eps: 1e-6")),
    "clip_off": ("grad clip 100 (off)", optim("lr: 1e-3, warmup: 10, clip: 100.0")),
    # LR schedule
    "constant": ("constant LR after warm-up", optim('lr: 1e-3, warmup: 10, schedule: "constant"')),
    "const_b099": (
        "constant LR, β2 0.99 (the PyTorch script's optimiser)",
        optim('lr: 1e-3, warmup: 10, beta2: 0.99, schedule: "constant"'),
    ),
    "no_warmup": ("no warm-up", optim("lr: 1e-3")),
    "lr_2e-3": ("lr 2e-3", optim("lr: 2e-3, warmup: 10")),
    "lr_3e-3": ("lr 3e-3", optim("lr: 3e-3, warmup: 10")),
    "lr_5e-3": ("lr 5e-3", optim("lr: 5e-3, warmup: 10")),
    "lr_3e-3_c099": (
        "lr 3e-3, constant, β2 0.99",
        optim('lr: 3e-3, warmup: 10, beta2: 0.99, schedule: "constant"'),
    ),
    # Loss terms
    "no_entropy": ("no entropy bonus", [(LOSS_TAIL, "+ 0.05 * kl_k3(logp, ref_logp)")]),
    "entropy_01": ("entropy bonus 0.1", [(LOSS_TAIL, "+ 0.05 * kl_k3(logp, ref_logp) + 0.1 * stop_grad(logp) * logp")]),
    "no_kl": ("no KL term", [(LOSS_TAIL, "+ 0.05 * stop_grad(logp) * logp")]),
    "kl_001": ("KL 0.01", [(LOSS_TAIL, "+ 0.01 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp")]),
    "seq_mean": (
        "seq-mean-token-mean aggregation",
        [("token_mean(\n        ppo_clip", "seq_mean_token_mean(\n        ppo_clip"),
         ("import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }",
          "import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean, seq_mean_token_mean }")],
    ),
    # Advantage
    "drgrpo": (
        "advantage without std normalisation (Dr. GRPO)",
        [("let adv      = grpo_advantage(", "let adv      = drgrpo_advantage("),
         ("import std.algo { grpo_advantage,", "import std.algo { grpo_advantage, drgrpo_advantage,")],
    ),
    "group_8": ("32 prompts × 8 samples", [("prompts_per_step = 16, group = 16", "prompts_per_step = 32, group = 8")]),
    # Sampling
    "temp_07": ("sampling temperature 0.7", [(GEN, "max_new: 4, temperature: 0.7)")]),
    # Model
    "untied": ("untied embeddings", plain_arch("tie_embeddings: false")),
    "tied_plain": ("tied embeddings via arch(…) (must match base)", plain_arch("tie_embeddings: true")),
    "rope_100": ("RoPE θ 100", arch("tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16, rope_theta: 100.0)")),
    "rope_1e6": ("RoPE θ 1e6", arch("tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16, rope_theta: 1000000.0)")),
    "norm_eps_1e-6": ("RMSNorm ε 1e-6", plain_arch("tie_embeddings: true, norm_eps: 1e-6")),
    "layers_3": ("3 layers", arch("tiny_gpt(layers: 3, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)")),
    "hidden_128": ("hidden 128", arch("tiny_gpt(layers: 2, hidden: 128, heads: 4, vocab: reverse.vocab, max_len: 16)")),
    # Combinations
    "lr3_ent01": ("lr 3e-3, entropy bonus 0.1", optim("lr: 3e-3, warmup: 10") + VARIANTS_LATE["ent01"]),
    "lr3_nokl": ("lr 3e-3, no KL term", optim("lr: 3e-3, warmup: 10") + VARIANTS_LATE["nokl"]),
    "lr3_h128": ("lr 3e-3, hidden 128", optim("lr: 3e-3, warmup: 10") + VARIANTS_LATE["h128"]),
    "lr3_h128_untied": (
        "lr 3e-3, hidden 128, untied embeddings",
        optim("lr: 3e-3, warmup: 10") + arch(
            "arch(layers: 2, hidden: 128, heads: 4, kv_heads: 4, ffn: 512, vocab: reverse.vocab, "
            "max_len: 16, tie_embeddings: false)"),
    ),
    "lr3_h128_nokl": (
        "lr 3e-3, hidden 128, no KL term",
        optim("lr: 3e-3, warmup: 10") + VARIANTS_LATE["h128"] + VARIANTS_LATE["nokl"],
    ),
    # Learned absolute positions (`arch(…, positions: "learned")`), issue #23 item 3
    "learned": ("learned absolute positions, tied", plain_arch('tie_embeddings: true, positions: "learned"')),
    "learned_untied": ("learned positions, untied", plain_arch('tie_embeddings: false, positions: "learned"')),
    "learned_c099": (
        "learned positions, tied, constant LR, β2 0.99",
        plain_arch('tie_embeddings: true, positions: "learned"')
        + optim('lr: 1e-3, warmup: 10, beta2: 0.99, schedule: "constant"'),
    ),
    "learned_lr3": (
        "learned positions, tied, lr 3e-3",
        plain_arch('tie_embeddings: true, positions: "learned"') + optim("lr: 3e-3, warmup: 10"),
    ),
    "learned_lr3_untied": (
        "learned positions, untied, lr 3e-3",
        plain_arch('tie_embeddings: false, positions: "learned"') + optim("lr: 3e-3, warmup: 10"),
    ),
    "lr3_digits": (
        "lr 3e-3, logging each answer digit's accuracy (d1..d4 in metrics.jsonl)",
        optim("lr: 3e-3, warmup: 10") + VARIANTS_LATE["digits"],
    ),
}


def parse_seeds(text):
    seeds = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            seeds.extend(range(int(a), int(b) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def variant_source(name, base_text):
    _, subs = VARIANTS[name]
    text = base_text
    if name != "current":
        subs = ROTARY + subs
    for old, new in subs:
        if old not in text:
            sys.exit(f"variant {name}: `{old}` is not in {EXAMPLE.relative_to(ROOT)}")
        text = text.replace(old, new, 1)
    return text


def rewards(metrics):
    out = []
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line being written
        if "reward" in row:
            out.append(float(row["reward"]))
    return out


def first_reaching(values, threshold, window):
    for i in range(window, len(values) + 1):
        if sum(values[i - window:i]) / window >= threshold:
            return i
    return None


def run_one(rlc, program, seed, out_dir, args):
    cmd = [str(rlc), "run", str(program), "--seed", str(seed), "--stop-after",
           str(args.stop_after), "--out", str(out_dir)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="*", help="variant names (see --list) or .rl files")
    p.add_argument("--seeds", default="0", help="e.g. 0,1 or 0-4 (default 0)")
    p.add_argument("--stop-after", type=int, default=150, help="steps per run at most (150)")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--jobs", type=int, default=1, help="runs at the same time (1)")
    p.add_argument("--threads", type=int, default=0, help="--threads of each run (rlc's default)")
    p.add_argument("--rlc", default=str(ROOT / "target" / "release" / "rlc"))
    p.add_argument("--keep", help="keep the run folders under this directory")
    p.add_argument("--list", action="store_true", help="print the built-in variants")
    args = p.parse_args()
    if args.list:
        for name, (what, _) in VARIANTS.items():
            print(f"{name:16} {what}")
        return 0
    if not args.variants:
        p.error("no variants (try --list)")
    seeds = parse_seeds(args.seeds)
    base_text = EXAMPLE.read_text()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rlc-ablate-"))
    work.mkdir(parents=True, exist_ok=True)
    programs = []
    for v in args.variants:
        if v.endswith(".rl"):
            programs.append((Path(v).stem, Path(v).resolve()))
        elif v in VARIANTS:
            path = work / f"{v}.rl"
            path.write_text(variant_source(v, base_text))
            programs.append((v, path))
        else:
            sys.exit(f"unknown variant `{v}` (see --list)")
    jobs = [(name, prog, seed) for name, prog in programs for seed in seeds]
    results = {}
    running = []
    started = time.time()
    while jobs or running:
        while jobs and len(running) < max(1, args.jobs):
            name, prog, seed = jobs.pop(0)
            out = work / f"{name}.seed{seed}"
            running.append((name, seed, out, run_one(args.rlc, prog, seed, out, args), time.time()))
        time.sleep(0.5)
        still = []
        for name, seed, out, proc, t0 in running:
            values = rewards(out / "metrics.jsonl")
            hit = first_reaching(values, args.threshold, args.window)
            done = proc.poll() is not None
            if hit is not None and not done:
                proc.terminate()  # this script's own child
                proc.wait()
                done = True
            if not done:
                still.append((name, seed, out, proc, t0))
                continue
            err = proc.stderr.read() if proc.stderr else ""
            if hit is None and proc.returncode not in (0, None) and not values:
                results[(name, seed)] = "failed"
                print(f"# {name} seed {seed}: failed:\n{err.strip()[-2000:]}", file=sys.stderr)
            else:
                results[(name, seed)] = str(hit) if hit is not None else f"not within {len(values)}"
            last = sum(values[-args.window:]) / max(1, len(values[-args.window:])) if values else 0.0
            print(f"# {name} seed {seed}: {results[(name, seed)]} "
                  f"(last rolling mean {last:.2f}, {time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        running = still
    print(f"| variant | what | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|---|" + "---|" * len(seeds))
    for name, _ in programs:
        what = VARIANTS[name][0] if name in VARIANTS else name
        print(f"| `{name}` | {what} | " + " | ".join(results[(name, s)] for s in seeds) + " |")
    print(f"# {time.time() - started:.0f} s in all; run folders in {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
