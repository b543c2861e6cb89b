//! The same PPO job with a warm-up one optimizer step shorter than the run (399 of 400): no
//! error.

import std.algo { gae, whiten, ppo_clip, value_loss, kl_k1, token_mean }
import std.models { tiny_gpt }
import std.task.digits { sort }

cluster local = cpu(devices: 2)

let arch_small = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: sort.vocab, max_len: 32)

model policy: CausalLM {
  arch  = arch_small
  init  = random(seed: 1)
  optim = adamw(lr: 1e-3, warmup: 399)
}
model reference: CausalLM = frozen(policy)
model critic: ValueModel {
  arch  = arch_small
  init  = random(seed: 2)
  optim = adamw(lr: 2e-3, warmup: 40)
}
model scorer: RewardModel {
  arch   = arch_small
  init   = random(seed: 3)
  frozen = true
}

place policy    on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)
place scorer    on local[0..2] with dp(2)
place critic    on local[0..2] with dp(2)

fn shaped_reward(score: f32[B], kl: f32[B, T], mask: Mask[B, T], last: Mask[B, T], beta: f32) -> f32[B, T] {
  where(last, score, 0.0) - beta * where(mask, kl, 0.0)
}

pipeline train(steps = 50, prompts_per_step = 64, beta = 0.05) {
  loop step in 0..steps {
    let prompts  = sort.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: 1, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let old_v    = critic.values(rollout)
    let score    = scorer.score(rollout)
    let reward   = shaped_reward(score, kl_k1(old_logp, ref_logp), rollout.mask, rollout.last, beta)
    let adv      = gae(reward, old_v, rollout.mask, gamma: 1.0, lam: 0.95)
    let ret      = adv + old_v
    policy.update(rollout, epochs: 2, minibatch: 16) { logp ->
      token_mean(ppo_clip(logp, old_logp, whiten(adv, rollout.mask), eps: 0.2), rollout.mask)
    }
    critic.update(rollout, epochs: 1, minibatch: 64) { v ->
      token_mean(value_loss(v, old_v, ret, clip: 0.5), rollout.mask)
    }
    log { score: mean(score) }
  }
}
