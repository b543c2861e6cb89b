//! `local[0..4]` on a cluster of two devices, written on three `place` lines: one E0501 naming
//! the three places.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..4] with dp(4)  //~ E0501
place policy.generate on local[0..4] with dp(4)
place reference       on local[0..4] with dp(4)

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
