//! A loss that normalises by each prompt's mean inside `update`, with minibatches that take
//! every other row: each group's samples are split over two minibatches.

import std.algo { token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  optim = adamw(lr: 1e-3)
}

place policy on local[0..2] with dp(2)

fn centred(x: f32[B], group: i32[B]) -> f32[B] {
  x - group_mean(x, by: group)
}

pipeline train(steps = 10) {
  loop step in 0..steps {
    let prompts = reverse.sample(16)
    let rollout = policy.generate(prompts, n: 4, max_new: 4)
    let reward  = mean(f32(rollout.response == rollout.target), over: T, mask: rollout.mask)
    policy.update(rollout, minibatch: 32) { logp ->  //~ E0707
      token_mean(0.0 - logp * centred(reward, rollout.group), rollout.mask)
    }
    policy.update(rollout) { logp ->
      token_mean(0.0 - logp * centred(reward, rollout.group), rollout.mask)
    }
  }
}
