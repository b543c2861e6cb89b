//! examples/grpo_verifier.rl through a recipe that takes its verifier.

import "./verified.rl" { grpo_verified }
import std.models { tiny_gpt_abs }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

/// Partial credit for a reversal, and whether it is entirely right (`solved`).
verifier digits = program(
  "python3",
  "../../../examples/verifiers/digits.py",
  workers: 2,
  batch: 64,
  timeout: 30s,
  fields: ["answer"],
  metrics: ["solved"],
)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)

pipeline train {
  grpo_verified(policy, reference, data: reverse, check: digits)
}
