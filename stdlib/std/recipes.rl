//! `std.recipes`: whole training loops as generic pipelines. A job declares its models,
//! placement and data, and its pipeline is one call of a recipe:
//!
//! ```rl
//! pipeline train { grpo(policy: policy, reference: reference, data: reverse, reward: exact) }
//! ```
//!
//! Each recipe takes its roles (`CausalLM` models: the one trained, and a frozen reference
//! where it penalises drift; a `ValueModel` critic for `ppo`), its data (a `Dataset`), its
//! reward (a `Fn` called as `reward(rollout.response, rollout.target, rollout.mask)` that
//! returns one number per response, `f32[B]`; the supervised `sft` and `dpo` take none) and
//! its settings. Settings default to the paper's values or, where the paper leaves one open,
//! to the most used trainer's (veRL, or TRL / OpenRLHF where the method is theirs); each
//! recipe's comment says which. The batch settings (`prompts_per_step`, `group`, `minibatch`,
//! `max_new`, `steps`) are sized for small jobs rather than the papers' clusters.
//!
//! The same names mean the same thing in every recipe: `policy`, `reference`, `critic`,
//! `data`, `reward`; `steps`, `prompts_per_step`, `group` (responses per prompt), `max_new`,
//! `temperature`; `clip` (the ratio's lower clip, and its upper one unless there is a
//! `clip_high`), `kl` (the KL coefficient), `entropy` (the entropy bonus's); `epochs`,
//! `minibatch`; `checkpoint_every`. The RL recipes log `reward`, the mean of `reward`'s scores.

import std.algo {
  grpo_advantage,
  drgrpo_advantage,
  rloo_advantage,
  reinforce_pp_advantage,
  remax_advantage,
  gae,
  whiten,
  informative_groups,
  overlong_penalty,
  ppo_clip,
  ppo_clip_range,
  gspo_loss,
  value_loss,
  kl_k1,
  kl_k3,
  kl_shaped_reward,
  bradley_terry,
  pair_accuracy,
  pair_margin,
  seq_score,
  token_mean,
  seq_mean_token_sum_norm,
}

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

/// Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective"):
/// GRPO without its two biases. The advantage is the score minus its group's mean, not divided
/// by the group's std, `A_i = s_i − mean(s)`; the loss sums each response's tokens and divides
/// by the generation budget `T` (the padded length, the same for every response) instead of
/// each response's length, so long wrong answers are not penalised less per token:
///
/// `L = Σ_{i,t} m·(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip)·A) + entropy·logp·sg(logp)) / T`
///
/// (`seq_mean_token_sum_norm`; veRL's `loss_agg_mode: seq-mean-token-sum-norm` with
/// `norm_adv_by_std_in_grpo: false`). No KL penalty and so no reference model (the paper's
/// runs drop it). Defaults: `clip = 0.2` (the paper's), `entropy = 0` (veRL's); the sampling
/// and batch settings are `grpo`'s. Logs `reward` (the mean score) and `entropy` (the token
/// mean of `−logp` under the sampling policy).
pub pipeline dr_grpo(
  policy: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 16,
  group = 16,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  entropy = 0.0,
  epochs = 1,
  minibatch = 128,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let adv      = drgrpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      seq_mean_token_sum_norm(
        ppo_clip(logp, old_logp, adv, eps: clip) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log { reward: mean(score), entropy: token_mean(0.0 - old_logp, rollout.mask) }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"):
/// GRPO's group-normalised advantage with four changes.
///
/// - Clip-higher: the ratio is clipped to `[1 − clip, 1 + clip_high]`, `clip = 0.2`,
///   `clip_high = 0.28` (the paper's `ε_low`, `ε_high`), with veRL's dual clip `c = 3` for
///   negative advantages (`ppo_clip_range`).
/// - Token-level loss: `token_mean` over every token of the batch.
/// - Overlong reward shaping: the score is `s_i + overlong_penalty(m, max_new, overlong_buffer,
///   factor: overlong_factor)`, 0 up to `max_new − overlong_buffer` tokens, then falling
///   linearly to `−overlong_factor` at `max_new`. Defaults: `overlong_factor = 1` (the paper's),
///   `overlong_buffer = max_new / 5` (the paper's 4096 of 20480 tokens). A task whose answers
///   always fill the budget (`reverse` with `max_new` the answer's length) gets the same
///   penalty on every response: it shifts `reward` and changes no advantage.
/// - Dynamic sampling: the paper over-samples and drops the groups whose scores are all equal
///   (`informative_groups`), refilling the batch. A batch's size is fixed when the job is
///   built, so here those groups are masked out of the loss instead: the loss's mask is
///   `rollout.mask` where `informative_groups(score, rollout.group)` holds, so the token mean
///   runs over the informative groups' tokens only (their advantages are zero anyway: what
///   changes is the denominator, as in the paper's filtered batch; the batch is not refilled).
///
/// `L = token_mean_{m'}(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip_high)·A) + entropy·logp·sg(logp))`
/// with `m' = m ∧ informative`. No KL penalty and so no reference model (the paper drops it).
/// `entropy = 0` (veRL's); the sampling and batch settings are `grpo`'s. Logs `reward` (the mean
/// task score, before the penalty), `overlong` (the mean penalty), `informative` (the fraction
/// of responses in informative groups) and `entropy`.
pub pipeline dapo(
  policy: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 16,
  group = 16,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  clip_high = 0.28,
  overlong_buffer = max_new / 5.0,
  overlong_factor = 1.0,
  entropy = 0.0,
  epochs = 1,
  minibatch = 128,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let task     = reward(rollout.response, rollout.target, rollout.mask)
    let penalty  = overlong_penalty(rollout.mask, max_new, overlong_buffer, factor: overlong_factor)
    let score    = task + penalty
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    let keep     = informative_groups(score, rollout.group)
    let m        = rows(rollout.mask, keep)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      let pg = ppo_clip_range(logp, old_logp, adv, eps_low: clip, eps_high: clip_high)
      token_mean(pg + entropy * stop_grad(logp) * logp, m)
    }
    log {
      reward: mean(task),
      overlong: mean(penalty),
      informative: mean(f32(keep)),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): GRPO's group-normalised
/// advantage with the importance ratio and the clip taken per sequence, not per token. The
/// sequence ratio is the geometric mean of the token ratios,
/// `s_i = exp(Σ_t m·(logp − old_logp) / |y_i|)`, clipped to `[1 − clip, 1 + clip_high]`:
///
/// `L = mean_i(mean_t(−min(s_i·A_i, clip(s_i, 1 − clip, 1 + clip_high)·A_i)))`
///
/// (`gspo_loss`: each token carries the sequence ratio's value and its own gradient,
/// aggregated by `seq_mean_token_mean`), plus `entropy·logp·sg(logp)` token-averaged. The clip
/// range is narrow because it bounds a whole sequence's ratio: `clip = 3e-4`,
/// `clip_high = 4e-4` (the paper's). No KL penalty and so no reference model (the paper's runs
/// have none); `entropy = 0` (veRL's); the sampling and batch settings are `grpo`'s. Logs
/// `reward` and `entropy`.
pub pipeline gspo(
  policy: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 16,
  group = 16,
  max_new = 16,
  temperature = 1.0,
  clip = 3e-4,
  clip_high = 4e-4,
  entropy = 0.0,
  epochs = 1,
  minibatch = 128,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      let pg    = gspo_loss(logp, old_logp, adv, rollout.mask, eps_low: clip, eps_high: clip_high)
      let bonus = token_mean(stop_grad(logp) * logp, rollout.mask)
      pg + entropy * bonus
    }
    log { reward: mean(score), entropy: token_mean(0.0 - old_logp, rollout.mask) }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// RLOO (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for
/// Learning from Human Feedback in LLMs"): `group` responses per prompt; each response's
/// baseline is the mean of the other `group − 1` responses' rewards (leave-one-out), so the
/// advantage is unbiased without a critic. The reward carries the KL penalty as a sequence
/// total, `r_i = s_i − kl·Σ_t m·(old_logp − ref_logp)` (k1, of the sampling policy), and
///
/// `A_i = r_i − mean_{j≠i}(r_j)` (`rloo_advantage`),
/// `L = token_mean(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip)·A) + entropy·logp·sg(logp))`.
///
/// Defaults as TRL's `RLOOTrainer`: `kl = 0.05`, `clip = 0.2`; `group = 4` (the paper's best
/// `k`); `entropy = 0`; one epoch (the paper's on-policy REINFORCE; the clip binds only from
/// the second minibatch on). Logs `reward` (the mean task score) and `kl` (the mean sequence
/// KL).
pub pipeline rloo(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 16,
  group = 4,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  kl = 0.05,
  entropy = 0.0,
  epochs = 1,
  minibatch = 64,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let seq_kl   = seq_score(kl_k1(old_logp, ref_logp), rollout.mask)
    let adv      = rloo_advantage(score - kl * seq_kl, rollout.group, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: clip) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log { reward: mean(score), kl: mean(seq_kl), entropy: token_mean(0.0 - old_logp, rollout.mask) }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
/// Language Models"): REINFORCE with PPO's clipped surrogate and no critic; the baseline is the
/// normalisation of the returns over the whole batch. The token reward is the score at the
/// last response token minus a per-token KL penalty (k1, of the sampling policy),
/// `r_t = s·[t = last] − kl·(old_logp_t − ref_logp_t)` (`kl_shaped_reward`); the returns are
/// `G_t = Σ_{t' ≥ t} γ^{t'−t}·r_{t'}`; the advantage is `G` whitened over every real token of
/// the batch (`reinforce_pp_advantage`):
///
/// `L = token_mean(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip)·A) + entropy·logp·sg(logp))`.
///
/// Defaults as OpenRLHF's (the paper's trainer): `kl = 0.01`, `gamma = 1`, `clip = 0.2`, one
/// response per prompt (`group = 1`: no group baseline is needed); `entropy = 0`. Logs
/// `reward` (the mean task score) and `kl` (the token mean).
pub pipeline reinforce_pp(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 64,
  group = 1,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  kl = 0.01,
  gamma = 1.0,
  entropy = 0.0,
  epochs = 1,
  minibatch = 64,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let kl_t     = kl_k1(old_logp, ref_logp)
    let r        = kl_shaped_reward(score, kl_t, rollout.mask, rollout.last, beta: kl)
    let adv      = reinforce_pp_advantage(r, rollout.mask, gamma: gamma)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: clip) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(score),
      kl: token_mean(kl_t, rollout.mask),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// ReMax (Li et al. 2024, "ReMax: A Simple, Effective, and Efficient Reinforcement Learning
/// Method for Aligning Large Language Models"): REINFORCE whose baseline is the reward of the
/// policy's greedy response to the same prompt. Each step samples `group` responses per
/// prompt, and decodes greedily (`top_k: 1`) as many times, so that row `i` of the greedy
/// rollout is the greedy response of row `i`'s prompt (a batch has one size per generation:
/// the `group` greedy copies are identical; with the paper's `group = 1` there is one). The
/// token reward is the score at the last token minus a per-token KL penalty (k1),
/// `r_t = s·[t = last] − kl·(old_logp_t − ref_logp_t)`; the advantage is the reward-to-go minus
/// the greedy score `b_i` (`remax_advantage`), `A_t = Σ_{t' ≥ t} r_{t'} − b_i`:
///
/// `L = token_mean(−min(ρ·A, clip(ρ, 1 − clip, 1 + clip)·A) + entropy·logp·sg(logp))`
///
/// (one epoch on the whole batch is the paper's plain REINFORCE: `ρ = 1`). Defaults: one
/// sample per prompt (`group = 1`, the paper's); `kl = 0.001`, `clip = 0.2` (veRL's ReMax
/// example, KL in the reward); `entropy = 0`. Logs `reward` (the mean task score of the
/// samples), `greedy` (that of the greedy responses) and `kl` (the token mean).
pub pipeline remax(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 64,
  group = 1,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  kl = 0.001,
  entropy = 0.0,
  epochs = 1,
  minibatch = 64,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let greedy   = policy.generate(prompts, n: group, max_new: max_new, top_k: 1)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let baseline = reward(greedy.response, greedy.target, greedy.mask)
    let kl_t     = kl_k1(old_logp, ref_logp)
    let r        = kl_shaped_reward(score, kl_t, rollout.mask, rollout.last, beta: kl)
    let adv      = remax_advantage(r, baseline, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv, eps: clip) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    log {
      reward: mean(score),
      greedy: mean(baseline),
      kl: token_mean(kl_t, rollout.mask),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// PPO with a critic (Schulman et al. 2017; for language models Ouyang et al. 2022,
/// InstructGPT): the `critic` (a `ValueModel`) estimates each response position's value, and
/// the advantages are GAE's. The token reward is the score at the last response token minus a
/// per-token KL penalty to `reference` (k1, of the sampling policy),
/// `r_t = s·[t = last] − kl·(old_logp_t − ref_logp_t)` (`kl_shaped_reward`);
/// `A = gae(r, V_old, γ, λ)`, the returns `R = A + V_old`, and the policy uses `A` whitened
/// over the batch:
///
/// `L_π = token_mean(−min(ρ·Â, clip(ρ, 1 − clip, 1 + clip)·Â) + entropy·logp·sg(logp))`,
/// `L_V = token_mean(½·max((V − R)², (clip(V, V_old ± value_clip) − R)²))`.
///
/// Defaults as veRL's `ppo_trainer.yaml`: `kl = 0.001` (its `kl_ctrl.kl_coef`, the coefficient
/// of its KL-in-reward option, which it leaves off by default), `gamma = 1`, `lam = 1`,
/// `clip = 0.2`, `value_clip = 0.5`, one epoch for each model, one response per prompt
/// (`group = 1`); `entropy = 0`. Logs `reward` (the mean task score), `kl` (the token mean) and `value` (the
/// critic's mean value of the response tokens). Checkpoints `policy` and `critic`.
pub pipeline ppo(
  policy: CausalLM,
  reference: CausalLM,
  critic: ValueModel,
  data: Dataset,
  reward: Fn,
  steps = 500,
  prompts_per_step = 64,
  group = 1,
  max_new = 16,
  temperature = 1.0,
  clip = 0.2,
  value_clip = 0.5,
  kl = 0.001,
  gamma = 1.0,
  lam = 1.0,
  entropy = 0.0,
  epochs = 1,
  minibatch = 64,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let prompts  = data.sample(prompts_per_step)
    let rollout  = policy.generate(prompts, n: group, max_new: max_new, temperature: temperature)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let old_v    = critic.values(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let kl_t     = kl_k1(old_logp, ref_logp)
    let r        = kl_shaped_reward(score, kl_t, rollout.mask, rollout.last, beta: kl)
    let adv      = gae(r, old_v, rollout.mask, gamma: gamma, lam: lam)
    let ret      = adv + old_v
    let adv_w    = whiten(adv, rollout.mask)
    policy.update(rollout, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(
        ppo_clip(logp, old_logp, adv_w, eps: clip) + entropy * stop_grad(logp) * logp,
        rollout.mask,
      )
    }
    critic.update(rollout, epochs: epochs, minibatch: minibatch) { v ->
      token_mean(value_loss(v, old_v, ret, clip: value_clip), rollout.mask)
    }
    log {
      reward: mean(score),
      kl: token_mean(kl_t, rollout.mask),
      value: token_mean(old_v, rollout.mask),
      entropy: token_mean(0.0 - old_logp, rollout.mask),
    }
    every checkpoint_every steps { checkpoint policy, critic }
  }
}

/// DPO (Rafailov et al. 2023, "Direct Preference Optimization"), offline: each step draws
/// `prompts_per_step` preference pairs from `data` (`data.preferences(n)`: the task's answer,
/// chosen, and a wrong answer, rejected, in two rows sharing a `group`) and trains the policy
/// to rank them as the frozen `reference` does not. With `h = Σ_t m·(logp − ref_logp)` the
/// implicit reward of a response (its log-likelihood ratio, summed over its tokens):
///
/// `L = mean_pairs(−log σ(beta·(h_chosen − h_rejected)))` (`bradley_terry` of `beta·h`).
///
/// Defaults: `beta = 0.1` (the paper's and TRL's `DPOTrainer`'s). Each update takes the whole
/// batch as one minibatch, so a pair's rows are never split (E0707). Logs, before the step's
/// update: `loss`, `accuracy` (the fraction of pairs whose chosen response has the larger
/// implicit reward) and `margin` (the mean of `beta·(h_chosen − h_rejected)`).
pub pipeline dpo(
  policy: CausalLM,
  reference: CausalLM,
  data: Dataset,
  steps = 500,
  prompts_per_step = 32,
  beta = 0.1,
  epochs = 1,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let pairs    = data.preferences(prompts_per_step)
    let ref_logp = reference.logprobs(pairs)
    let old_h    = beta * seq_score(policy.logprobs(pairs) - ref_logp, pairs.mask)
    policy.update(pairs, epochs: epochs) { logp ->
      bradley_terry(beta * seq_score(logp - ref_logp, pairs.mask), pairs.group, pairs.chosen)
    }
    log {
      loss: bradley_terry(old_h, pairs.group, pairs.chosen),
      accuracy: pair_accuracy(old_h, pairs.group, pairs.chosen),
      margin: mean(pair_margin(old_h, pairs.group, pairs.chosen)),
    }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// Supervised fine-tuning: each step draws `prompts_per_step` demonstrations from `data`
/// (`data.demonstrations(n)`: each prompt followed by its answer and EOS, the mask on the
/// answer) and minimises the answer tokens' cross-entropy, averaged over every answer token of
/// the batch (TRL's `SFTTrainer`'s):
///
/// `L = token_mean(−logp)`.
///
/// Defaults: one epoch over each batch in minibatches of `minibatch` (the whole batch by
/// default). Logs `loss`, that of the batch before the step's update.
pub pipeline sft(
  policy: CausalLM,
  data: Dataset,
  steps = 500,
  prompts_per_step = 32,
  epochs = 1,
  minibatch = prompts_per_step,
  checkpoint_every = 100,
) {
  loop step in 0..steps {
    let demos = data.demonstrations(prompts_per_step)
    let logp0 = policy.logprobs(demos)
    policy.update(demos, epochs: epochs, minibatch: minibatch) { logp ->
      token_mean(0.0 - logp, demos.mask)
    }
    log { loss: token_mean(0.0 - logp0, demos.mask) }
    every checkpoint_every steps { checkpoint policy }
  }
}

/// The rows of `m` where `keep` holds, the others emptied: `m ∧ keep`.
fn rows(m: Mask[B, T], keep: Mask[B]) -> Mask[B, T] {
  m && keep
}
