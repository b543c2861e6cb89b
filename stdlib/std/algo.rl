//! `std.algo`: the per-token math of RLHF: masked statistics, advantage estimators, KL
//! estimators, policy and value losses, entropy and loss aggregation.
//!
//! Every function follows the conventions of the most widely used open-source RLHF trainer,
//! so that a recipe moved over gives the same numbers (see the design note RL_MATH.md).
//! Conventions that hold throughout:
//!
//! - `B` is the batch (one row per sampled response), `T` the padded response length,
//!   `V` the vocabulary; `m: Mask[B, T]` is the response mask (true = a real token).
//! - `x · m` in a formula is written `where(m, x, 0.0)` or a masked reduction, so padded
//!   positions never contribute, even when they hold inf or NaN.
//! - Estimators return token-level tensors `[B, T]` that are zero at padded positions unless
//!   the doc comment says otherwise (whitening, for one, moves padded positions off zero:
//!   compare results only where `m` is true).
//! - Losses are per token `[B, T]`; reduce them with one of the four aggregations at the end
//!   of this file (`token_mean` and friends) to get the scalar a `update` block returns.

// ---------------------------------------------------------------------------------------------
// Masked helpers

/// `Σ x·m`: the sum of `x` over the real tokens of the whole batch.
pub fn masked_sum(x: f32[B, T], m: Mask[B, T]) -> f32 {
  sum(x, mask: m)
}

/// `Σ x·m / (Σ m + 1e-8)`: the mean of `x` over the real tokens of the whole batch
/// (0 when the mask is empty).
pub fn masked_mean(x: f32[B, T], m: Mask[B, T]) -> f32 {
  sum(x, mask: m) / (count(m) + 1e-8)
}

/// The unbiased masked variance: `masked_mean((x − μ)², m) · Σm / (Σm − 1)` with
/// `μ = masked_mean(x, m)`.
/// Undefined when `Σm ≤ 1` (the reference raises an error; here the division gives inf or
/// NaN): call it only on a mask with at least two real tokens.
pub fn masked_var(x: f32[B, T], m: Mask[B, T]) -> f32 {
  let mu = masked_mean(x, m)
  let d  = x - mu
  let n  = count(m)
  masked_mean(d * d, m) * n / (n - 1.0)
}

/// Masked whitening: `(x − μ) · rsqrt(var + 1e-8)` with `μ = masked_mean(x, m)` and
/// `var = masked_var(x, m)` (unbiased). Every position is shifted and scaled, padded ones
/// included: they are not zero afterwards.
pub fn masked_whiten(x: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  (x - masked_mean(x, m)) * rsqrt(masked_var(x, m) + 1e-8)
}

/// The same as `masked_whiten(x, m)`, under the short name the examples use.
pub fn whiten(x: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  masked_whiten(x, m)
}

/// A per-sequence value repeated over the sequence's real tokens: `a_i · m_{i,t}`
/// (0 at padded positions).
pub fn per_token(a: f32[B], m: Mask[B, T]) -> f32[B, T] {
  where(m, a, 0.0)
}

/// The sequence score `s_i = Σ_t r_{i,t}·m_{i,t}` of token-level rewards.
pub fn seq_score(r: f32[B, T], m: Mask[B, T]) -> f32[B] {
  sum(r, over: T, mask: m)
}

// ---------------------------------------------------------------------------------------------
// Advantage estimators

/// Generalised advantage estimation, before whitening.
///
/// Reverse over `t = T−1 … 0`, from `next_v = 0`, `last = 0`:
/// `δ = r_t + γ·next_v − V_t`; `g = δ + γ·λ·last`;
/// `next_v = m_t·V_t + (1−m_t)·next_v`; `last = m_t·g + (1−m_t)·last`; `A_t = last`.
/// Padded positions carry the value of the next real token back unchanged, so a padded
/// position before the response's end does not break the recursion. The returns are
/// `A + V` (`gae_returns`); the policy uses `whiten(A, m)` (`gae_whitened`).
pub fn gae(r: f32[B, T], v: f32[B, T], m: Mask[B, T], gamma: f32, lam: f32) -> f32[B, T] {
  scan reverse over T with (next_v = 0.0, last = 0.0) { t ->
    let delta = r[t] + gamma * next_v - v[t]
    let g     = delta + gamma * lam * last
    next_v = where(m[t], v[t], next_v)
    last   = where(m[t], g, last)
    emit last
  }
}

/// The value targets of GAE: `R = A + V`, with `A = gae(r, v, m, gamma:, lam:)` before
/// whitening.
pub fn gae_returns(r: f32[B, T], v: f32[B, T], m: Mask[B, T], gamma: f32, lam: f32) -> f32[B, T] {
  gae(r, v, m, gamma: gamma, lam: lam) + v
}

/// GAE advantages as the policy loss uses them: `masked_whiten(gae(r, v, m, …), m)`.
pub fn gae_whitened(r: f32[B, T], v: f32[B, T], m: Mask[B, T], gamma: f32, lam: f32) -> f32[B, T] {
  masked_whiten(gae(r, v, m, gamma: gamma, lam: lam), m)
}

/// The GRPO advantage of each sequence: `A_i = (s_i − μ) / (σ + 1e-6)`, with `μ` the mean and
/// `σ` the unbiased standard deviation of the scores of the sequence's group (the `n` samples
/// of one prompt); a group of one has `μ = 0`, `σ = 1`.
pub fn grpo_seq_advantage(score: f32[B], group: i32[B]) -> f32[B] {
  let n     = group_count(by: group)
  let mu    = where(n > 1.0, group_mean(score, by: group), 0.0)
  let sigma = where(n > 1.0, group_std(score, by: group), 1.0)
  let a     = (score - mu) / (sigma + 1e-6)
  a
}

/// GRPO token advantages: `A_{i,t} = A_i · m_{i,t}` with `A_i = grpo_seq_advantage(score,
/// group)`: the score normalised by its group's mean and unbiased std (`+ 1e-6`); a group of
/// one keeps its score (`μ = 0`, `σ = 1`). `score` is one number per sequence (`seq_score`
/// turns token-level rewards into one).
pub fn grpo_advantage(score: f32[B], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  per_token(grpo_seq_advantage(score, group), mask)
}

/// The Dr. GRPO advantage of each sequence: `A_i = s_i − μ` (no division by the group's
/// std); a group of one has `μ = 0`.
pub fn drgrpo_seq_advantage(score: f32[B], group: i32[B]) -> f32[B] {
  let n = group_count(by: group)
  score - where(n > 1.0, group_mean(score, by: group), 0.0)
}

/// Dr. GRPO token advantages: `A_{i,t} = (s_i − μ) · m_{i,t}` with `μ` the group mean
/// (0 for a group of one). Pair it with `seq_mean_token_sum_norm` to also drop the length
/// normalisation, as Dr. GRPO does.
pub fn drgrpo_advantage(score: f32[B], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  per_token(drgrpo_seq_advantage(score, group), mask)
}

/// The RLOO (leave-one-out) advantage of each sequence: `A_i = (s_i·n − μ·n) / (n − 1)`,
/// the score minus the mean of the other `n − 1` scores of its group; a group of one keeps
/// its score.
pub fn rloo_seq_advantage(score: f32[B], group: i32[B]) -> f32[B] {
  let n  = group_count(by: group)
  let mu = group_mean(score, by: group)
  where(n > 1.0, (score * n - mu * n) / max(n - 1.0, 1.0), score)
}

/// RLOO token advantages: `rloo_seq_advantage(score, group) · m`.
pub fn rloo_advantage(score: f32[B], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  per_token(rloo_seq_advantage(score, group), mask)
}

/// The discounted returns of REINFORCE++, reverse over `T` from 0: `G_t = r_t + γ·m_{t+1}·G_{t+1}`
/// (the running sum is multiplied by the mask after each step, so it restarts from 0 across a
/// padded position). `G` at padded positions is meaningless: use it under the mask.
pub fn reinforce_pp_returns(r: f32[B, T], m: Mask[B, T], gamma: f32) -> f32[B, T] {
  scan reverse over T with (running = 0.0) { t ->
    let g = r[t] + gamma * running
    running = where(m[t], g, 0.0)
    emit g
  }
}

/// REINFORCE++ advantages: `A = masked_whiten(G, m) · m` with `G = reinforce_pp_returns(r, m,
/// gamma:)`.
pub fn reinforce_pp_advantage(r: f32[B, T], m: Mask[B, T], gamma: f32) -> f32[B, T] {
  where(m, masked_whiten(reinforce_pp_returns(r, m, gamma: gamma), m), 0.0)
}

/// REINFORCE++ with a group baseline: `a = (s_i − μ) · m` with `μ` the group mean of the
/// scores (0 for a group of one), then `A = masked_whiten(a, m) · m`.
pub fn reinforce_pp_baseline_advantage(score: f32[B], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  let a = per_token(drgrpo_seq_advantage(score, group), mask)
  where(mask, masked_whiten(a, mask), 0.0)
}

/// ReMax returns: `R_t = Σ_{t' ≥ t} r_{t'}·m_{t'}`, the reverse cumulative sum of the
/// masked token rewards.
pub fn remax_returns(r: f32[B, T], m: Mask[B, T]) -> f32[B, T] {
  scan reverse over T with (acc = 0.0) { t ->
    acc = acc + where(m[t], r[t], 0.0)
    emit acc
  }
}

/// ReMax advantages: `A = R − b_i·m` with `R = remax_returns(r, m)` and `b_i` the reward of
/// the greedy rollout of the same prompt (one number per sequence).
pub fn remax_advantage(r: f32[B, T], baseline: f32[B], m: Mask[B, T]) -> f32[B, T] {
  remax_returns(r, m) - per_token(baseline, m)
}

/// DAPO's soft overlong penalty, one number per sequence, added to the score:
/// `min(−(len − (max_len − buffer)) / buffer · factor, 0)` with `len = Σ_t m` the response
/// length: 0 up to `max_len − buffer` tokens, then falling linearly to `−factor` at
/// `max_len` (`max_len` is the generation budget `max_new`).
pub fn overlong_penalty(m: Mask[B, T], max_len: f32, buffer: f32, factor: f32 = 1.0) -> f32[B] {
  let exceed = count(m, over: T) - (max_len - buffer)
  min(-exceed / buffer * factor, 0.0)
}

/// DAPO's dynamic-sampling filter: true for the sequences whose group's scores are not all
/// equal (a group whose advantages are all zero trains nothing), and for groups of one
/// (kept, as the reference does).
pub fn informative_groups(score: f32[B], group: i32[B]) -> Mask[B] {
  group_std(score, by: group) > 0.0 || group_count(by: group) < 2.0
}

// ---------------------------------------------------------------------------------------------
// KL estimators, `Δ = logp − logp_ref`, per token

/// k1: `Δ = logp − logp_ref` (unbiased, can be negative).
pub fn kl_k1(logp: f32[B, T], ref_logp: f32[B, T]) -> f32[B, T] {
  logp - ref_logp
}

/// abs: `|Δ|`.
pub fn kl_abs(logp: f32[B, T], ref_logp: f32[B, T]) -> f32[B, T] {
  abs(logp - ref_logp)
}

/// k2: `½·Δ²` (the squared-error estimator).
pub fn kl_k2(logp: f32[B, T], ref_logp: f32[B, T]) -> f32[B, T] {
  let d = logp - ref_logp
  0.5 * d * d
}

/// k3, the low-variance estimator: `k = clamp(logp_ref − logp, −20, 20)`, value
/// `clamp(exp(k) − k − 1, −10, 10)` (non-negative before the clamp).
pub fn kl_k3(logp: f32[B, T], ref_logp: f32[B, T]) -> f32[B, T] {
  let k = clamp(ref_logp - logp, -20.0, 20.0)
  clamp(exp(k) - k - 1.0, -10.0, 10.0)
}

/// KL in the reward: `r = score_at_last_token − β·kl·m`. `score` is the sequence score,
/// placed on the last response token (`last`, the `Rollout` field); `kl` is a per-token
/// estimate such as `kl_k1(old_logp, ref_logp)`.
pub fn kl_shaped_reward(score: f32[B], kl: f32[B, T], mask: Mask[B, T], last: Mask[B, T], beta: f32) -> f32[B, T] {
  where(last, score, 0.0) - beta * where(mask, kl, 0.0)
}

/// The adaptive KL controller: `β ← β·(1 + clamp(kl/target − 1, −0.2, 0.2)·n_steps/horizon)`,
/// with `kl` the current mean KL, `n_steps` the steps since the last update of `β`.
pub fn adaptive_kl_beta(beta: f32, kl: f32, target: f32, n_steps: f32, horizon: f32) -> f32 {
  beta * (1.0 + clamp(kl / target - 1.0, -0.2, 0.2) * n_steps / horizon)
}

// ---------------------------------------------------------------------------------------------
// Policy loss (PPO with dual clip)

/// The clamped log importance ratio: `Δ = clamp(logp − old_logp, −20, 20)`.
pub fn log_ratio(logp: f32[B, T], old_logp: f32[B, T]) -> f32[B, T] {
  clamp(logp - old_logp, -20.0, 20.0)
}

/// PPO's clipped surrogate without the dual clip, per token:
/// `ρ = exp(Δ)`, `L1 = −A·ρ`, `L2 = −A·clamp(ρ, 1 − ε_low, 1 + ε_high)`, `L = max(L1, L2)`.
pub fn ppo_clip_plain(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2) -> f32[B, T] {
  let ratio = exp(log_ratio(logp, old_logp))
  max(-adv * ratio, -adv * clamp(ratio, 1.0 - eps_low, 1.0 + eps_high))
}

/// PPO with dual clip and separate clip ranges (`eps_high > eps_low` is DAPO's
/// "clip-higher"), per token:
/// `Δ = clamp(logp − old_logp, −20, 20)`, `ρ = exp(Δ)`, `L1 = −A·ρ`,
/// `L2 = −A·clamp(ρ, 1 − ε_low, 1 + ε_high)`, `Lc = max(L1, L2)`, `L3 = −A·c`,
/// `L = where(A < 0, min(L3, Lc), Lc)`. `c` must be greater than 1 (default 3).
pub fn ppo_clip_range(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2, c: f32 = 3.0) -> f32[B, T] {
  let lc = ppo_clip_plain(logp, old_logp, adv, eps_low: eps_low, eps_high: eps_high)
  where(adv < 0.0, min(-adv * c, lc), lc)
}

/// PPO's clipped policy loss per token, with the symmetric range `[1 − ε, 1 + ε]` and the
/// dual clip `c = 3` for negative advantages: `ppo_clip_range(…, eps_low: eps,
/// eps_high: eps, c: 3.0)`. Aggregate it with `token_mean` (or another aggregation).
pub fn ppo_clip(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], eps: f32 = 0.2) -> f32[B, T] {
  ppo_clip_range(logp, old_logp, adv, eps_low: eps, eps_high: eps, c: 3.0)
}

/// The fraction of real tokens where the clip is active: `masked_mean(L2 > L1, m)`.
pub fn ppo_clipfrac(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], m: Mask[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2) -> f32 {
  let ratio = exp(log_ratio(logp, old_logp))
  let l1    = -adv * ratio
  let l2    = -adv * clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
  masked_mean(f32(l2 > l1), m)
}

/// The fraction of real tokens where the dual clip is active:
/// `masked_mean((Lc > L3) && (A < 0), m)`.
pub fn ppo_clipfrac_lower(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], m: Mask[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2, c: f32 = 3.0) -> f32 {
  let lc = ppo_clip_plain(logp, old_logp, adv, eps_low: eps_low, eps_high: eps_high)
  masked_mean(f32(lc > -adv * c && adv < 0.0), m)
}

/// The approximate KL between the old and the current policy: `masked_mean(−Δ, m)` with
/// `Δ = clamp(logp − old_logp, −20, 20)`.
pub fn approx_kl(logp: f32[B, T], old_logp: f32[B, T], m: Mask[B, T]) -> f32 {
  masked_mean(-log_ratio(logp, old_logp), m)
}

/// GSPO's per-token loss. The sequence log-ratio `ℓ_i = Σ_t m·(logp − old_logp) / max(Σ_t m,
/// 1)`; per token the log-ratio `min(logp − sg(logp) + sg(ℓ_i), 10)` (its value is `ℓ_i`, its
/// gradient the token's), exponentiated to `ρ` and clipped as PPO without dual clip:
/// `max(−A·ρ, −A·clamp(ρ, 1 − ε_low, 1 + ε_high))`. Aggregate with `seq_mean_token_mean`
/// (`gspo_loss` does).
pub fn gspo_clip(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], m: Mask[B, T], eps_low: f32 = 3e-4, eps_high: f32 = 4e-4) -> f32[B, T] {
  let len   = max(count(m, over: T), 1.0)
  let seq   = sum(logp - old_logp, over: T, mask: m) / len
  let ratio = exp(min(logp - stop_grad(logp) + stop_grad(seq), 10.0))
  max(-adv * ratio, -adv * clamp(ratio, 1.0 - eps_low, 1.0 + eps_high))
}

/// GSPO's loss: `seq_mean_token_mean(gspo_clip(…), m)`.
pub fn gspo_loss(logp: f32[B, T], old_logp: f32[B, T], adv: f32[B, T], m: Mask[B, T], eps_low: f32 = 3e-4, eps_high: f32 = 4e-4) -> f32 {
  seq_mean_token_mean(gspo_clip(logp, old_logp, adv, m, eps_low: eps_low, eps_high: eps_high), m)
}

// ---------------------------------------------------------------------------------------------
// Off-policy corrections: the behaviour policy (the one that sampled the tokens, `behav_logp`)
// is not the policy the PPO ratio is taken against (`old_logp`, recomputed by the trainer, or
// `prox_logp`, a recent policy). The weights are data: `sg(·)`, no gradient through them.

/// The truncated importance-sampling (TIS) weight per token:
/// `w = sg(min(exp(old_logp − behav_logp), C))`, with `old_logp` the trainer's log-probs of
/// the sampled tokens (veRL's `old_log_prob`) and `behav_logp` the sampler's (veRL's
/// `rollout_log_probs`). Only the top is truncated; `w` is never negative, and no gradient
/// flows through it. `cap` is `C`, veRL's `tis_imp_ratio_cap` (Yao et al. 2025, "Your
/// efficient RL framework secretly brings you off-policy RL training"): 2 by default, the
/// value of their runs and of veRL's rollout-correction recipe (`rollout_is_threshold`);
/// veRL's config itself leaves TIS off (`-1`).
pub fn tis_weight(old_logp: f32[B, T], behav_logp: f32[B, T], cap: f32 = 2.0) -> f32[B, T] {
  stop_grad(min(exp(old_logp - behav_logp), cap))
}

/// PPO with truncated importance sampling, veRL's vanilla policy loss with
/// `tis_imp_ratio_cap` set, per token: `L = ppo_clip_range(logp, old_logp, adv, …) · w` with
/// `w = tis_weight(old_logp, behav_logp, cap:)` `= sg(min(exp(old_logp − behav_logp), C))`.
/// The weight multiplies the whole dual-clipped loss; the PPO ratio is `logp − old_logp` as
/// in `ppo_clip_range`. Defaults: `ε_low = ε_high = 0.2`, `c = 3`, `C = 2`.
/// With `behav_logp = old_logp` it is `ppo_clip_range`.
pub fn ppo_clip_tis(logp: f32[B, T], old_logp: f32[B, T], behav_logp: f32[B, T], adv: f32[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2, c: f32 = 3.0, cap: f32 = 2.0) -> f32[B, T] {
  let w = tis_weight(old_logp, behav_logp, cap: cap)
  ppo_clip_range(logp, old_logp, adv, eps_low: eps_low, eps_high: eps_high, c: c) * w
}

/// The behaviour weight of decoupled PPO per token, as AReaL filters it:
/// `w = exp(prox_logp − behav_logp)`, kept where `w ≤ cap` and 0 elsewhere (a token whose
/// weight exceeds the cap is dropped, not truncated: that is `tis_weight`), `sg(·)`.
/// `cap` is AReaL's `behav_imp_weight_cap`: 5 by default, the value of AReaL's example
/// configurations (AReaL's own default is no cap; pass a large `cap`, such as `1e30`).
pub fn decoupled_weight(prox_logp: f32[B, T], behav_logp: f32[B, T], cap: f32 = 5.0) -> f32[B, T] {
  let w = exp(prox_logp - behav_logp)
  stop_grad(where(w <= cap, w, 0.0))
}

/// The decoupled PPO objective (Hilton et al. 2022, "Batch size-invariance for policy
/// optimization"; AReaL, Fu et al. 2025), per token: the clip is taken around the proximal
/// policy `π_prox` (`prox_logp`, recomputed by the trainer, e.g. the policy before this
/// step's update), not the behaviour policy that sampled the tokens (`behav_logp`), and the
/// loss is weighted by the behaviour importance ratio `π_prox / π_behav`:
/// `L = ppo_clip_range(logp, prox_logp, adv, …) · w`, `w = decoupled_weight(prox_logp,
/// behav_logp, cap:)` `= sg(exp(prox_logp − behav_logp))` where it is at most `cap`, else 0.
/// A dropped token still counts in the aggregation's denominator, as in AReaL. Defaults:
/// `ε_low = ε_high = 0.2` (AReaL's `eps_clip`), `c = 3` (the dual clip of `ppo_clip`;
/// AReaL has none by default: a `c` above `e^20` never binds), `cap = 5`.
pub fn decoupled_ppo_clip(logp: f32[B, T], prox_logp: f32[B, T], behav_logp: f32[B, T], adv: f32[B, T], eps_low: f32 = 0.2, eps_high: f32 = 0.2, c: f32 = 3.0, cap: f32 = 5.0) -> f32[B, T] {
  let w = decoupled_weight(prox_logp, behav_logp, cap: cap)
  ppo_clip_range(logp, prox_logp, adv, eps_low: eps_low, eps_high: eps_high, c: c) * w
}

// ---------------------------------------------------------------------------------------------
// Value loss

/// The clipped value loss per token: `v̂ = clamp(v, v_old − c_v, v_old + c_v)`,
/// `½·max((v − R)², (v̂ − R)²)`. Aggregating it gives `½·agg(max(…))` (the aggregations are
/// linear). `clip` is `c_v` (0.5 by default).
pub fn value_loss(v: f32[B, T], old_v: f32[B, T], ret: f32[B, T], clip: f32 = 0.5) -> f32[B, T] {
  let v_clipped = max(min(v, old_v + clip), old_v - clip)
  let e1        = v - ret
  let e2        = v_clipped - ret
  0.5 * max(e1 * e1, e2 * e2)
}

/// The fraction of real tokens where the value clip is active:
/// `masked_mean((v̂ − R)² > (v − R)², m)`.
pub fn value_clipfrac(v: f32[B, T], old_v: f32[B, T], ret: f32[B, T], m: Mask[B, T], clip: f32 = 0.5) -> f32 {
  let v_clipped = max(min(v, old_v + clip), old_v - clip)
  let e1        = v - ret
  let e2        = v_clipped - ret
  masked_mean(f32(e2 * e2 > e1 * e1), m)
}

// ---------------------------------------------------------------------------------------------
// Entropy

/// The entropy of the next-token distribution at each position, from the logits `z` over
/// the vocabulary `V`: `H = logsumexp(z) − Σ_V softmax(z)·z`.
pub fn entropy(z: f32[B, T, V]) -> f32[B, T] {
  logsumexp(z, over: V) - sum(softmax(z, over: V) * z, over: V)
}

/// The actor loss with entropy bonus and KL penalty, all token-mean aggregated:
/// `token_mean(pg, m) − c_H·token_mean(H, m) + c_KL·token_mean(kl, m)`.
pub fn actor_loss(pg: f32[B, T], ent: f32[B, T], kl: f32[B, T], m: Mask[B, T], ent_coef: f32 = 0.0, kl_coef: f32 = 0.0) -> f32 {
  token_mean(pg, m) - ent_coef * token_mean(ent, m) + kl_coef * token_mean(kl, m)
}

// ---------------------------------------------------------------------------------------------
// Loss aggregation: a per-token loss `[B, T]` to the scalar an `update` block returns

/// token-mean: `Σ m·L / (Σ m + 1e-8)`, every real token of the batch weighted the same.
/// Under data parallelism the runtime divides by the global token count, not a mean of
/// per-rank means.
pub fn token_mean(loss: f32[B, T], m: Mask[B, T]) -> f32 {
  masked_mean(loss, m)
}

/// seq-mean-token-sum: the mean over non-empty sequences of `Σ_t m·L`
/// (`+ 1e-8` in the count of sequences).
pub fn seq_mean_token_sum(loss: f32[B, T], m: Mask[B, T]) -> f32 {
  let seq      = sum(loss, over: T, mask: m)
  let nonempty = count(m, over: T) > 0.0
  sum(seq, mask: nonempty) / (count(nonempty) + 1e-8)
}

/// seq-mean-token-mean: the mean over non-empty sequences of `Σ_t m·L / (Σ_t m + 1e-8)`
/// (`+ 1e-8` in the count of sequences).
pub fn seq_mean_token_mean(loss: f32[B, T], m: Mask[B, T]) -> f32 {
  let len      = count(m, over: T)
  let seq      = sum(loss, over: T, mask: m) / (len + 1e-8)
  let nonempty = len > 0.0
  sum(seq, mask: nonempty) / (count(nonempty) + 1e-8)
}

/// seq-mean-token-sum-norm: `Σ m·L / T`, with `T` the padded response length (the same
/// constant for every sequence, as Dr. GRPO prescribes); not divided by the batch size.
pub fn seq_mean_token_sum_norm(loss: f32[B, T], m: Mask[B, T]) -> f32 {
  // `count(m || !m, over: T)` is `T` in every row: the padded length, as an f32.
  sum(loss, mask: m) / mean(count(m || !m, over: T))
}

// ---------------------------------------------------------------------------------------------
// Reward model on preference pairs (`ds.preferences(n)`: the two rows of a pair share a
// `group`, `chosen` marks the preferred one)

/// The margin `s_chosen − s_rejected` of each row's pair, on both of its rows.
pub fn pair_margin(s: f32[B], pair: i32[B], chosen: Mask[B]) -> f32[B] {
  group_sum(where(chosen, s, 0.0 - s), by: pair)
}

/// Bradley–Terry loss: the mean over pairs of `−log σ(s_chosen − s_rejected)`, computed as
/// the softplus `max(−d, 0) + log(1 + exp(−|d|))` so that no margin overflows.
pub fn bradley_terry(s: f32[B], pair: i32[B], chosen: Mask[B]) -> f32 {
  let d = pair_margin(s, pair, chosen)
  mean(max(0.0 - d, 0.0) + log(1.0 + exp(0.0 - abs(d))))
}

/// The fraction of pairs whose chosen row scores strictly above the rejected one (a tie
/// counts as wrong).
pub fn pair_accuracy(s: f32[B], pair: i32[B], chosen: Mask[B]) -> f32 {
  mean(f32(pair_margin(s, pair, chosen) > 0.0))
}
