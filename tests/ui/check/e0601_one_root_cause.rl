//! 16 prompts × 8 samples = 128 sequences on three devices, each phase with `dp(3)`: the four
//! phases that receive the batch are one mistake, reported once at the first of them.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 3)
model policy: CausalLM { arch = tiny_gpt(vocab: reverse.vocab)  optim = adamw(lr: 3e-3) }
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..3] with dp(3)
place policy.generate on local[0..3] with dp(3)
place reference       on local[0..3] with dp(3)

pipeline train(steps = 100) {
  loop step in 0..steps {
    let rollout = policy.generate(reverse.sample(16), n: 8, max_new: 8)  //~ E0601
    let adv = grpo_advantage(reverse.score(rollout), rollout.group, rollout.mask)
    let old = policy.logprobs(rollout)
    let ref = reference.logprobs(rollout)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old, adv) + 0.01 * kl_k3(logp, ref), rollout.mask)
    }
  }
}
