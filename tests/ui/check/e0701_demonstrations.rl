//! A group estimator on demonstrations: each is its own group of one.

import std.algo { grpo_advantage, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
place policy on local[0..2] with dp(2)

pipeline sft(steps = 100) {
  loop step in 0..steps {
    let demos = reverse.demonstrations(32)
    let adv = grpo_advantage(reverse.score(demos), demos.group, demos.mask)  //~ E0701
    policy.update(demos) { logp -> token_mean(0.0 - adv * logp, demos.mask) }
  }
}
