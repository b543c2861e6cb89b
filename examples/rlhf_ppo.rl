//! RLHF, stage 3 of 3: PPO with a critic against the learned reward model. The policy and its
//! frozen reference start from the supervised policy (stage 1), the critic from it too (a
//! fresh value head), the scorer is the reward model of stage 2, frozen. The reward is the
//! scorer's sequence score at the last response token minus a per-token KL penalty; GAE
//! advantages, the clipped policy loss with an entropy bonus, the clipped value loss.
//!
//! The KL coefficient `beta` is carried from one step to the next by the loop and follows the
//! adaptive controller of `std.algo.adaptive_kl_beta` (RL_MATH.md): each step reads the `beta`
//! the step before left, and `beta = …` sets the next one, up to 1% a step (`horizon: 20`)
//! towards a mean per-token KL of `kl_target`.

import std.algo {
  gae,
  whiten,
  ppo_clip,
  value_loss,
  kl_k1,
  kl_shaped_reward,
  adaptive_kl_beta,
  token_mean,
}
import std.models { tiny_gpt }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

let arch_small = tiny_gpt(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)

model policy: CausalLM {
  arch  = arch_small
  init  = hf("../runs/rlhf/sft/checkpoints/policy/step-000060")
  optim = adamw(lr: 5e-4, warmup: 10)
}
model reference: CausalLM = frozen(policy)
model critic: ValueModel {
  arch  = arch_small
  init  = hf("../runs/rlhf/sft/checkpoints/policy/step-000060")
  optim = adamw(lr: 1e-3, warmup: 10)
}
model scorer: RewardModel {
  arch   = arch_small
  init   = hf("../runs/rlhf/reward/checkpoints/rm/step-000300")
  frozen = true
}

place policy    on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)
place critic    on local[0..2] with dp(2)
place scorer    on local[0..2] with dp(2)

/// 1 for each answer token the response got right, averaged over the answer (the task's own
/// reward, logged to show what the learned reward stands for).
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline ppo(steps = 150, prompts_per_step = 64, beta0 = 0.1, kl_target = 0.2, kl_horizon = 20.0) {
  loop step in 0..steps with (beta = beta0) {
    let prompts = reverse.sample(prompts_per_step)
    // Four digits and the EOS, as in the demonstrations.
    let rollout  = policy.generate(prompts, n: 1, max_new: 5, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let old_v    = critic.values(rollout)
    let score    = scorer.score(rollout)
    let kl       = token_mean(kl_k1(old_logp, ref_logp), rollout.mask)
    let reward   = kl_shaped_reward(score, kl_k1(old_logp, ref_logp), rollout.mask, rollout.last, beta)
    let adv      = gae(reward, old_v, rollout.mask, gamma: 1.0, lam: 0.95)
    let ret      = adv + old_v
    let adv_w    = whiten(adv, rollout.mask)
    // Clipped policy loss and an entropy bonus estimated from the sampled tokens
    // (`stop_grad(logp) * logp` has the entropy's gradient in expectation).
    policy.update(rollout, epochs: 2, minibatch: 32) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv_w, eps: 0.2) + 0.01 * stop_grad(logp) * logp, rollout.mask)
    }
    critic.update(rollout, epochs: 2, minibatch: 32) { v ->
      token_mean(value_loss(v, old_v, ret, clip: 0.5), rollout.mask)
    }
    // The next step's coefficient, from this step's KL.
    beta = adaptive_kl_beta(beta, kl, target: kl_target, n_steps: 1.0, horizon: kl_horizon)
    log {
      reward: mean(score),
      exact: mean(exact(rollout.response, rollout.target, rollout.mask)),
      kl: kl,
      beta: beta,
    }
    every 150 steps { checkpoint policy, critic }
  }
}
