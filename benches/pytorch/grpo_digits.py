#!/usr/bin/env python3
"""The main job (examples/grpo_digits.rl) side by side: `rlc run` against a plain PyTorch eager
implementation of the same job, run alternately in one invocation.

The PyTorch side is written by hand, as an engineer would write the job without rlc, but every
setting comes from the plan `rlc build` writes for the example (architecture, initialisation
scale, optimiser, schedule, batch, group, minibatches, data-parallel split, sampling), so the
script follows the example when it changes. What the plan does not carry as numbers (the loss
closure, the reward function, the advantage, the logged metrics and the std.algo functions they
call) is checked against the text this script implements: a change there stops the benchmark
with an error instead of silently comparing two different jobs. So does any architecture or
layout setting the script does not implement.

What the PyTorch side computes, per loop step (the example's pipeline, in its order):

1. `reverse.sample(P)`: P prompts `^d1 d2 d3 d4=` (16-token task vocabulary, std.task.digits);
   the target is the digits reversed then `$` (EOS), cut to `max_new`.
2. `policy.generate(n: G, max_new, temperature)`: each prompt prefilled once into a KV cache,
   then G samples per prompt decoded one token at a time (softmax sampling at the temperature;
   after EOS a row gets the pad token and mask 0, the EOS itself is a real token).
3. `policy.logprobs` and `reference.logprobs`: one full forward each over prompt + response.
4. `exact`: the fraction of the response's real tokens equal to the target; `grpo_advantage`:
   (s − group mean) / (unbiased group std + 1e-6), per token under the mask.
5. `policy.update(epochs, minibatch)`: minibatch k of M holds the rows g with g mod M = k; each
   data rank r of dp holds rows [r·B/dp, (r+1)·B/dp) and cuts its share of a minibatch into
   `accumulation` micro-batches; the closure `token_mean(ppo_clip + 0.05·kl_k3 + 0.05·sg(logp)·logp)`
   is evaluated per micro-batch, divided by the micro-batches, and the gradients averaged over
   the data ranks (one process here: the mean of the ranks' losses, one backward pass per
   minibatch). Global-norm clipping, AdamW (torch.optim.AdamW: the same update as rlc's),
   linear warm-up from 0 then cosine/linear/constant to `min_lr_ratio · lr` over all the run's
   optimizer steps, evaluated at the optimizer's step count before the step (as rlc does).

Usage (scripts/bench-vs-pytorch.sh sets up the environment and calls this):

    python benches/pytorch/grpo_digits.py --rlc target/release/rlc-run --steps 300 --chunk 50
"""

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The main job with std.recipes.grpo's loop written out (the same plan): its text is what this
# script checks its own loop against.
EXAMPLE = ROOT / "examples" / "grpo_digits_by_hand.rl"
ALGO = ROOT / "stdlib" / "std" / "algo.rl"

# ------------------------------------------------------------------------------------------------
# What this script implements, as text: the benchmark refuses to run if the example or std.algo
# say something else. Compared with comments dropped and whitespace removed.

UPDATE_BODY = """
token_mean(
  ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp,
  rollout.mask,
)
"""

PIPELINE_LINES = [
    "model reference: CausalLM = frozen(policy)",
    "import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }",
    "let prompts = reverse.sample(prompts_per_step)",
    "let old_logp = policy.logprobs(rollout)",
    "let ref_logp = reference.logprobs(rollout)",
    "let score = exact(rollout.response, rollout.target, rollout.mask)",
    "let adv = grpo_advantage(score, rollout.group, rollout.mask)",
    "fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {"
    " mean(f32(resp == target), over: T, mask: mask) }",
    "log { reward: mean(score), kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),"
    " entropy: token_mean(0.0 - old_logp, rollout.mask), }",
]

ALGO_BODIES = {
    "masked_mean": "sum(x, mask: m) / (count(m) + 1e-8)",
    "per_token": "where(m, a, 0.0)",
    "grpo_seq_advantage": """
        let n     = group_count(by: group)
        let mu    = where(n > 1.0, group_mean(score, by: group), 0.0)
        let sigma = where(n > 1.0, group_std(score, by: group), 1.0)
        let a     = (score - mu) / (sigma + 1e-6)
        a""",
    "grpo_advantage": "per_token(grpo_seq_advantage(score, group), mask)",
    "kl_k3": """
        let k = clamp(ref_logp - logp, -20.0, 20.0)
        clamp(exp(k) - k - 1.0, -10.0, 10.0)""",
    "log_ratio": "clamp(logp - old_logp, -20.0, 20.0)",
    "ppo_clip_plain": """
        let ratio = exp(log_ratio(logp, old_logp))
        max(-adv * ratio, -adv * clamp(ratio, 1.0 - eps_low, 1.0 + eps_high))""",
    "ppo_clip_range": """
        let lc = ppo_clip_plain(logp, old_logp, adv, eps_low: eps_low, eps_high: eps_high)
        where(adv < 0.0, min(-adv * c, lc), lc)""",
    "ppo_clip": "ppo_clip_range(logp, old_logp, adv, eps_low: eps, eps_high: eps, c: 3.0)",
    "token_mean": "masked_mean(loss, m)",
}

# The task vocabulary (runtime/src/data/tokens.rs): digits 0–9, then + = ^ $ _ and a spare.
PLUS, EQUALS, BOS, EOS, PAD, VOCAB = 10, 11, 12, 13, 14, 16

# Architecture settings this script implements (anything else in the plan stops it).
ARCH_KEYS = {
    "preset",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "max_len",
    "tie_embeddings",
    "rope_theta",
    "norm_eps",
    "positions",
}
POSITIONS = {"rope", "learned"}
INIT_STD = 0.02  # runtime/src/model/layers.rs INIT_STD


class Mismatch(Exception):
    """The example, the plan or std.algo says something this script does not implement."""


def squash(text):
    """`text` without `//` comments and without any whitespace."""
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\s+", "", text)


def fn_body(source, name):
    """The body text of `fn name(…) … { body }` in `source` (braces matched)."""
    m = re.search(r"\bfn\s+" + re.escape(name) + r"\s*\(", source)
    if not m:
        raise Mismatch(f"std.algo has no function `{name}`")
    open_at = source.index("{", m.end())
    depth, i = 0, open_at
    while True:
        if source[i] == "{":
            depth += 1
        elif source[i] == "}":
            depth -= 1
            if depth == 0:
                return source[open_at + 1 : i]
        i += 1


def check_texts(example_source, algo_source):
    flat = squash(example_source)
    m = re.search(r"policy\.update\(rollout,epochs:\d+,minibatch:\d+\)\{logp->", flat)
    if not m:
        raise Mismatch("the example has no `policy.update(rollout, epochs: E, minibatch: M) { logp -> … }`")
    rest = flat[m.end() :]
    depth, i = 1, 0
    while depth:
        depth += {"{": 1, "}": -1}.get(rest[i], 0)
        i += 1
    body = rest[: i - 1]
    if body != squash(UPDATE_BODY):
        raise Mismatch(
            "the example's update closure is not the loss this script implements:\n"
            f"  example: {body}\n  script:  {squash(UPDATE_BODY)}\n"
            "update benches/pytorch/grpo_digits.py (UPDATE_BODY and `loss()`) with it"
        )
    for line in PIPELINE_LINES:
        if squash(line) not in flat:
            raise Mismatch(f"the example no longer says `{line}`: update benches/pytorch/grpo_digits.py")
    for name, expected in ALGO_BODIES.items():
        got = squash(fn_body(algo_source, name))
        if got != squash(expected):
            raise Mismatch(
                f"std.algo's `{name}` changed:\n  std.algo: {got}\n  script:   {squash(expected)}"
            )


# ------------------------------------------------------------------------------------------------
# The plan


class Job:
    """The settings of the example's plan that the PyTorch side follows."""

    def __init__(self, plan):
        self.steps = plan["steps"]
        ops = plan["ops"]
        kinds = [op["kind"]["op"] for op in ops]

        def one(kind, **match):
            found = [
                op["kind"]
                for op in ops
                if op["kind"]["op"] == kind and all(op["kind"].get(k) == v for k, v in match.items())
            ]
            if len(found) != 1:
                raise Mismatch(f"the plan has {len(found)} `{kind}` ops {match or ''}, expected 1")
            return found[0]

        expected_kinds = sorted(
            ["sample", "generate", "logprobs", "logprobs", "update", "log", "checkpoint", "weight_sync"]
            + ["kernel"] * 7
        )
        if sorted(kinds) != expected_kinds:
            raise Mismatch(f"the plan's ops are {sorted(kinds)}, expected {expected_kinds}")
        functions = sorted(op["kind"]["function"] for op in ops if op["kind"]["op"] == "kernel")
        expected_fns = sorted(["exact", "grpo_advantage", "mean", "kl_k3", "token_mean", "sub", "token_mean"])
        if functions != expected_fns:
            raise Mismatch(f"the plan's kernels are {functions}, expected {expected_fns}")

        # rlc takes the policy's `old_logp` from the sampler where the plan says so
        # (`from_sampling`); the PyTorch side then does the same, so both run the same job.
        self.sampled_old_logp = any(
            op["kind"]["op"] == "logprobs" and op["kind"].get("from_sampling") is not None for op in ops
        )

        sample = one("sample")
        self.prompts = sample["count"]
        dataset = {d["name"]: d for d in plan["datasets"]}[sample["dataset"]]["source"]
        if dataset.get("from") != "task" or dataset.get("task") != "reverse_digits":
            raise Mismatch(f"the dataset is {dataset}, this script implements task reverse_digits")
        self.digits = dataset["digits"]

        gen = one("generate", role="policy")
        self.group = gen["n"]
        self.max_new = gen["max_new"]
        self.temperature = gen["temperature"]
        if gen.get("top_p", 1.0) not in (None, 1.0) or gen.get("top_k") is not None:
            raise Mismatch(f"generate has top_p {gen.get('top_p')} / top_k {gen.get('top_k')}: not implemented")
        if self.temperature <= 0:
            raise Mismatch("greedy generation (temperature 0) is not implemented")
        self.batch = gen["batch"]
        if self.batch != self.prompts * self.group:
            raise Mismatch(f"batch {self.batch} is not prompts {self.prompts} × group {self.group}")
        self.prompt_len = gen["prompt_len"]
        if self.prompt_len != self.digits + 2:
            raise Mismatch(f"prompt length {self.prompt_len} is not digits + 2")

        one("logprobs", role="policy")
        one("logprobs", role="reference")
        upd = one("update", role="policy")
        self.epochs = upd["epochs"]
        self.minibatches = upd.get("minibatches") or 1
        self.accumulation = upd.get("accumulation") or 1
        if upd["loss"]["param"] != "logp":
            raise Mismatch("the update closure's parameter is not `logp`")
        self.optimizer = upd["optimizer"]
        self.optimizer_steps_per_step = upd.get("optimizer_steps") or 1
        if self.optimizer_steps_per_step != self.epochs * self.minibatches:
            raise Mismatch("optimizer steps per loop step ≠ epochs × minibatches")

        roles = {r["name"]: r for r in plan["roles"]}
        policy, reference = roles["policy"], roles["reference"]
        if policy["init"] != {"from": "random", "seed": policy["init"].get("seed")}:
            raise Mismatch(f"policy init {policy['init']}: only random init is implemented")
        self.init_seed = policy["init"]["seed"]
        if reference["init"] != {"from": "copy_of", "role": "policy"} or not reference["frozen"]:
            raise Mismatch("the reference is not a frozen copy of the policy")
        if policy["precision"] != "f32":
            raise Mismatch(f"precision {policy['precision']}: only f32 is implemented")
        if policy.get("recompute"):
            raise Mismatch("activation recomputation is not implemented")
        self.arch = dict(policy["arch"])
        unknown = set(self.arch) - ARCH_KEYS
        if unknown:
            raise Mismatch(
                f"arch settings {sorted(unknown)} are not implemented by the PyTorch side "
                "(benches/pytorch/grpo_digits.py, class Decoder)"
            )
        self.arch.setdefault("positions", "rope")
        if self.arch["positions"] not in POSITIONS:
            raise Mismatch(f"arch positions `{self.arch['positions']}` is not implemented")
        if self.arch != reference["arch"] | {"positions": self.arch["positions"]}:
            raise Mismatch("policy and reference architectures differ")
        if self.arch["vocab"] != VOCAB:
            raise Mismatch(f"vocab {self.arch['vocab']} is not the task's {VOCAB}")
        opt = self.optimizer
        if opt["name"] != "adamw":
            raise Mismatch(f"optimizer {opt['name']}: only adamw is implemented")
        if opt["schedule"] not in ("cosine", "linear", "constant"):
            raise Mismatch(f"schedule {opt['schedule']} is not implemented")

        instances = {i["id"]: i for i in plan["instances"]}
        layouts = [i["layout"] for i in instances.values()]
        for layout in layouts:
            others = {k: v for k, v in layout.items() if k not in ("dp", "micro") and v != 1}
            if others:
                raise Mismatch(f"layout {layout}: only data parallelism is implemented")
        self.dp = instances["policy.train"]["layout"]["dp"]
        if self.batch % self.dp:
            raise Mismatch(f"batch {self.batch} does not split over dp {self.dp}")

    def lr(self, optimizer_step):
        """rlc's Schedule::lr (runtime/src/optim/schedule.rs) at the optimizer's step count."""
        opt = self.optimizer
        peak, warmup = opt["lr"], opt["warmup"]
        total = self.steps * self.optimizer_steps_per_step
        if optimizer_step < warmup:
            return peak * optimizer_step / warmup
        if opt["schedule"] == "constant":
            return peak
        low = peak * opt["min_lr_ratio"]
        progress = min((optimizer_step - warmup) / max(total - warmup, 1), 1.0)
        if opt["schedule"] == "cosine":
            remaining = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            remaining = 1.0 - progress
        return low + (peak - low) * remaining


def build_plan(rlc, example, out, forward_logprobs):
    """The plan of `example`, written to `out`: both sides run it (rlc from the file, so an edit
    of the example while the benchmark runs changes neither side). `forward_logprobs`: built
    with `--forward-logprobs` (no op takes the sampler's log-probs)."""
    cmd = [rlc, "build", str(example), "-o", str(out)]
    if forward_logprobs:
        cmd.append("--forward-logprobs")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: rlc build {example} failed:\n{done.stdout}{done.stderr}")
    return json.loads(Path(out).read_text())


# ------------------------------------------------------------------------------------------------
# The PyTorch implementation

def pytorch_side(torch):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, size, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(size))
            self.eps = eps

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    class Block(nn.Module):
        def __init__(self, a):
            super().__init__()
            h, self.heads, self.kv_heads = a["hidden"], a["heads"], a["kv_heads"]
            self.head_dim = h // self.heads
            self.ln1 = RMSNorm(h, a["norm_eps"])
            self.q = nn.Linear(h, self.heads * self.head_dim, bias=False)
            self.k = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
            self.v = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
            self.o = nn.Linear(self.heads * self.head_dim, h, bias=False)
            self.ln2 = RMSNorm(h, a["norm_eps"])
            self.gate = nn.Linear(h, a["ffn"], bias=False)
            self.up = nn.Linear(h, a["ffn"], bias=False)
            self.down = nn.Linear(a["ffn"], h, bias=False)

        def forward(self, x, rope, cache=None):
            b, t, _ = x.shape
            y = self.ln1(x)
            q = self.q(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
            k = self.k(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = self.v(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            if rope is not None:
                q, k = rotate(q, *rope), rotate(k, *rope)
            causal = True
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], 2)
                    v = torch.cat([cache["v"], v], 2)
                    causal = False  # one new token attends to every cached one
                cache["k"], cache["v"] = k, v
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=causal and t > 1, enable_gqa=self.kv_heads != self.heads
            )
            x = x + self.o(out.transpose(1, 2).reshape(b, t, -1))
            y = self.ln2(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y))

    class Decoder(nn.Module):
        """A Llama-style decoder as runtime/src/model builds it: RMSNorm before attention and
        MLP, rotary (half-split, θ = rope_theta) or learned absolute positions, SwiGLU, a final
        RMSNorm, an LM head tied to the embedding or not; every matrix N(0, 0.02), norms 1."""

        def __init__(self, a):
            super().__init__()
            self.a = a
            self.embed = nn.Embedding(a["vocab"], a["hidden"])
            self.learned = a["positions"] == "learned"
            if self.learned:
                self.positions = nn.Embedding(a["max_len"], a["hidden"])
            self.blocks = nn.ModuleList(Block(a) for _ in range(a["layers"]))
            self.norm = RMSNorm(a["hidden"], a["norm_eps"])
            self.head = None if a["tie_embeddings"] else nn.Linear(a["hidden"], a["vocab"], bias=False)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=INIT_STD)
            head_dim = a["hidden"] // a["heads"]
            self.register_buffer(
                "inv_freq",
                1.0 / a.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2).float() / head_dim),
                persistent=False,
            )

        def forward(self, ids, start=0, caches=None):
            t = ids.shape[1]
            pos = torch.arange(start, start + t)
            x = self.embed(ids)
            rope = None
            if self.learned:
                x = x + self.positions(pos)
            else:
                freqs = pos.float()[:, None] * self.inv_freq[None, :]
                emb = torch.cat([freqs, freqs], -1)
                rope = (emb.cos(), emb.sin())
            for i, block in enumerate(self.blocks):
                x = block(x, rope, None if caches is None else caches[i])
            x = self.norm(x)
            weight = self.embed.weight if self.head is None else self.head.weight
            return F.linear(x, weight)

    return Decoder


class PyTorchJob:
    def __init__(self, torch, job, seed, reuse_sampling_logp=False):
        self.torch, self.job = torch, job
        # `old_logp` from the sampling distribution instead of a second forward pass: the same
        # values to rounding (the weights have not changed since generation, temperature 1, no
        # top-k/top-p), an optimisation rlc could make; off by default (the example's job).
        self.reuse = reuse_sampling_logp
        if self.reuse and (job.temperature != 1.0):
            raise Mismatch("sampling log-probs equal old_logp only at temperature 1")
        self.errors = []
        Decoder = pytorch_side(torch)
        torch.manual_seed(job.init_seed)
        self.policy = Decoder(job.arch)
        self.reference = Decoder(job.arch)
        self.reference.load_state_dict(self.policy.state_dict())
        self.reference.requires_grad_(False)
        opt = job.optimizer
        decay = [p for p in self.policy.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.policy.parameters() if p.dim() < 2]
        self.adam = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": opt["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=opt["lr"],
            betas=(opt["beta1"], opt["beta2"]),
            eps=opt["eps"],
        )
        self.optimizer_steps = 0
        self.gen = torch.Generator().manual_seed(seed)

    # -- the pipeline's functions

    def sample_prompts(self):
        t = self.torch
        digits = t.randint(0, 10, (self.job.prompts, self.job.digits), generator=self.gen)
        n = self.job.prompts
        prompts = t.cat([t.full((n, 1), BOS), digits, t.full((n, 1), EQUALS)], 1)
        target = t.cat([digits.flip(1), t.full((n, 1), EOS)], 1)[:, : self.job.max_new]
        if target.shape[1] < self.job.max_new:
            target = t.cat([target, t.full((n, self.job.max_new - target.shape[1]), PAD)], 1)
        return prompts, target

    def generate(self, prompts):
        t, job = self.torch, self.job
        g = job.group
        with t.inference_mode():
            caches = [{} for _ in range(job.arch["layers"])]
            logits = self.policy(prompts, 0, caches)[:, -1]
            for c in caches:
                c["k"] = c["k"].repeat_interleave(g, 0)
                c["v"] = c["v"].repeat_interleave(g, 0)
            logits = logits.repeat_interleave(g, 0)
            rows = logits.shape[0]
            finished = t.zeros(rows, dtype=t.bool)
            tokens, alive, logps = [], [], []
            for i in range(job.max_new):
                probs = t.softmax(logits / job.temperature, -1)
                chosen = t.multinomial(probs, 1, generator=self.gen).squeeze(1)
                token = t.where(finished, t.full_like(chosen, PAD), chosen)
                alive.append(~finished)
                finished = finished | (token == EOS)
                tokens.append(token)
                if self.reuse:
                    logps.append(t.log_softmax(logits.float(), -1).gather(1, token[:, None]).squeeze(1))
                if bool(finished.all()) or i + 1 == job.max_new:
                    break
                logits = self.policy(token[:, None], prompts.shape[1] + i, caches)[:, -1]
            response = t.stack(tokens, 1)
            mask = t.stack(alive, 1)
            logp = t.stack(logps, 1) if self.reuse else None
            pad = job.max_new - response.shape[1]
            if pad:
                response = t.cat([response, t.full((rows, pad), PAD)], 1)
                mask = t.cat([mask, t.zeros((rows, pad), dtype=t.bool)], 1)
                if self.reuse:
                    logp = t.cat([logp, t.zeros((rows, pad))], 1)
        return response, mask, logp

    def logprobs(self, model, ids):
        logits = model(ids)[:, :-1]
        lp = self.torch.log_softmax(logits.float(), -1).gather(2, ids[:, 1:, None]).squeeze(2)
        return lp[:, self.job.prompt_len - 1 :]

    @staticmethod
    def token_mean(t, x, m):
        return t.where(m, x, 0.0).sum() / (m.sum() + 1e-8)

    def loss(self, logp, old_logp, adv, ref_logp, mask):
        """The example's closure: token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2)
        + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp, rollout.mask)."""
        t = self.torch
        ratio = t.exp(t.clamp(logp - old_logp, -20.0, 20.0))
        lc = t.maximum(-adv * ratio, -adv * t.clamp(ratio, 1.0 - 0.2, 1.0 + 0.2))
        pg = t.where(adv < 0.0, t.minimum(-adv * 3.0, lc), lc)
        k = t.clamp(ref_logp - logp, -20.0, 20.0)
        kl = t.clamp(t.exp(k) - k - 1.0, -10.0, 10.0)
        return self.token_mean(t, pg + 0.05 * kl + 0.05 * logp.detach() * logp, mask)

    # -- one loop step

    def step(self):
        t, job = self.torch, self.job
        times = {}
        clock = time.perf_counter()

        def lap(name):
            nonlocal clock
            now = time.perf_counter()
            times[name] = times.get(name, 0.0) + now - clock
            clock = now

        prompts, target = self.sample_prompts()
        lap("other")
        response, mask, sampled_logp = self.generate(prompts)
        lap("generate")
        ids = t.cat([prompts.repeat_interleave(job.group, 0), response], 1)
        with t.no_grad():
            if self.reuse:
                old_logp = sampled_logp
            else:
                old_logp = self.logprobs(self.policy, ids)
            ref_logp = self.logprobs(self.reference, ids)
            if self.reuse and len(self.errors) < 3:
                # How far the sampling log-probs are from a forward pass's (off the clock).
                clock_off = time.perf_counter()
                full = self.logprobs(self.policy, ids)
                self.errors.append(float(t.where(mask, (full - old_logp).abs(), 0.0).max()))
                clock += time.perf_counter() - clock_off
        lap("forward")
        target = target.repeat_interleave(job.group, 0)
        hits = t.where(mask, (response == target).float(), 0.0).sum(1)
        reward = hits / mask.sum(1).clamp_min(1).float()
        scores = reward.view(-1, job.group)
        if job.group > 1:
            adv_seq = (scores - scores.mean(1, keepdim=True)) / (scores.std(1, keepdim=True) + 1e-6)
        else:
            adv_seq = scores / (1.0 + 1e-6)
        adv = t.where(mask, adv_seq.reshape(-1, 1), 0.0)
        lap("kernel")
        rows = job.batch
        per_rank = rows // job.dp
        index = t.arange(rows)
        for _ in range(job.epochs):
            for k in range(job.minibatches):
                mine = index[index % job.minibatches == k]
                logp = self.logprobs(self.policy, ids[mine])
                total = 0.0
                for r in range(job.dp):
                    share = ((mine >= r * per_rank) & (mine < (r + 1) * per_rank)).nonzero().squeeze(1)
                    size = -(-len(share) // job.accumulation)
                    for chunk in share.split(max(size, 1)):
                        at = mine[chunk]
                        part = self.loss(logp[chunk], old_logp[at], adv[at], ref_logp[at], mask[at])
                        total = total + part / job.accumulation
                loss = total / job.dp
                self.adam.zero_grad(set_to_none=True)
                loss.backward()
                t.nn.utils.clip_grad_norm_(self.policy.parameters(), job.optimizer["clip"])
                lr = job.lr(self.optimizer_steps)
                for group in self.adam.param_groups:
                    group["lr"] = lr
                self.adam.step()
                self.optimizer_steps += 1
        lap("train")
        k = t.clamp(ref_logp - old_logp, -20.0, 20.0)
        kl_tokens = t.clamp(t.exp(k) - k - 1.0, -10.0, 10.0)
        metrics = {
            "reward": float(reward.mean()),
            "kl": float(self.token_mean(t, kl_tokens, mask)),
            "entropy": float(self.token_mean(t, -old_logp, mask)),
        }
        lap("other")
        metrics["seconds"] = sum(times.values())
        metrics.update({f"time/{k}": v for k, v in times.items()})
        return metrics


# ------------------------------------------------------------------------------------------------
# rlc


def run_rlc(rlc, plan, out, seed, threads, upto, resume):
    cmd = [rlc, "run", str(plan), "--out", str(out), "--seed", str(seed), "--threads", str(threads)]
    cmd += ["--stop-after", str(upto)]
    if resume:
        cmd.append("--resume")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"rlc run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = (Path(out) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# ------------------------------------------------------------------------------------------------
# Report

PHASES = ["generate", "forward", "kernel", "train", "other"]


def phases_of(row):
    """A step's seconds per phase; rlc's `communication` and `offload` count as `other`."""
    out = dict.fromkeys(PHASES, 0.0)
    for key, value in row.items():
        if key.startswith("time/"):
            name = key[5:]
            out[name if name in out else "other"] += value or 0.0
    return out


def reach(rows, firsts, threshold, window):
    """(steps, seconds) to the first rolling-`window` mean reward ≥ threshold, or None. The first
    step after each switch between the two sides (`firsts`: their indices) counts at the median
    step time of the run: it carries that side's warm-up (rlc: reloading the checkpoint's state
    and compiling its kernels again), not the job's."""
    median = statistics.median(r["seconds"] for r in rows)
    seconds = 0.0
    for i, row in enumerate(rows):
        seconds += median if i in firsts else row["seconds"]
        if i + 1 >= window:
            mean = sum(r["reward"] for r in rows[i + 1 - window : i + 1]) / window
            if mean >= threshold:
                return i + 1, seconds
    return None


def summary(name, rows, firsts, args):
    steady = [r for i, r in enumerate(rows) if i not in firsts]
    med = statistics.median(r["seconds"] for r in steady)
    ph = {p: statistics.median(phases_of(r)[p] for r in steady) for p in PHASES}
    got = reach(rows, firsts, args.threshold, args.window)
    return {"name": name, "median_s": med, "phases": ph, "reach": got, "steps": len(rows),
            "last10": sum(r["reward"] for r in rows[-10:]) / min(10, len(rows))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--rlc",
        default=str(ROOT / "target" / "release" / "rlc-run"),
        help="the runtime build of rlc (`rlc-run`, made with `rlc` by cargo build --features runtime)",
    )
    ap.add_argument("--steps", type=int, default=300, help="loop steps each side runs")
    ap.add_argument("--chunk", type=int, default=50, help="steps per turn before switching sides")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of each side")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--out", default=None, help="where to keep the rlc run and both sides' metrics")
    ap.add_argument(
        "--forward-old-logp",
        action="store_true",
        help="both sides compute old_logp by a second forward pass (by default each takes the "
        "sampler's log-probs where the plan marks the op `from_sampling`)",
    )
    ap.add_argument("--check-only", action="store_true", help="check the example and plan, then stop")
    args = ap.parse_args()

    if not Path(args.rlc).is_file():
        sys.exit(f"error: {args.rlc} is missing (cargo build --release --features runtime makes it)")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-vs-pytorch-"))
    out.mkdir(parents=True, exist_ok=True)
    plan_file = out / "plan.json"
    plan = build_plan(args.rlc, EXAMPLE, plan_file, args.forward_old_logp)
    try:
        source = plan["sources"]["files"][plan["sources"]["root"]]
        check_texts(source, ALGO.read_text())
        job = Job(plan)
    except Mismatch as e:
        sys.exit(f"error: the PyTorch side does not implement this example: {e}")
    if args.steps > job.steps:
        sys.exit(f"error: --steps {args.steps} is more than the example's {job.steps}")
    print(
        f"job: {job.prompts} prompts x {job.group} samples, max_new {job.max_new}, "
        f"temperature {job.temperature}; arch {job.arch}; optimizer {job.optimizer}; "
        f"{job.epochs} epoch(s) x {job.minibatches} minibatch(es), accumulation {job.accumulation}, dp {job.dp}",
        flush=True,
    )
    if args.check_only:
        return

    import torch

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; rlc {args.rlc}", flush=True)

    # A copy of the runtime build (`rlc-run`, which `rlc run` becomes and which runs every `rlc`
    # command itself), so that a build while the benchmark runs cannot swap it between turns.
    (out / "bin").mkdir(exist_ok=True)
    shutil.copy2(args.rlc, out / "bin" / "rlc-run")
    args.rlc = str(out / "bin" / "rlc-run")
    rlc_dir = out / "rlc"
    reuse = job.sampled_old_logp
    print(f"old_logp: {'the sampler' if reuse else 'a forward pass'} on both sides", flush=True)
    ptj = PyTorchJob(torch, job, args.seed, reuse)
    torch_rows, rlc_rows = [], []
    torch_firsts, rlc_firsts = set(), set()
    done = 0
    while done < args.steps:
        upto = min(done + args.chunk, args.steps)
        # rlc's first turn starts the run; later turns resume it from the checkpoint `--stop-after`
        # wrote (bit-exactly).
        rlc_firsts.add(done)
        started = time.perf_counter()
        rlc_rows = run_rlc(args.rlc, plan_file, rlc_dir, args.seed, args.threads, upto, resume=done > 0)
        rlc_wall = time.perf_counter() - started
        torch_firsts.add(done)
        started = time.perf_counter()
        for _ in range(done, upto):
            torch_rows.append(ptj.step())
        torch_wall = time.perf_counter() - started
        done = upto
        print(
            f"steps {done:4}: rlc {rlc_wall:6.1f} s (process), reward {rlc_rows[-1]['reward']:.3f} | "
            f"pytorch {torch_wall:6.1f} s, reward {torch_rows[-1]['reward']:.3f}",
            flush=True,
        )
    if len(rlc_rows) != args.steps:
        sys.exit(f"rlc wrote {len(rlc_rows)} metrics lines for {args.steps} steps")
    (out / "pytorch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in torch_rows))

    res = [summary("rlc", rlc_rows, rlc_firsts, args), summary("pytorch", torch_rows, torch_firsts, args)]
    print()
    print(f"median step over {args.steps} steps (first step of each turn left out), ms:")
    print(f"{'':10}{'step':>8}" + "".join(f"{p:>10}" for p in PHASES))
    for r in res:
        print(f"{r['name']:10}{1e3 * r['median_s']:8.1f}" + "".join(f"{1e3 * r['phases'][p]:10.1f}" for p in PHASES))
    ratio = res[0]["median_s"] / res[1]["median_s"]
    print(f"ratio rlc/pytorch (median step): {ratio:.2f}  (pytorch/rlc: {1 / ratio:.2f})")
    print(f"rolling-{args.window} mean reward >= {args.threshold}:")
    for r in res:
        if r["reach"]:
            steps, secs = r["reach"]
            print(f"  {r['name']:8} step {steps} ({secs:.1f} s of steps)")
        else:
            print(f"  {r['name']:8} not within {r['steps']} steps (last-10 mean {r['last10']:.3f})")
    if ptj.errors:
        print(f"pytorch: sampling log-probs vs a forward pass, max |difference| {max(ptj.errors):.2e}")
    print(f"metrics: {rlc_dir / 'metrics.jsonl'}, {out / 'pytorch.jsonl'}")
    (out / "summary.json").write_text(json.dumps({"ratio": ratio, "sides": res}, indent=1))


if __name__ == "__main__":
    main()
