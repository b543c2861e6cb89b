//! `tp(3)` on the three `place` lines of a 4-head model with 4 key/value heads and 16 tokens:
//! the degree divides neither the heads, nor the key/value heads, nor the vocabulary. One
//! mistake, one E0503 at the first line (nine diagnostics before: E0503, E0504 and E0506 on
//! each line; three after the first merge), the other lines labels, the key/value heads and
//! the vocabulary notes.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 3)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..3] with tp(3)  //~ E0503
place policy.generate on local[0..3] with tp(3)
place reference       on local[0..3] with tp(3)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8)
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    let ref = reference.logprobs(rollout)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old, adv) + 0.01 * kl_k3(logp, ref), rollout.mask)
    }
  }
}
