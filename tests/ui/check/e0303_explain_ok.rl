import std.algo { ppo_clip_range, token_mean }

/// PPO with DAPO's clip-higher: a wider range above 1 than below.
fn policy_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], mask: Mask[B, T]) -> f32 {
  token_mean(ppo_clip_range(logp, old, adv, eps_low: 0.2, eps_high: 0.28), mask)
}
