//! `std.recipes`: whole training loops as generic pipelines. A job declares its models,
//! placement and data, and its pipeline is one call of a recipe:
//!
//! ```rl
//! pipeline train { grpo(policy: policy, reference: reference, data: reverse, reward: exact) }
//! ```
//!
//! Each recipe takes its roles (`CausalLM` models: the one trained, and a frozen reference
//! where it penalises drift), its data (a `Dataset`), its reward (a `Fn` called as
//! `reward(rollout.response, rollout.target, rollout.mask)` that returns one number per
//! response, `f32[B]`) and its settings. Settings default to the paper's values or, where the
//! paper leaves one open, to the most used trainer's (veRL); each recipe's comment says which.

import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }

/// GRPO (Shao et al. 2024, DeepSeekMath §4.1): `group` responses per prompt, each scored by
/// `reward`; the advantage of response `i` is its score normalised within its group,
/// `A_i = (s_i − mean(s)) / (std(s) + 1e-6)`, for each of its tokens; the loss is the clipped
/// surrogate plus a k3 KL penalty to the frozen `reference` and, unlike the paper, an entropy
/// bonus estimated from the sampled tokens (`stop_grad(logp)·logp`):
///
/// `L = token_mean(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip)·A) + kl·k3(π, π_ref) + entropy·logp·sg(logp))`
///
/// with `ρ = exp(logp − old_logp)`. Defaults: `clip = 0.2`, `kl = 0.04` (the paper's `ε` and
/// `β`); `entropy = 0` (veRL's); one epoch over the batch in minibatches of `minibatch`.
/// Logs `reward` (the mean score), `kl` and `entropy` (both token means, of the sampling
/// policy). Checkpoints `policy` every `checkpoint_every` steps.
pub pipeline grpo(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 16,
  group = 16,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  kl = 0.04,
  entropy = 0.0,
  epochs = 1,
  minibatch = 128,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: clip) + kl * kl_k3(logp, ref_logp) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(score),
      kl: token_mean(kl_k3(old_logp, ref_logp), rollout.mask),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every checkpoint_every steps { checkpoint policy }
  }
}
