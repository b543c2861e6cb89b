//! A recipe instantiated as a job's whole pipeline: checked with its arguments bound.

import std.models { tiny_gpt }
import std.recipes { grpo }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)
place policy on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)

/// The fraction of the answer's tokens the response got right.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline train {
  grpo(policy, reference, data: reverse, reward: exact, steps: 10, max_new: 6)
}
