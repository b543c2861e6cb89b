//! A recipe called inside a loop, next to other statements, as a value, and a recipe that is
//! not generic.

import std.models { tiny_gpt }
import std.recipes { grpo }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)
place policy on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline job(steps = 3) {
  loop step in 0..steps {
    log { steps: steps }
  }
}

pipeline train(steps = 4) {
  loop step in 0..steps {
    grpo(policy, reference, data: reverse, reward: exact)  //~ E1101
  }
  let x = grpo(policy, reference, data: reverse, reward: exact)  //~ E1101
  job()  //~ E1101
}
