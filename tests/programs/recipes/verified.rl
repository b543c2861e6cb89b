//! A recipe whose reward is an external verifier: GRPO on the verifier's `reward`, logging its
//! `solved` metric.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }

/// GRPO scored by `check`, which must report a `solved` metric.
pub pipeline grpo_verified(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  check: Verifier,
  steps = 500,
  prompts_per_step = 16,
  group = 16,
  max_new = 4,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let scores   = check(rollout)
    let adv      = grpo_advantage(scores.reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 128) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp) + 0.05 * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(scores.reward),
      solved: mean(scores.solved),
      kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),
    }
    every 100 steps { checkpoint policy }
  }
}
