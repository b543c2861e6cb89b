//! A reward whose shape does not fit the recipe: reported at the call and inside the recipe.

import std.models { tiny_gpt }
import std.recipes { grpo }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)
place policy on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)

fn per_token(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B, T] {
  f32(resp == target)
}

pipeline train {
  grpo(policy, reference, data: reverse, reward: per_token)  //~ E0301
}
