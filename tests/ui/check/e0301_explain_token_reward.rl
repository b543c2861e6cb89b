import std.algo { grpo_advantage }

/// GRPO advantages of per-token rewards.
fn advantages(reward: f32[B, T], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  grpo_advantage(reward, group, mask)  //~ E0301
}
