//! GRPO on a synthetic task: a small policy learns to reverse a string of digits.
//! Two CPU devices; the README's first command checks it and builds its plan.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse }

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 32)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)

/// 1 for each response token that matches the target, averaged over the response.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(where(mask, f32(resp == target), 0.0), over: T)
}

pipeline train(steps = 120, prompts_per_step = 16, group = 8) {
  loop step in 0..steps {
    let prompts  = reverse.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 64) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.001 * kl_k3(logp, ref_logp), rollout.mask)
    }
    log { reward: mean(reward), kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask) }
    every 50 steps { checkpoint policy }
  }
}
