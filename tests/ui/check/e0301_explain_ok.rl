import std.algo { grpo_advantage, seq_score }

/// GRPO advantages of per-token rewards, summed to one score per sequence.
fn advantages(reward: f32[B, T], group: i32[B], mask: Mask[B, T]) -> f32[B, T] {
  grpo_advantage(seq_score(reward, mask), group, mask)
}
