import std.algo { ppo_clip, token_mean }

/// PPO with DAPO's clip-higher: a wider range above 1 than below.
fn policy_loss(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], mask: Mask[B, T]) -> f32 {
  token_mean(ppo_clip(logp, old, adv, 0.2, 0.28), mask)  //~ E0303
}
