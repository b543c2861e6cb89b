import std.algo { ppo_clip, token_mean }

/// The clipped PPO loss, averaged over the real tokens.
fn policy_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], mask: Mask[B, T]) -> f32 {
  token_mean(ppo_clip(logp, old, adv, eps: 0.2), mask)
}
